"""The sparse-attention results of record as a Markdown table: one row per decode scenario of
tools/bench_attn.py runs (their bench_attn.json), each run's µs, vLLM's, and each target judged
on the worst run (the largest ratio to vLLM, the smallest share of the copy rate). Runs over
another cache (`bench_attn.py --kv`) compare with the same row over a bf16 cache timed beside
them (the worst ratio over the runs) instead of vLLM's bf16 times. Runs with a peer timed
beside ours (`bench_attn.py --peer`) compare with it instead: each run's ratio of ours, on the
peer's cache, to the peer's time in the same rounds, the worst over the runs ("–" where a run has none, or
the peer's or ours's check on its cache failed).

    python3 tools/attn_report.py RUN_A/bench_attn.json RUN_B/bench_attn.json

With `--before`, the runs after it are the same rows at other tables (or another kernel), timed
on the same machine in passes between the first runs': the table gives each row's time in both
and the ratio of the means (after / before).

    python3 tools/attn_report.py AFTER_1.json AFTER_2.json --before BEFORE_1.json BEFORE_2.json

docs/PERFORMANCE.md holds this output below a line naming the command; tests/test_docs.py
checks that the two agree.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import targets  # noqa: E402  (tools/targets.py)


def _label(row) -> str:
    hq, hkv, r, ctx, q = row
    return f"{hq}/{hkv}, R{r}, {ctx // 1024}k, Q{q}"


def _share(res):
    """Share of the copy rate a run's row reached: of the larger of the 4.3 TB/s floor and a
    plain read of the same bytes (older runs have only the floor)."""
    return res.get("share_of_read", res["share_of_floor"])


def _load(paths, with_peer=False):
    """Each run's rows by (Hq, Hkv, R, context, Q), and the cache they ran over (and with
    ``with_peer`` whether every run timed a peer beside ours)."""
    runs, kvs, peers = [], set(), []
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        kvs.add(tuple(data["env"].get("kv", ("bf16", "none"))))
        peers.append("peer" in data["env"])
        runs.append({tuple(r["row"]): r for r in data["rows"] if "us" in r})
    if len(kvs) != 1:
        raise SystemExit(f"attn_report: runs over different caches {sorted(kvs)}")
    return (runs, kvs.pop(), all(peers)) if with_peer else (runs, kvs.pop())


def _peer_ratio(got):
    """The worst ratio of ours (on the peer's cache) to the peer over the runs of a row, or
    None where a run has no comparison (the peer failed or was left out) or a check failed."""
    ok = [r for r in got if "vs_peer" in r and r["peer_check"]["ok"]
          and r.get("check_on_peer_cache", {"ok": True})["ok"]]
    return max(r["vs_peer"] for r in ok) if len(ok) == len(got) else None


def before_after(after_paths, before_paths, moved: float = 0.03) -> str:
    """The rows of the runs after a change beside the runs before it: µs per run, and the mean
    after over the mean before. The line below counts the rows that moved by more than
    ``moved``."""
    after, kv = _load(after_paths)
    before, kv_before = _load(before_paths)
    if kv != kv_before:
        raise SystemExit(f"attn_report: before and after over different caches {kv_before}, {kv}")
    lines = ["| Hq/Hkv, R, context, Q |"
             + "".join(f" after µs ({i + 1}) |" for i in range(len(after)))
             + "".join(f" before µs ({i + 1}) |" for i in range(len(before)))
             + " after / before |",
             "|---|" + "---|" * (len(after) + len(before) + 1)]
    ratios = []
    for row in after[0]:
        a = [run[row]["us"] for run in after if row in run]
        b = [run[row]["us"] for run in before if row in run]
        if len(a) != len(after) or len(b) != len(before):
            continue
        ratio = (sum(a) / len(a)) / (sum(b) / len(b))
        ratios.append(ratio)
        lines.append(f"| {_label(row)} |" + "".join(f" {t:.1f} |" for t in a + b)
                     + f" {ratio:.3f} |")
    faster = sum(r < 1 - moved for r in ratios)
    slower = sum(r > 1 + moved for r in ratios)
    lines.append("")
    lines.append(f"Faster by more than {100 * moved:.0f} %: {faster} of {len(ratios)} rows "
                 f"(best {min(ratios):.3f}); slower by more than {100 * moved:.0f} %: {slower} "
                 f"(worst {max(ratios):.3f}).")
    return "\n".join(lines)


def table(paths) -> str:
    if "--before" in paths:
        cut = paths.index("--before")
        return before_after(paths[:cut], paths[cut + 1:])
    runs, kv, peer = _load(paths, with_peer=True)
    plain = kv[0] == "bf16" and not peer
    other = "peer" if peer else "vLLM" if plain else "bf16 cache"
    names = "".join(f" ours µs ({chr(ord('A') + i)}) |" for i in range(len(runs)))
    if peer:
        names += " ours on the peer's cache µs (A) |"
    lines = [f"| Hq/Hkv, R, context, Q |{names} {other} µs{'' if plain else ' (A)'} | ours / "
             f"{other} (worst) | share of copy rate (worst) | step µs (A) = indexer + "
             f"attention as two calls |",
             "|---|" + "---|" * (len(runs) + peer) + "---|---|---|---|"]
    ahead = shares_ok = shares = 0
    for row in runs[0]:
        got = [run[row] for run in runs if row in run]
        if len(got) != len(runs):
            continue
        if peer:
            ratio = _peer_ratio(got)
            vllm = round(got[0]["peer_us"], 1) if ratio is not None else None
        elif plain:
            vllm = got[0]["vllm_us"]
            ratio = max(r["us"] for r in got) / vllm if vllm else None
        else:
            vllm = round(got[0]["bf16_us"], 1)
            ratio = max(r["us"] / r["bf16_us"] for r in got)
        ahead += ratio is not None and ratio <= 1.0
        T = row[2] * row[4]
        share = "–"
        if T >= targets.ATTN_MIN_ROWS:
            worst = min(_share(r) for r in got)
            shares += 1
            shares_ok += worst >= targets.ATTN_FLOOR_SHARE
            share = f"{100 * worst:.1f} %"
        step = got[0].get("step")
        step = "–" if not step else (f"{step['step']:.1f} ({step['indexer']:.1f} + "
                                     f"{step['attention']:.1f})")
        lines.append(f"| {_label(row)} |" + "".join(f" {r['us']:.1f} |" for r in got)
                     + ("" if not peer else " – |" if ratio is None else
                        f" {got[0]['us_on_peer_cache']:.1f} |")
                     + f" {vllm or '–'} | {'–' if ratio is None else f'{ratio:.2f}'} | "
                       f"{share} | {step} |")
    lines.append("")
    lines.append(f"At or below {other} on every run: {ahead} of {len(lines) - 3} rows; at ≥ "
                 f"{100 * targets.ATTN_FLOOR_SHARE:.0f} % of the copy rate on every run: "
                 f"{shares_ok} of {shares} rows.")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="bench_attn.json files (or docs/results ones)")
    parser.add_argument("--before", nargs="+", metavar="RUN",
                        help="the same rows at other tables, timed between the runs' passes")
    args = parser.parse_args(argv)
    print(table(args.runs + (["--before", *args.before] if args.before else [])))


if __name__ == "__main__":
    main()
