"""Device study: decode rows of Q > 1 through the query-tiled kernel. One program per request
and KV head (or per contiguous share of it: splits, merged by the merge kernel) walks the
union of the request's Q rows' lists, loading each page once, against
the decode table's launch (the split kernel: each row's list on its own), both through
`sparse_attn_decode`'s launch path (a programmatic dependent where the device has them), timed
interleaved in one process (graph replay, L2 flushed, the order rotating each round:
`common.time_graphs`). Each row twice, with the tuner's two kinds of lists
(`tune.kernels.GpuDevice.attn_case`): a request's rows mostly listing the same blocks, as an
indexer's do ("shared"), and each row its own ("own", as vLLM's benchmark rows). Every launch
is checked against the table's output (within 16-bit rounding of probabilities).

    python3 tools/union_study.py OUTDIR                # GPU: OUTDIR/union_study.json
    python3 tools/union_study.py OUTDIR --rows bf16/bf16/16/4/512/4,bf16/fp8e4m3/16/4/2048/4
        # rows as q/kv/G/Hkv/programs/Q
    python3 tools/union_study.py OUTDIR --smoke        # CPU interpreter, tiny rows
"""
from __future__ import annotations

import argparse
import os
import sys
from types import SimpleNamespace

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path[:0] = [ROOT, os.path.join(ROOT, "tools")]
import common  # noqa: E402

ROWS = ("bf16/bf16/16/4/256/4,bf16/bf16/16/4/512/4,bf16/bf16/16/4/2048/4,bf16/bf16/16/2/256/4,"
        "bf16/bf16/16/1/128/4,bf16/bf16/8/1/128/4,bf16/bf16/16/4/512/8,bf16/bf16/8/1/256/8,"
        "bf16/fp8e4m3/16/4/512/4,bf16/fp8e4m3/16/4/2048/4")
SMOKE_ROWS = "bf16/bf16/16/1/4/4,bf16/bf16/8/1/4/4"
# the query-tiled launches timed: (sorted_union, splits, num_warps), two stages, Q · G lanes
WALKS = ((True, 1, 4), (True, 1, 8), (False, 1, 4), (False, 1, 8), (True, 2, 4), (True, 4, 4))
TOL = 2e-2  # against the table's output (`tune.kernels.GpuDevice.attn_problem`'s bound)


def parse_rows(text: str) -> list:
    """[(q dtype, kv dtype, G, Hkv, programs, Q)] of "q/kv/G/Hkv/programs/Q", comma-separated."""
    rows = []
    for item in text.split(","):
        q, kv, *nums = item.split("/")
        rows.append((q, kv, *(int(n) for n in nums)))
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="output directory")
    p.add_argument("--rows", default=None, help=f"q/kv/G/Hkv/programs/Q rows (default {ROWS})")
    p.add_argument("--smoke", action="store_true",
                   help="CPU interpreter, tiny rows (4k context, 4 blocks a row)")
    args = p.parse_args(argv)
    common.setup(args.smoke)
    import torch

    from generated import sparse_attention as sa
    from tune.kernels import GpuDevice
    dev = GpuDevice(SimpleNamespace(block=128), device="cpu" if args.smoke else "cuda")
    report = {"env": common.env_info(args.smoke), "rows": []}
    for qd, kvd, G, Hkv, P, Q in parse_rows(args.rows or (SMOKE_ROWS if args.smoke else ROWS)):
        inputs = dict(q_dtype=qd, kv_dtype=kvd, group=G, head_dim=128, scales="none")
        for own in (False, True):
            case = dev.attn_case("decode", inputs, P, Hkv, Q=Q, own_lists=own,
                                 **(dict(ctx=4096, topk=4) if args.smoke else {}))
            call = {k: v for k, v in case.items() if k not in ("mode", "output")}

            def entry(launch, out, call=call):
                return common.Checked(
                    lambda: sa.sparse_attn_with_launch(launch, "decode", **call, output=out))
            launches = {"table": None, **{
                f"tiled {'sorted' if su else 'minima'}{f' s{k}' if k > 1 else ''} w{w}": dict(
                    variant=sa.TILED, lanes=max(16, common.pow2ceil(Q * G)), sorted_union=su,
                    splits=k, num_warps=w, num_stages=2) for su, k, w in WALKS}}
            outs = {k: torch.full_like(case["q"], float("nan")) for k in launches}
            fns = {k: entry(launch, outs[k]) for k, launch in launches.items()}
            for fn in fns.values():
                fn()
            err = {k: float((o.float() - outs["table"].float()).abs().max())
                   for k, o in outs.items()}
            bad = {k: e for k, e in err.items() if not e <= TOL}
            if bad:
                raise SystemExit(f"{qd}/{kvd} G{G} Hkv{Hkv} P{P} Q{Q}: outputs differ {bad}")
            ids = case["topk_idx"][0].view(-1, Q, case["topk_idx"].shape[2])
            union = sum(int(torch.unique(r[r >= 0]).numel()) for r in ids) / ids.shape[0]
            us = {k: t["median_us"] for k, t in common.time_graphs(
                fns, reps=40, rounds=5, smoke=args.smoke).items()}
            best = min((k for k in us if k != "table"), key=us.get)
            report["rows"].append(dict(
                q_dtype=qd, kv_dtype=kvd, group=G, kv_heads=Hkv, programs=P, query_len=Q,
                lists="own" if own else "shared", union_blocks=union, us=us, max_err=err,
                best_tiled=best, ratio=us[best] / us["table"]))
            common.say(f"{qd}/{kvd} G{G} Hkv{Hkv} P{P} Q{Q} {'own' if own else 'shared':6s} "
                       f"union {union:5.1f} blocks: table {us['table']:8.2f} µs, {best} "
                       f"{us[best]:8.2f} ({us[best] / us['table']:.3f}×)")
            del case, fns, outs
            dev.release()
    os.makedirs(args.out, exist_ok=True)
    common.write_json(os.path.join(args.out, "union_study.json"), report)


if __name__ == "__main__":
    main()
