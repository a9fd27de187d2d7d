"""MiniMax-M3 lightning-indexer prefill (docs/KERNELS.md §7, dtypes §14.4).

Variants: the query-tile block scorer (optionally split over KV for grids too small to fill the
GPU), the per-token top-k selector, the streaming scorer + selector that never materialises the
[H, T, S] scores, and the host entries.
Policies: `index_prefill_score` picks the scorer's tile and KV split, `index_prefill_topk` the
selector's tile, `index_prefill` whether the one-call entry streams or runs those two kernels.
gfx950 rows reproduce upstream's fixed launch (a 64-row query tile, no split) and pick the
selector tile by the row length where upstream autotunes it at run time; generic takes the
same rows; the measured targets' (sm_90) rows are declared here (SM90_* below, from a study
on one H200) until the tuner measures them.
The contract constants and the decode inputs' domains are the decode family's
(specs/index_decode.py): one source for both halves of the indexer.
"""
from codegen.model import NUM_STAGES, NUM_WARPS, Param, TensorContract, Variant
from codegen.policy import Axis, Buckets, Policy, Rule, at_least, between, one_of

from .index_decode import (CACHE, CACHE_DTYPES, CONSTANTS, HARDWARE, HEAD_DIMS, IDX_Q, MAX_TOPK,
                           NUM_HEADS, Q_DTYPES)
from .measured_targets import TARGETS

MEASURED = tuple(TARGETS)  # measured targets (sm_90): rows declared below until tuned

MAX_SPARSE_BLOCKS = dict(CONSTANTS)["MAX_SPARSE_BLOCKS"]
# The streaming variant keeps next_pow2(topk) keys per query lane in registers: at most this many.
MAX_STREAM_TOPK_TILE = 64

BLOCK_TABLE = TensorContract(name="block_table", rank=2, dtypes=("int32",),
                             doc="[R, ≥cdiv(max_seq_len, 128)] index-K pages; unit column stride")
CU_SEQLENS_Q = TensorContract(name="cu_seqlens_q", rank=1, dtypes=("int32",),
                              doc="[R + 1] query row offsets, cu[0] = 0, non-decreasing")
SEQ_LENS = TensorContract(name="seq_lens", rank=1, dtypes=("int32",),
                          doc="[R] keys per request (prefix + chunk)")
PREFIX_LENS = TensorContract(name="prefix_lens", rank=1, dtypes=("int32",),
                             doc="[R] keys before the request's first query row")
SCORE = TensorContract(name="score", rank=3, dtypes=("fp32",),
                       doc="[H, T, ≥round_up(cdiv(max_seq_len, 128), 16)] block scores, any "
                           "strides")
OUT = TensorContract(name="out", rank=3, dtypes=("int32",),
                     doc="[H, T, topk] block ids, -1 padding; any strides")

COMMON = dict(family="index_prefill", hardware=HARDWARE, constants=CONSTANTS)
TILE_PARAMS = (
    Param(name="block_m", kind="int", pow2=True, minimum=1, maximum=128,
          doc="query tokens per tile (block_m · H query lanes, at least 16)"),
)

SPECS = [
    Variant(name="index_prefill_score", template="prefill_score.py.j2",
            output="prefill_score.py", **COMMON,
            doc="query-tile block scorer: grid (cdiv(max_query_len, block_m) · kv_splits, R), "
                "every K page loaded once per tile for all H heads",
            tensors=(IDX_Q, CACHE, BLOCK_TABLE, CU_SEQLENS_Q, SEQ_LENS, PREFIX_LENS, SCORE),
            params=(*TILE_PARAMS,
                    Param(name="kv_splits", kind="int", pow2=True, maximum=64,
                          doc="contiguous block ranges per tile (same scores for any value)"),
                    NUM_WARPS, NUM_STAGES),
            defaults=dict(block_m=64, kv_splits=1, num_warps=4, num_stages=3)),
    Variant(name="index_prefill_stream", template="prefill_score.py.j2",
            output="prefill_score.py", **COMMON,
            doc="streaming scorer + selector: the scorer's tile keeps each row's running top "
                "keys and writes ids (no score tensor)",
            tensors=(IDX_Q, CACHE, BLOCK_TABLE, CU_SEQLENS_Q, SEQ_LENS, PREFIX_LENS, OUT),
            params=(*TILE_PARAMS,
                    Param(name="topk_tile", kind="int", pow2=True, minimum=2,
                          maximum=MAX_STREAM_TOPK_TILE,
                          doc="the widest key list per lane: next_pow2(topk) must fit it"),
                    NUM_WARPS, NUM_STAGES),
            defaults=dict(block_m=64, topk_tile=MAX_STREAM_TOPK_TILE, num_warps=4,
                          num_stages=3)),
    Variant(name="index_prefill_topk", template="prefill_topk.py.j2",
            output="prefill_topk.py", **COMMON,
            doc="per-token top-k selector: grid (T, H), the score row read in block_k tiles",
            tensors=(SCORE, CU_SEQLENS_Q, PREFIX_LENS, OUT),
            params=(Param(name="block_k", kind="int", pow2=True, minimum=16, maximum=2048,
                          doc="blocks per tile; next_pow2(topk) must fit it"),
                    NUM_WARPS, NUM_STAGES),
            defaults=dict(block_k=512, num_warps=4, num_stages=None)),
    Variant(name="index_prefill", template="prefill_indexer.py.j2",
            output="prefill_indexer.py", **COMMON,
            doc="host entries: validation, dispatch, scratch; as an `index_prefill` row: the "
                "two-kernel path (scorer, then selector, each from its own table)",
            tensors=(IDX_Q, CACHE, BLOCK_TABLE, CU_SEQLENS_Q, SEQ_LENS, PREFIX_LENS, SCORE, OUT)),
]

# ---------------------------------------------------------------------------------------------
# index_prefill_score: tile and KV split

# Upstream's launch: a 64-row query tile per program, no split; our tile holds all H heads,
# so 64 lanes are 64 // H tokens.
UPSTREAM_TILE = {1: dict(block_m=64), 2: dict(block_m=32), 4: dict(block_m=16)}
UPSTREAM_SCORE_OPTIONS = dict(kv_splits=1, num_warps=4, num_stages=None)

# sm_90, not measured yet (one H200 study, 2026-12-01): 64-lane tiles, four warps, three stages;
# a KV split where the tiles alone cannot fill the 132 SMs.
SM90_SPLITS = Buckets(axis="num_tokens", rows=(
    (1, 1024, dict(kv_splits=8)), (1025, 4096, dict(kv_splits=2)), (4097, None, dict(kv_splits=1)),
))
SM90_SCORE_OPTIONS = dict(num_warps=4, num_stages=3)


def score_rules(hw, options, by=None, note=""):
    return [Rule(when={"hardware": hw, "num_heads": h}, variant="index_prefill_score",
                 params={**UPSTREAM_TILE[h], **options}, by=by, note=note)
            for h in NUM_HEADS]


INDEX_PREFILL_SCORE_RULES = [
    *score_rules(one_of("gfx950", "generic"), UPSTREAM_SCORE_OPTIONS,
                 note="upstream's 64-row query tile, no split"),
    *(rule for hw in MEASURED for rule in score_rules(
        hw, SM90_SCORE_OPTIONS, by=SM90_SPLITS,
        note="64-lane tile, KV split for small grids (not measured)")),
]

# ---------------------------------------------------------------------------------------------
# index_prefill_topk: selector tile (upstream autotunes it over 64..2048 at run time; the rows
# take the smallest tile that holds a whole row of that many blocks, at least next_pow2(topk))

def selector_rules(hw, note):
    rules = []
    for lo, hi, tile in ((0, 64, 64), (65, 128, 128), (129, 256, 256), (257, 512, 512),
                         (513, 1024, 1024), (1025, None, 2048)):
        small = Rule(when={"hardware": hw, "topk": between(1, min(tile, MAX_TOPK)),
                           "max_block": between(lo, hi) if hi is not None else at_least(lo)},
                     variant="index_prefill_topk", note=note,
                     params=dict(block_k=tile, num_warps=4 if tile <= 512 else 8,
                                 num_stages=None))
        rules.append(small)
        if tile < MAX_TOPK:
            rules.append(Rule(when={"hardware": hw, "topk": between(tile + 1, MAX_TOPK),
                                    "max_block": between(lo, hi)},
                              variant="index_prefill_topk", note=f"{note}; tile ≥ topk",
                              params=dict(block_k=512, num_warps=4, num_stages=None)))
    return rules


INDEX_PREFILL_TOPK_RULES = selector_rules(one_of(*HARDWARE), "one tile per row where it fits")

# ---------------------------------------------------------------------------------------------
# index_prefill: one call, streaming or two kernels

SM90_STREAM = dict(block_m=64, topk_tile=MAX_STREAM_TOPK_TILE, num_warps=4, num_stages=3)

INDEX_PREFILL_RULES = [
    Rule(when={"hardware": one_of("gfx950", "generic")}, variant="index_prefill",
         note="two kernels (upstream has no streaming selector)"),
    *[Rule(when={"hardware": hw, "num_heads": h, "topk": between(1, MAX_STREAM_TOPK_TILE)},
           variant="index_prefill_stream", params={**SM90_STREAM, **UPSTREAM_TILE[h]},
           note="streaming (not measured)") for hw in MEASURED for h in NUM_HEADS],
    *[Rule(when={"hardware": hw, "topk": between(MAX_STREAM_TOPK_TILE + 1, MAX_TOPK)},
           variant="index_prefill", note="two kernels: topk beyond the streaming key list")
      for hw in MEASURED],
]

PREFILL_INPUT_AXES = (
    Axis(name="hardware", kind="enum", values=HARDWARE, doc="normalized target"),
    Axis(name="q_dtype", kind="enum", values=Q_DTYPES, doc="idx_q dtype"),
    Axis(name="cache_dtype", kind="enum", values=CACHE_DTYPES, doc="index_kv_cache dtype"),
    Axis(name="head_dim", kind="enum", values=HEAD_DIMS, doc="index head dim D"),
    Axis(name="num_heads", kind="enum", values=NUM_HEADS, doc="local index heads H"),
    Axis(name="num_tokens", kind="int", lo=1, doc="prefill tokens T (T = 0 launches nothing)"),
    Axis(name="max_block", kind="int", lo=0, hi=MAX_SPARSE_BLOCKS - 1,
         doc="cdiv(max_seq_len, 128): score-row capacity"),
)

SPECS += [
    Policy(name="index_prefill_score", family="index_prefill",
           doc="prefill scorer tile and KV split", axes=PREFILL_INPUT_AXES,
           rules=INDEX_PREFILL_SCORE_RULES),
    Policy(name="index_prefill_topk", family="index_prefill",
           doc="prefill selector tile",
           axes=(
               Axis(name="hardware", kind="enum", values=HARDWARE, doc="normalized target"),
               Axis(name="topk", kind="int", lo=1, hi=MAX_TOPK, doc="blocks selected per row"),
               Axis(name="max_block", kind="int", lo=0, hi=MAX_SPARSE_BLOCKS - 1,
                    doc="score columns S (the row's blocks are at most S)"),
               Axis(name="rows_x_heads", kind="int", lo=1, doc="T · H"),
           ),
           rules=INDEX_PREFILL_TOPK_RULES),
    Policy(name="index_prefill", family="index_prefill",
           doc="the one-call entry: streaming scorer + selector, or the two kernels "
               "(variant index_prefill: each from its own table)",
           axes=PREFILL_INPUT_AXES + (
               Axis(name="topk", kind="int", lo=1, hi=MAX_TOPK,
                    doc="blocks selected per row (streaming keeps next_pow2(topk) keys per "
                        "lane: at most its topk_tile)"),),
           rules=INDEX_PREFILL_RULES),
]
