"""Independent pure-torch reference for the prefill indexer (docs/KERNELS.md §7, §13).

Written from the contract only; shares no code with generated/. Scores in float64 (the exact
value of bf16/fp16/fp8 products and their sums, to within float64 rounding), selection by the
§4.1 total order on the fp32-rounded scores (reference_topk.row_topk).

Rows (§7, §13 rules 8 and 10): row x is request r's, r = the number of requests with
cu[r + 1] ≤ x, only where cu[r] ≤ x < cu[r + 1]; its token is j = x − cu[r] and its position
p = prefix_lens[r] + j (Python integers: no int32 wrap, so a position past 2³¹ − 2 is simply
past the capacity, as its saturated value is). With ``max_query_len`` a row is also left to no
request where j ≥ min(max_query_len, T).

Blocks: the capacity is cdiv(max_seq_len, 128) blocks. Row x sees blocks
b < nb = min(p div 128 + 1, capacity) (none where p < 0); key k is visible when k ≤ p,
k < seq_lens[r] and its block's page id lies in [0, num_pages). A visible block's score is the
max of q·k over its visible keys, skipping NaN products, with masked keys as −inf (§3): −inf
where no key is visible, NaN only where all 128 keys are visible and every product is NaN.
"""
from __future__ import annotations

from collections import defaultdict

import torch

from reference_topk import BLOCK, INIT_SCORE, LOCAL_SCORE, cdiv, row_topk

MAX_SELECTABLE_BLOCKS = 65534  # §4.1: block ids ≤ 65533 fit the 16-bit tie field


def row_owners(cu_seqlens_q, num_rows, max_query_len=None):
    """{row x: (request r, token j)} for the rows of [0, num_rows) that belong to a request
    (§13 rule 10; with ``max_query_len``, also j < min(max_query_len, num_rows))."""
    cu = [int(x) for x in cu_seqlens_q.cpu()]
    R = len(cu) - 1
    limit = None if max_query_len is None else min(int(max_query_len), num_rows)
    owners = {}
    for x in range(num_rows):
        r = sum(1 for i in range(R) if cu[i + 1] <= x)
        if r < R and cu[r] <= x < cu[r + 1] and (limit is None or x - cu[r] < limit):
            owners[x] = (r, x - cu[r])
    return owners


def visible_blocks(p: int, capacity: int) -> int:
    """nb(p) of §7 held to the capacity (0 for a negative position)."""
    return max(0, min(p // BLOCK + 1, capacity))


def ref_prefill_scores(idx_q, index_kv_cache, block_table, cu_seqlens_q, seq_lens, prefix_lens,
                       max_seq_len, rows=None, absolute=False, max_query_len=None,
                       return_written=False):
    """float64 scores [H, T, cdiv(max_seq_len, 128)]; NaN where §7 leaves them unwritten
    (b ≥ nb, rows of no request). ``rows``: only these rows (others NaN). ``absolute``: the
    block max of Σ|q·k| instead (the scale of the allowed error). ``return_written``: also the
    bool mask of the written entries (a written score may itself be NaN)."""
    T, H, D = idx_q.shape
    capacity = cdiv(max(int(max_seq_len), 0), BLOCK)
    dev = idx_q.device
    out = torch.full((H, T, capacity), float("nan"), dtype=torch.float64, device=dev)
    written = torch.zeros((H, T, capacity), dtype=torch.bool, device=dev)
    q_all = idx_q.double()
    if absolute:
        q_all = q_all.abs()
    num_pages = index_kv_cache.shape[0]
    pre = [int(x) for x in prefix_lens.cpu()]
    sl = [int(x) for x in seq_lens.cpu()]
    wanted = None if rows is None else set(int(x) for x in rows)
    by_request = defaultdict(list)
    for x, (r, j) in row_owners(cu_seqlens_q, T, max_query_len).items():
        if wanted is None or x in wanted:
            by_request[r].append((x, j))
    neg_inf = torch.tensor(float("-inf"), dtype=torch.float64, device=dev)
    nan = torch.tensor(float("nan"), dtype=torch.float64, device=dev)
    for r, items in by_request.items():
        n_keys = min(max(sl[r], 0), capacity * BLOCK)  # keys below seq_len and the capacity
        nbk = cdiv(n_keys, BLOCK)  # blocks holding any of them
        pages = block_table[r, :nbk].long().to(dev)
        page_ok = (pages >= 0) & (pages < num_pages)
        keys = index_kv_cache[torch.where(page_ok, pages, 0).to(index_kv_cache.device)]
        keys = keys.double().to(dev).reshape(nbk * BLOCK, D)
        if absolute:
            keys = keys.abs()
        k = torch.arange(nbk * BLOCK, device=dev).view(nbk, BLOCK)
        for i0 in range(0, len(items), 256):
            chunk = items[i0:i0 + 256]
            xs = torch.tensor([x for x, _ in chunk], device=dev)
            p = torch.tensor([pre[r] + j for _, j in chunk], dtype=torch.int64, device=dev)
            q = q_all[xs]  # [n, H, D]
            dots = torch.einsum("nhd,td->hnt", q, keys).reshape(H, len(chunk), nbk, BLOCK)
            vis = ((k[None] <= p[:, None, None]) & (k[None] < sl[r])
                   & page_ok[None, :, None])[None]  # [1, n, nbk, 128]
            is_nan = torch.isnan(dots)
            blockmax = torch.where(vis & ~is_nan, dots, neg_inf).amax(dim=3)  # [H, n, nbk]
            blockmax = torch.where((vis & is_nan).all(dim=3), nan, blockmax)
            full = torch.full((H, len(chunk), capacity), float("-inf"), dtype=torch.float64,
                              device=dev)
            full[:, :, :nbk] = blockmax
            nb = torch.tensor([visible_blocks(pre[r] + j, capacity) for _, j in chunk],
                              device=dev)
            seen = (torch.arange(capacity, device=dev)[None, :] < nb[:, None])[None]
            out[:, xs, :] = torch.where(seen, full, nan)
            written[:, xs, :] = seen.expand(H, -1, -1)
    return (out, written) if return_written else out


def ref_prefill_topk(scores, cu_seqlens_q, prefix_lens, topk, init_blocks, local_blocks,
                     rows=None, capacity=None, max_query_len=None):
    """[H, T, topk] int32 ids from scores [H, T, ≥nb] (fp32-rounded before ordering); rows of no
    request (or not in ``rows``) are -2 (not compared).

    A row ranks blocks b < nb = min(p div 128 + 1, limit) (0 where p < 0), init / local forcing
    on that nb. ``capacity`` given (``index_prefill``, both of its paths): limit = the capacity
    cdiv(max_seq_len, 128). Without it (the standalone ``index_prefill_topk``, §7): limit = the
    score tensor's columns and 65534 (block ids ≤ 65533, §4.1)."""
    H, T, S = scores.shape
    if capacity is None:
        limit = min(S, MAX_SELECTABLE_BLOCKS)
    else:
        assert capacity <= S, "scores narrower than the capacity"
        limit = capacity
    cpu = scores.float().cpu()
    out = torch.full((H, T, topk), -2, dtype=torch.int32)
    wanted = None if rows is None else set(int(x) for x in rows)
    pre = [int(x) for x in prefix_lens.cpu()]
    for row, (r, j) in row_owners(cu_seqlens_q, T, max_query_len).items():
        if wanted is not None and row not in wanted:
            continue
        nb = max(0, min((pre[r] + j) // BLOCK + 1, limit))
        for h in range(H):
            vals = cpu[h, row, :nb].tolist()
            for b in range(nb):
                if b >= max(nb - local_blocks, 0):
                    vals[b] = LOCAL_SCORE
                elif b < init_blocks:
                    vals[b] = INIT_SCORE
            out[h, row] = torch.tensor(row_topk(vals, nb, topk))
    return out


def kth_gap(scores, nb, topk):
    """Relative gap between the topk-th and (topk+1)-th best of ``scores[:nb]`` (inf if none)."""
    if nb <= topk:
        return float("inf")
    v = sorted((float(x) for x in scores[:nb]), reverse=True)
    a, b = v[topk - 1], v[topk]
    return abs(a - b) / max(abs(a), abs(b), 1e-30)
