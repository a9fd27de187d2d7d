"""MiniMax-M3 sparse-attention decode indexer (docs/KERNELS.md §1–§6, §8, §10).

Variants: the split-K and request-balanced block scorers, the fused top-k selector (optionally
emitting the page-16 sparse block table), the single-launch scorer + selector
(`index_decode_fused`), and the standalone sparse-table builder.
Policies: `index_score` picks the scorer and its grid -- or the single-launch variant, which
then replaces the selector too (only where max_block and next_pow2(topk) ≤ its topk_tile:
checked by codegen/families/index_decode.py; `fused_rules` declares the split-K row for a
larger topk); `index_topk` the selector's chunking.
gfx950 rows reproduce upstream §8 exactly; generic is upstream's non-gfx950 branch; measured
targets (sm_90: H200 measurements) bring their rows from their data files
(specs/measured/<target>.json): scorer rows for each set of decode inputs measured there, selector
rows for topk MEASURED_TOPK; upstream's defaults everywhere else.
"""
import attrs

from codegen.model import NUM_STAGES, NUM_WARPS, Param, TensorContract, Variant
from codegen.policy import (Axis, Between, Buckets, Policy, Rule, at_least, between, elsewhere,
                            none_of, one_of)

from .defaults import DEFAULT_SPLIT, GENERAL_TOPK, GENERAL_TOPK_OPTIONS, UNTUNED_SPLIT_OPTIONS
from .hardware import SPECS as _HARDWARE
from .measured_targets import TARGETS

# Contract constants (§1), baked into every generated file of the family as literals.
CONSTANTS = (
    ("SPARSE_BLOCK_SIZE", 128),  # tokens per sparse block = one index-K page
    ("PAGES_PER_SPARSE_BLOCK", 8),  # page-16 ids per sparse block per K/V side
    ("FORCED_INIT_SCORE", 1e30),
    ("FORCED_LOCAL_SCORE", 1e29),
    ("NAN_SCORE", -1e30),  # what a NaN score ranks as
    ("MAX_SPARSE_BLOCKS", 65535),  # exclusive: block ids must fit the 16-bit tie field
    ("SCORE_ROW_ALIGN", 16),  # score rows are padded to a multiple of this
    ("MAX_TOPK", 512),  # the selector's widest tile
    # fp32 scoring: exact FMAs over the real query lanes (H · next_pow2(Qmax)) up to this many,
    # 3xTF32 tensor cores above (H200, 2026-12-01: one lane 246 vs 299 µs at 16 × 128k, four
    # lanes 86 vs 109 µs at 64 × 8k, best launch of each)
    ("FP32_FMA_MAX_LANES", 1),
)
HARDWARE = tuple(hw.name for hw in _HARDWARE)
# Input dtypes (docs/KERNELS.md §14.4): fp32 queries / cache are scored at fp32 accuracy (3xTF32
# on NVIDIA tensor cores); an fp8 e4m3 query needs an fp8 e4m3 cache (the runtime checks it).
Q_DTYPES = ("bf16", "fp16", "fp8e4m3", "fp32")
CACHE_DTYPES = ("bf16", "fp16", "fp8e4m3", "fp32")
HEAD_DIMS = (16, 32, 64, 128, 256)
NUM_HEADS = (1, 2, 4)
MAX_TOPK = dict(CONSTANTS)["MAX_TOPK"]
MAX_SPARSE_BLOCKS = dict(CONSTANTS)["MAX_SPARSE_BLOCKS"]

# The decode shape measured targets are tuned for by default (MiniMax-M3's indexer: bf16 query
# and cache, head_dim 128, one index head, top-16 blocks): tools/bench times it and tools/tune
# measures it unless told other inputs (`--inputs`: an fp8 cache, fp32 query and cache). A
# measured target's data file holds scorer rows per measured inputs; the rest of its domain
# keeps upstream's defaults (measured_score_rules / measured_topk_rules below).
MEASURED_SCORE = {"q_dtype": "bf16", "cache_dtype": "bf16", "head_dim": 128, "num_heads": 1}
SCORE_INPUT_DOMAINS = {"q_dtype": Q_DTYPES, "cache_dtype": CACHE_DTYPES, "head_dim": HEAD_DIMS,
                       "num_heads": NUM_HEADS}
MEASURED_TOPK = 16

IDX_Q = TensorContract(name="idx_q", rank=3, dtypes=Q_DTYPES, doc="[total_q, H, D], any strides")
CACHE = TensorContract(name="index_kv_cache", rank=3, dtypes=CACHE_DTYPES,
                       doc="[num_pages, 128, D], any strides; fp8 used unscaled")
BLOCK_TABLE = TensorContract(name="block_table", rank=2, dtypes=("int32",),
                             doc="[R, ≥max_block] index-K pages; unit column stride")
SEQ_LENS = TensorContract(name="seq_lens", rank=1, dtypes=("int32",),
                          doc="[R] KV length incl. the decode tokens; 0 = padding request")
SCORES = TensorContract(name="scores", rank=3, dtypes=("fp32",),
                        doc="[H, total_q, round_up(max_block, 16)] block scores")
TOPK_IDX = TensorContract(name="topk_idx", rank=3, dtypes=("int32",),
                          doc="[H, total_q, topk] block ids, -1 padding")
ATTN_TABLE = TensorContract(name="attention_block_table", rank=2, dtypes=("int32",),
                            doc="[R, ≥max_block] main-KV pages; unit column stride")
SPARSE_TABLE = TensorContract(name="sparse_block_table_out", rank=2, dtypes=("int32",),
                              doc="[total_q, topk·8] page-16 ids; unit column stride")
SPARSE_LENS = TensorContract(name="sparse_context_lens_out", rank=1, dtypes=("int32",),
                             doc="[total_q] attended tokens per row; unit stride")
COUNTER = TensorContract(name="completion_counter", rank=2, dtypes=("int32",), contiguous=True,
                         doc="[H, ≥total_q] zero between launches")

SCORERS = dict(family="index_decode", template="index_score.py.j2", output="index_score.py",
               hardware=HARDWARE, constants=CONSTANTS,
               tensors=(IDX_Q, CACHE, BLOCK_TABLE, SEQ_LENS, SCORES))

SPECS = [
    Variant(name="index_score_split", **SCORERS,
            doc="split-K scorer: grid (R, kv_chunks), contiguous block chunks per request",
            params=(Param(name="kv_chunks", kind="int", pow2=True, maximum=1024),
                    Param(name="high_batch", kind="bool"),
                    Param(name="static_chunks", kind="bool",
                          doc="chunks cut from max_block, not from each request's length"),
                    NUM_WARPS, NUM_STAGES),
            defaults=dict(kv_chunks=32, high_batch=False, static_chunks=False, num_warps=None,
                          num_stages=None)),
    Variant(name="index_score_balanced", **SCORERS,
            doc="request-balanced scorer: grid budget + R - 1 over the requests' real blocks",
            params=(Param(name="program_budget", kind="int", maximum=1 << 20),
                    NUM_WARPS, NUM_STAGES),
            defaults=dict(program_budget=1024, num_warps=2, num_stages=1)),
    Variant(name="index_topk_fused", family="index_decode", template="index_topk.py.j2",
            output="index_topk.py", hardware=HARDWARE, constants=CONSTANTS,
            doc="fused top-k selector: per-row adaptive chunks, last-arrival merge, optional "
                "page-16 sparse table",
            tensors=(SCORES, SEQ_LENS, TOPK_IDX, COUNTER, ATTN_TABLE, SPARSE_TABLE, SPARSE_LENS),
            params=(Param(name="topk_chunks", kind="int", pow2=True, maximum=16),
                    Param(name="topk_tile", kind="int", pow2=True, minimum=16, maximum=512),
                    Param(name="single_tile", kind="bool"),
                    Param(name="adaptive_merge", kind="bool"),
                    Param(name="pdl", kind="bool",
                          doc="programmatic dependent launch after the scorer (sm_90+)"),
                    NUM_WARPS, NUM_STAGES)),
    Variant(name="index_decode_fused", family="index_decode", template="index_fused.py.j2",
            output="index_fused.py", hardware=HARDWARE, constants=CONSTANTS,
            doc="scorer + top-k selector in one launch: split-K grid (R, kv_chunks), the last "
                "chunk of a request to finish selects its rows (one topk_tile: needs max_block "
                "≤ topk_tile), optional page-16 sparse table",
            tensors=(IDX_Q, CACHE, BLOCK_TABLE, SEQ_LENS, TOPK_IDX, COUNTER, ATTN_TABLE,
                     SPARSE_TABLE, SPARSE_LENS),
            params=(Param(name="kv_chunks", kind="int", pow2=True, maximum=1024),
                    Param(name="topk_tile", kind="int", pow2=True, minimum=128, maximum=512,
                          doc="selection tile: max_block and next_pow2(topk) must fit it"),
                    NUM_WARPS, NUM_STAGES),
            defaults=dict(kv_chunks=16, topk_tile=512, num_warps=4, num_stages=2)),
    Variant(name="index_decode", family="index_decode", template="decode_indexer.py.j2",
            output="decode_indexer.py", hardware=HARDWARE, constants=CONSTANTS,
            doc="host entry points: validation, allocation, scorer + selector launches, "
                "standalone page-16 sparse table builder",
            tensors=(IDX_Q, CACHE, BLOCK_TABLE, SEQ_LENS, TOPK_IDX, ATTN_TABLE, SPARSE_TABLE,
                     SPARSE_LENS, COUNTER)),
]

# ---------------------------------------------------------------------------------------------
# index_score: scorer choice and grid (§8.1, §8.2)

# gfx950 high-batch grid (target 1024 programs) for 20–64 requests.
GFX950_HIGH_BATCH = Buckets(axis="num_reqs", rows=(
    (20, 32, dict(kv_chunks=32)), (33, 64, dict(kv_chunks=16)),
))

# Query lanes: several heads and several decode rows per request ("multi") vs the rest.
MULTI_LANE = {"num_heads": one_of(2, 4), "max_q": between(2, 8)}
SINGLE_LANE = ({"num_heads": 1}, {"num_heads": one_of(2, 4), "max_q": 1})
MULTI_LANE_OPTIONS = dict(num_warps=4, num_stages=2)
BACKEND_DEFAULT_OPTIONS = dict(num_warps=None, num_stages=None)


def split_rules(when, by, *, single=BACKEND_DEFAULT_OPTIONS, multi=MULTI_LANE_OPTIONS,
                high_batch=False, note=""):
    """Split-scorer rules over ``when`` for both lane kinds."""
    rules = [Rule(when={**when, **MULTI_LANE}, variant="index_score_split", by=by, note=note,
                  params=dict(high_batch=high_batch, static_chunks=False, **multi))]
    for lane in SINGLE_LANE:
        rules.append(Rule(when={**when, **lane}, variant="index_score_split", by=by, note=note,
                          params=dict(high_batch=high_batch, static_chunks=False, **single)))
    return rules


GFX950_BF16_D128 = {"hardware": "gfx950", "q_dtype": "bf16", "cache_dtype": "bf16",
                    "head_dim": 128}
# Every other gfx950 dtype/head_dim combination, as disjoint pieces.
GFX950_OTHER = (
    {"hardware": "gfx950", "q_dtype": none_of("bf16")},
    {"hardware": "gfx950", "q_dtype": "bf16", "cache_dtype": none_of("bf16")},
    {"hardware": "gfx950", "q_dtype": "bf16", "cache_dtype": "bf16", "head_dim": none_of(128)},
)



def inputs_label(inputs) -> str:
    """Decode inputs as notes show them: 'bf16·fp8e4m3 D128 H1' (query·cache dtype)."""
    return (f"{inputs['q_dtype']}·{inputs['cache_dtype']} D{inputs['head_dim']} "
            f"H{inputs['num_heads']}")


def fused_rules(when, params, loc, note):
    """A single-launch row as rules: the fused variant where next_pow2(topk) fits its selection
    tile, and below it the split-K scorer with the same grid and options (the same scores)
    followed by the selector's own table, for the larger topk."""
    fused = Rule(when=when, variant="index_decode_fused", params=params, loc=loc, note=note)
    # (a row's parameters checked before its fallback reads them)
    next(v for v in SPECS if v.name == fused.variant).check_params(fused, "params", params)
    tile = params["topk_tile"]
    rules = [attrs.evolve(fused, when={**when, "topk": between(1, tile)})]
    if tile < MAX_TOPK:
        rules.append(Rule(when={**when, "topk": between(tile + 1, MAX_TOPK)},
                          variant="index_score_split", loc=loc,
                          note=f"{note}; topk > {tile}: its split-K equivalent + selector",
                          params=dict(kv_chunks=params["kv_chunks"], high_batch=False,
                                      static_chunks=False, num_warps=params["num_warps"],
                                      num_stages=params["num_stages"])))
    return rules


def measured_score_rules(target):
    """A measured target's scorer rules: one per row of its data file (each rule located at its
    row; a single-launch row brings its topk fallback, `fused_rules`), then upstream's default
    split grid for every decode input the file has no rows for."""
    rules, measured_inputs = [], []
    for row in target.rows("index_score"):
        if row.values() not in measured_inputs:
            measured_inputs.append(row.values())
        when = {"hardware": target.name, **row.conditions()}
        note = (f"{row.choice.split('_')[-1]}, {inputs_label(row.values())}, "
                f"Qmax {Between(*row.when['max_q'])}, max_block {Between(*row.when['max_block'])}")
        if row.choice == "index_decode_fused":
            rules += fused_rules(when, row.params, row.loc, note)
        else:
            rules.append(Rule(when=when, variant=row.choice, params=row.params, loc=row.loc,
                              note=note))
    rules += [Rule(when=when, variant="index_score_split", params=UNTUNED_SPLIT_OPTIONS,
                   by=DEFAULT_SPLIT, note="default split grid (not measured)")
              for when in elsewhere({"hardware": target.name}, measured_inputs,
                                    SCORE_INPUT_DOMAINS)]
    return rules


INDEX_SCORE_RULES = [
    Rule(when={**GFX950_BF16_D128, "num_reqs": between(1, 8)}, variant="index_score_balanced",
         params=dict(program_budget=1024, num_warps=2, num_stages=1), note="balanced, 1–8 requests"),
    Rule(when={**GFX950_BF16_D128, "num_reqs": between(9, 11)}, variant="index_score_balanced",
         params=dict(program_budget=768, num_warps=2, num_stages=1), note="balanced, 9–11 requests"),
    *split_rules({**GFX950_BF16_D128, "num_reqs": between(12, 19)}, DEFAULT_SPLIT,
                 note="split, default grid"),
    *split_rules({**GFX950_BF16_D128, "num_reqs": between(20, 64)}, GFX950_HIGH_BATCH,
                 single=dict(num_warps=2, num_stages=1), high_batch=True,
                 note="split, high-batch grid"),
    *split_rules({**GFX950_BF16_D128, "num_reqs": at_least(65)}, DEFAULT_SPLIT,
                 note="split, default grid"),
    *[r for when in GFX950_OTHER for r in split_rules(when, DEFAULT_SPLIT,
                                                      note="split, default grid")],
    *split_rules({"hardware": "generic"}, DEFAULT_SPLIT, note="upstream common/CUDA default"),
    *(rule for target in TARGETS.values() for rule in measured_score_rules(target)),
]

# ---------------------------------------------------------------------------------------------
# index_topk: selector chunking (§8.3). P = total_q · H (rows × heads).

# Upstream's general branch, for every (topk, max_block) its fast branches leave out.
GFX950_GENERAL = (
    {"hardware": "gfx950", "topk": between(1, 15)},
    {"hardware": "gfx950", "topk": at_least(17)},
    {"hardware": "gfx950", "topk": 16, "max_block": 0},
    {"hardware": "gfx950", "topk": 16, "max_block": at_least(8193)},
)



def measured_topk_rules(target):
    """A measured target's selector rules: one per data-file row (topk MEASURED_TOPK), then
    upstream's general branch for every other topk."""
    rules = [Rule(when={"hardware": target.name, "topk": MEASURED_TOPK, **row.conditions()},
                  variant=row.choice, params=row.params, loc=row.loc,
                  note=f"topk {MEASURED_TOPK}, max_block {Between(*row.when['max_block'])}")
             for row in target.rows("index_topk")]
    rules += [Rule(when={"hardware": target.name, "topk": between(lo, hi)},
                   variant="index_topk_fused", params=GENERAL_TOPK_OPTIONS, by=GENERAL_TOPK,
                   note="general branch (not measured)")
              for lo, hi in ((1, MEASURED_TOPK - 1), (MEASURED_TOPK + 1, MAX_TOPK)) if lo <= hi]
    return rules


INDEX_TOPK_RULES = [
    Rule(when={"hardware": "gfx950", "topk": 16, "max_block": between(1, 128)},
         variant="index_topk_fused", note="one 128-block tile",
         params=dict(topk_chunks=1, topk_tile=128, num_warps=2, num_stages=1, single_tile=True,
                     adaptive_merge=True, pdl=False)),
    Rule(when={"hardware": "gfx950", "topk": 16, "max_block": between(129, 8192)},
         variant="index_topk_fused", note="16 single-tile chunks, adaptive merge",
         params=dict(topk_chunks=16, topk_tile=512, num_warps=4, num_stages=2, single_tile=True,
                     adaptive_merge=True, pdl=False)),
    *[Rule(when=when, variant="index_topk_fused", by=GENERAL_TOPK, params=GENERAL_TOPK_OPTIONS,
           note="general branch") for when in GFX950_GENERAL],
    Rule(when={"hardware": "generic"}, variant="index_topk_fused", by=GENERAL_TOPK,
         params=GENERAL_TOPK_OPTIONS, note="general branch"),
    *(rule for target in TARGETS.values() for rule in measured_topk_rules(target)),
]

SPECS += [
    Policy(name="index_score", family="index_decode",
           doc="decode scorer (split or balanced) and its grid, or the single-launch scorer + "
               "selector (index_decode_fused; max_block and next_pow2(topk) ≤ its topk_tile)",
           axes=(
               Axis(name="hardware", kind="enum", values=HARDWARE, doc="normalized target"),
               Axis(name="q_dtype", kind="enum", values=Q_DTYPES, doc="idx_q dtype"),
               Axis(name="cache_dtype", kind="enum", values=CACHE_DTYPES,
                    doc="index_kv_cache dtype"),
               Axis(name="head_dim", kind="enum", values=HEAD_DIMS, doc="index head dim D"),
               Axis(name="num_reqs", kind="int", lo=1, doc="decode requests R (R = 0 launches "
                                                             "nothing)"),
               Axis(name="max_block", kind="int", lo=0, hi=MAX_SPARSE_BLOCKS - 1,
                    doc="cdiv(max_seq_len, 128): score-row capacity"),
               Axis(name="num_heads", kind="enum", values=NUM_HEADS, doc="local index heads H"),
               Axis(name="max_q", kind="int", lo=1, hi=8,
                    doc="max_decode_query_len (Qmax); BLOCK_SIZE_Q = next_pow2(Qmax)"),
               Axis(name="topk", kind="int", lo=1, hi=MAX_TOPK,
                    doc="blocks selected per row (the single launch selects from one tile: "
                        "topk beyond it takes the split-K equivalent of the row)"),
           ),
           rules=INDEX_SCORE_RULES,
           variants=("index_score_split", "index_score_balanced", "index_decode_fused")),
    Policy(name="index_topk", family="index_decode",
           doc="fused top-k selector chunking and tile",
           axes=(
               Axis(name="hardware", kind="enum", values=HARDWARE, doc="normalized target"),
               Axis(name="topk", kind="int", lo=1, hi=MAX_TOPK, doc="blocks selected per row"),
               Axis(name="max_block", kind="int", lo=0, hi=MAX_SPARSE_BLOCKS - 1,
                    doc="cdiv(max_seq_len, 128): score-row capacity"),
               Axis(name="rows_x_heads", kind="int", lo=1, doc="total_q · H"),
           ),
           rules=INDEX_TOPK_RULES, variants=("index_topk_fused",)),
]
