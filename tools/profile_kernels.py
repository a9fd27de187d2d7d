#!/usr/bin/env python3
"""Kernels to look at under Nsight Compute (ncu) on the H200: the router GEMM as the sm_90
table launches it at (6144, 128) for M = 1, 8, 32 (per-expert, per-expert, tf32x3 split-K),
the split-K kernel forced at M = 1 (to compare its main body with the per-expert kernel's),
and the two decode kernels at a small context (``--decode R:CONTEXT:Q,...`` picks other decode
scenarios, ``--no-router`` leaves the router out).

    ncu --clock-control none --section SpeedOfLight --section LaunchStats \\
        --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \\
        -k regex:'router_gemm|score_split|topk_fused' python3 tools/profile_kernels.py

Each kernel runs twice eagerly (the first call compiles); ncu serialises and times every
launch on its own, so look at the second of each pair.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import bench  # noqa: E402


def profile_router(torch, generated):
    from generated import moe_router as mr

    g = torch.Generator(device="cuda").manual_seed(1)
    K, N = 6144, 128
    w = torch.randn((N, K), generator=g, device="cuda") * K ** -0.5
    for M in (1, 8, 32):
        x = torch.randn((M, K), generator=g, device="cuda")
        print(f"router M{M}: {mr.explain_router_gemm(K, N, M, 'sm_90', 'fp32')}", flush=True)
        for _ in range(2):
            generated.router_gemm(x, w)
    row = mr.explain_router_gemm(K, N, 32, "sm_90", "fp32")
    if row["kernel"] == "splitk":  # the M = 32 row's split-K configuration, at M = 1
        x = torch.randn((1, K), generator=g, device="cuda")
        out = torch.empty((1, N), device="cuda")
        params = {k: row[k] for k in ("block_m", "block_n", "block_k", "split_k", "tf32x3",
                                      "num_warps", "num_stages")}
        for _ in range(2):
            mr.launch_router_gemm_splitk(x, w, out, **params)


def parse_scenarios(text: str) -> list:
    try:
        return [bench.Scenario(r, ctx, q) for r, ctx, q in common.int_groups(text)]
    except ValueError:
        raise SystemExit(f"--decode: items are R:CONTEXT:Q, got {text!r}") from None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--decode", default="1:8192:4",
                   help="decode scenarios R:CONTEXT:Q, comma separated (default 1:8192:4)")
    p.add_argument("--no-router", action="store_true", help="decode kernels only")
    args = p.parse_args(argv)
    scenarios = parse_scenarios(args.decode)
    common.setup(False)
    import torch

    import generated

    if not args.no_router:
        profile_router(torch, generated)
    for sc in scenarios:
        inp = bench.make_decode_inputs(sc, "cuda")
        fn = bench.ours_fn(generated, sc, inp, "sm_90")
        print(f"decode {sc.name}", flush=True)
        for _ in range(2):
            fn()
        del inp, fn
        common.free_memory()
    torch.cuda.synchronize()
    print("profile_kernels: done", flush=True)


if __name__ == "__main__":
    main()
