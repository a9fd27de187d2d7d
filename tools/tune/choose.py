"""Choose each bucket's row from one or more runs (machines), by the worst case.

Inputs are run files of ``measure`` (one process on one machine each). For every
bucket of a table, the candidates measured at every representative in every run of that
section compete on their worst-case slowdown: time / fastest time at the same representative
in the same run, maximised over representatives × runs (the mean breaks ties). A bucket some
run did not measure, or measured at other representatives, is left alone (its current row
stays): a choice must hold on every machine given.

Then the noise rule: every candidate within the bucket's noise of the fastest in every cell
(representative × run) is "as fast", and the simplest of them is kept (:func:`simplicity`). The noise is
twice the fastest candidate's relative median absolute deviation over its rounds (the largest
over representatives × runs), and at least ``noise_floor``. A candidate slower than the
fastest in every one of at least CONSISTENT_CELLS cells (representative × run), or in each of
two or three by more than the noise floor (a bucket of one representative on two machines: the
router's), is not "as fast": a loss on every representative on every machine
is most likely real. The rule errs on
one side on purpose: the fastest is the minimum of many candidates, so a truly equal simpler
one also loses every cell now and then (in simulations with 4 cells, 10–40 % of the time) and
then the fastest is kept, which costs simplicity only; keeping a truly slower one costs speed
(the (6144, 256) M 2–4 bf16 router bucket kept one 1–5 % slower in its four cells, and timed
interleaved on two other machines it was 6–7 % slower).

A chosen row records its measured µs (per representative, per run label) and those of the
runner-up (the best other candidate), both worst-case slowdowns, the noise and the rule that
picked it ("fastest" or "simpler within noise").
"""
from __future__ import annotations

import json
import math
import statistics

from .space import as_bucket, bucket_text, key

NOISE_FLOOR = 0.01
# cells (representatives × runs) from which a loss in every cell counts as real (module doc)
CONSISTENT_CELLS = 4
RULE = ("smallest worst-case slowdown over representatives × runs (machines); within "
        "noise of it in every cell, the simplest candidate (unless slower in every one of 4 "
        "or more cells, or by more than the noise floor in each of 2 or 3)")
SECTION = {"router_gemm": "router", "index_score": "decode", "index_topk": "decode",
           "index_prefill_score": "prefill", "index_prefill_topk": "prefill",
           "index_prefill": "prefill", "sparse_attn_decode": "attention",
           "sparse_attn_prefill": "attention"}
CHOICE_KEY = {table: "kernel" if table == "router_gemm" else "variant" for table in SECTION}
# Kernels from simplest: the per-expert router kernel (plain loads, no atomics) before split-K
# (a cross-program reduction on counters); the split scorer before the balanced one (a
# per-request block budget) before the single launch (scorer and selector in one kernel, the
# last program of a request selecting); for the prefill one call, the two kernels (each from its
# own table) before the streaming kernel; for attention, per token before query tiles.
KERNEL_RANK = {"per_expert": 0, "splitk": 1, "index_score_split": 0, "index_score_balanced": 1,
               "index_decode_fused": 2, "index_topk_fused": 0, "index_prefill_score": 0,
               "index_prefill_topk": 0, "index_prefill": 0, "index_prefill_stream": 1,
               "sparse_attn_split": 0, "sparse_attn_tiled": 1}
GRID_PARAMS = ("kv_chunks", "topk_chunks", "split_k", "program_budget", "kv_splits", "splits",
               "head_split")


def simplicity(cand, default) -> tuple:
    """Sort key, simplest first: the default row (the generic target's); then the simpler
    kernel; then fewer optional launch features switched on (any true bool parameter: pdl,
    static_chunks, adaptive_merge, single_tile, tf32x3, high_batch, merge_kernel; and a
    register cap, max_registers); then a smaller grid (the product of chunks / K splits /
    programs / head shares); then fewer loop steps (a larger kv_tile); then fewer warps,
    fewer stages."""
    choice, params = cand
    return (key(*cand) != key(*default), KERNEL_RANK.get(choice, len(KERNEL_RANK)),
            sum(v is True for v in params.values()) + bool(params.get("max_registers")),
            math.prod(params.get(p) or 1 for p in GRID_PARAMS), -(params.get("kv_tile") or 0),
            params.get("num_warps") or 0, params.get("num_stages") or 0)


def run_labels(runs, existing=None) -> list:
    """One label per run: its machine, numbered (#2, #3, ...) when another run of this batch
    or a different run already described in the data file (``existing``: label -> run facts)
    holds it; the same run chosen again keeps its label."""
    existing, labels = dict(existing or {}), []
    for run in runs:
        same = [lb for lb, facts in existing.items() if facts == run["run"] and lb not in labels]
        if same:  # described already, under whichever label
            labels.append(same[0])
            continue
        base = run["run"]["machine"]
        label, n = base, 1
        while label in labels or label in existing:
            n += 1
            label = f"{base}#{n}"
        labels.append(label)
    return labels


def _bucket_id(table, bucket) -> str:
    return table + json.dumps(bucket, sort_keys=True)


def merge(runs, labels) -> dict:
    """bucket id -> {"table", "bucket", "by_run": {label: {rep: [candidate records]}}}."""
    out = {}
    for run, label in zip(runs, labels):
        for point in run["points"]:
            for bucket in point["buckets"]:
                entry = out.setdefault(_bucket_id(point["table"], bucket),
                                       {"table": point["table"], "bucket": bucket, "by_run": {}})
                entry["by_run"].setdefault(label, {})[point["rep"]] = point["candidates"]
    return out


def _spread(rounds) -> float:
    if not rounds or len(rounds) < 2:
        return 0.0
    med = statistics.median(rounds)
    return 2 * statistics.median(abs(x - med) for x in rounds) / med


def choose_bucket(entry, expected, space, noise_floor=NOISE_FLOOR):
    """(row, why): the chosen data-file row of one bucket, or (None, why not)."""
    table, bucket, by_run = entry["table"], entry["bucket"], entry["by_run"]
    missing = sorted(set(expected) - set(by_run))
    if missing:
        return None, f"not measured by {', '.join(missing)}"
    reps = {label: sorted(points) for label, points in by_run.items()}
    if len({tuple(r) for r in reps.values()}) != 1:
        return None, f"runs measured different representatives: {reps}"
    reps = next(iter(reps.values()))
    ck = CHOICE_KEY[table]
    times, rounds, cands = {}, {}, {}
    for label, points in by_run.items():
        for rep, records in points.items():
            for rec in records:
                if "us" not in rec:
                    continue
                cand = (rec[ck], space.completed(rec[ck], rec["params"]))
                k = key(*cand)
                cands[k] = cand
                times.setdefault(k, {})[(rep, label)] = rec["us"]
                rounds.setdefault(k, {})[(rep, label)] = rec.get("rounds")
    cells = [(rep, label) for rep in reps for label in by_run]
    eligible = [k for k, t in times.items() if all(c in t for c in cells)
                and space.feasible(table, bucket, cands[k])]
    if not eligible:
        return None, "no candidate valid at every representative in every run"
    best = {c: min(times[k][c] for k in eligible) for c in cells}
    slow = {k: [times[k][c] / best[c] for c in cells] for k in eligible}
    worst = {k: max(v) for k, v in slow.items()}
    default = space.default(table, as_bucket(bucket))
    simple = {k: simplicity(cands[k], default) for k in eligible}
    mean = {k: math.fsum(v) / len(v) for k, v in slow.items()}  # any order of cells: the same
    ranked = sorted(eligible, key=lambda k: (worst[k], mean[k], simple[k]))
    fastest = ranked[0]
    noise = max([noise_floor] + [_spread(rounds[fastest][c]) for c in cells])
    def always_slower(k):
        # by any margin in enough cells; by more than the floor in each of two or three
        if len(cells) < 2:
            return False
        margin = 1.0 if len(cells) >= CONSISTENT_CELLS else 1.0 + noise_floor
        return all(times[k][c] > times[fastest][c] * margin for c in cells)

    # within the noise of the fastest in every cell, not only in the worst case: a candidate
    # 9-12 % slower in six of eight cells and faster in two had the same worst case
    as_fast = [k for k in eligible
               if all(times[k][c] <= times[fastest][c] * (1 + noise) for c in cells)
               and not always_slower(k)]
    chosen = min(as_fast, key=lambda k: (simple[k], worst[k]))
    runner = next((k for k in ranked if k != chosen), None)

    def us(k):
        return {rep: {label: round(times[k][(rep, label)], 2) for label in by_run}
                for rep in reps}

    choice, params = cands[chosen]
    measured = {"rule": "fastest" if chosen == fastest else "simpler within noise",
                "noise": round(noise, 4),
                "winner": {"worst": round(worst[chosen], 4), "us": us(chosen)}}
    if runner is not None:
        measured["runner_up"] = {ck: cands[runner][0], "params": cands[runner][1],
                                 "worst": round(worst[runner], 4), "us": us(runner)}
    row = {**bucket, ck: choice, "params": params, "source": "measured", "measured": measured}
    return row, measured["rule"]


def table_of(row: dict) -> str:
    """The table of a chosen row (choose() tags each; write.update files it there)."""
    return row["table"]


def _expected(runs, labels, entry) -> list:
    """The runs that set out to measure a bucket (its section, within their --shapes /
    --contexts); each of them must have measured it."""
    out = []
    for run, label in zip(runs, labels):
        if "planned" in run:
            if {"table": entry["table"], "bucket": entry["bucket"]} in run["planned"]:
                out.append(label)
        elif SECTION[entry["table"]] in run["sections"] and \
                entry["bucket"].get("query_len", [1, 1]) == [1, 1]:
            out.append(label)  # (runs without planned buckets measured decode at Q 1 only)
    return out


def coverage_warning(runs) -> str | None:
    """What the runs lack for a robust choice: two machines. (A process's state does not
    matter once timing settles after heavy work: `measure.interleave`.)"""
    machines = {run["run"]["machine"] for run in runs}
    return None if len(machines) >= 2 else "not robust yet: missing a second machine"


def choose(runs, space, noise_floor=NOISE_FLOOR, existing=None):
    """(rows, report lines, labels): the chosen rows of every bucket the runs measured;
    ``existing``: the data file's provenance.runs (labels stay unique across tunes)."""
    labels = run_labels(runs, existing)
    runs = [space.attn_rebucketed(run) for run in runs]
    rows, report = [], []
    def order(entry):  # table, then the buckets' values and lower ends in axis order
        return entry["table"], [(str(v), 0) if not isinstance(v, list) else
                                (v[0], float("inf") if v[1] is None else v[1])
                                for v in entry["bucket"].values()]

    for entry in sorted(merge(runs, labels).values(), key=order):
        expected = _expected(runs, labels, entry)
        row, why = choose_bucket(entry, expected, space, noise_floor)
        where = f"{entry['table']} {bucket_text(entry['table'], entry['bucket'])}"
        if row is None:
            report.append(f"  keep {where}: {why}")
            continue
        rows.append({"table": entry["table"], **row})
        m = row["measured"]
        runner = m.get("runner_up")
        report.append(
            f"  {where}: {row[CHOICE_KEY[entry['table']]]} {_short(row['params'])} "
            f"(worst {m['winner']['worst']:.3f}, {why})"
            + (f"; runner-up {runner[CHOICE_KEY[entry['table']]]} {_short(runner['params'])} "
               f"worst {runner['worst']:.3f}" if runner else ""))
    return rows, report, labels


def _short(params) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items())
