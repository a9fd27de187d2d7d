#!/usr/bin/env python3
"""Benchmark of the generated kernels on the H200 (see tools/common.py for the timing method).

    python3 tools/bench.py --out DIR            # full grid (H200, well under 5 minutes)
    python3 tools/bench.py --out DIR --quick    # target rows, 3 fp8 rows, a router subset
    python3 tools/bench.py --out DIR --smoke    # CPU, TRITON_INTERPRET=1, tiny shapes: code paths

Writes DIR/bench.json (every number, each row's target verdicts: tools/targets.py),
DIR/bench.png (decode time vs context) and prints one progress line per scenario, then the
tables with PASS/FAIL per target (tools/bench_report.py; it also compares several runs).

Decode indexer: `generated.index_decode` end to end (scores + top-k selection + page-16 sparse
table), H = 1, head_dim 128, topk 16, init 0, local 1, Qmax = Q, bf16 query and index cache
(and, on a subset of the shapes, each other input kind of KINDS, each row paired with the bf16
row of its shape: time, bytes/s and the ratio to that bf16 row), under each
hardware target's tables (the device's own first, whose times the targets are judged on; then
the others, e.g. gfx950's tables on an H200: they are only other launch choices); plain torch
(page gather + fp32 q·Kᵀ + causal mask + block max + forcing + torch.topk; no sparse table);
and the bandwidth floor = bytes that must be read/written / copy bandwidth.
Router GEMM: `generated.router_gemm` (default dispatch) vs `F.linear(x.float(), w)`.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402  (tools/common.py)
import targets  # noqa: E402  (tools/targets.py)
from bench_report import loads_line, plot, print_tables  # noqa: E402

sys.path.insert(0, common.ROOT)
from specs.index_decode import CONSTANTS, MEASURED_SCORE, MEASURED_TOPK  # noqa: E402

# The decode shape the measured tables are tuned for, and the kernels' sparse block size
# (specs/index_decode.py; the tuner measures the same shape).
D = MEASURED_SCORE["head_dim"]
TOPK = MEASURED_TOPK
BLOCK = dict(CONSTANTS)["SPARSE_BLOCK_SIZE"]
INIT_BLOCKS = 0
LOCAL_BLOCKS = 1
SPARE_PAGES = 16
TORCH_MEMORY_LIMIT = 20e9

CONTEXTS = (8192, 32768, 131072)
# Input kinds other than bf16 (query dtype, index-cache dtype), timed on a subset of the bf16
# grid (KIND_REQUESTS × CONTEXTS × Q 1/4); --quick: the rows vLLM was measured on
# (tools/targets.py) plus one per context range of the fp8 limits
KINDS = {"bf16": ("bf16", "bf16"), "fp8kv": ("bf16", "fp8e4m3"),
         "fp8": ("fp8e4m3", "fp8e4m3"), "fp32": ("fp32", "fp32")}
KIND_REQUESTS = (1, 4, 16, 64)
KIND_QUICK = tuple(sorted(set(targets.VLLM_KIND_ROWS) | {(4, 32768, 4), (64, 131072, 4)}))


def router_token_counts(max_tokens: int, quick: bool = False) -> tuple:
    """M values timed per router shape: 1, then powers of two from 4 up to the generated
    kernels' MAX_TOKENS (the router family's token cap); --quick: 1, 8 and the cap."""
    if quick:
        return (1, 8, max_tokens)
    return (1,) + tuple(1 << k for k in range(2, max_tokens.bit_length()))

# dependent cold loads timed for the latency line (page id -> K tile is two)
LOAD_HOPS = (1, 2, 3)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="output directory (bench.json, bench.png)")
    p.add_argument("--quick", action="store_true", help="a few scenarios: fast sanity run")
    p.add_argument("--smoke", action="store_true",
                   help="CPU + TRITON_INTERPRET=1, tiny shapes, perf_counter timing")
    p.add_argument("--reps", type=int, default=None, help="timed replays per op (default 30)")
    p.add_argument("--skip-decode", action="store_true")
    p.add_argument("--skip-router", action="store_true")
    p.add_argument("--contexts", type=lambda t: [int(v) for v in t.split(",")], default=None,
                   help="decode rows of these contexts only (comma list of tokens, e.g. "
                        "131072: the rows a re-tune of the long-context tables moves)")
    return p.parse_args(argv)


# ---------------------------------------------------------------------------------------------
# decode scenarios


class Scenario:
    def __init__(self, R, ctx, Q, mixed=False, kind="bf16", seed=0):
        self.R, self.ctx, self.Q, self.mixed, self.kind = R, ctx, Q, mixed, kind
        self.q, self.cache = KINDS[kind]
        self.seed = seed
        self.max_seq_len = ctx  # graph capacity: mixed batches keep the full-context table width
        self.max_block = common.cdiv(ctx, BLOCK)
        if mixed:
            import torch

            g = torch.Generator().manual_seed(1234 + R * 7 + Q)
            self.seq_lens = [int(x) for x in torch.randint(max(ctx // 8, Q), ctx + 1, (R,),
                                                           generator=g)]
        else:
            self.seq_lens = [ctx] * R
        self.total_q = R * Q

    @property
    def key(self):
        return (self.R, self.ctx, self.Q, self.mixed, self.kind)

    @property
    def name(self):
        ctx = f"{self.ctx // 1024}k" if self.ctx >= 1024 else str(self.ctx)
        return (f"R{self.R:<3d}{ctx:>4s}{' mix' if self.mixed else '    '} Q{self.Q}"
                + ("" if self.kind == "bf16" else f" {self.kind}"))

    @property
    def judged_alone(self):
        """A target of its own (tools/targets.py), not only a ratio to another row."""
        return (self.kind == "bf16" and not self.mixed
                and targets.judged_alone(self.R, self.ctx, self.Q))

    def floor_bytes(self):
        """Bytes a perfect implementation moves: each needed index-K page read once, the
        queries, the table entries it follows, the outputs written once."""
        blocks = [common.cdiv(max(s, 0), BLOCK) for s in self.seq_lens]
        cache = sum(blocks) * BLOCK * D * common.torch_dtype(self.cache).itemsize
        small = (self.total_q * D * common.torch_dtype(self.q).itemsize  # idx_q
                 + sum(blocks) * 4 + self.R * 4  # block table entries + seq_lens
                 + self.total_q * TOPK * 4  # attention-table entries of the winners
                 + self.total_q * TOPK * 4  # topk_idx
                 + self.total_q * TOPK * 8 * 4 + self.total_q * 4)  # page-16 table + ctx
        return cache + small, cache

    def torch_bytes(self):
        """Peak memory estimate of the plain-torch reference (gathered bf16 + fp32 keys,
        fp32 scores and their masked copy)."""
        keys = self.R * self.max_block * BLOCK * D
        return keys * (2 + 4) + self.total_q * self.max_block * BLOCK * 4 * 3


def decode_scenarios(quick: bool, smoke: bool):
    """The bf16 rows, then the mixed lengths, then the other input kinds (after the bf16 rows
    their times are divided by)."""
    others = [k for k in KINDS if k != "bf16"]
    if smoke:
        return ([Scenario(1, 512, 1), Scenario(2, 640, 4, mixed=True)]
                + [Scenario(1, 512, 1, kind=k) for k in others])
    bf16 = [Scenario(R, ctx, Q) for R in (1, 4, 8, 11, 16, 32, 64) for ctx in CONTEXTS
            for Q in (1, 4)]
    if quick:
        return ([sc for sc in bf16 if sc.judged_alone or sc.key[:3] in KIND_QUICK]
                + [Scenario(*k, kind=kind) for kind in others for k in KIND_QUICK])
    mixed = [Scenario(R, 131072, Q, mixed=True) for R in (4, 16, 64) for Q in (4, 1)]
    rest = [Scenario(R, ctx, Q, kind=kind) for kind in others for R in KIND_REQUESTS
            for ctx in CONTEXTS for Q in (1, 4)]
    return bf16 + mixed + rest


def make_decode_inputs(sc: Scenario, device):
    """Each request gets its own random distinct index-K pages (one shuffled permutation of the
    whole pool), so consecutive blocks are not neighbours in memory; the attention table is an
    independent permutation."""
    import torch

    g = torch.Generator().manual_seed(sc.seed + 17 * sc.R + sc.Q)
    q_dtype, cache_dtype = common.torch_dtype(sc.q), common.torch_dtype(sc.cache)
    blocks = [common.cdiv(max(s, 0), BLOCK) for s in sc.seq_lens]
    num_pages = sum(blocks) + SPARE_PAGES
    perm = torch.randperm(num_pages, generator=g).to(torch.int32)
    bt = torch.empty((sc.R, sc.max_block), dtype=torch.int32)
    off = 0
    for r, b in enumerate(blocks):
        bt[r, :b] = perm[off:off + b]
        if b < sc.max_block:  # unused columns: valid spare pages (never read)
            spare = perm[num_pages - SPARE_PAGES:]
            bt[r, b:] = spare.repeat(common.cdiv(sc.max_block - b, SPARE_PAGES))[:sc.max_block - b]
        off += b
    attn = torch.randperm(sc.R * sc.max_block + SPARE_PAGES, generator=g)[:sc.R * sc.max_block]
    attn = attn.to(torch.int32).view(sc.R, sc.max_block)
    dg = torch.Generator(device=device).manual_seed(sc.seed + 1)
    inp = {
        # other kinds hold the bf16 row's values, rounded (fp8) or exactly (fp32)
        "idx_q": torch.randn((sc.total_q, 1, D), generator=dg, device=device,
                             dtype=torch.float32).to(torch.bfloat16).to(q_dtype),
        "cache": torch.randn((num_pages, BLOCK, D), generator=dg, device=device,
                             dtype=torch.bfloat16).to(cache_dtype),
        "block_table": bt.to(device),
        "seq_lens": torch.tensor(sc.seq_lens, dtype=torch.int32, device=device),
        "attn_table": attn.contiguous().to(device),
        "out": torch.full((1, sc.total_q, TOPK), -7, dtype=torch.int32, device=device),
        "table": torch.full((sc.total_q, TOPK * 8), -7, dtype=torch.int32, device=device),
        "ctx_out": torch.full((sc.total_q,), -7, dtype=torch.int32, device=device),
        "counter": torch.zeros((1, sc.total_q), dtype=torch.int32, device=device),
        "num_pages": num_pages,
    }
    return inp


def ours_fn(generated, sc: Scenario, inp, hardware):
    def fn():
        return generated.index_decode(
            inp["idx_q"], inp["cache"], inp["block_table"], inp["seq_lens"], sc.max_seq_len,
            TOPK, INIT_BLOCKS, LOCAL_BLOCKS, 1, sc.Q, sc.Q, inp["out"],
            attention_block_table=inp["attn_table"], sparse_block_table_out=inp["table"],
            sparse_context_lens_out=inp["ctx_out"], block_page_stride=8,
            completion_counter=inp["counter"], hardware=hardware)
    return fn


def torch_fn(sc: Scenario, inp):
    """Plain torch: gather the pages through the block table, fp32 q·Kᵀ, causal mask, per-block
    max, init/local forcing, torch.topk. Graph-capturable (no host syncs)."""
    import torch

    R, Q, MB = sc.R, sc.Q, sc.max_block
    dev = inp["idx_q"].device
    q_off = torch.arange(Q, device=dev)
    pos = torch.arange(MB * BLOCK, device=dev)
    blk = torch.arange(MB, device=dev)
    k = min(TOPK, MB)
    neg_inf = float("-inf")

    def fn():
        keys = inp["cache"][inp["block_table"][:, :MB].long()]  # [R, MB, 128, D] bf16
        keys = keys.view(R, MB * BLOCK, D).float()
        q = inp["idx_q"].view(R, Q, D).float()
        s = torch.bmm(q, keys.transpose(1, 2))  # [R, Q, MB*128] fp32
        kv_len = (inp["seq_lens"].long()[:, None] - Q + q_off[None, :] + 1).clamp_min(0)
        s = s.masked_fill(pos[None, None, :] >= kv_len[:, :, None], neg_inf)
        b = s.view(R, Q, MB, BLOCK).amax(dim=-1)  # [R, Q, MB]
        nb = (kv_len + BLOCK - 1) // BLOCK
        vis = blk[None, None, :] < nb[:, :, None]
        local = vis & (blk[None, None, :] >= (nb - LOCAL_BLOCKS).clamp_min(0)[:, :, None])
        init = vis & (blk[None, None, :] < INIT_BLOCKS)
        b = torch.where(init, torch.full_like(b, 1e30), b)
        b = torch.where(local, torch.full_like(b, 1e29), b)
        b = b.masked_fill(~vis, neg_inf)
        vals, idx = torch.topk(b, k, dim=-1)
        idx = torch.where(vals == neg_inf, torch.full_like(idx, -1), idx)
        return idx.view(1, R * Q, k).to(torch.int32)
    return fn


def check_and_time(fn, smoke, reps, keep=None, snapshot=None):
    """One eager call (its result kept in ``keep['out']``, ``snapshot()`` in ``keep['snap']``),
    then the timing. Smoke runs (the interpreter is slow) time that single call with
    perf_counter instead."""
    fn = common.Checked(fn)
    out = fn()
    res = dict(common.summarize([fn.last_us]), graph=False) if smoke else None
    if keep is not None:
        keep["out"] = out.clone() if hasattr(out, "clone") else out
        if snapshot is not None:
            keep["snap"] = snapshot()
    del out
    if res is None:
        res = common.time_graph(fn, reps=reps)
    return res


def row_sets(t):
    """Per row: sorted tuple of selected ids (−1 dropped)."""
    rows = t[0].cpu().tolist()
    return [tuple(sorted(x for x in row if x >= 0)) for row in rows]


def decode_policies(target: str, smoke: bool = False) -> tuple:
    """The detected target's tables first, then every other hardware target's (they run here
    too: they are just other launch choices). Smoke runs take the measured sm_90 tables as the
    other one: gfx950's balanced scorer is a 1024-program grid, ~20 s a row on the
    interpreter (the kernel tests run its launches)."""
    from generated import _runtime

    others = ("sm_90",) if smoke else _runtime.HARDWARE
    return (target,) + tuple(hw for hw in others if hw != target)


def run_decode(args, generated, device, bw, reps, hw_detected):
    import torch

    results, by_key = [], {}
    scenarios = decode_scenarios(args.quick, args.smoke)
    if args.contexts:
        known = sorted({sc.ctx for sc in scenarios})
        scenarios = [sc for sc in scenarios if sc.ctx in args.contexts]
        if not scenarios:
            sys.exit(f"bench.py: no decode rows of contexts {args.contexts} (the rows have "
                     f"{known})")
    all_policies = decode_policies(hw_detected, args.smoke)
    common.say(f"== decode indexer: {len(scenarios)} scenarios × {len(all_policies)} policies "
               f"({', '.join(all_policies)}; kinds other than bf16: {hw_detected} only) + torch")
    for i, sc in enumerate(scenarios):
        t0 = time.time()
        # other kinds are judged against their bf16 row on the device's own tables; the other
        # hardware's tables are only other launch choices, which the bf16 rows already time
        policies = all_policies if sc.kind == "bf16" else (hw_detected,)
        row = {"name": sc.name.strip(), "R": sc.R, "ctx": sc.ctx, "Q": sc.Q, "mixed": sc.mixed,
               "kind": sc.kind, "q": sc.q, "cache": sc.cache, "max_block": sc.max_block,
               "total_q": sc.total_q,
               "seq_len_sum": sum(sc.seq_lens), "seq_len_max": max(sc.seq_lens),
               "ours": {}, "explain": {}}
        fb, cache_bytes = sc.floor_bytes()
        row["floor_bytes"], row["cache_bytes"] = fb, cache_bytes
        row["floor_us"] = fb / bw * 1e6
        inp = make_decode_inputs(sc, device)
        outs, fns, times = {}, {}, {}
        for hw in policies:
            try:
                row["explain"][hw] = dict(generated.explain_index_decode(
                    hw, sc.q, sc.cache, D, sc.R, sc.max_block, sc.total_q, 1, TOPK, sc.Q))
            except Exception as e:  # noqa: BLE001
                row["explain"][hw] = {"error": f"{type(e).__name__}: {e}"}
            fn = common.Checked(ours_fn(generated, sc, inp, hw))
            try:
                for key in ("out", "table", "ctx_out"):
                    inp[key].fill_(-7)
                # one eager call, its outputs kept (smoke runs: its time is the row's time)
                out = fn()
                times[hw] = {**common.summarize([fn.last_us]), "graph": False}
                outs[hw] = (out.clone(), inp["table"].clone(), inp["ctx_out"].clone())
                del out
                fns[hw] = fn
            except Exception as e:  # noqa: BLE001
                row["ours"][hw] = {"error": f"{type(e).__name__}: {e}"}
                common.say(f"   {hw}: ERROR {type(e).__name__}: {e}")
                if args.smoke:
                    traceback.print_exc()
        if fns and not args.smoke:  # every table's launch timed in the same rotating rounds
            try:
                times = common.time_graphs(fns, reps)
            except Exception as e:  # noqa: BLE001
                times = {}
                for hw in fns:
                    row["ours"][hw] = {"error": f"{type(e).__name__}: {e}"[:300]}
                common.say(f"   timing: ERROR {type(e).__name__}: {e}")
        for hw, t in times.items():
            t["tb_per_s"] = fb / (t["median_us"] * 1e-6) / 1e12
            t["x_floor"] = t["median_us"] / row["floor_us"]
            row["ours"][hw] = t
        # policies must agree exactly, top-k ids and page-16 table (same math, other launches)
        ref_hw = next(iter(outs), None)
        row["policies_agree"] = all(all(torch.equal(a, b) for a, b in zip(outs[ref_hw], o))
                                    for o in outs.values()) if outs else None
        # plain torch
        if sc.torch_bytes() > TORCH_MEMORY_LIMIT:
            row["torch"] = {"skipped": f"needs ~{sc.torch_bytes() / 1e9:.0f} GB"}
        else:
            tf = torch_fn(sc, inp)
            try:
                ref = {}
                row["torch"] = check_and_time(tf, args.smoke, reps, keep=ref)
                if outs:
                    got = row_sets(outs[ref_hw][0])
                    want = row_sets(ref["out"])
                    row["match_rows"] = sum(a == b for a, b in zip(got, want))
                    row["rows"] = len(want)
                del ref
            except Exception as e:  # noqa: BLE001
                row["torch"] = {"error": f"{type(e).__name__}: {e}"[:300]}
            del tf
        main = row["ours"].get(hw_detected) or {}
        if not args.smoke and sc.judged_alone and "median_us" in main:
            # the same call after the other L2 flush (common.FLUSH_MODES), for comparison,
            # timed the way the row's own time is (rounds)
            other = next(m for m in common.FLUSH_MODES if m != common.FLUSH_MODE)
            row["ours_other_flush"] = dict(common.time_graphs(
                {"ours": ours_fn(generated, sc, inp, hw_detected)}, reps,
                flush_mode=other)["ours"], flush=other)
        row["target_policy"] = hw_detected
        row["policies"] = list(policies)
        # another kind's time over the bf16 row of its shape (run earlier)
        bf16_us = targets.decode_time(by_key.get(sc.key[:4] + ("bf16",)) or {})
        if sc.kind != "bf16" and bf16_us and "median_us" in main:
            row["vs_bf16"] = main["median_us"] / bf16_us
        del inp, outs
        common.free_memory()
        results.append(row)
        by_key[sc.key] = row
        o = row["ours"]
        msg = " ".join(f"{hw}={common.fmt_us(o[hw].get('median_us'))}" for hw in policies
                       if hw in o)
        tt = row["torch"].get("median_us")
        common.say(f"[{i + 1}/{len(scenarios)}] {sc.name}: {msg} torch={common.fmt_us(tt)} "
                   f"floor={common.fmt_us(row['floor_us'])} µs"
                   + (f" match={row.get('match_rows')}/{row.get('rows')}" if 'rows' in row else "")
                   + ("" if row["policies_agree"] in (None, True) else " POLICIES DISAGREE")
                   + (f" TB/s={main['tb_per_s']:.2f}" if "tb_per_s" in main else "")
                   + (f" {sc.kind}/bf16={row['vs_bf16']:.2f}" if "vs_bf16" in row else "")
                   + f" ({time.time() - t0:.1f}s)")
    return results


# ---------------------------------------------------------------------------------------------
# router GEMM


def run_router(args, generated, device, bw, reps):
    import torch
    import torch.nn.functional as F
    from generated._runtime import DTYPE_KEYS

    shapes = sorted(generated.ROUTER_GEMM_SHAPES)
    ms = router_token_counts(generated.moe_router.MAX_TOKENS, args.quick)
    dtypes = (torch.bfloat16, torch.float32)
    if args.smoke:
        shapes, ms = [(4096, 8)], (1, 4)
    elif args.quick:
        shapes = [s for s in shapes if s in ((6144, 128), (3072, 256), (7168, 896))] or shapes[:2]
    common.say(f"== router GEMM: {len(shapes)} shapes × M {list(ms)} × x bf16/fp32")
    results = []
    dummy = torch.zeros(16, dtype=torch.int32, device=device)  # the empty kernel's argument
    g = torch.Generator(device=device).manual_seed(5)
    for K, N in shapes:
        w_dtype, cap = generated.ROUTER_GEMM_LIMITS[(K, N)]
        w = (torch.randn((N, K), generator=g, device=device, dtype=torch.float32)
             * K ** -0.5).to(w_dtype)
        # the weight read alone (no x, no products), best program layout, less an empty
        # kernel timed in the same rounds
        try:
            w_read_t = common.row_read_us(N, K, args.smoke,
                                          beside={"empty": lambda: common.launch_empty(dummy)})
            w_read = w_read_t["median_us"] - w_read_t["beside"]["empty"]["median_us"]
            common.say(f"   ({K},{N}) weight read alone: " + ", ".join(
                f"{s} piece(s)/row {common.fmt_us(t)}" for s, t in w_read_t["by_splits"].items())
                + " µs")
        except Exception as e:  # noqa: BLE001
            common.say(f"   ({K},{N}) weight read alone: ERROR {type(e).__name__}: {e}")
            w_read_t, w_read = {"splits": None}, None
        # a shape with a token cap below the family's: every M up to the cap
        shape_ms = [m for m in ms if m <= cap] if cap == generated.moe_router.MAX_TOKENS or \
            args.smoke else list(range(1, cap + 1))
        for m in shape_ms:
            for dt in dtypes:
                x = torch.randn((m, K), generator=g, device=device, dtype=torch.float32).to(dt)
                row = {"K": K, "N": N, "M": m,
                       "x_dtype": DTYPE_KEYS[dt]}
                nbytes = N * K * w.element_size() + m * K * x.element_size() + m * N * 4
                row["floor_bytes"] = nbytes
                row["floor_us"] = nbytes / bw * 1e6
                row["w_read_minus_empty_us"] = w_read
                row["w_read_splits"] = w_read_t["splits"]
                try:
                    info = generated.explain_router_gemm(K, N, m,
                                                         common.detected_hardware(args.smoke),
                                                         DTYPE_KEYS[dt])
                    row["launch"] = {k: info.get(k) for k in (
                        "kernel", "variant", "block_m", "block_e", "block_n", "block_k", "split_k",
                        "num_warps", "num_stages", "hardware") if k in info}
                except Exception as e:  # noqa: BLE001
                    row["launch"] = {"error": str(e)[:200]}
                fns = {"ours": common.Checked(lambda: generated.router_gemm(x, w)),
                       "linear": common.Checked(lambda: F.linear(x.float(), w.float())),
                       "empty": lambda: common.launch_empty(dummy)}
                try:
                    got, want = fns["ours"](), fns["linear"]()
                    row["rel_err"] = float((got - want).norm() / want.norm().clamp_min(1e-30))
                    row["max_abs_err"] = float((got - want).abs().max())
                    del got, want
                    # ours, F.linear and the empty kernel interleaved (rotating order)
                    times = common.time_graphs(fns, reps, smoke=args.smoke)
                    row["ours"], row["linear"] = times["ours"], times["linear"]
                    row["empty_us"] = times["empty"]["median_us"]
                    row["ours_minus_empty_us"] = row["ours"]["median_us"] - row["empty_us"]
                    if not args.smoke:  # the way vLLM's times were taken: replays in a row
                        row["ours_in_a_row"] = common.time_graph(fns["ours"], reps=reps)
                except Exception as e:  # noqa: BLE001
                    for name in ("ours", "linear"):
                        row.setdefault(name, {"error": f"{type(e).__name__}: {e}"[:300]})
                    common.say(f"   ERROR {type(e).__name__}: {e}")
                results.append(row)
                in_a_row = row.get("ours_in_a_row", {}).get("median_us")
                common.say(f"   ({K},{N}) M={m:<2d} {row['x_dtype']:8s} "
                           f"ours={common.fmt_us(row['ours'].get('median_us'))} "
                           f"(in a row {common.fmt_us(in_a_row)}) "
                           f"linear={common.fmt_us(row['linear'].get('median_us'))} "
                           f"floor={common.fmt_us(row['floor_us'])} µs")
        del w
        common.free_memory()
    return results


def main(argv=None):
    args = parse_args(argv)
    common.setup(args.smoke)
    os.makedirs(args.out, exist_ok=True)
    t_start = time.time()
    import torch

    if not args.smoke and not torch.cuda.is_available():
        sys.exit("bench.py: no CUDA device (use --smoke for a CPU run of the code paths)")
    device = torch.device("cpu") if args.smoke else torch.device("cuda")
    reps = args.reps or (2 if args.smoke else (25 if args.quick else 30))
    report = {"env": common.env_info(args.smoke), "mode": "smoke" if args.smoke else (
        "quick" if args.quick else "full"), "contexts": args.contexts, "reps": reps,
        "errors": [], "out": args.out}
    import generated

    report["hardware_detected"] = hw = common.detected_hardware(args.smoke)
    report["generated_verify"] = generated.verify() if hasattr(generated, "verify") else None
    if report["generated_verify"]:
        common.say(f"WARNING generated/ differs from its MANIFEST: {report['generated_verify']}")
    report["copy_bw"] = common.copy_bandwidth(args.smoke)
    report["empty_kernel"] = common.empty_kernel_us(args.smoke)
    try:
        report["dependent_loads"] = {str(h): common.dependent_loads_us(h, args.smoke)
                                     for h in LOAD_HOPS}
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        report["errors"].append(f"dependent loads: {type(e).__name__}: {e}")
    bw = report["copy_bw"]["bytes_per_s"]
    empty = report["empty_kernel"]["median_us"]
    common.say(f"env: {report['env'].get('device')} torch {report['env']['torch']} triton "
               f"{report['env']['triton']}; copy {bw / 1e12:.2f} TB/s; empty kernel "
               f"{common.fmt_us(empty)} µs; {loads_line(report)}; dispatch target {hw}")
    json_path = os.path.join(args.out, "bench.json")
    if not args.skip_router:
        try:
            report["router"] = run_router(args, generated, device, bw, reps)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            report["errors"].append(f"router: {type(e).__name__}: {e}")
        common.write_json(json_path, report)
    if not args.skip_decode:
        try:
            report["decode"] = run_decode(args, generated, device, bw, reps, hw)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            report["errors"].append(f"decode: {type(e).__name__}: {e}")
    if not args.smoke:  # interpreter timings judge nothing
        targets.attach(report)
    report["wall_s"] = time.time() - t_start
    png = os.path.join(args.out, "bench.png")
    try:
        report["plot"] = png if plot(report, png) else None
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        report["errors"].append(f"plot: {type(e).__name__}: {e}")
    common.write_json(json_path, report)
    print_tables(report)
    return 2 if report["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
