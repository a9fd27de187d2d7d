"""sm_90 launch tables, measured on an H200 by tools/tune.py (see MEASURED).

tools/tune owns this file: rerun `python3 tools/tune.py --out DIR --write-specs` on the
H200 instead of editing it, then `codegen regenerate`. Rows marked `measured` carry the
median µs at the bucket's representatives; the others keep the untuned defaults (router rows
marked `guess` were set by hand for the split-K kernel and await the next tune run).
"""
from codegen.policy import Buckets, Rule, between

MEASURED = dict(
    date="2026-11-29 09:32:59 UTC",
    device="NVIDIA H200",
    torch="2.11.0+cu130",
    triton="3.6.0",
    command="python3 tools/tune.py --write-specs --out /root/out --budget-s 430",
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
        (1, 4, 1, 1024, 8),  # measured: M1 bf16 5.73, M1 fp32 5.82, M4 bf16 6.30, M4 fp32 6.72 µs
        # guess (not measured): split-K, 16 tiles × 8 = 128 programs
        (5, 16, dict(kernel="splitk", block_m=16, block_n=16, block_k=128, split_k=8, num_warps=4,
                     num_stages=2)),
        # guess (not measured): split-K, 16 tiles × 8 = 128 programs
        (17, 32, dict(kernel="splitk", block_m=32, block_n=16, block_k=128, split_k=8, num_warps=4,
                      num_stages=2)),
    )),
    (4096, 8): _router((
        (1, 4, 1, 2048, 16),  # measured: M1 bf16 4.54, M1 fp32 4.35, M4 bf16 4.51, M4 fp32 4.54 µs
        # guess (not measured): split-K, 1 tile × 32 = 32 programs
        (5, 16, dict(kernel="splitk", block_m=16, block_n=16, block_k=128, split_k=32, num_warps=4,
                     num_stages=2)),
        # guess (not measured): split-K, 1 tile × 32 = 32 programs
        (17, 32, dict(kernel="splitk", block_m=32, block_n=16, block_k=128, split_k=32, num_warps=4,
                      num_stages=2)),
    )),
    (4096, 192): _router((
        (1, 4, 4, 4096, 16),  # measured: M1 bf16 6.11, M1 fp32 5.79, M4 bf16 6.59, M4 fp32 6.21 µs
        # guess (not measured): split-K, 12 tiles × 16 = 192 programs
        (5, 16, dict(kernel="splitk", block_m=16, block_n=16, block_k=128, split_k=16, num_warps=4,
                     num_stages=2)),
        # guess (not measured): split-K, 12 tiles × 16 = 192 programs
        (17, 32, dict(kernel="splitk", block_m=32, block_n=16, block_k=128, split_k=16, num_warps=4,
                      num_stages=2)),
    )),
    (6144, 128): _router((
        (1, 4, 1, 2048, 16),  # measured: M1 bf16 5.73, M1 fp32 5.54, M4 bf16 6.18, M4 fp32 6.46 µs
        # guess (not measured): split-K, 8 tiles × 16 = 128 programs
        (5, 16, dict(kernel="splitk", block_m=16, block_n=16, block_k=128, split_k=16, num_warps=4,
                     num_stages=2)),
        # guess (not measured): split-K, 8 tiles × 16 = 128 programs
        (17, 32, dict(kernel="splitk", block_m=32, block_n=16, block_k=128, split_k=16, num_warps=4,
                      num_stages=2)),
    )),
    (6144, 256): _router((
        (1, 4, 1, 1024, 8),  # measured: M1 bf16 7.42, M1 fp32 7.30, M4 bf16 7.71, M4 fp32 7.94 µs
        # guess (not measured): split-K, 16 tiles × 16 = 256 programs
        (5, 16, dict(kernel="splitk", block_m=16, block_n=16, block_k=128, split_k=16, num_warps=4,
                     num_stages=2)),
        # guess (not measured): split-K, 16 tiles × 16 = 256 programs
        (17, 32, dict(kernel="splitk", block_m=32, block_n=16, block_k=128, split_k=16, num_warps=4,
                      num_stages=2)),
    )),
}

# Split-K default grid: kv_chunks = pow2floor(min(256, 512 // R)) (upstream default).
_SPLIT_DEFAULT = Buckets(axis="num_reqs", rows=(
    (1, 2, dict(kv_chunks=256)),
    (3, 4, dict(kv_chunks=128)),
    (5, 8, dict(kv_chunks=64)),
    (9, 16, dict(kv_chunks=32)),
    (17, 32, dict(kv_chunks=16)),
    (33, 64, dict(kv_chunks=8)),
    (65, 128, dict(kv_chunks=4)),
    (129, 256, dict(kv_chunks=2)),
    (257, None, dict(kv_chunks=1)),
))
_SPLIT_DEFAULT_OPTIONS = dict(high_batch=False, num_warps=4, num_stages=3)
# Upstream's general selector branch: topk_chunks = pow2floor(min(16, 64 // (rows·heads))).
_TOPK_DEFAULT = Buckets(axis="rows_x_heads", rows=(
    (1, 4, dict(topk_chunks=16)),
    (5, 8, dict(topk_chunks=8)),
    (9, 16, dict(topk_chunks=4)),
    (17, 32, dict(topk_chunks=2)),
    (33, None, dict(topk_chunks=1)),
))
_TOPK_DEFAULT_OPTIONS = dict(
    topk_tile=512, num_warps=8, num_stages=2, single_tile=False, adaptive_merge=False)

# The measured part of the scorer domain.
_TUNED = {"hardware": "sm_90", "q_dtype": "bf16", "cache_dtype": "bf16",
          "head_dim": 128, "num_heads": 1}

# Decode scorer. Measured: bf16 query and cache, head_dim 128, one index head (H = 1),
# end to end (scores + selection + page-16 table, fixed selector), by Qmax bucket ×
# max_block bucket × request bucket. Everything else: the default split grid, untuned.
# `index_decode_fused` rows (scorer + selector in one launch, max_block ≤ topk_tile) marked
# `guess` were set by hand and await the next tune run.
INDEX_SCORE = [
    Rule(when={**_TUNED, "max_q": 1, "max_block": between(0, 64)},
         variant="index_decode_fused", by=Buckets(axis="num_reqs", rows=(
             # guess (not measured); two kernels measured R1 10.72, R2 11.58 µs
             (1, 2, dict(kv_chunks=64, topk_tile=128, num_warps=4, num_stages=2)),
             # guess (not measured); two kernels measured R4 13.09 µs
             (3, 4, dict(kv_chunks=32, topk_tile=128, num_warps=4, num_stages=2)),
             # guess (not measured); two kernels measured R8 15.90 µs
             (5, 8, dict(kv_chunks=16, topk_tile=128, num_warps=4, num_stages=2)),
             # guess (not measured); two kernels measured R11 18.11 µs
             (9, 11, dict(kv_chunks=16, topk_tile=128, num_warps=4, num_stages=2)),
             # guess (not measured); two kernels measured R16 21.57 µs
             (12, 16, dict(kv_chunks=16, topk_tile=128, num_warps=4, num_stages=2)),
         )), note="fused, bf16 D128 H1, Qmax 1, max_block 0–64"),
    Rule(when={**_TUNED, "max_q": 1, "max_block": between(0, 64)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R32 31.55 µs
             (17, 32, dict(kv_chunks=64, high_batch=False, num_warps=4, num_stages=2)),
             # measured: R64 49.18 µs
             (33, 64, dict(kv_chunks=32, high_batch=False, num_warps=4, num_stages=2)),
             # measured: R128 79.10 µs
             (65, 256, dict(kv_chunks=32, high_batch=False, num_warps=4, num_stages=2)),
             # default (not measured)
             (257, None, dict(kv_chunks=1, high_batch=False, num_warps=4, num_stages=3)),
         )), note="split, bf16 D128 H1, Qmax 1, max_block 0–64"),
    Rule(when={**_TUNED, "max_q": 1, "max_block": between(65, 256)},
         variant="index_decode_fused", by=Buckets(axis="num_reqs", rows=(
             # guess (not measured); two kernels measured R1 13.47, R2 16.16 µs
             (1, 2, dict(kv_chunks=128, topk_tile=256, num_warps=4, num_stages=2)),
             # guess (not measured); two kernels measured R4 21.70 µs
             (3, 4, dict(kv_chunks=64, topk_tile=256, num_warps=4, num_stages=2)),
             # guess (not measured); two kernels measured R8 31.90 µs
             (5, 8, dict(kv_chunks=32, topk_tile=256, num_warps=4, num_stages=2)),
             # guess (not measured); two kernels measured R11 38.62 µs
             (9, 11, dict(kv_chunks=16, topk_tile=256, num_warps=4, num_stages=2)),
             # guess (not measured); two kernels measured R16 49.22 µs
             (12, 16, dict(kv_chunks=16, topk_tile=256, num_warps=4, num_stages=2)),
         )), note="fused, bf16 D128 H1, Qmax 1, max_block 65–256"),
    Rule(when={**_TUNED, "max_q": 1, "max_block": between(65, 256)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R32 79.07 µs
             (17, 32, dict(kv_chunks=128, high_batch=False, num_warps=4, num_stages=2)),
             # measured: R64 138.21 µs
             (33, 64, dict(kv_chunks=64, high_batch=False, num_warps=4, num_stages=2)),
             # measured: R128 256.74 µs
             (65, 256, dict(kv_chunks=32, high_batch=False, num_warps=4, num_stages=3)),
             # default (not measured)
             (257, None, dict(kv_chunks=1, high_batch=False, num_warps=4, num_stages=3)),
         )), note="split, bf16 D128 H1, Qmax 1, max_block 65–256"),
    Rule(when={**_TUNED, "max_q": 1, "max_block": between(257, 65534)},
         variant="index_score_balanced", by=Buckets(axis="num_reqs", rows=(
             # measured: R1 23.71, R2 34.30 µs
             (1, 2, dict(program_budget=528, num_warps=4, num_stages=2)),
             # measured: R4 51.68 µs
             (3, 4, dict(program_budget=528, num_warps=4, num_stages=2)),
         )), note="balanced, bf16 D128 H1, Qmax 1, max_block 257–65534"),
    Rule(when={**_TUNED, "max_q": 1, "max_block": between(257, 65534)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R8 81.60 µs
             (5, 8, dict(kv_chunks=256, high_batch=False, num_warps=4, num_stages=2)),
             # measured: R11 104.42 µs
             (9, 11, dict(kv_chunks=256, high_batch=False, num_warps=4, num_stages=2)),
             # measured: R16 140.58 µs
             (12, 16, dict(kv_chunks=256, high_batch=False, num_warps=4, num_stages=2)),
             # measured: R32 260.03 µs
             (17, 32, dict(kv_chunks=128, high_batch=False, num_warps=4, num_stages=2)),
             # measured: R64 495.87 µs
             (33, 64, dict(kv_chunks=64, high_batch=False, num_warps=4, num_stages=3)),
             # measured: R128 968.00 µs
             (65, 256, dict(kv_chunks=16, high_batch=False, num_warps=4, num_stages=3)),
             # default (not measured)
             (257, None, dict(kv_chunks=1, high_batch=False, num_warps=4, num_stages=3)),
         )), note="split, bf16 D128 H1, Qmax 1, max_block 257–65534"),
    Rule(when={**_TUNED, "max_q": between(2, 8), "max_block": between(0, 64)},
         variant="index_decode_fused", by=Buckets(axis="num_reqs", rows=(
             # guess (not measured); two kernels measured R1 10.69, R2 11.62 (balanced) µs
             (1, 2, dict(kv_chunks=64, topk_tile=128, num_warps=4, num_stages=2)),
             # guess (not measured); two kernels measured R4 13.28 µs
             (3, 4, dict(kv_chunks=32, topk_tile=128, num_warps=4, num_stages=2)),
             # guess (not measured); two kernels measured R8 16.13 (balanced) µs
             (5, 8, dict(kv_chunks=16, topk_tile=128, num_warps=4, num_stages=2)),
             # guess (not measured); two kernels measured R11 18.14 µs
             (9, 11, dict(kv_chunks=16, topk_tile=128, num_warps=4, num_stages=2)),
             # guess (not measured); two kernels measured R16 21.70 µs
             (12, 16, dict(kv_chunks=16, topk_tile=128, num_warps=4, num_stages=2)),
         )), note="fused, bf16 D128 H1, Qmax 2–8, max_block 0–64"),
    Rule(when={**_TUNED, "max_q": between(2, 8), "max_block": between(0, 64)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R32 31.49 µs
             (17, 32, dict(kv_chunks=64, high_batch=False, num_warps=4, num_stages=2)),
             # measured: R64 49.98 µs
             (33, 64, dict(kv_chunks=64, high_batch=False, num_warps=4, num_stages=2)),
             # measured: R128 82.69 µs
             (65, 256, dict(kv_chunks=32, high_batch=False, num_warps=4, num_stages=2)),
             # default (not measured)
             (257, None, dict(kv_chunks=1, high_batch=False, num_warps=4, num_stages=3)),
         )), note="split, bf16 D128 H1, Qmax 2–8, max_block 0–64"),
    Rule(when={**_TUNED, "max_q": between(2, 8), "max_block": between(65, 256)},
         variant="index_decode_fused", by=Buckets(axis="num_reqs", rows=(
             # guess (not measured); two kernels measured R1 13.28, R2 16.32 µs
             (1, 2, dict(kv_chunks=128, topk_tile=256, num_warps=4, num_stages=2)),
             # guess (not measured); two kernels measured R4 21.86 µs
             (3, 4, dict(kv_chunks=64, topk_tile=256, num_warps=4, num_stages=2)),
             # guess (not measured); two kernels measured R8 31.58 µs
             (5, 8, dict(kv_chunks=32, topk_tile=256, num_warps=4, num_stages=2)),
             # guess (not measured); two kernels measured R11 38.69 µs
             (9, 11, dict(kv_chunks=16, topk_tile=256, num_warps=4, num_stages=2)),
             # guess (not measured); two kernels measured R16 49.18 µs
             (12, 16, dict(kv_chunks=16, topk_tile=256, num_warps=4, num_stages=2)),
         )), note="fused, bf16 D128 H1, Qmax 2–8, max_block 65–256"),
    Rule(when={**_TUNED, "max_q": between(2, 8), "max_block": between(65, 256)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R32 79.20 µs
             (17, 32, dict(kv_chunks=64, high_batch=False, num_warps=4, num_stages=2)),
             # measured: R64 139.74 µs
             (33, 64, dict(kv_chunks=64, high_batch=False, num_warps=4, num_stages=2)),
             # measured: R128 260.74 µs
             (65, 256, dict(kv_chunks=32, high_batch=False, num_warps=4, num_stages=2)),
             # default (not measured)
             (257, None, dict(kv_chunks=1, high_batch=False, num_warps=4, num_stages=3)),
         )), note="split, bf16 D128 H1, Qmax 2–8, max_block 65–256"),
    Rule(when={**_TUNED, "max_q": between(2, 8), "max_block": between(257, 65534)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R1 24.00, R2 34.30 µs
             (1, 2, dict(kv_chunks=128, high_batch=False, num_warps=4, num_stages=3)),
         )), note="split, bf16 D128 H1, Qmax 2–8, max_block 257–65534"),
    Rule(when={**_TUNED, "max_q": between(2, 8), "max_block": between(257, 65534)},
         variant="index_score_balanced", by=Buckets(axis="num_reqs", rows=(
             # measured: R4 51.94 µs
             (3, 4, dict(program_budget=1056, num_warps=4, num_stages=2)),
         )), note="balanced, bf16 D128 H1, Qmax 2–8, max_block 257–65534"),
    Rule(when={**_TUNED, "max_q": between(2, 8), "max_block": between(257, 65534)},
         variant="index_score_split", by=Buckets(axis="num_reqs", rows=(
             # measured: R8 82.34 µs
             (5, 8, dict(kv_chunks=256, high_batch=False, num_warps=4, num_stages=2)),
             # measured: R11 105.22 µs
             (9, 11, dict(kv_chunks=32, high_batch=False, num_warps=4, num_stages=2)),
             # measured: R16 142.05 µs
             (12, 16, dict(kv_chunks=256, high_batch=False, num_warps=4, num_stages=2)),
             # measured: R32 261.47 µs
             (17, 32, dict(kv_chunks=128, high_batch=False, num_warps=4, num_stages=2)),
             # measured: R64 500.54 µs
             (33, 64, dict(kv_chunks=64, high_batch=False, num_warps=4, num_stages=3)),
             # measured: R128 985.70 µs
             (65, 256, dict(kv_chunks=16, high_batch=False, num_warps=4, num_stages=3)),
             # default (not measured)
             (257, None, dict(kv_chunks=1, high_batch=False, num_warps=4, num_stages=3)),
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
             # measured: R1Q1 9.73, R2Q1 10.62 µs
             (1, 2, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False,
                         num_warps=4, num_stages=2)),
             # measured: R1Q4 9.57, R4Q1 12.19 µs
             (3, 4, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False,
                         num_warps=8, num_stages=2)),
             # measured: R2Q4 10.66, R8Q1 14.75 µs
             (5, 8, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False,
                         num_warps=4, num_stages=2)),
             # measured: R4Q4 12.13, R11Q1 17.15, R16Q1 20.67 µs
             (9, 16, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False,
                          num_warps=8, num_stages=2)),
             # measured: R8Q4 15.01, R32Q1 31.14 µs
             (17, 32, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False,
                           num_warps=8, num_stages=2)),
             # measured: R11Q4 16.86, R16Q4 20.61, R64Q1 48.19 µs
             (33, 64, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False,
                           num_warps=8, num_stages=2)),
             # measured: R32Q4 30.69, R128Q1 77.86 µs
             (65, 128, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False,
                            num_warps=8, num_stages=2)),
             # measured: R64Q4 47.84 µs
             (129, 256, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False,
                             num_warps=4, num_stages=2)),
             # measured: R128Q4 78.50 µs
             (257, None, dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False,
                              num_warps=4, num_stages=2)),
         )), note="topk 16, max_block 0–64"),
    Rule(when={"hardware": "sm_90", "topk": 16, "max_block": between(65, 256)},
         variant="index_topk_fused", by=Buckets(axis="rows_x_heads", rows=(
             # measured: R1Q1 13.38, R2Q1 16.19 µs
             (1, 2, dict(topk_chunks=1, topk_tile=512, single_tile=True, adaptive_merge=False,
                         num_warps=8, num_stages=2)),
             # measured: R1Q4 13.15, R4Q1 21.02 µs
             (3, 4, dict(topk_chunks=1, topk_tile=512, single_tile=True, adaptive_merge=False,
                         num_warps=8, num_stages=2)),
             # measured: R2Q4 15.84, R8Q1 31.36 µs
             (5, 8, dict(topk_chunks=1, topk_tile=512, single_tile=True, adaptive_merge=False,
                         num_warps=8, num_stages=2)),
             # measured: R4Q4 21.41, R11Q1 38.43, R16Q1 48.96 µs
             (9, 16, dict(topk_chunks=1, topk_tile=512, single_tile=True, adaptive_merge=False,
                          num_warps=8, num_stages=2)),
             # measured: R8Q4 31.42, R32Q1 78.91 µs
             (17, 32, dict(topk_chunks=1, topk_tile=512, single_tile=True, adaptive_merge=False,
                           num_warps=8, num_stages=2)),
             # measured: R11Q4 38.30, R16Q4 49.31, R64Q1 137.89 µs
             (33, 64, dict(topk_chunks=1, topk_tile=512, single_tile=True, adaptive_merge=False,
                           num_warps=8, num_stages=2)),
             # measured: R32Q4 79.58, R128Q1 256.13 µs
             (65, 128, dict(topk_chunks=1, topk_tile=512, single_tile=True, adaptive_merge=False,
                            num_warps=8, num_stages=2)),
             # measured: R64Q4 139.68 µs
             (129, 256, dict(topk_chunks=1, topk_tile=128, single_tile=False, adaptive_merge=False,
                             num_warps=8, num_stages=2)),
             # measured: R128Q4 259.68 µs
             (257, None, dict(topk_chunks=1, topk_tile=128, single_tile=False, adaptive_merge=False,
                              num_warps=2, num_stages=2)),
         )), note="topk 16, max_block 65–256"),
    Rule(when={"hardware": "sm_90", "topk": 16, "max_block": between(257, 1024)},
         variant="index_topk_fused", by=Buckets(axis="rows_x_heads", rows=(
             # measured: R1Q1 22.85, R2Q1 32.93 µs
             (1, 2, dict(topk_chunks=8, topk_tile=128, single_tile=True, adaptive_merge=False,
                         num_warps=4, num_stages=2)),
             # measured: R1Q4 22.91, R4Q1 51.07 µs
             (3, 4, dict(topk_chunks=8, topk_tile=128, single_tile=True, adaptive_merge=False,
                         num_warps=2, num_stages=2)),
             # measured: R2Q4 33.18, R8Q1 80.35 µs
             (5, 8, dict(topk_chunks=8, topk_tile=128, single_tile=True, adaptive_merge=False,
                         num_warps=4, num_stages=2)),
             # measured: R4Q4 50.85, R11Q1 103.55, R16Q1 140.00 µs
             (9, 16, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                          num_warps=4, num_stages=2)),
             # measured: R8Q4 80.54, R32Q1 258.59 µs
             (17, 32, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                           num_warps=2, num_stages=2)),
             # measured: R11Q4 104.19, R16Q4 140.16, R64Q1 494.53 µs
             (33, 64, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                           num_warps=2, num_stages=2)),
             # measured: R32Q4 260.64, R128Q1 967.49 µs
             (65, 128, dict(topk_chunks=8, topk_tile=128, single_tile=True, adaptive_merge=False,
                            num_warps=2, num_stages=2)),
             # measured: R64Q4 499.94 µs
             (129, 256, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                             num_warps=2, num_stages=2)),
             # measured: R128Q4 983.36 µs
             (257, None, dict(topk_chunks=8, topk_tile=128, single_tile=True, adaptive_merge=False,
                              num_warps=2, num_stages=2)),
         )), note="topk 16, max_block 257–1024"),
    Rule(when={"hardware": "sm_90", "topk": 16, "max_block": between(1025, 65534)},
         variant="index_topk_fused", by=Buckets(axis="rows_x_heads", rows=(
             # measured: R1Q1 22.72, R2Q1 33.31 µs
             (1, 2, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                         num_warps=4, num_stages=2)),
             # measured: R1Q4 22.98, R4Q1 51.42 µs
             (3, 4, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                         num_warps=4, num_stages=2)),
             # measured: R2Q4 33.41, R8Q1 80.26 µs
             (5, 8, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                         num_warps=4, num_stages=2)),
             # measured: R4Q4 50.98, R11Q1 103.62, R16Q1 139.65 µs
             (9, 16, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                          num_warps=2, num_stages=2)),
             # measured: R8Q4 80.54, R32Q1 258.59 µs
             (17, 32, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                           num_warps=2, num_stages=2)),
             # measured: R11Q4 104.19, R16Q4 140.16, R64Q1 494.53 µs
             (33, 64, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                           num_warps=2, num_stages=2)),
             # measured: R32Q4 261.25, R128Q1 966.46 µs
             (65, 128, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                            num_warps=2, num_stages=2)),
             # measured: R64Q4 499.94 µs
             (129, 256, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                             num_warps=2, num_stages=2)),
             # measured: R128Q4 983.84 µs
             (257, None, dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=False,
                              num_warps=2, num_stages=2)),
         )), note="topk 16, max_block 1025–65534"),
    Rule(when={"hardware": "sm_90", "topk": between(1, 15)},
         variant="index_topk_fused", params=_TOPK_DEFAULT_OPTIONS, by=_TOPK_DEFAULT,
         note="general branch (not measured)"),
    Rule(when={"hardware": "sm_90", "topk": between(17, 512)},
         variant="index_topk_fused", params=_TOPK_DEFAULT_OPTIONS, by=_TOPK_DEFAULT,
         note="general branch (not measured)"),
]
