"""tools/bench.py's report: the tables with PASS/FAIL per target (tools/targets.py), the plot,
and the spread of several runs.

    python3 tools/bench_report.py RUN/bench.json       # that run's tables, as bench.py prints them
    python3 tools/bench_report.py RUN1/bench.json RUN2/bench.json ...
        # per row: each run's median µs, min, max and spread = (max - min) / min; each target
        # judged on the worst run, and how many runs pass it
    python3 tools/bench_report.py RUN/bench.json --condense docs/results/DATE_h200_X.json \
        --source "what the run was"   # a result of record

It reads bench.json and the condensed results of record (docs/results/*_bench*.json).
"""
from __future__ import annotations

import argparse
import json
import math
import re

import common  # tools/common.py
import targets  # tools/targets.py

# a result of record names its rows "R16 128k mix Q4" or "R4 32k Q4 fp8kv" (bench.json pads
# the fields; the kind, tools/bench.py's KINDS, is absent for bf16)
RECORD_NAME = re.compile(r"R(\d+) (\d+)k( mix)? Q(\d+)(?: (\w+))?$")
RECORD_CACHE_BYTES_PER_TOKEN = 128 * 2  # the bench's shape: head_dim 128, bf16 cache
ISSUES = {targets.ISSUE18: "input kinds: vLLM's fp32 / fp8 times, fp8 over bf16",
          targets.ISSUE20: "vLLM's CUDA router per x dtype, F.linear, small contexts",
          targets.ISSUE15: "vLLM's indexer measured side by side on one H200",
          targets.ISSUE5: "older, still open"}


def _ratio(x):
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x:.1f}" if x < 1000 else f"{x:.0e}"


def router_goal(v) -> str:
    """'≤ vLLM ≤ 6.44 µs PASS' (vLLM's time + slack) or 'vs F.linear 8.3× ≥ 2.0× PASS'."""
    if v["unit"] == "×":
        got = "-" if v["value"] is None else f"{v['value']:.1f}×"
        return f"{v['what']} {got} {v['op']} {v['limit']:.1f}× {pf(v['pass'])}"
    return f"{v['what']} {v['op']} {common.fmt_us(v['limit'])} µs {pf(v['pass'])}"


def pf(flag):
    return "-" if flag is None else ("PASS" if flag else "FAIL")


def loads_line(report):
    loads = report.get("dependent_loads") or {}
    return "dependent cold loads " + ", ".join(
        f"{h}: {common.fmt_us(t.get('median_us'))}" for h, t in loads.items()) + " µs"


# ---------------------------------------------------------------------------------------------
# loading


def load_run(path):
    """A bench.json or a condensed result of record, in bench.json's shape, each row with its
    target verdicts judged again (the targets may have changed since the run)."""
    with open(path, encoding="utf-8") as f:
        report = json.load(f)
    for row in report.get("decode") or []:
        if "us" in row:  # a result of record: the µs per policy, the device's own first
            R, ctx, mixed, Q, kind = RECORD_NAME.match(" ".join(row["name"].split())).groups()
            R, ctx, Q = int(R), int(ctx) * 1024, int(Q)
            row.update(R=R, ctx=ctx, Q=Q, mixed=bool(mixed), kind=kind or "bf16",
                       ours={hw: {"median_us": t} for hw, t in row["us"].items()},
                       target_policy=next(iter(row["us"])), policies=list(row["us"]),
                       torch={"median_us": row.get("torch_us")})
            row.setdefault("cache", "bf16")
            row.setdefault("cache_bytes", R * ctx * RECORD_CACHE_BYTES_PER_TOKEN)
    for row in report.get("router") or []:
        if "ours_us" in row:
            row.update(x_dtype=row["x"], ours={"median_us": row["ours_us"]},
                       linear={"median_us": row.get("linear_us")})
            if "ours_in_a_row_us" in row:
                row["ours_in_a_row"] = {"median_us": row["ours_in_a_row_us"]}
    if "empty_kernel_us" in report:
        report["empty_kernel"] = {"median_us": report["empty_kernel_us"]}
    if report.get("mode") != "smoke":
        targets.attach(report)
    return report


def row_label(kind, row):
    if kind == "decode":
        return " ".join(row["name"].split())
    return f"({row['K']},{row['N']}) M{row['M']} {row['x_dtype']}"


def rows_by_label(reports, kind):
    """{label: [the row in each run, None where a run lacks it]}, in the order first seen."""
    out = {}
    for i, report in enumerate(reports):
        for row in report.get(kind) or []:
            out.setdefault(row_label(kind, row), [None] * len(reports))[i] = row
    return out


def router_time(row):
    return (row.get("ours") or {}).get("median_us")


# ---------------------------------------------------------------------------------------------
# target verdicts


def fmt_value(x, unit):
    if x is None:
        return "-"
    return common.fmt_us(x) if unit == "µs" else f"{x:.2f}"


def worst(verdicts):
    """The worst run's verdict on one target (a missing value counts as the worst), with how
    many runs pass."""
    def badness(v):
        if v["value"] is None:
            return math.inf
        return v["value"] if v["op"] == targets.LE else -v["value"]

    return {**max(verdicts, key=badness), "runs": len(verdicts),
            "runs_pass": sum(v["pass"] for v in verdicts)}


def judged(reports):
    """[(kind, label, worst verdict, rows)] for every target of every row of the runs."""
    out = []
    for kind in ("decode", "router"):
        for label, rows in rows_by_label(reports, kind).items():
            per_target = {}
            for row in rows:
                for v in (row or {}).get("targets") or []:
                    per_target.setdefault((v["issue"], v["what"]), []).append(v)
            out.extend((kind, label, worst(vs), rows) for vs in per_target.values())
    return out


def verdict_text(v, n_runs):
    runs = f" ({v['runs_pass']}/{v['runs']} runs pass)" if n_runs > 1 else ""
    return (f"{fmt_value(v['value'], v['unit']):>7} {v['unit']:<4} {v['op']} "
            f"{fmt_value(v['limit'], v['unit']):<6} {pf(v['pass'])}{runs}")


def decode_line(issue, label, v, rows):
    # one run: the same call after the other L2 flush too, where bench.py timed it
    alt = (rows[0].get("ours_other_flush") or {}) if len(rows) == 1 else {}
    return (f"  {issue:<9}decode {label:<17} {v['what']:<14}{verdict_text(v, len(rows))}"
            + (f"  ({alt['flush']} flush: {common.fmt_us(alt['median_us'])} µs)"
               if alt.get("median_us") is not None else ""))


def router_line(issue, what, group):
    """The router rows of one target in one line: how many pass, the first failures."""
    bad = [(label, v) for label, v in group if not v["pass"]]
    failures = ", ".join(f"{label} {fmt_value(v['value'], v['unit'])}"
                         f"{'>' if v['op'] == targets.LE else '<'}"
                         f"{fmt_value(v['limit'], v['unit'])}" for label, v in bad[:8])
    return (f"  {issue:<9}router {what}: {len(group) - len(bad)}/{len(group)} PASS"
            + (f"; FAIL: {failures}" + (" …" if len(bad) > 8 else "") if bad else ""))


def target_lines(reports):
    """The verdict lines, in the order of ISSUES, and the pass/fail counts per issue."""
    found = judged(reports)
    lines = ["targets (tools/targets.py; " + "; ".join(f"{k}: {v}" for k, v in ISSUES.items())
             + ")" + (f", judged on the worst of {len(reports)} runs:" if len(reports) > 1
                      else ":")]
    counts = []
    for issue in ISSUES:
        mine = [j for j in found if j[2]["issue"] == issue]
        lines += [decode_line(issue, label, v, rows) for kind, label, v, rows in mine
                  if kind == "decode"]
        router = {}  # what -> [(label, verdict)]
        for kind, label, v, _ in mine:
            if kind == "router":
                router.setdefault(v["what"], []).append((label, v))
        lines += [router_line(issue, what, group) for what, group in router.items()]
        n_pass = sum(j[2]["pass"] for j in mine)
        counts.append(f"{issue}: {n_pass} PASS, {len(mine) - n_pass} FAIL")
    return lines, " | ".join(counts)


# ---------------------------------------------------------------------------------------------
# one run


def print_tables(report):
    lines = []
    env = report.get("env") or {}
    lines.append(f"device {env.get('device')} | torch {env.get('torch')} | triton "
                 f"{env.get('triton')} | {env.get('date')} | dispatch target "
                 f"{report.get('hardware_detected')}")
    copy_bw = (report.get("copy_bw") or {}).get("tb_per_s")
    empty = (report.get("empty_kernel") or {}).get("median_us")
    lines.append(f"copy BW {'-' if copy_bw is None else f'{copy_bw:.2f}'} TB/s (read+write) | "
                 f"empty kernel {common.fmt_us(empty)} µs | times: median µs, graph replay, "
                 f"L2 flushed ({env.get('l2_flush')})")
    if report.get("dependent_loads"):
        lines.append(f"latency: {loads_line(report)} (one warp, cold memory, then one store)")
    router = report.get("router") or []
    if router:
        lines.append("")
        lines.append("router GEMM: µs; limit: issue 20's (vLLM's CUDA kernel + 0.1 µs, or "
                     "F.linear / 2 where vLLM calls F.linear)")
        lines.append("  (w-read: reading the weight alone, best of 1-16 programs per row, minus "
                     "the empty kernel: what a one-pass kernel cannot go below)")
        lines.append(f"{'shape':<12}{'M':>3} {'x':<5}{'ours':>7}{'linear':>8}{'floor':>7}"
                     f"{'w-read':>7}{'ours-empty':>11}  issue 20")
        for r in router:
            goal = next((v for v in r.get("targets") or [] if v["issue"] == targets.ISSUE20), None)
            lines.append(f"({r['K']},{r['N']})".ljust(12)
                         + f"{r['M']:>3} {r['x_dtype']:<5}"
                         f"{common.fmt_us(router_time(r)):>7}"
                         f"{common.fmt_us((r.get('linear') or {}).get('median_us')):>8}"
                         f"{common.fmt_us(r.get('floor_us')):>7}"
                         f"{common.fmt_us(r.get('w_read_minus_empty_us')):>7}"
                         f"{common.fmt_us(r.get('ours_minus_empty_us')):>11}  "
                         + (router_goal(goal) if goal else "-"))
    decode = report.get("decode") or []
    if decode:
        tp = decode[0]["target_policy"]
        policies = decode[0]["policies"]
        lines.append("")
        lines.append(f"decode indexer end to end (scores + top-16 + page-16 table), H=1 D=128: µs;"
                     f" x_flr, TB/s for {tp}; other input kinds run {tp} only, kind/bf16 = "
                     f"time over the bf16 row of the shape")
        lines.append(f"{'scenario':<20}" + "".join(f"{hw:>8}" for hw in policies)
                     + f"{'torch':>8}{'floor':>7}{'x_flr':>6}{'TB/s':>6}  notes")
        for r in decode:
            o = r["ours"]
            cells = "".join(f"{common.fmt_us(o.get(hw, {}).get('median_us')):>8}"
                            for hw in policies)
            main = o.get(tp, {})
            ref = r.get("torch") or {}
            extra = (f"  {targets.row_kind(r)}/bf16 {r['vs_bf16']:.2f}"
                     if r.get("vs_bf16") is not None else "")
            if r.get("policies_agree") is False:
                extra += " DISAGREE"
            if "rows" in r and r["match_rows"] != r["rows"]:
                extra += f" torch-match {r['match_rows']}/{r['rows']}"
            if any(v.get("graph") is False for v in o.values()) and report.get("mode") != "smoke":
                extra += " (eager timing)"
            xf, tb = main.get("x_floor"), main.get("tb_per_s")
            lines.append(f"{r['name']:<20}{cells}"
                         f"{'skip' if 'skipped' in ref else common.fmt_us(ref.get('median_us')):>8}"
                         f"{common.fmt_us(r.get('floor_us')):>7}"
                         f"{_ratio(xf):>6}"
                         f"{'-' if tb is None else f'{tb:.2f}':>6}{extra}")
    lines.append("")
    if report.get("mode") == "smoke":
        lines.append("targets: not judged in --smoke (CPU interpreter timings)")
        counts = "no targets judged"
    else:
        verdicts, counts = target_lines([report])
        lines.extend(verdicts)
    for err in report.get("errors", []):
        lines.append(f"  ERROR {err}")
    wall = report.get("wall_s")
    lines.append(f"TARGETS {counts}" + ("" if wall is None else f" | wall {wall:.0f} s")
                 + (f" | {report['out']}" if report.get("out") else ""))
    print("\n".join(lines), flush=True)


# ---------------------------------------------------------------------------------------------
# several runs


def spread_lines(reports, kind, time_of, title):
    """Per row: each run's median µs, min, max and spread (where two runs or more have it)."""
    lines = ["", title, f"{'':<22}" + "".join(f"{f'#{i + 1}':>8}" for i in range(len(reports)))
             + f"{'min':>8}{'max':>8}{'spread':>8}"]
    widest = (-1.0, None)
    for label, rows in rows_by_label(reports, kind).items():
        times = [None if row is None else time_of(row) for row in rows]
        got = [t for t in times if t is not None]
        tail = ""
        if len(got) > 1:
            lo, hi = min(got), max(got)
            spread = (hi - lo) / lo * 100
            widest = max(widest, (spread, label))
            tail = f"{common.fmt_us(lo):>8}{common.fmt_us(hi):>8}{spread:>7.1f}%"
        lines.append(f"{label:<22}" + "".join(f"{common.fmt_us(t):>8}" for t in times) + tail)
    if widest[1] is not None:
        lines.append(f"largest spread: {widest[0]:.1f} % ({widest[1]})")
    return lines


def print_spread(reports, paths):
    lines = ["runs (median µs of each; spread = (max - min) / min):"]
    for i, (report, path) in enumerate(zip(reports, paths)):
        env = report.get("env") or {}
        lines.append(f"  #{i + 1} {path}: {env.get('device')}, {env.get('date')}, "
                     f"{report.get('mode') or report.get('source', '-')}")
    policies = sorted({r["target_policy"] for rep in reports for r in rep.get("decode") or []})
    if any(rep.get("decode") for rep in reports):
        lines += spread_lines(reports, "decode", targets.decode_time,
                              f"decode indexer end to end, µs under each run's own tables "
                              f"({', '.join(policies)})")
    if any(rep.get("router") for rep in reports):
        lines += spread_lines(reports, "router", router_time, "router GEMM, µs")
    lines.append("")
    verdicts, counts = target_lines(reports)
    lines += verdicts
    lines.append(f"TARGETS (worst run) {counts}")
    print("\n".join(lines), flush=True)


def condense(report, source: str) -> dict:
    """A bench.json as a result of record (docs/results/): per decode row its µs per policy
    (the device's own first), floor, cache bytes, input kind and ratio to the bf16 row; per
    router row ours, F.linear and the launch. `load_run` reads it back."""
    decode = []
    for r in report.get("decode") or []:
        us = {hw: round(t["median_us"], 2) for hw, t in r["ours"].items() if "median_us" in t}
        row = {"name": " ".join(r["name"].split()), "us": us,
               "floor_us": round(r["floor_us"], 2), "cache": r["cache"],
               "cache_bytes": r["cache_bytes"]}
        if r.get("vs_bf16") is not None:
            row["vs_bf16"] = round(r["vs_bf16"], 3)
        if (r.get("torch") or {}).get("median_us") is not None:
            row["torch_us"] = round(r["torch"]["median_us"], 1)
        decode.append(row)
    router = [{"K": r["K"], "N": r["N"], "M": r["M"], "x": r["x_dtype"],
               "ours_us": round(router_time(r), 2) if router_time(r) is not None else None,
               "linear_us": round((r.get("linear") or {}).get("median_us") or 0, 2) or None,
               "floor_us": r.get("floor_us"), "ours_minus_empty_us": r.get("ours_minus_empty_us"),
               "launch": r.get("launch"),
               **({"ours_in_a_row_us": round(r["ours_in_a_row"]["median_us"], 2)}
                  if "median_us" in (r.get("ours_in_a_row") or {}) else {})}
              for r in report.get("router") or []]
    out = {"source": source, "env": report.get("env"), "router": router, "decode": decode}
    if (report.get("empty_kernel") or {}).get("median_us") is not None:
        out["empty_kernel_us"] = round(report["empty_kernel"]["median_us"], 2)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", metavar="bench.json",
                   help="one run: its tables; several: the spread and worst-run verdicts")
    p.add_argument("--condense", metavar="OUT.json",
                   help="write the (one) run as a result of record instead (docs/results/)")
    p.add_argument("--source", default="", help="--condense: what the run was")
    args = p.parse_args(argv)
    reports = [load_run(path) for path in args.runs]
    if args.condense:
        if len(reports) != 1:
            p.error("--condense takes one run")
        with open(args.condense, "w", encoding="utf-8") as f:
            json.dump(condense(reports[0], args.source), f, indent=1, ensure_ascii=False)
            f.write("\n")
        return
    if len(reports) == 1:
        print_tables(reports[0])
    else:
        print_spread(reports, args.runs)


def plot(report, path):
    """Decode time against context per request count, bf16 cache (the fp8 rows are in the
    table), with the bandwidth floor and the µs limits of tools/targets.py."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        common.say("plot skipped: matplotlib is not installed here")
        return False
    decode = [r for r in report.get("decode") or []
              if r["ours"] and targets.row_kind(r) == "bf16"]
    if not decode:
        common.say("plot skipped: no decode results")
        return False
    tp = decode[0]["target_policy"]
    qs = sorted({r["Q"] for r in decode})
    fig, axes = plt.subplots(1, len(qs), figsize=(6.5 * len(qs), 5), squeeze=False)
    rs = sorted({r["R"] for r in decode})
    cmap = plt.get_cmap("viridis")
    for ax, q in zip(axes[0], qs):
        for i, R in enumerate(rs):
            color = cmap(i / max(1, len(rs) - 1))
            rows = sorted((r for r in decode if r["Q"] == q and r["R"] == R and not r["mixed"]),
                          key=lambda r: r["ctx"])
            pts = [(r["ctx"], r["ours"].get(tp, {}).get("median_us"), r["floor_us"])
                   for r in rows]
            pts = [p for p in pts if p[1] is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=color,
                        label=f"R={R}")
                ax.plot([p[0] for p in pts], [p[2] for p in pts], "--", color=color,
                        alpha=0.7)
            mixed = [r for r in decode if r["Q"] == q and r["R"] == R and r["mixed"]]
            for r in mixed:
                t = r["ours"].get(tp, {}).get("median_us")
                if t is not None:
                    ax.plot([r["ctx"]], [t], "*", color=color, markersize=12)
                    ax.plot([r["ctx"]], [r["floor_us"]], "x", color=color)
        tgt = [(r["ctx"], v["limit"]) for r in decode if r["Q"] == q
               for v in r.get("targets") or [] if v["unit"] == "µs"]
        if tgt:
            ax.plot([c for c, _ in tgt], [v for _, v in tgt], "v", color="red",
                    markerfacecolor="none", markersize=9, label="target (see table)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ctxs = sorted({r["ctx"] for r in decode})
        ax.set_xticks(ctxs, [f"{c // 1024}k" if c >= 1024 else str(c) for c in ctxs])
        ax.set_xlabel("context per request (tokens)")
        ax.set_ylabel("µs (median, graph replay, L2 flushed)")
        ax.set_title(f"index_decode + page-16 table, Q={q}, policy {tp}\n"
                     f"dashed: bandwidth floor; ★ mixed lengths (× its floor)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


if __name__ == "__main__":
    main()
