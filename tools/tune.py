#!/usr/bin/env python3
"""Measure the launch tables of this device's hardware target and (optionally) rewrite
specs/tuned_<target>.py (sm_90 on an H200 or H100).

    python3 tools/tune.py --out DIR [--write-specs] [--quick]   # H200: ~4-8 min (--budget-s 480)
    python3 tools/tune.py --selftest                  # CPU: fake measurements -> file -> loader,
                                                      #   plus a dry run of the whole tuner
    python3 tools/tune.py --check-file DIR/tuned_sm_90.py   # CPU: does a fetched table load?

Targets. The device's target is the declared one whose NVIDIA compute capability / AMD gcn arch
it has (what the generated runtime dispatches it as); a device matching none is a new target
named sm_<major><minor> / <gcn arch>: its first --write-specs run writes specs/tuned_<name>.py
(its Hardware spec and tables) and adds it to specs/tuned.py, so re-tuning another GPU is
running this tool there, then `codegen regenerate`. Targets whose tables are written by hand in
specs/ (gfx950: upstream's tables, reproduced) are refused. Candidates a target cannot run are
not offered: tf32x3 split-K needs NVIDIA compute capability ≥ 8.0, programmatic dependent
launch ≥ 9.0 (the checks the spec loader applies).

Every candidate is timed like tools/bench.py (CUDA-graph replay, L2 flushed before each replay;
--reps 15 replays, median), after a check against the reference result (wrong results and a
completion counter left non-zero are discarded). Every candidate goes to DIR/tune.json; the
rendered table always goes to DIR/tuned_<target>.py; --write-specs also replaces
specs/tuned_<target>.py, but only after the file has loaded through codegen.registry.load (the
generator's own disjointness/coverage proof) and every measured choice has been looked up in it.

Order: compile warm-up, then (b)+(c) point by point, then (a).

(a) router GEMM, per weight shape × token bucket (1, 2–4, 5–8, 9–16, 17–32), both kernels:
    per-expert: block_m ∈ ROUTER_BM_BY_BUCKET (1 | 1, 2, 4 | 4, 8 | 4, 8 | 4, 8), block_k ∈
    {256..4096} dividing K, num_warps ∈ {1..16}, num_stages 1, pruned to 4 ≤
    block_k/(32·num_warps) ≤ 16 (16-byte weight loads per thread) and 4 ≤
    block_m·block_k/(32·num_warps) ≤ 32 (fp32 partial sums per thread; every upstream gfx950
    row is inside).
    split-K: block_m = next_pow2(max(16, bucket hi)), block_n ∈ {16, 32, 64} (≤ max(16,
    next_pow2(N))), block_k ∈ {64, 128, 256}, split_k ∈ SPLITK_SK (1..64) with
    block_k·split_k dividing K, ≤ 16 K steps per program and a grid cdiv(N, block_n)·split_k
    in [min(96, largest feasible), 4·SMs]; tl.dot as tf32x3 (where the target has TF32 tensor
    cores) or as fp32 FMAs (only block_n ≤ 32, grid ≤ 2·SMs, 4 warps, ≤ 2 stages); num_warps by
    tile size, num_stages 1 for one K step, 2 for two, {2, 3} for more (--quick: num_warps 4,
    num_stages ≤ 2).
    Representatives M = 1 | 2, 4 | 8 | 16 | 24, 32, x bf16 and fp32.
(b) decode scorer, per request bucket (1–2, 3–4, 5–8, 9–11, 12–16, 17–32, 33–64, 65–256; ≥ 257
    keeps the default) × max_block bucket (≤ 64, 65–256, ≥ 257: 8k / 32k / 128k contexts) × Qmax
    bucket (1; 2–8, measured at Q = Qmax = 4), H = 1, bf16, head_dim 128, topk 16, page-16 table:
    split-K with kv_chunks ∈ {8..1024} (≤ max(8, blocks), R·chunks ≤ 64·SMs) × (num_warps,
    num_stages) ∈ {(2, 1), (2, 3), (4, 1), (4, 2), (4, 3), (8, 3)}, the same with static chunks
    × {(4, 2), (4, 3)}, balanced (R ≤ 16 only: it is compiled per R) with budget ∈ {1, 2, 4,
    8}·SMs × the split options, and the single-launch `index_decode_fused` (R ≤ 16 and
    max_block buckets ≤ 256 only: its one selection tile, the smallest of 128/256/512 ≥ the
    bucket's hi, must hold every block) with kv_chunks ∈ {8..256} (32 ≤ R·chunks ≤ 512) ×
    (num_warps, num_stages) ∈ {(4, 2), (8, 2)}. Timed END TO END (scores + selection + table)
    with a FIXED selector: the one the target's current table picks at that point (upstream's
    general branch for a new target; the fused candidates select themselves), so only the
    scorer varies.
(c) selector, per rows·heads bucket (1–2, 3–4, 5–8, …, 129–256, ≥ 257) × max_block bucket
    (≤ 64, 65–256, 257–1024, ≥ 1025): topk_chunks ∈ {1..16} (pruned to the chunks that can be
    active: ≤ next_pow2(cdiv(max_block, tile))), topk_tile ∈ {128, 512}, num_warps {2, 4, 8},
    num_stages 2, single_tile wherever the bucket allows it, adaptive_merge on/off for ≥ 2
    chunks, pdl on/off where the target supports programmatic dependent launch. Timed end to
    end with the two-kernel scorer that won (b) at that point (the best split/balanced one
    when the fused variant won: the table keeps a selector for every point the fused rows do
    not serve, e.g. topk beyond their tile). The ≥ 1025 bucket (no
    context that long is measured) takes the best multi-tile configuration at 1024 blocks.

Choice per bucket: the candidate with the smallest worst-case slowdown (time / best time at that
representative) over the bucket's representatives; ties by the mean slowdown. Buckets left
unmeasured (--quick, time budget, errors) keep the default rows. Only bf16/bf16/head_dim 128/one
index head is tuned for the scorer and topk 16 for the selector; the rest of the target's domain
keeps the default rules (a table rendered from no measurements equals the untuned file).

Compilation: every candidate is its own Triton compile (about 2900 for every section). The compiles run first in
parallel worker processes (--jobs, default min(14, CPUs - 2)) that fill Triton's disk cache; the
timing process then only loads them. If the pool fails, the timing loop compiles on demand.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import re
import shutil
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import common  # noqa: E402  (tools/common.py)
from specs import defaults as _defaults  # noqa: E402  (upstream default tables)

ROOT = common.ROOT
SPECS_DIR = os.path.join(ROOT, "specs")
TUNED_LIST = os.path.join(SPECS_DIR, "tuned.py")  # the measured targets (written here too)


def spec_file(target: str, specs_dir: str = SPECS_DIR) -> str:
    """specs/tuned_<target>.py: a measured target's Hardware spec and launch tables."""
    return os.path.join(specs_dir, f"tuned_{target}.py")
BLOCK = 128
D = 128
TOPK = 16

# ---------------------------------------------------------------------------------------------
# buckets and defaults (the untuned content of a specs/tuned_<target>.py)

# Token-count buckets of a measured router table: finer than upstream's 1–4, 5–16, 17–32 because
# the best kernel changes inside them (per-expert at M = 8, split-K at M = 16 in session 3).
ROUTER_BUCKETS = ((1, 1), (2, 4), (5, 8), (9, 16), (17, 32))
ROUTER_REPS = {(1, 1): (1,), (2, 4): (2, 4), (5, 8): (8,), (9, 16): (16,), (17, 32): (24, 32)}
# untuned rows: upstream's gfx950 defaults of the bucket the range lies in
ROUTER_DEFAULT = {(1, 1): (1, 1024, 8), (2, 4): (1, 1024, 8), (5, 8): (4, 1024, 8),
                  (9, 16): (4, 1024, 8), (17, 32): (8, 1024, 8)}
ROUTER_BM = (1, 2, 4, 8, 16, 32)
ROUTER_BK = (256, 512, 1024, 2048, 4096)
ROUTER_NW = (1, 2, 4, 8, 16)
# per-expert block_m by bucket (bm ≤ bucket hi as well)
ROUTER_BM_BY_BUCKET = {(1, 1): (1,), (2, 4): (1, 2, 4), (5, 8): (4, 8), (9, 16): (4, 8),
                       (17, 32): (4, 8)}
# split-K kernel sweep
SPLITK_BN = (16, 32, 64)
SPLITK_BK = (64, 128, 256)
SPLITK_SK = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
SPLITK_MIN_GRID = 96  # programs (or the largest feasible grid when smaller)
SPLITK_MAX_GRID_PER_SM = 4  # programs per SM at most
# tl.dot on tensor cores (tf32x3) or as fp32 FMAs; FMA candidates only at a narrower grid
# (≤ 2 programs per SM, block_n ≤ 32, 4 warps, 2 stages: they never won in runs 2–10)
SPLITK_TF32X3 = (True, False)
SPLITK_PARAM_ORDER = ("block_m", "block_n", "block_k", "split_k", "tf32x3", "num_warps",
                      "num_stages")

# Request buckets of the scorer; the last one (≥ 257 requests) is never measured and keeps
# the default grid.
R_BUCKETS = ((1, 2), (3, 4), (5, 8), (9, 11), (12, 16), (17, 32), (33, 64), (65, 256),
             (257, None))
R_REPS = {(1, 2): (1, 2), (3, 4): (4,), (5, 8): (8,), (9, 11): (11,), (12, 16): (16,),
          (17, 32): (32,), (33, 64): (64,), (65, 256): (128,), (257, None): ()}
# Upstream defaults (specs/defaults.py is their one source; the tuned file imports them too).
SPLIT_DEFAULT_CHUNKS = tuple((lo, hi, p["kv_chunks"]) for lo, hi, p in _defaults.DEFAULT_SPLIT.rows)
SCORE_DEFAULT_OPTIONS = dict(_defaults.UNTUNED_SPLIT_OPTIONS)
# scorer max_block buckets -> representative context (tokens)
SCORE_MB_BUCKETS = ((0, 64), (65, 256), (257, None))
MB_REP_CTX = {64: 8192, 256: 32768, 1024: 131072}
SCORE_MB_REP = {(0, 64): 64, (65, 256): 256, (257, None): 1024}
# single-launch scorer + selector: its selection tile must hold every block of the bucket
FUSED = "index_decode_fused"
FUSED_TILES = (128, 256, 512)
FUSED_MAX_REQS = 16
FUSED_OPTIONS = ((4, 2), (8, 2))
STATIC_OPTIONS = ((4, 2), (4, 3))  # (num_warps, num_stages) of the static-chunk split candidates
Q_BUCKETS = {1: (1, 1), 4: (2, None)}  # measured Q -> max_q bucket (None: axis hi)

P_BUCKETS = ((1, 2), (3, 4), (5, 8), (9, 16), (17, 32), (33, 64), (65, 128), (129, 256),
             (257, None))
TOPK_DEFAULT_CHUNKS = tuple((lo, hi, p["topk_chunks"]) for lo, hi, p in
                            _defaults.GENERAL_TOPK.rows)
TOPK_DEFAULT_OPTIONS = dict(_defaults.GENERAL_TOPK_OPTIONS)
# selector max_block buckets; the last one (longer than any measured context) takes the best
# multi-tile (single_tile=False) configuration measured at 1024 blocks.
TOPK_MB_BUCKETS = ((0, 64), (65, 256), (257, 1024), (1025, None))
TOPK_MB_REP = {(0, 64): 64, (65, 256): 256, (257, 1024): 1024, (1025, None): 1024}
SELECTOR_STAGES = 2
# Programmatic dependent launch of the selector after the scorer (both are measured where the
# target supports it).
SELECTOR_PDL = (False, True)

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="output directory (tune.json, tuned_<target>.py)")
    p.add_argument("--write-specs", action="store_true",
                   help="rewrite specs/tuned_<target>.py (and DIR/tuned_<target>.py; a new "
                        "target is added to specs/tuned.py)")
    p.add_argument("--quick", action="store_true", help="a small subset (sanity run)")
    p.add_argument("--selftest", action="store_true",
                   help="CPU: fake measurements -> file -> codegen.registry.load")
    p.add_argument("--reps", type=int, default=15, help="timed replays per candidate")
    p.add_argument("--jobs", type=int, default=None, help="parallel compile workers (0: none)")
    p.add_argument("--budget-s", type=float, default=480.0,
                   help="stop measuring after this many seconds; unmeasured buckets keep "
                        "their defaults")
    p.add_argument("--check-file", metavar="PATH",
                   help="CPU: load specs/ with PATH (named tuned_<target>.py) as that "
                        "target's table through the registry")
    p.add_argument("--sections", default="router,scorer,selector",
                   help="comma list of router, scorer, selector (selector needs scorer); "
                        "--write-specs keeps the current tables of a section not measured "
                        "(router, or scorer + selector together)")
    p.add_argument("--shapes", default=None,
                   help="router weight shapes to measure, e.g. 6144x128,3072x256 (default: "
                        "all; a subset cannot be written with --write-specs)")
    args = p.parse_args(argv)
    if not args.selftest and not args.check_file and not args.out:
        p.error("--out is required (except with --selftest)")
    measured = {x.strip() for x in args.sections.split(",") if x.strip()}
    unknown = measured - {"router", "scorer", "selector"}
    if unknown or not measured:
        p.error(f"--sections: a comma list of router, scorer, selector, got {args.sections!r}")
    if "selector" in measured and "scorer" not in measured:
        p.error("--sections: selector needs scorer (its candidates are timed with the scorer "
                "that wins at each point)")
    if args.write_specs and ("scorer" in measured) != ("selector" in measured):
        p.error("--sections: --write-specs needs scorer and selector together (the other one's "
                "measured tables would be replaced by defaults)")
    if args.shapes is not None:
        try:
            args.shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
        except ValueError:
            p.error(f"--shapes: expected KxN[,KxN...], got {args.shapes!r}")
        if args.write_specs:
            p.error("--shapes: a subset of the router shapes cannot be written with "
                    "--write-specs (the other shapes would lose their measured rows)")
    return args


def bucket_of(value, buckets):
    for lo, hi in buckets:
        if value >= lo and (hi is None or value <= hi):
            return (lo, hi)
    raise ValueError(f"{value} is in no bucket of {buckets}")


# ---------------------------------------------------------------------------------------------
# candidate spaces


def router_candidates(K, lo, hi, warp=32):
    """Per-expert kernel candidates (block_m, block_k, num_warps) for bucket [lo, hi];
    ``warp``: threads per warp (64 on AMD)."""
    out = []
    for bm in ROUTER_BM:
        if bm > hi or bm not in ROUTER_BM_BY_BUCKET.get((lo, hi), ROUTER_BM):
            continue
        for bk in ROUTER_BK:
            if K % bk:
                continue
            for nw in ROUTER_NW:
                lanes = bk / (warp * nw)  # w elements per thread per K step
                per_thread = bm * lanes  # fp32 partial sums per thread
                if not (4 <= lanes <= 16 and 4 <= per_thread <= 32):
                    continue
                out.append((bm, bk, nw))
    return out


def splitk_candidates(K, N, lo, hi, quick, sms, tf32x3):
    """Split-K kernel candidates (dicts in SPLITK_PARAM_ORDER) for bucket [lo, hi] on ``sms``
    SMs; tf32x3 ones only where the target has TF32 tensor cores (``tf32x3``). fp32-FMA
    candidates are pruned hard where tf32x3 exists (they never beat it on the H200) and swept
    like tf32x3 ones where they are the only split-K form."""
    bm = common.pow2ceil(max(16, hi))
    max_grid = SPLITK_MAX_GRID_PER_SM * sms
    tiles = []
    for bn in SPLITK_BN:
        if bn > max(16, common.pow2ceil(N)):
            continue
        for bk in SPLITK_BK:
            for sk in SPLITK_SK:
                grid = common.cdiv(N, bn) * sk
                if K % (bk * sk) == 0 and grid <= max_grid:
                    tiles.append((bn, bk, sk, grid))
    if not tiles:
        return []
    min_grid = min(SPLITK_MIN_GRID, max(t[3] for t in tiles))
    out = []
    for bn, bk, sk, grid in tiles:
        if grid < min_grid:
            continue
        steps = K // (sk * bk)  # tl.dot steps per program
        if steps > 16:
            continue  # a long serial chain per program: never competitive
        for use_tf32x3 in SPLITK_TF32X3:
            if use_tf32x3 and not tf32x3:
                continue
            if not use_tf32x3 and tf32x3 and (bn > 32 or grid > 2 * sms):
                continue
            warps = {256: (2, 4), 512: (4,), 1024: (4, 8), 2048: (4, 8)}[bm * bn]
            stages = (1,) if steps == 1 else ((2,) if steps == 2 else (2, 3))
            for nw in warps:
                for ns in stages:
                    if (quick or (tf32x3 and not use_tf32x3)) and (nw != 4 or ns > 2):
                        continue
                    if quick and not use_tf32x3 and tf32x3:
                        continue
                    out.append(dict(block_m=bm, block_n=bn, block_k=bk, split_k=sk,
                                    tf32x3=use_tf32x3, num_warps=nw, num_stages=ns))
    return out


def router_all_candidates(K, N, lo, hi, quick, sms, tf32x3, warp=32):
    """(kernel, params) of both kernels for bucket [lo, hi]."""
    out = [("per_expert", dict(block_m=bm, block_k=bk, num_warps=nw, num_stages=1))
           for bm, bk, nw in router_candidates(K, lo, hi, warp)]
    out += [("splitk", p) for p in splitk_candidates(K, N, lo, hi, quick, sms, tf32x3)]
    return out


def scorer_candidates(R, max_block, sms, quick=False):
    """(variant, params) candidates at one point."""
    out = []
    # (num_warps, num_stages): 2 warps / 1 stage (K straight to registers) beat 4 / 3 at
    # 64 × 128k in the first H200 run (495 vs 560 µs), so both regimes are swept.
    options = ((4, 3), (2, 1)) if quick else ((2, 1), (2, 3), (4, 1), (4, 2), (4, 3), (8, 3))
    chunks = [c for c in (8, 16, 32, 64, 128, 256, 512, 1024)
              if c <= max(8, max_block) and R * c <= 64 * sms]
    if not chunks:
        chunks = [8]
    for c, (w, s) in itertools.product(chunks, options):
        out.append(("index_score_split", dict(kv_chunks=c, high_batch=False,
                                              static_chunks=False, num_warps=w, num_stages=s)))
    # static chunks (first page id fetched without waiting for seq_len), in the two regimes
    # that win most often
    for c, (w, s) in itertools.product(chunks, STATIC_OPTIONS):
        out.append(("index_score_split", dict(kv_chunks=c, high_batch=False,
                                              static_chunks=True, num_warps=w, num_stages=s)))
    if R <= 16:
        for k, (w, s) in itertools.product((1, 2, 4, 8), options):
            out.append(("index_score_balanced", dict(program_budget=sms * k, num_warps=w,
                                                     num_stages=s)))
    tile = fused_tile(max_block)
    if R <= FUSED_MAX_REQS and tile is not None:
        fchunks = [c for c in (8, 16, 32, 64, 128, 256)
                   if c <= max(8, max_block) and 32 <= R * c <= 512] or [8]
        for c, (w, s) in itertools.product(fchunks, FUSED_OPTIONS[:1] if quick else
                                           FUSED_OPTIONS):
            out.append((FUSED, dict(kv_chunks=c, topk_tile=tile, num_warps=w, num_stages=s)))
    return out


def fused_tile(max_block_hi):
    """Smallest fused selection tile holding max_block_hi blocks (None: too long)."""
    if max_block_hi is None:
        return None
    return next((t for t in FUSED_TILES if max_block_hi <= t), None)


def selector_candidates(max_block, mb_bucket_hi, quick=False, pdl=True):
    """Selector configs at one point (max_block = the representative's capacity); pdl ones
    only where the target supports programmatic dependent launch (``pdl``).

    single_tile is only offered where the whole bucket allows it (bucket hi ≤ chunks·tile);
    at the 1024-block representative the multi-tile form is measured too, for the longer
    (unmeasured) bucket above it."""
    out = []
    for tile in (128, 512):
        cmax = min(16, common.pow2ceil(common.cdiv(max(max_block, 1), tile)))
        for c in (1, 2, 4, 8, 16):
            if c > cmax:
                continue
            allowed = mb_bucket_hi is not None and mb_bucket_hi <= c * tile
            singles = [True] if allowed else [False]
            if allowed and max_block >= 1024:
                singles.append(False)
            for single in singles:
                for adaptive in ((False, True) if c >= 2 else (False,)):
                    for w in ((4,) if quick else (2, 4, 8)):
                        for use_pdl in SELECTOR_PDL:
                            if use_pdl and not pdl:
                                continue
                            out.append(dict(topk_chunks=c, topk_tile=tile, single_tile=single,
                                            adaptive_merge=adaptive, pdl=use_pdl, num_warps=w,
                                            num_stages=SELECTOR_STAGES))
    return out


_SAID = set()


def scoring_selector(P, max_block, target):
    """The selector the scorer candidates are timed with: the one the target's current table
    picks at this point (pdl included), so that two-kernel candidates are not judged with a
    slower selector than they will run with; upstream's default where there is no table yet
    (said once: expected for a new target, suspicious for a declared one)."""
    try:
        row = _decode_module()._topk_row(target, TOPK, max_block, P)
    except (ImportError, ValueError, LookupError) as e:
        if target not in _SAID:
            _SAID.add(target)
            common.say(f"scoring selector for {target}: upstream's default "
                       f"({type(e).__name__}: {e})")
        return default_selector(P)
    return {"pdl": False, **row.params}


def default_selector(P):
    """Upstream's general branch (the untuned default) for P = rows × heads."""
    for lo, hi, c in TOPK_DEFAULT_CHUNKS:
        if P >= lo and (hi is None or P <= hi):
            return dict(topk_chunks=c, **TOPK_DEFAULT_OPTIONS)
    raise AssertionError(P)


def default_scorer_rows(lo, hi):
    """The default split grid's rows clipped to the request bucket [lo, hi]."""
    rows = []
    for dlo, dhi, c in SPLIT_DEFAULT_CHUNKS:
        a = max(lo, dlo)
        b = dhi if hi is None else (hi if dhi is None else min(hi, dhi))
        if b is not None and b < a:
            continue
        rows.append((a, b, "index_score_split", dict(kv_chunks=c, **SCORE_DEFAULT_OPTIONS)))
    return rows


def default_scorer(R):
    for lo, hi, c in SPLIT_DEFAULT_CHUNKS:
        if R >= lo and (hi is None or R <= hi):
            return "index_score_split", dict(kv_chunks=c, **SCORE_DEFAULT_OPTIONS)
    raise AssertionError(R)


def choose(times: dict, reps: list):
    """times: cand_key -> {rep: µs}. Candidate with the smallest worst-case slowdown over reps
    (ties: mean slowdown). Returns (key, worst, mean) or None."""
    complete = {k: v for k, v in times.items() if all(r in v for r in reps)}
    if not complete:
        return None
    best = {r: min(v[r] for v in complete.values()) for r in reps}
    scored = []
    for k, v in complete.items():
        ratios = [v[r] / best[r] for r in reps]
        scored.append((max(ratios), sum(ratios) / len(ratios), k))
    scored.sort(key=lambda x: (x[0], x[1]))
    worst, mean, key = scored[0]
    return key, worst, mean


def freeze(d: dict):
    return tuple(sorted(d.items()))


# ---------------------------------------------------------------------------------------------
# GPU measurement


class Tuner:
    def __init__(self, args, target, device=None, timer=None):
        """target: the codegen.model.Hardware whose tables this run measures."""
        import torch

        from codegen.families.index_decode import supports_pdl
        from codegen.families.router_gemm import supports_tf32x3

        self.args = args
        self.torch = torch
        self.target = target
        self.pdl = supports_pdl(target)
        self.tf32x3 = supports_tf32x3(target)
        self.warp = 64 if target.vendor == "amd" else 32
        self.device = torch.device(device or "cuda")
        self.sms = common.num_sms(self.device.type != "cuda")
        self._timer = timer
        self.t0 = time.time()
        self.log = {"env": common.env_info(False), "args": vars(args), "router": [],
                    "scorer": [], "selector": [], "chosen": {}, "errors": [], "skipped": []}
        self.router_best = {}
        self.scorer_best = {}
        self.selector_best = {}
        self.scorer_at_point = {}  # (R, Q, max_block) -> (variant, params) best at that point
        self.json_path = os.path.join(args.out, "tune.json")

    # -- helpers --------------------------------------------------------------------------
    def over_budget(self) -> bool:
        return time.time() - self.t0 > self.args.budget_s

    def save(self, final=False):
        """tune.json (compact: thousands of records); at most every 30 s until the end, so a
        run stopped at the device's time limit still leaves its measurements behind."""
        now = time.time()
        if not final and now - getattr(self, "_saved", 0) < 30:
            return
        self._saved = now
        self.log["elapsed_s"] = now - self.t0
        common.write_json(self.json_path, self.log, indent=None)

    def timed(self, fn):
        if self._timer is not None:
            return self._timer(fn)
        return common.time_graph(fn, reps=self.args.reps, warmup=1)

    # -- (a) router -----------------------------------------------------------------------
    def tune_router(self):
        import torch
        import torch.nn.functional as F

        launchers = {"per_expert": _router_launcher(), "splitk": _router_splitk_launcher()}
        shapes = self.router_shapes()
        common.say(f"== (a) router GEMM: {len(shapes)} shapes")
        g = torch.Generator(device=self.device).manual_seed(11)
        for K, N in shapes:
            w = torch.randn((N, K), generator=g, device=self.device) * K ** -0.5
            xs = {}
            for m in sorted({m for reps in ROUTER_REPS.values() for m in reps}):
                base = torch.randn((m, K), generator=g, device=self.device)
                for dt in (torch.bfloat16, torch.float32):
                    x = base.to(dt)
                    xs[(m, _dt(dt))] = (x, F.linear(x.float(), w))
            for lo, hi in ROUTER_BUCKETS:
                if self.over_budget():
                    self.log["skipped"].append(f"router {K}x{N} {lo}-{hi}: over budget")
                    continue
                t_b = time.time()
                reps = [(m, dt) for m in ROUTER_REPS[(lo, hi)] for dt in ("bf16", "fp32")]
                times = {}
                cands = router_all_candidates(K, N, lo, hi, self.args.quick, self.sms,
                                              self.tf32x3, self.warp)
                for kind, params in cands:
                    key = (kind, freeze(params))
                    launch = launchers[kind]
                    for rep in reps:
                        x, want = xs[rep]
                        logits = torch.empty((rep[0], N), device=self.device)
                        fn = (lambda x=x, logits=logits, launch=launch, params=params: launch(
                            x, w, logits, **params))
                        rec = {"K": K, "N": N, "bucket": [lo, hi], "M": rep[0], "x": rep[1],
                               "kernel": kind, **params}
                        try:
                            logits.fill_(float("nan"))
                            fn()
                            err = float((logits - want).norm() / want.norm())
                            rec["rel_err"] = err
                            if not err < 1e-4:
                                rec["rejected"] = "wrong result"
                            elif not _router_counter_clear(self.device):
                                rec["rejected"] = "split-K counter left non-zero"
                            else:
                                t = self.timed(fn)
                                rec.update(t)
                                if not _router_counter_clear(self.device):
                                    rec["rejected"] = "split-K counter left non-zero (timing)"
                                else:
                                    times.setdefault(key, {})[rep] = t["median_us"]
                        except Exception as e:  # noqa: BLE001
                            rec["error"] = f"{type(e).__name__}: {e}"[:300]
                        self.log["router"].append(rec)
                pick = choose(times, reps)
                if pick:
                    key, worst, mean = pick
                    kind, params = key[0], dict(key[1])
                    best = {"kernel": kind}
                    order = SPLITK_PARAM_ORDER if kind == "splitk" else (
                        "block_m", "block_k", "num_warps")
                    best.update({k: params[k] for k in order})
                    best.update(worst=worst,
                                times={f"M{m} {dt}": times[key][(m, dt)] for m, dt in reps})
                    self.router_best[(K, N, lo, hi)] = best
                    common.say(f"   ({K},{N}) M {lo}-{hi}: {len(cands)} cands -> "
                               f"{_router_short(best)}  "
                               + " ".join(f"{times[key][r]:.2f}" for r in reps)
                               + f" µs (worst {worst:.3f}x) [{time.time() - t_b:.1f}s]")
                else:
                    self.log["errors"].append(f"router {K}x{N} {lo}-{hi}: no valid candidate")
            del w, xs
            common.free_memory(collect=False)
            self.save()

    # -- (b)+(c) decode -------------------------------------------------------------------
    def decode_points(self):
        rs = sorted({r for reps in R_REPS.values() for r in reps})
        mbs = sorted(MB_REP_CTX)
        qs = (1, 4)
        if self.args.quick:
            rs, mbs = [1, 4, 16, 64], [64, 1024]
        return [(R, Q, mb) for mb in mbs for R in rs for Q in qs]

    def tune_decode(self, do_scorer=True, do_selector=True):
        dec = _decoder()
        points = self.decode_points()
        common.say(f"== (b) scorer{' + (c) selector' if do_selector else ''}: {len(points)} "
                   f"points (R, Q, max_block), end to end with the page-16 table")
        score_times = {}  # (qb, mbb, rb) -> {cand: {R: µs}}
        sel_times = {}  # (mbb_topk, pb) -> {cand: {(R,Q): µs}}
        for R, Q, mb in points:
            if self.over_budget():
                self.log["skipped"].append(f"decode R={R} Q={Q} mb={mb}: over budget")
                continue
            t_p = time.time()
            ctx = MB_REP_CTX[mb]
            inp = _decode_inputs(self.torch, R, Q, ctx, self.device)
            P = R * Q
            fixed_sel = scoring_selector(P, mb, self.target.name)
            d_var, d_par = default_scorer(R)
            ref = (_run_decode(dec, inp, d_var, d_par, fixed_sel).clone(),
                   inp["table"].clone(), inp["ctx_out"].clone())
            # (b) scorer
            qb, mbb, rb = Q_BUCKETS[Q], bucket_of(mb, SCORE_MB_BUCKETS), bucket_of(R, R_BUCKETS)
            best_s = None
            best_two = None  # best split/balanced: the selector phase needs a second kernel
            if do_scorer:
                cands = scorer_candidates(R, mb, self.sms, self.args.quick)
                for variant, params in cands:
                    t = self._time_decode(dec, inp, ref, variant, params, fixed_sel,
                                          {"R": R, "Q": Q, "max_block": mb, "variant": variant,
                                           **params}, self.log["scorer"])
                    if t is not None:
                        key = (variant, freeze(params))
                        score_times.setdefault((qb, mbb, rb), {}).setdefault(key, {})[R] = t
                        if best_s is None or t < best_s[0]:
                            best_s = (t, variant, params)
                        if variant != FUSED and (best_two is None or t < best_two[0]):
                            best_two = (t, variant, params)
            if best_s is None:
                best_s = (None, d_var, d_par)
            if best_two is None:
                best_two = (None, d_var, d_par)
            self.scorer_at_point[(R, Q, mb)] = best_s[1:]
            # (c) selector, with this point's best scorer
            best_t = None
            if do_selector and not self.over_budget():
                hi_small = bucket_of(mb, TOPK_MB_BUCKETS)[1]
                cands = selector_candidates(mb, hi_small, self.args.quick, self.pdl)
                pb = bucket_of(P, P_BUCKETS)
                for sel in cands:
                    t = self._time_decode(dec, inp, ref, best_two[1], best_two[2], sel,
                                          {"R": R, "Q": Q, "max_block": mb, "P": P,
                                           "scorer": best_two[1], **sel}, self.log["selector"])
                    if t is None:
                        continue
                    key = freeze(sel)
                    for tb in TOPK_MB_BUCKETS:
                        if TOPK_MB_REP[tb] != mb:
                            continue
                        # a single-tile config is valid for a bucket only up to chunks·tile
                        if sel["single_tile"] and (tb[1] is None or
                                                   tb[1] > sel["topk_chunks"] * sel["topk_tile"]):
                            continue
                        sel_times.setdefault((tb, pb), {}).setdefault(key, {})[(R, Q)] = t
                    if best_t is None or t < best_t:
                        best_t = t
            del inp, ref
            common.free_memory(collect=False)
            common.say(f"   R={R:<3d} Q={Q} mb={mb:<4d}: scorer best "
                       f"{common.fmt_us(best_s[0])} µs {best_s[1].split('_')[-1]} "
                       f"{_short(best_s[2])}; two kernels with best selector "
                       f"{common.fmt_us(best_t)} µs "
                       f"[{time.time() - t_p:.1f}s]")
            self.save()
        # choose per bucket
        for (qb, mbb, rb), times in sorted(score_times.items(), key=lambda kv: str(kv[0])):
            reps = sorted({r for v in times.values() for r in v})
            pick = choose(times, reps)
            if pick:
                (variant, params), worst, mean = pick
                self.scorer_best[(qb, mbb, rb)] = dict(
                    variant=variant, params=dict(params), worst=worst,
                    times={f"R{r}": times[(variant, params)][r] for r in reps})
        for (tb, pb), times in sorted(sel_times.items(), key=lambda kv: str(kv[0])):
            reps = sorted({r for v in times.values() for r in v})
            pick = choose(times, reps)
            if pick:
                key, worst, mean = pick
                self.selector_best[(tb, pb)] = dict(
                    params=dict(key), worst=worst,
                    times={f"R{r}Q{q}": times[key][(r, q)] for r, q in reps})

    def _time_decode(self, dec, inp, ref, variant, params, sel, rec, log):
        rec = dict(rec)
        try:
            inp["counter"].zero_()
            for key in ("out", "table", "ctx_out"):
                inp[key].fill_(-7)
            fn = lambda: _run_decode(dec, inp, variant, params, sel)  # noqa: E731
            got = fn()
            same = [self.torch.equal(a, b) for a, b in zip(
                (got, inp["table"], inp["ctx_out"]), ref)]
            if not all(same):
                # the scorers are bitwise identical by contract, so any difference is a bug
                rec["rejected"] = "result differs from the default launch " + str(
                    [n for n, ok in zip(("topk_idx", "table", "ctx"), same) if not ok])
                log.append(rec)
                return None
            if int(inp["counter"].abs().sum()) != 0:
                rec["rejected"] = "completion counter not returned to zero"
                log.append(rec)
                return None
            t = self.timed(fn)
            rec.update(t)
            log.append(rec)
            return t["median_us"]
        except Exception as e:  # noqa: BLE001
            rec["error"] = f"{type(e).__name__}: {e}"[:300]
            log.append(rec)
            return None

    # -- compile warm-up in worker processes --------------------------------------------
    def router_shapes(self):
        shapes = _router_shapes()
        if getattr(self.args, "shapes", None):
            unknown = sorted(set(self.args.shapes) - set(shapes))
            if unknown:
                raise ValueError(f"--shapes: {unknown} not among the router shapes {shapes}")
            shapes = [s for s in shapes if s in self.args.shapes]
        if self.args.quick:
            shapes = [s for s in shapes if s in ((6144, 128), (3072, 256))] or shapes[:1]
        return shapes

    def warm_groups(self, sections):
        """Launches that compile every kernel the timing loop will need, one per distinct
        compile key (constexprs, options, and the integer specialisations Triton makes: a
        token count of 1 or a multiple of 16 is its own compile), grouped so that no two
        groups compile the same kernel."""
        groups = {}

        def add(group, key, task):
            groups.setdefault(group, {}).setdefault(key, task)

        def mclass(m):
            return 1 if m == 1 else (16 if m % 16 == 0 else 0)

        if "router" in sections:
            for K, N in self.router_shapes():
                for lo, hi in ROUTER_BUCKETS:
                    for bm, bk, nw in router_candidates(K, lo, hi, self.warp):
                        for m in ROUTER_REPS[(lo, hi)]:
                            for dt in ("bf16", "fp32"):
                                add(("router", K, N, dt, bm), (bk, nw, mclass(m)),
                                    ("router", (K, N, dt), (bm, bk, nw, m)))
                    # the split-K kernel does not specialise M: one compile per configuration
                    for p in splitk_candidates(K, N, lo, hi, self.args.quick, self.sms,
                                               self.tf32x3):
                        for dt in ("bf16", "fp32"):
                            add(("router_splitk", K, N, dt, p["block_m"]), freeze(p),
                                ("router_splitk", (K, N, dt), (p, ROUTER_REPS[(lo, hi)][-1])))
        if "scorer" in sections or "selector" in sections:
            for R, Q, mb in self.decode_points():
                fixed_sel = scoring_selector(R * Q, mb, self.target.name)
                sels = [fixed_sel]
                if "scorer" in sections:
                    for variant, params in scorer_candidates(R, mb, self.sms, self.args.quick):
                        bal = variant.endswith("balanced")
                        add(("scorer", variant, R if bal else None, Q),
                            (params["num_warps"], params["num_stages"],
                             params.get("topk_tile"), params.get("static_chunks"),
                             fixed_sel.get("pdl")),  # constexprs of the scorer build
                            ("decode", (R, Q), (variant, params, fixed_sel)))
                if "selector" in sections:
                    sels += selector_candidates(mb, bucket_of(mb, TOPK_MB_BUCKETS)[1],
                                                self.args.quick, self.pdl)
                # the selector's counter row stride is total_q: 1 / multiple of 16 / other
                # (decode_query_len is not specialised, so Q itself is not a compile key)
                tq = R * Q
                tq_class = 1 if tq == 1 else (16 if tq % 16 == 0 else 0)
                for sel in sels:
                    add(("selector", sel["topk_chunks"], sel["topk_tile"]),
                        tuple(sorted(sel.items())) + (tq_class,),
                        ("decode", (R, Q), default_scorer(R) + (sel,)))
        # longest first (a decode compile costs several router compiles) so no worker is left
        # with a long group at the end
        def cost(group):
            return sum(1 if t[0].startswith("router") else 4 for t in group)

        return sorted((list(g.values()) for g in groups.values()), key=cost, reverse=True)

    def warm(self, sections):
        jobs = self.args.jobs
        if jobs is None:
            jobs = min(14, max(1, (os.cpu_count() or 2) - 2))
        if jobs <= 0:
            return
        work = self.warm_groups(sections)
        if not work:
            return
        tasks = sum(len(g) for g in work)
        t = time.time()
        common.say(f"== compile warm-up: {tasks} kernels in {len(work)} groups on {jobs} "
                   f"worker processes")
        try:
            import multiprocessing as mp

            # a worker that dies (not just raises) would leave map() waiting: bound the wait
            timeout = max(60.0, 0.5 * self.args.budget_s)
            pool = mp.get_context("spawn").Pool(processes=jobs)
            try:
                results = pool.map_async(_warm_worker, work, chunksize=1).get(timeout)
                pool.close()
            finally:
                pool.terminate()
                pool.join()
            ok = sum(r[0] for r in results)
            errs = [e for r in results for e in r[1]]
            common.say(f"   warm-up: {ok} launches compiled/loaded, {len(errs)} errors "
                       f"[{time.time() - t:.1f}s]")
            self.log["warm"] = {"tasks": tasks, "ok": ok, "errors": errs[:50],
                                "seconds": time.time() - t}
        except Exception as e:  # noqa: BLE001
            common.say(f"   warm-up failed ({type(e).__name__}: {e}); compiling on demand")
            self.log["warm"] = {"error": f"{type(e).__name__}: {e}"}


def _short(params):
    keys = {"kv_chunks": "c", "program_budget": "b", "topk_tile": "t", "num_warps": "w",
            "num_stages": "s"}
    return " ".join(f"{keys[k]}{v}" for k, v in params.items() if k in keys)


def _dt(dtype):
    return {"torch.bfloat16": "bf16", "torch.float32": "fp32"}[str(dtype)]


def _router_launcher():
    import importlib

    for name in ("generated.moe_router", "generated.router_gemm"):
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(mod, "launch_router_gemm"):
            return mod.launch_router_gemm
    raise RuntimeError("launch_router_gemm not found in generated.moe_router")


def _router_module():
    import importlib

    return importlib.import_module("generated.moe_router")


def _router_splitk_launcher():
    return _router_module().launch_router_gemm_splitk


def _router_counter_clear(device) -> bool:
    """True when every split-K counter buffer (one per device) is all zero; a non-zero one is
    reset so that later candidates start clean."""
    clear = True
    for counter in getattr(_router_module(), "_COUNTERS", {}).values():
        if bool(counter.any()):
            counter.zero_()
            clear = False
    return clear


def _router_short(v: dict) -> str:
    if v.get("kernel") == "splitk":
        return (f"splitk bm={v['block_m']} bn={v['block_n']} bk={v['block_k']} "
                f"sk={v['split_k']}{' tf32x3' if v['tf32x3'] else ''} nw={v['num_warps']} "
                f"ns={v['num_stages']}")
    return f"bm={v['block_m']} bk={v['block_k']} nw={v['num_warps']}"


def _router_shapes():
    """The router weight shapes the specs declare (the `shape` axis of the router policy)."""
    from codegen import registry

    return sorted(registry.load().policies["router_gemm"].axis("shape").values)


def _decode_module():
    import importlib

    return importlib.import_module("generated.decode_indexer")


def _decoder():
    return _decode_module().index_decode_with_launch


def _decode_inputs(torch, R, Q, ctx, device, seed=0):
    """Uniform context ``ctx`` for every request, random distinct pages (as tools/bench.py)."""
    g = torch.Generator().manual_seed(seed + 31 * R + Q)
    mb = common.cdiv(ctx, BLOCK)
    num_pages = R * mb + 16
    perm = torch.randperm(num_pages, generator=g).to(torch.int32)
    bt = perm[:R * mb].view(R, mb).contiguous()
    attn = torch.randperm(num_pages, generator=g)[:R * mb].to(torch.int32).view(R, mb)
    dg = torch.Generator(device=device).manual_seed(seed + 3)
    total_q = R * Q
    return {
        "R": R, "Q": Q, "ctx": ctx,
        "idx_q": torch.randn((total_q, 1, D), generator=dg, device=device).to(torch.bfloat16),
        "cache": torch.randn((num_pages, BLOCK, D), generator=dg, device=device,
                             dtype=torch.bfloat16),
        "block_table": bt.to(device),
        "seq_lens": torch.full((R,), ctx, dtype=torch.int32, device=device),
        "attn_table": attn.contiguous().to(device),
        "out": torch.full((1, total_q, TOPK), -7, dtype=torch.int32, device=device),
        "table": torch.full((total_q, TOPK * 8), -7, dtype=torch.int32, device=device),
        "ctx_out": torch.full((total_q,), -7, dtype=torch.int32, device=device),
        "counter": torch.zeros((1, total_q), dtype=torch.int32, device=device),
    }


def _run_decode(dec, inp, variant, params, sel):
    score_launch = {"variant": variant, **params}
    sel = None if variant == FUSED else dict(sel)  # the fused launch selects itself
    return dec(score_launch, sel, inp["idx_q"], inp["cache"], inp["block_table"],
               inp["seq_lens"], inp["ctx"], TOPK, 0, 1, 1, inp["Q"], inp["Q"], inp["out"],
               attention_block_table=inp["attn_table"], sparse_block_table_out=inp["table"],
               sparse_context_lens_out=inp["ctx_out"], block_page_stride=8,
               completion_counter=inp["counter"])


def _warm_worker(tasks):
    """Run in a spawned process: launch each task once so Triton compiles it into the disk
    cache. Returns (launches that ran, [errors])."""
    cpu = os.environ.get("TUNE_WARM_DEVICE") == "cpu"  # selftest of the pool mechanics only
    common.setup(cpu)
    import torch

    ok, errors = 0, []
    device = torch.device("cpu" if cpu else "cuda")
    sync = (lambda: None) if cpu else torch.cuda.synchronize
    inputs = {}

    def router_tensors(shape):
        """x [32, K] (bf16 or fp32), w [N, K], out [32, N] for one (K, N, x dtype); one set live."""
        if shape not in inputs:
            K, N, dt = shape
            inputs.clear()
            dtype = torch.bfloat16 if dt == "bf16" else torch.float32
            inputs[shape] = (torch.randn((32, K), device=device).to(dtype),
                             torch.randn((N, K), device=device),
                             torch.empty((32, N), device=device))
        return inputs[shape]

    try:
        for kind, shape, cand in tasks:
            try:
                if kind == "router":
                    bm, bk, nw, m = cand
                    x, w, out = router_tensors(shape)
                    # fresh [m, K] / [m, N] tensors, as the timing loop uses
                    _router_launcher()(x[:m].contiguous(), w, torch.empty_like(out[:m]),
                                       block_m=bm, block_k=bk, num_warps=nw, num_stages=1)
                elif kind == "router_splitk":
                    params, m = cand
                    x, w, out = router_tensors(shape)
                    _router_splitk_launcher()(x[:m].contiguous(), w, torch.empty_like(out[:m]),
                                              **dict(params))
                else:
                    R, Q = shape
                    if shape not in inputs:
                        inputs.clear()
                        inputs[shape] = _decode_inputs(torch, R, Q, 8192, device)
                    variant, params, sel = cand
                    inputs[shape]["counter"].zero_()
                    _run_decode(_decoder(), inputs[shape], variant, params, sel)
                sync()
                ok += 1
            except Exception as e:  # noqa: BLE001
                errors.append(f"{kind} {shape} {cand}: {type(e).__name__}: {e}"[:300])
                try:
                    sync()
                except Exception:  # noqa: BLE001
                    break
    finally:
        inputs.clear()
    return ok, errors


# ---------------------------------------------------------------------------------------------
# the target


def measured_targets(specs_dir: str = SPECS_DIR) -> tuple:
    """Names of the measured targets listed in specs_dir/tuned.py (as render_tuned_list
    writes it), in order."""
    with open(os.path.join(specs_dir, "tuned.py"), encoding="utf-8") as f:
        return tuple(re.findall(r"^from \. import tuned_(\w+)$", f.read(), re.M))


def device_target(torch, device):
    """(Hardware this device's measurements are for, whether it is already declared).

    A declared target matches as the generated runtime detects devices: NVIDIA by (major,
    minor) compute capability, AMD by gcn arch. Otherwise a new target named sm_<major><minor>
    or after the gcn arch, with the device's short name as an alias (when free)."""
    common.setup(False)
    from codegen import registry
    from codegen.model import Hardware

    reg = registry.load()
    props = torch.cuda.get_device_properties(device)
    if torch.version.hip:
        arch = props.gcnArchName.split(":")[0]
        for hw in reg.hardware.values():
            if hw.vendor == "amd" and hw.gcn_arch == arch:
                return hw, True
        fields = dict(name=re.sub(r"\W", "_", arch), vendor="amd", gcn_arch=arch)
    else:
        cap = (props.major, props.minor)
        for hw in reg.hardware.values():
            if hw.vendor == "nvidia" and hw.capability == cap:
                return hw, True
        fields = dict(name=f"sm_{props.major}{props.minor}", vendor="nvidia", capability=cap)
    taken = set(registry.hardware_aliases(reg))
    # the model in the device name ("NVIDIA B200" -> b200, "A100-SXM4-80GB" -> a100,
    # "AMD Instinct MI300X" -> mi300x), not bus or form-factor words
    model = next((t for t in re.split(r"[^a-z0-9]+", props.name.lower())
                  if re.fullmatch(r"[a-z]+\d+[a-z]*", t) and not re.fullmatch(
                      r"(sxm|pcie|nvl|gen|hbm|oam)\d*[a-z]*", t)), "")
    aliases = tuple(a for a in dict.fromkeys((fields["name"].replace("_", ""), model))
                    if a and a != fields["name"] and a not in taken)
    return Hardware(**fields, aliases=aliases,
                    description=f"{props.name}; policies measured by tools/tune.py"), False


def tunable_target(torch, device):
    """device_target, refusing a target whose tables are written by hand (SystemExit)."""
    target, declared = device_target(torch, device)
    if declared and target.name not in measured_targets():
        raise SystemExit(f"tune.py: this device is hardware target {target.name!r}, whose "
                         f"tables are written by hand in specs/ (not measured): there is "
                         f"nothing to tune")
    return target, declared


# ---------------------------------------------------------------------------------------------
# writing specs/tuned_<target>.py and specs/tuned.py


def load_domains() -> dict:
    """Axis domains of the index policies, from the spec registry (their one source)."""
    common.setup(False)
    from codegen import registry

    reg = registry.load()
    score = {a.name: a for a in reg.policies["index_score"].axes}
    topk = {a.name: a for a in reg.policies["index_topk"].axes}
    return dict(q_dtype=tuple(score["q_dtype"].values),
                cache_dtype=tuple(score["cache_dtype"].values),
                head_dim=tuple(score["head_dim"].values),
                num_heads=tuple(score["num_heads"].values),
                max_q_hi=score["max_q"].hi, max_block_hi=score["max_block"].hi,
                topk_hi=topk["topk"].hi, source="registry")


def _lit(v) -> str:
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, bool) or v is None or isinstance(v, int):
        return repr(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, tuple):
        return "(" + ", ".join(_lit(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    raise TypeError(v)


def _dict(d: dict) -> str:
    return "dict(" + ", ".join(f"{k}={_lit(v)}" for k, v in d.items()) + ")"


def _row(indent: int, lo, hi, params: dict) -> list:
    """`(lo, hi, dict(...)),` at ``indent``, wrapped to stay within 100 columns."""
    pad = " " * indent
    one = f"{pad}({lo}, {_hi(hi)}, {_dict(params)}),"
    if len(one) <= 100:
        return [one]
    head = f"{pad}({lo}, {_hi(hi)}, dict("
    lines, cur = [], head
    items = [f"{k}={_lit(v)}" for k, v in params.items()]
    for i, item in enumerate(items):
        piece = item + (", " if i < len(items) - 1 else ")),")
        if len(cur) + len(piece.rstrip()) > 100 and cur.strip():
            lines.append(cur.rstrip())
            cur = " " * len(head) + piece
        else:
            cur += piece
    lines.append(cur.rstrip())
    return lines


def _when(d: dict) -> str:
    parts = []
    for k, v in d.items():
        if isinstance(v, tuple) and len(v) == 2 and v[0] == "between":
            parts.append(f"{_lit(k)}: between({v[1][0]}, {v[1][1]})")
        else:
            parts.append(f"{_lit(k)}: {_lit(v)}")
    return "{" + ", ".join(parts) + "}"


def _range(lo, hi, axis_hi):
    """when-condition for an int axis bucket (no at_least import: close with the axis hi)."""
    hi = axis_hi if hi is None else hi
    return lo if lo == hi else ("between", (lo, hi))


def _hi(hi):
    return "None" if hi is None else str(hi)


def _times(times: dict) -> str:
    return ", ".join(f"{k} {v:.2f}" for k, v in times.items())


SCORE_PARAM_ORDER = {"index_score_split": ("kv_chunks", "high_batch", "static_chunks", "num_warps",
                                           "num_stages"),
                     "index_score_balanced": ("program_budget", "num_warps", "num_stages"),
                     FUSED: ("kv_chunks", "topk_tile", "num_warps", "num_stages")}
TOPK_PARAM_ORDER = ("topk_chunks", "topk_tile", "single_tile", "adaptive_merge", "pdl",
                    "num_warps", "num_stages")


def render_tuned(meta: dict, router: dict, scorer: dict, selector: dict, dom: dict) -> str:
    """Source of specs/tuned_<target>.py for meta["target"] (a codegen.model.Hardware).

    router: (K, N, lo, hi) -> dict(block_m, block_k, num_warps, [worst, times])
    scorer: (q_bucket, mb_bucket, r_bucket) -> dict(variant, params, [worst, times])
    selector: (mb_bucket, p_bucket) -> dict(params, [worst, times])
    Missing entries keep the defaults."""
    shapes = sorted({(k[0], k[1]) for k in router} | set(_router_shapes_static(dom)))
    hw = meta["target"]
    L = []
    w = L.append
    w(f'"""{hw.name} launch tables, measured by tools/tune.py (device and versions: MEASURED).')
    w("")
    w("tools/tune owns this file: rerun `python3 tools/tune.py --out DIR --write-specs` on a")
    w(f"{hw.name} device instead of editing it, then `codegen regenerate`. Rows marked `measured`")
    w("carry the median µs at the bucket's representatives; the others keep the untuned defaults.")
    w("HARDWARE's aliases and description are the exception: edit them here, a re-tune keeps them.")
    w('"""')
    w("from codegen.model import Hardware")
    w("from codegen.policy import Buckets, Rule, between")
    w("")
    w("from .defaults import (DEFAULT_SPLIT, GENERAL_TOPK, GENERAL_TOPK_OPTIONS,")
    w("                       UNTUNED_SPLIT_OPTIONS)")
    w("")
    match = (f"capability={_lit(tuple(hw.capability))}" if hw.vendor == "nvidia"
             else f"gcn_arch={_lit(hw.gcn_arch)}")
    w(f"HARDWARE = Hardware(name={_lit(hw.name)}, vendor={_lit(hw.vendor)}, {match},")
    w(f"                    aliases={_lit(tuple(hw.aliases))},")
    w(f"                    description={_lit(hw.description)})")
    w("")
    w("MEASURED = dict(")
    for k in ("date", "device", "torch", "triton", "l2_flush", "command"):
        w(f"    {k}={_lit(str(meta.get(k, '')))},")
    w(")")
    w("")
    w("")
    w("def _router(rows):")
    w('    """(lo, hi, block_m, block_k, num_warps): the per-expert kernel, one stage;')
    w('    (lo, hi, dict(kernel="splitk", ...)): the split-K kernel with all its parameters."""')
    w('    return Buckets(axis="num_tokens", rows=tuple(')
    w("        r if isinstance(r[2], dict) else")
    w("        (r[0], r[1], dict(block_m=r[2], block_k=r[3], num_warps=r[4], num_stages=1))")
    w("        for r in rows))")
    w("")
    w("")
    reps = " | ".join(", ".join(map(str, ROUTER_REPS[b])) for b in ROUTER_BUCKETS)
    w(f"# choice = smallest worst-case slowdown over the bucket's token counts ({reps}) ×")
    w("# x dtype (bf16, fp32), over both kernels")
    w("ROUTER_GEMM = {")
    for K, N in shapes:
        w(f"    ({K}, {N}): _router((")
        for lo, hi in ROUTER_BUCKETS:
            got = router.get((K, N, lo, hi))
            if got and got.get("kernel") == "splitk":
                note = "measured"
                if "times" in got:
                    note += f": {_times(got['times'])} µs"
                w(f"        # {note}")
                L.extend(_row(8, lo, hi, {"kernel": "splitk",
                                          **{k: got[k] for k in SPLITK_PARAM_ORDER}}))
                continue
            if got:
                bm, bk, nw = got["block_m"], got["block_k"], got["num_warps"]
                note = "measured"
                if "times" in got:
                    note += f": {_times(got['times'])} µs"
            else:
                bm, bk, nw = ROUTER_DEFAULT[(lo, hi)]
                note = "default (not measured)"
            w(f"        ({lo}, {hi}, {bm}, {bk}, {nw}),  # {note}")
        w("    )),")
    w("}")
    w("")
    # -- scorer
    w("# Untuned rows use upstream's defaults (specs/defaults.py).")
    w("_SPLIT_DEFAULT, _SPLIT_DEFAULT_OPTIONS = DEFAULT_SPLIT, UNTUNED_SPLIT_OPTIONS")
    w("_TOPK_DEFAULT, _TOPK_DEFAULT_OPTIONS = GENERAL_TOPK, GENERAL_TOPK_OPTIONS")
    w("")
    tuned = {"hardware": hw.name, "q_dtype": "bf16", "cache_dtype": "bf16", "head_dim": 128,
             "num_heads": 1}
    w("# The measured part of the scorer domain.")
    w("_TUNED = {" + _when(tuned)[1:].replace(', "head_dim"', ',\n          "head_dim"'))
    w("")
    w("# Decode scorer. Measured: bf16 query and cache, head_dim 128, one index head (H = 1),")
    w("# end to end (scores + selection + page-16 table, selector of the previous table), by")
    w("# Qmax bucket × max_block bucket × request bucket. Everything else: the default split")
    w("# grid, untuned.")
    w("# `index_decode_fused` rows: scorer + selector in one launch (max_block ≤ topk_tile).")
    w("INDEX_SCORE = [")
    for q, (qlo, qhi) in sorted(Q_BUCKETS.items()):
        for mlo, mhi in SCORE_MB_BUCKETS:
            rows = []
            for rlo, rhi in R_BUCKETS:
                got = scorer.get(((qlo, qhi), (mlo, mhi), (rlo, rhi)))
                if got and got["variant"] == FUSED and (
                        mhi is None or got["params"]["topk_tile"] < mhi):
                    got = None  # its tile does not hold the whole bucket: keep the default
                if got:
                    variant, params = got["variant"], dict(got["params"])
                    note = "measured"
                    if "times" in got:
                        note += f": {_times(got['times'])} µs"
                    pieces = [(rlo, rhi, variant, params)]
                else:
                    note = "default (not measured)"
                    pieces = default_scorer_rows(rlo, rhi)
                for lo, hi, variant, params in pieces:
                    order = SCORE_PARAM_ORDER[variant]
                    rows.append((lo, hi, variant, {k: params[k] for k in order}, note))
            when = {"max_q": _range(qlo, qhi, dom["max_q_hi"]),
                    "max_block": _range(mlo, mhi, dom["max_block_hi"])}
            # one Rule per run of consecutive request buckets with the same variant
            for variant, run in itertools.groupby(rows, key=lambda r: r[2]):
                run = list(run)
                w("    Rule(when={**_TUNED, " + _when(when)[1:] + ",")
                w(f"         variant={_lit(variant)}, by=Buckets(axis=\"num_reqs\", rows=(")
                for rlo, rhi, _, params, note in run:
                    w(f"             # {note}")
                    L.extend(_row(13, rlo, rhi, params))
                w(f"         )), note={_lit(_score_note(variant, qlo, qhi, mlo, mhi, dom))}),")
    for when in _complement(tuned, ("q_dtype", "cache_dtype", "head_dim", "num_heads"), dom):
        w(f"    Rule(when={_when(when)},")
        w("         variant=\"index_score_split\", params=_SPLIT_DEFAULT_OPTIONS, by=_SPLIT_DEFAULT,")
        w("         note=\"default split grid (not measured)\"),")
    w("]")
    w("")
    # -- selector
    w("# Fused top-k selector. Measured for topk 16 (end to end with the scorer chosen above), by")
    w("# max_block bucket × rows·heads bucket; single_tile only where the whole max_block bucket")
    w("# fits chunks·tile. Other topk values: upstream's general branch, untuned.")
    w("INDEX_TOPK = [")
    for mlo, mhi in TOPK_MB_BUCKETS:
        when = {"hardware": hw.name, "topk": TOPK,
                "max_block": _range(mlo, mhi, dom["max_block_hi"])}
        w(f"    Rule(when={_when(when)},")
        w("         variant=\"index_topk_fused\", by=Buckets(axis=\"rows_x_heads\", rows=(")
        for plo, phi in P_BUCKETS:
            got = selector.get(((mlo, mhi), (plo, phi)))
            if got:
                params = dict(got["params"])
                note = "measured"
                if "times" in got:
                    note += f": {_times(got['times'])} µs"
            else:
                params = default_selector(plo)
                note = "default (not measured)"
            cap = params["topk_chunks"] * params["topk_tile"]
            hi = dom["max_block_hi"] if mhi is None else mhi
            if params["single_tile"] and hi > cap:  # never emit an unsafe row
                params["single_tile"] = False
                note += "; single_tile dropped for this bucket"
            params = {k: params[k] for k in TOPK_PARAM_ORDER}
            w(f"             # {note}")
            L.extend(_row(13, plo, phi, params))
        note = f"topk 16, max_block {mlo}–{dom['max_block_hi'] if mhi is None else mhi}"
        w(f"         )), note={_lit(note)}),")
    for lo, hi in ((1, TOPK - 1), (TOPK + 1, dom["topk_hi"])):
        w(f"    Rule(when={_when({'hardware': hw.name, 'topk': _range(lo, hi, dom['topk_hi'])})},")
        w("         variant=\"index_topk_fused\", params=_TOPK_DEFAULT_OPTIONS, by=_TOPK_DEFAULT,")
        w("         note=\"general branch (not measured)\"),")
    w("]")
    return "\n".join(L) + "\n"


def _score_note(variant, qlo, qhi, mlo, mhi, dom):
    q = "Qmax 1" if qhi == qlo else f"Qmax {qlo}–{dom['max_q_hi'] if qhi is None else qhi}"
    mb = f"max_block {mlo}–{dom['max_block_hi'] if mhi is None else mhi}"
    return f"{variant.split('_')[-1]}, bf16 D128 H1, {q}, {mb}"


def _complement(tuned: dict, axes: tuple, dom: dict):
    """Disjoint `when` dicts covering every point of tuned["hardware"] outside ``tuned`` (enum
    axes only)."""
    out = []
    prefix = {"hardware": tuned["hardware"]}
    for axis in axes:
        for value in dom[axis]:
            if value != tuned[axis]:
                out.append(dict(prefix, **{axis: value}))
        prefix = dict(prefix, **{axis: tuned[axis]})
    return out


def _router_shapes_static(dom):
    return _router_shapes()


def render_tuned_list(targets) -> str:
    """Source of specs/tuned.py listing the measured ``targets``."""
    L = ['"""The measured hardware targets: one module each (specs/tuned_<name>.py: the target\'s '
         'Hardware',
         "spec and its launch tables), written by tools/tune.py on a device of that target. "
         "tools/tune.py",
         'also writes this list when it adds a target; do not edit either by hand.',
         '"""']
    L += [f"from . import tuned_{name}" for name in targets]
    L += ["", "TUNED = {"] + [f"    {_lit(name)}: tuned_{name}," for name in targets] + ["}"]
    return "\n".join(L) + "\n"


def targets_with(name: str, specs_dir: str = SPECS_DIR) -> tuple:
    """The measured targets once ``name`` is one of them."""
    have = measured_targets(specs_dir)
    return have if name in have else tuple(sorted(have + (name,)))


def check_spec_source(source: str, target: str) -> dict:
    """Load a copy of specs/ whose tuned_<target>.py is ``source`` (listed in its tuned.py)
    through the codegen registry (the generator's own proof: disjoint, complete, feasible).
    Returns the registry."""
    common.setup(False)
    from codegen import registry

    tmp = tempfile.mkdtemp(prefix="tuned_specs_")
    try:
        spec_copy = os.path.join(tmp, "specs")
        shutil.copytree(SPECS_DIR, spec_copy, ignore=shutil.ignore_patterns("__pycache__"))
        with open(os.path.join(spec_copy, f"tuned_{target}.py"), "w", encoding="utf-8") as f:
            f.write(source)
        with open(os.path.join(spec_copy, "tuned.py"), "w", encoding="utf-8") as f:
            f.write(render_tuned_list(targets_with(target)))
        return registry.load(spec_copy)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def verify_lookups(reg, router, scorer, selector, dom, target) -> int:
    """Every measured choice is what the loaded tables return at the bucket's edges."""
    from codegen.policy import lookup

    checked = 0

    def get(policy_name, point):
        policy = reg.policies[policy_name]
        row = lookup(policy, reg.tables[policy_name], point)
        return row.variant, dict(row.params)

    for (qlo, qhi), (mlo, mhi), (rlo, rhi) in scorer:
        want = scorer[((qlo, qhi), (mlo, mhi), (rlo, rhi))]
        for q in {qlo, dom["max_q_hi"] if qhi is None else qhi}:
            for mb in {mlo, dom["max_block_hi"] if mhi is None else mhi}:
                for r in {rlo, rhi if rhi is not None else rlo + 1000}:
                    v, p = get("index_score", (target, "bf16", "bf16", 128, r, mb, 1, q))
                    assert v == want["variant"] and all(p[k] == want["params"][k]
                                                        for k in want["params"]), \
                        (q, mb, r, v, p, want)
                    checked += 1
    for (mlo, mhi), (plo, phi) in selector:
        want = selector[((mlo, mhi), (plo, phi))]["params"]
        for mb in {mlo, dom["max_block_hi"] if mhi is None else mhi}:
            for P in {plo, phi if phi is not None else plo + 1000}:
                v, p = get("index_topk", (target, TOPK, mb, P))
                single_ok = not want["single_tile"] or \
                    mb <= want["topk_chunks"] * want["topk_tile"]
                assert single_ok and p == want, (mb, P, p, want)
                checked += 1
    for (K, N, lo, hi), want in router.items():
        splitk = want.get("kernel") == "splitk"
        keys = SPLITK_PARAM_ORDER if splitk else ("block_m", "block_k", "num_warps")
        for m in (lo, hi):
            v, p = get("router_gemm", (target, (K, N), m))
            assert v.startswith("router_gemm_splitk_") == splitk, (K, N, m, v, want)
            assert all(p[k] == want[k] for k in keys), (K, N, m, p, want)
            checked += 1
    return checked


ROUTER_MARKER = "\n\ndef _router(rows):"
DECODE_MARKER = "# Untuned rows use upstream's defaults (specs/defaults.py)."
SECTION_KEYS = {"router": "router_tables", "decode": "decode_tables"}


def _split_tuned(source: str) -> tuple:
    """(header with MEASURED, router tables, decode tables) of a tuned file's source."""
    r, d = source.index(ROUTER_MARKER), source.index(DECODE_MARKER)
    return source[:r], source[r:d], source[d:]


def splice_tables(new_source: str, old_source: str, keep: str) -> str:
    """new_source with the `keep` tables ("router" or "decode") of old_source.

    For a tune of the other section only: the kept tables stay as they were measured, and
    MEASURED gains `router_tables` / `decode_tables` saying which tune they come from."""
    head, router, decode = _split_tuned(new_source)
    _, old_router, old_decode = _split_tuned(old_source)
    if keep == "router":
        router = old_router
    elif keep == "decode":
        decode = old_decode
    else:
        raise ValueError(f"keep: 'router' or 'decode', got {keep!r}")
    meta = re.search(r"^MEASURED = dict\(\n(.*?)^\)", old_source, re.S | re.M).group(1)
    key = SECTION_KEYS[keep]
    kept = re.search(rf'^    {key}=(".*"),$', meta, re.M)
    if kept:
        origin = kept.group(1)
    else:
        date = re.search(r'^    date="(.*)",$', meta, re.M).group(1)
        command = re.search(r'^    command="(.*)",$', meta, re.M).group(1)
        origin = _lit(f"kept from the tune of {date} ({command})")
    head = head.replace("MEASURED = dict(\n", f"MEASURED = dict(\n    {key}={origin},\n", 1)
    return head + router + decode


def write_specs(tuner_or_meta, router, scorer, selector, out_dir, apply=True,
                keep_from: str | None = None, keep: str | None = None,
                specs_dir: str = SPECS_DIR) -> dict:
    """Render the tuned file into out_dir (and specs_dir with apply); keep_from/keep: the
    source whose `keep` tables ("router" | "decode") replace the rendered ones (a one-section
    tune). For a new target out_dir also gets the tuned.py that lists it (copy both into
    specs/), and apply writes it into specs_dir."""
    dom = load_domains()
    meta = tuner_or_meta
    name = meta["target"].name
    source = render_tuned(meta, router, scorer, selector, dom)
    if keep is not None:
        source = splice_tables(source, keep_from, keep)
    result = {"domains": dom.get("source"), "target": name}
    new_target = name not in measured_targets(specs_dir)
    # read the current list before anything is (re)written
    listing_source = render_tuned_list(targets_with(name, specs_dir))
    if out_dir:
        copy = os.path.join(out_dir, f"tuned_{name}.py")
        with open(copy, "w", encoding="utf-8") as f:
            f.write(source)
        result["copy"] = copy
        if new_target:
            with open(os.path.join(out_dir, "tuned.py"), "w", encoding="utf-8") as f:
                f.write(listing_source)
            result["list_copy"] = os.path.join(out_dir, "tuned.py")
    try:
        reg = check_spec_source(source, name)
        result["checked_lookups"] = verify_lookups(reg, router, scorer, selector, dom, name)
        result["verified"] = True
    except ImportError as e:
        result["verified"] = None
        result["verify_error"] = f"codegen not importable here ({e}); check it on the CPU " \
                                 f"machine with `tools/tune.py --check-file`"
    except Exception as e:  # noqa: BLE001
        result["verified"] = False
        result["verify_error"] = f"{type(e).__name__}: {e}"[:1000]
    if apply and result["verified"] is not False:
        with open(spec_file(name, specs_dir), "w", encoding="utf-8") as f:
            f.write(source)
        result["written"] = spec_file(name, specs_dir)
        if new_target:  # list it in specs/tuned.py
            listing = os.path.join(specs_dir, "tuned.py")
            with open(listing, "w", encoding="utf-8") as f:
                f.write(listing_source)
            result["listed"] = listing
    return result


# ---------------------------------------------------------------------------------------------
# self-test (CPU)


def fake_measurements(seed: int, shapes, tf32x3=True, pdl=True):
    """Random choices among the candidates a target with these capabilities is offered."""
    rnd = random.Random(seed)
    router = {}
    for K, N in shapes:
        for lo, hi in ROUTER_BUCKETS:
            if rnd.random() < 0.15:
                continue  # unmeasured: default row
            sk = splitk_candidates(K, N, lo, hi, False, 132, tf32x3)
            if sk and rnd.random() < 0.5:
                router[(K, N, lo, hi)] = dict(kernel="splitk", **rnd.choice(sk), worst=1.0,
                                              times={"M8 bf16": rnd.uniform(2, 9)})
                continue
            bm, bk, nw = rnd.choice(router_candidates(K, lo, hi))
            router[(K, N, lo, hi)] = dict(block_m=bm, block_k=bk, num_warps=nw, worst=1.0,
                                          times={"M1 bf16": rnd.uniform(2, 9)})
    scorer = {}
    for q, qb in Q_BUCKETS.items():
        for mbb in SCORE_MB_BUCKETS:
            for rb in R_BUCKETS:
                if rnd.random() < 0.1 or not R_REPS[rb]:
                    continue
                R = R_REPS[rb][0]
                variant, params = rnd.choice(scorer_candidates(R, SCORE_MB_REP[mbb], 132))
                scorer[(qb, mbb, rb)] = dict(variant=variant, params=params,
                                             times={f"R{R}": rnd.uniform(3, 500)})
    selector = {}
    for tb in TOPK_MB_BUCKETS:
        for pb in P_BUCKETS:
            if rnd.random() < 0.1:
                continue
            cands = [c for c in selector_candidates(TOPK_MB_REP[tb], tb[1], pdl=pdl)
                     if not c["single_tile"] or (tb[1] is not None and
                                                 tb[1] <= c["topk_chunks"] * c["topk_tile"])]
            selector[(tb, pb)] = dict(params=rnd.choice(cands),
                                      times={"R1Q1": rnd.uniform(3, 50)})
    return router, scorer, selector


def dry_run(tmpdir: str) -> list:
    """Run the whole Tuner on the CPU with fake kernels and a fake clock whose optimum is known,
    then check that the tuner picks exactly that optimum and writes a table that loads.
    Exercises the loops, the correctness guard, the bucket bookkeeping and the writer; says
    nothing about GPU behaviour. Returns a list of problems."""
    import math

    import torch

    g = globals()
    saved = {k: g[k] for k in ("_router_launcher", "_router_splitk_launcher",
                               "_router_counter_clear", "_decoder", "_decode_inputs",
                               "_router_shapes")}
    last = {}

    def fake_router_launcher():
        def launch(x, w, logits, *, block_m, block_k, num_warps, num_stages):
            last.clear()
            last.update(kind="router", block_m=block_m, block_k=block_k, num_warps=num_warps)
            logits.copy_(x.float() @ w.t())
        return launch

    def fake_splitk_time(p, M, N):
        """Fake split-K clock: optimum grid 128, 4 warps, 2 stages, block_k 128, block_n 16;
        slower than the per-expert optimum for M ≤ 4 only."""
        grid = common.cdiv(N, p["block_n"]) * p["split_k"]
        t = 0.5 + 0.1 * abs(math.log2(grid) - 7) + 0.05 * (p["num_warps"] != 4)
        t += 0.05 * (p["num_stages"] != 2) + 0.02 * abs(math.log2(p["block_k"]) - 7)
        t += 0.01 * (p["block_n"] != 16) + 0.03 * (not p["tf32x3"])
        return t + (5 if M <= 4 else 0)

    def fake_splitk_launcher():
        def launch(x, w, logits, **params):
            last.clear()
            last.update(kind="router_splitk", params=params, M=x.shape[0], N=w.shape[0])
            logits.copy_(x.float() @ w.t())
        return launch

    def fake_decoder():
        def dec(score_launch, topk_launch, idx_q, cache, bt, seq_lens, max_seq_len, topk,
                init, local, H, Q, Qmax, out, **kw):
            last.clear()
            last.update(kind="decode", score=dict(score_launch),
                        topk=None if topk_launch is None else dict(topk_launch),
                        R=int(seq_lens.shape[0]), mb=common.cdiv(max_seq_len, BLOCK))
            total_q = idx_q.shape[0]
            res = out[:, :total_q]
            res.copy_(torch.arange(topk, dtype=torch.int32).expand_as(res))
            # a "broken" configuration: must be rejected by the correctness guard
            if score_launch.get("kv_chunks") == 16 and score_launch.get("num_stages") == 2:
                res[0, 0, 0] = 99
            kw["sparse_block_table_out"].fill_(3)
            kw["sparse_context_lens_out"].fill_(5)
            return res
        return dec

    def fake_inputs(torch_, R, Q, ctx, device, seed=0):
        total_q = R * Q
        return {"R": R, "Q": Q, "ctx": ctx,
                "idx_q": torch.zeros((total_q, 1, 8)), "cache": torch.zeros((1, BLOCK, 8)),
                "block_table": torch.zeros((R, 1), dtype=torch.int32),
                "seq_lens": torch.full((R,), ctx, dtype=torch.int32),
                "attn_table": torch.zeros((R, 1), dtype=torch.int32),
                "out": torch.full((1, total_q, TOPK), -7, dtype=torch.int32),
                "table": torch.full((total_q, TOPK * 8), -7, dtype=torch.int32),
                "ctx_out": torch.full((total_q,), -7, dtype=torch.int32),
                "counter": torch.zeros((1, total_q), dtype=torch.int32)}

    def clock(fn):
        fn()
        c = dict(last)
        if c["kind"] == "router_splitk":
            t = fake_splitk_time(c["params"], c["M"], c["N"])
        elif c["kind"] == "router":  # optimum: block_k 1024, num_warps 4, block_m 4
            t = 1 + abs(math.log2(c["block_k"]) - 10) + 0.5 * abs(math.log2(c["num_warps"]) - 2)
            t += 0.3 * abs(math.log2(c["block_m"]) - 2)
        else:
            sc, tk = c["score"], c["topk"]
            if sc["variant"] == FUSED:  # optimum for R ≤ 2: 32 chunks, 8 warps (no selector)
                assert tk is None, "the fused launch takes no selector"
                t = (3 if c["R"] <= 2 else 30) + abs(math.log2(sc["kv_chunks"]) - 5)
                t += 0.1 * (sc["num_warps"] != 8)
                return {"median_us": t, "p10_us": t, "p90_us": t, "n": 1, "graph": False}
            if sc["variant"] == "index_score_balanced":  # optimum for R ≤ 4: budget 264
                t = 10 + abs(sc["program_budget"] - 264) / 100 - (5 if c["R"] <= 4 else -5)
            else:  # optimum: 32 chunks, 8 warps, 3 stages
                t = 10 + abs(math.log2(sc["kv_chunks"]) - 5)
            t += 0.1 * (sc["num_warps"] != 8) + 0.1 * (sc["num_stages"] != 3)
            # selector optimum: tile 128, 4 warps, single tile when offered, adaptive merge
            t += 0.05 * (tk["topk_tile"] != 128) + 0.05 * (tk["num_warps"] != 4)
            t += 0.02 * (not tk["single_tile"]) + 0.01 * (not tk["adaptive_merge"])
            t += 0.03 * abs(math.log2(tk["topk_chunks"]) - 1)
        return {"median_us": t, "p10_us": t, "p90_us": t, "n": 1, "graph": False}

    problems = []
    try:
        g.update(_router_launcher=fake_router_launcher,
                 _router_splitk_launcher=fake_splitk_launcher,
                 _router_counter_clear=lambda device: True, _decoder=fake_decoder,
                 _decode_inputs=fake_inputs, _router_shapes=_router_shapes)
        args = parse_args(["--out", tmpdir, "--jobs", "0", "--reps", "2"])
        tuner = Tuner(args, _measured_hardware("sm_90"), device="cpu", timer=clock)
        groups = tuner.warm_groups(["router", "scorer", "selector"])
        n_tasks = sum(len(x) for x in groups)
        tuner.tune_router()
        tuner.tune_decode(True, True)
        for (K, N, lo, hi), v in tuner.router_best.items():
            if hi <= 4:  # per-expert optimum (block_m 4 where the bucket allows it)
                want = (min(4, hi), 1024 if K % 1024 == 0 else None, 4)
                if v.get("kernel") == "splitk" or \
                        (v["block_m"], v["block_k"], v["num_warps"]) != want:
                    problems.append(f"router {K}x{N} {lo}-{hi}: picked {v}, want {want}")
            else:  # split-K wins: the candidate with the smallest fake time
                best = min(fake_splitk_time(p, hi, N)
                           for p in splitk_candidates(K, N, lo, hi, False, 132, True))
                got = {k: v.get(k) for k in SPLITK_PARAM_ORDER}
                if v.get("kernel") != "splitk" or fake_splitk_time(got, hi, N) != best:
                    problems.append(f"router {K}x{N} {lo}-{hi}: picked {v}, want split-K "
                                    f"at fake time {best:.3f}")
        if len(tuner.router_best) != len(_router_shapes()) * len(ROUTER_BUCKETS):
            problems.append(f"router: {len(tuner.router_best)} buckets chosen")
        for (qb, mbb, rb), v in tuner.scorer_best.items():
            p = v["params"]
            if rb == (1, 2) and fused_tile(mbb[1]) is not None:
                ok = (v["variant"] == FUSED and p["kv_chunks"] == 32 and p["num_warps"] == 8
                      and p["topk_tile"] == fused_tile(mbb[1]))
            else:
                if rb[1] is not None and rb[1] <= 4:
                    ok = v["variant"] == "index_score_balanced" and p["program_budget"] == 264
                else:
                    ok = v["variant"] == "index_score_split" and p["kv_chunks"] == min(
                        32, max(8, SCORE_MB_REP[mbb]))
                ok = ok and p["num_warps"] == 8 and p["num_stages"] == 3
            if not ok:
                problems.append(f"scorer {qb} {mbb} {rb}: picked {v}")
        want_sc = len(Q_BUCKETS) * len(SCORE_MB_BUCKETS) * sum(1 for r in R_BUCKETS if R_REPS[r])
        if len(tuner.scorer_best) != want_sc:
            problems.append(f"scorer: {len(tuner.scorer_best)} buckets chosen, want {want_sc}")
        for (tb, pb), v in tuner.selector_best.items():
            p = v["params"]
            if p["topk_tile"] != 128 or p["num_warps"] != 4:
                problems.append(f"selector {tb} {pb}: picked {p}")
            if p["single_tile"] and (tb[1] is None or tb[1] > p["topk_chunks"] * p["topk_tile"]):
                problems.append(f"selector {tb} {pb}: unsafe single_tile {p}")
        if len(tuner.selector_best) != len(TOPK_MB_BUCKETS) * len(P_BUCKETS):
            problems.append(f"selector: {len(tuner.selector_best)} buckets chosen")
        rejected = [r for r in tuner.log["scorer"] if "rejected" in r]
        if not rejected or any(r.get("kv_chunks") != 16 or r.get("num_stages") != 2
                               for r in rejected):
            problems.append(f"correctness guard: {len(rejected)} rejections (want exactly the "
                            f"kv_chunks=16/num_stages=2 candidates)")
        tuner.save(final=True)
        meta = {"date": "dry", "device": "dry", "torch": "0", "triton": "0", "command": "dry",
                "target": tuner.target}
        res = write_specs(meta, tuner.router_best, tuner.scorer_best, tuner.selector_best,
                          tmpdir, apply=False)
        if res.get("verified") is not True:
            problems.append(f"written table does not load: {res}")
        with open(os.path.join(tmpdir, "tuned_sm_90.py"), encoding="utf-8") as f:
            n_fused = f.read().count(f'variant="{FUSED}"')
        if n_fused != len(Q_BUCKETS) * sum(fused_tile(m[1]) is not None
                                           for m in SCORE_MB_BUCKETS):
            problems.append(f"written table has {n_fused} fused rules")
        common.say(f"  dry run: {n_tasks} warm-up launches in {len(groups)} groups; timed "
                   f"{len(tuner.log['router'])} router, {len(tuner.log['scorer'])} scorer, "
                   f"{len(tuner.log['selector'])} selector candidates; "
                   f"{res.get('checked_lookups')} lookups verified")
    finally:
        g.update(saved)
    return problems


def _measured_hardware(name: str):
    """The Hardware spec of measured target ``name`` (from its specs/tuned_<name>.py)."""
    import importlib

    return importlib.import_module("specs.tuned").TUNED[name].HARDWARE


def new_targets_selftest(meta: dict, dom: dict, shapes) -> int:
    """A target measured for the first time: its file and the list entry load through the
    registry (NVIDIA Blackwell-like and AMD), an AMD table never holds tf32x3 or pdl (and one
    that does is refused), and a hand-written target cannot be tuned."""
    from codegen.families.index_decode import supports_pdl
    from codegen.families.router_gemm import supports_tf32x3
    from codegen.model import Hardware

    failures = 0
    for hw in (Hardware(name="sm_100", vendor="nvidia", capability=(10, 0), aliases=("b200",),
                        description="NVIDIA B200 (selftest)"),
               Hardware(name="gfx942", vendor="amd", gcn_arch="gfx942", aliases=("mi300x",),
                        description="AMD MI300X (selftest)")):
        tables = fake_measurements(7, shapes, supports_tf32x3(hw), supports_pdl(hw))
        source = render_tuned(dict(meta, target=hw), *tables, dom)
        try:
            reg = check_spec_source(source, hw.name)
            n = verify_lookups(reg, *tables, dom, hw.name)
            amd_clean = hw.vendor != "amd" or ("tf32x3=True" not in source
                                               and "pdl=True" not in source)
            from codegen.render import render_all

            runtime = next(text for path, text in render_all(reg).items()
                           if path.endswith("_runtime.py"))
            detected = f'"{hw.name}": ' in runtime
            ok = hw.name in reg.hardware and amd_clean and detected
            common.say(f"  {'ok  ' if ok else 'FAIL'} new target {hw.name}: loads next to "
                       f"{', '.join(n for n in reg.hardware if n != hw.name)}, {n} lookups "
                       f"match, tf32x3/pdl only where supported: {amd_clean}, in the generated "
                       f"runtime's targets: {detected}")
            failures += not ok
        except Exception as e:  # noqa: BLE001
            failures += 1
            common.say(f"  FAIL new target {hw.name}: {type(e).__name__}: {e}")
            traceback.print_exc()
        if hw.vendor == "amd":  # the loader refuses what the tuner never offers there
            nvidia_like = fake_measurements(7, shapes)
            bad = render_tuned(dict(meta, target=hw), *nvidia_like, dom)
            try:
                check_spec_source(bad, hw.name)
                failures += 1
                common.say(f"  FAIL {hw.name} table with tf32x3/pdl rows was accepted")
            except Exception as e:  # noqa: BLE001
                common.say(f"  ok   {hw.name} table with tf32x3/pdl rows is refused "
                           f"({type(e).__name__})")
    with open(TUNED_LIST, encoding="utf-8") as f:
        ok = f.read() == render_tuned_list(measured_targets())
    failures += not ok
    common.say(f"  {'ok  ' if ok else 'FAIL'} specs/tuned.py is what the tuner writes")
    # the real writer, for a new target, into a copy of specs/: file + list entry, then load
    from codegen import registry

    hw = Hardware(name="sm_100", vendor="nvidia", capability=(10, 0), aliases=("b200",),
                  description="NVIDIA B200 (selftest)")
    tmp = tempfile.mkdtemp(prefix="tune_new_target_")
    try:
        specs_copy, out = os.path.join(tmp, "specs"), os.path.join(tmp, "out")
        shutil.copytree(SPECS_DIR, specs_copy, ignore=shutil.ignore_patterns("__pycache__"))
        os.makedirs(out)
        res = write_specs(dict(meta, target=hw), *fake_measurements(3, shapes), out,
                          apply=True, specs_dir=specs_copy)
        listed = measured_targets(specs_copy)
        with open(os.path.join(out, "tuned.py"), encoding="utf-8") as f:
            same_list = f.read() == render_tuned_list(listed)
        reg = registry.load(specs_copy)
        ok = (res.get("verified") is True and "sm_100" in listed and "sm_90" in listed
              and same_list and "sm_100" in reg.hardware
              and os.path.exists(os.path.join(specs_copy, "tuned_sm_100.py")))
        common.say(f"  {'ok  ' if ok else 'FAIL'} write_specs(apply=True) of a new target: "
                   f"file, list {listed} (DIR copy too), loads with "
                   f"{', '.join(reg.hardware)}")
    except Exception as e:  # noqa: BLE001
        ok = False
        common.say(f"  FAIL write_specs of a new target: {type(e).__name__}: {e}")
        traceback.print_exc()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    failures += not ok
    # which target a device tunes (fake device properties)
    for name, cap, arch, want in (("NVIDIA H200", (9, 0), None, ("sm_90", True, None)),
                                  ("NVIDIA B200", (10, 0), None,
                                   ("sm_100", False, ("sm100", "b200"))),
                                  ("AMD Instinct MI300X", None, "gfx942:sramecc+:xnack-",
                                   ("gfx942", False, ("mi300x",))),
                                  ("AMD Instinct MI355X", None, "gfx950", "refused")):
        fake = _fake_torch(name, cap, arch)
        try:
            hw, declared = tunable_target(fake, 0)
            got = (hw.name, declared, None if declared else tuple(hw.aliases))
        except SystemExit:
            got = "refused"
        failures += got != want
        common.say(f"  {'ok  ' if got == want else 'FAIL'} a {name} tunes {got}")
    return failures


def _fake_torch(name, capability, gcn_arch):
    """Just enough of torch for device_target: one device with these properties."""
    from types import SimpleNamespace

    major, minor = capability or (9, 4)
    props = SimpleNamespace(name=name, major=major, minor=minor, gcnArchName=gcn_arch or "")
    return SimpleNamespace(version=SimpleNamespace(hip="6.0" if gcn_arch else None),
                           cuda=SimpleNamespace(get_device_properties=lambda device: props))


def selftest() -> int:
    common.setup(False)
    meta = {"date": "2000-01-01 00:00:00 UTC", "device": "FAKE (selftest)", "torch": "0",
            "triton": "0", "command": "tools/tune.py --selftest",
            "target": _measured_hardware("sm_90")}
    dom = load_domains()
    common.say(f"selftest: axis domains from {dom['source']}")
    shapes = _router_shapes_static(dom)
    failures = 0
    cases = [("all defaults", ({}, {}, {}))]
    for seed in range(4):
        cases.append((f"fake measurements seed {seed}", fake_measurements(seed, shapes)))
    # a case that alternates split/balanced across request buckets (rule splitting)
    r, s, t = fake_measurements(99, shapes)
    for i, rb in enumerate(R_BUCKETS):
        for qb in Q_BUCKETS.values():
            for mbb in SCORE_MB_BUCKETS:
                if not R_REPS[rb]:
                    continue
                R = R_REPS[rb][0]
                cands = scorer_candidates(R, SCORE_MB_REP[mbb], 132)
                want = "index_score_balanced" if i % 2 == 0 and R <= 16 else "index_score_split"
                pick = [c for c in cands if c[0] == want][-1]
                s[(qb, mbb, rb)] = dict(variant=pick[0], params=pick[1])
    cases.append(("alternating scorer variants", (r, s, t)))
    # the single-launch variant wherever it may go, between split/balanced rows
    r, s, t = fake_measurements(98, shapes)
    for i, rb in enumerate(R_BUCKETS):
        for qb in Q_BUCKETS.values():
            for mbb in SCORE_MB_BUCKETS:
                if not R_REPS[rb]:
                    continue
                cands = scorer_candidates(R_REPS[rb][0], SCORE_MB_REP[mbb], 132)
                fused = [c for c in cands if c[0] == FUSED]
                pick = fused[i % len(fused)] if fused and i % 3 != 1 else cands[i % len(cands)]
                s[(qb, mbb, rb)] = dict(variant=pick[0], params=pick[1])
    cases.append(("fused scorer where feasible", (r, s, t)))
    tmpdir = tempfile.mkdtemp(prefix="tune_selftest_")
    try:
        for name, (router, scorer, selector) in cases:
            source = render_tuned(meta, router, scorer, selector, dom)
            path = os.path.join(tmpdir, "tuned_sm_90.py")
            with open(path, "w", encoding="utf-8") as f:
                f.write(source)
            try:
                reg = check_spec_source(source, "sm_90")
                n = verify_lookups(reg, router, scorer, selector, dom, "sm_90")
                extra = ""
                try:
                    from codegen.render import render_all

                    files = render_all(reg)
                    extra = f", renders {len(files)} generated files"
                except Exception as e:  # noqa: BLE001
                    extra = f", render_all failed: {type(e).__name__}: {e}"[:200]
                common.say(f"  ok   {name}: loads, {n} lookups match{extra}")
            except Exception as e:  # noqa: BLE001
                failures += 1
                common.say(f"  FAIL {name}: {type(e).__name__}: {e}")
                traceback.print_exc()
                print(source)
        # a broken table must be refused by the loader (the check is not vacuous)
        good = render_tuned(meta, {}, {}, {}, dom)
        # drop the first router 5–8 token bucket: a gap the loader must refuse
        start = good.index("\n        (5, 8, ") + 1
        bad = good[:start] + good[good.index("\n", start) + 1:]
        assert bad != good, "selftest: gap injection did not apply"
        try:
            check_spec_source(bad, "sm_90")
            failures += 1
            common.say("  FAIL a table with a gap was accepted")
        except Exception as e:  # noqa: BLE001
            common.say(f"  ok   a table with a gap is refused ({type(e).__name__})")
        # the whole tuner with fake kernels and a fake clock
        t = time.time()
        problems = dry_run(tmpdir)
        failures += bool(problems)
        for pr in problems[:20]:
            common.say(f"  FAIL dry run: {pr}")
        common.say(f"  {'ok  ' if not problems else 'FAIL'} dry run of the tuner "
                   f"({time.time() - t:.1f}s)")
        # a one-section tune keeps the current file's other tables verbatim, twice in a row,
        # and the two kinds of splice compose
        with open(spec_file("sm_90"), encoding="utf-8") as f:
            current = f.read()
        cur = _split_tuned(current)
        # the writer reproduces the current file's Hardware spec
        fresh_head = _split_tuned(render_tuned(meta, {}, {}, {}, dom))[0]
        hw_block = re.compile(r"^HARDWARE = .*?\)$", re.S | re.M)
        ok = hw_block.search(fresh_head).group(0) == hw_block.search(cur[0]).group(0)
        failures += not ok
        common.say(f"  {'ok  ' if ok else 'FAIL'} the rendered Hardware spec equals the current "
                   f"file's")
        failures += new_targets_selftest(meta, dom, shapes)
        router_only = render_tuned(meta, cases[1][1][0], {}, {}, dom)
        decode_only = render_tuned(meta, {}, *cases[1][1][1:], dom)
        for keep, fresh, part in (("decode", router_only, 2), ("router", decode_only, 1)):
            once = splice_tables(fresh, current, keep)
            twice = splice_tables(fresh, once, keep)
            both = splice_tables(splice_tables(fresh, current, keep), current,
                                 "router" if keep == "decode" else "decode")
            ok = (once == twice and _split_tuned(once)[part] == cur[part]
                  and once.count(f"{SECTION_KEYS[keep]}=") == 1
                  and _split_tuned(both)[1:] == cur[1:])
            try:
                check_spec_source(twice, "sm_90")
            except Exception as e:  # noqa: BLE001
                ok = False
                common.say(f"  FAIL spliced table refused: {type(e).__name__}: {e}")
            failures += not ok
            common.say(f"  {'ok  ' if ok else 'FAIL'} a tune without the {keep} sections keeps "
                       f"the {keep} tables")
        # write_specs(apply=False) end to end into a temp DIR
        res = write_specs(meta, *cases[1][1], tmpdir, apply=False)
        if res.get("verified") is not True:
            failures += 1
        common.say(f"  {'ok  ' if res.get('verified') else 'FAIL'} write_specs(apply=False): "
                   f"{ {k: v for k, v in res.items() if k != 'domains'} }")
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    common.say("selftest " + ("PASSED" if not failures else f"FAILED ({failures})"))
    return 1 if failures else 0


# ---------------------------------------------------------------------------------------------


def main(argv=None):
    args = parse_args(argv)
    if args.selftest:
        return selftest()
    if args.check_file:
        named = re.fullmatch(r"tuned_(\w+)\.py", os.path.basename(args.check_file))
        if not named:
            print(f"{args.check_file}: --check-file expects a file named tuned_<target>.py")
            return 1
        with open(args.check_file, encoding="utf-8") as f:
            source = f.read()
        inside = re.search(r'^HARDWARE = Hardware\(name="(\w+)"', source, re.M)
        if not inside or inside.group(1) != named.group(1):
            print(f"{args.check_file}: the file name says target {named.group(1)!r}, its "
                  f"HARDWARE spec says {inside.group(1) if inside else None!r}")
            return 1
        if named.group(1) not in measured_targets():
            print(f"{args.check_file}: {named.group(1)!r} is a new target: copy it into specs/ "
                  f"together with the tuned.py written next to it")
        try:
            reg = check_spec_source(source, named.group(1))
        except Exception as e:  # noqa: BLE001
            print(f"{args.check_file}: REFUSED: {type(e).__name__}: {e}")
            return 1
        rules = {k: len(v) for k, v in reg.tables.items()}
        print(f"{args.check_file}: loads; dispatch rows per policy: {rules}")
        return 0
    common.setup(False)
    import torch

    if not torch.cuda.is_available():
        sys.exit("tune.py: needs a CUDA device (use --selftest on a CPU machine)")
    os.makedirs(args.out, exist_ok=True)
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    target, declared = tunable_target(torch, torch.cuda.current_device())
    # A router-only tune keeps the decode tables of the current file, a scorer + selector tune
    # its router tables.
    keep = None
    if "scorer" not in sections and "selector" not in sections:
        keep = "decode"
    elif "router" not in sections:
        keep = "router"
    if keep and not os.path.exists(spec_file(target.name)):
        common.say(f"tune: {os.path.relpath(spec_file(target.name), ROOT)} does not exist yet "
                   f"(a new target): its {keep} tables start from the untuned defaults; tune "
                   f"them next with --sections "
                   f"{'scorer,selector' if keep == 'decode' else 'router'}")
        keep = None
    tuner = Tuner(args, target)
    env = tuner.log["env"]
    common.say(f"tune: {env.get('device')} ({tuner.sms} SMs) = target {target.name}"
               f"{'' if declared else ' (new)'}; torch {env['torch']} triton {env['triton']}; "
               f"{args.reps} replays per candidate; budget {args.budget_s:.0f}s; tf32x3 "
               f"{'yes' if tuner.tf32x3 else 'no'}, pdl {'yes' if tuner.pdl else 'no'}")
    tuner.warm(sections)
    # decode first: its targets are the tighter ones; the router uses what budget is left
    if "scorer" in sections or "selector" in sections:
        try:
            tuner.tune_decode("scorer" in sections, "selector" in sections)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            tuner.log["errors"].append(f"decode: {type(e).__name__}: {e}")
    if "router" in sections:
        try:
            tuner.tune_router()
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            tuner.log["errors"].append(f"router: {type(e).__name__}: {e}")
    tuner.log["chosen"] = {
        "router": [{"K": k[0], "N": k[1], "bucket": [k[2], k[3]], **v}
                   for k, v in sorted(tuner.router_best.items())],
        "scorer": [{"max_q": list(k[0]), "max_block": list(k[1]), "num_reqs": list(k[2]), **v}
                   for k, v in sorted(tuner.scorer_best.items(), key=lambda kv: str(kv[0]))],
        "selector": [{"max_block": list(k[0]), "rows_x_heads": list(k[1]), **v}
                     for k, v in sorted(tuner.selector_best.items(),
                                        key=lambda kv: str(kv[0]))],
    }
    meta = {"date": env["date"], "device": env.get("device"), "torch": env["torch"],
            "triton": env["triton"], "l2_flush": env.get("l2_flush"),
            "command": "python3 tools/tune.py " + " ".join(
                a for a in (argv if argv is not None else sys.argv[1:])),
            "target": target}
    # always leave the rendered table in DIR; --write-specs also replaces
    # specs/tuned_<target>.py (and lists a new target in specs/tuned.py)
    current = None
    if keep:
        with open(spec_file(target.name), encoding="utf-8") as f:
            current = f.read()
    res = write_specs(meta, tuner.router_best, tuner.scorer_best, tuner.selector_best,
                      args.out, apply=args.write_specs, keep_from=current, keep=keep)
    tuner.log["write"] = res
    tuner.save(final=True)
    print_summary(tuner, res, args)
    bad = res.get("verified") is False or tuner.log["errors"]
    return 2 if bad else 0


def print_summary(tuner, res, args):
    lines = ["", "tune summary"]
    for (K, N, lo, hi), v in sorted(tuner.router_best.items()):
        lines.append(f"  router ({K},{N}) M {lo}-{hi}: {_router_short(v)}  "
                     f"worst {v['worst']:.3f}x  {_times(v['times'])}")
    for k, v in sorted(tuner.scorer_best.items(), key=lambda kv: str(kv[0])):
        (qlo, qhi), (mlo, mhi), (rlo, rhi) = k
        lines.append(f"  scorer Qmax {qlo}{'+' if qhi is None else ''} mb {mlo}-{_hi(mhi)} "
                     f"R {rlo}-{_hi(rhi)}: {v['variant'].split('_')[-1]} {_short(v['params'])}"
                     f"  worst {v['worst']:.3f}x  {_times(v['times'])}")
    for k, v in sorted(tuner.selector_best.items(), key=lambda kv: str(kv[0])):
        (mlo, mhi), (plo, phi) = k
        p = v["params"]
        lines.append(f"  selector mb {mlo}-{_hi(mhi)} P {plo}-{_hi(phi)}: C{p['topk_chunks']} "
                     f"tile {p['topk_tile']} w{p['num_warps']} single {int(p['single_tile'])} "
                     f"adaptive {int(p['adaptive_merge'])}  worst {v['worst']:.3f}x")
    for s in tuner.log["skipped"][:10]:
        lines.append(f"  skipped: {s}")
    for e in tuner.log["errors"]:
        lines.append(f"  ERROR {e}")
    n_cand = len(tuner.log["router"]) + len(tuner.log["scorer"]) + len(tuner.log["selector"])
    lines.append(f"candidates timed/logged: {n_cand} -> {tuner.json_path}")
    lines.append(f"table: {res.get('copy')} verified={res.get('verified')}"
                 + (f" ({res.get('verify_error')})" if res.get("verify_error") else "")
                 + (f"; wrote {res['written']}" if res.get("written") else
                    ("; specs/ untouched (no --write-specs)" if not args.write_specs else
                     "; specs/ NOT written")))
    if res.get("list_copy"):
        lines.append(f"new target {res['target']}: {res['list_copy']} lists it"
                     + (f" (written to {res['listed']})" if res.get("listed") else "")
                     + f"; commit specs/tuned_{res['target']}.py and specs/tuned.py together")
    lines.append(f"tune wall {time.time() - tuner.t0:.0f} s")
    print("\n".join(lines), flush=True)


if __name__ == "__main__":
    sys.exit(main())
