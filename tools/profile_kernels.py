#!/usr/bin/env python3
"""Kernels to look at under Nsight Compute (ncu) on the H200: the router GEMM as the sm_90
table launches it at (6144, 128) for M = 1, 8, 32 (per-expert, per-expert, tf32x3 split-K),
the split-K kernel forced at M = 1 (to compare its main body with the per-expert kernel's)
(``--router KxN:M:X,...`` picks other rows, each followed by `F.linear(x.float(),
w.float())`: add its cuBLAS kernels to the regex, e.g. 'router_gemm|gemm|splitK'),
and the two decode kernels at a small context (``--decode R:CONTEXT:Q,...`` picks other decode
scenarios, ``--decode none`` and ``--no-router`` leave them out); ``--attn HQ:HKV:R:CONTEXT:Q,...``
adds `sparse_attn_decode` at the table's launch on bench_attn's rows, each followed by the
plain streaming read of the same bytes (`common.row_read_us`' kernel, one row piece per
program), for the copy-rate rows (``--attn-launch "splits=8,num_warps=4,num_stages=2,tma=False"``
runs each row at that launch as well, after the table's: `sparse_attn_with_launch`'s keys,
splits, num_warps and num_stages required, the rest its defaults):

    ncu --clock-control none --section SpeedOfLight --section Occupancy \\
        --section WarpStateStats --section MemoryWorkloadAnalysis --section SchedulerStats \\
        -k regex:'sparse_attn|row_sums' python3 tools/profile_kernels.py --no-router \\
        --decode none --attn 8:1:32:32768:1,16:1:32:32768:1,32:2:32:32768:1

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


def parse_router_rows(text: str) -> list:
    """'4096x192:32:fp32,...' -> [((4096, 192), 32, "fp32"), ...]"""
    rows = []
    for item in text.split(","):
        try:
            shape, m, x = item.split(":")
            k, n = (int(v) for v in shape.split("x"))
            rows.append(((k, n), int(m), x))
        except ValueError:
            raise SystemExit(f"--router: items are KxN:M:X (X bf16 or fp32), got {item!r}") \
                from None
        if x not in ("bf16", "fp32"):
            raise SystemExit(f"--router: X is bf16 or fp32, got {x!r}")
    return rows


def profile_router_rows(torch, generated, rows):
    """Each row at the table's launch, then F.linear on the same tensors, twice each."""
    from generated import moe_router as mr

    g = torch.Generator(device="cuda").manual_seed(1)
    for (K, N), M, x_dtype in rows:
        w_dtype = mr.ROUTER_GEMM_LIMITS[(K, N)][0]
        w = (torch.randn((N, K), generator=g, device="cuda") * K ** -0.5).to(w_dtype)
        x = torch.randn((M, K), generator=g, device="cuda").to(common.torch_dtype(x_dtype))
        print(f"router ({K},{N}) M{M} {x_dtype}: "
              f"{mr.explain_router_gemm(K, N, M, 'sm_90', x_dtype)}", flush=True)
        for _ in range(2):
            generated.router_gemm(x, w)
        print(f"F.linear ({K},{N}) M{M} {x_dtype}", flush=True)
        for _ in range(2):
            torch.nn.functional.linear(x.float(), w.float())


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
    if text == "none":
        return []
    try:
        return [bench.Scenario(r, ctx, q) for r, ctx, q in common.int_groups(text)]
    except ValueError:
        raise SystemExit(f"--decode: items are R:CONTEXT:Q, got {text!r}") from None


def parse_attn_rows(text: str | None) -> list:
    try:
        rows = list(common.int_groups(text)) if text else []
    except ValueError:
        rows = None
    if rows is None or any(len(r) != 5 for r in rows):
        raise SystemExit(f"--attn: items are HQ:HKV:R:CONTEXT:Q, got {text!r}")
    return rows


def parse_launch(text: str | None) -> dict | None:
    """'splits=8,tma=False' -> {"splits": 8, "tma": False} (None: no such launch)."""
    if not text:
        return None
    launch = {}
    for pair in text.split(","):
        key, eq, value = (part.strip() for part in pair.partition("="))
        if not key or not eq or not (value in ("True", "False") or value.isdigit()):
            raise SystemExit(f"--attn-launch: items are KEY=INT or KEY=True|False, got {text!r}")
        launch[key] = value == "True" if value in ("True", "False") else int(value)
    return launch


def profile_attention(torch, generated, rows, launch=None, device="cuda"):
    """Each row's attention at the table's launch (and at ``launch`` where given), then the
    plain read of its KV bytes (as bench_attn judges the copy rate), twice each."""
    import bench_attn

    from generated import sparse_attention

    _, row_sums = common._latency()
    for row in rows:
        Hq, Hkv, R, ctx, Q = row
        case = bench_attn.make_case(row, device)
        out = torch.empty(case["q"].shape, dtype=torch.bfloat16, device=device)
        table = generated.explain_sparse_attn("decode", common.detected_hardware(device != "cuda"),
                                              "bf16", "bf16", "none", Hq // Hkv,
                                              bench_attn.D, R * Q * Hkv, Q)
        print(f"attention {Hq}/{Hkv} R{R} {ctx // 1024}k Q{Q}: {table}", flush=True)
        for _ in range(2):
            generated.sparse_attn_decode(**case, output=out)
        if launch is not None:
            print(f"attention {Hq}/{Hkv} R{R} {ctx // 1024}k Q{Q} at {launch}", flush=True)
            for _ in range(2):
                sparse_attention.sparse_attn_with_launch(launch, "decode", **case, output=out)
        rows_read = R * Q * bench_attn.TOPK * Hkv
        cols = bench_attn.BLOCK * 2 * bench_attn.D * 2 // 4  # one fp32 row per block and head
        w = torch.randn((rows_read, cols), device=device)
        sums = torch.empty(rows_read, device=device)
        for _ in range(2):
            row_sums[(rows_read, 1)](w, sums, K=cols, SPLITS=1, BLOCK_K=2048, num_warps=16)
        del case, out, w, sums
        common.free_memory()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--decode", default="1:8192:4",
                   help="decode scenarios R:CONTEXT:Q, comma separated (default 1:8192:4)")
    p.add_argument("--no-router", action="store_true", help="leave the router out")
    p.add_argument("--router", default=None,
                   help="router rows KxN:M:X (X bf16|fp32), comma separated, each followed by "
                        "F.linear (default: (6144,128) fp32 M 1, 8, 32)")
    p.add_argument("--attn", default=None,
                   help="sparse-attention rows HQ:HKV:R:CONTEXT:Q, comma separated")
    p.add_argument("--attn-launch", default=None,
                   help="also run each --attn row at this launch, KEY=VALUE comma separated "
                        "(sparse_attn_with_launch's keys: splits, num_warps and num_stages "
                        "required, the rest take its defaults)")
    args = p.parse_args(argv)
    scenarios = parse_scenarios(args.decode)
    attn_rows = parse_attn_rows(args.attn)
    attn_launch = parse_launch(args.attn_launch)
    if attn_launch is not None:  # refused before anything runs
        from generated.sparse_attention import _check_launch

        try:
            _check_launch(attn_launch, "decode")
        except (TypeError, ValueError) as e:
            raise SystemExit(f"--attn-launch: {e}") from None
    router_rows = parse_router_rows(args.router) if args.router else None
    common.setup(False)
    import torch

    import generated

    if router_rows:
        profile_router_rows(torch, generated, router_rows)
    elif not args.no_router:
        profile_router(torch, generated)
    for sc in scenarios:
        inp = bench.make_decode_inputs(sc, "cuda")
        fn = bench.ours_fn(generated, sc, inp, "sm_90")
        print(f"decode {sc.name}", flush=True)
        for _ in range(2):
            fn()
        del inp, fn
        common.free_memory()
    profile_attention(torch, generated, attn_rows, attn_launch)
    torch.cuda.synchronize()
    print("profile_kernels: done", flush=True)


if __name__ == "__main__":
    main()
