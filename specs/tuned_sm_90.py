"""sm_90 launch tables, measured on an H200 by tools/tune.py (see MEASURED).

tools/tune owns this file: rerun `python3 tools/tune.py --out DIR --write-specs` on the
H200 instead of editing it, then `codegen regenerate`. Rows marked `measured` carry the
median µs at the bucket's representatives; the others keep the untuned defaults.
"""
from codegen.policy import Buckets, Rule, between

from .defaults import (DEFAULT_SPLIT, GENERAL_TOPK, GENERAL_TOPK_OPTIONS,
                       UNTUNED_SPLIT_OPTIONS)

MEASURED = dict(
    date="2026-11-29 11:29:35 UTC",
    device="NVIDIA H200",
    torch="2.11.0+cu130",
    triton="3.6.0",
    l2_flush="",
    command="python3 tools/tune.py --write-specs --out /root/out --budget-s 400",
)


def _router(rows):
    """(lo, hi, block_m, block_k, num_warps): the per-expert kernel, one stage;
    (lo, hi, dict(kernel="splitk", ...)): the split-K kernel with all its parameters."""
    return Buckets(axis="num_tokens", rows=tuple(
        r if isinstance(r[2], dict) else
        (r[0], r[1], dict(block_m=r[2], block_k=r[3], num_warps=r[4], num_stages=1))
        for r in rows))


# choice = smallest worst-case slowdown over the bucket's token counts (1, 4 | 8, 16 | 32) ×
# x dtype (bf16, fp32), over both kernels
ROUTER_GEMM = {
    (3072, 256): _router((
        (1, 4, 1, 512, 4),  # measured: M1 bf16 5.41, M1 fp32 5.79, M4 bf16 5.98, M4 fp32 6.08 µs
        (5, 16, 4, 1024, 4),  # measured: M8 bf16 6.46, M8 fp32 7.30, M16 bf16 8.90, M16 fp32 10.21 µs
        (17, 32, 4, 256, 1),  # measured: M32 bf16 10.98, M32 fp32 13.79 µs
    )),
    (4096, 8): _router((
        (1, 4, 1, 2048, 16),  # measured: M1 bf16 4.42, M1 fp32 4.61, M4 bf16 4.48, M4 fp32 4.42 µs
        (5, 16, 4, 4096, 16),  # measured: M8 bf16 4.83, M8 fp32 4.99, M16 bf16 4.93, M16 fp32 5.02 µs
        (17, 32, 4, 4096, 16),  # measured: M32 bf16 4.74, M32 fp32 5.60 µs
    )),
    (4096, 192): _router((
        (1, 4, 1, 1024, 8),  # measured: M1 bf16 5.12, M1 fp32 5.57, M4 bf16 6.27, M4 fp32 6.88 µs
        (5, 16, 4, 2048, 8),  # measured: M8 bf16 7.10, M8 fp32 7.10, M16 bf16 8.70, M16 fp32 9.60 µs
        (17, 32, 4, 512, 2),  # measured: M32 bf16 12.03, M32 fp32 11.52 µs
    )),
    (6144, 128): _router((
        (1, 4, 1, 2048, 8),  # measured: M1 bf16 5.82, M1 fp32 5.63, M4 bf16 6.30, M4 fp32 5.92 µs
        (5, 16, 4, 2048, 16),  # measured: M8 bf16 6.50, M8 fp32 6.69, M16 bf16 8.83, M16 fp32 9.31 µs
        (17, 32, 4, 512, 4),  # measured: M32 bf16 10.53, M32 fp32 14.62 µs
    )),
    (6144, 256): _router((
        (1, 4, 1, 1024, 8),  # measured: M1 bf16 6.27, M1 fp32 6.43, M4 bf16 7.90, M4 fp32 7.62 µs
        (5, 16, 4, 512, 4),  # measured: M8 bf16 9.95, M8 fp32 8.10, M16 bf16 10.40, M16 fp32 13.82 µs
        (17, 32, 4, 256, 1),  # measured: M32 bf16 16.96, M32 fp32 18.88 µs
    )),
}

# Untuned rows use upstream's defaults (specs/defaults.py).
_SPLIT_DEFAULT, _SPLIT_DEFAULT_OPTIONS = DEFAULT_SPLIT, UNTUNED_SPLIT_OPTIONS
_TOPK_DEFAULT, _TOPK_DEFAULT_OPTIONS = GENERAL_TOPK, GENERAL_TOPK_OPTIONS

# The measured part of the scorer domain.
_TUNED = {"hardware": "sm_90", "q_dtype": "bf16", "cache_dtype": "bf16",
          "head_dim": 128, "num_heads": 1}

# Decode scorer. Measured: bf16 query and cache, head_dim 128, one index head (H = 1),
# end to end (scores + selection + page-16 table, fixed selector), by Qmax bucket ×
# max_block bucket × request bucket. Everything else: the default split grid, untuned.
# `index_decode_fused` rows: scorer + selector in one launch (max_block ≤ topk_tile).
INDEX_SCORE = [
    Rule(when={**_TUNED, "max_q": 1, "max_block": between(0, 64)},
         variant="index_decode_fused", by=Buckets(axis="num_reqs", rows=(
             # measured: R1 8.90, R2 9.31 µs
             (1, 2, dict(kv_chunks=64, topk_tile=128, num_warps=4, num_stages=2)),
             # measured: R4 10.53 µs
             (3, 4, dict(kv_chunks=64, topk_tile=128, num_warps=4, num_stages=2)),
             # measured: R8 13.02 µs
             (5, 8, dict(kv_chunks=64, topk_tile=128, num_warps=4, num_stages=2)),
             # measured: R11 14.82 µs
             (9, 11, dict(kv_chunks=32, topk_tile=128, num_warps=8, num_stages=2)),
             # measured: R16 16.61 µs
             (12, 16, dict(kv_chunks=32, topk_tile=128, num_warps=4, num_stages=2)),
         )), note="fused, bf16 D128 H1, Qmax 1, max_block 0–64"),
    Rule(when={**_TUNED, "max_q": 1, "max_block": between(0, 64)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R32 25.60 µs
             (17, 32, dict(kv_chunks=16, high_batch=False, static_chunks=True, num_warps=4,
                           num_stages=2)),
             # measured: R64 40.96 µs
             (33, 64, dict(kv_chunks=32, high_batch=False, static_chunks=True, num_warps=4,
                           num_stages=2)),
             # measured: R128 70.24 µs
             (65, 256, dict(kv_chunks=32, high_batch=False, static_chunks=True, num_warps=4,
                            num_stages=2)),
             # default (not measured)
             (257, None, dict(kv_chunks=1, high_batch=False, static_chunks=False, num_warps=4,
                              num_stages=3)),
         )), note="split, bf16 D128 H1, Qmax 1, max_block 0–64"),
    Rule(when={**_TUNED, "max_q": 1, "max_block": between(65, 256)},
         variant="index_decode_fused", by=Buckets(axis="num_reqs", rows=(
             # measured: R1 11.52, R2 13.25 µs
             (1, 2, dict(kv_chunks=256, topk_tile=256, num_warps=4, num_stages=2)),
             # measured: R4 16.67 µs
             (3, 4, dict(kv_chunks=128, topk_tile=256, num_warps=4, num_stages=2)),
             # measured: R8 24.80 µs
             (5, 8, dict(kv_chunks=64, topk_tile=256, num_warps=4, num_stages=2)),
             # measured: R11 30.27 µs
             (9, 11, dict(kv_chunks=32, topk_tile=256, num_warps=4, num_stages=2)),
             # measured: R16 40.61 µs
             (12, 16, dict(kv_chunks=32, topk_tile=256, num_warps=4, num_stages=2)),
         )), note="fused, bf16 D128 H1, Qmax 1, max_block 65–256"),
    Rule(when={**_TUNED, "max_q": 1, "max_block": between(65, 256)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R32 70.75 µs
             (17, 32, dict(kv_chunks=128, high_batch=False, static_chunks=True, num_warps=4,
                           num_stages=2)),
             # measured: R64 129.25 µs
             (33, 64, dict(kv_chunks=128, high_batch=False, static_chunks=True, num_warps=4,
                           num_stages=2)),
             # measured: R128 247.36 µs
             (65, 256, dict(kv_chunks=64, high_batch=False, static_chunks=False, num_warps=4,
                            num_stages=3)),
             # default (not measured)
             (257, None, dict(kv_chunks=1, high_batch=False, static_chunks=False, num_warps=4,
                              num_stages=3)),
         )), note="split, bf16 D128 H1, Qmax 1, max_block 65–256"),
    Rule(when={**_TUNED, "max_q": 1, "max_block": between(257, 65534)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R1 19.94, R2 28.42 µs
             (1, 2, dict(kv_chunks=512, high_batch=False, static_chunks=True, num_warps=4,
                         num_stages=2)),
             # measured: R4 43.36 µs
             (3, 4, dict(kv_chunks=512, high_batch=False, static_chunks=True, num_warps=4,
                         num_stages=2)),
             # measured: R8 72.35 µs
             (5, 8, dict(kv_chunks=512, high_batch=False, static_chunks=False, num_warps=4,
                         num_stages=2)),
             # measured: R11 94.78 µs
             (9, 11, dict(kv_chunks=512, high_batch=False, static_chunks=True, num_warps=4,
                          num_stages=2)),
             # measured: R16 130.75 µs
             (12, 16, dict(kv_chunks=512, high_batch=False, static_chunks=True, num_warps=4,
                           num_stages=2)),
             # measured: R32 250.30 µs
             (17, 32, dict(kv_chunks=256, high_batch=False, static_chunks=True, num_warps=4,
                           num_stages=2)),
             # measured: R64 484.90 µs
             (33, 64, dict(kv_chunks=128, high_batch=False, static_chunks=True, num_warps=4,
                           num_stages=3)),
             # measured: R128 957.66 µs
             (65, 256, dict(kv_chunks=64, high_batch=False, static_chunks=True, num_warps=4,
                            num_stages=2)),
             # default (not measured)
             (257, None, dict(kv_chunks=1, high_batch=False, static_chunks=False, num_warps=4,
                              num_stages=3)),
         )), note="split, bf16 D128 H1, Qmax 1, max_block 257–65534"),
    Rule(when={**_TUNED, "max_q": between(2, 8), "max_block": between(0, 64)},
         variant="index_decode_fused", by=Buckets(axis="num_reqs", rows=(
             # measured: R1 9.22, R2 10.02 µs
             (1, 2, dict(kv_chunks=64, topk_tile=128, num_warps=4, num_stages=2)),
             # measured: R4 10.88 µs
             (3, 4, dict(kv_chunks=64, topk_tile=128, num_warps=4, num_stages=2)),
             # measured: R8 13.22 µs
             (5, 8, dict(kv_chunks=64, topk_tile=128, num_warps=4, num_stages=2)),
             # measured: R11 15.39 µs
             (9, 11, dict(kv_chunks=32, topk_tile=128, num_warps=8, num_stages=2)),
         )), note="fused, bf16 D128 H1, Qmax 2–8, max_block 0–64"),
    Rule(when={**_TUNED, "max_q": between(2, 8), "max_block": between(0, 64)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R16 18.21 µs
             (12, 16, dict(kv_chunks=16, high_batch=False, static_chunks=False, num_warps=2,
                           num_stages=3)),
             # measured: R32 25.54 µs
             (17, 32, dict(kv_chunks=32, high_batch=False, static_chunks=False, num_warps=4,
                           num_stages=2)),
             # measured: R64 41.60 µs
             (33, 64, dict(kv_chunks=32, high_batch=False, static_chunks=False, num_warps=4,
                           num_stages=2)),
             # measured: R128 73.98 µs
             (65, 256, dict(kv_chunks=32, high_batch=False, static_chunks=False, num_warps=4,
                            num_stages=2)),
             # default (not measured)
             (257, None, dict(kv_chunks=1, high_batch=False, static_chunks=False, num_warps=4,
                              num_stages=3)),
         )), note="split, bf16 D128 H1, Qmax 2–8, max_block 0–64"),
    Rule(when={**_TUNED, "max_q": between(2, 8), "max_block": between(65, 256)},
         variant="index_score_balanced", by=Buckets(axis="num_reqs", rows=(
             # measured: R1 12.22, R2 14.56 µs
             (1, 2, dict(program_budget=528, num_warps=4, num_stages=2)),
         )), note="balanced, bf16 D128 H1, Qmax 2–8, max_block 65–256"),
    Rule(when={**_TUNED, "max_q": between(2, 8), "max_block": between(65, 256)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R4 18.21 µs
             (3, 4, dict(kv_chunks=128, high_batch=False, static_chunks=False, num_warps=4,
                         num_stages=2)),
             # measured: R8 25.73 µs
             (5, 8, dict(kv_chunks=32, high_batch=False, static_chunks=False, num_warps=4,
                         num_stages=3)),
             # measured: R11 31.20 µs
             (9, 11, dict(kv_chunks=32, high_batch=False, static_chunks=False, num_warps=4,
                          num_stages=2)),
             # measured: R16 40.86 µs
             (12, 16, dict(kv_chunks=128, high_batch=False, static_chunks=True, num_warps=4,
                           num_stages=2)),
             # measured: R32 71.14 µs
             (17, 32, dict(kv_chunks=128, high_batch=False, static_chunks=False, num_warps=4,
                           num_stages=2)),
             # measured: R64 131.01 µs
             (33, 64, dict(kv_chunks=128, high_batch=False, static_chunks=False, num_warps=4,
                           num_stages=2)),
             # measured: R128 252.45 µs
             (65, 256, dict(kv_chunks=64, high_batch=False, static_chunks=False, num_warps=4,
                            num_stages=2)),
             # default (not measured)
             (257, None, dict(kv_chunks=1, high_batch=False, static_chunks=False, num_warps=4,
                              num_stages=3)),
         )), note="split, bf16 D128 H1, Qmax 2–8, max_block 65–256"),
    Rule(when={**_TUNED, "max_q": between(2, 8), "max_block": between(257, 65534)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R1 20.93, R2 28.48 µs
             (1, 2, dict(kv_chunks=128, high_batch=False, static_chunks=True, num_warps=4,
                         num_stages=3)),
         )), note="split, bf16 D128 H1, Qmax 2–8, max_block 257–65534"),
    Rule(when={**_TUNED, "max_q": between(2, 8), "max_block": between(257, 65534)},
         variant="index_score_balanced", by=Buckets(axis="num_reqs", rows=(
             # measured: R4 42.91 µs
             (3, 4, dict(program_budget=528, num_warps=4, num_stages=2)),
         )), note="balanced, bf16 D128 H1, Qmax 2–8, max_block 257–65534"),
    Rule(when={**_TUNED, "max_q": between(2, 8), "max_block": between(257, 65534)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R8 74.62 µs
             (5, 8, dict(kv_chunks=512, high_batch=False, static_chunks=False, num_warps=4,
                         num_stages=2)),
             # measured: R11 96.10 µs
             (9, 11, dict(kv_chunks=512, high_batch=False, static_chunks=False, num_warps=4,
                          num_stages=2)),
             # measured: R16 132.58 µs
             (12, 16, dict(kv_chunks=512, high_batch=False, static_chunks=True, num_warps=4,
                           num_stages=2)),
             # measured: R32 252.03 µs
             (17, 32, dict(kv_chunks=128, high_batch=False, static_chunks=False, num_warps=4,
                           num_stages=3)),
             # measured: R64 491.71 µs
             (33, 64, dict(kv_chunks=128, high_batch=False, static_chunks=False, num_warps=4,
                           num_stages=3)),
             # measured: R128 972.96 µs
             (65, 256, dict(kv_chunks=64, high_batch=False, static_chunks=False, num_warps=4,
                            num_stages=2)),
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
             # measured: R1Q1 7.71, R2Q1 8.32 µs
             (1, 2, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False,
                         pdl=True, num_warps=4, num_stages=2)),
             # measured: R1Q4 7.84, R4Q1 9.86 µs
             (3, 4, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False,
                         pdl=True, num_warps=4, num_stages=2)),
             # measured: R2Q4 8.16, R8Q1 11.97 µs
             (5, 8, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False,
                         pdl=True, num_warps=4, num_stages=2)),
             # measured: R4Q4 9.63, R11Q1 14.05, R16Q1 15.81 µs
             (9, 16, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False,
                          pdl=True, num_warps=8, num_stages=2)),
             # measured: R8Q4 12.16, R32Q1 24.00 µs
             (17, 32, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False,
                           pdl=True, num_warps=4, num_stages=2)),
             # measured: R11Q4 14.05, R16Q4 16.74, R64Q1 40.16 µs
             (33, 64, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False,
                           pdl=True, num_warps=4, num_stages=2)),
             # measured: R32Q4 24.51, R128Q1 69.15 µs
             (65, 128, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False,
                            pdl=False, num_warps=4, num_stages=2)),
             # measured: R64Q4 39.81 µs
             (129, 256, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False,
                             pdl=False, num_warps=2, num_stages=2)),
             # measured: R128Q4 69.95 µs
             (257, None, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False,
                              pdl=False, num_warps=2, num_stages=2)),
         )), note="topk 16, max_block 0–64"),
    Rule(when={"hardware": "sm_90", "topk": 16, "max_block": between(65, 256)},
         variant="index_topk_fused", by=Buckets(axis="rows_x_heads", rows=(
             # measured: R1Q1 11.17, R2Q1 13.18 µs
             (1, 2, dict(topk_chunks=1, topk_tile=512, single_tile=True, adaptive_merge=False,
                         pdl=True, num_warps=8, num_stages=2)),
             # measured: R1Q4 10.62, R4Q1 16.32 µs
             (3, 4, dict(topk_chunks=1, topk_tile=512, single_tile=True, adaptive_merge=False,
                         pdl=True, num_warps=8, num_stages=2)),
             # measured: R2Q4 14.34, R8Q1 24.93 µs
             (5, 8, dict(topk_chunks=1, topk_tile=128, single_tile=False, adaptive_merge=False,
                         pdl=True, num_warps=8, num_stages=2)),
             # measured: R4Q4 16.74, R11Q1 31.42, R16Q1 41.95 µs
             (9, 16, dict(topk_chunks=1, topk_tile=512, single_tile=True, adaptive_merge=False,
                          pdl=True, num_warps=8, num_stages=2)),
             # measured: R8Q4 25.38, R32Q1 70.30 µs
             (17, 32, dict(topk_chunks=1, topk_tile=512, single_tile=True, adaptive_merge=False,
                           pdl=False, num_warps=4, num_stages=2)),
             # measured: R11Q4 30.94, R16Q4 41.92, R64Q1 129.06 µs
             (33, 64, dict(topk_chunks=1, topk_tile=128, single_tile=False, adaptive_merge=False,
                           pdl=True, num_warps=4, num_stages=2)),
             # measured: R32Q4 70.82, R128Q1 246.91 µs
             (65, 128, dict(topk_chunks=1, topk_tile=512, single_tile=True, adaptive_merge=False,
                            pdl=False, num_warps=8, num_stages=2)),
             # measured: R64Q4 130.56 µs
             (129, 256, dict(topk_chunks=1, topk_tile=512, single_tile=True, adaptive_merge=False,
                             pdl=False, num_warps=4, num_stages=2)),
             # measured: R128Q4 250.24 µs
             (257, None, dict(topk_chunks=1, topk_tile=128, single_tile=False, adaptive_merge=False,
                              pdl=False, num_warps=2, num_stages=2)),
         )), note="topk 16, max_block 65–256"),
    Rule(when={"hardware": "sm_90", "topk": 16, "max_block": between(257, 1024)},
         variant="index_topk_fused", by=Buckets(axis="rows_x_heads", rows=(
             # measured: R1Q1 19.33, R2Q1 27.14 µs
             (1, 2, dict(topk_chunks=8, topk_tile=128, single_tile=True, adaptive_merge=False,
                         pdl=True, num_warps=2, num_stages=2)),
             # measured: R1Q4 18.66, R4Q1 41.38 µs
             (3, 4, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                         pdl=True, num_warps=4, num_stages=2)),
             # measured: R2Q4 26.78, R8Q1 71.01 µs
             (5, 8, dict(topk_chunks=8, topk_tile=128, single_tile=True, adaptive_merge=False,
                         pdl=True, num_warps=4, num_stages=2)),
             # measured: R4Q4 42.85, R11Q1 94.14, R16Q1 130.05 µs
             (9, 16, dict(topk_chunks=8, topk_tile=128, single_tile=True, adaptive_merge=False,
                          pdl=False, num_warps=2, num_stages=2)),
             # measured: R8Q4 71.78, R32Q1 248.29 µs
             (17, 32, dict(topk_chunks=8, topk_tile=128, single_tile=True, adaptive_merge=False,
                           pdl=True, num_warps=4, num_stages=2)),
             # measured: R11Q4 94.69, R16Q4 131.65, R64Q1 483.87 µs
             (33, 64, dict(topk_chunks=8, topk_tile=128, single_tile=True, adaptive_merge=False,
                           pdl=True, num_warps=4, num_stages=2)),
             # measured: R32Q4 252.03, R128Q1 957.15 µs
             (65, 128, dict(topk_chunks=8, topk_tile=128, single_tile=True, adaptive_merge=False,
                            pdl=True, num_warps=4, num_stages=2)),
             # measured: R64Q4 489.98 µs
             (129, 256, dict(topk_chunks=8, topk_tile=128, single_tile=True, adaptive_merge=False,
                             pdl=True, num_warps=2, num_stages=2)),
             # measured: R128Q4 970.21 µs
             (257, None, dict(topk_chunks=8, topk_tile=128, single_tile=True, adaptive_merge=False,
                              pdl=True, num_warps=2, num_stages=2)),
         )), note="topk 16, max_block 257–1024"),
    Rule(when={"hardware": "sm_90", "topk": 16, "max_block": between(1025, 65534)},
         variant="index_topk_fused", by=Buckets(axis="rows_x_heads", rows=(
             # measured: R1Q1 19.14, R2Q1 27.26 µs
             (1, 2, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                         pdl=True, num_warps=2, num_stages=2)),
             # measured: R1Q4 18.66, R4Q1 41.38 µs
             (3, 4, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                         pdl=True, num_warps=4, num_stages=2)),
             # measured: R2Q4 27.30, R8Q1 71.04 µs
             (5, 8, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                         pdl=True, num_warps=4, num_stages=2)),
             # measured: R4Q4 42.88, R11Q1 94.40, R16Q1 130.40 µs
             (9, 16, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                          pdl=False, num_warps=4, num_stages=2)),
             # measured: R8Q4 72.10, R32Q1 247.62 µs
             (17, 32, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                           pdl=True, num_warps=4, num_stages=2)),
             # measured: R11Q4 94.98, R16Q4 131.58, R64Q1 483.10 µs
             (33, 64, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                           pdl=True, num_warps=4, num_stages=2)),
             # measured: R32Q4 252.10, R128Q1 957.79 µs
             (65, 128, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                            pdl=True, num_warps=4, num_stages=2)),
             # measured: R64Q4 490.18 µs
             (129, 256, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                             pdl=False, num_warps=2, num_stages=2)),
             # measured: R128Q4 970.69 µs
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
