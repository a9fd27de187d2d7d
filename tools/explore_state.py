#!/usr/bin/env python3
"""Why a decode row is slower in a used process than in a fresh one (issue 12, item 3).

On one H200, sm_90's R64 128k Q1 row took 492 µs in a fresh process and 555 µs after twenty
other bench scenarios in the same process (R32 Q1, R64 Q4 alike; not a hot GPU). Each
experiment below changes one thing between those two states; all time the same scenario the
same way (tools/common.py: graph replay, L2 flushed, median), under each --policies table:

  fresh            inputs allocated first thing in a new process
  early-after      the fresh tensors again, after the used workload ran (same mapping, used GPU)
  used-new         new tensors allocated after the used workload (the bench's situation)
  used-emptied     the same after gc + torch.cuda.empty_cache() (cached segments returned)
  gather-random /  torch.index_select of the cache's pages in block-table order / in address
  gather-seq       order (same bytes; only the page order differs: address translation)
  fragmented       a new process that maps and unmaps many 20 MB segments (every other one
                   kept) before allocating the inputs, running no kernel
  expandable-*     fresh and used-new with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True

plus the caching allocator's view of the cache tensor (segment size, offset, segments held).
Reading the table: early-after slow -> the device state, not the allocation; used-new slow but
early-after fast -> how the new allocation is mapped; used-emptied fast -> the allocator's
reuse of old segments; fragmented slow -> physical fragmentation alone; gather-random slowing
with gather-seq steady -> TLB misses on scattered pages.

    python3 tools/explore_state.py --out DIR          # H200, ~4-6 min (three processes)
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (decode scenarios, inputs, the used workload)
import common  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="output directory (state.json)")
    p.add_argument("--scenarios", default="64:131072:1,32:131072:1,64:131072:4",
                   help="R:context:Q,... (default: the three rows the issue names)")
    p.add_argument("--policies", default="sm_90,generic,gfx950")
    p.add_argument("--used-scenarios", type=int, default=20,
                   help="bench decode scenarios run to make the process 'used'")
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--child", choices=("main", "fragmented", "expandable"),
                   help=argparse.SUPPRESS)
    return p.parse_args(argv)


def segment_of(t) -> dict:
    """The caching allocator's segment holding tensor ``t``."""
    import torch

    ptr = t.data_ptr()
    for seg in torch.cuda.memory_snapshot():
        if seg["address"] <= ptr < seg["address"] + seg["total_size"]:
            return {"segment_mib": seg["total_size"] >> 20,
                    "offset_mib": (ptr - seg["address"]) / 2**20,
                    "address_2mib_aligned": ptr % (2 << 20) == 0,
                    "segment_type": seg.get("segment_type")}
    return {}


def allocator() -> dict:
    import torch

    s = torch.cuda.memory_stats()
    return {k: s.get(k) for k in ("segment.all.current", "reserved_bytes.all.current",
                                  "num_alloc_retries", "num_device_alloc", "num_device_free")}


class Case:
    def __init__(self, args, key):
        R, ctx, Q = key
        self.sc = bench.Scenario(R, ctx, Q)
        self.args = args

    def inputs(self):
        import torch

        return bench.make_decode_inputs(self.sc, torch.device("cuda"))

    def time(self, inp) -> dict:
        import generated

        out = {}
        for hw in self.args.policies.split(","):
            fn = bench.ours_fn(generated, self.sc, inp, hw)
            out[hw] = round(common.time_graph(fn, reps=self.args.reps)["median_us"], 2)
        return out

    def gather(self, inp) -> dict:
        """index_select of the cache pages: block-table order vs address order."""
        import torch

        cache, bt = inp["cache"], inp["block_table"].flatten().long()
        out = torch.empty((bt.numel(),) + tuple(cache.shape[1:]), dtype=cache.dtype,
                          device=cache.device)
        seq = torch.sort(bt).values
        return {name: round(common.time_graph(
            lambda idx=idx: torch.index_select(cache, 0, idx, out=out),
            reps=max(5, self.args.reps // 3))["median_us"], 1)
            for name, idx in (("gather-random", bt), ("gather-seq", seq))}


def used_workload(args):
    t = time.time()
    bench.main(["--out", os.path.join(args.out, "state_bench"), "--skip-router",
                "--decode-limit", str(args.used_scenarios)])
    common.free_memory()
    return time.time() - t


def child_main(args) -> dict:
    """Fresh, early-after, used-new, used-emptied (+ gathers) in this process."""
    import torch

    cases = [Case(args, k) for k in common.int_groups(args.scenarios)]
    early = [c.inputs() for c in cases]
    res = {c.sc.name.strip(): {"fresh": c.time(e), **{f"fresh {k}": v for k, v in
                                                       c.gather(e).items()},
                               "fresh segment": segment_of(e["cache"])}
           for c, e in zip(cases, early)}
    res["allocator fresh"] = allocator()
    res["used workload s"] = round(used_workload(args), 1)
    res["allocator used"] = allocator()
    for c, e in zip(cases, early):
        r = res[c.sc.name.strip()]
        r["early-after"] = c.time(e)
        new = c.inputs()
        r["used-new"] = c.time(new)
        r.update({f"used {k}": v for k, v in c.gather(new).items()})
        r["used segment"] = segment_of(new["cache"])
        del new
        common.free_memory()
        torch.cuda.empty_cache()
        emptied = c.inputs()
        r["used-emptied"] = c.time(emptied)
        del emptied
        common.free_memory()
    return res


def child_fragmented(args) -> dict:
    import torch

    hold, drop = [], []
    for i in range(400):  # 400 × 20 MB segments mapped, every other one unmapped again
        (hold if i % 2 else drop).append(torch.empty(20 << 20, dtype=torch.uint8, device="cuda"))
    del drop
    torch.cuda.empty_cache()
    res = {}
    for key in common.int_groups(args.scenarios):
        c = Case(args, key)
        inp = c.inputs()
        res[c.sc.name.strip()] = {"fragmented": c.time(inp), "segment": segment_of(inp["cache"])}
        del inp
        common.free_memory()
    res["allocator"] = allocator()
    return res


def child_expandable(args) -> dict:
    res = {}
    cases = [Case(args, k) for k in common.int_groups(args.scenarios)]
    for c in cases:
        inp = c.inputs()
        res[c.sc.name.strip()] = {"expandable-fresh": c.time(inp)}
        del inp
        common.free_memory()
    used_workload(args)
    for c in cases:
        inp = c.inputs()
        res[c.sc.name.strip()]["expandable-used-new"] = c.time(inp)
        del inp
        common.free_memory()
    return res


def main(argv=None) -> int:
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    if args.child:
        common.setup(False)
        result = {"main": child_main, "fragmented": child_fragmented,
                  "expandable": child_expandable}[args.child](args)
        common.write_json(os.path.join(args.out, f"state_{args.child}.json"), result)
        return 0
    report = {"env": None}
    for child, env in (("main", {}), ("fragmented", {}),
                       ("expandable", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})):
        t = time.time()
        cmd = [sys.executable, os.path.abspath(__file__), "--child", child, "--out", args.out,
               "--scenarios", args.scenarios, "--policies", args.policies, "--reps",
               str(args.reps), "--used-scenarios", str(args.used_scenarios)]
        run = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True)
        path = os.path.join(args.out, f"state_{child}.json")
        if run.returncode or not os.path.exists(path):
            common.say(f"{child}: FAILED rc={run.returncode}\n{run.stdout[-2000:]}"
                       f"{run.stderr[-3000:]}")
            continue
        with open(path, encoding="utf-8") as f:
            report[child] = json.load(f)
        common.say(f"== {child} process ({time.time() - t:.0f}s)")
        for name, row in report[child].items():
            common.say(f"  {name}: {json.dumps(row, ensure_ascii=False)}")
    common.setup(False)
    report["env"] = common.env_info(False)
    common.write_json(os.path.join(args.out, "state.json"), report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
