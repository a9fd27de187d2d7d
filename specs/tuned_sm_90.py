"""sm_90 launch tables, measured by tools/tune.py (device and versions: MEASURED).

tools/tune owns this file: rerun `python3 tools/tune.py --out DIR --write-specs` on a
sm_90 device instead of editing it, then `codegen regenerate`. Rows marked `measured`
carry the median µs at the bucket's representatives; the others keep the untuned defaults.
HARDWARE's aliases and description are the exception: edit them here, a re-tune keeps them.
"""
from codegen.model import Hardware
from codegen.policy import Buckets, Rule, between

from .defaults import (DEFAULT_SPLIT, GENERAL_TOPK, GENERAL_TOPK_OPTIONS,
                       UNTUNED_SPLIT_OPTIONS)

HARDWARE = Hardware(name="sm_90", vendor="nvidia", capability=(9, 0),
                    aliases=("sm90", "h100", "h200", "hopper"),
                    description="NVIDIA Hopper (H100/H200); policies measured by tools/tune.py")

MEASURED = dict(
    router_tables="kept from the tune of 2026-11-29 13:09:45 UTC (python3 tools/tune.py --sections router --write-specs --out /root/out --budget-s 280)",
    date="2026-11-29 13:45:49 UTC",
    device="NVIDIA H200",
    torch="2.11.0+cu130",
    triton="3.6.0",
    l2_flush="read",
    command="python3 tools/tune.py --write-specs --sections scorer,selector --out /root/out",
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
             # measured: R1 7.62, R2 8.38 µs
             (1, 2, dict(kv_chunks=64, high_batch=False, static_chunks=True, num_warps=4,
                         num_stages=3)),
             # measured: R4 9.66 µs
             (3, 4, dict(kv_chunks=64, high_batch=False, static_chunks=True, num_warps=4,
                         num_stages=2)),
         )), note="split, bf16 D128 H1, Qmax 1, max_block 0–64"),
    Rule(when={**_TUNED, "max_q": 1, "max_block": between(0, 64)},
         variant="index_score_balanced", by=Buckets(axis="num_reqs", rows=(
             # measured: R8 12.16 µs
             (5, 8, dict(program_budget=528, num_warps=4, num_stages=2)),
         )), note="balanced, bf16 D128 H1, Qmax 1, max_block 0–64"),
    Rule(when={**_TUNED, "max_q": 1, "max_block": between(0, 64)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R11 13.57 µs
             (9, 11, dict(kv_chunks=16, high_batch=False, static_chunks=False, num_warps=8,
                          num_stages=3)),
             # measured: R16 15.42 µs
             (12, 16, dict(kv_chunks=16, high_batch=False, static_chunks=False, num_warps=4,
                           num_stages=3)),
             # measured: R32 23.39 µs
             (17, 32, dict(kv_chunks=16, high_batch=False, static_chunks=True, num_warps=4,
                           num_stages=2)),
             # measured: R64 38.98 µs
             (33, 64, dict(kv_chunks=8, high_batch=False, static_chunks=False, num_warps=4,
                           num_stages=2)),
             # measured: R128 69.15 µs
             (65, 256, dict(kv_chunks=32, high_batch=False, static_chunks=True, num_warps=4,
                            num_stages=2)),
             # default (not measured)
             (257, None, dict(kv_chunks=1, high_batch=False, static_chunks=False, num_warps=4,
                              num_stages=3)),
         )), note="split, bf16 D128 H1, Qmax 1, max_block 0–64"),
    Rule(when={**_TUNED, "max_q": 1, "max_block": between(65, 256)},
         variant="index_decode_fused", by=Buckets(axis="num_reqs", rows=(
             # measured: R1 10.72, R2 12.83 µs
             (1, 2, dict(kv_chunks=256, topk_tile=256, num_warps=4, num_stages=2)),
         )), note="fused, bf16 D128 H1, Qmax 1, max_block 65–256"),
    Rule(when={**_TUNED, "max_q": 1, "max_block": between(65, 256)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R4 15.90 µs
             (3, 4, dict(kv_chunks=128, high_batch=False, static_chunks=False, num_warps=4,
                         num_stages=2)),
             # measured: R8 23.97 µs
             (5, 8, dict(kv_chunks=64, high_batch=False, static_chunks=True, num_warps=4,
                         num_stages=2)),
             # measured: R11 30.40 µs
             (9, 11, dict(kv_chunks=128, high_batch=False, static_chunks=False, num_warps=4,
                          num_stages=2)),
         )), note="split, bf16 D128 H1, Qmax 1, max_block 65–256"),
    Rule(when={**_TUNED, "max_q": 1, "max_block": between(65, 256)},
         variant="index_decode_fused", by=Buckets(axis="num_reqs", rows=(
             # measured: R16 39.62 µs
             (12, 16, dict(kv_chunks=32, topk_tile=256, num_warps=4, num_stages=2)),
         )), note="fused, bf16 D128 H1, Qmax 1, max_block 65–256"),
    Rule(when={**_TUNED, "max_q": 1, "max_block": between(65, 256)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R32 70.05 µs
             (17, 32, dict(kv_chunks=8, high_batch=False, static_chunks=True, num_warps=4,
                           num_stages=3)),
             # measured: R64 129.41 µs
             (33, 64, dict(kv_chunks=128, high_batch=False, static_chunks=True, num_warps=4,
                           num_stages=2)),
             # measured: R128 247.36 µs
             (65, 256, dict(kv_chunks=64, high_batch=False, static_chunks=True, num_warps=4,
                            num_stages=2)),
             # default (not measured)
             (257, None, dict(kv_chunks=1, high_batch=False, static_chunks=False, num_warps=4,
                              num_stages=3)),
         )), note="split, bf16 D128 H1, Qmax 1, max_block 65–256"),
    Rule(when={**_TUNED, "max_q": 1, "max_block": between(257, 65534)},
         variant="index_score_balanced", by=Buckets(axis="num_reqs", rows=(
             # measured: R1 17.44, R2 26.59 µs
             (1, 2, dict(program_budget=264, num_warps=4, num_stages=3)),
         )), note="balanced, bf16 D128 H1, Qmax 1, max_block 257–65534"),
    Rule(when={**_TUNED, "max_q": 1, "max_block": between(257, 65534)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R4 40.96 µs
             (3, 4, dict(kv_chunks=512, high_batch=False, static_chunks=True, num_warps=4,
                         num_stages=2)),
             # measured: R8 70.72 µs
             (5, 8, dict(kv_chunks=512, high_batch=False, static_chunks=True, num_warps=4,
                         num_stages=2)),
             # measured: R11 92.77 µs
             (9, 11, dict(kv_chunks=512, high_batch=False, static_chunks=False, num_warps=4,
                          num_stages=2)),
             # measured: R16 129.34 µs
             (12, 16, dict(kv_chunks=512, high_batch=False, static_chunks=True, num_warps=4,
                           num_stages=2)),
             # measured: R32 247.68 µs
             (17, 32, dict(kv_chunks=256, high_batch=False, static_chunks=True, num_warps=4,
                           num_stages=2)),
             # measured: R64 483.33 µs
             (33, 64, dict(kv_chunks=128, high_batch=False, static_chunks=True, num_warps=4,
                           num_stages=3)),
             # measured: R128 955.30 µs
             (65, 256, dict(kv_chunks=64, high_batch=False, static_chunks=False, num_warps=4,
                            num_stages=3)),
             # default (not measured)
             (257, None, dict(kv_chunks=1, high_batch=False, static_chunks=False, num_warps=4,
                              num_stages=3)),
         )), note="split, bf16 D128 H1, Qmax 1, max_block 257–65534"),
    Rule(when={**_TUNED, "max_q": between(2, 8), "max_block": between(0, 64)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R1 7.68, R2 8.19 µs
             (1, 2, dict(kv_chunks=64, high_batch=False, static_chunks=True, num_warps=4,
                         num_stages=2)),
             # measured: R4 9.73 µs
             (3, 4, dict(kv_chunks=64, high_batch=False, static_chunks=True, num_warps=4,
                         num_stages=2)),
             # measured: R8 11.97 µs
             (5, 8, dict(kv_chunks=64, high_batch=False, static_chunks=False, num_warps=4,
                         num_stages=2)),
         )), note="split, bf16 D128 H1, Qmax 2–8, max_block 0–64"),
    Rule(when={**_TUNED, "max_q": between(2, 8), "max_block": between(0, 64)},
         variant="index_score_balanced", by=Buckets(axis="num_reqs", rows=(
             # measured: R11 13.79 µs
             (9, 11, dict(program_budget=264, num_warps=4, num_stages=2)),
         )), note="balanced, bf16 D128 H1, Qmax 2–8, max_block 0–64"),
    Rule(when={**_TUNED, "max_q": between(2, 8), "max_block": between(0, 64)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R16 15.55 µs
             (12, 16, dict(kv_chunks=16, high_batch=False, static_chunks=False, num_warps=4,
                           num_stages=3)),
             # measured: R32 23.58 µs
             (17, 32, dict(kv_chunks=16, high_batch=False, static_chunks=False, num_warps=4,
                           num_stages=2)),
             # measured: R64 38.37 µs
             (33, 64, dict(kv_chunks=8, high_batch=False, static_chunks=False, num_warps=4,
                           num_stages=2)),
             # measured: R128 69.66 µs
             (65, 256, dict(kv_chunks=32, high_batch=False, static_chunks=False, num_warps=4,
                            num_stages=2)),
             # default (not measured)
             (257, None, dict(kv_chunks=1, high_batch=False, static_chunks=False, num_warps=4,
                              num_stages=3)),
         )), note="split, bf16 D128 H1, Qmax 2–8, max_block 0–64"),
    Rule(when={**_TUNED, "max_q": between(2, 8), "max_block": between(65, 256)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R1 10.30, R2 13.02 µs
             (1, 2, dict(kv_chunks=256, high_batch=False, static_chunks=True, num_warps=4,
                         num_stages=2)),
         )), note="split, bf16 D128 H1, Qmax 2–8, max_block 65–256"),
    Rule(when={**_TUNED, "max_q": between(2, 8), "max_block": between(65, 256)},
         variant="index_score_balanced", by=Buckets(axis="num_reqs", rows=(
             # measured: R4 16.16 µs
             (3, 4, dict(program_budget=528, num_warps=4, num_stages=2)),
         )), note="balanced, bf16 D128 H1, Qmax 2–8, max_block 65–256"),
    Rule(when={**_TUNED, "max_q": between(2, 8), "max_block": between(65, 256)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R8 24.70 µs
             (5, 8, dict(kv_chunks=64, high_batch=False, static_chunks=False, num_warps=4,
                         num_stages=2)),
         )), note="split, bf16 D128 H1, Qmax 2–8, max_block 65–256"),
    Rule(when={**_TUNED, "max_q": between(2, 8), "max_block": between(65, 256)},
         variant="index_score_balanced", by=Buckets(axis="num_reqs", rows=(
             # measured: R11 32.06 µs
             (9, 11, dict(program_budget=264, num_warps=4, num_stages=3)),
         )), note="balanced, bf16 D128 H1, Qmax 2–8, max_block 65–256"),
    Rule(when={**_TUNED, "max_q": between(2, 8), "max_block": between(65, 256)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R16 40.86 µs
             (12, 16, dict(kv_chunks=32, high_batch=False, static_chunks=False, num_warps=4,
                           num_stages=2)),
             # measured: R32 71.01 µs
             (17, 32, dict(kv_chunks=128, high_batch=False, static_chunks=False, num_warps=4,
                           num_stages=2)),
             # measured: R64 130.78 µs
             (33, 64, dict(kv_chunks=128, high_batch=False, static_chunks=False, num_warps=4,
                           num_stages=2)),
             # measured: R128 250.66 µs
             (65, 256, dict(kv_chunks=64, high_batch=False, static_chunks=True, num_warps=4,
                            num_stages=3)),
             # default (not measured)
             (257, None, dict(kv_chunks=1, high_batch=False, static_chunks=False, num_warps=4,
                              num_stages=3)),
         )), note="split, bf16 D128 H1, Qmax 2–8, max_block 65–256"),
    Rule(when={**_TUNED, "max_q": between(2, 8), "max_block": between(257, 65534)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R1 18.50, R2 27.14 µs
             (1, 2, dict(kv_chunks=512, high_batch=False, static_chunks=False, num_warps=4,
                         num_stages=2)),
             # measured: R4 41.18 µs
             (3, 4, dict(kv_chunks=64, high_batch=False, static_chunks=False, num_warps=2,
                         num_stages=3)),
             # measured: R8 71.68 µs
             (5, 8, dict(kv_chunks=512, high_batch=False, static_chunks=False, num_warps=4,
                         num_stages=2)),
             # measured: R11 93.79 µs
             (9, 11, dict(kv_chunks=512, high_batch=False, static_chunks=False, num_warps=4,
                          num_stages=2)),
             # measured: R16 131.52 µs
             (12, 16, dict(kv_chunks=512, high_batch=False, static_chunks=False, num_warps=4,
                           num_stages=2)),
             # measured: R32 250.88 µs
             (17, 32, dict(kv_chunks=256, high_batch=False, static_chunks=False, num_warps=4,
                           num_stages=3)),
             # measured: R64 489.66 µs
             (33, 64, dict(kv_chunks=128, high_batch=False, static_chunks=False, num_warps=4,
                           num_stages=3)),
             # measured: R128 969.66 µs
             (65, 256, dict(kv_chunks=64, high_batch=False, static_chunks=False, num_warps=2,
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
             # measured: R1Q1 7.78, R2Q1 8.22 µs
             (1, 2, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False,
                         pdl=True, num_warps=4, num_stages=2)),
             # measured: R1Q4 7.87, R4Q1 9.92 µs
             (3, 4, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False,
                         pdl=True, num_warps=2, num_stages=2)),
             # measured: R2Q4 8.22, R8Q1 12.16 µs
             (5, 8, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False,
                         pdl=True, num_warps=2, num_stages=2)),
             # measured: R4Q4 9.79, R11Q1 14.14, R16Q1 15.49 µs
             (9, 16, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False,
                          pdl=True, num_warps=4, num_stages=2)),
             # measured: R8Q4 12.06, R32Q1 23.55 µs
             (17, 32, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False,
                           pdl=True, num_warps=2, num_stages=2)),
             # measured: R11Q4 13.79, R16Q4 15.81, R64Q1 38.88 µs
             (33, 64, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False,
                           pdl=True, num_warps=8, num_stages=2)),
             # measured: R32Q4 23.39, R128Q1 69.09 µs
             (65, 128, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False,
                            pdl=True, num_warps=4, num_stages=2)),
             # measured: R64Q4 38.59 µs
             (129, 256, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False,
                             pdl=True, num_warps=4, num_stages=2)),
             # measured: R128Q4 69.57 µs
             (257, None, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False,
                              pdl=False, num_warps=2, num_stages=2)),
         )), note="topk 16, max_block 0–64"),
    Rule(when={"hardware": "sm_90", "topk": 16, "max_block": between(65, 256)},
         variant="index_topk_fused", by=Buckets(axis="rows_x_heads", rows=(
             # measured: R1Q1 10.75, R2Q1 12.51 µs
             (1, 2, dict(topk_chunks=1, topk_tile=512, single_tile=True, adaptive_merge=False,
                         pdl=True, num_warps=8, num_stages=2)),
             # measured: R1Q4 10.34, R4Q1 16.10 µs
             (3, 4, dict(topk_chunks=1, topk_tile=512, single_tile=True, adaptive_merge=False,
                         pdl=True, num_warps=8, num_stages=2)),
             # measured: R2Q4 12.96, R8Q1 24.64 µs
             (5, 8, dict(topk_chunks=1, topk_tile=512, single_tile=True, adaptive_merge=False,
                         pdl=True, num_warps=8, num_stages=2)),
             # measured: R4Q4 16.45, R11Q1 31.26, R16Q1 39.39 µs
             (9, 16, dict(topk_chunks=1, topk_tile=512, single_tile=True, adaptive_merge=False,
                          pdl=True, num_warps=8, num_stages=2)),
             # measured: R8Q4 25.09, R32Q1 70.66 µs
             (17, 32, dict(topk_chunks=1, topk_tile=128, single_tile=False, adaptive_merge=False,
                           pdl=True, num_warps=8, num_stages=2)),
             # measured: R11Q4 29.98, R16Q4 40.90, R64Q1 130.43 µs
             (33, 64, dict(topk_chunks=1, topk_tile=512, single_tile=True, adaptive_merge=False,
                           pdl=True, num_warps=8, num_stages=2)),
             # measured: R32Q4 70.94, R128Q1 247.14 µs
             (65, 128, dict(topk_chunks=1, topk_tile=512, single_tile=True, adaptive_merge=False,
                            pdl=False, num_warps=8, num_stages=2)),
             # measured: R64Q4 131.26 µs
             (129, 256, dict(topk_chunks=1, topk_tile=512, single_tile=True, adaptive_merge=False,
                             pdl=False, num_warps=8, num_stages=2)),
             # measured: R128Q4 250.66 µs
             (257, None, dict(topk_chunks=1, topk_tile=128, single_tile=False, adaptive_merge=False,
                              pdl=False, num_warps=2, num_stages=2)),
         )), note="topk 16, max_block 65–256"),
    Rule(when={"hardware": "sm_90", "topk": 16, "max_block": between(257, 1024)},
         variant="index_topk_fused", by=Buckets(axis="rows_x_heads", rows=(
             # measured: R1Q1 17.82, R2Q1 26.05 µs
             (1, 2, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                         pdl=True, num_warps=2, num_stages=2)),
             # measured: R1Q4 17.86, R4Q1 40.58 µs
             (3, 4, dict(topk_chunks=8, topk_tile=128, single_tile=True, adaptive_merge=False,
                         pdl=True, num_warps=4, num_stages=2)),
             # measured: R2Q4 26.08, R8Q1 70.46 µs
             (5, 8, dict(topk_chunks=8, topk_tile=128, single_tile=True, adaptive_merge=False,
                         pdl=True, num_warps=4, num_stages=2)),
             # measured: R4Q4 41.63, R11Q1 93.31, R16Q1 129.28 µs
             (9, 16, dict(topk_chunks=8, topk_tile=128, single_tile=True, adaptive_merge=False,
                          pdl=True, num_warps=4, num_stages=2)),
             # measured: R8Q4 71.78, R32Q1 247.52 µs
             (17, 32, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                           pdl=True, num_warps=4, num_stages=2)),
             # measured: R11Q4 93.57, R16Q4 131.84, R64Q1 483.62 µs
             (33, 64, dict(topk_chunks=8, topk_tile=128, single_tile=True, adaptive_merge=True,
                           pdl=True, num_warps=4, num_stages=2)),
             # measured: R32Q4 250.94, R128Q1 955.30 µs
             (65, 128, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=True,
                            pdl=True, num_warps=4, num_stages=2)),
             # measured: R64Q4 489.79 µs
             (129, 256, dict(topk_chunks=8, topk_tile=128, single_tile=True, adaptive_merge=False,
                             pdl=True, num_warps=2, num_stages=2)),
             # measured: R128Q4 969.86 µs
             (257, None, dict(topk_chunks=8, topk_tile=128, single_tile=True, adaptive_merge=False,
                              pdl=True, num_warps=2, num_stages=2)),
         )), note="topk 16, max_block 257–1024"),
    Rule(when={"hardware": "sm_90", "topk": 16, "max_block": between(1025, 65534)},
         variant="index_topk_fused", by=Buckets(axis="rows_x_heads", rows=(
             # measured: R1Q1 17.82, R2Q1 26.05 µs
             (1, 2, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                         pdl=True, num_warps=2, num_stages=2)),
             # measured: R1Q4 18.05, R4Q1 40.42 µs
             (3, 4, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=True,
                         pdl=True, num_warps=4, num_stages=2)),
             # measured: R2Q4 26.78, R8Q1 70.88 µs
             (5, 8, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                         pdl=True, num_warps=4, num_stages=2)),
             # measured: R4Q4 42.11, R11Q1 93.02, R16Q1 129.15 µs
             (9, 16, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=True,
                          pdl=True, num_warps=4, num_stages=2)),
             # measured: R8Q4 71.78, R32Q1 247.52 µs
             (17, 32, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                           pdl=True, num_warps=4, num_stages=2)),
             # measured: R11Q4 94.02, R16Q4 131.39, R64Q1 483.58 µs
             (33, 64, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=True,
                           pdl=True, num_warps=4, num_stages=2)),
             # measured: R32Q4 250.69, R128Q1 955.68 µs
             (65, 128, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                            pdl=True, num_warps=4, num_stages=2)),
             # measured: R64Q4 489.79 µs
             (129, 256, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                             pdl=True, num_warps=2, num_stages=2)),
             # measured: R128Q4 970.56 µs
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
