"""The router results of record as a Markdown table: the shapes vLLM runs its CUDA router kernel
on, each run's µs per token count M and x dtype, vLLM's µs, and the verdicts on the worst run;
then the shapes vLLM hands to F.linear, judged by the speedup over it.

    python3 tools/router_report.py RUN_A.json RUN_B.json   # bench.json or docs/results files

docs/PERFORMANCE.md holds this output below a line naming the command; tests/test_docs.py
checks that the two agree.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import targets  # noqa: E402  (tools/targets.py)
from bench_report import load_run  # noqa: E402


def _runs(paths) -> list:
    """Per run: (K, N, x dtype, M) -> (ours µs, F.linear µs)."""
    runs = []
    for path in paths:
        rows = load_run(path).get("router") or []
        runs.append({(r["K"], r["N"], r["x_dtype"], r["M"]): (
            (r.get("ours") or {}).get("median_us"), (r.get("linear") or {}).get("median_us"))
            for r in rows})
    return runs


def table(paths) -> str:
    runs = _runs(paths)
    ms = targets.ROUTER_MS
    lines = ["| shape, x | " + " | ".join(f"M {m}" for m in ms) + " |",
             "|---|" + "---|" * len(ms)]
    ok_all = cells = 0
    ok_each = [0] * len(runs)
    for (K, N, x), vllm in targets.VLLM_ROUTER_US.items():
        out = []
        for m, limit in zip(ms, vllm):
            got = [run.get((K, N, x, m), (None, None))[0] for run in runs]
            if any(t is None for t in got):
                out.append("–")
                continue
            cells += 1
            # the bench's verdict (targets.router_verdicts): the limit rounded to 0.01 µs
            ok = [t <= round(limit + targets.ROUTER_SLACK_US, 2) for t in got]
            ok_all += all(ok)
            ok_each = [n + o for n, o in zip(ok_each, ok)]
            cell = " / ".join(f"{t:.2f}" for t in got)
            out.append((cell if all(ok) else f"**{cell}**") + f" ({limit:.2f})")
        lines.append(f"| ({K},{N}) {x} | " + " | ".join(out) + " |")
    lines.append("")
    lines.append(f"At or below vLLM + {targets.ROUTER_SLACK_US} µs: "
                 + ", ".join(str(n) for n in ok_each) + f" of {cells} rows on the "
                 f"{len(runs)} runs, {ok_all} on every run.")
    # the shapes vLLM hands to F.linear(x.float(), w.float())
    speedups = {}
    for run in runs:
        for (K, N, x, m), (ours, linear) in run.items():
            if (K, N) not in targets.VLLM_ROUTER_SHAPES and ours and linear:
                key = (K, N, x)
                speedups.setdefault(key, {}).setdefault(m, []).append(linear / ours)
    parts, fast, total = [], 0, 0
    for (K, N, x), by_m in sorted(speedups.items()):
        worst = [min(v) for v in by_m.values() if len(v) == len(runs)]
        if not worst:
            continue
        total += len(worst)
        fast += sum(s >= targets.ROUTER_LINEAR_SPEEDUP for s in worst)
        parts.append(f"({K},{N}) {x} {min(worst):.1f}–{max(worst):.1f}×")
    if parts:
        lines.append(f"Against F.linear(x.float(), w) (worst run per row): "
                     f"{'; '.join(parts)}; at least {targets.ROUTER_LINEAR_SPEEDUP:.0f}× in "
                     f"{fast} of {total} rows.")
    lines += in_a_row(paths)
    return "\n".join(lines)


def in_a_row(paths) -> list:
    """Runs that also timed ours as replays in a row (how vLLM's reference times were taken):
    per run, how far that sits above the rotating rounds' time over vLLM's rows, and how many
    of those rows are at or below vLLM + the slack when ours is counted that way."""
    limits = {(K, N, x, m): round(limit + targets.ROUTER_SLACK_US, 2)
              for (K, N, x), vllm in targets.VLLM_ROUTER_US.items()
              for m, limit in zip(targets.ROUTER_MS, vllm)}
    out = []
    for i, path in enumerate(paths):
        pairs = [(r["ours_in_a_row"]["median_us"], r["ours"]["median_us"],
                  limits[(r["K"], r["N"], r["x_dtype"], r["M"])])
                 for r in load_run(path).get("router") or []
                 if (r["K"], r["N"], r["x_dtype"], r["M"]) in limits
                 and "median_us" in (r.get("ours_in_a_row") or {})
                 and "median_us" in (r.get("ours") or {})]
        if pairs:
            gaps = [row - rounds for row, rounds, _ in pairs]
            ok = sum(row <= limit for row, _, limit in pairs)
            out.append(f"Run {i + 1}: replays in a row minus rotating rounds, over {len(gaps)} "
                       f"rows: median {statistics.median(gaps):+.2f} µs, from {min(gaps):+.2f} "
                       f"to {max(gaps):+.2f}; counted in a row, {ok} of them at or below vLLM + "
                       f"{targets.ROUTER_SLACK_US} µs.")
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="bench.json files (or docs/results ones)")
    print(table(parser.parse_args(argv).runs))


if __name__ == "__main__":
    main()
