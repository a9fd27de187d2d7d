"""Device study: where the time of the latency-bound sparse-attention rows goes. Variants of
generated/sparse_attn.py, each built by replacing one piece of the split kernel's source text
(no merge, no arrival atomic, no K/V traffic, no block-table load, no softmax arithmetic, no
per-step pick of the block out of the list or that pick done another way, the split kernel
without its merge kernel), timed interleaved with the kernel as generated, the kernel with
its merge in a second kernel (``merge_kernel``) and an empty kernel (graph replay, L2 flushed)
on the rows where vLLM is ahead or the copy rate is missed; with each row, a plain read of
its KV bytes (bench_attn's floor). Most source variants' outputs are wrong by design (timing
only); those in CORRECT compute the kernel's result, and the study checks their bits against
it. `cluster_merge` runs a row's splits as one thread-block cluster and merges them through
distributed shared memory (inline PTX; NVIDIA only, left out with --smoke). `keys_rows`
makes the keys the rows of both products (wgmma on sm_90); its result is checked against the
kernel's within CLOSE's bound, as is `wgmma`'s (the query lanes padded to 64: warpgroup
products). `timeline` records when each program starts, has its list,
ends its last step and ends (NVIDIA only). `spin_merge` lets each merge program wait for its
own row's splits (an arrival counter) instead of the whole split kernel; `merge_empty` times
the merge kernel's launch and wait without its work; `two_per_sm` caps the split programs at
two per SM; `first_prefetch` requests each split's first tile into L2 before its list is
compacted (NVIDIA only, as `two_per_sm`); `bulk_prefetch` asks for every tile of the split
at once, one bulk L2 prefetch each (NVIDIA only); `three_per_sm` caps them at three per SM,
`*_split_only` without the merge kernel. `next_prefetch` (`next2_prefetch`) requests the next
(second next) step's tile into L2 before each step waits for its own; `below_page_last` reads
the query-tiled kernel's 16-bit tile rows below the page from the last key's row by pointers
(the split kernel does not read them); `log2_scores` takes the scores in log2 units (one
multiply less per score and step; within CLOSE's bound: measured 2026-12-05, not adopted);
`sums_per_step` reduces the split kernel's row sums across its warps at every key step, as
it did before (within CLOSE's bound); `regs128` (`regs168`) compiles the split kernel to at
most 128 (168) registers per thread (the same bits); `mask_every_step` masks the split kernel's keys at every
step, as it did before (the same bits); `bf16_partials` keeps the splits' outputs in bf16
(half the partials' bytes; within CLOSE's bound). Beside each launch an empty kernel
on its grid, with and without its dynamic shared memory, times the launch without the work. `--where` also times plain reads of the
listed blocks' bytes (no attention: through a page list, the ids and the table, or none;
several program shapes; each checked to sum the bytes it stands for) and the table's launch
with the listed blocks packed together in the cache. `--floor` times the floor of any split
attention that streams like those reads: the same reads (parts of a block, or two, four,
eight or sixteen blocks per program: sixteen, a 16-entry list whole, is one split, whose
partials are its output), each program writing the partials such a split must write (its G
heads' outputs and log-sum-exps, the split kernel's layout, in fp32 or 16 bits), with and
without the merge kernel as their programmatic dependent (as generated, and with its split loops rolled;
`FLOOR_READS`; the merged output checked). `--dsplit` times an attention with no partials
in memory: a (KV head, row)'s K and V split along D over a thread-block cluster whose
programs sum their scores through distributed shared memory at every key step
(`DSPLIT_LAUNCHES`; decode rows with every listed key visible, checked against float32).

    python3 tools/attn_ablation.py OUTDIR           # H200: writes OUTDIR/attn_ablation.json
    python3 tools/attn_ablation.py OUTDIR --smoke   # CPU interpreter, one tiny row
    python3 tools/attn_ablation.py OUTDIR --variants base,splits_first --rows grids --table
        # chosen variants, the rows of several-wave grids, each at its table launch
    python3 tools/attn_ablation.py OUTDIR --rows copy --table   # the copy-rate misses
    python3 tools/attn_ablation.py OUTDIR --rows 32/2/128/32768/1,16/1/32/32768/4 --table
        # rows given as Hq/Hkv/R/context/Q
    python3 tools/attn_ablation.py OUTDIR --rows copy --table --variants base,cluster_merge
    python3 tools/attn_ablation.py OUTDIR --rows copy --table --variants base,split_only --where
    python3 tools/attn_ablation.py OUTDIR --rows copy --table --variants base --floor
    python3 tools/attn_ablation.py OUTDIR --rows copy --table --variants base --dsplit
    python3 tools/attn_ablation.py OUTDIR --rows copy --table --variants base \
        --launch "splits=1,head_split=4,num_warps=8;splits=2,head_split=2"
        # other launches beside the table's (unset: 4 warps, 2 stages, whole blocks), each
        # checked against the table's within AGAINST_TOL
    python3 tools/attn_ablation.py OUTDIR --rows bench32k --table --kv fp8e4m3 \
        --variants base,k_bits_asm,k_pairs --launch "splits=1,num_stages=3"
        # an fp8 cache (bench_attn's --kv): its K tile widened other ways

``--prefill`` times the variants on bench_attn's prefill rows instead, each at the launch the
table takes for it (query-tiled or split kernel), or at the launch ``--launch`` gives
(``"lanes=64,num_warps=4,num_stages=3,tma=True"``; with ``splits=`` the split kernel's). `p16_acc` (timing only) takes fp16
products' P·V with the running output as its accumulator, as a bf16 q's are.
`tile_keys_rows` makes the keys the rows of the query tile's products (K·qᵀ, Vᵀ·Pᵀ: over
an fp8 cache Triton then widens K and V into registers as the products' first operands;
within CLOSE's bound; `tools/sm90_code.py tiled --variant tile_keys_rows` shows its code;
measured 2026-12-06 over fp8: 1.76–1.81× the kernel, not adopted).

The decode study ends with each variant's time over the kernel's at the same launch, and
each other launch's over the row's first, median (min–max) over the rows.

``--against NAME=FILE[,...]`` times other revisions of generated/sparse_attn.py beside it
(`git show REV:generated/sparse_attn.py > FILE`), checked against it within AGAINST_TOL.

``--kv DTYPE[:SCALES]`` runs the rows over a cache of that dtype and scales (bench_attn's
option; the plain read counts its bytes). `k_bits`, `k_bits_asm` widen an e4m3 K tile by
integer ops (its byte as an fp16's high byte, exponent and mantissa shifted right by one: its
value × 2^-8, given back after the product; the same bits but for NaN); `k_byte` only moves
the byte (e5m2's exact widening; timing only over e4m3); `k_pairs` reads K as 16-bit pairs,
as the kernel reads V (`k_pairs_tl`: the same by Triton's ops, for the interpreter;
`k_pairs_tma`: at launches with tma through a descriptor of the cache as 16-bit pairs).
`scales_per_step` reads scalar K and V scales at every key step, as the kernel did before
(`--kv fp8e5m2:scalar`). `pt_range_per_tile` brings per-token V scales into fp16's range
by each key tile's own at every launch, as the kernel did before (`--kv fp8e4m3:per_token`;
`pt_no_range` leaves the range out, timing only).
"""
import importlib.util
import json
import os
import re
import statistics
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path[:0] = [ROOT, os.path.join(ROOT, "tools")]
import common  # noqa: E402

if __name__ == "__main__":
    common.usage_unless_out_dir(__doc__)  # (before the setup below)

SMOKE = "--smoke" in sys.argv
common.setup(SMOKE)
import torch  # noqa: E402

import generated  # noqa: E402,F401
from generated import sparse_attn as base  # noqa: E402

# name -> [(old text, new text)] applied to generated/sparse_attn.py
# the end of the split kernel's loop over its tiles (its last call's arguments)
# (the kernel's test for a row that saw a key)
SEEN = ("    # l = 0 only where no key was visible; a NaN score leaves l NaN, which propagates\n"
        "    seen = l_i != 0.0\n")
# (its row sums, kept per key column: `_folded_sums`)
ROW_SUMS = "    l_i = tl.sum(l_i, axis=1)\n"
SUMS_INIT = "    l_i = tl.zeros([GP, BLOCK_N], tl.float32)  # (per key column: `_folded_sums`)\n"
LOOP_ARGS = ("            scale_head_off, score_factor, exp_scale, kv_desc, g, D, BLOCK_N, SCALES, DOT,"
             " TMA,\n            FP8_PTX, V_PAIRS, RANGE_ONCE)\n")
LOOP_END = LOOP_ARGS + ROW_SUMS + SEEN
# the split kernel's row sums summed at each step, as before 2026-12-05 (within CLOSE's bound)
SUMS_PER_STEP = [(SUMS_INIT, "    l_i = tl.zeros([GP], tl.float32)\n", 1),
                 (ROW_SUMS + SEEN, SEEN, 1)]
VARIANTS = {
    "base": [],
    # the last arrival does not merge (the output is wrong: timing only)
    "no_merge": [("    if arrived == SPLITS - 1:", "    if arrived == -12345:")],
    # no arrival atomic, no merge
    "no_atomic": [("    arrived = tl.atomic_add(counter, 1, sem=\"acq_rel\", scope=\"gpu\")",
                   "    arrived = tl.program_id(0) * 0 - 1")],
    # no K/V memory traffic (zeros of the tile's shape instead of the cache)
    "no_kv": [("    k = tl.load(base + kv_offs).to(q.dtype)\n",
               "    k = tl.zeros_like(kv_offs).to(q.dtype)\n", 1),
              ("        k = tl.load(base + kv_offs, mask=on_page[:, None], other=0.0).to(q.dtype)\n",
               "        k = tl.zeros_like(kv_offs).to(q.dtype)\n", 1),
              ("        return tl.load(base + v_off + v_offs)\n",
               "        return tl.zeros_like(v_offs).to(base.dtype.element_ty)\n", 1),
              ("        return tl.load(base + v_off + v_offs, mask=on_page[:, None], other=0.0)\n",
               "        return tl.zeros_like(v_offs).to(base.dtype.element_ty)\n", 1),
              ("            w = tl.load((base + v_off).to(tl.pointer_type(tl.int16)) + v_offs)\n",
               "            w = tl.zeros_like(v_offs).to(tl.int16)\n", 1)],
    # one grid axis with the splits fastest (a row's splits start together; a correct
    # kernel: compare times). −0.24 to +1.07 µs against base on 2026-12-01 (GPU-83c98272)
    "splits_first": [("    pair = tl.program_id(0) // HS\n",
                      "    split = tl.program_id(0) % SPLITS\n"
                      "    grp = tl.program_id(0) // SPLITS\n    pair = grp // HS\n"),
                     ("    split = tl.program_id(1)\n", ""),
                     ("    head = g * G + tl.program_id(0) % HS * GH + lane",
                      "    head = g * G + grp % HS * GH + lane"),
                     ("counter_ptr + tl.program_id(0),", "counter_ptr + grp,"),
                     ("(T * Hkv * HS, splits),", "(T * Hkv * HS * splits,),")],
    # the block table is the identity (one dependent load less). Every request then reads
    # the same pages (blocks 0..255 at 32k): where rows share those pages, L2 hits make it
    # faster than the saved load alone (2.3 µs at 16/1 R32 32k Q1, 2026-12-02); read it on
    # rows of one request only
    "no_table": [("    pages = tl.load(table_row_ptr + ids, mask=usable, other=-1)",
                  "    pages = tl.where(usable, ids, -1)")],
    # no softmax arithmetic per step: the scores are the weights and the running sums are
    # not rescaled (timing only: the output is wrong); the loads and both products stay
    "no_softmax": [("    alpha = tl.exp2((m_i - shift) * exp_scale)\n",
                    "    alpha = m_i * 0.0 + 1.0\n", 1),
                   ("    p = tl.exp2((s - shift[:, None]) * exp_scale)\n",
                    "    p = tl.where(s == float(\"-inf\"), 0.0, s)\n", 1)],
    # the ids not read: every row lists blocks 0..topk-1 (no first dependent load; timing
    # only: the output is wrong)
    "no_ids": [("    ids = tl.load(ids_ptr + k_i.to(tl.int64) * stride_ik, mask=k_i < topk, other=-1)\n",
                "    ids = tl.where(k_i < topk, k_i, -1)\n", 1)],
    # each step's block and page not picked out of the row's list (a reduction over the list
    # per step, in warp shuffles, before the step's addresses exist) but made up from the
    # step's number: every row still reads its own pages (timing only: the output is wrong).
    # Rows of one request (Q > 1) then read distinct pages where the kernel's share most of
    # theirs (less L2 reuse): read it on Q 1 rows
    "no_pick": [("        b = tl.sum(tl.where(pick, ids, 0), axis=0)\n"
                 "        page = tl.sum(tl.where(pick, pages, 0), axis=0)\n",
                 "        b = entry\n"
                 "        page = (row * TOPK_P + entry) % num_pages\n", 1)],
    # the compacted list written once (to the start of this program's own partial slot, which
    # it overwrites with its partial at the end), each step's block and page read back by two
    # scalar loads, which the pipeliner issues stages ahead like the K/V tiles: no reduction
    # per step (a correct kernel while the kernel splits: compare bits and times)
    "scratch_pick": [
        ("    for u in range(first, last):\n",
         "    HQ0 = num_kv_heads * G\n"
         "    own = (split * num_rows.to(tl.int64) * HQ0 + row.to(tl.int64) * HQ0 + g * G\n"
         "           + tl.program_id(0) % HS * GH) * D\n"
         "    scr = (part_ptr + own).to(tl.pointer_type(tl.int32))\n"
         "    tl.store(scr + rank, pages, mask=usable)\n"
         "    tl.store(scr + TOPK_P + rank, ids, mask=usable)\n"
         "    tl.debug_barrier()\n"
         "    for u in range(first, last):\n", 1),
        ("        b = tl.sum(tl.where(pick, ids, 0), axis=0)\n"
         "        page = tl.sum(tl.where(pick, pages, 0), axis=0)\n",
         "        b = tl.load(scr + TOPK_P + entry)\n"
         "        page = tl.load(scr + entry)\n", 1),
        ("        pick = usable & (rank == entry)\n", "", 1)],
    # the list compacted once before the loop (entry j's block and page at place j), each
    # step's pair taken by tl.gather at the step's place (one warp shuffle where every warp
    # holds the whole list) instead of two masked sums (a tree of shuffles each)
    "gather_pick": [
        ("    for u in range(first, last):\n",
         "    at = usable[:, None] & (rank[:, None] == k_i[None, :])\n"
         "    cids = tl.sum(tl.where(at, ids[:, None], 0), axis=0)\n"
         "    cpages = tl.sum(tl.where(at, pages[:, None], 0), axis=0)\n"
         "    for u in range(first, last):\n", 1),
        ("        b = tl.sum(tl.where(pick, ids, 0), axis=0)\n"
         "        page = tl.sum(tl.where(pick, pages, 0), axis=0)\n",
         "        place = tl.zeros([1], tl.int32) + entry\n"
         "        b = tl.sum(tl.gather(cids, place, 0), axis=0)\n"
         "        page = tl.sum(tl.gather(cpages, place, 0), axis=0)\n", 1),
        ("        pick = usable & (rank == entry)\n", "", 1)],
    # each step's block and page packed into one int64 and picked by one masked sum: one
    # chain of shuffles per step instead of two, and the block (for the step's mask) is then
    # picked where the page is, stages ahead of its use (a correct kernel)
    "packed_pick": [
        ("    for u in range(first, last):\n",
         "    packed = (ids.to(tl.int64) << 32) | (pages.to(tl.int64) & 0xFFFFFFFF)\n"
         "    for u in range(first, last):\n", 1),
        ("        b = tl.sum(tl.where(pick, ids, 0), axis=0)\n"
         "        page = tl.sum(tl.where(pick, pages, 0), axis=0)\n",
         "        both = tl.sum(tl.where(pick, packed, 0), axis=0)\n"
         "        b = (both >> 32).to(tl.int32)\n"
         "        page = (both & 0xFFFFFFFF).to(tl.int32)\n", 1)],
    # the table row's entries loaded as soon as the ids arrive, masked only by the ids'
    # range (any id inside the table is safe to read), not after the duplicate check and
    # the position compares, which then run beside the load (a correct kernel)
    "early_table": [
        ("    pages = tl.load(table_row_ptr + ids, mask=usable, other=-1)\n",
         "    pages = tl.load(table_row_ptr + ids, mask=row_ok & (ids >= 0) & (ids < table_width),"
         "\n                    other=-1)\n", 1)],
    # the generated kernel with its merge_kernel launch option: a second kernel merges (a
    # correct kernel: compare times)
    "merge_kernel": [],
    # the merge kernel launched, but storing nothing (its loads then compile away): what the
    # second launch and its wait cost without the merge's work (timing only)
    "merge_empty": [("    tl.store(out_ptrs, merged.to(out_ptr.dtype.element_ty), mask=lane_ok[:, None])\n"
                     "\n\n@triton.jit\ndef _distinct_before(",
                     "\n\n@triton.jit\ndef _distinct_before(", 1)],
    # a merge_kernel launch without its second kernel (the split kernel alone: timing only)
    "split_only": [("        if merge is not None:\n            merge(part, output, *merge_rest)\n",
                    "")],
}
def _scalar_pick(topk_p=16):
    """The list compacted once and packed (block << 32 | page), then split into topk_p
    scalars before the loop (tl.split on a [2, ..., 2] view: layout conversions once, not per
    step); each step picks its pair by a chain of selects on those scalars, in registers, with
    no reduction and no barrier (a correct kernel at TOPK_P = topk_p: the copy rows' 16)."""
    bits = (topk_p - 1).bit_length()
    lines = ["    at = usable[:, None] & (rank[:, None] == k_i[None, :])\n",
             "    packed = (ids.to(tl.int64) << 32) | (pages.to(tl.int64) & 0xFFFFFFFF)\n",
             "    cl = tl.sum(tl.where(at, packed[:, None], 0), axis=0)\n",
             f"    cl = tl.reshape(cl, ({', '.join(['2'] * bits)}))\n"]
    level = {(): "cl"}
    for _ in range(bits):  # each split takes the last axis: the lowest index bit left
        nxt = {}
        for key, name in level.items():
            lines.append(f"    {name}_0, {name}_1 = tl.split({name})\n")
            nxt[key + (0,)], nxt[key + (1,)] = f"{name}_0", f"{name}_1"
        level = nxt
    scalar = {sum(b << i for i, b in enumerate(key)): name for key, name in level.items()}
    lines.append("    for u in range(first, last):\n")
    pick = [f"        both = {scalar[0]}\n"] + [
        f"        both = tl.where(entry == {j}, {scalar[j]}, both)\n" for j in range(1, topk_p)]
    pick += ["        b = (both >> 32).to(tl.int32)\n",
             "        page = (both & 0xFFFFFFFF).to(tl.int32)\n"]
    return [("    for u in range(first, last):\n", "".join(lines), 1),
            ("        b = tl.sum(tl.where(pick, ids, 0), axis=0)\n"
             "        page = tl.sum(tl.where(pick, pages, 0), axis=0)\n", "".join(pick), 1),
            ("        pick = usable & (rank == entry)\n", "", 1)]


VARIANTS["scalar_pick"] = _scalar_pick(4 if SMOKE else 16)  # the rows' TOPK_P

# fp8 e4m3 caches (run with --kv fp8e4m3): the pair conversions done other ways. An e4m3 byte
# moved into an fp16's high byte and its exponent and mantissa shifted right by one is the
# fp16 of its value × 2^-8 (exact, normals and subnormals; NaN becomes 480 · 2^-8): integer
# ops (the ALU's pipe, four lanes' worth of the conversion pipe's one) instead of the
# hardware's pair conversion, the 2^8 given back in fp32 after the products (the same bits).
# four e4m3 bytes ($2) -> two fp16 pairs ($0, $1) of their values × 2^-8: each byte moved into
# a half's high byte (prmt), its exponent and mantissa shifted right by one, its sign kept
_E4M3_BITS_PTX = (
    "{ .reg .b32 z, a, b, t; mov.b32 z, 0; prmt.b32 a, $2, z, 0x1404; "
    "prmt.b32 b, $2, z, 0x3424; and.b32 t, a, 0x7F007F00; shr.b32 t, t, 1; "
    "and.b32 a, a, 0x80008000; or.b32 $0, a, t; and.b32 t, b, 0x7F007F00; "
    "shr.b32 t, t, 1; and.b32 b, b, 0x80008000; or.b32 $1, b, t; }")
_E4M3_BITS = """

@triton.jit
def _e4m3_bits(x):
    \"\"\"An fp8 e4m3 tile as fp16 of its values × 2^-8, by integer ops.\"\"\"
    b = x.to(tl.uint8, bitcast=True).to(tl.uint16)
    return (((b & 0x7F) << 7) | ((b & 0x80) << 8)).to(tl.float16, bitcast=True)


@triton.jit
def _e4m3_bits_k(x):
    \"\"\"As `_e4m3_bits` by inline PTX, pure: Triton may convert after the tile's
    shared-memory load.\"\"\"
    return tl.inline_asm_elementwise(PTX, "=r,=r,r", [x], dtype=tl.float16, is_pure=True,
                                     pack=4)


@triton.jit
def _byte_high(x):
    \"\"\"Timing only: each byte as an fp16's high byte (e5m2's widening; wrong for e4m3).\"\"\"
    return (x.to(tl.uint8, bitcast=True).to(tl.uint16) << 8).to(tl.float16, bitcast=True)


""".replace("PTX,", repr(_E4M3_BITS_PTX) + ",")
_K_TMA = "        k = _tma_tile(kv_desc, page, 0, t0, kv_head, offs_t.shape[0], D).to(q.dtype)\n"
_K_LOAD = "        k = tl.load(base + kv_offs).to(q.dtype)\n"
# (16-bit tiles of the split kernel: rows below the page not read)
_K_MASKED = ("    elif ENDS_AT_LAST:\n"
             "        on_page = tl.arange(0, offs_t.shape[0]) + t0 >= 0\n"
             "        k = tl.load(base + kv_offs, mask=on_page[:, None], other=0.0).to(q.dtype)\n")
_DEF_KEY = "@triton.jit\ndef _key_scores("


def _k_edits(fn, scale):
    """K widened by ``fn``; the scores times ``scale`` (its 2^8) after the product."""
    return [(_DEF_KEY, _E4M3_BITS + _DEF_KEY, 1),
            (_K_TMA, _K_TMA.replace(".to(q.dtype)", "").replace("k = ", f"k = {fn}(")
             .replace("D)\n", "D))\n"), 1),
            (_K_LOAD, f"        k = {fn}(tl.load(base + kv_offs))\n", 1),
            ("    s = s * score_factor\n", f"    s = s * (score_factor * {scale})\n", 1)]


VARIANTS["k_bits"] = _k_edits("_e4m3_bits", 256.0)
VARIANTS["k_bits_asm"] = _k_edits("_e4m3_bits_k", 256.0)
VARIANTS["k_byte"] = _k_edits("_byte_high", 1.0)


# Per-token V scales with no range at all (timing only: fp16 probabilities times the scales
# as they are). Before the kernel took one range per split (2026-12-03, GPU-e5d08128): 32/2
# R128 Q1 57.50 -> 54.30 µs, 32/2 R32 22.29 -> 21.25, 16/1 R32 15.94 -> 15.18
# fp16 products (an fp16 q, or a bf16 q over an fp8 cache): P·V with the running output as
# its accumulator, as a bf16 q's is (Triton folds `acc * alpha + dot` into the product), the
# probabilities' scale not taken back (the output wrong by it: timing only)
VARIANTS["p16_acc"] = [(") * back,\n", "),\n"), (") * back)\n", "))\n"),
                       ("FP8_PTX)) * back\n", "FP8_PTX))\n")]
VARIANTS["pt_no_range"] = [
    ("    RANGE_ONCE: tl.constexpr = SCALES == \"per_token\" and q.dtype == tl.float16 and \\\n"
     "        TOPK_P * TILES > SPLITS\n",
     "    RANGE_ONCE: tl.constexpr = False\n", 1),
    ("                into, back = _fp16_range(tl.max(tl.where(seen, tl.abs(v_scale), 0.0), "
     "axis=0))\n", "                into, back = 1.0, 1.0\n", 1)]

# Per-token scales not read: every scale 1 (timing only: what reading them costs beside
# applying them)
VARIANTS["pt_no_loads"] = [
    ("        s = s * tl.load(k_scale_ptr + scale_head_off + slot)[None, :]\n",
     "        s = s * tl.full(slot.shape, 1.0, tl.float32)[None, :]\n", 1),
    ("            v_scale = tl.load(v_scale_ptr + scale_head_off + v_slot)\n",
     "            v_scale = tl.full(v_slot.shape, 1.0, tl.float32)\n", 1)]

# Per-token V scales brought into fp16's range by each tile's own at every launch, as the
# kernel did before 2026-12-03 (it now takes one range per split for launches of splits of
# several steps). Within CLOSE's bound of the kernel.
VARIANTS["pt_range_per_tile"] = [
    ("    RANGE_ONCE: tl.constexpr = SCALES == \"per_token\" and q.dtype == tl.float16 and \\\n"
     "        TOPK_P * TILES > SPLITS\n",
     "    RANGE_ONCE: tl.constexpr = False\n", 1)]


# The splits of a (row, KV head) as one thread-block cluster: grid (splits, pairs), clusters
# of the first axis. Each split leaves its o and lse at the end of its own shared memory (the
# launch's dynamic size raised by them, past what the kernel uses), and split 0 merges them
# through distributed shared memory (inline PTX), in split order as `_merged_partials` does:
# no partials in global memory, no fence, no arrival atomic. A correct kernel (compare bits
# and times); NVIDIA sm_90 only (inline PTX: not on the interpreter).
def _source_block(first: str, last: str) -> str:
    """The generated kernel's lines from the one starting with ``first`` through the one
    starting with ``last`` (the text a variant replaces, read rather than copied here)."""
    lines = open(base.__file__).read().splitlines(keepends=True)
    i = next(n for n, line in enumerate(lines) if line.startswith(first))
    j = next(n for n in range(i, len(lines)) if lines[n].startswith(last))
    return "".join(lines[i:j + 1])


# K of an e4m3 cache read as 16-bit pairs (as the kernel reads V): as the scores' operand Triton loads such a tile
# by ldmatrix (d contiguous), a thread holding the pairs c and c + 1 (c even: bytes 2c .. 2c + 3
# of a key) widens their low and high halves by one pair conversion each, into K's elements
# 2c, 2c + 1 of one product ("lo", element c and c + 1) and 2c + 2, 2c + 3 of another ("hi"):
# q's columns split the same way once (lo: 4m, 4m + 1; hi: 4m + 2, 4m + 3), the scores the sum
# of the two products. No register moves for the fp8 operand's order; the sum over d in another
# order (not the same bits: within the variant's bound).
_K_PAIRS_PTX = ("{ .reg .b16 a, b; mov.b32 {a, b}, $2; cvt.rn.f16x2.e4m3x2 $0, a; "
                "cvt.rn.f16x2.e4m3x2 $1, b; }")
_Q_SPLIT = ("    q4 = tl.reshape(q, [GP, D // 4, 2, 2])\n"
            "    q_lo, q_hi = tl.split(tl.permute(q4, (0, 1, 3, 2)))\n"
            "    q = (tl.reshape(q_lo, [GP, D // 2]), tl.reshape(q_hi, [GP, D // 2]))\n")


def _k_pairs(widen: str) -> list:
    """The split kernel with K read as 16-bit pairs, widened by ``widen`` (source lines making
    ``lo`` and ``hi`` of ``w``)."""
    return [
        ("    q, q_unscale = _products_operand(q, DOT)\n",
         "    q, q_unscale = _products_operand(q, DOT)\n" + _Q_SPLIT, 1),
        (_K_TMA + _K_MASKED + "    else:\n" + _K_LOAD + "    if DOT == \"tf32x3\":\n"
         "        s = tl.dot(q, tl.trans(k), input_precision=\"tf32x3\")\n    else:\n"
         "        s = tl.dot(q, tl.trans(k))\n",
         "        pass\n    w = tl.load(base.to(tl.pointer_type(tl.int16)) + offs_t[:, None]"
         " * (stride_kt // 2)\n                + tl.arange(0, D // 2)[None, :])\n" + widen
         + "    s = tl.dot(q[1], tl.trans(hi), tl.dot(q[0], tl.trans(lo)))\n", 1),
        ("    if q.dtype == tl.float16:\n        # fp16 probabilities",
         "    if q[0].dtype == tl.float16:\n        # fp16 probabilities", 1)]


# (the same pairs by Triton's ops, in the order the pair conversions give: the interpreter)
_K_PAIRS_TL = (
    "    w2 = tl.reshape(w, [w.shape[0], w.shape[1] // 2, 2])\n"
    "    w_even, w_odd = tl.split(w2)\n"
    "    lo = tl.reshape(tl.join(_byte_of(w_even, 0), _byte_of(w_even, 8)), w.shape)\n"
    "    hi = tl.reshape(tl.join(_byte_of(w_odd, 0), _byte_of(w_odd, 8)), w.shape)\n")
_BYTE_OF = """

@triton.jit
def _byte_of(w, shift: tl.constexpr):
    \"\"\"The e4m3 byte at ``shift`` of each 16-bit pair, as fp16.\"\"\"
    return ((w >> shift) & 0xFF).to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(tl.float16)

"""
VARIANTS["k_pairs"] = _k_pairs(
    "    lo, hi = tl.inline_asm_elementwise(" + repr(_K_PAIRS_PTX) + ", \"=r,=r,r\", [w],\n"
    "                                       dtype=(tl.float16, tl.float16), is_pure=True,"
    " pack=2)\n")
VARIANTS["k_pairs_tl"] = [(_DEF_KEY, _BYTE_OF + _DEF_KEY, 1)] + _k_pairs(_K_PAIRS_TL)
# K's pairs through the tensor memory accelerator where the launch has it (k_pairs reads them
# by pointers at every launch): the descriptor made over the cache viewed as 16-bit pairs
# (every K/V stride even: the launches' V pairs already ask for it), its box D / 2 pairs wide
_PAIRS_DESC = ("    desc.base, (desc.shape, desc.strides, desc.block_shape) = kv, layout\n",
               "    (shape, strides, box) = layout\n"
               "    desc.base = kv.view(torch.int16)\n"
               "    desc.shape = shape[:-1] + [shape[-1] // 2]\n"
               "    desc.strides = [st // 2 for st in strides[:-1]] + [1]\n"
               "    desc.block_shape = box[:-1] + [box[-1] // 2]\n", 1)
_PAIRS_TMA = ("        pass\n    w = tl.load(",
              "        w = _tma_tile(kv_desc, page, 0, t0, kv_head, offs_t.shape[0], D // 2)\n"
              "    else:\n        w = tl.load(")
VARIANTS["k_pairs_tma"] = [(old, new.replace(*_PAIRS_TMA), *rest)
                           for old, new, *rest in VARIANTS["k_pairs"]] + [_PAIRS_DESC]

# Scores in log2 units: sm_scale taken times log2(e) once per program, so each score's
# exponent is one subtraction (exp2(s - m)), not a subtraction and a multiply; the log-sum-exp
# of the partials back in natural units. Fewer instructions per key step in both kernels (the
# step is bound by its own instruction latencies at one warp per scheduler: OPEN_PROBLEMS.md);
# the same result up to rounding (within CLOSE's bound), but where `_scores_scales` takes the
# scale into the exponent (the factors times it may overflow there).
VARIANTS["log2_scores"] = [
    ("    score_factor, exp_scale, lse_unit = _scores_scales(q_unscale, sm_scale, DOT)\n",
     "    score_factor, exp_scale, lse_unit = _scores_scales(q_unscale, sm_scale, DOT)\n"
     "    score_factor, lse_unit = score_factor * exp_scale, lse_unit / exp_scale\n", 2),
    ("    alpha = tl.exp2((m_i - shift) * exp_scale)\n    p = tl.exp2((s - shift[:, None]) * exp_scale)\n",
     "    alpha = tl.exp2(m_i - shift)\n    p = tl.exp2(s - shift[:, None])\n", 1),
]

# Keys masked at every step of the split kernel, as before 2026-12-05 (now only in the block
# holding a row's last visible key). The same bits.
VARIANTS["mask_every_step"] = [
    ("    if last < _BLOCK - 1:\n"
     "        # only the block holding the row's last visible key masks: in any other every key of\n"
     "        # the tile is visible (tokens t0 .. t0 + BLOCK_N - 1, a 16-bit tile starting at t0),\n"
     "        # and its steps skip the compares and selects (one uniform branch)\n"
     '        s = tl.where(visible[None, :], s, float("-inf"))\n',
     '    s = tl.where(visible[None, :], s, float("-inf"))\n', 1),
]

# The splits' outputs kept in bf16 (half the partials' bytes written and merged; the
# log-sum-exps stay fp32, where they were): bf16 holds any convex combination of V rows, so
# the range is safe; the merged result within CLOSE's bound.
_BF16_PARTS = "part_ptr.to(tl.pointer_type(tl.bfloat16))"
VARIANTS["bf16_partials"] = [
    ("        tl.store(part_ptr + slot[:, None] * D + offs_d[None, :], o, mask=lane_ok[:, None])\n",
     f"        tl.store({_BF16_PARTS} + slot[:, None] * D + offs_d[None, :],\n"
     "                 o.to(tl.bfloat16), mask=lane_ok[:, None])\n", 1),
    ("        o_s = tl.load(part_ptr + (sp * split_stride + first_slot)[:, None] * D\n",
     f"        o_s = tl.load({_BF16_PARTS} + (sp * split_stride + first_slot)[:, None] * D\n", 1),
]
VARIANTS["bf16_partials_split_only"] = VARIANTS["bf16_partials"] + VARIANTS["split_only"]

# The split kernel's row sums reduced across its warps at every key step, as before
# 2026-12-05 (now kept per key column and summed after the loop: `_folded_sums`). Within
# CLOSE's bound (the sums in another order).
VARIANTS["sums_per_step"] = SUMS_PER_STEP

# The split kernel compiled to at most 128 (168) registers per thread: its launch option
# max_registers (specs/sparse_attn.py), the source unchanged. The same bits.
VARIANTS["regs128"] = VARIANTS["regs168"] = []

# A scalar K and V scale read at every key step, as the kernel read them before 2026-12-03
# (now once per program, K's folded into the scores' scale: `_scalar_scales`); the split
# kernel only (the query-tiled one would scale K twice). Over a cache with scalar scales.
VARIANTS["scales_per_step"] = [
    ("    sm_scale, v_factor = _scalar_scales(sm_scale, k_scale_ptr, v_scale_ptr, SCALES)\n"
     "    score_factor, exp_scale, lse_unit = _scores_scales(q_unscale, sm_scale, DOT)\n"
     "    m_i = tl.full([GP]", "    v_factor = 1.0\n"
     "    score_factor, exp_scale, lse_unit = _scores_scales(q_unscale, sm_scale, DOT)\n"
     "    m_i = tl.full([GP]", 1),
    ("    s = s * score_factor\n",
     "    s = s * score_factor\n    if SCALES == \"scalar\":\n        s = s * tl.load(k_scale_ptr)\n",
     1),
    ("            back = v_factor * _P16_BACK\n",
     "            back = _P16_BACK\n            if SCALES == \"scalar\":\n"
     "                back = tl.load(v_scale_ptr) * _P16_BACK\n", 1),
    ("            p = p * v_factor\n", "            p = p * tl.load(v_scale_ptr)\n", 1)]

# the split's partials to global memory and the last arrival's merge
CLUSTER_OLD_PARTIALS = _source_block("        # Partials in one fp32 buffer",
                                     "                                split_stride, first_slot,")
CLUSTER_PARTIALS = """\
        lse = tl.where(seen, m_i + tl.log(tl.where(seen, l_i, 1.0)), float("-inf"))
        own = _cluster_own_base(GP * D * 4 + GP * 4)
        o_addr = own + (lane[:, None] * D + offs_d[None, :]) * 4
        lse_addr = own + GP * D * 4 + lane * 4
        _st_shared(o_addr, o)
        _st_shared(lse_addr, lse)
        _cluster_sync()
        if split == 0:
            top = tl.full([GP], float("-inf"), tl.float32)
            for sp in tl.static_range(SPLITS):
                top = tl.maximum(top, _ld_cluster(lse_addr, sp))
            top = tl.where(top == float("-inf"), 0.0, top)
            total = tl.zeros([GP], tl.float32)
            merged = tl.zeros([GP, D], tl.float32)
            for sp in tl.static_range(SPLITS):
                w = tl.exp2((_ld_cluster(lse_addr, sp) - top) * _LOG2E)
                merged += _ld_cluster(o_addr, sp) * w[:, None]
                total += w
            merged = merged / tl.where(total != 0.0, total, 1.0)[:, None]
            merged = tl.where((total != 0.0)[:, None], merged, 0.0)
            tl.store(out_ptrs, merged.to(out_ptr.dtype.element_ty), mask=lane_ok[:, None])
        # the peers' shared memory must outlive split 0's reads
        _cluster_sync()
"""
CLUSTER_HELPERS = """

@triton.jit
def _cluster_own_base(nbytes: tl.constexpr):
    # shared-window address of the last nbytes of this CTA's dynamic shared memory
    return tl.inline_asm_elementwise(
        "{ .reg .u32 sz; mov.u32 sz, %dynamic_smem_size; mov.u32 $0, global_smem; "
        "add.u32 $0, $0, sz; }", "=r", [], dtype=tl.int32, is_pure=True, pack=1) - nbytes


@triton.jit
def _st_shared(addr, value):
    tl.inline_asm_elementwise("st.shared.f32 [$1], $2; mov.u32 $0, 0;", "=r,r,f",
                              [addr, value], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _ld_cluster(addr, rank):
    # addr in the shared memory of the cluster's CTA of that rank
    return tl.inline_asm_elementwise(
        "{ .reg .u32 ra; mapa.shared::cluster.u32 ra, $1, $2; ld.shared::cluster.f32 $0, [ra]; }",
        "=f,r,r", [addr, addr * 0 + rank], dtype=tl.float32, is_pure=False, pack=1)


@triton.jit
def _cluster_sync():
    # every thread of every CTA of the cluster: earlier shared stores visible to all of them
    tl.inline_asm_elementwise(
        "barrier.cluster.arrive.release.aligned; barrier.cluster.wait.acquire.aligned; "
        "mov.u32 $0, 0;", "=r", [], dtype=tl.int32, is_pure=False, pack=1)


class _ClusterLaunch(_rt.KernelLaunch):
    # the grid's first axis (the splits) as one cluster; the compiled kernel's launch metadata
    # (num_warps, num_ctas, shared bytes) says so to Triton's launcher, which then makes
    # clusters of num_ctas CTAs along x (and multiplies grid x by it: grid x is passed as 1)
    __slots__ = ("meta",)

    def __call__(self, *args):
        if self.compiled is None:
            self.compiled = self.kernel.warmup(*args, grid=self.grid, **self.options)
            self.compiled.run  # loads the binary (compiled.function is None until then)
            names = self.kernel.arg_names
            gp, d = args[names.index("GP")], args[names.index("D")]
            warps, _, shared = self.compiled.packed_metadata
            total = shared + gp * d * 4 + gp * 4
            self.meta = (warps, self.grid[0], total)
            # raises the function's dynamic shared memory limit to total (and counts clusters)
            triton.runtime.driver.active.utils.cuOccupancyMaxActiveClusters(
                self.compiled.function, total, self.grid[0])
        _, gy, gz = self.grid
        stream = torch._C._cuda_getCurrentRawStream(torch._C._cuda_getDevice())
        self.compiled.run(1, gy, gz, stream, self.compiled.function, self.meta, None, None,
                          None, *args)
"""
VARIANTS["cluster_merge"] = [
    ("    pair = tl.program_id(0) // HS\n", "    pair = tl.program_id(1) // HS\n"),
    ("    split = tl.program_id(1)\n", "    split = tl.program_id(0)\n"),
    ("    head = g * G + tl.program_id(0) % HS * GH + lane",
     "    head = g * G + tl.program_id(1) % HS * GH + lane"),
    (CLUSTER_OLD_PARTIALS, CLUSTER_PARTIALS),
    ("    attn = _rt.KernelLaunch(_sparse_attn_kernel, (T * Hkv * HS, splits),",
     "    attn = _ClusterLaunch(_sparse_attn_kernel, (splits, T * Hkv * HS),"),
    ("\ndef tile_rows(", CLUSTER_HELPERS + "\n\ndef tile_rows("),
]
# Keys as the rows of both products: S^T = K·q^T [keys, lanes] and O^T = V^T·P^T [D, lanes],
# so each product has 64·k rows (wgmma on sm_90, the K/V tiles read straight from shared
# memory) instead of the 16 padded query lanes (mma.sync after ldmatrix). The softmax
# reduces over the first axis; q and the accumulator are held transposed. Computes the
# kernel's result with the products added in another order (checked against it within
# KEYS_ROWS_TOL, not bit for bit).
KEYS_ROWS_FUNCTIONS = """@triton.jit
def _key_scores(q, page, offs_t, kv_ptr, head_off, stride_kp, stride_kt, stride_kd,
                k_scale_ptr, scale_head_off, score_factor, kv_desc, kv_head, t0,
                D: tl.constexpr, SCALES: tl.constexpr, DOT: tl.constexpr, TMA: tl.constexpr,
                ENDS_AT_LAST: tl.constexpr):
    # scaled scores K·q^T [keys, lanes] (q given transposed, [D, lanes]; tiles by pointers)
    offs_d = tl.arange(0, D)
    base = kv_ptr + page.to(tl.int64) * stride_kp + head_off
    kv_offs = offs_t[:, None] * stride_kt + offs_d[None, :] * stride_kd
    on_page = (tl.arange(0, offs_t.shape[0]) + t0 >= 0) | (not ENDS_AT_LAST)
    k = tl.load(base + kv_offs, mask=on_page[:, None], other=0.0).to(q.dtype)
    if DOT == "tf32x3":
        s = tl.dot(k, q, input_precision="tf32x3")
    else:
        s = tl.dot(k, q)
    if DOT == "fp16":
        s = s * tl.trans(score_factor)  # (the lanes' factors: [lanes, 1])
    else:
        s = s * score_factor
    if SCALES == "per_token":
        slot = page.to(tl.int64) * _BLOCK + offs_t
        s = s * tl.load(k_scale_ptr + scale_head_off + slot)[:, None]
    return s, base
"""
KEYS_ROWS_FOLD = """@triton.jit
def _fold_scores(q, m_i, l_i, acc, s, exp_scale, v_rows, base, v_offs, v_slot, v_off,
                 v_scale_ptr, v_factor, scale_head_off, kv_desc, kv_head, page, t0, SCALES: tl.constexpr,
                 DOT: tl.constexpr, TMA: tl.constexpr, FP8_PTX: tl.constexpr,
                 V_PAIRS: tl.constexpr, RANGE_ONCE: tl.constexpr, ENDS_AT_LAST: tl.constexpr):
    # s [keys, lanes], acc [D, lanes] (16-bit caches: no fp16 probabilities' V scale range,
    # no V pairs)
    m_new = tl.maximum(m_i, tl.max(s, axis=0))
    shift = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2((m_i - shift) * exp_scale)
    p = tl.exp2((s - shift[None, :]) * exp_scale)
    l_i = l_i * alpha + tl.sum(p, axis=0)
    if SCALES == "scalar":
        p = p * v_factor
    elif SCALES == "per_token":
        p = p * tl.load(v_scale_ptr + scale_head_off + v_slot)[:, None]
    on_page = (tl.arange(0, s.shape[0]) + t0 >= 0) | (not ENDS_AT_LAST)
    v = tl.load(base + v_off + v_offs, mask=on_page[:, None], other=0.0).to(q.dtype)
    if DOT == "tf32x3":
        pv = tl.dot(tl.trans(v), p, input_precision="tf32x3")
    else:
        pv = tl.dot(tl.trans(v), p.to(q.dtype))
    acc = acc * alpha[None, :] + pv
    return m_new, l_i, acc


"""
VARIANTS["keys_rows"] = SUMS_PER_STEP + [
    (_source_block("def _key_scores(", "    return s, base"),
     KEYS_ROWS_FUNCTIONS.split("@triton.jit\n", 1)[1]),
    (_source_block("def _fold_scores(", "    return m_new, l_i, acc"),
     KEYS_ROWS_FOLD.split("@triton.jit\n", 1)[1]),
    ("    s = tl.where(visible[None, :], s, float(\"-inf\"))\n    return _fold_scores(",
     "    s = tl.where(visible[:, None], s, float(\"-inf\"))\n    return _fold_scores("),
    ("    acc = _output_zeros(GP, D, V_PAIRS)\n    ids_ptr",
     "    acc = tl.zeros([D, GP], tl.float32)\n    q = tl.trans(q)\n    ids_ptr"),
    (LOOP_ARGS + SEEN
     + "    o = _output_joined(acc, V_PAIRS) * _output_unit(q_ptr, kv_ptr, SCALES) / tl.where(\n"
     "        seen, l_i, 1.0)[:, None]\n",
     LOOP_ARGS + SEEN + "    o = tl.trans(acc) / tl.where(seen, l_i, 1.0)[:, None]\n"),
]
# The G query lanes padded to 64 instead of 16: both products become warpgroup products
# (wgmma on sm_90: K and V straight from the shared-memory tiles, P from registers, no
# ldmatrix and no layout change of P through shared memory), at four times the softmax
# arithmetic (the padding lanes compute too). The kernel's result with the products added in
# another order (checked within CLOSE).
VARIANTS["wgmma"] = [("MIN_DOT_ROWS = 16", "MIN_DOT_ROWS = 64")]
VARIANTS["wgmma_split_only"] = VARIANTS["wgmma"] + VARIANTS["split_only"]

# The query tile with the keys as the rows of both products: S^T = K·q^T [keys, lanes] and
# O^T = V^T·P^T [D, lanes] (the tile's lanes, q and the running output held transposed; the
# softmax reduces over the first axis). Over an fp8 cache the widened K and V become the
# products' first operands, which a warpgroup product may take from registers: Triton can
# then widen each tile from shared memory into registers (RS products) instead of sending
# the widened tile back through shared memory as the second operand; only P^T goes through
# shared memory. V is widened by Triton's cast (the inline PTX of `_widened` is not pure, so
# Triton would not move it). The kernel's result with the products added in another order
# (checked within CLOSE's bound).
TILE_KEYS_ROWS_FOLD = """@triton.jit
def _fold_scores_t(qt, m_i, l_i, acc, s, exp_scale, v_rows, base, v_offs, v_slot, v_off,
                   v_scale_ptr, v_factor, scale_head_off, kv_desc, kv_head, page, t0, SCALES: tl.constexpr,
                   DOT: tl.constexpr, TMA: tl.constexpr, FP8_PTX: tl.constexpr,
                   V_PAIRS: tl.constexpr, RANGE_ONCE: tl.constexpr, ENDS_AT_LAST: tl.constexpr):
    # `_fold_scores` transposed: s [keys, lanes], acc [D, lanes] (V not as pairs, widened by
    # Triton's cast)
    FP8: tl.constexpr = base.dtype.element_ty.primitive_bitwidth == 8
    m_new = tl.maximum(m_i, tl.max(s, axis=0))
    shift = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2((m_i - shift) * exp_scale)
    p = tl.exp2((s - shift[None, :]) * exp_scale)
    l_i = l_i * alpha + tl.sum(p, axis=0)
    # V^T [D, keys]: by pointers read transposed (d along the first axis), so that no tile
    # is transposed in registers
    if TMA:
        vt = tl.trans(_v_rows_taken(_tma_tile(kv_desc, page, 1, t0, kv_head, s.shape[0],
                                              acc.shape[0]), v_rows[:, None], FP8))
    else:
        vt = tl.load(base + v_off + tl.trans(v_offs))
    if qt.dtype == tl.float16:
        if SCALES == "per_token":
            v_scale = tl.load(v_scale_ptr + scale_head_off + v_slot)
            if RANGE_ONCE:
                into, back = v_factor, 1.0 / v_factor
            else:
                seen = tl.max(s, axis=1) > float("-inf")
                into, back = _fp16_range(tl.max(tl.where(seen, tl.abs(v_scale), 0.0), axis=0))
            p16 = (p * tl.minimum(v_scale * into, _FP16_MAX)[:, None]).to(tl.float16)
        else:
            p16 = (p * _P16_SCALE).to(tl.float16)
            back = v_factor * _P16_BACK
        if _p16_accumulates(qt.dtype, base.dtype.element_ty, SCALES):
            acc = acc * alpha[None, :] + tl.dot(vt, p16)
        else:
            acc = acc * alpha[None, :] + tl.dot(vt.to(tl.float16), p16) * back
    else:
        if SCALES == "scalar":
            p = p * v_factor
        elif SCALES == "per_token":
            p = p * tl.load(v_scale_ptr + scale_head_off + v_slot)[:, None]
        if DOT == "tf32x3":
            pv = tl.dot(vt.to(qt.dtype), p, input_precision="tf32x3")
        else:
            pv = tl.dot(vt.to(qt.dtype), p.to(qt.dtype))
        acc = acc * alpha[None, :] + pv
    return m_new, l_i, acc

"""


def _edited(text: str, edits) -> str:
    """``text`` with each (old, new) of ``edits`` replaced (old must be in it)."""
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    return text


# the generated `_key_scores` and `_attend_tile_block` with the keys as the first axis
_KEY_SCORES = _source_block("def _key_scores(", "    return s, base")
_TILE_BLOCK = _source_block("def _attend_tile_block(", "                        first, SCALES, DOT,"
                            " TMA, FP8_PTX, False, RANGE_ONCE, False)")
TILE_KEYS_ROWS_SCORES = _edited(_KEY_SCORES, [
    ("def _key_scores(", "def _key_scores_t("),
    ('"""Scaled scores q·Kᵀ',
     '"""(transposed: q [D, lanes], scores K·qᵀ [keys, lanes]) Scaled scores'),
    ("tl.dot(q, tl.trans(k)", "tl.dot(k, q"),
    ("slot)[None, :]", "slot)[:, None]")])
TILE_KEYS_ROWS_BLOCK = _edited(_TILE_BLOCK, [
    ("_key_scores(q,", "_key_scores_t(q,"),
    ("(key[None, :] <= lane_pos[:, None]) & (key[None, :] < lane_len[:, None]) & \\\n"
     "            lane_member[:, None]",
     "(key[:, None] <= lane_pos[None, :]) & (key[:, None] < lane_len[None, :]) & \\\n"
     "            lane_member[None, :]"),
    ("(offs_t[None, :] <= lane_hi[:, None]) & (offs_t >= -first)[None, :]",
     "(offs_t[:, None] <= lane_hi[None, :]) & (offs_t >= -first)[:, None]"),
    ("return _fold_scores(", "return _fold_scores_t(")])
VARIANTS["tile_keys_rows"] = [
    (_TILE_BLOCK, TILE_KEYS_ROWS_SCORES + "\n\n@triton.jit\n"
     + TILE_KEYS_ROWS_FOLD.split("@triton.jit\n", 1)[1] + "\n\n@triton.jit\n"
     + TILE_KEYS_ROWS_BLOCK),
    ("    acc = tl.zeros([LANES, D], tl.float32)\n",
     "    acc = tl.zeros([D, LANES], tl.float32)\n    qt = tl.trans(q)\n"
     "    if DOT == \"fp16\":  # (the lanes' factors: [lanes, 1])\n"
     "        score_factor = tl.trans(score_factor)\n"),
    ("_attend_tile_block(\n                q, m_i,", "_attend_tile_block(\n                qt, m_i,"),
    ("_attend_tile_block(\n                        q, m_i,",
     "_attend_tile_block(\n                        qt, m_i,"),
    ("    o = acc * _output_unit(q_ptr, kv_ptr, SCALES)",
     "    o = tl.trans(acc) * _output_unit(q_ptr, kv_ptr, SCALES)"),
]
# Each warp its own share of a step's keys with its own running softmax (a batched product:
# the warps are the batch axis, so a step's row max, row sum and P·V operand stay inside one
# warp: no barrier per step), the warps' partials combined once after the loop. Computes the
# kernel's result with the sums in another order (checked within CLOSE's bound).
WARP_SPLITS_BLOCK = """@triton.jit
def _attend_block_ws(q, m_i, l_i, acc, b, page, part, pos, seq_len,
                     kv_ptr, head_off, stride_kp, stride_kt, stride_kd, v_off,
                     k_scale_ptr, v_scale_ptr, v_factor, scale_head_off, score_factor,
                     exp_scale, kv_desc, kv_head,
                     D: tl.constexpr, BLOCK_N: tl.constexpr, SCALES: tl.constexpr,
                     DOT: tl.constexpr, TMA: tl.constexpr, WS: tl.constexpr):
    # (tiles by pointers)
    # q [WS, GP, D]; m_i, l_i [WS, GP]; acc [WS, GP, D]: warp w takes keys w·KW .. w·KW+KW−1
    KW: tl.constexpr = BLOCK_N // WS
    offs_t = part * BLOCK_N + tl.arange(0, WS)[:, None] * KW + tl.arange(0, KW)[None, :]
    offs_d = tl.arange(0, D)
    base = kv_ptr + page.to(tl.int64) * stride_kp + head_off
    kv_offs = offs_t[:, :, None] * stride_kt + offs_d[None, None, :] * stride_kd
    k = tl.load(base + kv_offs).to(q.dtype)
    if DOT == "tf32x3":
        s = tl.dot(q, tl.permute(k, (0, 2, 1)), input_precision="tf32x3")
    else:
        s = tl.dot(q, tl.permute(k, (0, 2, 1)))
    s = s * score_factor
    slot = page.to(tl.int64) * _BLOCK + offs_t
    if SCALES == "per_token":
        s = s * tl.load(k_scale_ptr + scale_head_off + slot)[:, None, :]
    key = b * _BLOCK + offs_t
    visible = (key <= pos) & (key < seq_len)
    s = tl.where(visible[:, None, :], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=2))
    shift = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2((m_i - shift) * exp_scale)
    p = tl.exp2((s - shift[:, :, None]) * exp_scale)
    l_i = l_i * alpha + tl.sum(p, axis=2)
    if SCALES == "scalar":
        p = p * v_factor
    elif SCALES == "per_token":
        p = p * tl.load(v_scale_ptr + scale_head_off + slot)[:, None, :]
    v = tl.load(base + v_off + kv_offs).to(q.dtype)
    if DOT == "tf32x3":
        pv = tl.dot(p, v, input_precision="tf32x3")
    else:
        pv = tl.dot(p.to(q.dtype), v)
    acc = acc * alpha[:, :, None] + pv
    return m_new, l_i, acc


"""
VARIANTS["warp_splits"] = [
    ("@triton.jit\ndef _attend_block(", WARP_SPLITS_BLOCK + "@triton.jit\ndef _attend_block("),
    ("    m_i = tl.full([GP], float(\"-inf\"), tl.float32)\n"
     + SUMS_INIT +
     "    acc = _output_zeros(GP, D, V_PAIRS)\n",
     "    WS: tl.constexpr = 4\n"
     "    q = tl.broadcast_to(q[None, :, :], [WS, GP, D])\n"
     "    m_i = tl.full([WS, GP], float(\"-inf\"), tl.float32)\n"
     "    l_i = tl.zeros([WS, GP], tl.float32)\n"
     "    acc = tl.zeros([WS, GP, D], tl.float32)\n"),
    ("        m_i, l_i, acc = _attend_block(\n", "        m_i, l_i, acc = _attend_block_ws(\n"),
    (LOOP_END,
     "            scale_head_off, score_factor, exp_scale, kv_desc, g, D, BLOCK_N, SCALES, DOT,"
     " TMA, WS)\n"
     "    # the warps' partials, combined\n"
     "    m_all = tl.max(m_i, axis=0)\n"
     "    w = tl.exp2((m_i - tl.where(m_all == float(\"-inf\"), 0.0, m_all)[None, :]) * exp_scale)\n"
     "    l_i = tl.sum(l_i * w, axis=0)\n"
     "    acc = tl.sum(acc * w[:, :, None], axis=0)\n"
     "    m_i = m_all\n" + SEEN),
]
# A timeline of each program (timing only beside that: the kernel's result): the global
# timer (ns) at its start, once its list is compacted (ids and page ids loaded), after its
# last key step and at its end, with its SM, written to TIMELINE through the cu_seqlens_q
# pointer that decode never reads. After the timing the last replay's records (L2 flushed,
# graph replay) are summarized: the spread of start times, each phase's length, and what
# the last program to end did. NVIDIA only (inline PTX).
TIMELINE_HELPERS = """

@triton.jit
def _now():
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64,
                                     is_pure=False, pack=1)


@triton.jit
def _now_after(x):
    # the timer once x (an int32 scalar) exists
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [x], dtype=tl.int64,
                                     is_pure=False, pack=1)


@triton.jit
def _now_after_f(x):
    # the timer once x (fp32) exists: the largest over the tensor's elements
    return tl.max(tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,f", [x],
                                            dtype=tl.int64, is_pure=False, pack=1), axis=0)


@triton.jit
def _sm_id():
    return tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=tl.int32,
                                     is_pure=False, pack=1)
"""
TIMELINE_FIELDS = ("start", "listed", "looped", "end", "sm")
VARIANTS["timeline"] = [
    ("    # consecutive programs share a (row, KV head): its pages are read once from memory\n",
     "    t_start = _now()\n"
     "    # consecutive programs share a (row, KV head): its pages are read once from memory\n"),
    ("    count = tl.sum(usable.to(tl.int32), axis=0)\n",
     "    count = tl.sum(usable.to(tl.int32), axis=0)\n    t_listed = _now_after(count)\n"),
    (LOOP_END,
     LOOP_END.replace(SEEN, "    t_looped = _now_after_f(l_i)\n" + SEEN)),
    ("                                split_stride, first_slot, lane_ok, offs_d, GP, D, SPLITS)\n"
     "\n\n@triton.jit\ndef _merged_partials(",
     "                                split_stride, first_slot, lane_ok, offs_d, GP, D, SPLITS)\n"
     "    t_end = _now()\n"
     "    rec = cu_ptr + (tl.program_id(1) * tl.num_programs(0) + tl.program_id(0)) * 5\n"
     "    tl.store(rec, t_start)\n    tl.store(rec + 1, t_listed)\n"
     "    tl.store(rec + 2, t_looped)\n    tl.store(rec + 3, t_end)\n"
     "    tl.store(rec + 4, _sm_id().to(tl.int64))\n"
     "\n\n@triton.jit\ndef _merged_partials("),
    ("        attn(q, kv, topk_idx, block_table, seq_lens, cu_seqlens_q, prefix_lens, k_scale,",
     "        attn(q, kv, topk_idx, block_table, seq_lens, TIMELINE, prefix_lens, k_scale,"),
    ("\ndef tile_rows(", TIMELINE_HELPERS + "\n\nTIMELINE = torch.zeros(1 << 16, dtype=torch.int64,"
     " device=\"cuda\")\n\n\ndef tile_rows("),
]

PREFETCH_HELPER = '''
@triton.jit
def _prefetch_l2(ptrs, wanted):
    """Requests the 128-byte line at each pointer where ``wanted`` into L2 (no register, no
    shared memory)."""
    return tl.inline_asm_elementwise(
        "{ .reg .pred p; setp.ne.b32 p, $2, 0; @p prefetch.global.L2 [$1]; mov.u32 $0, 0; }",
        "=r,l,r", [ptrs, wanted.to(tl.int32)], dtype=tl.int32, is_pure=False, pack=1)
'''
# The program's whole share of K and V lines requested into L2 as soon as its pages are known,
# so that the memory system holds every byte the program will read from its first step (the
# tile loads then hit L2; the same bits). 128-byte lines of each token's head row.
VARIANTS["prefetch_l2"] = [
    ("    last = tl.minimum(first + share, count * TILES)\n",
     "    last = tl.minimum(first + share, count * TILES)\n"
     "    mine = usable & (rank * TILES + TILES > first) & (rank * TILES < last)\n"
     "    tok = tl.arange(0, _BLOCK)\n"
     "    line0 = kv_ptr + tl.where(mine, pages, 0)[:, None].to(tl.int64) * stride_kp \\\n"
     "        + head_off + tok[None, :] * stride_kt\n"
     "    wanted = mine[:, None] & (tok[None, :] >= 0)\n"
     "    LINE: tl.constexpr = 128 // kv_ptr.dtype.element_ty.primitive_bitwidth * 8\n"
     "    for d0 in tl.static_range(0, D, LINE):\n"
     "        _prefetch_l2(line0 + d0 * stride_kd, wanted)\n"
     "        _prefetch_l2(line0 + d0 * stride_kd + v_off, wanted)\n"),
    ("\ndef tile_rows(", PREFETCH_HELPER + "\n\ndef tile_rows("),
]


def _next_prefetch(ahead):
    """Source edits: at each step the tile ``ahead`` steps on (K and V lines of its page) is
    requested into L2 before the step waits for its own, so the memory system keeps streaming
    while the program takes the step's products (at two stages a program holds one tile
    buffer: without it the next tile is requested only once this step is done). The step's
    own tile was requested before (the pipeline's prologue or the step before), so these
    queue behind it, unlike `prefetch_l2`'s. The same bits."""
    return [
        ("        page = tl.sum(tl.where(pick, pages, 0), axis=0)\n"
         "        m_i, l_i, acc = _attend_block(\n",
         "        page = tl.sum(tl.where(pick, pages, 0), axis=0)\n"
         f"        nxt = u + {ahead}\n"
         "        pick_n = usable & (rank == nxt // TILES) & (nxt < last)\n"
         "        page_n = tl.sum(tl.where(pick_n, pages, 0), axis=0)\n"
         "        tok_n = (nxt % TILES) * BLOCK_N + tl.arange(0, BLOCK_N)\n"
         "        line_n = kv_ptr + page_n.to(tl.int64) * stride_kp + head_off + tok_n * stride_kt\n"
         "        want_n = (tl.sum(pick_n.to(tl.int32), axis=0) > 0) & (tok_n >= 0)\n"
         "        LINE: tl.constexpr = 128 // kv_ptr.dtype.element_ty.primitive_bitwidth * 8\n"
         "        for d0 in tl.static_range(0, D, LINE):\n"
         "            _prefetch_l2(line_n + d0 * stride_kd, want_n)\n"
         "            _prefetch_l2(line_n + d0 * stride_kd + v_off, want_n)\n"
         "        m_i, l_i, acc = _attend_block(\n", 1),
        ("\ndef tile_rows(", PREFETCH_HELPER + "\n\ndef tile_rows("),
    ]


VARIANTS["next_prefetch"] = _next_prefetch(1)
VARIANTS["next2_prefetch"] = _next_prefetch(2)

# The query-tiled kernel over a 16-bit cache: tile rows below the page (a tile ending at the
# block's last visible key) read by pointers from that key's row, not from token 0, which every
# program of the rows whose last key is on one page reads at once (the split kernel does not
# read those rows at all: masked loads; the same masks here took the minima walk 1.16x at 8/1).
# Through TMA nothing changes (zeros). The same bits (their keys are not visible).
VARIANTS["below_page_last"] = [
    ("        rows = tl.maximum(offs_t + first, 0)",
     "        rows = tl.where(offs_t + first < 0, last, offs_t + first)", 1),
]

# The merge kernel's programs wait for their own row's partials, not for the whole split
# kernel: each split raises one arrival counter per query head (release) after its partials,
# and merge program (row, head) polls its counter (an acquiring compare-and-swap that also
# resets it) instead of the grid dependency wait. Its programs are resident once every split
# program runs (the launch trigger at the split kernel's start), so a row is merged as soon as
# its last split arrives, and the split grid's completion leaves the critical path. A correct
# kernel (the same merge function: compare bits and times).
VARIANTS["spin_merge"] = [
    ("                                split_stride, first_slot, lane_ok, offs_d, GP, D, SPLITS)\n",
     "                                split_stride, first_slot, lane_ok, offs_d, GP, D, SPLITS)\n"
     "        else:\n"
     "            # every thread's partial is stored before the release below\n"
     "            tl.debug_barrier()\n"
     "            tl.atomic_add(counter_ptr + first_slot, 1, mask=lane_ok, sem=\"release\",\n"
     "                          scope=\"gpu\")\n", 1),
    ("def _sparse_attn_merge_kernel(part_ptr, out_ptr,",
     "def _sparse_attn_merge_kernel(part_ptr, counter_ptr, out_ptr,", 1),
    ("    if DEPENDENT:\n"
     "        # a programmatic dependent of the split kernel: the partials are read once it has\n"
     "        # completed\n"
     "        gdc_wait()\n"
     "    row = tl.program_id(0)\n",
     "    row = tl.program_id(0)\n"
     "    arrival = counter_ptr + row.to(tl.int64) * num_heads + tl.program_id(1)\n"
     "    seen = tl.atomic_cas(arrival, SPLITS, 0, sem=\"acquire\", scope=\"gpu\")\n"
     "    while seen != SPLITS:\n"
     "        seen = tl.atomic_cas(arrival, SPLITS, 0, sem=\"acquire\", scope=\"gpu\")\n", 1),
    ("    counters = arrival_counters(q.device, T * Hkv * HS) if splits > 1 and not merge_kernel \\\n"
     "        else None\n",
     "    counters = arrival_counters(q.device, T * Hq) if merge_kernel else \\\n"
     "        arrival_counters(q.device, T * Hkv * HS) if splits > 1 else None\n", 1),
    ("            merge(part, output, *merge_rest)\n",
     "            merge(part, counters, output, *merge_rest)\n", 1),
]


# At most two split programs per SM: the launch asks for more dynamic shared memory than the
# kernel uses (a third program's share would not fit in an SM's 228 KiB), so the scheduler
# cannot stack three programs (216 KiB at 72 KiB each) on some SMs while others hold one. The
# same kernel (compare bits and times).
CAP_HELPERS = """

class _CapLaunch(_rt.KernelLaunch):
    __slots__ = ()
    SHARED = 96 * 1024

    def __call__(self, *args):
        if self.compiled is not None:
            return super().__call__(*args)
        super().__call__(*args)
        c = self.compiled
        warps, ctas, shared = c.packed_metadata
        if shared < self.SHARED:
            triton.runtime.driver.active.utils.cuOccupancyMaxActiveClusters(
                c.function, self.SHARED, 1)
            c.packed_metadata = (warps, ctas, self.SHARED)
            self.direct = _rt.direct_launch(c)
"""
VARIANTS["two_per_sm"] = [
    ("    attn = _rt.KernelLaunch(_sparse_attn_kernel, (T * Hkv * HS, splits),",
     "    attn = _CapLaunch(_sparse_attn_kernel, (T * Hkv * HS, splits),"),
    ("\ndef tile_rows(", CAP_HELPERS + "\n\ndef tile_rows("),
]
# Programs beyond the resident ones start as others end: with more splits than two per SM
# hold (16 splits: 512 programs at 16/1 R32, 264 resident), a program that ends early is
# followed by the next on its SM, so the stream balances itself across SMs (the hardware's
# queue), while each split keeps its fixed share of the list (the same bits). Three per SM
# (72 KiB each) the same with fewer waves; `_split_only`: without the merge kernel.
VARIANTS["three_per_sm"] = [VARIANTS["two_per_sm"][0],
                            ("\ndef tile_rows(", CAP_HELPERS.replace("96 * 1024", "72 * 1024")
                             + "\n\ndef tile_rows(")]
VARIANTS["two_per_sm_split_only"] = VARIANTS["two_per_sm"] + VARIANTS["split_only"]
VARIANTS["three_per_sm_split_only"] = VARIANTS["three_per_sm"] + VARIANTS["split_only"]


def _gather_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def _page_sums(kv_ptr, pages_ptr, heads_ptr, ids_ptr, table_ptr, out_ptr, rows, Q, topk,
                   stride_p, stride_t, stride_h, v_off, stride_bt,
                   D: tl.constexpr, TOKENS: tl.constexpr, PARTS: tl.constexpr,
                   CHAIN: tl.constexpr, BLOCKS: tl.constexpr):
        # Program (i, part) sums part ``part`` of PARTS of the K and V rows of listed blocks
        # i·BLOCKS .. i·BLOCKS + BLOCKS − 1 (KV head heads[i]): the bytes a listed block
        # costs, read by a plain kernel. Its page: CHAIN "none", page i (the listed blocks
        # packed in order: no dependent load); "pages", pages[i] (one dependent load, as the
        # table_first attention kernel's); "list", table[request, ids[head, row, entry]] (two,
        # as the attention kernel's without table_first).
        part = tl.program_id(1)
        offs = tl.arange(0, TOKENS)[:, None] * stride_t + tl.arange(0, D)[None, :]
        acc = tl.zeros((TOKENS, D), tl.float32)
        SPAN: tl.constexpr = 128 // PARTS
        for j in tl.static_range(BLOCKS):
            i = tl.program_id(0) * BLOCKS + j
            head = tl.load(heads_ptr + i)
            if CHAIN == "none":
                page = i
            elif CHAIN == "pages":
                page = tl.load(pages_ptr + i)
            else:
                row = i // topk % rows
                b = tl.load(ids_ptr + i)  # (ids contiguous [Hkv, rows, topk], no -1 entries)
                page = tl.load(table_ptr + (row // Q).to(tl.int64) * stride_bt + b)
            base = kv_ptr + page.to(tl.int64) * stride_p + head.to(tl.int64) * stride_h
            for t0 in tl.static_range(0, SPAN, TOKENS):
                t = part * SPAN + t0
                acc += tl.load(base + t * stride_t + offs).to(tl.float32)
                acc += tl.load(base + v_off + t * stride_t + offs).to(tl.float32)
        tl.store(out_ptr + tl.program_id(0) * PARTS + part, tl.sum(tl.sum(acc, axis=1), axis=0))
    return _page_sums


def _partials_kernel():
    import triton
    import triton.language as tl
    from triton.language.extra.cuda import gdc_launch_dependents

    @triton.jit
    def _page_partials(kv_ptr, pages_ptr, heads_ptr, part_ptr, rows, topk, HQ,
                       stride_p, stride_t, stride_h, v_off,
                       D: tl.constexpr, TOKENS: tl.constexpr, PARTS: tl.constexpr,
                       BLOCKS: tl.constexpr, G: tl.constexpr, GP: tl.constexpr,
                       PDL: tl.constexpr):
        # The floor of any split attention streaming like a plain read: program (i, part)
        # reads part ``part`` of PARTS of listed blocks i·BLOCKS .. i·BLOCKS + BLOCKS − 1's K
        # and V rows (each page from a list, one dependent load, as table_first's) and writes
        # what such a split must write for its G query heads, in the split kernel's layout
        # (o [splits, rows, HQ, D] then lse [splits, rows, HQ], in the partials buffer's
        # dtype; split = entry // BLOCKS · PARTS + part): here every lane's o is the part's
        # column sums and its lse 0, so the merge kernel (a programmatic dependent) gives
        # their mean.
        if PDL:
            gdc_launch_dependents()
        part = tl.program_id(1)
        offs = tl.arange(0, TOKENS)[:, None] * stride_t + tl.arange(0, D)[None, :]
        acc = tl.zeros((TOKENS, D), tl.float32)
        SPAN: tl.constexpr = 128 // PARTS
        first = tl.program_id(0) * BLOCKS
        head = tl.load(heads_ptr + first)
        for j in tl.static_range(BLOCKS):
            page = tl.load(pages_ptr + first + j)
            base = kv_ptr + page.to(tl.int64) * stride_p + head.to(tl.int64) * stride_h
            for t0 in tl.static_range(0, SPAN, TOKENS):
                t = part * SPAN + t0
                acc += tl.load(base + t * stride_t + offs).to(tl.float32)
                acc += tl.load(base + v_off + t * stride_t + offs).to(tl.float32)
        col = tl.sum(acc, axis=0)
        row = first // topk % rows
        split = (first % topk) // BLOCKS * PARTS + part
        lane = tl.arange(0, GP)
        slot = (split * rows + row).to(tl.int64) * HQ + head * G + lane
        o = tl.zeros((GP, D), tl.float32) + col[None, :]
        tl.store(part_ptr + slot[:, None] * D + tl.arange(0, D)[None, :], o,
                 mask=(lane < G)[:, None])
        lse_base = part_ptr + (topk // BLOCKS * PARTS * rows).to(tl.int64) * HQ * D
        tl.store(lse_base + slot, tl.zeros((GP,), tl.float32), mask=lane < G)
    return _page_partials


# (parts, tokens per load, warps, blocks per program, partials' dtype) of --floor's reads
# with partials: the fastest plain read's shape (four 4-warp programs of 32 rows of K and V
# per block), coarser ones, two blocks per program (the split kernel's 8 splits of a 16-block
# list), and partials in 16 bits (half the bytes written and merged; timing only: an
# attention's would need a range check); four and eight blocks per program (4 and 2 splits:
# the tables' launches where a grid of (row, KV head) pairs is about one wave, 128 programs);
# the whole list per program (one split: its partials are the output, no merge needed)
FLOOR_READS = (
    (4, 16, 4, 1, "float32"), (2, 16, 4, 1, "float32"), (1, 16, 4, 1, "float32"),
    (1, 32, 8, 1, "float32"), (1, 16, 4, 2, "float32"), (1, 16, 8, 2, "float32"),
    (1, 16, 4, 1, "float16"), (1, 16, 4, 2, "float16"),
    (1, 16, 4, 4, "float16"), (1, 16, 4, 8, "float16"), (1, 32, 8, 4, "float16"),
    (1, 32, 8, 8, "float16"), (1, 16, 4, 16, "float16"), (1, 32, 8, 16, "float16"))


# --dsplit: an attention with no partials in memory that still spreads a row over several
# SMs. A (KV head, row)'s C programs form one thread-block cluster, program r holding columns
# r·D/C .. (r + 1)·D/C − 1 of q, K and V: each key step it computes its share of the G × 128
# scores, the cluster sums the shares through distributed shared memory (each program's in
# its own shared memory, double-buffered by step, one cluster barrier per step), and every
# program runs the same softmax and multiplies by its columns of V, writing its columns of
# the output: no partials, no merge. Decode rows with every key of the listed blocks
# visible (the check's reference takes them all: timing the design, not the masking). With
# the exchange off the programs skip the barrier and the sums (wrong by design: what the
# exchange costs).
DSPLIT_KERNEL = """

@triton.jit
def _dsplit_attention(q_ptr, kv_ptr, pages_ptr, out_ptr, sm_scale, T, HKV,
                      stride_p, stride_t, stride_h, v_off,
                      TOPK: tl.constexpr, D: tl.constexpr, C: tl.constexpr, G: tl.constexpr,
                      GP: tl.constexpr, EXCHANGE: tl.constexpr, STAGES: tl.constexpr):
    rank = tl.program_id(0)  # the program's columns: its rank in the (KV head, row)'s cluster
    pair = tl.program_id(1)
    kvh = pair // T
    row = pair % T
    DC: tl.constexpr = D // C
    lane = tl.arange(0, GP)
    lane_ok = lane < G
    offs_d = rank * DC + tl.arange(0, DC)
    slots = (row.to(tl.int64) * HKV * G + kvh * G + lane)[:, None] * D + offs_d[None, :]
    q = tl.load(q_ptr + slots, mask=lane_ok[:, None], other=0.0)
    tok = tl.arange(0, 128)
    kv_offs = tok[:, None] * stride_t + offs_d[None, :]
    m_i = tl.full([GP], float("-inf"), tl.float32)
    l_i = tl.zeros([GP], tl.float32)
    acc = tl.zeros([GP, DC], tl.float32)
    SBYTES: tl.constexpr = GP * 128 * 4
    scores_at = _cluster_own_base(2 * SBYTES) + (lane[:, None] * 128 + tok[None, :]) * 4
    for j in tl.range(TOPK, num_stages=STAGES):
        page = tl.load(pages_ptr + pair.to(tl.int64) * TOPK + j)
        base = kv_ptr + page.to(tl.int64) * stride_p + kvh.to(tl.int64) * stride_h
        k = tl.load(base + kv_offs)
        v = tl.load(base + v_off + kv_offs)
        s = tl.dot(q, tl.trans(k))
        if EXCHANGE:
            at = scores_at + (j % 2) * SBYTES
            _st_shared(at, s)
            _cluster_sync()
            s = _ld_cluster(at, 0)
            for r in tl.static_range(1, C):
                s += _ld_cluster(at, r)
        s = s * sm_scale
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    if EXCHANGE:
        _cluster_sync()  # the peers' reads of this program's last scores end before it does
    o = acc / l_i[:, None]
    tl.store(out_ptr + slots, o.to(out_ptr.dtype.element_ty), mask=lane_ok[:, None])


class ClusterKernel:
    # ``kernel`` on ``grid`` with clusters of ``cluster`` programs along x and ``extra``
    # bytes of dynamic shared memory past its own (Triton's launcher makes the clusters when
    # the launch metadata says so, multiplying grid x by them)

    def __init__(self, kernel, grid, cluster, extra, args, **options):
        self.compiled = kernel.warmup(*args, grid=grid, **options)
        self.compiled.run  # loads the binary (compiled.function is None until then)
        warps, _, shared = self.compiled.packed_metadata
        # raises the function's dynamic shared memory limit; how many clusters fit at once
        self.max_clusters = triton.runtime.driver.active.utils.cuOccupancyMaxActiveClusters(
            self.compiled.function, shared + extra, cluster)
        self.meta = (warps, cluster, shared + extra)
        self.grid = (grid[0] // cluster, grid[1], 1)

    def __call__(self, *args):
        stream = torch._C._cuda_getCurrentRawStream(torch._C._cuda_getDevice())
        self.compiled.run(*self.grid, stream, self.compiled.function, self.meta, None, None,
                          None, *args)
"""
# (programs per cluster, exchange, stages, warps) of --dsplit's launches
DSPLIT_LAUNCHES = ((4, True, 3, 4), (4, True, 2, 4), (4, False, 3, 4), (2, True, 3, 4),
                   (8, True, 3, 4), (8, False, 3, 4), (1, False, 3, 4))


def _dsplit_module():
    """The cluster helpers, `_dsplit_attention` and its launcher as a module."""
    path = os.path.join(tempfile.mkdtemp(), "dsplit_attention.py")
    with open(path, "w") as f:
        f.write("import torch\nimport triton\nimport triton.language as tl\n"
                + CLUSTER_HELPERS.split("\nclass _ClusterLaunch")[0] + DSPLIT_KERNEL)
    spec = importlib.util.spec_from_file_location("ablation_dsplit", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# (chain, pages, parts, tokens per load, warps, blocks) of the listed reads --where times
WHERE_READS = (("pages", "random", 1, 32, 8, 1), ("list", "random", 1, 32, 8, 1),
               ("pages", "in order", 1, 32, 8, 1), ("none", "in order", 1, 32, 8, 1),
               ("pages", "random", 4, 16, 4, 1), ("pages", "random", 8, 16, 4, 1),
               ("pages", "random", 4, 16, 2, 1), ("none", "in order", 4, 16, 4, 1),
               ("pages", "random", 1, 16, 4, 2), ("pages", "random", 1, 32, 4, 2),
               ("pages", "random", 1, 16, 8, 2), ("list", "random", 4, 16, 4, 1),
               # a row's whole list per program (topk 16): what an attention without splits,
               # and so without a merge, could stream at best
               ("pages", "random", 1, 32, 8, 16), ("pages", "random", 1, 32, 16, 16))


def listed_pages(ids, table, Q):
    """(pages, heads) of every listed (KV head, row, entry), flattened in that order."""
    Hkv, T, topk = ids.shape
    req = (torch.arange(T, device=ids.device) // Q)[None, :, None].expand(Hkv, T, topk)
    pages = table[req, ids.long().clamp(min=0)]
    heads = torch.arange(Hkv, device=ids.device)[:, None, None].expand(Hkv, T, topk)
    keep = (ids >= 0).flatten()
    return (pages.flatten()[keep].to(torch.int32).contiguous(),
            heads.flatten()[keep].to(torch.int32).contiguous())


def packed_table(ids, table, Q):
    """``table`` with each request's listed blocks moved to consecutive pages (request after
    request, in block order) and its other blocks after all of them: the same lists, their
    bytes in one compact stretch of the cache instead of spread over all of it."""
    Hkv, T, topk = ids.shape
    R, mb = table.shape
    out = torch.empty_like(table)
    used = torch.zeros((R, mb), dtype=torch.bool)
    flat = ids.cpu()
    for t in range(T):
        sel = flat[:, t, :].flatten()
        used[t // Q, sel[sel >= 0].long()] = True
    order = torch.cat([used.flatten().nonzero().flatten(), (~used).flatten().nonzero().flatten()])
    out.view(-1)[order.to(table.device)] = torch.arange(R * mb, dtype=table.dtype,
                                                        device=table.device)
    return out


# This split's first tile requested into L2 as soon as the ids (and, with table_first, the
# table row) arrive, before the list is checked and compacted: its entry taken as if every
# listed id were usable (the usual list), so the tile the first step loads is already on its
# way while the duplicate check, the masks and the ranks are computed (a miss only costs the
# prefetched bytes; the same bits).
VARIANTS["first_prefetch"] = [
    ("    ids = tl.load(ids_ptr + k_i.to(tl.int64) * stride_ik, mask=k_i < topk, other=-1)\n",
     "    ids = tl.load(ids_ptr + k_i.to(tl.int64) * stride_ik, mask=k_i < topk, other=-1)\n"
     "    TILES0: tl.constexpr = _BLOCK // BLOCK_N\n"
     "    e0 = split * tl.cdiv(topk * TILES0, SPLITS)\n"
     "    ent0 = e0 // TILES0\n"
     "    id0 = tl.sum(tl.where(k_i == ent0, ids, 0), axis=0)\n"
     "    ok0 = row_ok & (ent0 < topk) & (id0 >= 0) & (id0 < table_width)\n"
     "    if TABLE_HELD > 0:\n"
     "        page0 = tl.sum(tl.where(held_i == id0, table_row, 0), axis=0)\n"
     "    else:\n"
     "        page0 = tl.load(table_row_ptr + id0, mask=ok0, other=-1)\n"
     "    ok0 = ok0 & (page0 >= 0) & (page0 < num_pages)\n"
     "    tok0 = (e0 - ent0 * TILES0) * BLOCK_N + tl.arange(0, BLOCK_N)\n"
     "    LINE0: tl.constexpr = 128 // kv_ptr.dtype.element_ty.primitive_bitwidth * 8\n"
     "    d0 = tl.arange(0, D // LINE0) * LINE0\n"
     "    line0 = kv_ptr + tl.where(ok0, page0, 0).to(tl.int64) * stride_kp + head_off \\\n"
     "        + tok0[:, None] * stride_kt + d0[None, :] * stride_kd\n"
     "    want0 = ok0 & (tok0[:, None] >= 0) & (d0[None, :] >= 0)\n"
     "    _prefetch_l2(line0, want0)\n"
     "    _prefetch_l2(line0 + v_off, want0)\n", 1),
    ("\ndef tile_rows(", PREFETCH_HELPER + "\n\ndef tile_rows("),
]


BULK_PREFETCH_HELPER = '''
@triton.jit
def _bulk_prefetch_l2(ptr, nbytes):
    """Asks the tensor memory accelerator to bring ``nbytes`` from ``ptr`` (16-byte aligned, a
    multiple of 16) into L2: one instruction from the program's first thread, no register or
    shared memory for the data."""
    return tl.inline_asm_elementwise(
        "{ .reg .pred p; .reg .u32 t; mov.u32 t, %tid.x; setp.eq.u32 p, t, 0; "
        "@p cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }",
        "=r,l,r", [ptr, nbytes], dtype=tl.int32, is_pure=False, pack=1)
'''
# Every tile of the split requested into L2 as soon as its pages are known, each as one bulk
# prefetch by the tensor memory accelerator (K and V of a tile: two instructions from one
# thread; where a tile's K rows are contiguous, i.e. one KV head, NHD, as in the one-KV-head
# rows), so the memory system holds the whole split's bytes from the first step without the
# per-line instructions of `prefetch_l2` (the same bits).
VARIANTS["bulk_prefetch"] = [
    ("    last = tl.minimum(first + share, count * TILES)\n",
     "    last = tl.minimum(first + share, count * TILES)\n"
     "    if (stride_kt == D) & (stride_kd == 1):\n"
     "        TILE_BYTES: tl.constexpr = BLOCK_N * D * kv_ptr.dtype.element_ty.primitive_bitwidth // 8\n"
     "        for u0 in range(first, last):\n"
     "            entry0 = u0 // TILES\n"
     "            page0 = tl.sum(tl.where(usable & (rank == entry0), pages, 0), axis=0)\n"
     "            tile0 = kv_ptr + page0.to(tl.int64) * stride_kp + head_off \\\n"
     "                + (u0 - entry0 * TILES) * BLOCK_N * stride_kt\n"
     "            _bulk_prefetch_l2(tile0, TILE_BYTES)\n"
     "            _bulk_prefetch_l2(tile0 + v_off, TILE_BYTES)\n", 1),
    ("\ndef tile_rows(", BULK_PREFETCH_HELPER + "\n\ndef tile_rows("),
]


def timeline_summary(records, programs: int) -> dict:
    """µs from the first program's start: starts, the phases' lengths (median / max) and the
    last program to end, from TIMELINE's first ``programs`` records."""
    rows = records[:programs * 5].view(programs, 5).tolist()
    t0 = min(r[0] for r in rows)
    us = [[(v - t0) / 1000 for v in r[:4]] + [r[4]] for r in rows]
    phase = {name: sorted(r[i + 1] - r[i] for r in us)
             for i, name in enumerate(("list", "steps", "tail"))}
    last = max(us, key=lambda r: r[3])
    per_sm = {}
    for r in us:
        per_sm[r[4]] = per_sm.get(r[4], 0) + 1
    starts = sorted(r[0] for r in us)
    return {"programs": programs, "sms": len(per_sm),
            "programs_per_sm": sorted(set(per_sm.values())),
            "start_median_max": [starts[len(starts) // 2], starts[-1]],
            **{f"{k}_median_max": [v[len(v) // 2], v[-1]] for k, v in phase.items()},
            "end_max": last[3], "last": dict(zip(TIMELINE_FIELDS, last))}


# variants whose result is the kernel's up to the order of additions: largest difference
# from it allowed (bf16 output: a few units in the last place of values of order one)
CLOSE = {"k_pairs": 3e-2, "k_pairs_tl": 3e-2, "k_pairs_tma": 3e-2, "scales_per_step": 3e-2,
         "pt_range_per_tile": 3e-2, "keys_rows": 3e-2, "warp_splits": 3e-2, "wgmma": 3e-2,
         "log2_scores": 3e-2, "sums_per_step": 3e-2, "bf16_partials": 3e-2,
         "tile_keys_rows": 3e-2}
# another revision of the kernel (--against): the same result up to the order of additions
AGAINST_TOL = 3e-2
# variants the interpreter cannot run (inline PTX)
NVIDIA_ONLY = ("k_pairs", "k_pairs_tma", "k_bits_asm", "cluster_merge", "timeline",
               "prefetch_l2", "two_per_sm", "first_prefetch", "bulk_prefetch", "three_per_sm",
               "two_per_sm_split_only", "three_per_sm_split_only", "next_prefetch",
               "next2_prefetch")
# variants of an fp8 cache's widening or of its fp16 probabilities (a bf16 q's): built only
# where --kv names an fp8 cache
FP8_ONLY = ("k_pairs", "k_pairs_tma", "k_pairs_tl", "pt_no_range", "pt_range_per_tile", "k_bits",
            "k_bits_asm", "k_byte", "pt_no_loads")
# variants that compute the kernel's result over a cache of one dtype (checked there)
CORRECT_OVER = {"k_byte": "fp8e5m2"}
# name -> launch options a variant adds
LAUNCH_OPTIONS = {"merge_kernel": dict(merge_kernel=True), "split_only": dict(merge_kernel=True),
                  "bf16_partials_split_only": dict(merge_kernel=True),
                  "two_per_sm_split_only": dict(merge_kernel=True),
                  "three_per_sm_split_only": dict(merge_kernel=True),
                  "cluster_merge": dict(merge_kernel=False), "spin_merge": dict(merge_kernel=True),
                  "merge_empty": dict(merge_kernel=True),
                  "wgmma_split_only": dict(merge_kernel=True),
                  "regs128": dict(max_registers=128), "regs168": dict(max_registers=168)}
# variants that compute the generated kernel's result (checked bit for bit against it)
CORRECT = ("k_bits", "k_bits_asm", "splits_first", "merge_kernel", "scratch_pick",
           "gather_pick", "packed_pick", "early_table", "cluster_merge", "scalar_pick",
           "prefetch_l2", "spin_merge", "two_per_sm", "first_prefetch", "bulk_prefetch", "three_per_sm", "next_prefetch",
           "next2_prefetch", "below_page_last", "mask_every_step", "regs128", "regs168")


class EmptyGrid:
    """An empty kernel launched on a grid with ``num_warps`` warps and ``shared`` bytes of
    dynamic shared memory: what the attention's launch costs without its work (with shared
    0, without the shared-memory configuration its programs need either)."""

    def __init__(self, grid, num_warps, shared, dummy, cluster=1):
        import triton

        self.grid, self.dummy = tuple(grid) + (1,) * (3 - len(grid)), dummy
        kernel = common._empty_kernel()
        self.compiled = kernel.warmup(dummy, grid=(1,), num_warps=num_warps)
        self.compiled.run  # loads the binary (compiled.function is None until then)
        # raises the function's dynamic shared memory limit to ``shared``; how many clusters
        # of ``cluster`` programs the device holds at once
        self.max_clusters = triton.runtime.driver.active.utils.cuOccupancyMaxActiveClusters(
            self.compiled.function, shared, cluster)
        if cluster > 1:  # clusters along x: Triton's launcher multiplies grid x by them
            self.grid = (self.grid[0] // cluster, *self.grid[1:])
        self.meta = (num_warps, cluster, shared)

    def __call__(self):
        stream = torch._C._cuda_getCurrentRawStream(torch._C._cuda_getDevice())
        self.compiled.run(*self.grid, stream, self.compiled.function, self.meta, None, None,
                          None, self.dummy)


def attention_launch(run):
    """The split kernel's launch inside a prepared ``run`` (after its first call)."""
    import inspect

    return inspect.getclosurevars(run).nonlocals["attn"]


def build(name, edits, src=None):
    """The generated module (or the source ``src``: another revision's) with ``edits``."""
    src = open(base.__file__).read() if src is None else src
    for edit in edits:
        old, new = edit[0], edit[1]
        assert old in src, (name, old)
        src = src.replace(old, new, *edit[2:])
    path = os.path.join(tempfile.mkdtemp(), f"sparse_attn_{name}.py")
    with open(path, "w") as f:
        # (outside the package: its relative imports made absolute)
        f.write(re.sub(r"^from \.(\w*) import", lambda m: "from generated"
                       + (f".{m.group(1)}" if m.group(1) else "") + " import", src, flags=re.M))
    spec = importlib.util.spec_from_file_location(f"ablation_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def option(name):
    """The value after ``name`` on the command line, or None."""
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else None


def parse_launches(text) -> list:
    """'splits=1,head_split=4;splits=2' -> launch dicts (4 warps and 2 stages unless given)."""
    out = []
    for item in filter(None, (t.strip() for t in (text or "").split(";"))):
        launch = dict(num_warps=4, num_stages=2)
        for pair in item.split(","):
            k, _, v = pair.partition("=")
            launch[k.strip()] = v.strip() == "True" if v.strip() in ("True", "False") \
                else int(v)
        out.append(launch)
    return out


def tag_of(launch) -> str:
    """'s8 w4 st2', with ' kv64', ' hs4', ' mk', ' tma', ' tf', ' r128' (a register cap) where
    the launch sets them otherwise."""
    return (f"s{launch['splits']} w{launch['num_warps']} st{launch['num_stages']}"
            + (f" kv{launch['kv_tile']}" if launch.get("kv_tile", 128) != 128 else "")
            + (f" hs{launch['head_split']}" if launch.get("head_split", 1) > 1 else "")
            + (" mk" if launch.get("merge_kernel") else "")
            + (" tma" if launch.get("tma") else "")
            + (" tf" if launch.get("table_first") else "")
            + (f" r{launch['max_registers']}" if launch.get("max_registers") else ""))


def prefill_main(out_dir, mods, kv):
    """--prefill: bench_attn's prefill rows at the launch the table takes for each, every
    variant timed interleaved (graph replay, L2 flushed); variants in CORRECT checked bit for
    bit against the kernel, those in CLOSE within their bound."""
    from bench_attn import PREFILL_ROWS, SMOKE_PREFILL_ROWS, make_prefill_case, with_kv
    from generated import sparse_attention

    dev = "cpu" if SMOKE else "cuda"
    hw = common.detected_hardware(SMOKE)
    res = []
    for row in SMOKE_PREFILL_ROWS if SMOKE else PREFILL_ROWS:
        Hq, Hkv, prefix, chunk = row
        case = with_kv(make_prefill_case(row, dev, 64 if SMOKE else 128, 4 if SMOKE else 16),
                       kv)
        q = case["q"]
        out = torch.empty(q.shape, dtype=torch.bfloat16, device=dev)
        launch = sparse_attention.explain_sparse_attn(
            "prefill", hw, "fp16" if q.dtype == torch.float16 else "bf16", kv[0], kv[1],
            Hq // Hkv, q.shape[2], chunk * Hkv)
        if option("--launch"):  # a launch instead of the table's (splits: the split kernel)
            given = parse_launches(option("--launch"))[0]
            launch = ({"variant": "sparse_attn_split",
                       **sparse_attention.DEFAULTS[sparse_attention.SPLIT]}
                      if "splits" in given else
                      {"variant": "sparse_attn_tiled", "sorted_union": True, "tma": False})
            launch.update(given)
        keys = ("q", "kv", "topk_idx", "block_table", "seq_lens")
        common_args = dict(num_kv_heads=Hkv, sm_scale=case["sm_scale"], scales=kv[1],
                           k_scale=case.get("k_scale"), v_scale=case.get("v_scale"),
                           cu_seqlens_q=case["cu_seqlens_q"], prefix_lens=case["prefix_lens"],
                           max_query_len=chunk)
        calls, checks, want = {}, {}, None
        for name, mod in mods.items():
            if launch["variant"] == "sparse_attn_tiled":
                run = mod.prepare_sparse_attn_tiled(
                    *(case[k] for k in keys), out, **common_args,
                    **{k: launch[k] for k in ("lanes", "sorted_union", "tma", "num_warps",
                                              "num_stages")})
            else:
                split = {**launch, **LAUNCH_OPTIONS.get(name, {})}
                run = mod.prepare_sparse_attn(
                    *(case[k] for k in keys), out, mode="prefill", **common_args,
                    **{k: split[k] for k in ("splits", "num_warps", "num_stages",
                                             *sparse_attention.LEFT_OUT[
                                                 sparse_attention.SPLIT])})
            call = calls[name] = common.Checked(lambda run=run: run(
                *(case[k] for k in keys), case["cu_seqlens_q"], case["prefix_lens"],
                case.get("k_scale"), case.get("v_scale"), out))
            if name == "base" or name in CORRECT or name in CLOSE:
                out.fill_(float("nan"))  # an unwritten element fails either check
                call()
                if name == "base":
                    want = out.clone()
                elif name in CLOSE:
                    checks[name] = bool((out.float() - want.float()).abs().max() <= CLOSE[name])
                else:
                    checks[name] = bool(torch.equal(out, want))
        med = common.interleaved_medians(calls, SMOKE, per_round=10)
        tag = " ".join(f"{k}={launch[k]}" for k in launch if k not in ("hardware", "rule"))
        print(f"prefill {Hq}/{Hkv} ({prefix} + {chunk}) {tag}: "
              + "  ".join(f"{n} {us:.1f}" + ("" if n == "base" else
                                              f" ({us / med['base']:.3f})")
                          for n, us in med.items())
              + "".join(f"  WRONG {k}" for k, ok in checks.items() if not ok), flush=True)
        res.append({"row": list(row), "launch": launch, "us": med, "same_bits": checks})
        with open(os.path.join(out_dir, "attn_ablation.json"), "w") as f:
            json.dump(res, f, indent=1)
        del case, q, out
        common.free_memory()


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    from bench_attn import kv_option, make_case, with_kv
    from generated import sparse_attention
    dev = "cpu" if SMOKE else "cuda"
    kv_dtype, scales = kv_option(option("--kv") or "bf16")
    wanted = option("--variants")  # e.g. base,splits_first
    variants = {n: e for n, e in VARIANTS.items()
                if (wanted is None or n in wanted.split(",")) and not (SMOKE and n in NVIDIA_ONLY)
                and (n not in FP8_ONLY or kv_dtype.startswith("fp8"))}
    mods = {n: build(n, e) for n, e in variants.items()}
    for item in filter(None, (option("--against") or "").split(",")):
        # another revision of generated/sparse_attn.py (git show REV:generated/sparse_attn.py),
        # timed beside this one and checked against it within AGAINST_TOL
        name, path = item.split("=", 1)
        mods[name] = build(name, [], open(path).read())
        CLOSE[name] = AGAINST_TOL
    if "--prefill" in sys.argv:
        return prefill_main(out_dir, mods, (kv_dtype, scales))
    rows = [(16, 1, 2, 1024, 1)] if SMOKE else [
        (32, 2, 1, 8192, 1), (32, 2, 1, 8192, 4), (64, 4, 1, 32768, 1), (8, 1, 1, 32768, 1),
        (32, 2, 8, 32768, 1), (32, 2, 32, 32768, 1), (16, 1, 32, 32768, 1)]
    if option("--rows") == "grids":  # the rows whose grids span several waves
        rows = [(32, 2, 8, 32768, 1), (32, 2, 32, 32768, 1), (16, 1, 32, 32768, 1),
                (8, 1, 32, 32768, 1), (32, 2, 8, 131072, 4), (32, 2, 1, 8192, 4),
                (32, 2, 64, 32768, 1)]
    elif option("--rows") == "copy":  # the rows of 32 requests under 80 % of the copy rate
        rows = [(32, 2, 32, 32768, 1), (16, 1, 32, 32768, 1), (8, 1, 32, 32768, 1)]
    elif option("--rows") == "fp8":  # an fp8 cache's copy-rate rows: one wave and several
        rows = [(32, 2, 32, 32768, 1), (16, 1, 32, 32768, 1), (32, 2, 128, 32768, 1)]
    elif option("--rows") == "bench32k":  # bench_attn's decode rows at 32k
        import targets
        rows = [r for r in targets.VLLM_ATTN_US if r[3] == 32768]
    elif "/" in (option("--rows") or ""):  # rows given as Hq/Hkv/R/context/Q, comma-separated
        rows = [tuple(int(x) for x in r.split("/")) for r in option("--rows").split(",")]
    launches = [dict(splits=s, num_warps=w, num_stages=st) for s, w, st in
                (((4, 4, 2),) if SMOKE else
                 ((16, 8, 2), (16, 4, 2), (8, 4, 2), (4, 4, 3), (2, 4, 3)))]
    res = []
    dummy = torch.zeros(1, device=dev)
    for row in rows:
        Hq, Hkv, R, ctx, Q = row
        case = with_kv(make_case(row, dev, 64 if SMOKE else 128, 4 if SMOKE else 16),
                       (kv_dtype, scales))
        q, kv, ids, table, lens = (case[k] for k in ("q", "kv", "topk_idx", "block_table",
                                                      "seq_lens"))
        k_scale, v_scale = case.get("k_scale"), case.get("v_scale")
        out = torch.empty(q.shape, dtype=torch.bfloat16, device=dev)
        calls = {"empty kernel": lambda: common.launch_empty(dummy)}
        if "--table" in sys.argv:  # the launch the dispatch table takes for the row
            hw = common.detected_hardware(SMOKE)
            row_launch = sparse_attention.explain_sparse_attn(
                "decode", hw, "bf16", kv_dtype, scales, Hq // Hkv, q.shape[2], R * Q * Hkv, Q)
            launches = [{k: row_launch[k] for k in ("splits", "num_warps", "num_stages",
                                                    *sparse_attention.LEFT_OUT[
                                                        sparse_attention.SPLIT])}]
        launches = launches + [x for x in parse_launches(option("--launch"))
                               if x not in launches]
        checks = {}
        if "--where" in sys.argv:
            # the same bytes where they lie: a plain kernel reading each listed block's K and
            # V through a page list (random pages over the whole cache, as the rows'; the same
            # blocks packed together; pages 0, 1, ... in order), and the table's launch with
            # the listed blocks packed together
            gather = _gather_kernel()
            packed = packed_table(ids, table, Q)
            kp, kh, kt, _, v_off = base.kv_strides(kv, q.shape[2])
            ids_c = ids.contiguous()
            for chain, where, parts, tokens, warps, blocks in WHERE_READS:
                tab = packed if where == "in order" else table
                pages, heads = listed_pages(ids, tab, Q)
                if where == "in order":  # (packed: pages 0, 1, ... of the blocks' bytes)
                    pages, order = pages.sort()
                    heads = heads[order].contiguous()
                if pages.numel() % blocks:  # (lists shorter than a program's blocks)
                    continue
                sums = torch.empty(pages.numel() // blocks * parts, dtype=torch.float32,
                                   device=dev)
                label = f"read {chain} {where} p{parts} t{tokens} w{warps} b{blocks}"
                calls[label] = (
                    lambda pages=pages, heads=heads, sums=sums, tab=tab, chain=chain,
                    parts=parts, tokens=tokens, warps=warps, blocks=blocks:
                    gather[(pages.numel() // blocks, parts)](
                        kv, pages, heads, ids_c, tab, sums, ids.shape[1], Q, ids.shape[2],
                        kp, kt, kh, v_off, tab.stride(0), D=q.shape[2], TOKENS=tokens,
                        PARTS=parts, CHAIN=chain, BLOCKS=blocks, num_warps=warps))
                calls[label]()  # it read the bytes it stands for
                read = torch.arange(pages.numel(), device=dev) if chain == "none" else pages
                want = kv[read.long(), :, :, heads.long(), :].float().sum(dim=(1, 2, 3))
                got = sums.view(-1, parts).sum(dim=1)
                checks[label] = bool(torch.allclose(got, want.view(-1, blocks).sum(dim=1),
                                                    rtol=1e-3, atol=1e-2))
            run = base.prepare_sparse_attn(
                q, kv, ids, packed, lens, out, mode="decode", num_kv_heads=Hkv,
                sm_scale=case["sm_scale"], scales=scales, k_scale=k_scale, v_scale=v_scale,
                decode_query_len=Q, **launches[0])
            calls["table launch, packed pages"] = (
                lambda run=run: run(q, kv, ids, packed, lens, None, None, k_scale, v_scale,
                                    out))
        if "--floor" in sys.argv and not bool((ids >= 0).all()):
            print(f"{row}: --floor not timed (its lists have -1 entries)", flush=True)
        elif "--floor" in sys.argv:
            # the floor of a split attention that streams like the fastest plain read: the
            # reads, each program's partials (G heads × D, fp32, and lse), and the merge
            # kernel as its programmatic dependent; timed with and without the merge
            floor = _partials_kernel()
            # the merge kernel with its split loops rolled (fewer registers: at 64 splits the
            # unrolled one spills)
            rolled = build("merge_rolled", [("for sp in tl.static_range(SPLITS):",
                                             "for sp in tl.range(SPLITS):")])
            kp, kh, kt, _, v_off = base.kv_strides(kv, q.shape[2])
            pages, heads = listed_pages(ids, table, Q)
            T, HQ, D = q.shape
            G = HQ // Hkv
            blocks = kv[pages.long(), :, :, heads.long(), :].float()  # [N, 2, 128, D]
            pdl = not SMOKE
            for parts, tokens, warps, nb, pdtype in FLOOR_READS:
                if ids.shape[2] % nb:
                    continue
                splits = ids.shape[2] // nb * parts
                part = torch.empty(splits * T * HQ * (D + 1), dtype=getattr(torch, pdtype),
                                   device=dev)

                def read(parts=parts, tokens=tokens, warps=warps, nb=nb, part=part):
                    floor[(pages.numel() // nb, parts)](
                        kv, pages, heads, part, T, ids.shape[2], HQ, kp, kt, kh, v_off, D=D,
                        TOKENS=tokens, PARTS=parts, BLOCKS=nb, G=G,
                        GP=max(16, 1 << (G - 1).bit_length()), PDL=pdl,
                        num_warps=warps)

                def merged(read=read, splits=splits, part=part, mod=base):
                    read()
                    mod._sparse_attn_merge_kernel[(T, HQ)](
                        part, out, T, HQ, out.stride(0), out.stride(1), out.stride(2), D=D,
                        SPLITS=splits, DEPENDENT=pdl, num_warps=1,
                        **({"launch_pdl": True} if pdl else {}))
                label = (f"floor p{parts} t{tokens} w{warps}"
                         + (f" b{nb}" if nb > 1 else "") + (" fp16" if pdtype != "float32" else "")
                         + f" ({splits} splits)")
                calls[f"{label} reads+partials"] = read
                want = blocks.view(-1, nb, 2, parts, 128 // parts, D).sum(dim=(1, 2, 4)).view(
                    Hkv, T, splits, D).mean(dim=2).repeat_interleave(G, dim=0).transpose(0, 1)
                for merge, mod in (("+merge", base), ("+rolled merge", rolled)):
                    calls[f"{label} {merge}"] = lambda merged=merged, mod=mod: merged(mod=mod)
                    out.fill_(float("nan"))
                    calls[f"{label} {merge}"]()  # the mean of the parts' column sums, per head
                    checks[f"{label} {merge}"] = bool(torch.allclose(out.float(), want,
                                                                     rtol=2e-2, atol=5e-2))
        if "--dsplit" in sys.argv and not SMOKE and Q == 1 and bool((ids >= 0).all()):
            ds = _dsplit_module()
            pages, _ = listed_pages(ids, table, Q)  # (KV head, row, entry) order
            kp, kh, kt, _, v_off = base.kv_strides(kv, q.shape[2])
            T, HQ, D = q.shape
            G, topk = HQ // Hkv, ids.shape[2]
            heads = torch.arange(Hkv, device=dev).repeat_interleave(T * topk)
            blocks = kv[pages.long(), :, :, heads, :].float().view(Hkv, T, topk, 2, 128, D)
            keys = blocks[:, :, :, 0].reshape(Hkv, T, topk * 128, D)
            vals = blocks[:, :, :, 1].reshape(Hkv, T, topk * 128, D)
            qg = q.float().view(T, Hkv, G, D).transpose(0, 1)  # [Hkv, T, G, D]
            att = torch.softmax(qg @ keys.transpose(-1, -2) * case["sm_scale"], dim=-1)
            want = (att @ vals).transpose(0, 1).reshape(T, HQ, D)
            del blocks, keys, vals, att
            for C, exchange, stages, warps in DSPLIT_LAUNCHES:
                args = (q, kv, pages, out, case["sm_scale"], T, Hkv, kp, kt, kh, v_off, topk, D,
                        C, G, max(16, 1 << (G - 1).bit_length()), exchange, stages)
                label = f"dsplit c{C} st{stages} w{warps}" + ("" if exchange else " no exchange")
                try:
                    launch = ds.ClusterKernel(ds._dsplit_attention, (C, Hkv * T, 1), C,
                                              2 * 16 * 128 * 4 if exchange else 0, args,
                                              num_warps=warps, num_stages=1)
                    out.fill_(float("nan"))
                    launch(*args)
                    torch.cuda.synchronize()
                except Exception as e:  # noqa: BLE001 - a study: report, go on
                    print(f"   {label}: not run ({type(e).__name__}: {e})", flush=True)
                    continue
                err = (out.float() - want).abs()
                print(f"   {label}: {launch.max_clusters} clusters at once; largest difference "
                      f"from float32 {err.max().item():.3g}, mean {err.mean().item():.3g}",
                      flush=True)
                if exchange or C == 1:
                    checks[label] = bool(err.max().item() <= 2e-2)
                calls[label] = lambda launch=launch, args=args: launch(*args)
        first_want = None  # the first launch's output: every other launch is checked against it
        for launch in launches:
            tag = tag_of(launch)
            want = None
            for name, mod in mods.items():
                run = mod.prepare_sparse_attn(
                    q, kv, ids, table, lens, out, mode="decode", num_kv_heads=Hkv,
                    sm_scale=case["sm_scale"], scales=scales, k_scale=k_scale, v_scale=v_scale,
                    decode_query_len=Q, **{**launch, **LAUNCH_OPTIONS.get(name, {})})
                call = calls[f"{tag} {name}"] = common.Checked(
                    lambda run=run: run(q, kv, ids, table, lens, None, None, k_scale, v_scale,
                                        out))
                exact = name in CORRECT or CORRECT_OVER.get(name) == kv_dtype
                if name == "base" or exact or name in CLOSE:
                    out.fill_(float("nan"))  # an unwritten element fails either check
                    call()
                    if name == "base":
                        want = out.clone()
                        if first_want is None:
                            first_want = want
                        else:  # another split or step: the sums in another order
                            checks[f"{tag} base"] = bool(
                                (want.float() - first_want.float()).abs().max() <= AGAINST_TOL)
                    elif want is not None and name in CLOSE:
                        diff = (out.float() - want.float()).abs().max().item()
                        checks[f"{tag} {name}"] = bool(diff <= CLOSE[name])
                        print(f"   {tag} {name}: largest difference from the kernel {diff:.3g}"
                              + (" (the same bits)" if torch.equal(out, want) else ""),
                              flush=True)
                    elif want is not None:
                        checks[f"{tag} {name}"] = bool(torch.equal(out, want))
                if name == "base" and not SMOKE:
                    # the launch's cost without its work: its grid and warps, with and
                    # without its dynamic shared memory
                    attn = attention_launch(run).compiled
                    shapes = [("empty grid", 0, 1), ("empty grid+smem", attn.metadata.shared, 1)]
                    if "cluster_merge" in mods and launch["splits"] > 1:
                        # cluster_merge's launch: a row's splits as one cluster, its partial's
                        # room added to the shared memory
                        gp = max(16, 1 << (Hq // Hkv - 1).bit_length())
                        shapes.append(("empty clusters+smem", attn.metadata.shared
                                       + gp * q.shape[2] * 4 + gp * 4, launch["splits"]))
                    for label, shared, cluster in shapes:
                        try:
                            gx, gy, gz = attention_launch(run).grid
                            empty = calls[f"{tag} {label}"] = EmptyGrid(
                                (gy, gx, gz) if cluster > 1 else (gx, gy, gz),
                                attn.metadata.num_warps, shared, dummy, cluster)
                            print(f"   {tag} {label}: at most {empty.max_clusters} clusters "
                                  f"of {cluster} at once", flush=True)
                        except Exception as e:  # noqa: BLE001 - a study: report, go on
                            print(f"   {tag} {label}: not timed ({e})", flush=True)
        med = common.interleaved_medians(calls, SMOKE, per_round=20)
        # a plain streaming read of the row's KV bytes, timed the same way (bench_attn's floor)
        read = None if SMOKE else common.row_read_us(
            R * Q * ids.shape[2] * Hkv, 128 * 2 * q.shape[2] * kv.element_size() // 4)[
            "median_us"]
        where = "".join(f"  {k} {v:.2f}" for k, v in med.items()
                        if k.startswith(("read ", "table launch, packed", "floor ", "dsplit ")))
        print(f"{Hq}/{Hkv} R{R} {ctx // 1024}k Q{Q}: empty {med['empty kernel']:.2f}" + where
              + ("" if read is None else f"  plain read {read:.2f}")
              + "".join(f"  WRONG {k}" for k, ok in checks.items() if not ok), flush=True)
        # (one split writes the output itself: its reads need no merge)
        floors = {k: v for k, v in med.items() if k.startswith("floor ") and (
            k.endswith("merge") or k.endswith("(1 splits) reads+partials"))}
        if floors and read is not None:
            best = min(floors, key=floors.get)
            print(f"   floor with its merge (if split) at best {floors[best]:.2f} ({best}); 80 % of the "
                  f"plain read allows {read / 0.8:.2f}", flush=True)
        for launch in launches:
            tag = tag_of(launch)
            names = list(mods) + [n for n in ("empty grid", "empty grid+smem",
                                                  "empty clusters+smem")
                                      if f"{tag} {n}" in med]
            print("   " + tag + ": " + "  ".join(f"{n} {med[tag + ' ' + n]:.2f}"
                                                  for n in names), flush=True)
        timelines = {}
        if "timeline" in mods:
            torch.cuda.synchronize()
            programs = int(mods["timeline"].TIMELINE.numel())  # bounded below
            for launch in launches:  # each launch's records: replay it alone, L2 flushed
                tag = tag_of(launch)
                common.flush_l2()
                calls[f"{tag} timeline"]()
                torch.cuda.synchronize()
                n = R * Q * Hkv * launch.get("head_split", 1) * launch["splits"]
                timelines[tag] = timeline_summary(mods["timeline"].TIMELINE.cpu(),
                                                  min(n, programs // 5))
                print(f"   {tag} timeline: {timelines[tag]}", flush=True)
        res.append({"row": list(row), "us": med, "plain_read_us": read, "same_bits": checks,
                    "timeline": timelines, "launches": [tag_of(x) for x in launches]})
        with open(os.path.join(out_dir, "attn_ablation.json"), "w") as f:
            json.dump(res, f, indent=1)
        del case, q, kv, ids, table, lens, out
        common.free_memory()
    for line in ratio_summary(res, list(mods)):
        print(line, flush=True)


def ratio_summary(res, names) -> list[str]:
    """Lines of the study's ratios over its rows, median (min–max): each variant's time over
    the kernel's at the same launch, and each other launch's over the row's first (the
    table's, with --table)."""
    ratios = {}
    for r in res:
        first = r["launches"][0]
        for tag in r["launches"]:
            base = r["us"][f"{tag} base"]
            for name in (n for n in names if n != "base"):
                ratios.setdefault(f"{name} / base", []).append(r["us"][f"{tag} {name}"] / base)
            if tag != first:
                ratios.setdefault(f"{tag} / the first launch", []).append(
                    base / r["us"][f"{first} base"])
    return [f"{k}: {statistics.median(v):.3f} ({min(v):.3f}–{max(v):.3f}) over {len(v)}"
            for k, v in ratios.items()]


if __name__ == "__main__":
    main()
