#!/usr/bin/env python3
"""Prototype for the router GEMM at 4 ≤ M ≤ 32 (not generated, not dispatched): split-K with
the products done as register FMAs instead of the fp32 `tl.dot` of the generated split-K
kernel, which ncu shows stalled on shared memory (62 % of its stall cycles: the FMA dot stages
both operands through shared memory). Same last-arrival reduction, in K-slice order.

    python3 tools/explore_router.py            # H200: the prototype vs the table's kernel
    python3 tools/explore_router.py --smoke    # CPU interpreter: correctness on small shapes

Program (nt, ks) keeps a [BM, BN, BK] fp32 accumulator in registers: x [BM, BK] (each row
read once per K slice, from L2) times w [BN, BK] (read once from DRAM), summed over BK at the
end; x is re-read N / BN times in all instead of N times (per-expert kernel).
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def build_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def router_fma_splitk(x_ptr, w_ptr, out_ptr, scratch_ptr, counter_ptr, M,
                          K: tl.constexpr, N: tl.constexpr, BM: tl.constexpr,
                          BN: tl.constexpr, BK: tl.constexpr, S: tl.constexpr):
        nt = tl.program_id(0)
        ks = tl.program_id(1)
        KS: tl.constexpr = K // S
        rows = tl.arange(0, BM)
        row_ok = rows < M
        experts = nt * BN + tl.arange(0, BN)
        cols = tl.arange(0, BK)
        acc = tl.zeros((BM, BN, BK), dtype=tl.float32)
        for k0 in tl.static_range(0, KS, BK):
            k = ks * KS + k0 + cols
            x = tl.load(x_ptr + rows[:, None] * K + k[None, :], mask=row_ok[:, None], other=0.0)
            w = tl.load(w_ptr + experts[:, None] * K + k[None, :])
            acc += x.to(tl.float32)[:, None, :] * w[None, :, :]
        part = tl.sum(acc, axis=2)  # [BM, BN]
        offs = rows[:, None] * N + experts[None, :]
        mask = row_ok[:, None] & (experts < N)[None, :]
        if S == 1:
            tl.store(out_ptr + offs, part, mask=mask)
        else:
            tl.store(scratch_ptr + ks * M * N + offs, part, mask=mask)
            tl.debug_barrier()
            arrived = tl.atomic_add(counter_ptr + nt, 1, sem="acq_rel", scope="gpu")
            if arrived == S - 1:
                tl.debug_barrier()
                total = tl.zeros((BM, BN), dtype=tl.float32)
                for s in tl.static_range(S):
                    total += tl.load(scratch_ptr + s * M * N + offs, mask=mask, other=0.0,
                                     cache_modifier=".cg")
                tl.store(out_ptr + offs, total, mask=mask)
                tl.atomic_xchg(counter_ptr + nt, 0, sem="acq_rel", scope="gpu")

    return router_fma_splitk


def launcher(kernel, x, w, out, counter, *, bn, bk, s, num_warps):
    import torch
    import triton

    M, K = x.shape
    N = w.shape[0]
    scratch = torch.empty((s, M, N), dtype=torch.float32, device=x.device)
    bm = triton.next_power_of_2(M)

    def fn():
        kernel[(triton.cdiv(N, bn), s)](x, w, out, scratch, counter, M, K=K, N=N, BM=bm, BN=bn,
                                        BK=bk, S=s, num_warps=num_warps)
        return out
    return fn


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--configs", default="8,64,8,8;8,64,16,8;16,64,8,8;4,128,8,8",
                   help="bn,bk,split_k,num_warps;... (H200 runs)")
    p.add_argument("--ms", default="8,32")
    args = p.parse_args()
    common.setup(args.smoke)
    import torch
    import torch.nn.functional as F
    import generated

    kernel = build_kernel()
    device = "cpu" if args.smoke else "cuda"
    counter = torch.zeros(256, dtype=torch.int32, device=device)
    g = torch.Generator(device=device).manual_seed(7)
    if args.smoke:
        cases = [((256, 16), m, dt, cfg) for m in (1, 3, 8) for dt in (torch.bfloat16,
                                                                       torch.float32)
                 for cfg in ((8, 32, 4, 4), (16, 64, 1, 4))]
    else:
        cfgs = [tuple(int(v) for v in c.split(",")) for c in args.configs.split(";")]
        cases = [((6144, n), m, torch.bfloat16, cfg) for n in (128, 256)
                 for m in (int(v) for v in args.ms.split(",")) for cfg in cfgs]
    empty = None if args.smoke else common.empty_kernel_us()["median_us"]
    weights = {}
    for (K, N), m, dt, (bn, bk, s, nw) in cases:
        if (K, N) not in weights:
            weights[(K, N)] = torch.randn((N, K), generator=g, device=device) * K ** -0.5
        w = weights[(K, N)]
        x = torch.randn((m, K), generator=g, device=device).to(dt)
        out = torch.full((m, N), float("nan"), device=device)
        fn = launcher(kernel, x, w, out, counter, bn=bn, bk=bk, s=s, num_warps=nw)
        fn()
        ref = F.linear(x.double(), w.double()).float()
        err = float((out - ref).norm() / ref.norm())
        assert err < 1e-5 and int(counter.abs().sum()) == 0, (err, (K, N), m, bn, bk, s)
        line = f"({K},{N}) M{m:<2d} {str(dt)[6:]:8s} bn{bn} bk{bk} s{s} w{nw}: err {err:.1e}"
        if not args.smoke:
            t = common.time_graph(fn, reps=30)["median_us"]
            tt = common.time_graph(lambda: generated.router_gemm(x, w), reps=30)["median_us"]
            line += (f"  prototype {t:.2f} µs (−empty {t - empty:.2f}) | table {tt:.2f} µs "
                     f"(−empty {tt - empty:.2f})")
        common.say(line)


if __name__ == "__main__":
    main()
