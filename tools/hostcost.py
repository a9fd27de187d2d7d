#!/usr/bin/env python3
"""Host cost per eager call of every public entry (issues 13, 19, 21), on a CUDA device.

    python3 tools/hostcost.py [--out DIR] [--calls 300]

Method: the GPU is first given a long `torch.cuda._sleep`, so launches never wait for a full
queue; then each call is timed alone with a host clock (median of --calls, ≥ 300). That is
the Python + launch cost a caller pays per call, whatever the kernels' GPU time. Beside our
entries: `F.linear(x.float(), w)` on the same router shapes and an empty Triton kernel launched
through the JIT. `sparse_decode_step` is judged against the two calls it replaces (the
indexer's and the attention's host µs, measured beside it). Prints a table with the targets
and writes DIR/hostcost.json (about 2 minutes: each row sleeps the GPU 3 s).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402  (tools/common.py)
import targets  # noqa: E402  (tools/targets.py)

# (R, context, Q) of the decode rows; (K, N, M, x dtype) of the router rows (issue 13)
DECODE = ((1, 8192, 4), (16, 131072, 4))
# (R, prefix, chunk, H) of the prefill rows (issue 19): entries judged like the decode ones
PREFILL = ((1, 0, 8192, 1), (8, 1024, 128, 4))
# (Hq, Hkv, R, context, Q) of the attention rows (issue 21): judged like index_decode_scores
ATTENTION = ((32, 2, 32, 32768, 1), (64, 4, 1, 32768, 1))
ROUTER = ((6144, 128, 1, "bf16"), (3072, 256, 8, "bf16"))
SLEEP_CYCLES = 2_000_000_000  # ~1 s of GPU time: longer than the timed calls


def host_us(fn, calls: int) -> float:
    """Median host µs of ``fn()`` while the GPU is busy (no launch waits on the queue)."""
    import torch

    fn()
    torch.cuda.synchronize()
    samples = []
    while len(samples) < calls:
        torch.cuda._sleep(SLEEP_CYCLES)
        for _ in range(min(100, calls - len(samples))):  # ≤ 100 calls per sleep: queue room
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1e6)
        torch.cuda.synchronize()
    return statistics.median(samples)


def decode_fns(generated, R, ctx, Q):
    import bench

    sc = bench.Scenario(R, ctx, Q)
    inp = bench.make_decode_inputs(sc, "cuda")
    decode = bench.ours_fn(generated, sc, inp, None)

    def scores():
        return generated.index_decode_scores(inp["idx_q"], inp["cache"], inp["block_table"],
                                             inp["seq_lens"], sc.max_seq_len, bench.INIT_BLOCKS,
                                             bench.LOCAL_BLOCKS, Q, Q)
    return sc.name.replace("  ", " "), decode, scores, inp


def prefill_fns(generated, row):
    """(name, call, host target) of the three prefill entries on one bench_prefill row."""
    import bench_prefill as bp

    inp = bp.make_inputs(row, "bf16", "cuda")
    args = [inp[k] for k in ("idx_q", "index_kv_cache", "block_table", "cu_seqlens_q",
                             "seq_lens", "prefix_lens", "max_query_len", "max_seq_len",
                             "num_kv_heads")]
    sel = (inp["cu_seqlens_q"], inp["prefix_lens"], inp["max_query_len"], bp.TOPK,
           bp.INIT_BLOCKS, bp.LOCAL_BLOCKS)
    score = generated.index_prefill_score(*args)
    R, prefix, chunk, H = row
    label = f"R{R} ({prefix}+{chunk}) H{H}"
    return [
        (f"index_prefill {label}", lambda: generated.index_prefill(
            *args, bp.TOPK, bp.INIT_BLOCKS, bp.LOCAL_BLOCKS), targets.HOST_US["index_decode"]),
        (f"index_prefill_score {label}", lambda: generated.index_prefill_score(*args),
         targets.HOST_US["index_decode_scores"]),
        (f"index_prefill_topk {label}", lambda: generated.index_prefill_topk(score, *sel),
         targets.HOST_US["index_decode_scores"]),
    ]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=None)
    p.add_argument("--calls", type=int, default=300)
    args = p.parse_args(argv)
    common.setup(smoke=False)
    import torch
    import torch.nn.functional as F

    import generated

    rows, results = [], {}

    def record(name, us, target=None):
        results[name] = {"host_us": round(us, 2), "target_us": target}
        rows.append((name, us, target))

    dummy = torch.zeros(16, dtype=torch.int32, device="cuda")
    record("empty Triton kernel (JIT launch)", host_us(lambda: common.launch_empty(dummy),
                                                       args.calls))
    for R, ctx, Q in DECODE:
        name, decode, scores, inp = decode_fns(generated, R, ctx, Q)
        record(f"index_decode {name} +table", host_us(decode, args.calls),
               targets.HOST_US["index_decode"])
        record(f"index_decode_scores {name}", host_us(scores, args.calls),
               targets.HOST_US["index_decode_scores"])
        del inp
        common.free_memory()
    for row in PREFILL:
        for name, fn, target in prefill_fns(generated, row):
            record(name, host_us(fn, args.calls), target)
        common.free_memory()
    for row in ATTENTION:
        import bench_attn

        case = bench_attn.make_case(row, "cuda")
        out = torch.empty(case["q"].shape, dtype=torch.bfloat16, device="cuda")
        Hq, Hkv, R, ctx, Q = row
        name = f"{Hq}/{Hkv} R{R} {ctx // 1024}k Q{Q}"
        record(f"sparse_attn_decode {name}",
               host_us(lambda: generated.sparse_attn_decode(**case, output=out), args.calls),
               targets.HOST_US["index_decode_scores"])
        # the decode step: at most the two calls it replaces
        indexer, attention, step, _ = bench_attn.step_calls(generated, case, row, "cuda")
        two = host_us(indexer, args.calls) + host_us(attention, args.calls)
        record(f"sparse_decode_step {name}", host_us(step, args.calls), round(two, 2))
        del case, out, indexer, attention, step
        common.free_memory()
    for K, N, M, dt in ROUTER:
        x = torch.randn((M, K), device="cuda").to(common.torch_dtype(dt))
        w = torch.randn((N, K), device="cuda")
        lin = host_us(lambda: F.linear(x.float(), w), args.calls)
        gemm = host_us(lambda: generated.router_gemm(x, w), args.calls)
        logits = host_us(lambda: generated.router_logits(x, w), args.calls)
        record(f"F.linear(x.float(), w) ({K},{N}) M{M} {dt}", lin)
        record(f"router_gemm ({K},{N}) M{M} {dt}", gemm, lin)
        record(f"router_logits ({K},{N}) M{M} {dt}", logits,
               gemm + targets.HOST_LOGITS_OVER_GEMM_US)
    print(f"\n{'entry (eager, host µs per call, median of ' + str(args.calls) + ')':60s}"
          f"{'µs':>9s}  target")
    for name, us, target in rows:
        verdict = "" if target is None else \
            f"≤ {target:.1f} {'PASS' if us <= target else 'FAIL'}"
        print(f"{name:60s}{us:9.2f}  {verdict}")
    if args.out:
        common.write_json(os.path.join(args.out, "hostcost.json"),
                          {"env": common.env_info(), "calls": args.calls, "rows": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
