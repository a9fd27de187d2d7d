"""Measurement: every candidate of a bucket timed in interleaved rounds, written as one run file.

A run is one process on one machine; each decode point's inputs are allocated after the
previous point's were freed and returned to the driver.

Within a bucket, every (candidate, representative) is checked once against the reference
result, captured once in a CUDA graph, then timed in ``rounds`` rounds: each round takes
``per_round`` L2-flushed replays of every candidate (its median is the round's value), in an
order rotated by one step per round, so slow drift and a neighbour's after-effects spread over
all candidates instead of favouring the ones that happened to run early; a discarded settle
round comes first (`interleave`). A candidate's time
is the median of its rounds; the rounds themselves are kept (`choose` derives the noise from
them). ``python3 -m tools.tune choose`` merges runs of several machines.
"""
from __future__ import annotations

import statistics
import time

import common  # tools/common.py

from .space import ATTN_STEP_CONTEXT, ATTN_STEP_MAX_PROGRAMS, as_json


def interleave(samplers: dict, rounds: int, per_round: int) -> dict:
    """key -> [round medians]: a discarded settle round of every sampler first (the first
    kernel timed after heavy torch work, such as the reference a bucket computes, runs ~13 %
    slow for a few milliseconds whichever it is), then every sampler once per round, starting
    one key later each round (rotation), ``per_round`` samples each."""
    keys = list(samplers)
    for k in keys:
        samplers[k](per_round)
    out = {k: [] for k in keys}
    for r in range(rounds):
        shift = r % len(keys) if keys else 0
        for k in keys[shift:] + keys[:shift]:
            out[k].append(statistics.median(samplers[k](per_round)))
    return out


def _record(choice_key, choice, params):
    return {choice_key: choice, "params": dict(params)}


def _time_bucket(dev, calls: dict, check, rounds: int, per_round: int) -> dict:
    """calls: key -> launch fn. Check each once (``check(key, fn)`` -> problem or None), time
    the good ones interleaved. Returns key -> {"us", "rounds"} | {"rejected"} | {"error"}."""
    out, samplers = {}, {}
    for k, fn in calls.items():
        try:
            problem = check(k, fn)
            if problem:
                out[k] = {"rejected": problem}
            else:
                samplers[k] = dev.sampler(fn)
        except Exception as e:  # noqa: BLE001 - one candidate's failure is data, not fatal
            out[k] = {"error": f"{type(e).__name__}: {e}"[:300]}
    for k, values in interleave(samplers, rounds, per_round).items():
        out[k] = {"us": statistics.median(values), "rounds": values}
    return out


class Run:
    """One measurement run of ``space`` on ``dev`` (kernels.GpuDevice or a fake)."""

    def __init__(self, space, dev, *, rounds=5, per_round=3, budget_s=480.0, say=common.say):
        self.space, self.dev = space, dev
        self.rounds, self.per_round, self.budget_s, self.say = rounds, per_round, budget_s, say
        self.t0 = time.time()
        self.points, self.skipped, self.errors = [], [], []
        self.planned = []  # every bucket this run set out to measure (choose: who must have)
        self.progress = lambda: None  # called after each bucket / point (saves the run file)

    def over_budget(self) -> bool:
        return time.time() - self.t0 > self.budget_s

    # -- router --------------------------------------------------------------------------
    def router(self, shapes=None, tokens=None):
        weights = {}  # one router weight alive at a time
        for shape, (lo, hi), reps in self.space.router_buckets(shapes, tokens):
            for dt in sorted({rep[1] for rep in reps}):
                self._plan("router_gemm", self.space.router_bucket(shape, lo, hi, dt))
            if self.over_budget():
                self.skipped.append(f"router {shape} M {lo}-{hi}: over budget")
                continue
            try:
                self._router_bucket(shape, lo, hi, reps, weights)
            except Exception as e:  # noqa: BLE001 - the other buckets still count
                self.errors.append(f"router {shape} M {lo}-{hi}: {type(e).__name__}: {e}"[:400])
            self.progress()

    def _router_bucket(self, shape, lo, hi, reps, weights):
        """Every candidate × representative of one weight shape's token bucket."""
        sp, dev = self.space, self.dev
        t = time.time()
        if shape not in weights:
            weights.clear()
            dev.release()
            weights[shape] = dev.router_weight(*shape)
        cases = {rep: dev.router_case(weights[shape], *rep) for rep in reps}
        cands = sp.router_candidates(*shape, lo, hi)
        calls = {(i, rep): dev.router_call(cases[rep], *cand)
                 for i, cand in enumerate(cands) for rep in reps}

        def check(k, fn):
            return dev.router_problem(cases[k[1]], fn)

        got = _time_bucket(dev, calls, check, self.rounds, self.per_round)
        for rep in reps:  # (M, x dtype): each x dtype has its own rows
            bucket = {"shape": list(shape), "x_dtype": rep[1], "num_tokens": [lo, hi]}
            self.points.append({
                "table": "router_gemm", "buckets": [bucket],
                "rep": sp.rep_label("router_gemm", rep),
                "candidates": [{**_record("kernel", *c), **got[(i, rep)]}
                               for i, c in enumerate(cands)]})
        self._said("router", f"{shape} M {lo}-{hi}", len(cands), len(reps), t)

    # -- decode --------------------------------------------------------------------------
    def decode(self, contexts=None, requests=None):
        # a mixed-length point right after its equal-length twin: a budget that runs out
        # leaves both out (the bucket keeps its row), not the mixed one alone
        mixed = set(self.space.mixed_decode_points(contexts, requests))
        points = [(p, m) for p in self.space.decode_points(contexts, requests)
                  for m in ((False, True) if p in mixed else (False,))]
        for (R, Q, mb), mixed in points:
            self._plan("index_score", self.space.score_bucket(R, Q, mb))
            for bucket in self.space.topk_buckets(R, Q, mb):
                self._plan("index_topk", bucket)
            where = f"decode R={R} Q={Q} mb={mb}" + (" mix" if mixed else "")
            if self.over_budget():
                self.skipped.append(f"{where}: over budget")
                continue
            try:
                self._decode_point(R, Q, mb, mixed)
            except Exception as e:  # noqa: BLE001 - the other points still count
                self.errors.append(f"{where}: {type(e).__name__}: {e}"[:400])
            self.progress()

    def _decode_point(self, R, Q, mb, mixed=False):
        """Scorers at one point, then selectors after the fastest two-kernel scorer; with
        ``mixed``, request lengths drawn in [context / 8, context] (another representative of
        the same buckets)."""
        sp, dev = self.space, self.dev
        t = time.time()
        dev.release()  # the previous point's inputs go back to the driver first
        inp = dev.decode_case(R, Q, mb * sp.block, mixed=mixed)
        label = sp.rep_label("index_score", (R, Q, mb), mixed)
        fixed = sp.fixed_selector(R, Q, mb)
        default = sp.default("index_score", sp.score_bucket(R, Q, mb))
        ref = dev.decode_reference(inp, dev.decode_call(inp, *default, fixed))

        def check(k, fn):
            return dev.decode_problem(inp, ref, fn)

        # (1) scorers, with the selector the current table picks here
        scorers = sp.scorer_candidates_at(R, Q, mb)
        got = _time_bucket(dev, {i: dev.decode_call(inp, *c, fixed)
                                 for i, c in enumerate(scorers)},
                           check, self.rounds, self.per_round)
        self.points.append({
            "table": "index_score", "buckets": [as_json(sp.score_bucket(R, Q, mb))],
            "rep": label, "selector": fixed,
            "candidates": [{**_record("variant", *c), **got[i]}
                           for i, c in enumerate(scorers)]})
        if not sp.measures_selector:
            self._said("decode", label, len(scorers), 1, t)
            return
        # (2) selectors, after the fastest two-kernel scorer of this point (the table keeps
        # a selector wherever a fused row does not serve, e.g. topk beyond its tile)
        two = [(got[i]["us"], i) for i, c in enumerate(scorers)
               if "us" in got[i] and c[0] != "index_decode_fused"]
        scorer = scorers[min(two)[1]] if two else default
        sels = sp.selector_candidates_at(R, Q, mb)
        got_sel = _time_bucket(dev, {i: dev.decode_call(inp, *scorer, c[1])
                                     for i, c in enumerate(sels)},
                               check, self.rounds, self.per_round)
        self.points.append({
            "table": "index_topk", "buckets": [as_json(b) for b in sp.topk_buckets(R, Q, mb)],
            "rep": label,
            "scorer": _record("variant", *scorer),
            "candidates": [{**_record("variant", *c), **got_sel[i]}
                           for i, c in enumerate(sels)]})
        self._said("decode", label, len(scorers) + len(sels), 2, t)

    # -- prefill -------------------------------------------------------------------------
    def prefill(self):
        for inputs, rep in self.space.prefill_points():
            sp = self.space
            self._plan("index_prefill_score", sp.prefill_bucket(inputs, rep))
            self._plan("index_prefill_topk", sp.prefill_topk_bucket(inputs, rep))
            self._plan("index_prefill", sp.prefill_bucket(inputs, rep))
            label = sp.prefill_rep_label(inputs, rep)
            if self.over_budget():
                self.skipped.append(f"prefill {label}: over budget")
                continue
            try:
                self._prefill_point(inputs, rep)
            except Exception as e:  # noqa: BLE001 - the other points still count
                self.errors.append(f"prefill {label}: {type(e).__name__}: {e}"[:400])
            self.progress()

    def _prefill_point(self, inputs, rep):
        """Scorers (with the table's selector), then selectors (after the fastest scorer),
        then the one call: those two kernels against the streaming tiles."""
        sp, dev = self.space, self.dev
        t = time.time()
        dev.release()
        inp = dev.prefill_case(inputs, *rep)
        label = sp.prefill_rep_label(inputs, rep)
        two = {"variant": "index_prefill", "score": None, "topk": None}
        ref = dev.prefill_reference(inp, dev.prefill_call(inp, two))

        def check(k, fn):
            return dev.prefill_problem(inp, ref, fn)

        def timed(table, cands, launch_of, bucket, **extra):
            got = _time_bucket(dev, {i: dev.prefill_call(inp, launch_of(c))
                                     for i, c in enumerate(cands)},
                               check, self.rounds, self.per_round)
            self.points.append({"table": table, "buckets": [as_json(bucket)], "rep": label,
                                **extra, "candidates": [{**_record("variant", *c), **got[i]}
                                                        for i, c in enumerate(cands)]})
            fastest = [(got[i]["us"], i) for i in got if "us" in got[i]]
            return cands[min(fastest)[1]] if fastest else None

        scorers = sp.prefill_candidates_at("index_prefill_score", inputs, rep)
        best_score = timed("index_prefill_score", scorers,
                           lambda c: {**two, "score": c[1]}, sp.prefill_bucket(inputs, rep))
        score = best_score[1] if best_score else None
        sels = sp.prefill_candidates_at("index_prefill_topk", inputs, rep)
        best_sel = timed("index_prefill_topk", sels,
                         lambda c: {**two, "score": score, "topk": c[1]},
                         sp.prefill_topk_bucket(inputs, rep),
                         scorer=_record("variant", "index_prefill_score", score or {}))
        sel = best_sel[1] if best_sel else None
        ones = sp.prefill_candidates_at("index_prefill", inputs, rep)
        timed("index_prefill", ones,
              lambda c: {"variant": c[0], **c[1]} if c[0] != "index_prefill" else
              {**two, "score": score, "topk": sel}, sp.prefill_bucket(inputs, rep))
        self._said("prefill", label, len(scorers) + len(sels) + len(ones), 3, t)

    # -- attention -----------------------------------------------------------------------
    def attention(self, programs=None):
        for mode, inputs, programs, kv_heads, Q in self.space.attn_points(programs):
            sp = self.space
            table = "sparse_attn_" + mode
            bucket = sp.attn_bucket(mode, inputs, programs, Q)
            self._plan(table, bucket)
            label = sp.attn_rep_label(mode, inputs, programs, kv_heads, Q)
            if self.over_budget():
                self.skipped.append(f"attention {label}: over budget")
                continue
            try:
                t = time.time()
                self.dev.release()
                # all or none of a point's representatives: a bucket missing one keeps its row
                points = self._attn_point(mode, inputs, programs, kv_heads, Q, table, bucket,
                                          label)
                self.points.extend(points)
                self._said("attention", label, len(points[0]["candidates"]), len(points), t)
            except Exception as e:  # noqa: BLE001 - the other points still count
                self.errors.append(f"attention {label}: {type(e).__name__}: {e}"[:400])
            self.progress()

    def _attn_point(self, mode, inputs, programs, kv_heads, Q, table, bucket, label) -> list:
        """The point's candidates timed alone and, for decode grids of up to
        ATTN_STEP_MAX_PROGRAMS programs, inside sparse_decode_step (its programs start while
        the indexer's last ones run: a second representative of the bucket, "<label> step 8k",
        named by its context so that runs of another step context do not merge with it).
        Decode rows of Q > 1 are timed alone twice: with a request's lists mostly the same (as
        an indexer's) and with each row's own ("<label> own lists", as vLLM's benchmark rows): on
        an H100 the first's choice ran the benchmark's 32/2 R8 Q4 rows 2-4 % slower than the
        launch it replaced. Its inputs are freed on return."""
        sp, dev = self.space, self.dev
        cands = sp.attn_candidates_at(mode, inputs, programs, Q)
        default = sp.default(table, bucket)
        cases = [(label, dev.attn_case(mode, inputs, programs, kv_heads, Q=Q))]
        if mode == "decode" and Q > 1:
            cases.append((f"{label} own lists",
                          dev.attn_case(mode, inputs, programs, kv_heads, Q=Q, own_lists=True)))
        if mode == "decode" and programs <= ATTN_STEP_MAX_PROGRAMS:
            cases.append((f"{label} step {ATTN_STEP_CONTEXT // 1024}k",
                          dev.attn_step_case(cases[0][1])))
        points = []
        for rep, case in cases:
            ref = dev.attn_reference(case, dev.attn_call(case, *default))
            got = _time_bucket(dev, {i: dev.attn_call(case, *c) for i, c in enumerate(cands)},
                               lambda k, fn, case=case, ref=ref: dev.attn_problem(case, ref, fn),
                               self.rounds, self.per_round)
            points.append({"table": table, "buckets": [as_json(bucket)], "rep": rep,
                           "programs": programs, **({"query_len": Q} if mode == "decode" else {}),
                           "candidates": [{**_record("variant", *c), **got[i]}
                                          for i, c in enumerate(cands)]})
        return points

    def _plan(self, table, bucket):
        entry = {"table": table, "bucket": as_json(bucket)}
        if entry not in self.planned:
            self.planned.append(entry)

    def _said(self, what, where, n, points, t0):
        """One progress line: the fastest candidate of each of the last ``points`` points."""
        best = []
        for point in self.points[-points:]:
            timed = [c for c in point["candidates"] if "us" in c]
            if timed:
                fastest = min(timed, key=lambda c: c["us"])
                best.append(f"{point['table']} {point['rep']}: {common.fmt_us(fastest['us'])} µs")
        self.say(f"   {what} {where}: {n} candidates; fastest " + "; ".join(best)
                 + f" [{time.time() - t0:.1f}s]")
