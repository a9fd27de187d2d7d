#!/usr/bin/env python3
"""Where does decode time go? Times the scorer alone and the selector alone (graph replay, L2
flushed, as tools/common.py) over launch parameters the tuner does not sweep, on the H200.

    python3 tools/explore_scorer.py            # prints one line per config, best per shape last
    python3 tools/explore_scorer.py --scenarios 11:131072:1,16:131072:4 --chunks 128,256,512 \
        --options 4:3,4:4 --balanced-k 2,3,4 --no-selector   # a narrower sweep
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (the measured decode shape: D, BLOCK, TOPK)
import common  # noqa: E402

import generated  # noqa: E402
from generated import index_score as isc  # noqa: E402
from generated import index_topk as itk  # noqa: E402

D, BLOCK, TOPK = bench.D, bench.BLOCK, bench.TOPK


def inputs(R, ctx, Q):
    g = torch.Generator(device="cuda").manual_seed(R * 1000 + ctx // 1024 + Q)
    blocks = ctx // BLOCK
    pages = R * blocks + 16
    cache = torch.randn((pages, BLOCK, D), device="cuda", generator=g).to(torch.bfloat16)
    perm = torch.randperm(pages, device="cuda", generator=g)[: R * blocks].to(torch.int32)
    table = perm.view(R, blocks).contiguous()
    q = torch.randn((R * Q, 1, D), device="cuda", generator=g).to(torch.bfloat16)
    seq = torch.full((R,), ctx, dtype=torch.int32, device="cuda")
    return q, cache, table, seq


SCENARIOS = ((1, 131072, 4), (4, 32768, 4), (1, 8192, 4), (11, 131072, 1), (64, 131072, 1))
SPLIT_CHUNKS = (32, 64, 128, 256, 512, 1024)
SPLIT_OPTIONS = ((2, 1), (4, 2), (4, 3), (4, 4), (8, 3), (8, 4))
BALANCED_K = (1, 2, 4, 8)  # program budget = k × 132 SMs
BALANCED_OPTIONS = ((4, 2), (4, 3), (8, 3))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenarios", type=common.int_groups,
                   default=SCENARIOS, help="R:CONTEXT:Q,... (uniform lengths)")
    p.add_argument("--chunks", type=common.int_list, default=SPLIT_CHUNKS, help="split kv_chunks")
    p.add_argument("--options", type=common.int_groups,
                   default=None, help="num_warps:num_stages,... for both scorers")
    p.add_argument("--balanced-k", type=common.int_list, default=BALANCED_K,
                   help="balanced program budgets as multiples of 132")
    p.add_argument("--no-selector", action="store_true", help="scorers only")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    common.setup(False)
    bw = common.copy_bandwidth()["tb_per_s"]
    empty = common.empty_kernel_us()["median_us"]
    print(f"copy {bw:.2f} TB/s, empty kernel {empty:.2f} µs", flush=True)
    summary = []
    for R, ctx, Q in args.scenarios:
        q, cache, table, seq = inputs(R, ctx, Q)
        nbytes = R * ctx * D * 2
        scores = isc.alloc_scores(1, R * Q, ctx, "cuda")
        args_ = (q, cache, table, seq, scores, 0, 1, Q, Q)
        best = None
        configs = []
        for chunks in args.chunks:
            if R * chunks > 8192 or chunks > 4 * (ctx // BLOCK):
                continue
            for w, s in args.options or SPLIT_OPTIONS:
                configs.append(("split", chunks, w, s))
        for k in args.balanced_k:
            for w, s in args.options or BALANCED_OPTIONS:
                configs.append(("balanced", 132 * k, w, s))
        for kind, n, w, s in configs:
            if kind == "split":
                fn = lambda: isc.launch_score_split(*args_, num_kv_chunks=n, num_warps=w,  # noqa
                                                    num_stages=s)
            else:
                fn = lambda: isc.launch_score_balanced(*args_, program_budget=n,  # noqa
                                                       num_warps=w, num_stages=s)
            try:
                t = common.time_graph(fn, reps=15)["median_us"]
            except Exception as e:  # noqa: BLE001
                print(f"  R{R} {ctx // 1024}k Q{Q} {kind} {n} w{w} s{s}: ERROR {e}", flush=True)
                continue
            tbs = common.tb_per_s(nbytes, t, empty)
            print(f"  R{R} {ctx // 1024}k Q{Q} {kind:8s} {n:5d} w{w} s{s}: {t:7.2f} µs "
                  f"({tbs:.2f} TB/s after the empty-kernel time)", flush=True)
            if best is None or t < best[0]:
                best = (t, kind, n, w, s)
        if args.no_selector:
            summary.append((R, ctx, Q, best, None))
            del q, cache, table, seq, scores
            common.free_memory()
            continue
        # the selector alone on the scores just computed
        out = torch.empty((1, R * Q, TOPK), dtype=torch.int32, device="cuda")
        counter = torch.zeros((1, R * Q), dtype=torch.int32, device="cuda")
        sel = []
        for chunks, tile, w, single in ((1, 512, 8, False), (1, 128, 4, False),
                                        (8, 128, 4, False), (16, 128, 4, False),
                                        (4, 512, 8, False), (8, 128, 2, False)):
            part = torch.empty((chunks, 1, R * Q, 16), dtype=torch.int64, device="cuda")
            fn = lambda: itk.launch_topk_fused(  # noqa: E731
                scores, seq, out, Q, TOPK, num_chunks=chunks, block_k=tile, num_warps=w,
                num_stages=2, single_tile=single, adaptive_merge=False,
                completion_counter=counter, partial=part)
            t = common.time_graph(fn, reps=15)["median_us"]
            sel.append((t, chunks, tile, w))
            print(f"  R{R} {ctx // 1024}k Q{Q} selector C{chunks} tile{tile} w{w}: {t:7.2f} µs",
                  flush=True)
        summary.append((R, ctx, Q, best, min(sel)))
        del q, cache, table, seq, scores
        common.free_memory()
    print("\nbest scorer alone / best selector alone (µs; empty kernel "
          f"{empty:.2f} µs, copy {bw:.2f} TB/s):")
    for R, ctx, Q, best, sel in summary:
        floor = R * ctx * D * 2 / (bw * 1e12) * 1e6
        line = (f"R{R:<3d} {ctx // 1024:4d}k Q{Q}: scorer {best[0]:7.2f} ({best[1]} {best[2]} "
                f"w{best[3]} s{best[4]}), floor {floor:6.2f}")
        if sel is not None:
            line += f"; selector {sel[0]:6.2f} (C{sel[1]} tile{sel[2]} w{sel[3]})"
        print(line)


if __name__ == "__main__":
    main()
