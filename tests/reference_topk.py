"""Independent pure-Python / pure-torch references for the decode top-k selector and the page-16
sparse block table (docs/KERNELS.md §2, §3, §4, §6, §12.6, §12.10).

Written from the spec only; shares no code with generated/. Slow but obviously correct: use small
shapes (or a GPU for the dense reference).
"""
from __future__ import annotations

import math

import torch

BLOCK = 128  # tokens per sparse block
PAGES = 8  # page-16 ids per sparse block
INIT_SCORE = 1e30
LOCAL_SCORE = 1e29
# NaN ranks as the fp32 value nearest to -1e30 (the kernels compare fp32 scores).
NAN_SCORE_F32 = torch.tensor(-1e30, dtype=torch.float32).item()


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def row_geometry(seq_lens, decode_query_len: int, row: int):
    """(req, query_pos, kv_len, nb) of a flattened decode row (§2)."""
    req = row // decode_query_len
    query_pos = int(seq_lens[req]) - decode_query_len + row % decode_query_len
    kv_len = max(query_pos + 1, 0)
    return req, query_pos, kv_len, cdiv(kv_len, BLOCK)


def _clean(value: float) -> float:
    if math.isnan(value):
        return NAN_SCORE_F32
    if value == 0.0:
        return 0.0  # folds -0.0
    return value


def row_topk(values, nb: int, topk: int) -> list[int]:
    """§12.6 total order: blocks b < nb sorted by (score desc, id asc); first min(topk, nb) ids,
    then -1. ``values`` are the row's fp32 scores as Python floats."""
    order = sorted(range(nb), key=lambda b: (-_clean(float(values[b])), b))
    ids = order[:topk]
    return ids + [-1] * (topk - len(ids))


def reference_topk(scores: torch.Tensor, seq_lens, decode_query_len: int, topk: int) -> torch.Tensor:
    """[H, total_q, topk] int32 reference ids for a score tensor [H, total_q, S]."""
    H, total_q = scores.shape[0], scores.shape[1]
    cpu = scores.detach().float().cpu()
    lens = [int(x) for x in seq_lens.cpu()]
    out = torch.empty((H, total_q, topk), dtype=torch.int32)
    for row in range(total_q):
        nb = row_geometry(lens, decode_query_len, row)[3]
        for h in range(H):
            out[h, row] = torch.tensor(row_topk(cpu[h, row, :nb].tolist(), nb, topk))
    return out


def sparse_table_row(ids, attn_row, abs_pos: int, topk: int, stride: int):
    """§6 row procedure, literally. Returns (row list of topk*8 ints, ctx)."""
    causal_len = max(abs_pos + 1, 0)
    self_blk = abs_pos // BLOCK
    full, tail = [], None
    for t in range(topk):
        s = int(ids[t])
        if causal_len > 0 and 0 <= s <= self_blk:
            if s < self_blk:
                full.append(s)
            else:
                tail = s
    order = full + ([tail] if tail is not None else [])
    row = [0] * (topk * PAGES)
    for k, b in enumerate(order):
        for j in range(PAGES):
            row[PAGES * k + j] = int(attn_row[b]) * stride + j
    if tail is not None:
        ctx = len(full) * BLOCK + (causal_len - self_blk * BLOCK)
    else:
        ctx = min(len(order) * BLOCK, causal_len)
    return row, ctx


def reference_sparse_table(topk_idx: torch.Tensor, attention_block_table: torch.Tensor, seq_lens,
                           decode_query_len: int, stride: int, capacity_blocks: int | None = None):
    """(table [total_q, topk*8], ctx [total_q]) int32 from topk_idx [1, total_q, topk].

    Requests are clamped to the attention table's width W: seq_len min(seq_len, W·128), the
    standalone builder's rule (docs/KERNELS.md §13.5). ``capacity_blocks`` (index_decode's
    emission, §13.2): also to max_block·128, max_block = cdiv(max_seq_len, 128)."""
    ids_all = topk_idx[0].cpu().tolist()
    attn = attention_block_table.cpu()
    width = attn.shape[1] if capacity_blocks is None else min(attn.shape[1], capacity_blocks)
    lens = [min(int(x), width * BLOCK) for x in seq_lens.cpu()]
    total_q, topk = len(ids_all), topk_idx.shape[2]
    table = torch.empty((total_q, topk * PAGES), dtype=torch.int32)
    ctx = torch.empty((total_q,), dtype=torch.int32)
    for row in range(total_q):
        req, query_pos, _, _ = row_geometry(lens, decode_query_len, row)
        r, c = sparse_table_row(ids_all[row], attn[req].tolist(), query_pos, topk, stride)
        table[row] = torch.tensor(r, dtype=torch.int32)
        ctx[row] = c
    return table, ctx


def dense_scores(idx_q, index_kv_cache, block_table, seq_lens, decode_query_len: int,
                 max_block: int, init_blocks: int, local_blocks: int) -> torch.Tensor:
    """Dense fp32 block scores [H, total_q, max_block] with forcing; -inf where b >= nb_q.

    Full q.k matrix per request (torch matmul in fp32), causal mask key_pos <= query_pos,
    per-block max skipping NaN products (NaN only where all 128 keys are visible and NaN, §3),
    then §3 forcing (local 1e29 over init 1e30 over raw) for b < nb_q. A seq_len past the
    capacity max_block·128 counts as the capacity (§13.2).
    """
    total_q, H, _ = idx_q.shape
    device = idx_q.device
    out = torch.full((H, total_q, max_block), float("-inf"), dtype=torch.float32, device=device)
    lens = [min(int(x), max_block * BLOCK) for x in seq_lens.cpu()]
    for req, seq_len in enumerate(lens):
        if seq_len <= 0:
            continue
        nblk = cdiv(seq_len, BLOCK)
        pages = block_table[req, :nblk].long()
        keys = index_kv_cache[pages].float().reshape(nblk * BLOCK, -1)  # [tokens, D]
        rows = list(range(req * decode_query_len, (req + 1) * decode_query_len))
        q = idx_q[rows].float()  # [Q, H, D]
        logits = torch.einsum("qhd,td->hqt", q, keys)  # [H, Q, tokens]
        pos = torch.arange(nblk * BLOCK, device=device)
        for i, row in enumerate(rows):
            _, query_pos, kv_len, nb = row_geometry(lens, decode_query_len, row)
            if nb == 0:
                continue
            row_logits = logits[:, i]  # [H, tokens]
            visible = (pos <= query_pos)[None, :]
            is_nan = torch.isnan(row_logits)
            blk = torch.where(visible & ~is_nan, row_logits, float("-inf"))
            blk = blk.reshape(H, nblk, BLOCK).amax(dim=2)
            all_nan = (visible & is_nan).reshape(H, nblk, BLOCK).all(dim=2)
            blk = torch.where(all_nan, float("nan"), blk)[:, :nb]
            ids = torch.arange(nb, device=device)
            blk = torch.where(ids < init_blocks, torch.full_like(blk, INIT_SCORE), blk)
            blk = torch.where(ids >= max(0, nb - local_blocks), torch.full_like(blk, LOCAL_SCORE),
                              blk)
            out[:, row, :nb] = blk
    return out


def assert_topk_sets_match(got: torch.Tensor, ref_scores: torch.Tensor, seq_lens,
                           decode_query_len: int, topk: int, tol: float = 0.0):
    """§12.10 unordered set equality against dense reference scores [H, total_q, max_block].

    Row r must select exactly min(topk, nb) distinct ids in [0, nb) followed by -1 padding, and
    the selected set must equal torch.topk's set, except that swaps between blocks whose reference
    scores equal the k-th best score, or lie within ``tol`` (relative, at least 1 absolute) of a
    finite, unforced k-th best score, are accepted (summation-order noise). Where the k-th best
    is forced (≥ LOCAL_SCORE) or not finite, only exact ties may swap.
    """
    got = got.cpu()
    ref_scores = ref_scores.cpu()
    lens = [int(x) for x in seq_lens.cpu()]
    H, total_q = got.shape[0], got.shape[1]
    for row in range(total_q):
        nb = row_geometry(lens, decode_query_len, row)[3]
        k = min(topk, nb)
        for h in range(H):
            ids = got[h, row].tolist()
            assert all(i == -1 for i in ids[k:]), (h, row, ids)
            sel = ids[:k]
            assert len(set(sel)) == k and all(0 <= i < nb for i in sel), (h, row, ids, nb)
            if k == 0:
                continue
            vals = ref_scores[h, row, :nb]
            vals = torch.where(vals.isnan(), NAN_SCORE_F32, vals)  # (§4.1: NaN ranks low)
            ref = set(torch.topk(vals, k).indices.tolist())
            if set(sel) == ref:
                continue
            kth = torch.topk(vals, k).values[-1].item()
            noisy = math.isfinite(kth) and abs(kth) < LOCAL_SCORE
            for i in set(sel) ^ ref:
                v = vals[i].item()
                assert v == kth or (noisy and abs(v - kth) <= tol * max(1.0, abs(kth))), \
                    (h, row, sorted(sel), sorted(ref), i, v, kth)
