"""MiniMax-M3 sparse attention over the indexer's selected blocks (docs/KERNELS.md §15).

Variants: the split-K attention kernel (its last split merges, or a merge kernel), the
query-tiled prefill kernel and the host entries.
Policies: `sparse_attn_decode` and `sparse_attn_prefill` pick the KV splits and launch options
from hardware, query / KV dtypes, scale mode, group size G = Hq / Hkv, head_dim, the number
of (row, KV head) programs and (decode) the query length. gfx950 and generic take portable rows (upstream publishes no
gfx950 table for these kernels); a measured target (sm_90) takes its data file's rows for the
inputs they cover (tools/tune's attention section) and the declared rows elsewhere.
"""
from codegen.model import NUM_STAGES, NUM_WARPS, Param, TensorContract, Variant
from codegen.policy import (Axis, Between, Buckets, Policy, Rule, at_least, between, elsewhere,
                            one_of, restricted)

from .index_decode import CONSTANTS, HARDWARE, MAX_TOPK
from .measured_targets import TARGETS

# The attention inputs a measured target is tuned for by default (tools/tune's attention
# section): MiniMax-M3's bf16 q over a bf16 or an fp8 e4m3 cache, no scales, head_dim 128, G 16
# (TP1-4) and 8 (TP8).
MEASURED_ATTN = [{"q_dtype": "bf16", "kv_dtype": kv, "scales": "none", "group": g,
                  "head_dim": 128} for kv in ("bf16", "fp8e4m3") for g in (16, 8)]
Q_DTYPES = ("bf16", "fp16", "fp32")
KV_DTYPES = ("bf16", "fp16", "fp8e4m3", "fp8e5m2")
SCALE_MODES = ("none", "scalar", "per_token")
GROUPS = (1, 2, 4, 8, 16, 32)
HEAD_DIMS = (64, 128, 256)

# Inputs a measured target serves with another input's measured rows where its data file holds
# none of their own: (q_dtype, kv_dtype, scales) → the input whose rows they take, the other
# axes equal, followed until an input with rows (or none: the declared rules). An fp8 format
# takes the loads and pair conversions of the other; a scale adds a load and a multiply per
# key step; an fp8 cache reads half a bf16 one's bytes with the same grids and products (its
# own rows, when measured, are tuned from those: `tune measure --near`). An fp16 q takes a bf16
# q's rows over the same cache, and over an fp16 cache bf16's: the same bytes, tiles and
# tensor-core rate (an fp8 cache's products are fp16 under either q). A q and a cache of two
# 16-bit types, or an fp32 q, take the declared rules.
MEASURED_AS = {
    **{(q, "fp8e4m3", "none"): (q, "bf16", "none") for q in ("bf16", "fp32")},
    **{(q, "fp8e4m3", mode): (q, "fp8e4m3", "none") for q in ("bf16", "fp32")
       for mode in ("scalar", "per_token")},
    **{(q, "fp8e5m2", mode): (q, "fp8e4m3", mode) for q in ("bf16", "fp32")
       for mode in SCALE_MODES},
    ("fp16", "fp16", "none"): ("bf16", "bf16", "none"),
    **{("fp16", kv, mode): ("bf16", kv, mode) for kv in ("fp8e4m3", "fp8e5m2")
       for mode in SCALE_MODES},
}


def measured_as(inputs: dict, measured: list):
    """The input of ``measured`` whose rows ``inputs`` takes (MEASURED_AS), or None."""
    while inputs not in measured:
        key = (inputs["q_dtype"], inputs["kv_dtype"], inputs["scales"])
        if key not in MEASURED_AS:
            return None
        q, kv, mode = MEASURED_AS[key]
        inputs = dict(inputs, q_dtype=q, kv_dtype=kv, scales=mode)
    return inputs

Q = TensorContract(name="q", rank=3, dtypes=Q_DTYPES, doc="[T, Hq, D], any strides")
KV = TensorContract(name="kv", rank=4, dtypes=KV_DTYPES,
                    doc="[pages, 2, 128, Hkv, D] (5-D) or [pages, Hkv, 128, 2·D], any strides")
TOPK_IDX = TensorContract(name="topk_idx", rank=3, dtypes=("int32",),
                          doc="[Hkv, T, topk] block ids, -1 padded, any strides")
BLOCK_TABLE = TensorContract(name="block_table", rank=2, dtypes=("int32",),
                             doc="[R, W] 128-token block → page; unit column stride")
OUTPUT = TensorContract(name="output", rank=3, dtypes=("bf16", "fp16", "fp32"),
                        doc="[T, Hq, D], any strides (no overlap)")

COMMON = dict(family="sparse_attn", hardware=HARDWARE, constants=CONSTANTS)
BLOCK = dict(CONSTANTS)["SPARSE_BLOCK_SIZE"]  # keys per listed block (one cache page)
# K and V tiles by the tensor memory accelerator (both kernels)
TMA = Param(name="tma", kind="bool",
            doc="K and V tiles by the tensor memory accelerator (one bulk copy per tile "
                "through a descriptor made on the host; NVIDIA compute capability >= 9.0, "
                "and a cache it can address: otherwise loads by pointers)")

# A register budget per thread (ptxas' .maxnreg): a program of W warps at R registers each
# leaves room for 65536 / (32 · W · R) programs per SM. Since its row sums are kept per key
# column the split kernel's 128-key 4-warp launches compile to 166-168 registers over an
# unscaled fp8 cache (three programs per SM where its 40 KiB of shared memory allow five) and
# 210-219 with per-token scales (two); capped at 128 or 168 they compile without spills
# (`tools/sm90_code.py attention --max-registers`). The tuner tries 128 where it measured a
# gain (tools/tune/space.py: `attn_register_cap`).
# (below about 28 registers ptxas refuses the kernel; at 64 every launch compiles, spilling)
MAX_REGISTERS = Param(name="max_registers", kind="int", optional=True, minimum=64, maximum=255,
                      doc="registers per thread the compiler may use (None: its own choice; "
                          "NVIDIA only); a lower cap lets more programs share an SM where "
                          "registers, not shared memory, bound them, at the price of any "
                          "spills it forces")

SPECS = [
    Variant(name="sparse_attn_split", template="sparse_attn.py.j2", output="sparse_attn.py",
            **COMMON,
            doc="attention over listed blocks: grid (T · Hkv · head_split, splits), G / "
                "head_split query heads per program, online softmax; several splits merge "
                "exactly by log-sum-exp",
            tensors=(Q, KV, TOPK_IDX, BLOCK_TABLE, OUTPUT),
            params=(Param(name="splits", kind="int", pow2=True, maximum=MAX_TOPK,
                          doc="contiguous shares of the tiles of each row's block list"),
                    Param(name="kv_tile", kind="int", pow2=True, minimum=16,
                          maximum=BLOCK,
                          doc="keys per loop step (a block is 128 / kv_tile tiles)"),
                    Param(name="head_split", kind="int", pow2=True, minimum=1,
                          maximum=max(GROUPS),
                          doc="programs sharing the G query heads of a (row, KV head) "
                              "(at most G are used)"),
                    Param(name="merge_kernel", kind="bool",
                          doc="several splits: a second kernel (one program per row and query "
                              "head) merges the partials, not the last split to finish"),
                    TMA,
                    Param(name="table_first", kind="bool",
                          doc="the row's whole block table read beside q, before the ids "
                              "(and before the wait for the indexer in the decode step): a "
                              "listed block's page then comes from registers, not from a load "
                              "that waits on the ids (tables wider than TABLE_FIRST_MAX, 128k "
                              "tokens, are read as without it)"),
                    MAX_REGISTERS, NUM_WARPS, NUM_STAGES),
            defaults=dict(splits=1, kv_tile=BLOCK, head_split=1, merge_kernel=False,
                          tma=False, table_first=False, max_registers=None, num_warps=4,
                          num_stages=2)),
    Variant(name="sparse_attn_tiled", template="sparse_attn.py.j2", output="sparse_attn.py",
            **COMMON,
            doc="query-tiled (prefill; decode rows of Q > 1): lanes / G consecutive rows × G "
                "heads per program walk the ascending union of their lists, loading each page "
                "once",
            tensors=(Q, KV, TOPK_IDX, BLOCK_TABLE, OUTPUT),
            params=(Param(name="lanes", kind="int", pow2=True, minimum=16, maximum=256,
                          doc="query lanes (rows · G) per tile"),
                    Param(name="sorted_union", kind="bool",
                          doc="the union walked as sorted (block, page) keys in a loop whose "
                              "tiles are pipelined over num_stages, not by repeated minima "
                              "(a while loop: unpipelined, two programs per SM); a tile of "
                              "more than SORTED_UNION_MAX_KEYS keys walks by minima"),
                    Param(name="splits", kind="int", pow2=True, maximum=MAX_TOPK,
                          doc="contiguous shares of a tile's sorted union (a tile walking by "
                              "minima takes one), merged by log-sum-exp in a second kernel"),
                    TMA, NUM_WARPS, NUM_STAGES),
            defaults=dict(lanes=64, sorted_union=False, splits=1, tma=False, num_warps=8,
                          num_stages=2)),
    Variant(name="sparse_attn", template="sparse_attention.py.j2",
            output="sparse_attention.py", **COMMON,
            doc="host entries: validation, dispatch, scratch for sparse_attn_decode / "
                "sparse_attn_prefill / sparse_decode_step",
            tensors=(Q, KV, TOPK_IDX, BLOCK_TABLE, OUTPUT),
            params=(Param(name="attention_per_sm", kind="int", minimum=0, maximum=32,
                          doc="sparse_decode_step: at most this many of the attention's "
                              "programs share an SM (0: as many as fit), by the dynamic "
                              "shared memory its launch asks for; it is the indexer's "
                              "programmatic dependent, placed while the indexer's last "
                              "programs still run"),),
            defaults=dict(attention_per_sm=0)),
]

# Splits by programs (rows · KV heads): few programs split each row's list so the grid fills
# the GPU; many take one (no partials to merge). Portable rows, not measured.
SPLITS_BY_PROGRAMS = Buckets(axis="programs", rows=(
    (1, 32, dict(splits=8)), (33, 128, dict(splits=4)), (129, 512, dict(splits=2)),
    (513, None, dict(splits=1)),
))
OPTIONS = dict(num_warps=4, num_stages=2)
# a whole block per step; the last split merges
SPLIT_OPTIONS = dict(kv_tile=BLOCK, head_split=1, merge_kernel=False, tma=False,
                     table_first=False, max_registers=None, **OPTIONS)
ATTN_DOMAINS = {"q_dtype": Q_DTYPES, "kv_dtype": KV_DTYPES, "scales": SCALE_MODES,
                "group": GROUPS, "head_dim": HEAD_DIMS}
PORTABLE = one_of("gfx950", "generic")


def declared_decode_rules(hw):
    return [Rule(when={"hardware": hw}, variant="sparse_attn_split", params=SPLIT_OPTIONS,
                 by=SPLITS_BY_PROGRAMS, note="portable (not measured)")]


def declared_prefill_rules(hw):
    """Prefill: upstream's common path runs per token (gfx950, generic); its Hopper path tiles
    the queries (neighbouring tokens' lists overlap: each page is loaded once per tile), which
    the measured targets take for long prefills where their data has no rows."""
    if hw == PORTABLE:
        return [Rule(when={"hardware": hw}, variant="sparse_attn_split", params=SPLIT_OPTIONS,
                     by=SPLITS_BY_PROGRAMS, note="per token (portable, not measured)")]
    return [
        Rule(when={"hardware": hw, "programs": between(1, 2047)}, variant="sparse_attn_split",
             params=SPLIT_OPTIONS, by=Buckets(axis="programs", rows=SPLITS_BY_PROGRAMS.rows[:-1] + (
                 (513, 2047, dict(splits=1)),)), note="per token (not measured)"),
        Rule(when={"hardware": hw, "programs": at_least(2048), "q_dtype": one_of("bf16", "fp16")},
             variant="sparse_attn_tiled",
             params=dict(lanes=64, sorted_union=False, splits=1, tma=False, num_warps=8,
                         num_stages=2),
             note="query-tiled: 64 lanes as 8 warps (4 spill at sm_90; not measured)"),
        # fp32 q (tests): a 3xTF32 tile of 64 lanes at D 256 overflows shared memory
        Rule(when={"hardware": hw, "programs": at_least(2048), "q_dtype": "fp32"},
             variant="sparse_attn_split", params=dict(splits=1, **SPLIT_OPTIONS),
             note="per token: fp32 q")]


def inputs_with_rows(rows) -> list:
    """The inputs (q_dtype, kv_dtype, scales, group, head_dim) ``rows`` hold rows for."""
    inputs = []
    for row in rows:
        if row.values() not in inputs:
            inputs.append(row.values())
    return inputs


def _span(row) -> str:
    """A row's buckets in a rule's note: 'Q 1, programs 33..64' (prefill: no Q)."""
    return ", ".join(f"{name} {Between(*row.when[axis])}" for axis, name in
                     (("query_len", "Q"), ("programs", "programs")) if axis in row.when)


def measured_rules(target, table, declared):
    """A measured target's rows of ``table`` for the inputs its data file holds, the same rows
    for the inputs they serve (MEASURED_AS) that it holds none for, the declared rules for
    every other input."""
    rows = target.rows(table)
    inputs = inputs_with_rows(rows)
    rules = [Rule(when={"hardware": target.name, **row.conditions()}, variant=row.choice,
                  params=row.params, loc=row.loc,
                  note=f"{row.values()}, {_span(row)}")
             for row in rows]
    # every input an input with rows serves: the other axes of that input, each q, cache and
    # scale mode
    served = [dict(i, q_dtype=q, kv_dtype=kv, scales=mode) for i in inputs for q in Q_DTYPES
              for kv in KV_DTYPES for mode in SCALE_MODES]
    served = [i for n, i in enumerate(served) if i not in inputs and i not in served[:n]
              and measured_as(i, inputs) is not None]
    rules += [Rule(when={"hardware": target.name, **row.conditions(), **i},
                   variant=row.choice, params=row.params, loc=row.loc,
                   note=f"{i}, {_span(row)}: as measured for "
                        f"{row.values()['q_dtype']} q / {row.values()['kv_dtype']} / "
                        f"{row.values()['scales']}")
              for i in served for row in rows if row.values() == measured_as(i, inputs)]
    return rules + restricted(declared, elsewhere({"hardware": target.name}, inputs + served,
                                                  ATTN_DOMAINS), ATTN_DOMAINS)


DECODE_RULES = [*declared_decode_rules(PORTABLE),
                *(r for name, target in TARGETS.items()
                  for r in measured_rules(target, "sparse_attn_decode",
                                          declared_decode_rules(name)))]
PREFILL_RULES = [*declared_prefill_rules(PORTABLE),
                 *(r for name, target in TARGETS.items()
                   for r in measured_rules(target, "sparse_attn_prefill",
                                           declared_prefill_rules(name)))]


# sparse_decode_step on sm_90: the attention, the indexer's programmatic dependent, has its
# programs placed while the indexer's last ones still run; at 129-256 programs a launch that
# lets three of them share an SM (72 KiB of shared memory and at most 168 registers each: bf16,
# fp16 and unscaled fp8 caches) then ran up to 6.1 % slower than launched plainly after the
# indexer, at 77 of 78 rows measured, the other a tie (tools/step_study.py, docs/results/
# 2026-12-04_h200_step_pdl_*.json). Capped at two per SM it was faster than both at every row
# measured (Q 1 and Q 4), each input on two H200s or more (0.3-7.1 µs under the faster of the
# two), with the launches below, the decode table's then. The cap is a fact about an input's
# launch: the step caps where the decode table still gives that launch, and a re-tune that
# changes it leaves those points uncapped until the study measures the new launch. Scaled fp8
# caches hold at most two by registers (201-213) and are left uncapped, as are 1-128 programs
# (at 128 the cap was 3 µs slower on one of two H200s) and 257-1024 (a 512-program fp8 launch
# 11 % slower capped), other inputs and other targets.
STUDIED_LAUNCH = dict(splits=1, kv_tile=BLOCK, head_split=1, merge_kernel=False, tma=False,
                      table_first=False, max_registers=None, num_warps=4)
STEP_CAPPED = {"sm_90": (between(129, 256), 2, tuple(
    (dict(q_dtype=q, kv_dtype=kv, scales="none", group=group, head_dim=128),
     dict(STUDIED_LAUNCH, num_stages=stages))
    for q, kv, stages in (("bf16", "bf16", 2), ("fp16", "fp16", 2), ("bf16", "fp8e4m3", 3),
                          ("bf16", "fp8e5m2", 3))
    for group in (16, 8)))}


def _meet(span, cut):
    """The part of ``span`` (lo, hi; hi None: unbounded) within the Between ``cut``, or None."""
    lo, hi = max(span[0], cut.lo), cut.hi if span[1] is None else min(span[1], cut.hi)
    return between(lo, hi) if lo <= hi else None


def step_cap_rules(target, programs, per_sm, measured):
    """One measured target's step rules for the inputs the study measured, per query-length
    bucket of the input's decode rows: uncapped below and above ``programs``; within it, each
    decode row's part capped at ``per_sm`` where the row gives the input's studied launch."""
    decode = target.rows("sparse_attn_decode")
    have = inputs_with_rows(decode)
    rules = []
    for inputs, launch in measured:
        source = measured_as(inputs, have)
        rows = [r for r in decode if r.values() == source] if source else []
        if not rows:  # the declared launches, which the study did not time
            rules.append(Rule(when={"hardware": target.name, **inputs}, variant="sparse_attn",
                              params=dict(attention_per_sm=0),
                              note="uncapped (no measured decode rows)"))
            continue
        for q in dict.fromkeys(r.when["query_len"] for r in rows):
            when = {"hardware": target.name, **inputs, "query_len": Between(*q)}
            rules += [Rule(when=dict(when, programs=span), variant="sparse_attn",
                           params=dict(attention_per_sm=0), note="uncapped")
                      for span in (between(1, programs.lo - 1), at_least(programs.hi + 1))]
            for row in rows:
                span = _meet(row.when["programs"], programs) if row.when["query_len"] == q \
                    else None
                if span is None:
                    continue
                studied = row.choice == "sparse_attn_split" and row.params == launch
                rules.append(Rule(
                    when=dict(when, programs=span), variant="sparse_attn",
                    params=dict(attention_per_sm=per_sm if studied else 0), loc=row.loc,
                    note=("capped: measured faster at the decode row's launch" if studied else
                          "uncapped: the decode row's launch is not the one measured")
                    + f" ({_span(row)})"))
    return rules


def step_rules():
    """`sparse_decode_step`'s attention: as many programs per SM as fit, except on a measured
    target of STEP_CAPPED at its programs for its inputs while their decode launch is the
    one measured."""
    rules = [Rule(when={"hardware": PORTABLE}, variant="sparse_attn",
                  params=dict(attention_per_sm=0), note="uncapped (not measured)")]
    for hw, target in TARGETS.items():
        if hw not in STEP_CAPPED:  # a measured target the study has not run on
            rules.append(Rule(when={"hardware": hw}, variant="sparse_attn",
                              params=dict(attention_per_sm=0), note="uncapped (not measured)"))
            continue
        programs, per_sm, measured = STEP_CAPPED[hw]
        rules += step_cap_rules(target, programs, per_sm, measured)
        rules += [Rule(when=w, variant="sparse_attn", params=dict(attention_per_sm=0),
                       note="uncapped (as measured, or not measured)")
                  for w in elsewhere({"hardware": hw}, [i for i, _ in measured], ATTN_DOMAINS)]
    return rules


def axes(extra_doc, decode=True):
    """The attention policies' axes; decode ones also by the query length (a request's Q rows
    read the same blocks' pages, mostly: Q 4 at 64 programs took another launch than Q 1)."""
    return (
        Axis(name="hardware", kind="enum", values=HARDWARE, doc="normalized target"),
        Axis(name="q_dtype", kind="enum", values=Q_DTYPES, doc="q dtype"),
        Axis(name="kv_dtype", kind="enum", values=KV_DTYPES, doc="cache dtype"),
        Axis(name="scales", kind="enum", values=SCALE_MODES, doc="k_scale / v_scale mode"),
        Axis(name="group", kind="enum", values=GROUPS, doc="G = Hq / Hkv"),
        Axis(name="head_dim", kind="enum", values=HEAD_DIMS, doc="head dim D"),
        *((Axis(name="query_len", kind="int", lo=1, doc="decode_query_len (Q)"),) if decode
          else ()),
        Axis(name="programs", kind="int", lo=1, doc=f"rows · KV heads ({extra_doc})"),
    )


SPECS += [
    Policy(name="sparse_attn_decode", family="sparse_attn",
           doc="decode sparse attention: splits of each row's block list, or query tiles of "
               "a request's rows walking the union of their lists",
           axes=axes("T = R · decode_query_len"), rules=DECODE_RULES,
           variants=("sparse_attn_split", "sparse_attn_tiled")),
    Policy(name="sparse_attn_prefill", family="sparse_attn",
           doc="prefill sparse attention: per token (splits of each row's list) or query-tiled",
           axes=axes("T prefill tokens", decode=False),
           rules=PREFILL_RULES, variants=("sparse_attn_split", "sparse_attn_tiled")),
    Policy(name="sparse_decode_step", family="sparse_attn",
           doc="sparse_decode_step: how many of the attention's programs may share an SM",
           axes=axes("T = R · decode_query_len"), rules=step_rules(),
           variants=("sparse_attn",)),
]
