"""Device study: did a re-tune help? For the bench's router and sparse-attention rows, the launch
an earlier version of the measured data file gives (specs/measured/<target>.json at a git
revision, or a file) against the launch the current tables give, timed interleaved in one
process with an empty kernel (graph replay, L2 flushed, the order rotating each round:
`tune.measure.interleave`). Rows whose two launches are the same are listed, not timed. An
attention row is also timed inside `sparse_decode_step` (the attention a programmatic dependent
of the indexer), which the tuner does not measure.

Benches of two tables on different machines cannot answer this: H200s differ by up to 13 %
on these launch-bound rows, more than most of what a re-tune moves. Run it on two machines.

    python3 tools/launch_compare.py OUTDIR --old REV          # H200: OUTDIR/launch_compare.json
    python3 tools/launch_compare.py OUTDIR --old REV --only router
    python3 tools/launch_compare.py OUTDIR --old REV --only attention --kv fp8e4m3:per_token
    python3 tools/launch_compare.py OUTDIR --old REV --smoke  # CPU interpreter, tiny rows
    # anywhere, with the files of two machines: put back each row whose old launch was faster
    # on every machine (a dry run without --write)
    python3 tools/launch_compare.py --restore A/launch_compare.json B/launch_compare.json --write

A parameter a variant gained after REV takes the value that reproduces the launch REV ran
(the launchers' defaults: block_e 1, merge_kernel False, ...).
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path[:0] = [ROOT, os.path.join(ROOT, "tools")]
import common  # noqa: E402
import targets  # noqa: E402

# keys of a data-file row that are not bucket axes
ROW_FIELDS = ("kernel", "variant", "params", "source", "measured")
MARGIN = 0.01  # --restore: how much slower the new launch must be (median over machines)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", nargs="?", help="output directory")
    p.add_argument("--old", help="git revision (its specs/measured/<target>.json) or a data file")
    p.add_argument("--restore", nargs="+", metavar="RESULT",
                   help="launch_compare.json files of this --old (one per machine): put back "
                        "the old row of every bucket whose old launch won on each of them")
    p.add_argument("--margin", type=float, default=MARGIN,
                   help="--restore: how much slower (new/old - 1) the new launch must be at "
                        f"the median over the machines (default {MARGIN:g}); it must be "
                        "slower on each of them")
    p.add_argument("--judge", choices=("alone", "step"), default="alone",
                   help="--restore: judge by the launches' own times (default) or, for "
                        "attention rows, by their times inside sparse_decode_step")
    p.add_argument("--write", action="store_true",
                   help="--restore: write the data file (else a dry run)")
    p.add_argument("--data", default=None,
                   help="--restore: the data file to change (default specs/measured/<target>.json)")
    p.add_argument("--target", default="sm_90", help="measured target (default sm_90)")
    p.add_argument("--only", choices=("router", "attention"), default=None)
    p.add_argument("--kv", default=("bf16", "none"), type=_kv_option,
                   help="the attention rows' cache dtype and scale mode, as bench_attn.py "
                        "takes them (default bf16)")
    p.add_argument("--smoke", action="store_true", help="CPU interpreter, tiny rows")
    args = p.parse_args(argv)
    if args.restore is None and (args.out is None or args.old is None):
        p.error("give OUTDIR and --old (a comparison), or --restore RESULT...")
    return args


def _kv_option(text):
    import bench_attn

    return bench_attn.kv_option(text)


def old_tables(old: str, target: str) -> dict:
    """The data file of ``old`` (a path, or a git revision of the repository)."""
    if os.path.isfile(old):
        with open(old, encoding="utf-8") as f:
            return json.load(f)
    text = subprocess.run(["git", "show", f"{old}:specs/measured/{target}.json"], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout
    return json.loads(text)


# axes the data format gained since a file was written (kspec-measured-target/5: decode's
# query_len); a row of such a file holds every value of the axis it lacks
LATER_AXES = ("query_len",)


def row_for(rows: list, point: dict) -> dict | None:
    """The first data-file row whose bucket holds ``point`` (axis -> value): a [lo, hi] range
    (hi None: unbounded) holds the values in it, any other value only itself; an axis of
    LATER_AXES the row lacks, every value."""
    for row in rows:
        axes = {k: v for k, v in row.items() if k not in ROW_FIELDS}
        if not set(axes) <= set(point) or set(point) - set(axes) - set(LATER_AXES):
            continue
        ok = True
        for axis, want in axes.items():
            got = point[axis]
            if isinstance(want, list) and len(want) == 2 and isinstance(got, int) \
                    and not isinstance(got, bool):
                lo, hi = want
                ok = lo <= got and (hi is None or got <= hi)
            else:
                ok = want == (list(got) if isinstance(got, tuple) else got)
            if not ok:
                break
        if ok:
            return row
    return None


# the inputs of an attention row; the rest of its point is the programs
ATTN_INPUTS = ("q_dtype", "kv_dtype", "scales", "group", "head_dim")


def serving_row(table: str, rows: list, point: dict) -> dict | None:
    """The data-file row of ``rows`` (table ``table``) that serves ``point``: `row_for`, where
    an attention input without rows of its own takes those of the input it is measured as
    (specs/sparse_attn.py MEASURED_AS: an fp8 e5m2 or scaled cache, an fp16 q, an fp8 cache
    in a file from before it had rows)."""
    if not table.startswith("sparse_attn"):
        return row_for(rows, point)
    from specs import sparse_attn as spec

    have = [dict(t) for t in dict.fromkeys(tuple((k, r[k]) for k in ATTN_INPUTS)
                                           for r in rows)]
    served = spec.measured_as({k: point[k] for k in ATTN_INPUTS}, have)
    return None if served is None else row_for(rows, {**point, **served})


def router_rows(smoke: bool):
    """(K, N, M, x dtype) of the router bench rows vLLM is compared on."""
    if smoke:
        return [(4096, 8, m, x) for m in (1, 5) for x in ("bf16", "fp32")]
    return [(K, N, m, x) for (K, N, x) in targets.VLLM_ROUTER_US for m in (1, 4, 8, 16, 32)]


def attention_rows(smoke: bool):
    """(Hq, Hkv, R, context, Q) of the sparse-attention bench rows."""
    if smoke:
        return [(16, 1, 2, 1024, 1), (8, 2, 2, 512, 2)]
    return list(targets.VLLM_ATTN_US)


def router_row(K, N, M, x_dtype) -> tuple:
    """(label, data-file table, bucket point) of a router bench row."""
    return (f"router ({K},{N}) M{M} {x_dtype}", "router_gemm",
            {"shape": [K, N], "x_dtype": x_dtype, "num_tokens": M})


def attention_row(row, kv=("bf16", "none")) -> tuple:
    """(label, data-file table, bucket point) of a sparse-attention bench row (D 128) over a
    cache of ``kv`` (dtype, scale mode; a bf16 q, an fp16 one over an fp16 cache as
    bench_attn.py times it); the label names the cache unless it is bf16."""
    import bench_attn

    Hq, Hkv, R, ctx, Q = row
    dtype, scales = kv
    cache = "" if dtype == "bf16" else f" {dtype}" + ("" if scales == "none" else f":{scales}")
    return (f"attention {Hq}/{Hkv} R{R} {ctx} tokens Q{Q}{cache}", "sparse_attn_decode",
            dict(q_dtype="fp16" if dtype == "fp16" else "bf16", kv_dtype=dtype, scales=scales,
                 group=Hq // Hkv, head_dim=bench_attn.D, query_len=Q, programs=R * Q * Hkv))


def bench_rows(smoke: bool, kv=("bf16", "none")) -> dict:
    """label -> (table, point) of every bench row compared (attention over a cache of ``kv``)."""
    rows = [router_row(*r) for r in router_rows(smoke)] + \
        [attention_row(r, kv) for r in attention_rows(smoke)]
    return {label: (table, point) for label, table, point in rows}


def compare_router(old: dict, hw: str, smoke: bool, say) -> list:
    import torch

    from generated import moe_router as mr

    dev = "cpu" if smoke else "cuda"
    g = torch.Generator(device=dev).manual_seed(5)
    dummy = torch.zeros(16, dtype=torch.int32, device=dev)
    out, weights = [], {}
    for K, N, M, x_dtype in router_rows(smoke):
        label, table, point = router_row(K, N, M, x_dtype)
        new = mr.explain_router_gemm(K, N, M, hw, x_dtype)
        row = row_for(old.get(table, []), point)
        if row is None:
            say(f"{label}: no row in the old file")
            continue
        prepare = {"per_expert": mr.prepare_router_gemm,
                   "splitk": mr.prepare_router_gemm_splitk}
        launches = {"old": (row["kernel"], completed(prepare[row["kernel"]], row["params"])),
                    "new": (new["kernel"], _router_params(new))}
        record = {"row": label, "old": launches["old"], "new": launches["new"]}
        if launches["old"] == launches["new"]:
            say(f"{label}: same launch")
            out.append({**record, "same": True})
            continue
        if (K, N) not in weights:
            weights.clear()
            w_dtype = mr.ROUTER_GEMM_LIMITS[(K, N)][0]
            weights[(K, N)] = (torch.randn((N, K), generator=g, device=dev)
                               * K ** -0.5).to(w_dtype)
        w = weights[(K, N)]
        x = torch.randn((M, K), generator=g, device=dev).to(common.torch_dtype(x_dtype))
        logits = torch.empty((M, N), dtype=torch.float32, device=dev)
        calls = {"empty kernel": lambda: common.launch_empty(dummy)}
        for name, (kernel, params) in launches.items():
            run = prepare[kernel](x, w, **params)
            calls[name] = lambda run=run: run(x, w, logits)
        us = common.interleaved_medians(calls, smoke)
        say(f"{label}: old {us['old']:.2f}  new {us['new']:.2f}  (empty {us['empty kernel']:.2f})"
            f"  new/old {us['new'] / us['old']:.3f}")
        out.append({**record, "us": us})
    return out


def completed(launcher, params: dict) -> dict:
    """``params`` with the keyword defaults of ``launcher`` it lacks (parameters a variant
    gained after the old file was written: their defaults reproduce the launch it ran)."""
    import inspect

    defaults = {k: p.default for k, p in inspect.signature(launcher).parameters.items()
                if p.default is not inspect.Parameter.empty}
    return {**{k: v for k, v in defaults.items() if k not in params}, **params}


def _router_params(info: dict) -> dict:
    """The launch parameters of an explain_router_gemm answer."""
    from codegen.families import router_gemm as rg

    names = [p.name for p in (rg.SPLITK_PARAMS if info["kernel"] == "splitk" else rg.PARAMS)]
    return {k: info[k] for k in names}


@functools.lru_cache(maxsize=1)
def _variants() -> dict:
    from codegen import registry

    return registry.load().variants


def variant_defaults(variant: str, params: dict) -> dict:
    """``params`` with the declared defaults of ``variant`` it lacks (see `completed`)."""
    declared = _variants()[variant].defaults
    return {**{k: v for k, v in declared.items() if k not in params}, **params}


def compare_attention(old: dict, hw: str, smoke: bool, say, kv=("bf16", "none")) -> list:
    import torch

    import bench_attn
    from generated import sparse_attention as sa

    dev = "cpu" if smoke else "cuda"
    dummy = torch.zeros(16, dtype=torch.int32, device=dev)
    out = []
    for row in attention_rows(smoke):
        label, table, point = attention_row(row, kv)
        new = sa.explain_sparse_attn("decode", hw, point["q_dtype"], point["kv_dtype"],
                                     point["scales"], point["group"], point["head_dim"],
                                     point["programs"], point["query_len"])
        old_row = serving_row(table, old.get(table, []), point)
        if old_row is None:
            say(f"{label}: no row in the old file")
            continue
        new_launch = {"variant": new["variant"],
                      **{k: v for k, v in new.items() if k not in ("hardware", "variant",
                                                                   "rule")}}
        launches = {"old": {"variant": old_row["variant"],
                            **variant_defaults(old_row["variant"], old_row["params"])},
                    "new": new_launch}
        record = {"row": label, "old": launches["old"], "new": launches["new"]}
        if launches["old"] == launches["new"]:
            say(f"{label}: same launch")
            out.append({**record, "same": True})
            continue
        case = bench_attn.with_kv(bench_attn.make_case(row, torch.device(dev)), kv)
        output = torch.empty(case["q"].shape, dtype=torch.bfloat16, device=dev)
        calls = {"empty kernel": lambda: common.launch_empty(dummy)}
        for name, launch in launches.items():
            calls[name] = lambda launch=launch: sa.sparse_attn_with_launch(
                launch, "decode", **case, output=output)
        us = common.interleaved_medians(calls, smoke)
        # the same launches inside sparse_decode_step, a programmatic dependent of the indexer
        # (its programs start while the indexer's last ones run): what a serving step pays
        steps = step_pair(sa, case, row, launches, dev)
        step_us = common.interleaved_medians({"old": steps["old"], "new": steps["new"]}, smoke)
        say(f"{label}: old {us['old']:.2f}  new {us['new']:.2f}  (empty {us['empty kernel']:.2f})"
            f"  new/old {us['new'] / us['old']:.3f};  in the step: old {step_us['old']:.2f}  "
            f"new {step_us['new']:.2f}  new/old {step_us['new'] / step_us['old']:.3f}")
        out.append({**record, "us": us, "step_us": step_us})
        del case, steps
        common.free_memory()
    return out


def step_pair(sa, case, row, launches: dict, dev) -> dict:
    """name -> a zero-argument `sparse_decode_step` call (bench_attn's index inputs) whose
    attention runs ``launches[name]``."""
    import torch

    import bench_attn

    Hq, Hkv, R, ctx, Q = row
    T, mb, block = R * Q, common.cdiv(ctx, bench_attn.BLOCK), bench_attn.BLOCK
    topk = case["topk_idx"].shape[2]
    g = torch.Generator(dev).manual_seed(1)
    d_idx = case["q"].shape[2]
    idx_q = torch.randn((T, Hkv, d_idx), generator=g, device=dev, dtype=torch.bfloat16)
    idx_cache = torch.randn((R * mb + 1, block, d_idx), generator=g, device=dev,
                            dtype=torch.bfloat16)
    idx_table = torch.randperm(R * mb + 1, generator=g, device=dev)[:R * mb].view(
        R, mb).to(torch.int32)
    ids = torch.empty((Hkv, T, topk), dtype=torch.int32, device=dev)
    counter = torch.zeros((Hkv, T), dtype=torch.int32, device=dev)
    output = torch.empty(case["q"].shape, dtype=torch.bfloat16, device=dev)
    calls = {}
    for name, launch in launches.items():
        calls[name] = lambda launch=launch: sa.sparse_decode_step_with_launch(
            launch, idx_q, idx_cache, idx_table, case["q"], case["kv"], case["block_table"],
            case["seq_lens"], ctx, topk, 0, 1, Hkv, Q, Q, case["sm_scale"], output,
            case.get("k_scale"), case.get("v_scale"),
            topk_out=ids, completion_counter=counter, attention_pdl=True, attention_per_sm=0)
    return calls


def _holds(outer, inner) -> bool:
    """True when bucket axis value ``outer`` holds ``inner``: equal, or a [lo, hi] range (hi
    None: unbounded) around the range ``inner``."""
    if outer == inner:
        return True
    if not (isinstance(outer, list) and isinstance(inner, list) and len(outer) == len(inner) == 2):
        return False
    (lo, hi), (ilo, ihi) = outer, inner
    return lo <= ilo and (hi is None or (ihi is not None and ihi <= hi))


def restore(results: list, data: dict, old: dict, margin: float, say,
            judge: str = "alone") -> list:
    """Put the old file's row back into ``data`` (a data file's content, changed in place) for
    every bucket where each timed bench row it serves was slower under the new launch on every
    machine of ``results`` (launch_compare.json contents) and by more than ``margin`` at the
    median over them (one machine's noise is about 1 %: a row slower on each of four machines
    by 0.8–15 % is not noise, though one machine alone is within it), where the
    current row is still the launch timed as new and the old row the launch timed as old. The
    old row comes back with its measurements and the runs they cite (described once: a run
    the current file describes under another label keeps that label). An old row whose bucket
    holds the current one (the tuner split a range since) comes back with the current bounds,
    and its own in ``measured.bucket``.
    ``judge``: "alone" reads the launches' own times, "step" the attention rows' times inside
    `sparse_decode_step` (rows without them are skipped). Returns the restored rows as (table,
    what was timed, the labels of the runs the row cites)."""
    from codegen import measured

    # (the cache of the files that timed attention rows: router rows do not depend on it)
    kvs = {tuple(r.get("kv", ("bf16", "none"))) for r in results
           if any(rec["row"].startswith("attention") for rec in r["rows"])}
    if len(kvs) > 1:
        raise SystemExit(f"the result files timed different caches: {sorted(kvs)}")
    rows_of = bench_rows(results[0]["env"].get("smoke", False),
                         kvs.pop() if kvs else ("bf16", "none"))
    # (table, id of the current row) -> [current row, point, [(label, ratios)], old launch]
    by_bucket: dict = {}
    for label in dict.fromkeys(rec["row"] for res in results for rec in res["rows"]):
        recs = [next((r for r in res["rows"] if r["row"] == label), None) for res in results]
        if any(r is None for r in recs) or label not in rows_of:
            say(f"{label}: not a bench row of every result file: skipped")
            continue
        table, point = rows_of[label]
        current = serving_row(table, data[table], point)
        if current is None:
            say(f"{label}: no row of the current file serves it: skipped")
            continue
        if not all(_is_launch_of(table, current, r["new"]) for r in recs):
            say(f"{label}: the current row is not the launch timed as new: skipped")
            continue
        key = "step_us" if judge == "step" else "us"
        if judge == "step" and any("us" in r and key not in r for r in recs):
            say(f"{label}: not timed inside the step: skipped")
            continue
        ratios = [r[key]["new"] / r[key]["old"] if key in r else 1.0 for r in recs]
        timed_old = recs[0]["old"]  # the old launch as timed, later parameters filled in
        if any(r["old"] != timed_old for r in recs):
            raise SystemExit(f"{label}: the result files timed different old launches")
        by_bucket.setdefault((table, id(current)), [current, point, [], timed_old])[2].append(
            (label, ratios))
    restored = []
    for (table, _), (current, point, rows, timed_old) in by_bucket.items():
        shown = "; ".join(f"{lb} new/old " + "/".join(f"{x:.3f}" for x in ratios)
                          for lb, ratios in rows)
        if not all(min(ratios) > 1 and statistics.median(ratios) > 1 + margin
                   for _, ratios in rows):
            continue
        before = serving_row(table, old[table], point)
        if before is None or not _is_launch_of(table, before, timed_old):
            say(f"restore: {shown}: the old file's row is not the launch timed as old: kept")
            continue
        axes = [k for k in current if k not in ROW_FIELDS]
        # (an axis the old file's rows lack, LATER_AXES: its rows hold every value of it)
        if any(not _holds(before[a], current[a]) for a in axes if a in before):
            say(f"restore: {shown}: the old row's bucket does not hold the current one: kept")
            continue
        label_of = {run: _adopt_run(data["provenance"]["runs"], run,
                                    old["provenance"]["runs"][run])
                    for run in _cited_runs(before)}
        # the params as timed (with the defaults of parameters added since the old file) and
        # the measurements under the labels the runs have in this file
        if table == "router_gemm":
            launch = {"kernel": timed_old[0], "params": timed_old[1]}
        else:
            launch = {"variant": timed_old["variant"],
                      "params": {k: v for k, v in timed_old.items() if k != "variant"}}
        measurements = _relabelled(before["measured"], label_of)
        bucket = measured.TABLES[table].bucket  # the axis a group's rows tile
        if before[bucket] != current[bucket] and "bucket" not in measurements:
            measurements["bucket"] = before[bucket]  # the range they were taken for
        if "query_len" not in before and current.get("query_len", [1, 1]) != [1, 1]:
            measurements.setdefault("query_len", [1, 1])  # (older files: measured at Q 1)
        before = {**before, **{a: current[a] for a in axes}, **launch,
                  "measured": measurements}
        data[table][data[table].index(current)] = before
        restored.append((table, shown, sorted(set(label_of.values()))))
        say(f"restore: {shown}: {before[_choice(table)]} {before['params']}")
    return restored


def _adopt_run(runs: dict, label: str, facts: dict) -> str:
    """The label under which ``runs`` (a data file's, changed in place) describes the run of
    ``facts``: its present label if it holds the run already, else ``label`` or, if another run
    holds that, ``label#n``."""
    for present, known in runs.items():
        if known == facts:
            return present
    base, new, n = label.split("#")[0], label, 1
    while new in runs:
        n += 1
        new = f"{base}#{n}"
    runs[new] = facts
    return new


def _relabelled(measured: dict, label_of: dict) -> dict:
    """``measured`` with its run labels renamed by ``label_of``."""
    out = json.loads(json.dumps(measured))
    for part in ("winner", "runner_up"):
        for rep, by_run in ((out.get(part) or {}).get("us") or {}).items():
            out[part]["us"][rep] = {label_of.get(run, run): us for run, us in by_run.items()}
    return out


def _is_launch_of(table: str, row: dict, launch) -> bool:
    """True when ``launch`` (a result record's, JSON) is what data-file ``row`` launches (a
    parameter the row lacks takes the launch's value: one added since the row was written)."""
    if table == "router_gemm":
        choice, params = launch
    else:
        choice, params = launch["variant"], {k: v for k, v in launch.items() if k != "variant"}
    return choice == row[_choice(table)] and all(params.get(k) == v
                                                 for k, v in row["params"].items())


def _choice(table: str) -> str:
    return "kernel" if table == "router_gemm" else "variant"


def _cited_runs(row: dict) -> set:
    labels = set()
    for part in ("winner", "runner_up"):
        for by_run in ((row.get("measured") or {}).get(part) or {}).get("us", {}).values():
            labels |= set(by_run)
    return labels


def file_digest(data: dict) -> str:
    """A data file's identity, whatever its formatting."""
    import hashlib

    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def main_restore(args) -> None:
    from codegen import measured
    from tools.tune import write

    results = []
    for path in args.restore:
        with open(path, encoding="utf-8") as f:
            results.append(json.load(f))
    olds = {r["old"] for r in results}
    if len(olds) != 1 or len({r["target"] for r in results}) != 1:
        raise SystemExit(f"the result files compare different old tables or targets: {olds}")
    old = old_tables(olds.pop(), results[0]["target"])
    digests = {r["old_digest"] for r in results if "old_digest" in r}
    if digests and digests != {file_digest(old)}:
        raise SystemExit(f"--old {results[0]['old']} is not the file the results timed")
    path = args.data or os.path.join(ROOT, "specs", "measured", f"{results[0]['target']}.json")
    data = measured.read(path)
    machines = [r["env"].get("machine", "?") for r in results]
    restored = restore(results, data, old, args.margin, common.say, args.judge)
    common.say(f"{len(restored)} rows restored ({', '.join(machines)})")
    if not restored or not args.write:
        if restored:
            common.say("dry run: --write writes " + os.path.relpath(path, ROOT))
        return
    import datetime
    margin = ("" if args.margin == MARGIN else f" --margin {args.margin:g}") + (
        "" if args.judge == "alone" else f" --judge {args.judge}")
    data["provenance"]["tunes"].append({
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "command": "python3 tools/launch_compare.py --restore " + " ".join(
            os.path.relpath(p, ROOT) for p in args.restore) + margin + " --write",
        "rule": f"the previous row put back: its launch was faster than the chosen one on "
                f"every machine and by more than {args.margin:g} at the median"
                + (" inside sparse_decode_step" if args.judge == "step" else "") + ", timed "
                "interleaved (tools/launch_compare.py)",
        "sections": sorted({SECTIONS[table] for table, _, _ in restored}),
        "runs": sorted({run for _, _, runs in restored for run in runs}),
        "machines": machines, "rows": len(restored),
        "restored": [shown for _, shown, _ in restored]})
    write.prune(data)
    measured.write(path, data)
    common.say("wrote " + os.path.relpath(path, ROOT))


# data-file table -> tuner section
SECTIONS = {"router_gemm": "router", "sparse_attn_decode": "attention"}


def main(argv=None):
    args = parse_args(argv)
    if args.restore:
        main_restore(args)
        return
    common.setup(args.smoke)
    os.makedirs(args.out, exist_ok=True)
    old = old_tables(args.old, args.target)
    hw = args.target  # its tables, also on the CPU interpreter (--smoke)
    say = common.say
    say(f"launch_compare: old {args.old}, new = the current tables; target {hw}")
    result = {"env": common.env_info(args.smoke), "old": args.old,
              "old_digest": file_digest(old), "target": hw, "kv": list(args.kv), "rows": []}
    sections = [args.only] if args.only else ["router", "attention"]
    for section in sections:
        if section == "router":
            result["rows"] += compare_router(old, hw, args.smoke, say)
        else:
            result["rows"] += compare_attention(old, hw, args.smoke, say, args.kv)
        with open(os.path.join(args.out, "launch_compare.json"), "w") as f:
            json.dump(result, f, indent=1)
    timed = [r for r in result["rows"] if "us" in r]
    if timed:
        ratios = [r["us"]["new"] / r["us"]["old"] for r in timed]
        say(f"{len(timed)} rows timed, {len(result['rows']) - len(timed)} the same launch; "
            f"new/old median {statistics.median(ratios):.3f}, best {min(ratios):.3f}, "
            f"worst {max(ratios):.3f}")


if __name__ == "__main__":
    main()
