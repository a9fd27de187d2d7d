"""python3 -m tools.tune — measure launch tables on a device, choose rows, write them as data.

    # on each of two devices or more (one process = one run file)
    python3 -m tools.tune measure --sections router --out DIR/router.json
    # anywhere (CPU is fine): merge the runs of several machines, write
    python3 -m tools.tune choose DIR/*.json            # dry run: report + verification
    python3 -m tools.tune choose DIR/*.json --write    # specs/measured/<target>.json
    codegen regenerate
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time

if __package__ in (None, ""):  # `python3 tools/tune` — run as the package instead
    sys.exit("run the tuner as a module from the repository root: python3 -m tools.tune ...")

from . import ROOT  # noqa: E402  (sets sys.path for tools/common.py)

import common  # noqa: E402
from codegen.measured import SCORE_INPUTS as INPUT_AXES, TUNE_SECTIONS  # noqa: E402

RUN_FORMAT = "kspec-tune-run/2"  # /2: decode buckets name their inputs
SECTIONS = TUNE_SECTIONS  # (the data file's provenance checks its tunes name these)
WARM_TIMEOUT_S = 300.0  # the compile warm-up's bound (seconds)


def _shapes(text):
    return [tuple(int(v) for v in s.split("x")) for s in text.split(",")]


def _inputs(text):
    """'q_dtype=fp32,cache_dtype=fp32' -> {"q_dtype": "fp32", "cache_dtype": "fp32"}."""
    out = {}
    for item in text.split(","):
        axis, sep, value = item.partition("=")
        if not sep or axis.strip() not in INPUT_AXES:
            raise argparse.ArgumentTypeError(f"{item!r}: give AXIS=VALUE with AXIS one of "
                                             f"{', '.join(INPUT_AXES)}")
        out[axis.strip()] = int(value) if value.strip().isdigit() else value.strip()
    return out


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m tools.tune",
                                description=__doc__.split("\n\n")[0].split(" — ")[1])
    sub = p.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="measure this device (one run file)")
    m.add_argument("--out", required=True, help="run file to write (JSON)")
    m.add_argument("--sections", default="router,decode",
                   help=f"comma list of {', '.join(SECTIONS)} (default router,decode)")
    m.add_argument("--machine", help="machine label in the data file (default: the GPU's UUID)")
    m.add_argument("--rounds", type=int, default=5, help="interleaved rounds per bucket")
    m.add_argument("--per-round", type=int, default=3, help="replays per candidate per round")
    m.add_argument("--quick", action="store_true", help="a small sanity subset")
    m.add_argument("--near", action="store_true",
                   help="only candidates one launch parameter away from each bucket's current "
                        "row, in every section (a re-tune after a variant gains a parameter; "
                        "a target without measured rows gets every candidate)")
    m.add_argument("--budget-s", type=float, default=480.0,
                   help="stop timing after this many seconds, not counting the compile "
                        "warm-up (the rest is recorded as skipped; "
                        "choose keeps those buckets' rows)")
    m.add_argument("--jobs", type=int, default=None, help="compile workers (0: none)")
    m.add_argument("--shapes", type=_shapes, default=None,
                   help="router weight shapes only, e.g. 6144x128,3072x256")
    m.add_argument("--tokens", type=common.int_list, default=None,
                   help="router buckets serving these token counts only, e.g. 4,16,32")
    m.add_argument("--inputs", type=_inputs, default=None,
                   help="decode inputs other than the default (specs: MEASURED_SCORE), e.g. "
                        "q_dtype=fp32,cache_dtype=fp32 (scorer rows only: the selector's rows "
                        "are measured with the default inputs)")
    m.add_argument("--contexts", type=common.int_list, default=None,
                   help="decode contexts (tokens) only, e.g. 131072")
    m.add_argument("--requests", type=common.int_list, default=None,
                   help="decode request counts only (among the representatives), e.g. 1,4,16,64")
    m.add_argument("--programs", type=common.int_list, default=None,
                   help="attention program counts only (among the representatives), e.g. "
                        "1,2,4,8,16,32")
    m.add_argument("--groups", type=common.int_list, default=None,
                   help="attention GQA group sizes only, e.g. 8 (the other groups' buckets "
                        "keep their rows)")
    m.add_argument("--kv-dtypes", type=lambda t: tuple(v.strip() for v in t.split(",")),
                   default=None,
                   help="attention cache dtypes only, e.g. fp8e4m3 (the other inputs' buckets "
                        "keep their rows); DTYPE:SCALES tunes an fp8 cache with that scale "
                        "mode as its own input, e.g. fp8e4m3:per_token (until then it takes "
                        "the rows of the cache without scales)")
    m.add_argument("--modes", type=lambda t: tuple(v.strip() for v in t.split(",")),
                   default=None,
                   help="attention tables of these modes only: decode, prefill (the other "
                        "mode's buckets keep their rows)")
    m.add_argument("--query-lens", type=common.int_list, default=None,
                   help="decode attention at these query lengths only: 1 (the Q 1 rows), "
                        "4 (the Q >= 2 rows; the other's buckets keep their rows)")
    c = sub.add_parser("choose", help="choose rows from run files; --write writes them")
    c.add_argument("runs", nargs="+", help="run files of `measure` (machines)")
    c.add_argument("--write", action="store_true", help="write specs/measured/<target>.json")
    c.add_argument("--noise", type=float, default=None,
                   help="noise floor (relative; default choose.NOISE_FLOOR)")
    c.add_argument("--specs", default=os.path.join(ROOT, "specs"), help="spec directory")
    args = p.parse_args(argv)
    if args.command == "measure":
        args.sections = [s.strip() for s in args.sections.split(",") if s.strip()]
        if not args.sections or set(args.sections) - set(SECTIONS):
            p.error(f"--sections: a comma list of {', '.join(SECTIONS)}")
    return args


def measure(args, argv) -> int:
    """On the GPU: name the device's target, then record_run with the real device."""
    common.setup(False)
    import torch

    from codegen import registry

    from . import target
    from .kernels import GpuDevice
    from .space import Space

    if not torch.cuda.is_available():
        sys.exit("tune measure: needs a GPU (the CPU tests drive the tuner with a fake device)")
    reg = registry.load()
    facts = target.device_facts(torch)
    hw, declared = target.target_of(facts, reg.hardware)
    try:
        space = Space(reg, hw, facts["sms"], args.quick, args.inputs, near=args.near,
                      groups=args.groups, kv_dtypes=args.kv_dtypes,
                      modes=args.modes, query_lens=args.query_lens)
    except ValueError as e:
        sys.exit(f"tune measure: {e}")
    return record_run(args, argv, space, GpuDevice(space), facts, declared,
                      common.env_info(False))


def record_run(args, argv, space, dev, facts, declared, env, warm_up=None) -> int:
    """Warm up, measure, write the run file (every 30 s too, so a run cut off by the device's
    time limit still leaves what it measured)."""
    from . import measure as measure_mod, target, warm

    warm_up = warm.warm if warm_up is None else warm_up
    # a filter that leaves a section nothing to measure is a mistake, not an empty run
    empty = [f"--{flag} leaves no {section} representative"
             + (" (--quick measures fewer)" if args.quick else "")
             for section, flag, points in (
                 ("decode", "contexts / --requests",
                  lambda: space.decode_points(args.contexts, args.requests)),
                 ("attention", "programs", lambda: space.attn_points(args.programs)),
                 ("router", "shapes / --tokens",
                  lambda: list(space.router_buckets(args.shapes, args.tokens))))
             if section in args.sections and not points()]
    if empty:
        sys.exit("tune measure: " + "; ".join(empty))
    hw = space.target
    run = {"format": RUN_FORMAT,
           "target": {"name": hw.name, "declared": declared, "hardware": target.hardware_dict(hw)},
           "run": {"machine": args.machine or facts["machine"] or "unknown",
                   "date": env["date"], "device": facts["device"], "driver": facts["driver"],
                   "torch": env["torch"], "triton": env["triton"], "cuda": env.get("cuda"),
                   "l2_flush": env["l2_flush"], "sms": facts["sms"], "rounds": args.rounds,
                   "per_round": args.per_round, "quick": args.quick, "near": args.near,
                   "command": "python3 -m tools.tune " + " ".join(argv)},
           "sections": args.sections, "inputs": space.inputs, "points": [], "skipped": [],
           "errors": []}
    common.say(f"tune: {facts['device']} ({facts['sms']} SMs) = target {hw.name}"
               f"{'' if declared else ' (new)'}; machine "
               f"{run['run']['machine']}; {args.rounds} rounds × {args.per_round} replays; "
               f"tf32x3 {'yes' if space.tf32x3 else 'no'}, pdl {'yes' if space.pdl else 'no'}")
    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    # The warm-up is bounded on its own, not by the timing budget: a pool stopped early
    # leaves the rest to the timing loop, which compiles one kernel at a time (the router's
    # 2200 compiles took 60+ s on 14 workers, far longer serially).
    run["warm"] = warm_up(space, args.sections, args.jobs, WARM_TIMEOUT_S,
                          args.shapes, args.contexts, args.requests, args.programs, args.tokens)
    r = measure_mod.Run(space, dev, rounds=args.rounds, per_round=args.per_round,
                        budget_s=args.budget_s)
    saved = [0.0]

    def save(final=False):
        if final or time.time() - saved[0] > 30:
            saved[0] = time.time()
            run.update(points=r.points, planned=r.planned, skipped=r.skipped,
                       errors=r.errors, elapsed_s=time.time() - r.t0)
            common.write_json(args.out, run, indent=None)

    r.progress = save
    for section, go in (("decode", lambda: r.decode(args.contexts, args.requests)),
                        ("prefill", r.prefill),
                        ("attention", lambda: r.attention(args.programs)),
                        ("router", lambda: r.router(args.shapes, args.tokens))):
        if section in args.sections:
            try:
                go()
            except Exception as e:  # noqa: BLE001 - keep what the other section measured
                import traceback

                traceback.print_exc()
                r.errors.append(f"{section}: {type(e).__name__}: {e}")
    save(final=True)
    common.say(f"run file: {args.out} ({len(r.points)} points, {len(r.skipped)} skipped, "
               f"{len(r.errors)} errors)")
    return 2 if r.errors else 0


def choose(args, argv, say=common.say) -> int:
    from codegen import measured, registry

    from . import choose as choose_mod, target, write
    from .space import Space

    runs = []
    for path in args.runs:
        with open(path, encoding="utf-8") as f:
            run = json.load(f)
        if run.get("format") != RUN_FORMAT:
            sys.exit(f"tune choose: {path} is not a run file of `measure` ({RUN_FORMAT})")
        stale = [p["rep"] for p in run["points"] if p["table"] == "router_gemm"
                 and any("x_dtype" not in b for b in p["buckets"])]
        if stale:
            sys.exit(f"tune choose: {path} measured the router before its rows were keyed by "
                     f"x dtype (e.g. {stale[0]}): measure the router again")
        runs.append(run)
    names = {run["target"]["name"] for run in runs}
    if len(names) != 1:
        sys.exit(f"tune choose: the runs measured different targets: {sorted(names)}")
    name = names.pop()
    reg = registry.load(args.specs)
    write.refuse_hand_written(reg, name)
    hw = reg.hardware.get(name) or target.hardware_from(runs[0]["target"]["hardware"])
    inputs = [run["inputs"] for run in runs if {"decode", "prefill"} & set(run["sections"])]
    if any(i != inputs[0] for i in inputs):
        sys.exit("tune choose: the decode / prefill runs measured different inputs; choose "
                 "each inputs' runs apart")
    space = Space(reg, hw, runs[0]["run"]["sms"] or 132, inputs=inputs[0] if inputs else None)
    noise = choose_mod.NOISE_FLOOR if args.noise is None else args.noise
    path = write.data_file(name, args.specs)
    data = measured.read(path) if os.path.exists(path) else write.skeleton(space, hw)
    if inputs:
        write.add_input_rows(data, space)
    if any("prefill" in run["sections"] for run in runs):
        write.add_prefill_rows(data, space)
    if any("attention" in run["sections"] for run in runs):
        # the tables the runs measured, each with the inputs measured there (`--kv-dtypes`
        # may name a scale mode the default inputs lack; `--modes` one table of two)
        attn_inputs: dict = {}
        for run in runs:
            for point in run["points"]:
                if point["table"] in ("sparse_attn_decode", "sparse_attn_prefill"):
                    i = {k: v for k, v in point["buckets"][0].items()
                         if k not in ("query_len", "programs")}
                    if i not in attn_inputs.setdefault(point["table"], []):
                        attn_inputs[point["table"]].append(i)
        write.add_attention_rows(data, space, attn_inputs)
    rows, report, labels = choose_mod.choose(runs, space, noise, data["provenance"]["runs"])
    say(f"tune choose: target {name}; runs " + ", ".join(labels))
    warning = choose_mod.coverage_warning(runs)
    if warning:
        say(f"WARNING {warning} (README: How to tune a GPU)")
    for line in report:
        say(line)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    command = "python3 -m tools.tune choose " + " ".join(
        os.path.basename(a) if a in args.runs else a for a in argv[1:])
    write.update(data, rows, runs, labels, command, date, noise)
    if not rows:
        say("tune choose: no bucket could be chosen; nothing to write")
        return 1
    if args.write:
        written = write.write(data, rows, args.specs)
        say(f"wrote {os.path.relpath(written, ROOT)} ({len(rows)} rows chosen); now "
            f"`codegen regenerate` and review generated/DISPATCH.md")
    else:
        write.verify(data, rows, args.specs)
        say(f"dry run: {len(rows)} rows chosen, the file loads; --write writes "
            f"{os.path.relpath(path, ROOT)}")
    return 0


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    return measure(args, argv) if args.command == "measure" else choose(args, argv)


if __name__ == "__main__":
    sys.exit(main())
