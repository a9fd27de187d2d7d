"""Independent float64 reference for sparse attention over listed blocks (docs/KERNELS.md §15):
softmax over exactly the listed, visible keys. Written from the contract; shares no code with
generated/."""
from __future__ import annotations

import torch

BLOCK = 128


def kv_parts(kv, page, g, D):
    """(K, V) [128, D] float64 of one page and KV head, for either cache layout."""
    if kv.dim() == 5:  # [pages, 2, 128, Hkv, D]
        return kv[page, 0, :, g, :].double(), kv[page, 1, :, g, :].double()
    return kv[page, g, :, :D].double(), kv[page, g, :, D:].double()  # [pages, Hkv, 128, 2D]


def ref_sparse_attn(q, kv, topk_idx, block_table, positions, num_kv_heads, sm_scale,
                    k_scale=None, v_scale=None):
    """[T, Hq, D] float64. ``positions``: per row (request, position p, seq_len) or None (a row
    of no request: zeros). Keys: those of listed blocks b (0 ≤ b < table width, page in the
    cache) with key ≤ p and key < seq_len; scales multiply the dequantised K / V elements."""
    T, Hq, D = q.shape
    G = Hq // num_kv_heads
    out = torch.zeros((T, Hq, D), dtype=torch.float64, device=q.device)
    W, pages = block_table.shape[1], kv.shape[0]

    def scale_of(s, g, page):
        if s is None:
            return torch.ones(BLOCK, dtype=torch.float64, device=q.device)
        if s.numel() == 1:
            return s.reshape(()).double().expand(BLOCK)
        return s[g, page * BLOCK:(page + 1) * BLOCK].double()

    for row in range(T):
        if positions[row] is None:
            continue
        r, p, seq_len = positions[row]
        for g in range(num_kv_heads):
            keys, vals = [], []
            for b in dict.fromkeys(topk_idx[g, row].tolist()):  # a set of blocks, in order
                if not 0 <= b < W:
                    continue
                page = int(block_table[r, b])
                if not 0 <= page < pages:
                    continue
                k, v = kv_parts(kv, page, g, D)
                k = k * scale_of(k_scale, g, page)[:, None]
                v = v * scale_of(v_scale, g, page)[:, None]
                pos = b * BLOCK + torch.arange(BLOCK, device=q.device)
                keep = (pos <= p) & (pos < seq_len)
                keys.append(k[keep])
                vals.append(v[keep])
            if not keys or sum(k.shape[0] for k in keys) == 0:
                continue
            K, V = torch.cat(keys), torch.cat(vals)
            qs = q[row, g * G:(g + 1) * G].double()  # [G, D]
            s = sm_scale * qs @ K.T
            w = torch.softmax(s, dim=1)
            out[row, g * G:(g + 1) * G] = w @ V
    return out


def decode_positions(seq_lens, Q):
    lens = [int(x) for x in seq_lens.cpu()]
    return [(row // Q, lens[row // Q] - Q + row % Q, lens[row // Q])
            for row in range(len(lens) * Q)]


def prefill_positions(cu_seqlens_q, prefix_lens, seq_lens, T, max_query_len):
    """(request, position, seq_len) of each of T prefill rows, None for a row of no request:
    row x is request r's, r = the number of requests with cu[r + 1] <= x, only where
    cu[r] <= x < cu[r + 1] and x - cu[r] < max_query_len (docs/KERNELS.md §13 rule 10; no
    request has more rows than the batch, so a larger max_query_len counts as T)."""
    cu = [int(x) for x in cu_seqlens_q.cpu()]
    pre = [int(x) for x in prefix_lens.cpu()]
    lens = [int(x) for x in seq_lens.cpu()]
    R = len(pre)
    out = [None] * T
    for x in range(T):
        r = sum(1 for k in range(R) if cu[k + 1] <= x)
        if r < R and cu[r] <= x < cu[r + 1] and x - cu[r] < min(max_query_len, T):
            out[x] = (r, pre[r] + x - cu[r], lens[r])
    return out
