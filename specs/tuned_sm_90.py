"""sm_90 launch tables, measured on an H200 by tools/tune.py (see MEASURED).

tools/tune owns this file: rerun `python3 tools/tune.py --out DIR --write-specs` on the
H200 instead of editing it, then `codegen regenerate`. Rows marked `measured` carry the
median µs at the bucket's representatives; the others keep the untuned defaults.
"""
from codegen.policy import Buckets, Rule, between

from .defaults import (DEFAULT_SPLIT, GENERAL_TOPK, GENERAL_TOPK_OPTIONS,
                       UNTUNED_SPLIT_OPTIONS)

MEASURED = dict(
    decode_tables="kept from the tune of 2026-11-29 11:44:37 UTC (python3 tools/tune.py --write-specs --out /root/out --budget-s 420)",
    date="2026-11-29 13:09:45 UTC",
    device="NVIDIA H200",
    torch="2.11.0+cu130",
    triton="3.6.0",
    l2_flush="read",
    command="python3 tools/tune.py --sections router --write-specs --out /root/out --budget-s 280",
)


def _router(rows):
    """(lo, hi, block_m, block_k, num_warps): the per-expert kernel, one stage;
    (lo, hi, dict(kernel="splitk", ...)): the split-K kernel with all its parameters."""
    return Buckets(axis="num_tokens", rows=tuple(
        r if isinstance(r[2], dict) else
        (r[0], r[1], dict(block_m=r[2], block_k=r[3], num_warps=r[4], num_stages=1))
        for r in rows))


# choice = smallest worst-case slowdown over the bucket's token counts (1 | 2, 4 | 8 | 16 | 24, 32) ×
# x dtype (bf16, fp32), over both kernels
ROUTER_GEMM = {
    (3072, 256): _router((
        (1, 1, 1, 1024, 8),  # measured: M1 bf16 5.50, M1 fp32 5.73 µs
        (2, 4, 2, 1024, 8),  # measured: M2 bf16 5.82, M2 fp32 5.79, M4 bf16 6.21, M4 fp32 5.89 µs
        (5, 8, 4, 1024, 8),  # measured: M8 bf16 6.62, M8 fp32 6.78 µs
        # measured: M16 bf16 8.03, M16 fp32 8.32 µs
        (9, 16, dict(kernel="splitk", block_m=16, block_n=16, block_k=64, split_k=16, tf32x3=True,
                     num_warps=2, num_stages=3)),
        # measured: M24 bf16 9.47, M24 fp32 9.70, M32 bf16 9.66, M32 fp32 10.14 µs
        (17, 32, dict(kernel="splitk", block_m=32, block_n=16, block_k=64, split_k=8, tf32x3=True,
                      num_warps=4, num_stages=3)),
    )),
    (4096, 8): _router((
        (1, 1, 1, 4096, 16),  # measured: M1 bf16 4.42, M1 fp32 4.10 µs
        (2, 4, 1, 4096, 16),  # measured: M2 bf16 4.42, M2 fp32 4.26, M4 bf16 4.26, M4 fp32 4.42 µs
        (5, 8, 4, 4096, 16),  # measured: M8 bf16 4.86, M8 fp32 4.86 µs
        (9, 16, 4, 4096, 16),  # measured: M16 bf16 4.96, M16 fp32 5.25 µs
        (17, 32, 4, 4096, 16),  # measured: M24 bf16 4.99, M24 fp32 5.09, M32 bf16 5.12, M32 fp32 5.25 µs
    )),
    (4096, 192): _router((
        (1, 1, 1, 2048, 16),  # measured: M1 bf16 5.34, M1 fp32 5.44 µs
        (2, 4, 2, 4096, 8),  # measured: M2 bf16 5.82, M2 fp32 5.63, M4 bf16 6.34, M4 fp32 6.21 µs
        (5, 8, 4, 1024, 8),  # measured: M8 bf16 6.75, M8 fp32 7.17 µs
        (9, 16, 4, 512, 2),  # measured: M16 bf16 8.45, M16 fp32 8.26 µs
        # measured: M24 bf16 9.73, M24 fp32 9.82, M32 bf16 10.02, M32 fp32 10.21 µs
        (17, 32, dict(kernel="splitk", block_m=32, block_n=32, block_k=64, split_k=32, tf32x3=True,
                      num_warps=4, num_stages=2)),
    )),
    (6144, 128): _router((
        (1, 1, 1, 2048, 16),  # measured: M1 bf16 5.09, M1 fp32 5.09 µs
        (2, 4, 2, 2048, 16),  # measured: M2 bf16 5.98, M2 fp32 6.08, M4 bf16 6.18, M4 fp32 5.63 µs
        (5, 8, 4, 2048, 16),  # measured: M8 bf16 6.62, M8 fp32 7.33 µs
        # measured: M16 bf16 8.13, M16 fp32 8.29 µs
        (9, 16, dict(kernel="splitk", block_m=16, block_n=32, block_k=64, split_k=32, tf32x3=True,
                     num_warps=4, num_stages=3)),
        # measured: M24 bf16 9.98, M24 fp32 9.98, M32 bf16 10.18, M32 fp32 10.37 µs
        (17, 32, dict(kernel="splitk", block_m=32, block_n=16, block_k=64, split_k=32, tf32x3=True,
                      num_warps=4, num_stages=3)),
    )),
    (6144, 256): _router((
        (1, 1, 1, 2048, 16),  # measured: M1 bf16 6.08, M1 fp32 6.08 µs
        (2, 4, 1, 1024, 8),  # measured: M2 bf16 6.72, M2 fp32 6.78, M4 bf16 7.39, M4 fp32 7.68 µs
        (5, 8, 4, 512, 4),  # measured: M8 bf16 10.37, M8 fp32 8.06 µs
        # measured: M16 bf16 9.50, M16 fp32 9.54 µs
        (9, 16, dict(kernel="splitk", block_m=16, block_n=32, block_k=64, split_k=32, tf32x3=True,
                     num_warps=4, num_stages=3)),
        # measured: M24 bf16 12.13, M24 fp32 11.52, M32 bf16 12.48, M32 fp32 12.00 µs
        (17, 32, dict(kernel="splitk", block_m=32, block_n=64, block_k=64, split_k=32, tf32x3=True,
                      num_warps=4, num_stages=3)),
    )),
}

# Untuned rows use upstream's defaults (specs/defaults.py).
_SPLIT_DEFAULT, _SPLIT_DEFAULT_OPTIONS = DEFAULT_SPLIT, UNTUNED_SPLIT_OPTIONS
_TOPK_DEFAULT, _TOPK_DEFAULT_OPTIONS = GENERAL_TOPK, GENERAL_TOPK_OPTIONS

# The measured part of the scorer domain.
_TUNED = {"hardware": "sm_90", "q_dtype": "bf16", "cache_dtype": "bf16",
          "head_dim": 128, "num_heads": 1}

# Decode scorer. Measured: bf16 query and cache, head_dim 128, one index head (H = 1),
# end to end (scores + selection + page-16 table, selector of the previous table), by
# Qmax bucket × max_block bucket × request bucket. Everything else: the default split
# grid, untuned.
# `index_decode_fused` rows: scorer + selector in one launch (max_block ≤ topk_tile).
INDEX_SCORE = [
    Rule(when={**_TUNED, "max_q": 1, "max_block": between(0, 64)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R1 7.55, R2 8.42 µs
             (1, 2, dict(kv_chunks=64, high_batch=False, static_chunks=False, num_warps=4,
                         num_stages=1)),
             # measured: R4 9.76 µs
             (3, 4, dict(kv_chunks=64, high_batch=False, static_chunks=False, num_warps=2,
                         num_stages=3)),
             # measured: R8 12.00 µs
             (5, 8, dict(kv_chunks=32, high_batch=False, static_chunks=False, num_warps=4,
                         num_stages=3)),
             # measured: R11 13.95 µs
             (9, 11, dict(kv_chunks=32, high_batch=False, static_chunks=False, num_warps=4,
                          num_stages=2)),
             # measured: R16 15.81 µs
             (12, 16, dict(kv_chunks=16, high_batch=False, static_chunks=False, num_warps=2,
                           num_stages=3)),
             # measured: R32 23.65 µs
             (17, 32, dict(kv_chunks=16, high_batch=False, static_chunks=False, num_warps=4,
                           num_stages=2)),
             # measured: R64 38.40 µs
             (33, 64, dict(kv_chunks=8, high_batch=False, static_chunks=False, num_warps=4,
                           num_stages=2)),
             # measured: R128 67.84 µs
             (65, 256, dict(kv_chunks=32, high_batch=False, static_chunks=False, num_warps=4,
                            num_stages=2)),
             # default (not measured)
             (257, None, dict(kv_chunks=1, high_batch=False, static_chunks=False, num_warps=4,
                              num_stages=3)),
         )), note="split, bf16 D128 H1, Qmax 1, max_block 0–64"),
    Rule(when={**_TUNED, "max_q": 1, "max_block": between(65, 256)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R1 10.88, R2 12.80 µs
             (1, 2, dict(kv_chunks=128, high_batch=False, static_chunks=False, num_warps=4,
                         num_stages=3)),
             # measured: R4 16.19 µs
             (3, 4, dict(kv_chunks=128, high_batch=False, static_chunks=False, num_warps=4,
                         num_stages=2)),
         )), note="split, bf16 D128 H1, Qmax 1, max_block 65–256"),
    Rule(when={**_TUNED, "max_q": 1, "max_block": between(65, 256)},
         variant="index_decode_fused", by=Buckets(axis="num_reqs", rows=(
             # measured: R8 24.64 µs
             (5, 8, dict(kv_chunks=64, topk_tile=256, num_warps=4, num_stages=2)),
         )), note="fused, bf16 D128 H1, Qmax 1, max_block 65–256"),
    Rule(when={**_TUNED, "max_q": 1, "max_block": between(65, 256)},
         variant="index_score_balanced", by=Buckets(axis="num_reqs", rows=(
             # measured: R11 30.43 µs
             (9, 11, dict(program_budget=264, num_warps=2, num_stages=3)),
         )), note="balanced, bf16 D128 H1, Qmax 1, max_block 65–256"),
    Rule(when={**_TUNED, "max_q": 1, "max_block": between(65, 256)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R16 39.42 µs
             (12, 16, dict(kv_chunks=32, high_batch=False, static_chunks=False, num_warps=4,
                           num_stages=2)),
             # measured: R32 69.25 µs
             (17, 32, dict(kv_chunks=128, high_batch=False, static_chunks=True, num_warps=4,
                           num_stages=2)),
             # measured: R64 127.36 µs
             (33, 64, dict(kv_chunks=128, high_batch=False, static_chunks=False, num_warps=4,
                           num_stages=2)),
             # measured: R128 242.18 µs
             (65, 256, dict(kv_chunks=64, high_batch=False, static_chunks=True, num_warps=4,
                            num_stages=2)),
             # default (not measured)
             (257, None, dict(kv_chunks=1, high_batch=False, static_chunks=False, num_warps=4,
                              num_stages=3)),
         )), note="split, bf16 D128 H1, Qmax 1, max_block 65–256"),
    Rule(when={**_TUNED, "max_q": 1, "max_block": between(257, 65534)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R1 17.63, R2 26.05 µs
             (1, 2, dict(kv_chunks=512, high_batch=False, static_chunks=False, num_warps=4,
                         num_stages=2)),
             # measured: R4 40.67 µs
             (3, 4, dict(kv_chunks=1024, high_batch=False, static_chunks=True, num_warps=4,
                         num_stages=2)),
             # measured: R8 69.76 µs
             (5, 8, dict(kv_chunks=512, high_batch=False, static_chunks=True, num_warps=4,
                         num_stages=2)),
             # measured: R11 92.48 µs
             (9, 11, dict(kv_chunks=512, high_batch=False, static_chunks=True, num_warps=4,
                          num_stages=2)),
             # measured: R16 128.32 µs
             (12, 16, dict(kv_chunks=512, high_batch=False, static_chunks=True, num_warps=4,
                           num_stages=2)),
             # measured: R32 243.39 µs
             (17, 32, dict(kv_chunks=256, high_batch=False, static_chunks=True, num_warps=4,
                           num_stages=3)),
             # measured: R64 473.82 µs
             (33, 64, dict(kv_chunks=128, high_batch=False, static_chunks=False, num_warps=4,
                           num_stages=3)),
             # measured: R128 934.02 µs
             (65, 256, dict(kv_chunks=64, high_batch=False, static_chunks=False, num_warps=4,
                            num_stages=3)),
             # default (not measured)
             (257, None, dict(kv_chunks=1, high_batch=False, static_chunks=False, num_warps=4,
                              num_stages=3)),
         )), note="split, bf16 D128 H1, Qmax 1, max_block 257–65534"),
    Rule(when={**_TUNED, "max_q": between(2, 8), "max_block": between(0, 64)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R1 7.68, R2 8.29 µs
             (1, 2, dict(kv_chunks=64, high_batch=False, static_chunks=True, num_warps=4,
                         num_stages=2)),
             # measured: R4 9.92 µs
             (3, 4, dict(kv_chunks=64, high_batch=False, static_chunks=False, num_warps=4,
                         num_stages=3)),
         )), note="split, bf16 D128 H1, Qmax 2–8, max_block 0–64"),
    Rule(when={**_TUNED, "max_q": between(2, 8), "max_block": between(0, 64)},
         variant="index_score_balanced", by=Buckets(axis="num_reqs", rows=(
             # measured: R8 12.35 µs
             (5, 8, dict(program_budget=528, num_warps=4, num_stages=2)),
             # measured: R11 13.79 µs
             (9, 11, dict(program_budget=528, num_warps=4, num_stages=2)),
         )), note="balanced, bf16 D128 H1, Qmax 2–8, max_block 0–64"),
    Rule(when={**_TUNED, "max_q": between(2, 8), "max_block": between(0, 64)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R16 15.74 µs
             (12, 16, dict(kv_chunks=16, high_batch=False, static_chunks=True, num_warps=4,
                           num_stages=3)),
             # measured: R32 24.35 µs
             (17, 32, dict(kv_chunks=16, high_batch=False, static_chunks=False, num_warps=4,
                           num_stages=2)),
             # measured: R64 39.49 µs
             (33, 64, dict(kv_chunks=8, high_batch=False, static_chunks=False, num_warps=4,
                           num_stages=2)),
             # measured: R128 69.02 µs
             (65, 256, dict(kv_chunks=32, high_batch=False, static_chunks=True, num_warps=4,
                            num_stages=2)),
             # default (not measured)
             (257, None, dict(kv_chunks=1, high_batch=False, static_chunks=False, num_warps=4,
                              num_stages=3)),
         )), note="split, bf16 D128 H1, Qmax 2–8, max_block 0–64"),
    Rule(when={**_TUNED, "max_q": between(2, 8), "max_block": between(65, 256)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R1 10.59, R2 13.54 µs
             (1, 2, dict(kv_chunks=256, high_batch=False, static_chunks=False, num_warps=4,
                         num_stages=2)),
             # measured: R4 16.45 µs
             (3, 4, dict(kv_chunks=64, high_batch=False, static_chunks=True, num_warps=4,
                         num_stages=3)),
             # measured: R8 25.06 µs
             (5, 8, dict(kv_chunks=64, high_batch=False, static_chunks=False, num_warps=4,
                         num_stages=2)),
             # measured: R11 31.04 µs
             (9, 11, dict(kv_chunks=32, high_batch=False, static_chunks=False, num_warps=4,
                          num_stages=2)),
             # measured: R16 40.38 µs
             (12, 16, dict(kv_chunks=16, high_batch=False, static_chunks=True, num_warps=4,
                           num_stages=3)),
             # measured: R32 69.34 µs
             (17, 32, dict(kv_chunks=128, high_batch=False, static_chunks=True, num_warps=4,
                           num_stages=2)),
             # measured: R64 128.29 µs
             (33, 64, dict(kv_chunks=128, high_batch=False, static_chunks=False, num_warps=4,
                           num_stages=2)),
             # measured: R128 244.67 µs
             (65, 256, dict(kv_chunks=64, high_batch=False, static_chunks=False, num_warps=4,
                            num_stages=2)),
             # default (not measured)
             (257, None, dict(kv_chunks=1, high_batch=False, static_chunks=False, num_warps=4,
                              num_stages=3)),
         )), note="split, bf16 D128 H1, Qmax 2–8, max_block 65–256"),
    Rule(when={**_TUNED, "max_q": between(2, 8), "max_block": between(257, 65534)},
         variant="index_score_balanced", by=Buckets(axis="num_reqs", rows=(
             # measured: R1 18.66, R2 26.43 µs
             (1, 2, dict(program_budget=528, num_warps=4, num_stages=2)),
         )), note="balanced, bf16 D128 H1, Qmax 2–8, max_block 257–65534"),
    Rule(when={**_TUNED, "max_q": between(2, 8), "max_block": between(257, 65534)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R4 42.21 µs
             (3, 4, dict(kv_chunks=64, high_batch=False, static_chunks=False, num_warps=4,
                         num_stages=3)),
             # measured: R8 70.56 µs
             (5, 8, dict(kv_chunks=64, high_batch=False, static_chunks=True, num_warps=4,
                         num_stages=2)),
             # measured: R11 92.99 µs
             (9, 11, dict(kv_chunks=512, high_batch=False, static_chunks=False, num_warps=4,
                          num_stages=2)),
             # measured: R16 128.99 µs
             (12, 16, dict(kv_chunks=512, high_batch=False, static_chunks=False, num_warps=4,
                           num_stages=2)),
             # measured: R32 245.50 µs
             (17, 32, dict(kv_chunks=256, high_batch=False, static_chunks=True, num_warps=4,
                           num_stages=2)),
             # measured: R64 479.52 µs
             (33, 64, dict(kv_chunks=128, high_batch=False, static_chunks=True, num_warps=4,
                           num_stages=3)),
             # measured: R128 947.97 µs
             (65, 256, dict(kv_chunks=64, high_batch=False, static_chunks=False, num_warps=4,
                            num_stages=3)),
             # default (not measured)
             (257, None, dict(kv_chunks=1, high_batch=False, static_chunks=False, num_warps=4,
                              num_stages=3)),
         )), note="split, bf16 D128 H1, Qmax 2–8, max_block 257–65534"),
    Rule(when={"hardware": "sm_90", "q_dtype": "fp16"},
         variant="index_score_split", params=_SPLIT_DEFAULT_OPTIONS, by=_SPLIT_DEFAULT,
         note="default split grid (not measured)"),
    Rule(when={"hardware": "sm_90", "q_dtype": "bf16", "cache_dtype": "fp16"},
         variant="index_score_split", params=_SPLIT_DEFAULT_OPTIONS, by=_SPLIT_DEFAULT,
         note="default split grid (not measured)"),
    Rule(when={"hardware": "sm_90", "q_dtype": "bf16", "cache_dtype": "fp8e4m3"},
         variant="index_score_split", params=_SPLIT_DEFAULT_OPTIONS, by=_SPLIT_DEFAULT,
         note="default split grid (not measured)"),
    Rule(when={"hardware": "sm_90", "q_dtype": "bf16", "cache_dtype": "bf16", "head_dim": 16},
         variant="index_score_split", params=_SPLIT_DEFAULT_OPTIONS, by=_SPLIT_DEFAULT,
         note="default split grid (not measured)"),
    Rule(when={"hardware": "sm_90", "q_dtype": "bf16", "cache_dtype": "bf16", "head_dim": 32},
         variant="index_score_split", params=_SPLIT_DEFAULT_OPTIONS, by=_SPLIT_DEFAULT,
         note="default split grid (not measured)"),
    Rule(when={"hardware": "sm_90", "q_dtype": "bf16", "cache_dtype": "bf16", "head_dim": 64},
         variant="index_score_split", params=_SPLIT_DEFAULT_OPTIONS, by=_SPLIT_DEFAULT,
         note="default split grid (not measured)"),
    Rule(when={"hardware": "sm_90", "q_dtype": "bf16", "cache_dtype": "bf16", "head_dim": 256},
         variant="index_score_split", params=_SPLIT_DEFAULT_OPTIONS, by=_SPLIT_DEFAULT,
         note="default split grid (not measured)"),
    Rule(when={"hardware": "sm_90", "q_dtype": "bf16", "cache_dtype": "bf16", "head_dim": 128, "num_heads": 2},
         variant="index_score_split", params=_SPLIT_DEFAULT_OPTIONS, by=_SPLIT_DEFAULT,
         note="default split grid (not measured)"),
    Rule(when={"hardware": "sm_90", "q_dtype": "bf16", "cache_dtype": "bf16", "head_dim": 128, "num_heads": 4},
         variant="index_score_split", params=_SPLIT_DEFAULT_OPTIONS, by=_SPLIT_DEFAULT,
         note="default split grid (not measured)"),
]

# Fused top-k selector. Measured for topk 16 (end to end with the scorer chosen above), by
# max_block bucket × rows·heads bucket; single_tile only where the whole max_block bucket
# fits chunks·tile. Other topk values: upstream's general branch, untuned.
INDEX_TOPK = [
    Rule(when={"hardware": "sm_90", "topk": 16, "max_block": between(0, 64)},
         variant="index_topk_fused", by=Buckets(axis="rows_x_heads", rows=(
             # measured: R1Q1 7.71, R2Q1 8.26 µs
             (1, 2, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False,
                         pdl=True, num_warps=4, num_stages=2)),
             # measured: R1Q4 7.74, R4Q1 9.89 µs
             (3, 4, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False,
                         pdl=True, num_warps=8, num_stages=2)),
             # measured: R2Q4 8.61, R8Q1 12.03 µs
             (5, 8, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False,
                         pdl=True, num_warps=4, num_stages=2)),
             # measured: R4Q4 9.95, R11Q1 14.02, R16Q1 15.52 µs
             (9, 16, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False,
                          pdl=True, num_warps=4, num_stages=2)),
             # measured: R8Q4 12.99, R32Q1 24.06 µs
             (17, 32, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False,
                           pdl=True, num_warps=4, num_stages=2)),
             # measured: R11Q4 13.54, R16Q4 16.35, R64Q1 38.88 µs
             (33, 64, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False,
                           pdl=True, num_warps=8, num_stages=2)),
             # measured: R32Q4 23.33, R128Q1 68.26 µs
             (65, 128, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False,
                            pdl=True, num_warps=4, num_stages=2)),
             # measured: R64Q4 38.53 µs
             (129, 256, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False,
                             pdl=True, num_warps=4, num_stages=2)),
             # measured: R128Q4 69.09 µs
             (257, None, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False,
                              pdl=False, num_warps=2, num_stages=2)),
         )), note="topk 16, max_block 0–64"),
    Rule(when={"hardware": "sm_90", "topk": 16, "max_block": between(65, 256)},
         variant="index_topk_fused", by=Buckets(axis="rows_x_heads", rows=(
             # measured: R1Q1 10.59, R2Q1 12.80 µs
             (1, 2, dict(topk_chunks=1, topk_tile=512, single_tile=True, adaptive_merge=False,
                         pdl=True, num_warps=4, num_stages=2)),
             # measured: R1Q4 10.34, R4Q1 16.22 µs
             (3, 4, dict(topk_chunks=1, topk_tile=512, single_tile=True, adaptive_merge=False,
                         pdl=True, num_warps=8, num_stages=2)),
             # measured: R2Q4 12.61, R8Q1 24.67 µs
             (5, 8, dict(topk_chunks=1, topk_tile=512, single_tile=True, adaptive_merge=False,
                         pdl=True, num_warps=8, num_stages=2)),
             # measured: R4Q4 16.70, R11Q1 30.62, R16Q1 39.17 µs
             (9, 16, dict(topk_chunks=1, topk_tile=512, single_tile=True, adaptive_merge=False,
                          pdl=True, num_warps=8, num_stages=2)),
             # measured: R8Q4 24.90, R32Q1 70.30 µs
             (17, 32, dict(topk_chunks=1, topk_tile=128, single_tile=False, adaptive_merge=False,
                           pdl=True, num_warps=8, num_stages=2)),
             # measured: R11Q4 31.33, R16Q4 40.48, R64Q1 127.68 µs
             (33, 64, dict(topk_chunks=1, topk_tile=512, single_tile=True, adaptive_merge=False,
                           pdl=False, num_warps=4, num_stages=2)),
             # measured: R32Q4 70.05, R128Q1 241.57 µs
             (65, 128, dict(topk_chunks=1, topk_tile=512, single_tile=True, adaptive_merge=False,
                            pdl=False, num_warps=4, num_stages=2)),
             # measured: R64Q4 128.67 µs
             (129, 256, dict(topk_chunks=1, topk_tile=512, single_tile=True, adaptive_merge=False,
                             pdl=False, num_warps=8, num_stages=2)),
             # measured: R128Q4 245.02 µs
             (257, None, dict(topk_chunks=1, topk_tile=128, single_tile=False, adaptive_merge=False,
                              pdl=False, num_warps=2, num_stages=2)),
         )), note="topk 16, max_block 65–256"),
    Rule(when={"hardware": "sm_90", "topk": 16, "max_block": between(257, 1024)},
         variant="index_topk_fused", by=Buckets(axis="rows_x_heads", rows=(
             # measured: R1Q1 18.34, R2Q1 25.89 µs
             (1, 2, dict(topk_chunks=8, topk_tile=128, single_tile=True, adaptive_merge=False,
                         pdl=True, num_warps=4, num_stages=2)),
             # measured: R1Q4 18.08, R4Q1 41.44 µs
             (3, 4, dict(topk_chunks=8, topk_tile=128, single_tile=True, adaptive_merge=False,
                         pdl=True, num_warps=4, num_stages=2)),
             # measured: R2Q4 25.92, R8Q1 69.15 µs
             (5, 8, dict(topk_chunks=8, topk_tile=128, single_tile=True, adaptive_merge=False,
                         pdl=True, num_warps=4, num_stages=2)),
             # measured: R4Q4 40.64, R11Q1 91.62, R16Q1 127.71 µs
             (9, 16, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                          pdl=True, num_warps=4, num_stages=2)),
             # measured: R8Q4 70.75, R32Q1 244.00 µs
             (17, 32, dict(topk_chunks=8, topk_tile=128, single_tile=True, adaptive_merge=False,
                           pdl=True, num_warps=4, num_stages=2)),
             # measured: R11Q4 92.86, R16Q4 128.90, R64Q1 473.79 µs
             (33, 64, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                           pdl=True, num_warps=4, num_stages=2)),
             # measured: R32Q4 245.50, R128Q1 934.75 µs
             (65, 128, dict(topk_chunks=8, topk_tile=128, single_tile=True, adaptive_merge=False,
                            pdl=True, num_warps=4, num_stages=2)),
             # measured: R64Q4 479.42 µs
             (129, 256, dict(topk_chunks=8, topk_tile=128, single_tile=True, adaptive_merge=False,
                             pdl=True, num_warps=2, num_stages=2)),
             # measured: R128Q4 948.38 µs
             (257, None, dict(topk_chunks=8, topk_tile=128, single_tile=True, adaptive_merge=False,
                              pdl=True, num_warps=2, num_stages=2)),
         )), note="topk 16, max_block 257–1024"),
    Rule(when={"hardware": "sm_90", "topk": 16, "max_block": between(1025, 65534)},
         variant="index_topk_fused", by=Buckets(axis="rows_x_heads", rows=(
             # measured: R1Q1 18.30, R2Q1 26.02 µs
             (1, 2, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                         pdl=True, num_warps=4, num_stages=2)),
             # measured: R1Q4 18.43, R4Q1 41.06 µs
             (3, 4, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                         pdl=True, num_warps=2, num_stages=2)),
             # measured: R2Q4 26.08, R8Q1 70.14 µs
             (5, 8, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                         pdl=True, num_warps=4, num_stages=2)),
             # measured: R4Q4 40.64, R11Q1 91.62, R16Q1 127.71 µs
             (9, 16, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                          pdl=True, num_warps=4, num_stages=2)),
             # measured: R8Q4 70.91, R32Q1 244.38 µs
             (17, 32, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                           pdl=True, num_warps=2, num_stages=2)),
             # measured: R11Q4 92.86, R16Q4 128.90, R64Q1 473.79 µs
             (33, 64, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                           pdl=True, num_warps=4, num_stages=2)),
             # measured: R32Q4 245.54, R128Q1 935.20 µs
             (65, 128, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                            pdl=True, num_warps=4, num_stages=2)),
             # measured: R64Q4 480.03 µs
             (129, 256, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                             pdl=True, num_warps=2, num_stages=2)),
             # measured: R128Q4 949.22 µs
             (257, None, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                              pdl=True, num_warps=2, num_stages=2)),
         )), note="topk 16, max_block 1025–65534"),
    Rule(when={"hardware": "sm_90", "topk": between(1, 15)},
         variant="index_topk_fused", params=_TOPK_DEFAULT_OPTIONS, by=_TOPK_DEFAULT,
         note="general branch (not measured)"),
    Rule(when={"hardware": "sm_90", "topk": between(17, 512)},
         variant="index_topk_fused", params=_TOPK_DEFAULT_OPTIONS, by=_TOPK_DEFAULT,
         note="general branch (not measured)"),
]
