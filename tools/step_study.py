"""Device study: how should `sparse_decode_step` launch its attention? For each row, the step
with the attention as the indexer's programmatic dependent (``dependent``) and launched plainly
after it (``plain``), the step as its table launches it (``table``: the dependent, as many of
its programs per SM as the table lets), the two calls back to back in one graph (``two
calls``) and each alone, timed interleaved in one process (graph replay, L2 flushed, the order
rotating each round: `common.time_graphs`). Every step's output and ids are checked bitwise
against the two calls'.

``--cap N`` adds both launches with at most N of the attention's programs per SM (``dependent
cap``, ``plain cap``; ``dependent`` and ``plain`` are uncapped): the same kernel and bits. The
sm_90 step table's cap (specs/sparse_attn.py STEP_CAPPED) comes from these runs.

    python3 tools/step_study.py OUTDIR                # H200: OUTDIR/step_study.json
    python3 tools/step_study.py OUTDIR --rows 32/2/128/32768/1,32/2/32/32768/4:fp8e4m3
        # rows as Hq/Hkv/R/context/Q, each optionally :KV (bench_attn's --kv)
    python3 tools/step_study.py OUTDIR --cap 2        # and both launches at most 2 per SM
    python3 tools/step_study.py OUTDIR --smoke        # CPU interpreter, one tiny row
"""
from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path[:0] = [ROOT, os.path.join(ROOT, "tools")]
import bench_attn  # noqa: E402
import common  # noqa: E402

# one row of each decode program bucket of 33-1024 programs at 32k, and the 129-256 bucket at
# 8k and 128k: bf16 G 16 and 8, fp8 e4m3 with and without per-token scales
ROWS = ("32/2/1/32768/1,32/2/8/32768/4,32/2/64/32768/1,32/2/128/32768/1,32/2/32/32768/4,"
        "32/2/128/8192/1,32/2/32/131072/4,8/1/64/32768/4,8/1/256/32768/1,32/2/64/32768/4,"
        "32/2/128/32768/4,32/2/128/32768/1:fp8e4m3,32/2/32/32768/4:fp8e4m3,"
        "32/2/128/32768/1:fp8e4m3:per_token")


def parse_rows(text: str) -> list:
    """[(Hq, Hkv, R, context, Q), kv option] of "Hq/Hkv/R/context/Q[:KV]", comma-separated."""
    rows = []
    for item in text.split(","):
        shape, _, kv = item.partition(":")
        rows.append((tuple(int(x) for x in shape.split("/")), kv or "bf16"))
    return rows


def study_row(generated, row, kv, device, smoke, reps, cap=0):
    """µs of each way to run the row's step (module docstring) and whether each gave the two
    calls' bits."""
    import torch
    from generated import sparse_attention

    case = bench_attn.make_case(row, device, *((64, 4) if smoke else ()))
    if kv != "bf16":
        case = bench_attn.with_kv(case, bench_attn.kv_option(kv))
    indexer, attention, step, (out, step_out) = bench_attn.step_calls(generated, case, row,
                                                                     device)
    args = step.args  # the step's arguments (bench_attn.step_calls)
    outs = {}

    def forced(name, pdl, per_sm=0):
        outs[name] = (torch.empty_like(out), torch.empty_like(args["topk_out"]))
        counter = torch.zeros_like(args["completion_counter"])
        kwargs = dict(args, output=outs[name][0], topk_out=outs[name][1],
                      completion_counter=counter)
        return common.Checked(lambda: sparse_attention.sparse_decode_step_with_launch(
            None, attention_pdl=pdl, attention_per_sm=per_sm, **kwargs))

    indexer, attention, step = map(common.Checked, (indexer, attention, step))

    def two_calls():
        indexer()
        attention()
    two_calls = common.Checked(two_calls)
    calls = {"table": step, "dependent": forced("dependent", True),
             "plain": forced("plain", False), "two calls": two_calls, "indexer": indexer,
             "attention": attention}
    if cap:
        calls["dependent cap"] = forced("dependent cap", True, cap)
        calls["plain cap"] = forced("plain cap", False, cap)
    two_calls()
    want_ids = args["topk_out"].clone()  # (the two calls' ids; the table's step rewrites them)
    for name in ("table", *outs):
        calls[name]()
    if device != "cpu":
        torch.cuda.synchronize()
    outs["table"] = (step_out, args["topk_out"])
    same = {k: bool(torch.equal(o, out) and torch.equal(ids, want_ids))
            for k, (o, ids) in outs.items()}
    timed = common.time_graphs(calls, reps=reps, rounds=max(1, reps // 10), smoke=smoke)
    return {"us": {k: v["median_us"] for k, v in timed.items()}, "same_bits": same}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--rows", default=ROWS)
    ap.add_argument("--reps", type=int, default=120)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--cap", type=int, default=0, metavar="PROGRAMS")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    device = "cpu" if args.smoke else "cuda"
    import generated

    rows = [((16, 1, 2, 1024, 1), "bf16")] if args.smoke else parse_rows(args.rows)
    res = []
    for row, kv in rows:
        got = study_row(generated, row, kv, device, args.smoke, 1 if args.smoke else args.reps,
                        args.cap)
        us = got["us"]
        print(f"{'/'.join(map(str, row))} {kv}: " + "  ".join(f"{k} {v:.2f}"
                                                          for k, v in us.items())
              + f"  plain/dependent {us['plain'] / us['dependent']:.3f}"
              + "".join(f"  {k} DIFFERS" for k, ok in got["same_bits"].items() if not ok),
              flush=True)
        res.append({"row": list(row), "kv": kv, **got,
                    **({"cap_per_sm": args.cap} if args.cap else {})})
        with open(os.path.join(args.out, "step_study.json"), "w") as f:
            json.dump({"env": common.env_info(args.smoke), "rows": res}, f, indent=1)
        common.free_memory()
    return 0 if all(all(r["same_bits"].values()) for r in res) else 1


if __name__ == "__main__":
    sys.exit(main())
