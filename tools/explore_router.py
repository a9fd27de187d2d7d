#!/usr/bin/env python3
"""Router GEMM split-K kernel study on the H200: fp32 FMA dot (ieee) vs three-TF32 tensor-core
dot (tf32x3), against the per-expert kernel the tables use. One device call, ~1 minute.

    python3 tools/explore_router.py
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def main():
    common.setup(False)
    import torch
    import torch.nn.functional as F
    import generated
    from generated import moe_router as mr

    empty = common.empty_kernel_us()["median_us"]
    common.say(f"empty kernel {empty:.2f} µs (flush {common.FLUSH_MODE})")
    g = torch.Generator(device="cuda").manual_seed(3)
    for K, N in ((6144, 128), (6144, 256)):
        w = torch.randn((N, K), generator=g, device="cuda") * K ** -0.5
        for m in (1, 8, 32):
            for dt in (torch.bfloat16,):
                x = torch.randn((m, K), generator=g, device="cuda").to(dt)
                ref = F.linear(x.double(), w.double()).float()
                t = common.time_graph(lambda: generated.router_gemm(x, w), reps=30)
                best = (t["median_us"], "table")
                for bn in (16, 32):
                    for sk in (8, 16):
                        for bk in (64, 128):
                            if K % (bk * sk) or (N // bn) * sk > 264 or (N // bn) * sk < 64:
                                continue
                            for nw, ns in ((4, 2), (8, 3)):
                                for tf in (False, True):
                                    out = torch.full((m, N), float("nan"), device="cuda")
                                    fn = lambda: mr.launch_router_gemm_splitk(  # noqa: E731
                                        x, w, out, block_m=max(16, 1 << (m - 1).bit_length()),
                                        block_n=bn, block_k=bk, split_k=sk, num_warps=nw,
                                        num_stages=ns, tf32x3=tf)
                                    try:
                                        fn()
                                        torch.cuda.synchronize()
                                        err = float((out - ref).norm() / ref.norm())
                                        tt = common.time_graph(fn, reps=20)["median_us"]
                                    except Exception as e:  # noqa: BLE001
                                        common.say(f"  ({K},{N}) M{m} bn{bn} sk{sk} bk{bk} "
                                                   f"w{nw} s{ns} tf32x3={tf}: {type(e).__name__}"
                                                   f" {str(e)[:120]}")
                                        continue
                                    if tt < best[0]:
                                        best = (tt, f"splitk bn{bn} sk{sk} bk{bk} w{nw} s{ns} "
                                                    f"{'tf32x3' if tf else 'ieee'} err {err:.1e}")
                name = {torch.bfloat16: "bf16", torch.float32: "fp32"}[dt]
                common.say(f"({K},{N}) M{m:<2d} {name}: table {t['median_us']:.2f} µs; best "
                           f"{best[0]:.2f} µs ({best[1]}); minus empty {best[0] - empty:.2f}")


if __name__ == "__main__":
    main()
