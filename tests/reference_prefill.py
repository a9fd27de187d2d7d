"""Independent pure-torch reference for the prefill indexer (docs/KERNELS.md §7).

Written from the contract only; shares no code with generated/. Scores in float64 (the exact
value of bf16/fp16/fp8 products and their sums, to within float64 rounding), selection by the
§4.1 total order on the fp32-rounded scores (reference_topk.row_topk).
"""
from __future__ import annotations

import torch

from reference_topk import BLOCK, INIT_SCORE, LOCAL_SCORE, cdiv, row_topk


def requests(cu_seqlens_q, prefix_lens, seq_lens):
    """[(r, first row, q_len, prefix, seq_len)] from the length tensors (as Python ints)."""
    cu = [int(x) for x in cu_seqlens_q.cpu()]
    pre = [int(x) for x in prefix_lens.cpu()]
    sl = [int(x) for x in seq_lens.cpu()]
    return [(r, cu[r], cu[r + 1] - cu[r], pre[r], sl[r]) for r in range(len(pre))]


def request_keys(index_kv_cache, block_table, r, seq_len):
    """[seq_len, D] float64 keys of request r, gathered page by page."""
    D = index_kv_cache.shape[2]
    nb = cdiv(seq_len, BLOCK)
    pages = block_table[r, :nb].long()
    keys = index_kv_cache[pages].double().reshape(nb * BLOCK, D)
    return keys[:seq_len]


def ref_prefill_scores(idx_q, index_kv_cache, block_table, cu_seqlens_q, seq_lens, prefix_lens,
                       max_seq_len, rows=None, absolute=False):
    """float64 scores [H, T, cdiv(max_seq_len, 128)]; NaN where §7 leaves them unspecified
    (b ≥ nb(p), rows of no request). ``rows``: only these rows (others NaN). ``absolute``:
    the block max of Σ|q·k| instead (the scale of the allowed error)."""
    T, H, D = idx_q.shape
    S = cdiv(max_seq_len, BLOCK)
    out = torch.full((H, T, S), float("nan"), dtype=torch.float64, device=idx_q.device)
    q_all = idx_q.double()
    cache = index_kv_cache
    if absolute:
        q_all, cache = q_all.abs(), cache.double().abs()
    wanted = None if rows is None else set(int(x) for x in rows)
    for r, first, q_len, prefix, seq_len in requests(cu_seqlens_q, prefix_lens, seq_lens):
        js = [j for j in range(q_len) if wanted is None or first + j in wanted]
        if not js:
            continue
        keys = request_keys(cache, block_table, r, seq_len)  # [seq_len, D]
        nb_max = cdiv(seq_len, BLOCK)
        pad = torch.full((nb_max * BLOCK - seq_len, D), 0.0, dtype=torch.float64,
                         device=keys.device)
        keys = torch.cat([keys, pad]).view(nb_max, BLOCK, D)
        for j0 in range(0, len(js), 256):
            chunk = js[j0:j0 + 256]
            j = torch.tensor(chunk, device=idx_q.device)
            q = q_all[first + j]  # [n, H, D]
            dots = torch.einsum("nhd,btd->hnbt", q, keys)  # [H, n, nb_max, 128]
            pos = (prefix + j)[None, :, None, None]
            k = (torch.arange(nb_max, device=j.device)[:, None] * BLOCK
                 + torch.arange(BLOCK, device=j.device)[None, :])[None, None]
            dots = dots.masked_fill((k > pos) | (k >= seq_len), float("-inf"))
            blockmax = dots.amax(dim=3)  # [H, n, nb_max]
            nb = (prefix + j) // BLOCK + 1
            b = torch.arange(nb_max, device=j.device)[None, :]
            blockmax = blockmax.masked_fill((b >= nb[:, None])[None], float("nan"))
            w = min(nb_max, S)
            out[:, first + j, :w] = blockmax[:, :, :w]
    return out


def ref_prefill_topk(scores, cu_seqlens_q, prefix_lens, topk, init_blocks, local_blocks,
                     rows=None):
    """[H, T, topk] int32 ids from scores [H, T, ≥nb] (fp32-rounded before ordering); rows of no
    request (or not in ``rows``) are -2 (not compared)."""
    H, T, S = scores.shape
    cpu = scores.float().cpu()
    out = torch.full((H, T, topk), -2, dtype=torch.int32)
    wanted = None if rows is None else set(int(x) for x in rows)
    cu = [int(x) for x in cu_seqlens_q.cpu()]
    pre = [int(x) for x in prefix_lens.cpu()]
    for r in range(len(pre)):
        for row in range(cu[r], cu[r + 1]):
            if wanted is not None and row not in wanted:
                continue
            p = pre[r] + row - cu[r]
            nb = min(p // BLOCK + 1, S)
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
