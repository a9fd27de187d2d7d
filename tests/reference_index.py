"""Pure-torch / pure-Python references for the decode index scorers (docs/KERNELS.md §2, §3).

Independent of Triton and of generated/: written straight from the spec text.
"""
from __future__ import annotations

import torch

BLOCK = 128
INIT_SCORE = 1e30
LOCAL_SCORE = 1e29


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def score_columns(max_seq_len: int) -> int:
    max_block = _cdiv(max(int(max_seq_len), 0), BLOCK)
    return _cdiv(max_block, 16) * 16


def ref_decode_scores(idx_q, cache, block_table, seq_lens, init_blocks, local_blocks, Q,
                      max_seq_len, *, device="cpu", return_written=False):
    """Expected score tensor [H, total_q, S] (fp32, on ``device``) with NaN where nothing may be
    written (and, with ``return_written``, the bool mask of the written region as well: a
    written score may itself be NaN, see below).

    Value = fp32 block-max over causally visible keys of q·k: the operands are upcast (bf16 → fp64 is
    exact, so every product is exact, as it is in fp32), the D products are summed in fp64 and the sum
    is rounded once to fp32; -inf if no key of the block is visible. The maximum skips NaN products
    and counts masked keys as -inf (docs/KERNELS.md §3): a block whose visible products are all NaN
    is NaN where the row sees all 128 keys and -inf where it sees part of them (or its page is
    outside the cache). Forcing 1e29 (local) over 1e30 (init) over raw, only for b < nb_q(row).
    Written region: every row of a request, b < nb_req.
    Out-of-range inputs (§13): a seq_len above the capacity cdiv(max_seq_len, 128)·128 counts as
    the capacity, a negative one as 0; a block whose page id is outside [0, num_pages) has no
    visible key.
    ``device`` only selects where the fp64 arithmetic runs (a GPU makes 128k-token cases fast).
    """
    q = idx_q.detach().to(device)
    k_all = cache.detach().to(device)
    bt = block_table.detach().to(device).long()
    sl = [int(x) for x in seq_lens.detach().cpu().tolist()]
    total_q, H, D = q.shape
    R = len(sl)
    assert total_q == R * Q
    S = score_columns(max_seq_len)
    capacity = _cdiv(max(int(max_seq_len), 0), BLOCK) * BLOCK
    num_pages = k_all.shape[0]
    out = torch.full((H, total_q, S), float("nan"), dtype=torch.float32, device=device)
    written = torch.zeros((H, total_q, S), dtype=torch.bool, device=device)
    neg_inf = torch.tensor(float("-inf"), dtype=torch.float32, device=device)
    nan = torch.tensor(float("nan"), dtype=torch.float32, device=device)
    local_val = torch.tensor(LOCAL_SCORE, dtype=torch.float32, device=device)
    init_val = torch.tensor(INIT_SCORE, dtype=torch.float32, device=device)
    for r in range(R):
        seq_len = min(sl[r], capacity)
        nb_req = _cdiv(max(seq_len, 0), BLOCK)
        if nb_req == 0:
            continue
        assert nb_req <= S, "seq_len exceeds max_seq_len"
        T = nb_req * BLOCK
        pages = bt[r, :nb_req]
        page_ok = (pages >= 0) & (pages < num_pages)
        keys = k_all[torch.where(page_ok, pages, 0)].to(torch.float64).reshape(T, D)  # [T, D]
        rows = torch.arange(r * Q, (r + 1) * Q, device=device)
        qv = q[rows].to(torch.float64).reshape(Q * H, D)  # [Q*H, D], (q_off, head) order
        dots = (qv @ keys.T).to(torch.float32).reshape(Q, H, T)
        q_off = torch.arange(Q, device=device)
        kv_len = (seq_len - Q + q_off + 1).clamp_min(0)  # [Q]
        nb_q = (kv_len + BLOCK - 1) // BLOCK
        pos = torch.arange(T, device=device)
        token_ok = page_ok.repeat_interleave(BLOCK)
        visible_tok = (pos[None, :] < kv_len[:, None]) & token_ok[None, :]
        vis = visible_tok[:, None, :]  # [Q, 1, T]
        is_nan = torch.isnan(dots)
        # the max skips NaN products; masked keys are -inf
        raw = torch.where(vis & ~is_nan, dots, neg_inf).reshape(Q, H, nb_req, BLOCK).amax(dim=-1)
        # every one of the block's 128 keys visible and NaN: the max of NaN alone is NaN
        all_nan = (vis & is_nan).reshape(Q, H, nb_req, BLOCK).all(dim=-1)
        raw = torch.where(all_nan, nan, raw)  # [Q, H, nb_req]
        b = torch.arange(nb_req, device=device)
        visible = b[None, :] < nb_q[:, None]  # [Q, nb_req]
        local = visible & (b[None, :] >= (nb_q[:, None] - local_blocks).clamp_min(0))
        init = visible & (b[None, :] < init_blocks)
        val = torch.where(init[:, None, :], init_val, raw)
        val = torch.where(local[:, None, :], local_val, val)
        out[:, r * Q:(r + 1) * Q, :nb_req] = val.permute(1, 0, 2)
        written[:, r * Q:(r + 1) * Q, :nb_req] = True
    return (out, written) if return_written else out


def ref_balanced_map(seq_lens_list, budget):
    """§3.2 work map in pure Python from per-request seq_lens.

    Returns (width, assignments) where assignments[pid] = (req, start, end) for a program that owns
    blocks [start, end) of request req, or None for a program that owns nothing; the list has
    budget + R - 1 entries (the launch grid). Raises AssertionError if a request would need a
    program id outside that grid (the kernel would silently lose those blocks).
    """
    R = len(seq_lens_list)
    grid = budget + R - 1
    blocks = [_cdiv(max(int(s), 0), BLOCK) for s in seq_lens_list]
    total = sum(blocks)
    width = max(1, _cdiv(total, budget))
    assignments = [None] * grid
    off = 0
    for r, nb in enumerate(blocks):
        progs = _cdiv(nb, width)
        for j in range(progs):
            pid = off + j
            assert pid < grid, f"request {r} needs program {pid} >= grid {grid}"
            assignments[pid] = (r, j * width, min((j + 1) * width, nb))
        off += progs
    return width, assignments


def blocks_for_seq_len(seq_len: int) -> int:
    return _cdiv(max(int(seq_len), 0), BLOCK)


def seq_len_for_blocks(nb: int) -> int:
    """A seq_len whose request has exactly nb blocks (used by map tests)."""
    return nb * BLOCK


