"""A stand-in peer for `tools/bench_attn.py --peer` in the CPU tests: sparse_attn_decode's
positional arguments over a [pages, Hkv, 128, 2·D] cache, answered by the float64 reference
(the bench puts this folder first on sys.path)."""
from reference_attn import decode_positions, prefill_positions, ref_sparse_attn


def attend_packed(q, kv, topk_idx, block_table, seq_lens, num_kv_heads, sm_scale, output,
                  decode_query_len, k_scale=None, v_scale=None):
    if kv.dim() != 4:
        raise ValueError("kv: the peer takes [pages, Hkv, 128, 2·D]")
    positions = decode_positions(seq_lens, decode_query_len)
    output.copy_(ref_sparse_attn(q, kv, topk_idx, block_table, positions, num_kv_heads,
                                 sm_scale, k_scale, v_scale))


def attend_prefill_packed(q, kv, topk_idx, block_table, cu_seqlens_q, seq_lens, prefix_lens,
                          max_query_len, num_kv_heads, sm_scale, output, k_scale=None,
                          v_scale=None):
    if kv.dim() != 4:
        raise ValueError("kv: the peer takes [pages, Hkv, 128, 2·D]")
    positions = prefill_positions(cu_seqlens_q, prefix_lens, seq_lens, q.shape[0],
                                  max_query_len)
    output.copy_(ref_sparse_attn(q, kv, topk_idx, block_table, positions, num_kv_heads,
                                 sm_scale, k_scale, v_scale))


def attend_zeros(q, kv, topk_idx, block_table, seq_lens, num_kv_heads, sm_scale, output,
                 decode_query_len, k_scale=None, v_scale=None):
    """A wrong peer: zeros."""
    output.zero_()


def attend_raising(*args, **kwargs):
    """A peer that cannot run."""
    raise RuntimeError("no such kernel here")
