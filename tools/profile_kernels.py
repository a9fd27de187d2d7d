#!/usr/bin/env python3
"""Kernels to look at under Nsight Compute (ncu) on the H200: the slow split-K router kernel,
the per-expert router kernel the tables use, and the two decode kernels at a small context.

    ncu --clock-control none --section SpeedOfLight --section LaunchStats \\
        --section Occupancy --section WarpStateStats \\
        -k regex:'router_gemm|score_split|topk_fused' python3 tools/profile_kernels.py

Each kernel runs twice eagerly (the first call compiles); ncu serialises and times every
launch on its own, so look at the second of each pair.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import bench  # noqa: E402


def main():
    common.setup(False)
    import torch
    import generated
    from generated import moe_router as mr

    g = torch.Generator(device="cuda").manual_seed(1)
    K, N, M = 6144, 128, 32
    w = torch.randn((N, K), generator=g, device="cuda") * K ** -0.5
    x = torch.randn((M, K), generator=g, device="cuda").to(torch.bfloat16)
    out = torch.empty((M, N), device="cuda")
    for _ in range(2):  # the best split-K configuration of the run-10 tune at this shape
        mr.launch_router_gemm_splitk(x, w, out, block_m=32, block_n=32, block_k=64, split_k=32,
                                     tf32x3=False, num_warps=4, num_stages=3)
    for _ in range(2):  # the table's per-expert kernel
        generated.router_gemm(x, w)
    sc = bench.Scenario(1, 8192, 4)
    inp = bench.make_decode_inputs(sc, "cuda")
    fn = bench.ours_fn(generated, sc, inp, "sm_90")
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    print("profile_kernels: done", flush=True)


if __name__ == "__main__":
    main()
