"""MiniMax-M3 lightning-indexer prefill (docs/KERNELS.md §7, dtypes §14.4).

Variants: the query-tile block scorer (optionally split over KV for grids too small to fill the
GPU), the per-token top-k selector, the streaming scorer + selector that never materialises the
[H, T, S] scores, and the host entries.
Policies: `index_prefill_score` picks the scorer's tile and KV split, `index_prefill_topk` the
selector's tile, `index_prefill` whether the one-call entry streams or runs those two kernels.
gfx950 rows reproduce upstream's fixed launch (a 64-row query tile, no split) and pick the
selector tile by the row length where upstream autotunes it at run time; generic takes the
same rows; a measured target (sm_90) takes its rows for the inputs its data file has
(specs/measured/<target>.json, written by tools/tune's prefill section) and the SM90_* rows
below (from `tools/bench_prefill.py --study` on two H200s) for every other input.
The contract constants and the decode inputs' domains are the decode family's
(specs/index_decode.py): one source for both halves of the indexer.
"""
import attrs

from codegen.model import NUM_STAGES, NUM_WARPS, Param, TensorContract, Variant
from codegen.policy import Axis, Between, Buckets, Policy, Rule, at_least, between, elsewhere, \
    one_of, restricted

from .index_decode import (CACHE, CACHE_DTYPES, CONSTANTS, HARDWARE, HEAD_DIMS, IDX_Q,
                           MAX_TOPK, MEASURED_TOPK, NUM_HEADS, Q_DTYPES, SCORE_INPUT_DOMAINS,
                           inputs_label)
from .measured_targets import TARGETS

MEASURED = tuple(TARGETS)  # measured targets (sm_90): rows from their data files, else SM90_*
# The prefill inputs a measured target is tuned for by default (tools/tune's prefill section):
# MiniMax-M3's bf16 index with head_dim 128, each index-head count it serves.
MEASURED_PREFILL = [{"q_dtype": "bf16", "cache_dtype": "bf16", "head_dim": 128, "num_heads": h}
                    for h in NUM_HEADS]

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
            doc="per-token top-k selector: grid (cdiv(T, block_rows), H), block_rows rows per "
                "program read in block_k tiles",
            tensors=(SCORE, CU_SEQLENS_Q, PREFIX_LENS, OUT),
            params=(Param(name="block_k", kind="int", pow2=True, minimum=16, maximum=2048,
                          doc="blocks per tile; next_pow2(topk) must fit it"),
                    Param(name="block_rows", kind="int", pow2=True, minimum=1, maximum=64,
                          doc="rows (tokens) per program"),
                    NUM_WARPS, NUM_STAGES),
            defaults=dict(block_k=512, block_rows=2, num_warps=4, num_stages=None)),
    Variant(name="index_prefill", template="prefill_indexer.py.j2",
            output="prefill_indexer.py", **COMMON,
            doc="host entries: validation, dispatch, scratch; as an `index_prefill` row: the "
                "two-kernel path (scorer, then selector, each from its own table)",
            tensors=(IDX_Q, CACHE, BLOCK_TABLE, CU_SEQLENS_Q, SEQ_LENS, PREFIX_LENS, SCORE, OUT)),
]

# ---------------------------------------------------------------------------------------------
# Input classes: the pairs whose products are 16-bit (or fp8 widened to fp16), and those that
# compute in fp32 (3xTF32: several times the registers and shared memory of a 16-bit tile).
SIXTEEN_BIT = (
    {"q_dtype": "bf16", "cache_dtype": one_of("bf16", "fp8e4m3")},
    {"q_dtype": "fp16", "cache_dtype": one_of("fp16", "fp8e4m3")},
    {"q_dtype": "fp8e4m3", "cache_dtype": one_of("bf16", "fp16", "fp8e4m3")},  # (non-fp8: rejected)
)
FP32_PRODUCTS = (
    {"q_dtype": "fp32"},
    {"q_dtype": one_of("bf16", "fp16", "fp8e4m3"), "cache_dtype": "fp32"},
    {"q_dtype": "bf16", "cache_dtype": "fp16"},
    {"q_dtype": "fp16", "cache_dtype": "bf16"},
)


def lanes(n):
    """block_m per head count for a tile of n query lanes (block_m · H = n)."""
    return {h: dict(block_m=n // h) for h in NUM_HEADS}


# ---------------------------------------------------------------------------------------------
# Measured targets: data-file rows for the inputs they hold; the declared rules elsewhere

def _rows_note(row):
    return (f"{inputs_label(row.values())}, max_block {Between(*row.when['max_block'])}, "
            f"tokens {Between(*row.when['num_tokens'])}")


def measured_input_rules(target, table, declared, extra_when=None):
    """A measured target's rows of ``table`` (keyed by inputs) as rules, then ``declared``
    restricted to the inputs the file has no rows for."""
    rows = target.rows(table)
    inputs = []
    for row in rows:
        if row.values() not in inputs:
            inputs.append(row.values())
    rules = [Rule(when={"hardware": target.name, **row.conditions(), **(extra_when or {})},
                  variant=row.choice, params=row.params, loc=row.loc, note=_rows_note(row))
             for row in rows]
    return rules + restricted(declared, elsewhere({"hardware": target.name}, inputs,
                                                  SCORE_INPUT_DOMAINS), SCORE_INPUT_DOMAINS)


def measured_selector_rules(target):
    """A measured target's selector rows (measured at topk MEASURED_TOPK), the declared ones
    for every other topk."""
    rows = target.rows("index_prefill_topk")
    if not rows:
        return sm90_selector_rules(target.name)
    rules = [Rule(when={"hardware": target.name, "topk": MEASURED_TOPK, **row.conditions()},
                  variant=row.choice, params=row.params, loc=row.loc,
                  note=f"topk {MEASURED_TOPK}, max_block {Between(*row.when['max_block'])}")
             for row in rows]
    others = [{"topk": between(1, MEASURED_TOPK - 1)},
              {"topk": between(MEASURED_TOPK + 1, MAX_TOPK)}]
    for rule in sm90_selector_rules(target.name):
        t = rule.when["topk"]
        for piece in others:
            lo, hi = max(t.lo, piece["topk"].lo), min(t.hi, piece["topk"].hi)
            if lo <= hi:
                rules.append(attrs.evolve(rule, when={**rule.when, "topk": between(lo, hi)}))
    return rules


# ---------------------------------------------------------------------------------------------
# index_prefill_score: tile and KV split

# Upstream's launch: a 64-row query tile per program, no split; our tile holds all H heads,
# so 64 lanes are 64 // H tokens. fp32 products: a 16-lane tile, one stage (a 64-lane 3xTF32
# tile needs 196 KiB of shared memory even unpipelined: more than gfx950's LDS).
UPSTREAM = (lanes(64), dict(kv_splits=1, num_warps=4, num_stages=None))
PORTABLE_FP32 = (lanes(16), dict(kv_splits=1, num_warps=4, num_stages=1))

# sm_90 for inputs its data file has no rows for (bench_prefill --study on two H200s,
# 2026-12-01, which agreed within 3 %): 64-lane tiles, 4 warps, 3 stages up to 4096 tokens; 128-lane tiles, 8
# warps, 2 stages above (467 µs against 864 for the 64-lane tile at 122880 + 8192 tokens); a KV
# split of 8 (it helps small grids and costs ≤ 7 % elsewhere). fp32 products: 64 lanes, 4 warps,
# one stage (196 KiB of shared memory).
SM90_TILES = Buckets(axis="num_tokens", rows=(
    (1, 4096, dict(kv_splits=8, num_warps=4, num_stages=3)),
    (4097, None, dict(kv_splits=8, num_warps=8, num_stages=2)),
))
SM90_LANES = {(1, 4096): 64, (4097, None): 128}
SM90_FP32 = (lanes(64), dict(kv_splits=8, num_warps=4, num_stages=1))
# at head_dim 256 a 64-lane 3xTF32 tile needs 384 KiB: 32 lanes (66 KiB)
SM90_FP32_D256 = (lanes(32), dict(kv_splits=8, num_warps=4, num_stages=1))


def tile_rules(hw, inputs, tile, note):
    """One rule per head count (and per input class piece) with that tile's launch."""
    per_head, options = tile
    return [Rule(when={"hardware": hw, "num_heads": h, **piece},
                 variant="index_prefill_score", params={**per_head[h], **options}, note=note)
            for piece in inputs for h in NUM_HEADS]


def sm90_score_rules(hw):
    rules = []
    for (lo, hi, options), n in zip(SM90_TILES.rows, SM90_LANES.values()):
        tokens = between(lo, hi) if hi is not None else at_least(lo)
        rules += tile_rules(hw, [{**p, "num_tokens": tokens} for p in SIXTEEN_BIT],
                            (lanes(n), options), f"{n}-lane tile (two H200 studies)")
    small = [{**p, "head_dim": one_of(*(d for d in HEAD_DIMS if d <= 128))}
             for p in FP32_PRODUCTS]
    return (rules + tile_rules(hw, small, SM90_FP32, "fp32 products: one stage")
            + tile_rules(hw, [{**p, "head_dim": 256} for p in FP32_PRODUCTS], SM90_FP32_D256,
                         "fp32 products at head_dim 256: 32 lanes, one stage"))


INDEX_PREFILL_SCORE_RULES = [
    *tile_rules(one_of("gfx950", "generic"), SIXTEEN_BIT, UPSTREAM,
                "upstream's 64-row query tile, no split"),
    *tile_rules(one_of("gfx950", "generic"), FP32_PRODUCTS, PORTABLE_FP32,
                "fp32 products: 16-lane tile, one stage"),
    *(rule for hw, target in TARGETS.items() for rule in
      measured_input_rules(target, "index_prefill_score", sm90_score_rules(hw))),
]

# ---------------------------------------------------------------------------------------------
# index_prefill_topk: selector tile (upstream autotunes it over 64..2048 at run time). Each row
# takes the smallest tile that holds a whole row of that many blocks (at least 64 and
# next_pow2(topk)), up to `widest`; programs take 1024 keys' worth of rows.

def selector_rules(hw, widest, note):
    rules = []
    tiles = [t for t in (64, 128, 256, 512, 1024, 2048) if t <= widest]
    for i, tile in enumerate(tiles):
        lo = 0 if i == 0 else tiles[i - 1] + 1
        blocks = between(lo, tile) if tile < widest else at_least(lo)
        for topk, k in ((between(1, min(tile, MAX_TOPK)), tile),
                        (between(tile + 1, MAX_TOPK), max(512, tile))):
            if topk.lo > topk.hi:
                continue
            rules.append(Rule(when={"hardware": hw, "topk": topk, "max_block": blocks},
                              variant="index_prefill_topk", note=note,
                              params=dict(block_k=k, block_rows=max(1, 1024 // k),
                                          num_warps=4, num_stages=None)))
    return rules


# sm_90 (bench_prefill --study on two H200s, 2026-12-01): small tiles and 2 warps win; rows
# short enough to fill one 64-block tile four to a program, longer ones one row per program
# (at 1024 blocks: 256-block tiles 118 µs, 512 135, 1024 149).
SM90_SELECTOR = Buckets(axis="max_block", rows=(
    (0, 64, dict(block_k=64, block_rows=4, num_warps=2, num_stages=None)),
    (65, 512, dict(block_k=128, block_rows=1, num_warps=2, num_stages=None)),
    (513, None, dict(block_k=256, block_rows=1, num_warps=2, num_stages=None)),
))


def sm90_selector_rules(hw):
    """SM90_SELECTOR for topk ≤ 64 (every tile holds next_pow2(topk)); a 512-block tile above."""
    return [Rule(when={"hardware": hw, "topk": between(1, 64)}, variant="index_prefill_topk",
                 by=SM90_SELECTOR, note="small tiles (two H200 studies)"),
            Rule(when={"hardware": hw, "topk": between(65, MAX_TOPK)},
                 variant="index_prefill_topk", note="tile ≥ topk",
                 params=dict(block_k=512, block_rows=1, num_warps=4, num_stages=None))]


INDEX_PREFILL_TOPK_RULES = [
    *selector_rules(one_of("gfx950", "generic"), 2048, "one tile per row where it fits"),
    *(r for target in TARGETS.values() for r in measured_selector_rules(target)),
]

# ---------------------------------------------------------------------------------------------
# index_prefill: one call, streaming or two kernels. sm_90 (two H200 studies): with one head the
# two kernels win (their scorer splits KV: 658 against 938 µs at 122880 + 8192 tokens), with two
# or four heads streaming does (the selector has H× the rows: 108 against 125 µs at 8192
# tokens, H 4); fp32 products stream slower (one stage) and take the two kernels.

SM90_STREAM = (lanes(64), dict(topk_tile=MAX_STREAM_TOPK_TILE, num_warps=4, num_stages=3))


def sm90_prefill_rules(hw):
    small_topk = {"topk": between(1, MAX_STREAM_TOPK_TILE)}
    per_head, options = SM90_STREAM
    rules = [Rule(when={"hardware": hw, "num_heads": 1, **small_topk}, variant="index_prefill",
                  note="two kernels: one head")]
    rules += [Rule(when={"hardware": hw, "num_heads": h, **small_topk, **piece},
                   variant="index_prefill_stream", params={**per_head[h], **options},
                   note="streaming: several heads")
              for piece in SIXTEEN_BIT for h in (2, 4)]
    rules += [Rule(when={"hardware": hw, "num_heads": one_of(2, 4), **small_topk, **piece},
                   variant="index_prefill", note="two kernels: fp32 products")
              for piece in FP32_PRODUCTS]
    rules.append(Rule(when={"hardware": hw, "topk": between(MAX_STREAM_TOPK_TILE + 1, MAX_TOPK)},
                      variant="index_prefill", note="two kernels: topk beyond the streaming keys"))
    return rules


INDEX_PREFILL_RULES = [
    Rule(when={"hardware": one_of("gfx950", "generic")}, variant="index_prefill",
         note="two kernels (upstream has no streaming selector)"),
    *(rule for hw, target in TARGETS.items() for rule in
      measured_input_rules(target, "index_prefill", sm90_prefill_rules(hw)[:-1],
                           {"topk": between(1, MAX_STREAM_TOPK_TILE)})),
    *(sm90_prefill_rules(hw)[-1] for hw in MEASURED),
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
           rules=INDEX_PREFILL_SCORE_RULES, variants=("index_prefill_score",)),
    Policy(name="index_prefill_topk", family="index_prefill",
           doc="prefill selector tile",
           axes=(
               Axis(name="hardware", kind="enum", values=HARDWARE, doc="normalized target"),
               Axis(name="topk", kind="int", lo=1, hi=MAX_TOPK, doc="blocks selected per row"),
               Axis(name="max_block", kind="int", lo=0, hi=MAX_SPARSE_BLOCKS - 1,
                    doc="score columns S (the row's blocks are at most S)"),
               Axis(name="rows_x_heads", kind="int", lo=1, doc="T · H"),
           ),
           rules=INDEX_PREFILL_TOPK_RULES, variants=("index_prefill_topk",)),
    Policy(name="index_prefill", family="index_prefill",
           doc="the one-call entry: streaming scorer + selector, or the two kernels "
               "(variant index_prefill: each from its own table)",
           axes=PREFILL_INPUT_AXES + (
               Axis(name="topk", kind="int", lo=1, hi=MAX_TOPK,
                    doc="blocks selected per row (streaming keeps next_pow2(topk) keys per "
                        "lane: at most its topk_tile)"),),
           rules=INDEX_PREFILL_RULES, variants=("index_prefill_stream", "index_prefill")),
]
