"""Reference launch policy for the MiniMax-M3 index decode kernels (docs/KERNELS.md §8.1-§8.3),
written as the upstream formulas, independently of specs/: the generated dispatch tables must
give identical results for gfx950 and generic (tests/test_index_topk.py sweeps them). ``hardware`` is a normalized arch string: "gfx950" selects the
gfx950 rows; every other value ("sm_90", "generic", ...) takes the non-gfx950 branches.
"""
from __future__ import annotations

import torch

# the targets the reference knows (it only tells gfx950 from the others)
HARDWARE = ("gfx950", "sm_90", "generic")

# §8.1 balanced scorer
DECODE_SCORE_BALANCED_PROGRAM_BUDGET = 1024
DECODE_SCORE_HIGH_BATCH_PROGRAM_BUDGET = 768
MAX_DECODE_SCORE_BALANCED_FULL_BUDGET_REQUESTS = 8
MAX_DECODE_SCORE_BALANCED_REQUESTS = 11
BALANCED_SCORER_NUM_WARPS = 2
BALANCED_SCORER_NUM_STAGES = 1
# §8.2 split-K scorer
MIN_DECODE_SCORE_GFX950_HIGH_BATCH_REQUESTS = 20
MAX_DECODE_SCORE_GFX950_HIGH_BATCH_REQUESTS = 64
DECODE_SCORE_DEFAULT_TARGET_GRID = 512
DECODE_SCORE_GFX950_HIGH_BATCH_TARGET_GRID = 1024
MAX_DECODE_SCORE_KV_CHUNKS = 256
# §8.3 fused top-k selector
DECODE_TOPK_FAST_TOPK = 16
DECODE_TOPK_SMALL_MAX_BLOCK = 128
DECODE_TOPK_BLOCKS_PER_CHUNK = 512
MAX_DECODE_TOPK_FAST_CHUNKS = 16
DECODE_TOPK_TARGET_GRID = 64

_DTYPE_NAMES = {
    torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32",
    torch.float8_e4m3fn: "fp8_e4m3",
}
_DTYPE_ALIASES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32",
                  "float": "fp32", "float8_e4m3fn": "fp8_e4m3", "fp8": "fp8_e4m3"}


def dtype_name(dtype) -> str:
    """Canonical short name of a torch dtype or dtype string ("bf16", "fp16", ...)."""
    if isinstance(dtype, torch.dtype):
        return _DTYPE_NAMES.get(dtype, str(dtype).replace("torch.", ""))
    name = str(dtype).replace("torch.", "")
    return _DTYPE_ALIASES.get(name, name)


def pow2floor(x: int) -> int:
    return 1 << (int(x).bit_length() - 1)


def _balanced_eligible(head_dim, q_dtype, cache_dtype, hardware) -> bool:
    return (hardware == "gfx950" and head_dim == 128 and dtype_name(q_dtype) == "bf16"
            and dtype_name(cache_dtype) == "bf16")


def balanced_program_budget(num_reqs):
    """§8.1 budget by request count alone (None outside 1..11)."""
    if 1 <= num_reqs <= MAX_DECODE_SCORE_BALANCED_FULL_BUDGET_REQUESTS:
        return DECODE_SCORE_BALANCED_PROGRAM_BUDGET
    if MAX_DECODE_SCORE_BALANCED_FULL_BUDGET_REQUESTS < num_reqs <= MAX_DECODE_SCORE_BALANCED_REQUESTS:
        return DECODE_SCORE_HIGH_BATCH_PROGRAM_BUDGET
    return None


def decode_score_program_budget(num_reqs, head_dim, q_dtype, cache_dtype, hardware):
    """§8.1: program budget of the balanced scorer, or None (use the split-K scorer)."""
    if not _balanced_eligible(head_dim, q_dtype, cache_dtype, hardware):
        return None
    return balanced_program_budget(num_reqs)


def decode_score_split_launch_policy(num_reqs, head_dim, q_dtype, cache_dtype, hardware):
    """§8.2: (kv_chunks, high_batch) of the split-K scorer."""
    high_batch = (_balanced_eligible(head_dim, q_dtype, cache_dtype, hardware)
                  and MIN_DECODE_SCORE_GFX950_HIGH_BATCH_REQUESTS <= num_reqs
                  <= MAX_DECODE_SCORE_GFX950_HIGH_BATCH_REQUESTS)
    target = DECODE_SCORE_GFX950_HIGH_BATCH_TARGET_GRID if high_batch \
        else DECODE_SCORE_DEFAULT_TARGET_GRID
    chunks = pow2floor(max(1, min(MAX_DECODE_SCORE_KV_CHUNKS, target // max(1, num_reqs))))
    return chunks, high_batch


def decode_score_split_launch_options(num_heads, max_decode_query_len, high_batch):
    """§8.2 kernel options (num_warps, num_stages); (None, None) = backend defaults."""
    if num_heads > 1 and max_decode_query_len > 1:
        return 4, 2
    if high_batch:
        return 2, 1
    return None, None


def decode_topk_launch_policy(max_block, total_q, num_heads, topk, hardware):
    """§8.3: (chunks, block_k, num_warps, num_stages, single_tile, adaptive_merge)."""
    if hardware == "gfx950" and topk == DECODE_TOPK_FAST_TOPK:
        if 1 <= max_block <= DECODE_TOPK_SMALL_MAX_BLOCK:
            return 1, 128, 2, 1, True, True
        if DECODE_TOPK_SMALL_MAX_BLOCK < max_block <= \
                MAX_DECODE_TOPK_FAST_CHUNKS * DECODE_TOPK_BLOCKS_PER_CHUNK:
            return MAX_DECODE_TOPK_FAST_CHUNKS, DECODE_TOPK_BLOCKS_PER_CHUNK, 4, 2, True, True
    chunks = pow2floor(max(1, min(MAX_DECODE_TOPK_FAST_CHUNKS,
                                  DECODE_TOPK_TARGET_GRID // max(1, total_q * num_heads))))
    return chunks, DECODE_TOPK_BLOCKS_PER_CHUNK, 8, 2, False, False


def explain_index_decode(hardware, q_dtype, cache_dtype, head_dim, num_reqs, max_block, total_q,
                         num_heads, topk, max_decode_query_len) -> dict:
    """Every launch decision of one index_decode call, as a flat dict.

    "scorer" is "balanced" when §8.1 gives a budget (then "kv_chunks" is None and "high_batch"
    False), else "split" (then "program_budget" is None). "num_warps"/"num_stages" are the scorer
    options (None = backend default); "topk_*" describe the fused selector (§8.3).
    """
    if hardware not in HARDWARE:
        raise ValueError(f"hardware must be one of {HARDWARE}, got {hardware!r}")
    budget = decode_score_program_budget(num_reqs, head_dim, q_dtype, cache_dtype, hardware)
    if budget is not None:
        scorer, kv_chunks, high_batch = "balanced", None, False
        num_warps, num_stages = BALANCED_SCORER_NUM_WARPS, BALANCED_SCORER_NUM_STAGES
    else:
        scorer = "split"
        kv_chunks, high_batch = decode_score_split_launch_policy(
            num_reqs, head_dim, q_dtype, cache_dtype, hardware)
        num_warps, num_stages = decode_score_split_launch_options(
            num_heads, max_decode_query_len, high_batch)
    chunks, tile, tk_warps, tk_stages, single_tile, adaptive = decode_topk_launch_policy(
        max_block, total_q, num_heads, topk, hardware)
    return {
        "scorer": scorer,
        "program_budget": budget,
        "kv_chunks": kv_chunks,
        "high_batch": high_batch,
        "num_warps": num_warps,
        "num_stages": num_stages,
        "topk_chunks": chunks,
        "topk_tile": tile,
        "single_tile": single_tile,
        "adaptive_merge": adaptive,
        "topk_num_warps": tk_warps,
        "topk_num_stages": tk_stages,
    }
