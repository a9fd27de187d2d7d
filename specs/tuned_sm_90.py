"""sm_90 launch tables, measured on an H200 by tools/tune.py (see MEASURED).

tools/tune owns this file: rerun `python3 tools/tune.py --out DIR --write-specs` on the
H200 instead of editing it, then `codegen regenerate`. Rows marked `measured` carry the
median µs at the bucket's representatives; the others keep the untuned defaults.
"""
from codegen.policy import Buckets, Rule, between

from .defaults import (DEFAULT_SPLIT, GENERAL_TOPK, GENERAL_TOPK_OPTIONS,
                       UNTUNED_SPLIT_OPTIONS)

MEASURED = dict(
    date="2026-11-29 10:13:37 UTC",
    device="NVIDIA H200",
    torch="2.11.0+cu130",
    triton="3.6.0",
    command="python3 tools/tune.py --write-specs --out /root/out --budget-s 300",
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
        (1, 4, 1, 1024, 8),  # measured: M1 bf16 6.05, M1 fp32 6.02, M4 bf16 6.62, M4 fp32 6.88 µs
        (5, 16, 4, 1024, 4),  # measured: M8 bf16 7.04, M8 fp32 8.10, M16 bf16 9.28, M16 fp32 10.75 µs
        (17, 32, 4, 256, 1),  # measured: M32 bf16 11.30, M32 fp32 14.18 µs
    )),
    (4096, 8): _router((
        (1, 4, 1, 4096, 16),  # measured: M1 bf16 4.48, M1 fp32 4.32, M4 bf16 4.58, M4 fp32 4.42 µs
        (5, 16, 4, 4096, 16),  # measured: M8 bf16 4.80, M8 fp32 4.74, M16 bf16 4.96, M16 fp32 5.31 µs
        (17, 32, 4, 4096, 16),  # measured: M32 bf16 4.99, M32 fp32 5.70 µs
    )),
    (4096, 192): _router((
        (1, 4, 1, 1024, 8),  # measured: M1 bf16 5.73, M1 fp32 5.82, M4 bf16 6.05, M4 fp32 6.78 µs
        (5, 16, 8, 2048, 16),  # measured: M8 bf16 7.36, M8 fp32 7.65, M16 bf16 9.12, M16 fp32 9.47 µs
        (17, 32, 4, 512, 2),  # measured: M32 bf16 12.48, M32 fp32 11.52 µs
    )),
    (6144, 128): _router((
        (1, 4, 1, 2048, 16),  # measured: M1 bf16 6.08, M1 fp32 6.11, M4 bf16 6.62, M4 fp32 6.75 µs
        (5, 16, 4, 2048, 16),  # measured: M8 bf16 7.36, M8 fp32 7.23, M16 bf16 9.76, M16 fp32 10.11 µs
        (17, 32, 4, 512, 4),  # measured: M32 bf16 10.94, M32 fp32 14.72 µs
    )),
    (6144, 256): _router((
        (1, 4, 1, 1024, 8),  # measured: M1 bf16 7.46, M1 fp32 7.58, M4 bf16 8.00, M4 fp32 8.19 µs
        (5, 16, 4, 512, 4),  # measured: M8 bf16 11.55, M8 fp32 8.83, M16 bf16 11.68, M16 fp32 15.07 µs
        (17, 32, 4, 256, 1),  # measured: M32 bf16 17.47, M32 fp32 20.16 µs
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
             # measured: R1 9.82, R2 10.34 µs
             (1, 2, dict(kv_chunks=64, topk_tile=128, num_warps=8, num_stages=2)),
             # measured: R4 12.03 µs
             (3, 4, dict(kv_chunks=64, topk_tile=128, num_warps=4, num_stages=2)),
             # measured: R8 14.59 µs
             (5, 8, dict(kv_chunks=64, topk_tile=128, num_warps=4, num_stages=2)),
             # measured: R11 17.18 µs
             (9, 11, dict(kv_chunks=32, topk_tile=128, num_warps=4, num_stages=2)),
             # measured: R16 20.06 µs
             (12, 16, dict(kv_chunks=32, topk_tile=128, num_warps=4, num_stages=2)),
         )), note="fused, bf16 D128 H1, Qmax 1, max_block 0–64"),
    Rule(when={**_TUNED, "max_q": 1, "max_block": between(0, 64)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R32 31.58 µs
             (17, 32, dict(kv_chunks=32, high_batch=False, static_chunks=False, num_warps=4, num_stages=2)),
             # measured: R64 49.22 µs
             (33, 64, dict(kv_chunks=64, high_batch=False, static_chunks=False, num_warps=4, num_stages=2)),
             # measured: R128 78.66 µs
             (65, 256, dict(kv_chunks=32, high_batch=False, static_chunks=False, num_warps=4, num_stages=2)),
             # default (not measured)
             (257, None, dict(kv_chunks=1, high_batch=False, static_chunks=False, num_warps=4, num_stages=3)),
         )), note="split, bf16 D128 H1, Qmax 1, max_block 0–64"),
    Rule(when={**_TUNED, "max_q": 1, "max_block": between(65, 256)},
         variant="index_decode_fused", by=Buckets(axis="num_reqs", rows=(
             # measured: R1 11.87, R2 15.10 µs
             (1, 2, dict(kv_chunks=256, topk_tile=256, num_warps=4, num_stages=2)),
             # measured: R4 20.45 µs
             (3, 4, dict(kv_chunks=128, topk_tile=256, num_warps=4, num_stages=2)),
             # measured: R8 31.01 µs
             (5, 8, dict(kv_chunks=64, topk_tile=256, num_warps=4, num_stages=2)),
             # measured: R11 38.14 µs
             (9, 11, dict(kv_chunks=32, topk_tile=256, num_warps=4, num_stages=2)),
             # measured: R16 48.54 µs
             (12, 16, dict(kv_chunks=32, topk_tile=256, num_warps=4, num_stages=2)),
         )), note="fused, bf16 D128 H1, Qmax 1, max_block 65–256"),
    Rule(when={**_TUNED, "max_q": 1, "max_block": between(65, 256)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R32 79.17 µs
             (17, 32, dict(kv_chunks=128, high_batch=False, static_chunks=False, num_warps=4, num_stages=2)),
             # measured: R64 138.40 µs
             (33, 64, dict(kv_chunks=64, high_batch=False, static_chunks=False, num_warps=4, num_stages=2)),
             # measured: R128 255.68 µs
             (65, 256, dict(kv_chunks=64, high_batch=False, static_chunks=False, num_warps=4, num_stages=2)),
             # default (not measured)
             (257, None, dict(kv_chunks=1, high_batch=False, static_chunks=False, num_warps=4, num_stages=3)),
         )), note="split, bf16 D128 H1, Qmax 1, max_block 65–256"),
    Rule(when={**_TUNED, "max_q": 1, "max_block": between(257, 65534)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R1 23.46, R2 34.40 µs
             (1, 2, dict(kv_chunks=512, high_batch=False, static_chunks=False, num_warps=4, num_stages=2)),
             # measured: R4 51.52 µs
             (3, 4, dict(kv_chunks=512, high_batch=False, static_chunks=False, num_warps=4, num_stages=2)),
             # measured: R8 81.06 µs
             (5, 8, dict(kv_chunks=1024, high_batch=False, static_chunks=False, num_warps=4, num_stages=2)),
             # measured: R11 103.65 µs
             (9, 11, dict(kv_chunks=512, high_batch=False, static_chunks=False, num_warps=4, num_stages=2)),
             # measured: R16 140.03 µs
             (12, 16, dict(kv_chunks=512, high_batch=False, static_chunks=False, num_warps=4, num_stages=2)),
             # measured: R32 258.88 µs
             (17, 32, dict(kv_chunks=256, high_batch=False, static_chunks=False, num_warps=4, num_stages=3)),
             # measured: R64 493.34 µs
             (33, 64, dict(kv_chunks=128, high_batch=False, static_chunks=False, num_warps=4, num_stages=3)),
             # measured: R128 965.02 µs
             (65, 256, dict(kv_chunks=64, high_batch=False, static_chunks=False, num_warps=4, num_stages=3)),
             # default (not measured)
             (257, None, dict(kv_chunks=1, high_batch=False, static_chunks=False, num_warps=4, num_stages=3)),
         )), note="split, bf16 D128 H1, Qmax 1, max_block 257–65534"),
    Rule(when={**_TUNED, "max_q": between(2, 8), "max_block": between(0, 64)},
         variant="index_decode_fused", by=Buckets(axis="num_reqs", rows=(
             # measured: R1 9.89, R2 10.85 µs
             (1, 2, dict(kv_chunks=64, topk_tile=128, num_warps=4, num_stages=2)),
             # measured: R4 12.70 µs
             (3, 4, dict(kv_chunks=64, topk_tile=128, num_warps=4, num_stages=2)),
         )), note="fused, bf16 D128 H1, Qmax 2–8, max_block 0–64"),
    Rule(when={**_TUNED, "max_q": between(2, 8), "max_block": between(0, 64)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R8 16.13 µs
             (5, 8, dict(kv_chunks=64, high_batch=False, static_chunks=False, num_warps=4, num_stages=2)),
             # measured: R11 17.86 µs
             (9, 11, dict(kv_chunks=64, high_batch=False, static_chunks=False, num_warps=4, num_stages=2)),
         )), note="split, bf16 D128 H1, Qmax 2–8, max_block 0–64"),
    Rule(when={**_TUNED, "max_q": between(2, 8), "max_block": between(0, 64)},
         variant="index_decode_fused", by=Buckets(axis="num_reqs", rows=(
             # measured: R16 21.47 µs
             (12, 16, dict(kv_chunks=16, topk_tile=128, num_warps=4, num_stages=2)),
         )), note="fused, bf16 D128 H1, Qmax 2–8, max_block 0–64"),
    Rule(when={**_TUNED, "max_q": between(2, 8), "max_block": between(0, 64)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R32 31.78 µs
             (17, 32, dict(kv_chunks=32, high_batch=False, static_chunks=False, num_warps=4, num_stages=2)),
             # measured: R64 49.66 µs
             (33, 64, dict(kv_chunks=32, high_batch=False, static_chunks=False, num_warps=4, num_stages=2)),
             # measured: R128 82.11 µs
             (65, 256, dict(kv_chunks=64, high_batch=False, static_chunks=False, num_warps=4, num_stages=2)),
             # default (not measured)
             (257, None, dict(kv_chunks=1, high_batch=False, static_chunks=False, num_warps=4, num_stages=3)),
         )), note="split, bf16 D128 H1, Qmax 2–8, max_block 0–64"),
    Rule(when={**_TUNED, "max_q": between(2, 8), "max_block": between(65, 256)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R1 13.12, R2 16.42 µs
             (1, 2, dict(kv_chunks=256, high_batch=False, static_chunks=False, num_warps=4, num_stages=1)),
             # measured: R4 21.95 µs
             (3, 4, dict(kv_chunks=128, high_batch=False, static_chunks=False, num_warps=4, num_stages=2)),
             # measured: R8 31.87 µs
             (5, 8, dict(kv_chunks=256, high_batch=False, static_chunks=False, num_warps=4, num_stages=2)),
             # measured: R11 38.56 µs
             (9, 11, dict(kv_chunks=128, high_batch=False, static_chunks=False, num_warps=4, num_stages=2)),
             # measured: R16 49.28 µs
             (12, 16, dict(kv_chunks=128, high_batch=False, static_chunks=False, num_warps=4, num_stages=2)),
             # measured: R32 79.26 µs
             (17, 32, dict(kv_chunks=128, high_batch=False, static_chunks=False, num_warps=4, num_stages=2)),
             # measured: R64 140.03 µs
             (33, 64, dict(kv_chunks=64, high_batch=False, static_chunks=False, num_warps=4, num_stages=2)),
             # measured: R128 260.45 µs
             (65, 256, dict(kv_chunks=64, high_batch=False, static_chunks=False, num_warps=4, num_stages=2)),
             # default (not measured)
             (257, None, dict(kv_chunks=1, high_batch=False, static_chunks=False, num_warps=4, num_stages=3)),
         )), note="split, bf16 D128 H1, Qmax 2–8, max_block 65–256"),
    Rule(when={**_TUNED, "max_q": between(2, 8), "max_block": between(257, 65534)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R1 24.13, R2 34.30 µs
             (1, 2, dict(kv_chunks=512, high_batch=False, static_chunks=False, num_warps=4, num_stages=2)),
             # measured: R4 51.68 µs
             (3, 4, dict(kv_chunks=128, high_batch=False, static_chunks=False, num_warps=4, num_stages=2)),
             # measured: R8 81.86 µs
             (5, 8, dict(kv_chunks=1024, high_batch=False, static_chunks=False, num_warps=4, num_stages=2)),
             # measured: R11 104.77 µs
             (9, 11, dict(kv_chunks=512, high_batch=False, static_chunks=False, num_warps=4, num_stages=2)),
             # measured: R16 141.38 µs
             (12, 16, dict(kv_chunks=512, high_batch=False, static_chunks=False, num_warps=4, num_stages=2)),
             # measured: R32 260.48 µs
             (17, 32, dict(kv_chunks=256, high_batch=False, static_chunks=False, num_warps=4, num_stages=3)),
             # measured: R64 499.62 µs
             (33, 64, dict(kv_chunks=128, high_batch=False, static_chunks=False, num_warps=4, num_stages=3)),
             # measured: R128 979.84 µs
             (65, 256, dict(kv_chunks=64, high_batch=False, static_chunks=False, num_warps=2, num_stages=3)),
             # default (not measured)
             (257, None, dict(kv_chunks=1, high_batch=False, static_chunks=False, num_warps=4, num_stages=3)),
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
             # measured: R1Q1 9.82, R2Q1 10.40 µs
             (1, 2, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False, pdl=False,
                         num_warps=4, num_stages=2)),
             # measured: R1Q4 9.41, R4Q1 12.22 µs
             (3, 4, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False, pdl=False,
                         num_warps=4, num_stages=2)),
             # measured: R2Q4 10.62, R8Q1 14.72 µs
             (5, 8, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False, pdl=False,
                         num_warps=4, num_stages=2)),
             # measured: R4Q4 12.16, R11Q1 17.70, R16Q1 20.26 µs
             (9, 16, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False, pdl=False,
                          num_warps=8, num_stages=2)),
             # measured: R8Q4 14.94, R32Q1 30.91 µs
             (17, 32, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False, pdl=False,
                           num_warps=4, num_stages=2)),
             # measured: R11Q4 16.90, R16Q4 20.32, R64Q1 48.26 µs
             (33, 64, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False, pdl=False,
                           num_warps=4, num_stages=2)),
             # measured: R32Q4 30.43, R128Q1 77.76 µs
             (65, 128, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False, pdl=False,
                            num_warps=4, num_stages=2)),
             # measured: R64Q4 48.00 µs
             (129, 256, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False, pdl=False,
                             num_warps=4, num_stages=2)),
             # measured: R128Q4 78.18 µs
             (257, None, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False, pdl=False,
                              num_warps=2, num_stages=2)),
         )), note="topk 16, max_block 0–64"),
    Rule(when={"hardware": "sm_90", "topk": 16, "max_block": between(65, 256)},
         variant="index_topk_fused", by=Buckets(axis="rows_x_heads", rows=(
             # measured: R1Q1 13.06, R2Q1 16.03 µs
             (1, 2, dict(topk_chunks=1, topk_tile=512, single_tile=True, adaptive_merge=False, pdl=False,
                         num_warps=8, num_stages=2)),
             # measured: R1Q4 12.74, R4Q1 21.60 µs
             (3, 4, dict(topk_chunks=1, topk_tile=512, single_tile=True, adaptive_merge=False, pdl=False,
                         num_warps=8, num_stages=2)),
             # measured: R2Q4 15.97, R8Q1 31.42 µs
             (5, 8, dict(topk_chunks=1, topk_tile=512, single_tile=True, adaptive_merge=False, pdl=False,
                         num_warps=8, num_stages=2)),
             # measured: R4Q4 21.54, R11Q1 38.62, R16Q1 49.18 µs
             (9, 16, dict(topk_chunks=1, topk_tile=512, single_tile=True, adaptive_merge=False, pdl=False,
                          num_warps=4, num_stages=2)),
             # measured: R8Q4 31.36, R32Q1 78.85 µs
             (17, 32, dict(topk_chunks=1, topk_tile=512, single_tile=True, adaptive_merge=False, pdl=False,
                           num_warps=8, num_stages=2)),
             # measured: R11Q4 38.24, R16Q4 49.12, R64Q1 138.30 µs
             (33, 64, dict(topk_chunks=1, topk_tile=512, single_tile=True, adaptive_merge=False, pdl=False,
                           num_warps=8, num_stages=2)),
             # measured: R32Q4 79.26, R128Q1 255.68 µs
             (65, 128, dict(topk_chunks=1, topk_tile=512, single_tile=True, adaptive_merge=False, pdl=False,
                            num_warps=8, num_stages=2)),
             # measured: R64Q4 140.00 µs
             (129, 256, dict(topk_chunks=1, topk_tile=512, single_tile=True, adaptive_merge=False, pdl=False,
                             num_warps=4, num_stages=2)),
             # measured: R128Q4 258.72 µs
             (257, None, dict(topk_chunks=1, topk_tile=128, single_tile=False, adaptive_merge=False, pdl=False,
                              num_warps=2, num_stages=2)),
         )), note="topk 16, max_block 65–256"),
    Rule(when={"hardware": "sm_90", "topk": 16, "max_block": between(257, 1024)},
         variant="index_topk_fused", by=Buckets(axis="rows_x_heads", rows=(
             # measured: R1Q1 22.43, R2Q1 33.66 µs
             (1, 2, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False, pdl=False,
                         num_warps=2, num_stages=2)),
             # measured: R1Q4 22.98, R4Q1 50.56 µs
             (3, 4, dict(topk_chunks=8, topk_tile=128, single_tile=True, adaptive_merge=False, pdl=False,
                         num_warps=4, num_stages=2)),
             # measured: R2Q4 33.54, R8Q1 80.26 µs
             (5, 8, dict(topk_chunks=8, topk_tile=128, single_tile=True, adaptive_merge=False, pdl=False,
                         num_warps=4, num_stages=2)),
             # measured: R4Q4 50.82, R11Q1 102.40, R16Q1 138.91 µs
             (9, 16, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False, pdl=False,
                          num_warps=4, num_stages=2)),
             # measured: R8Q4 80.51, R32Q1 256.93 µs
             (17, 32, dict(topk_chunks=8, topk_tile=128, single_tile=True, adaptive_merge=False, pdl=False,
                           num_warps=4, num_stages=2)),
             # measured: R11Q4 102.75, R16Q4 140.26, R64Q1 492.06 µs
             (33, 64, dict(topk_chunks=8, topk_tile=128, single_tile=True, adaptive_merge=False, pdl=False,
                           num_warps=4, num_stages=2)),
             # measured: R32Q4 259.49, R128Q1 963.87 µs
             (65, 128, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False, pdl=False,
                            num_warps=2, num_stages=2)),
             # measured: R64Q4 499.39 µs
             (129, 256, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False, pdl=False,
                             num_warps=2, num_stages=2)),
             # measured: R128Q4 978.56 µs
             (257, None, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False, pdl=False,
                              num_warps=2, num_stages=2)),
         )), note="topk 16, max_block 257–1024"),
    Rule(when={"hardware": "sm_90", "topk": 16, "max_block": between(1025, 65534)},
         variant="index_topk_fused", by=Buckets(axis="rows_x_heads", rows=(
             # measured: R1Q1 22.43, R2Q1 33.66 µs
             (1, 2, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False, pdl=False,
                         num_warps=2, num_stages=2)),
             # measured: R1Q4 23.30, R4Q1 50.75 µs
             (3, 4, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False, pdl=False,
                         num_warps=4, num_stages=2)),
             # measured: R2Q4 33.86, R8Q1 80.22 µs
             (5, 8, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False, pdl=False,
                         num_warps=4, num_stages=2)),
             # measured: R4Q4 50.82, R11Q1 102.40, R16Q1 138.91 µs
             (9, 16, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False, pdl=False,
                          num_warps=4, num_stages=2)),
             # measured: R8Q4 80.67, R32Q1 257.41 µs
             (17, 32, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False, pdl=False,
                           num_warps=2, num_stages=2)),
             # measured: R11Q4 103.07, R16Q4 140.29, R64Q1 491.84 µs
             (33, 64, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False, pdl=False,
                           num_warps=4, num_stages=2)),
             # measured: R32Q4 259.49, R128Q1 963.87 µs
             (65, 128, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False, pdl=False,
                            num_warps=2, num_stages=2)),
             # measured: R64Q4 499.39 µs
             (129, 256, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False, pdl=False,
                             num_warps=2, num_stages=2)),
             # measured: R128Q4 978.56 µs
             (257, None, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False, pdl=False,
                              num_warps=2, num_stages=2)),
         )), note="topk 16, max_block 1025–65534"),
    Rule(when={"hardware": "sm_90", "topk": between(1, 15)},
         variant="index_topk_fused", params=_TOPK_DEFAULT_OPTIONS, by=_TOPK_DEFAULT,
         note="general branch (not measured)"),
    Rule(when={"hardware": "sm_90", "topk": between(17, 512)},
         variant="index_topk_fused", params=_TOPK_DEFAULT_OPTIONS, by=_TOPK_DEFAULT,
         note="general branch (not measured)"),
]
