#!/usr/bin/env python3
"""Launch-overhead and measurement-method study on the H200 (one device call, ~3 minutes).

    python3 tools/explore_launch.py [--out DIR]

1. How the L2 flush before each replay changes the numbers (tools/common.py FLUSH_MODES):
   empty kernel, two empty kernels in one graph (plain and with programmatic dependent launch),
   the copy bandwidth, the router GEMM and the decode targets.
2. Programmatic dependent launch (PDL) of the decode selector after the scorer: the decode
   target scenarios with the table's launches, with the two-kernel path, with pdl on; the
   results must be identical.
Prints one line per measurement and a table last.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import bench  # noqa: E402  (decode scenarios and inputs)


import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait  # noqa: E402


@triton.jit
def _first(ptr, TRIGGER: tl.constexpr):
    if TRIGGER:
        gdc_launch_dependents()


@triton.jit
def _second(ptr, WAIT: tl.constexpr):
    if WAIT:
        gdc_wait()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=None)
    p.add_argument("--reps", type=int, default=40)
    args = p.parse_args()
    common.setup(False)
    import torch
    import generated
    from generated import decode_indexer as di

    dummy = torch.zeros(16, dtype=torch.int32, device="cuda")
    rows = []

    def rec(name, mode, t):
        rows.append((name, mode, t["median_us"], t["p10_us"], t["p90_us"]))
        common.say(f"{name:48s} {mode:5s} {t['median_us']:9.2f} µs (p10 {t['p10_us']:.2f}, "
                   f"p90 {t['p90_us']:.2f})")

    one = lambda: _first[(1,)](dummy, TRIGGER=False, num_warps=1)  # noqa: E731

    def two():
        _first[(1,)](dummy, TRIGGER=False, num_warps=1)
        _second[(1,)](dummy, WAIT=False, num_warps=1)

    def two_pdl():
        _first[(1,)](dummy, TRIGGER=True, num_warps=1)
        _second[(1,)](dummy, WAIT=True, num_warps=1, launch_pdl=True)

    for mode in common.FLUSH_MODES:
        rec("empty kernel", mode, common.time_graph(one, reps=args.reps, flush_mode=mode))
        rec("two empty kernels", mode, common.time_graph(two, reps=args.reps, flush_mode=mode))
        rec("two empty kernels, 2nd PDL", mode,
            common.time_graph(two_pdl, reps=args.reps, flush_mode=mode))
    rec("empty kernel, no flush", "-", common.time_graph(one, reps=args.reps, flush=False))
    n = 1 << 28
    src = torch.randn(n, device="cuda")
    dst = torch.empty_like(src)
    for mode in common.FLUSH_MODES:
        t = common.time_graph(lambda: torch.mul(src, 1.0, out=dst), reps=10, flush_mode=mode)
        rec(f"copy 1 GiB ({2 * 4 * n / t['median_us'] / 1e6:.2f} TB/s)", mode, t)
    del src, dst

    # router GEMM, default dispatch
    g = torch.Generator(device="cuda").manual_seed(5)
    for K, N in ((6144, 128), (6144, 256)):
        w = torch.randn((N, K), generator=g, device="cuda") * K ** -0.5
        for m in (1, 8, 32):
            x = torch.randn((m, K), generator=g, device="cuda").to(torch.bfloat16)
            for mode in common.FLUSH_MODES:
                rec(f"router ({K},{N}) M{m} bf16", mode,
                    common.time_graph(lambda: generated.router_gemm(x, w), reps=args.reps,
                                      flush_mode=mode))

    # decode targets: table launch, two-kernel without / with pdl
    for key in bench.DECODE_TARGETS:
        sc = bench.Scenario(*key[:3], mixed=key[3])
        inp = bench.make_decode_inputs(sc, "cuda")
        dkey = ("bf16", "bf16", 128, sc.R, sc.max_block, 1, sc.Q)
        score, sel = di._plan("sm_90", dkey, bench.TOPK, sc.total_q)
        if sel is None:  # fused row: its two-kernel equivalent
            score, sel = di._plan("sm_90", dkey, bench.TOPK, sc.total_q,
                                  topk_launch=dict(di._topk_row("sm_90", bench.TOPK,
                                                                sc.max_block,
                                                                sc.total_q).params))
        outs = {}

        def call(score_launch, topk_launch):
            def fn():
                return generated.index_decode_with_launch(
                    score_launch, topk_launch, inp["idx_q"], inp["cache"], inp["block_table"],
                    inp["seq_lens"], sc.max_seq_len, bench.TOPK, bench.INIT_BLOCKS,
                    bench.LOCAL_BLOCKS, 1, sc.Q, sc.Q, inp["out"],
                    attention_block_table=inp["attn_table"],
                    sparse_block_table_out=inp["table"], sparse_context_lens_out=inp["ctx_out"],
                    block_page_stride=8, completion_counter=inp["counter"], hardware="sm_90")
            return fn

        variants = {"table": bench.ours_fn(generated, sc, inp, "sm_90"),
                    "two-kernel": call(score, {**sel, "pdl": False}),
                    "two-kernel pdl": call(score, {**sel, "pdl": True})}
        for vname, fn in variants.items():
            for k in ("out", "table", "ctx_out"):
                inp[k].fill_(-7)
            fn()
            torch.cuda.synchronize()
            outs[vname] = tuple(inp[k].clone() for k in ("out", "table", "ctx_out"))
            for mode in common.FLUSH_MODES:
                rec(f"decode {sc.name.strip()} {vname}", mode,
                    common.time_graph(fn, reps=args.reps, flush_mode=mode))
        ref = outs["table"]
        same = all(all(torch.equal(a, b) for a, b in zip(ref, o)) for o in outs.values())
        common.say(f"decode {sc.name.strip()}: outputs identical across variants: {same}")
        rows.append((f"decode {sc.name.strip()} identical", "-", float(same), 0.0, 0.0))
        del inp
        common.free_memory()

    print("\n==== explore_launch summary (median µs; flush write | read)")
    table = {}
    for name, mode, med, *_ in rows:
        table.setdefault(name, {})[mode] = med
    for name, d in table.items():
        print(f"{name:48s} " + " | ".join(f"{m} {d[m]:.2f}" for m in ("write", "read", "-")
                                          if m in d))
    if args.out:
        common.write_json(os.path.join(args.out, "explore_launch.json"),
                          {"env": common.env_info(), "rows": rows})


if __name__ == "__main__":
    main()
