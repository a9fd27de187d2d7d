"""The tuner (tools/tune/) on the CPU: a fake device and fake clocks drive the real measurement
loops, the choice and the writer.

Covered: facts from the registry, interleaved rounds, the correctness guard, writing a new
target (a fake B200), re-tuning one half (router vs decode keep the other), refusing targets
whose tables are hand-written (gfx950), merging runs of several machines, the worst-case
choice, the "within noise -> simpler candidate" rule, timing hygiene (the settle round).
"""
from __future__ import annotations

import json
import math
import os
import shutil
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import tools.tune  # noqa: E402,F401  (puts tools/ on sys.path)
from codegen import measured, registry  # noqa: E402
from codegen.policy import lookup  # noqa: E402
from codegen.render import render_all  # noqa: E402
from tools.tune import __main__ as cli  # noqa: E402
from specs.index_decode import MEASURED_SCORE  # noqa: E402
from tools.tune import choose, measure, target, warm, write  # noqa: E402
from tools.tune.space import (A_SPLIT, A_TILED, ATTN_STEP_MAX_PROGRAMS,  # noqa: E402
                              ATTN_TABLES, Space, as_bucket, as_json, attn_register_cap, key,
                              pow2ceil)

SM90 = os.path.join(ROOT, "specs", "measured", "sm_90.json")


@pytest.fixture(scope="module")
def reg():
    return registry.load()


@pytest.fixture(scope="module")
def sm90(reg):
    return Space(reg, reg.hardware["sm_90"], sms=132, quick=True)


def facts(name, capability=None, gcn_arch=None):
    return {"device": name, "sms": 132, "machine": "GPU-test", "driver": None,
            "vendor": "amd" if gcn_arch else "nvidia", "capability": capability,
            "gcn_arch": gcn_arch}


# ---------------------------------------------------------------------------------------------
# A fake device: launches record what they would run, the clock turns that into µs.


def router_us(kernel, params, M):
    """Optimum: per-expert block_k 1024, 4 warps, block_m 4 (where the bucket allows it);
    split-K is slower below M = 9."""
    if kernel == "splitk":
        return 9.0 + (5 if M <= 8 else -3) + 0.3 * abs(math.log2(params["split_k"]) - 4)
    return (5 + abs(math.log2(params["block_k"]) - 10)
            + 0.5 * abs(math.log2(params["num_warps"]) - 2)
            + 0.4 * abs(math.log2(params["block_m"]) - 2))


def decode_us(variant, params, sel, R, mb):
    """Scorer optimum: the fused single launch for R ≤ 2 at 32 chunks, 8 warps; balanced with
    a 264-program budget for R ≤ 4; else split, 32 chunks, 8 warps, 3 stages. Selector
    optimum: tile 128, 4 warps, 2 chunks, adaptive merge, pdl."""
    if variant == "index_decode_fused":
        return (3 if R <= 2 else 30) + abs(math.log2(params["kv_chunks"]) - 5) + \
            0.5 * (params["num_warps"] != 8)
    if variant == "index_score_balanced":
        t = 10 + abs(params["program_budget"] - 264) / 50 - (5 if R <= 4 else -5)
    else:
        t = 10 + abs(math.log2(params["kv_chunks"]) - min(5, math.log2(max(8, mb))))
    t += 0.5 * ((params["num_warps"] or 4) != 8) + 0.5 * ((params["num_stages"] or 3) != 3)
    t += 0.4 * (params.get("static_chunks") is True)
    t += 0.5 * (sel["topk_tile"] != 128) + 0.5 * (sel["num_warps"] != 4)
    t += 0.4 * (not sel["adaptive_merge"]) + 0.4 * (not sel["pdl"])
    t += 0.5 * abs(math.log2(sel["topk_chunks"]) - 1)
    return t


def prefill_us(launch, rep):
    """Optimum: scorer 128 lanes, 8 warps, 8 KV splits; selector 256-block tiles, one row, 2
    warps; the one call streams with several heads and runs two kernels with one."""
    R, prefix, chunk, H = rep
    if launch["variant"] == "index_prefill_stream":
        return 20 + (0 if H > 1 else 30) + 0.5 * (launch["num_warps"] != 4)
    t = 30.0
    score, sel = launch.get("score"), launch.get("topk")
    if score:
        t += abs(math.log2(score["block_m"] * H) - 7) + abs(math.log2(score["kv_splits"]) - 3)
        t += 0.5 * (score["num_warps"] != 8)
    if sel:
        t += abs(math.log2(sel["block_k"]) - 8) + 0.5 * (sel["block_rows"] != 1)
        t += 0.5 * (sel["num_warps"] != 2)
    return t


def attn_us(variant, params, mode, programs):
    """Optimum: 4 splits, 4 warps, 3 stages, except at 8 programs, where 3 stages cost 3 µs
    (so the 3–8 bucket, measured at 4 and 8, must take 2); prefill from 513 programs:
    64-lane tiles, 8 warps."""
    if variant == "sparse_attn_tiled":
        return (10 if programs > 512 and mode == "prefill" else 40) + \
            abs(math.log2(params["lanes"]) - 6) + 0.5 * (params["num_warps"] != 8)
    stages = 3 * (params["num_stages"] == 3) if programs == 8 else \
        0.5 * (params["num_stages"] != 3)
    return 20 + abs(math.log2(params["splits"]) - 2) + 0.5 * (params["num_warps"] != 4) + stages


def step_us(variant, params, mode, programs):
    """What the indexer before it adds to a decode launch inside sparse_decode_step: 50 µs,
    and 10 µs more for 4 splits above 256 programs (alone the fastest: the step penalises it
    by more than the others lose alone)."""
    return 50 + 10 * (programs > 256 and params.get("splits") == 4)


def test_a_point_whose_step_fails_records_neither_representative(reg):
    """The step representative failing (out of memory, say) leaves no alone point behind
    either: the bucket then lacks a representative and keeps its row, instead of being chosen
    from the launches' own times alone. Points above ATTN_STEP_MAX_PROGRAMS have none."""
    space = Space(reg, reg.hardware["sm_90"], sms=132)
    dev = FakeDevice()

    def fail(case):
        raise RuntimeError("CUDA out of memory")
    dev.attn_step_case = fail
    run = measure.Run(space, dev, rounds=1, per_round=1, budget_s=1e9, say=lambda *a: None)
    run.attention([512, 2048])
    reps = {p["rep"] for p in run.points}
    assert not any(r.startswith("decode") and "P512" in r for r in reps), reps
    assert "decode G16 P2048" in reps and "prefill G16 P512" in reps
    assert any("decode G16 P512" in e and "out of memory" in e for e in run.errors)


class FakeDevice:
    """kernels.GpuDevice's interface on plain data. ``slow(kind, params) -> factor`` models a
    state or machine; scorers with 16 chunks and 2 stages compute a wrong result."""

    sms = 132

    def __init__(self, slow=lambda kind, params: 1.0):
        self.slow, self.last, self.released, self.mixed = slow, None, 0, []

    def router_weight(self, K, N):
        return (K, N)

    def router_case(self, w, M, x_dtype):
        return {"shape": w, "M": M, "x": x_dtype}

    def router_call(self, case, kernel, params):
        def fn():
            self.last = ("router", kernel, dict(params), case["M"])
        return fn

    def router_problem(self, case, fn):
        fn()
        return None

    def decode_case(self, R, Q, ctx, mixed=False):
        self.mixed.append(mixed)
        return {"R": R, "Q": Q, "mb": ctx // 128}

    def decode_call(self, inp, variant, params, selector):
        def fn():
            self.last = ("decode", variant, dict(params), dict(selector), inp["R"], inp["mb"])
        return fn

    def decode_reference(self, inp, fn):
        fn()
        return "reference"

    def decode_problem(self, inp, ref, fn):
        fn()
        _, variant, params, *_ = self.last
        if params.get("kv_chunks") == 16 and params.get("num_stages") == 2:
            return "result differs from the default launch ['out']"
        return None

    def prefill_case(self, inputs, R, prefix, chunk):
        return {"rep": (R, prefix, chunk, inputs["num_heads"])}

    def prefill_call(self, inp, launch):
        def fn():
            self.last = ("prefill", dict(launch), inp["rep"])
        return fn

    def prefill_reference(self, inp, fn):
        fn()
        return "reference"

    def prefill_problem(self, inp, ref, fn):
        fn()
        return None

    def attn_case(self, mode, inputs, programs, kv_heads, Q=1, own_lists=False):
        return {"mode": mode, "programs": programs, "kv_heads": kv_heads, "Q": Q,
                "own_lists": own_lists}

    def attn_step_case(self, case):
        return {**case, "step": True}

    def attn_call(self, case, variant, params):
        def fn():
            self.last = ("attention", variant, dict(params), case["mode"], case["programs"],
                         "step" in case)
        return fn

    def attn_reference(self, case, fn):
        fn()
        return "reference"

    def attn_problem(self, case, ref, fn):
        fn()
        return None

    def sampler(self, fn):
        fn()
        if self.last[0] == "attention":
            *launch, step = self.last[1:]
            t = attn_us(*launch) + (step_us(*launch) if step else 0.0)
            return lambda n: [t] * n
        if self.last[0] == "prefill":
            _, launch, rep = self.last
            t = prefill_us(launch, rep)
            return lambda n: [t] * n
        if self.last[0] == "router":
            _, kernel, params, M = self.last
            t = router_us(kernel, params, M) * self.slow(kernel, params)
        else:
            _, variant, params, sel, R, mb = self.last
            t = decode_us(variant, params, sel, R, mb) * self.slow(variant, params)
        return lambda n: [t] * n

    def release(self):
        self.released += 1


def fake_run(space, dev, sections, machine="GPU-a", shapes=None, contexts=None, tokens=None):
    """A run file as `measure` writes it, measured on the fake device."""
    r = measure.Run(space, dev, rounds=2, per_round=1, budget_s=1e9, say=lambda *a: None)
    if "decode" in sections:
        r.decode(contexts)
    if "router" in sections:
        r.router(shapes, tokens)
    if "prefill" in sections:
        r.prefill()
    if "attention" in sections:
        r.attention()
    return json.loads(json.dumps({
            "format": cli.RUN_FORMAT,
            "target": {"name": space.target.name, "declared": space.target.name != "sm_100",
                       "hardware": target.hardware_dict(space.target)},
            "run": {"machine": machine, "date": "2000-01-01 00:00:00 UTC",
                    "device": "FAKE", "driver": None, "torch": "0", "triton": "0", "sms": 132,
                    "command": "fake"},
            "sections": sorted(sections), "inputs": space.inputs, "points": r.points,
            "planned": r.planned,
            "skipped": r.skipped, "errors": r.errors}))  # as read back from its file


@pytest.fixture(scope="module")
def attention_run_texts(sm90):
    """The attention section of the whole sm_90 space measured on two fake machines (GPU-a,
    GPU-b), as the text of their run files: measured once for the tests that start from it."""
    space = Space(sm90.reg, sm90.target, sms=132)
    return [json.dumps(fake_run(space, FakeDevice(), {"attention"}, machine=machine))
            for machine in ("GPU-a", "GPU-b")]


@pytest.fixture
def spec_copy(tmp_path):
    dest = tmp_path / "specs"
    shutil.copytree(os.path.join(ROOT, "specs"), dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


# ---------------------------------------------------------------------------------------------
# space: facts from the registry


def test_readme_states_the_router_token_buckets_the_tuner_measures(sm90):
    import re

    with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "README.md"), encoding="utf-8") as f:
        text = " ".join(f.read().split())
    (stated,) = re.findall(r"Router buckets end at ([\d, ]+ and \d+) tokens", text)
    ends = [int(v) for v in re.findall(r"\d+", stated)]
    assert ends == [hi for _, hi in sm90.token_buckets], (stated, sm90.token_buckets)


def test_space_takes_its_facts_from_the_registry(reg, sm90):
    router = {a.name: a for a in reg.policies["router_gemm"].axes}
    assert sm90.max_tokens == router["num_tokens"].hi == 32
    assert sm90.shapes == sorted(router["shape"].values)
    assert sm90.token_buckets[-1][1] == sm90.max_tokens
    assert sm90.order["index_score_split"] == tuple(
        p.name for p in reg.variants["index_score_split"].params)
    assert (sm90.block, sm90.head_dim, sm90.topk) == (128, 128, 16)
    # every candidate is a legal launch of its variant; the default and current rows compete
    for shape, (lo, hi), _ in sm90.router_buckets([(6144, 128)]):
        cands = sm90.router_candidates(*shape, lo, hi)
        for kernel, params in cands:
            name = f"router_gemm{'_splitk' if kernel == 'splitk' else ''}_k6144_n128"
            reg.variants[name].check_params(reg.variants[name], "params", params)
        keys = {key(*c) for c in cands}
        for x_dtype in ("bf16", "fp32"):  # both x dtypes' rows compete
            bucket = sm90.router_bucket(shape, lo, hi, x_dtype)
            assert key(*sm90.default("router_gemm", bucket)) in keys
            assert key(*sm90.current("router_gemm", bucket)) in keys
    for point in sm90.decode_points([131072]):
        for variant, params in sm90.scorer_candidates_at(*point) + \
                sm90.selector_candidates_at(*point):
            reg.variants[variant].check_params(reg.variants[variant], "params", params)


def test_amd_targets_are_offered_no_tf32x3_or_pdl(reg):
    hw, declared = target.target_of(facts("AMD Instinct MI300X", gcn_arch="gfx942:sramecc+"),
                                    reg.hardware)
    assert (hw.name, declared, hw.aliases) == ("gfx942", False, ("mi300x",))
    space = Space(reg, hw, sms=304, quick=True)
    assert not any(p.get("tf32x3") for s, b, _ in space.router_buckets([(6144, 128)])
                   for _, p in space.router_candidates(*s, *b))
    assert not any(p["pdl"] for p in (c[1] for c in space.selector_candidates(1024)))


def test_hand_written_targets_are_refused(reg):
    with pytest.raises(SystemExit, match="'gfx950'.*written by hand"):
        target.target_of(facts("AMD Instinct MI355X", gcn_arch="gfx950"), reg.hardware)
    with pytest.raises(SystemExit, match="'generic'.*written by hand"):
        write.refuse_hand_written(reg, "generic")
    write.refuse_hand_written(reg, "sm_90")  # measured: fine
    hw, declared = target.target_of(facts("NVIDIA H200", (9, 0)), reg.hardware)
    assert (hw.name, declared) == ("sm_90", True)


# ---------------------------------------------------------------------------------------------
# measurement


def test_interleaved_rounds_rotate_the_order():
    calls = []

    def sampler(name, t):
        def sample(n):
            calls.append(name)
            return [t] * n
        return sample

    got = measure.interleave({k: sampler(k, i) for i, k in enumerate("abc")}, rounds=4,
                             per_round=3)
    assert calls == list("abc" "abc" "bca" "cab" "abc")  # a discarded settle round first
    assert got == {"a": [0] * 4, "b": [1] * 4, "c": [2] * 4}


def test_measure_and_choose_find_the_fake_optimum(sm90):
    dev = FakeDevice()
    run = fake_run(sm90, dev, {"router", "decode"}, shapes=[(6144, 128)], contexts=[8192])
    rejected = [c for p in run["points"] for c in p["candidates"] if "rejected" in c]
    assert rejected and all(c["params"]["kv_chunks"] == 16 and c["params"]["num_stages"] == 2
                            for c in rejected)
    assert dev.released >= len(sm90.decode_points([8192]))  # inputs freed between points
    timed = [c for p in run["points"] for c in p["candidates"] if "us" in c]
    assert all(c["rounds"] and len(c["rounds"]) == 2 for c in timed)
    rows, report, labels = choose.choose([run], sm90)
    assert labels == ["GPU-a"] and not any(line.startswith("  keep") for line in report)
    by = {json.dumps({a: v for a, v in r.items() if a in ("shape", "x_dtype", "num_tokens",
                                                          "max_q", "max_block", "num_reqs",
                                                          "rows_x_heads")}): r for r in rows}
    # router: 2 token buckets × 2 x dtypes; scorer: 4 request buckets × 2 Qmax buckets;
    # selector: the rows · heads buckets of R·Q ∈ {1, 4, 16, 64, 256}
    assert len(by) == len(rows) == 2 * 2 + 4 * 2 + 5
    for row in rows:
        p = row["params"]
        if "shape" in row:
            assert (row["kernel"], p["block_k"], p["num_warps"]) == ("per_expert", 1024, 4)
            assert p["block_m"] == min(4, row["num_tokens"][1])
        elif "num_reqs" in row:
            lo, hi = row["num_reqs"]
            want = "index_decode_fused" if hi <= 2 else (
                "index_score_balanced" if hi <= 4 else "index_score_split")
            assert row["variant"] == want, row
            if want == "index_score_balanced":
                assert p["program_budget"] == 264
        else:
            # 64 blocks fit one 128 tile: one chunk, so no merge to adapt
            assert (p["topk_tile"], p["num_warps"], p["topk_chunks"], p["adaptive_merge"],
                    p["pdl"]) == (128, 4, 1, False, True), row
        assert row["measured"]["rule"] == "fastest"


def test_a_failing_point_is_recorded_and_the_others_measured(sm90):
    class Flaky(FakeDevice):
        def decode_case(self, R, Q, ctx, mixed=False):
            if R == 16:
                raise RuntimeError("CUDA out of memory (fake)")
            return super().decode_case(R, Q, ctx, mixed)

    run = fake_run(sm90, Flaky(), {"decode"}, contexts=[8192])
    assert sorted(run["errors"]) == ["decode R=16 Q=1 mb=64: RuntimeError: CUDA out of memory "
                                     "(fake)", "decode R=16 Q=4 mb=64: RuntimeError: CUDA out "
                                     "of memory (fake)"]
    assert len(run["points"]) == 2 * (len(sm90.decode_points([8192])) - 2)


# ---------------------------------------------------------------------------------------------
# choice: worst case over machines, noise rule


def _point(table, bucket, rep, cands, spread=0.0):
    ck = choose.CHOICE_KEY[table]
    return {"table": table, "buckets": [bucket], "rep": rep,
            "candidates": [{ck: c, "params": p, "us": us,
                            "rounds": [us * (1 - spread), us, us * (1 + spread)]}
                           for c, p, us in cands]}


def _synthetic(machine, table, bucket, times: dict, spread=0.0):
    """A run with one bucket: times = {(choice, params json): {rep: µs}}."""
    reps = sorted({r for t in times.values() for r in t})
    points = [_point(table, bucket, rep, [(c, json.loads(p), t[rep]) for (c, p), t in
                                          times.items()], spread) for rep in reps]
    return {"format": cli.RUN_FORMAT, "target": {"name": "sm_90", "declared": True},
            "run": {"machine": machine, "sms": 132},
            "sections": ["decode" if table != "router_gemm" else "router"],
            "inputs": dict(MEASURED_SCORE), "points": points}


R64 = {**MEASURED_SCORE, "max_q": [1, 1], "max_block": [257, 65534], "num_reqs": [33, 64]}


def _split(chunks, static, warps=4, stages=3):
    return json.dumps(dict(kv_chunks=chunks, high_batch=False, static_chunks=static,
                           num_warps=warps, num_stages=stages))


def test_machines_merge_and_the_worst_case_wins(sm90):
    """An R64 128k Q1 case: one candidate takes 492 µs on one machine but 555 on another; a
    steadier candidate 512 / 521 wins by the worst case; every machine is recorded under its
    label."""
    fast_sometimes = ("index_score_split", _split(128, True))
    steady = ("index_score_split", _split(256, False, 4, 2))
    default = ("index_score_split", json.dumps(dict(kv_chunks=8, high_batch=False,
                                                    static_chunks=False, num_warps=None,
                                                    num_stages=None)))
    runs = []
    for machine, ours, theirs, scale in (("GPU-a", 492, 512, 1.0), ("GPU-b", 555, 521, 1.0),
                                         ("GPU-c", 492, 512, 1.02), ("GPU-d", 555, 521, 1.02)):
        runs.append(_synthetic(machine, "index_score", R64, {
            fast_sometimes: {"R64 Q1 mb1024": ours * scale},
            steady: {"R64 Q1 mb1024": theirs * scale},
            default: {"R64 Q1 mb1024": 600 * scale}}))
    rows, report, labels = choose.choose(runs, sm90)
    assert labels == ["GPU-a", "GPU-b", "GPU-c", "GPU-d"]
    (row,) = rows
    assert row["params"]["kv_chunks"] == 256 and row["measured"]["rule"] == "fastest"
    us = row["measured"]["winner"]["us"]["R64 Q1 mb1024"]
    assert us == {"GPU-a": 512, "GPU-b": 521, "GPU-c": 522.24, "GPU-d": 531.42}
    runner = row["measured"]["runner_up"]
    assert runner["params"]["kv_chunks"] == 128 and runner["us"]["R64 Q1 mb1024"]["GPU-b"] == 555
    assert row["measured"]["winner"]["worst"] == round(512 / 492, 4)
    # a bucket one of the runs did not measure keeps its row
    runs[3]["points"] = []
    rows, report, _ = choose.choose(runs, sm90)
    assert rows == [] and "not measured by GPU-d" in report[0]


def test_runs_split_by_context_each_decide_their_own_buckets(sm90):
    """Decode measured in separate calls per context on two machines: every bucket is decided
    by the two runs that planned it; the guard for robustness is quiet."""
    runs = [fake_run(sm90, FakeDevice(), {"decode"}, machine=machine, contexts=[ctx])
            for ctx in (8192, 131072) for machine in ("GPU-a", "GPU-b")]
    rows, report, labels = choose.choose(runs, sm90)
    assert not [line for line in report if line.startswith("  keep")], report
    assert {r["max_block"][0] for r in rows} == {0, 257, 1025}
    for row in rows:
        assert len(next(iter(row["measured"]["winner"]["us"].values()))) == 2
    assert choose.coverage_warning(runs) is None
    assert choose.coverage_warning(runs[:1]) == "not robust yet: missing a second machine"
    assert choose.coverage_warning(runs[::2]) == "not robust yet: missing a second machine"


def test_attention_points_can_be_limited_to_some_program_counts(reg):
    """`measure --programs` keeps those representatives only; the other buckets are not
    planned (so they keep their rows)."""
    space = Space(reg, reg.hardware["sm_90"], sms=132)
    every = space.attn_points()
    some = space.attn_points([4, 8, 16, 32])
    assert {P for _, _, P, _, _ in some} == {4, 8, 16, 32}
    assert all(p in every for p in some) and len(some) < len(every)
    run = measure.Run(space, FakeDevice(), rounds=1, per_round=1, budget_s=-1,
                      say=lambda *a: None)
    run.attention([4, 8])
    assert {json.dumps(b["bucket"]["programs"]) for b in run.planned} == {"[3, 8]"}
    # one and two programs: only the one-KV-head layouts (P programs are P / Hkv rows) at
    # Q 1; decode's Q 4 where P / Hkv rows hold a request's four
    small = space.attn_points([1, 2])
    assert small and all(H == 1 and Q == 1 for _, _, _, H, Q in small)
    assert {(i["group"], P) for _, i, P, _, _ in small} == {(16, 1), (16, 2), (8, 1), (8, 2)}
    assert {(m, Q) for m, _, _, _, Q in every} == {("decode", 1), ("decode", 4), ("prefill", 1)}
    assert all(H * Q <= P for _, _, P, H, Q in every)
    assert ("decode", 16, 8, 1, 4) in {(m, i["group"], P, H, Q) for m, i, P, H, Q in every}
    assert not any(Q == 4 and H == 4 and P == 8 for _, _, P, H, Q in every)
    # `measure --groups 8`: G 8's points only (G 16's buckets are not planned)
    g8 = Space(reg, reg.hardware["sm_90"], sms=132, groups=[8])
    assert g8.attn_points([32]) == [p for p in space.attn_points([32]) if p[1]["group"] == 8]
    assert {i["group"] for _, i, _, _, _ in g8.attn_points()} == {8}
    with pytest.raises(ValueError, match="groups"):
        Space(reg, reg.hardware["sm_90"], sms=132, groups=[3])
    # `measure --modes decode`: decode's points only (prefill's buckets are not planned)
    dec = Space(reg, reg.hardware["sm_90"], sms=132, modes=["decode"])
    assert dec.attn_points() == [p for p in space.attn_points() if p[0] == "decode"]
    assert {p[0] for p in space.attn_points()} == {"decode", "prefill"}
    run = measure.Run(dec, FakeDevice(), rounds=1, per_round=1, budget_s=-1,
                      say=lambda *a: None)
    run.attention([32])
    assert {b["table"] for b in run.planned} == {"sparse_attn_decode"}
    with pytest.raises(ValueError, match="modes"):
        Space(reg, reg.hardware["sm_90"], sms=132, modes=["verify"])
    # `measure --query-lens 4`: decode's Q 4 points only (its Q 1 buckets are not planned)
    q4 = Space(reg, reg.hardware["sm_90"], sms=132, modes=["decode"], query_lens=[4])
    assert q4.attn_points() == [p for p in dec.attn_points() if p[4] == 4] and q4.attn_points()
    run = measure.Run(q4, FakeDevice(), rounds=1, per_round=1, budget_s=-1,
                      say=lambda *a: None)
    run.attention([64])
    assert {json.dumps(b["bucket"]["query_len"]) for b in run.planned} == {"[2, null]"}
    with pytest.raises(ValueError, match="query lengths"):
        Space(reg, reg.hardware["sm_90"], sms=132, query_lens=[2])


def test_tma_and_table_first_twins_and_near_keeps_one_parameter_from_the_current_row(reg):
    """On sm_90 every split candidate comes with and without tma, the tiled kernel's only where
    its sorted walk pipelines (more than one stage), and none on a target without the
    accelerator; `measure --near` keeps the candidates one launch parameter away from the
    bucket's current row (tma flipped among them) and the anchors."""
    sm90 = Space(reg, reg.hardware["sm_90"], sms=132)
    for mode, inputs, P, _, Q in sm90.attn_points([32]):
        cands = sm90.attn_candidates_at(mode, inputs, P, Q)
        split = [p for v, p in cands if v == A_SPLIT]
        assert all(dict(p, tma=not p["tma"]) in split for p in split), (mode, inputs)
        tiled = [p for v, p in cands if v == A_TILED]
        assert all((dict(p, tma=not p["tma"]) in tiled) ==
                   (p["sorted_union"] and p["num_stages"] > 1) for p in tiled), (mode, inputs)
        assert bool(tiled) == (mode == "prefill" or Q > 1)
        assert any(p["tma"] for p in tiled) == bool(tiled)
        if mode == "decode":  # a request's Q rows in one tile
            lanes = min(256, max(16, pow2ceil(Q * inputs["group"])))
            assert {p["lanes"] for p in tiled} <= {lanes}
    generic = Space(reg, reg.hardware["generic"], sms=132)
    mode, inputs, P, _, Q = generic.attn_points([32])[0]
    assert not any(p.get("tma") for _, p in generic.attn_candidates_at(mode, inputs, P, Q))
    # table_first twins: decode split launches of up to 128 programs, on every target
    for space in (sm90, generic):
        for mode, inputs, P, _, Q in space.attn_points([32, 128, 256]):
            cands = space.attn_candidates_at(mode, inputs, P, Q)
            split = [p for v, p in cands if v == A_SPLIT and not p["max_registers"]]
            twins = mode == "decode" and P <= 128
            assert all((dict(p, table_first=not p["table_first"]) in split) == twins
                       for p in split), (space.target.name, mode, P)
    near = Space(reg, reg.hardware["sm_90"], sms=132, near=True)
    for mode, inputs, P, _, Q in near.attn_points([1, 32, 128]):
        bucket = near.attn_bucket(mode, inputs, P, Q)
        table = ATTN_TABLES[mode]
        current = near.current(table, bucket)
        cands = near.attn_candidates_at(mode, inputs, P, Q)
        assert current in cands and near.default(table, bucket) in cands
        assert len(cands) < len(sm90.attn_candidates_at(mode, inputs, P, Q))
        for variant, params in cands:
            if (variant, params) == near.default(table, bucket):
                continue
            assert variant == current[0]
            apart = {k for k, v in near.completed(variant, params).items()
                     if current[1].get(k) != v}
            assert len(apart) <= 1, (params, current)
        if current[0] == A_SPLIT:  # the current row with tma flipped (and table_first)
            assert (current[0], dict(current[1], tma=not current[1]["tma"])) in cands
            assert ((current[0], dict(current[1], table_first=True)) in cands) == (
                mode == "decode" and P <= 128)


def test_register_cap_twins_where_the_grid_asks_for_more_than_two_programs_per_sm(reg):
    """Decode split launches of four warps, not table_first, whose grid (programs · head
    shares · splits) asks for more than two programs per SM come also under a register cap of
    128 over an 8-bit cache without per-token scales; nothing else is capped (other inputs,
    prefill, quick but for the table's current row)."""
    full, quick = Space(reg, reg.hardware["sm_90"], sms=132), \
        Space(reg, reg.hardware["sm_90"], sms=132, quick=True)
    assert attn_register_cap(dict(kv_dtype="fp8e4m3", scales="none")) == 128
    assert attn_register_cap(dict(kv_dtype="fp8e5m2", scales="scalar")) == 128
    assert attn_register_cap(dict(kv_dtype="fp8e4m3", scales="per_token")) is None
    assert attn_register_cap(dict(kv_dtype="bf16", scales="none")) is None
    seen = set()
    for mode, inputs, P, _, Q in full.attn_points([16, 64, 512]):
        cands = full.attn_candidates_at(mode, inputs, P, Q)
        split = [p for v, p in cands if v == A_SPLIT]
        capped = [p for p in split if p["max_registers"]]
        want = [dict(p, max_registers=attn_register_cap(inputs)) for p in split
                if not p["max_registers"] and mode == "decode" and p["num_warps"] == 4
                and not p["table_first"]
                and P * min(p["head_split"], inputs["group"]) * p["splits"] > 2 * 132
                and attn_register_cap(inputs)]
        assert sorted(map(repr, capped)) == sorted(map(repr, want)), (mode, inputs, P)
        seen.add((mode, inputs["kv_dtype"], P, bool(capped)))
        # quick tries no cap of its own; the table's current row comes as an anchor
        current = quick.current(ATTN_TABLES[mode], quick.attn_bucket(mode, inputs, P, Q))
        assert not any(p.get("max_registers") for v, p in
                       quick.attn_candidates_at(mode, inputs, P, Q) if (v, p) != current)
    assert {("decode", "bf16", 16, False), ("decode", "fp8e4m3", 64, True),
            ("decode", "fp8e4m3", 512, True), ("decode", "bf16", 512, False),
            ("prefill", "fp8e4m3", 512, False)} <= seen


def test_attention_buckets_are_measured_at_each_served_head_count(reg):
    """G 16 at four KV heads (64 / 4) and at one (16 / 1), G 8 at one, each program count:
    one bucket holds both layouts as representatives, so its row is the worst case of both."""
    space = Space(reg, reg.hardware["sm_90"], sms=132)
    every = space.attn_points()
    assert {(i["group"], H) for _, i, _, H, _ in every} == {(16, 4), (16, 1), (8, 1)}
    labels = [space.attn_rep_label(*point) for point in every]
    assert len(set(labels)) == len(labels) and "decode G16 P64" in labels \
        and "decode G16 P64 Hkv1" in labels and "decode G8 P64" in labels \
        and "decode G16 P64 Q4" in labels and "decode G8 P64 Q4" in labels
    dev = FakeDevice()
    cases = []
    dev.attn_case = lambda mode, inputs, programs, kv_heads, Q=1, own_lists=False: \
        cases.append((mode, inputs["group"], programs, kv_heads)) or {"mode": mode,
                                                                      "programs": programs}
    run = measure.Run(space, dev, rounds=1, per_round=1, budget_s=1e9, say=lambda *a: None)
    run.attention([8])
    assert ("decode", 16, 8, 1) in cases and ("decode", 16, 8, 4) in cases
    reps = {p["rep"] for p in run.points if p["buckets"][0]["group"] == 16
            and p["table"] == "sparse_attn_decode"}
    # decode also inside sparse_decode_step, Q 4 also with each row's own list; every
    # measured cache dtype (bf16 plain) (Q 4 at one KV head only: four heads' 8 programs are
    # two rows)
    assert reps == {f"decode G16 P8{h}{kv}{rep}" for h in ("", " Hkv1", " Hkv1 Q4")
                    for kv in ("", " fp8e4m3")
                    for rep in ("", " step 8k") + ((" own lists",) if "Q4" in h else ())}


def test_long_buckets_are_measured_with_mixed_lengths_too(sm90):
    """At the largest context every point of two requests or more is measured a second time
    with mixed lengths, as another representative of the same buckets, and the chooser weighs
    both (a row chosen on equal lengths alone lost up to 12 % on the bench's mixed rows)."""
    mixed = sm90.mixed_decode_points([131072])
    assert mixed and set(mixed) == {p for p in sm90.decode_points([131072]) if p[0] >= 2}
    assert not sm90.mixed_decode_points([8192])  # only the largest context
    devs = [FakeDevice(), FakeDevice()]
    runs = [fake_run(sm90, dev, {"decode"}, machine=m, contexts=[131072])
            for dev, m in zip(devs, ("GPU-a", "GPU-b"))]
    assert devs[0].mixed.count(True) == len(mixed)
    R, Q, mb = mixed[0]
    rows, report, _ = choose.choose(runs, sm90)
    assert not [line for line in report if line.startswith("  keep")], report
    bucket = {k: list(v) if isinstance(v, tuple) else v
              for k, v in as_json(sm90.score_bucket(R, Q, mb)).items()}
    row = next(r for r in rows if r["table"] == "index_score"
               and all(r.get(k) == v for k, v in bucket.items()))
    assert {f"R{R} Q{Q} mb{mb}", f"R{R} Q{Q} mb{mb} mix"} <= set(row["measured"]["winner"]["us"])


def test_the_fastest_does_not_depend_on_the_order_of_measurement():
    """The artifact timing hygiene guards against: the first samples taken after heavy torch
    work are 13 % slow, whichever kernel they time. Candidates 3 % apart, measured in either
    order, still rank the same (without the settle round, whichever came first would lose)."""
    for order in ("ab", "ba"):
        cold = [True]

        def sampler(t):
            def sample(n):
                slow, cold[0] = (1.13 if cold[0] else 1.0), False
                return [t * slow] * n
            return sample

        times = {"a": 100.0, "b": 103.0}
        got = measure.interleave({k: sampler(times[k]) for k in order}, rounds=2, per_round=3)
        medians = {k: sorted(v)[len(v) // 2] for k, v in got.items()}
        assert min(medians, key=medians.get) == "a", (order, got)


def test_within_noise_the_simpler_candidate_is_kept(sm90):
    """0.5 % faster than the default row: the default is kept (rule 'simpler within noise',
    the faster one is the runner-up); 3 % faster: it wins; 3 % within 6 % round-to-round
    noise: the default is kept again."""
    bucket = {**MEASURED_SCORE, "max_q": [2, 8], "max_block": [0, 64], "num_reqs": [9, 11]}
    default = ("index_score_split", json.dumps(dict(kv_chunks=32, high_batch=False,
                                                    static_chunks=False, num_warps=None,
                                                    num_stages=None)))
    assert sm90.default("index_score", as_bucket(bucket)) == \
        (default[0], json.loads(default[1]))
    fancy = ("index_score_split", _split(16, True))
    for gain, spread, kept in ((0.005, 0.0, True), (0.03, 0.0, False), (0.03, 0.03, True)):
        run = _synthetic("GPU-a", "index_score", bucket, {
            default: {"R11 Q4 mb64": 100.0}, fancy: {"R11 Q4 mb64": 100.0 * (1 - gain)}},
            spread)
        (row,), _, _ = choose.choose([run], sm90)
        m = row["measured"]
        assert (row["params"]["kv_chunks"] == 32) == kept, (gain, spread, row)
        assert m["rule"] == ("simpler within noise" if kept else "fastest")
        assert m["runner_up"]["params"]["kv_chunks"] == (16 if kept else 32)
        assert m["noise"] == (0.01 if not spread else round(2 * 0.03, 4))


def test_run_labels_stay_unique_across_tunes():
    run = {"run": {"machine": "GPU-a", "date": "d2"}}
    assert choose.run_labels([run, run]) == ["GPU-a", "GPU-a#2"]
    # the data file already holds an older GPU-a: the new run gets its own label, the same
    # run chosen again keeps its label
    older = {"GPU-a": {"machine": "GPU-a", "date": "d1"}}
    assert choose.run_labels([run], older) == ["GPU-a#2"]
    assert choose.run_labels([run], {"GPU-a": run["run"]}) == ["GPU-a"]
    # ... under whichever label it was described, even when a lower one is free again
    assert choose.run_labels([run], {"GPU-a#2": run["run"]}) == ["GPU-a#2"]


def test_simpler_means_default_then_kernel_then_features_then_grid():
    d = ("index_score_split", {"kv_chunks": 8, "static_chunks": False, "num_warps": None})
    cands = [("index_decode_fused", {"kv_chunks": 8}),
             ("index_score_split", {"kv_chunks": 64, "static_chunks": True, "num_warps": 4}),
             ("index_score_split", {"kv_chunks": 64, "static_chunks": False, "num_warps": 4}),
             ("index_score_split", {"kv_chunks": 16, "static_chunks": False, "num_warps": 4}),
             d]
    order = sorted(cands, key=lambda c: choose.simplicity(c, d))
    assert order == [cands[4], cands[3], cands[2], cands[1], cands[0]]
    # a register cap counts as a feature switched on: within noise the uncapped launch stays
    split = dict(splits=2, kv_tile=128, head_split=1, merge_kernel=False, tma=False,
                 table_first=False, num_warps=4, num_stages=2)
    plain, capped = ("sparse_attn_split", dict(split, max_registers=None)), \
        ("sparse_attn_split", dict(split, max_registers=128))
    fewer_splits = ("sparse_attn_split", dict(split, splits=1, max_registers=128))
    assert sorted([capped, plain], key=lambda c: choose.simplicity(c, d)) == [plain, capped]
    assert choose.simplicity(fewer_splits, d) > choose.simplicity(plain, d)


# ---------------------------------------------------------------------------------------------
# writing: a new target, one half of a measured one


def test_prefill_tune_writes_rows_the_dispatcher_uses(sm90, spec_copy, capsys):
    """The prefill section on two fake machines: choose finds the fake optimum in every bucket
    it measured, --write puts the rows into the data file, and the regenerated tables launch
    them for the measured inputs while other inputs keep the declared rows."""
    space = Space(sm90.reg, sm90.target, sms=132)  # every candidate (the fake is instant)
    runs = []
    for machine in ("GPU-a", "GPU-b"):
        run = fake_run(space, FakeDevice(), {"prefill"}, machine=machine)
        runs.append(tmp := spec_copy.parent / f"prefill_{machine}.json")
        tmp.write_text(json.dumps(run))
    assert cli.main(["choose", *map(str, runs), "--write", "--specs", str(spec_copy)]) == 0
    out = capsys.readouterr().out
    assert "index_prefill_score" in out and "keep" not in out, out
    data = measured.load_file(str(spec_copy / "measured" / "sm_90.json"))
    chosen = {t: [r for r in data.rows(t) if r.source == "measured"]
              for t in ("index_prefill_score", "index_prefill_topk", "index_prefill")}
    assert all(chosen.values()), chosen
    for row in chosen["index_prefill_score"]:
        p = row.params
        assert (p["block_m"] * row.when["num_heads"], p["kv_splits"], p["num_warps"]) == \
            (128, 8, 8), row
    for row in chosen["index_prefill_topk"]:
        assert (row.params["block_k"], row.params["block_rows"], row.params["num_warps"]) == \
            (256, 1, 2), row
    for row in chosen["index_prefill"]:
        want = "index_prefill_stream" if row.when["num_heads"] > 1 else "index_prefill"
        assert row.choice == want, row
    reg = registry.load(str(spec_copy))
    from codegen.policy import lookup

    def pick(policy, **point):
        p = reg.policies[policy]
        return lookup(p, reg.tables[policy], tuple(point[a.name] for a in p.axes))

    inputs = dict(hardware="sm_90", q_dtype="bf16", cache_dtype="bf16", head_dim=128,
                  num_tokens=8192, max_block=1024)
    rule = pick("index_prefill_score", **inputs, num_heads=1)
    assert str(rule.loc).startswith("specs/measured/sm_90.json") or \
        "measured/sm_90.json" in str(rule.loc)
    other = pick("index_prefill_score", **{**inputs, "q_dtype": "fp16", "cache_dtype": "fp16"},
                 num_heads=1)
    assert "index_prefill.py" in str(other.loc)
    assert pick("index_prefill_topk", hardware="sm_90", topk=16, max_block=1024,
                rows_x_heads=8192).params[0] == ("block_k", 256)


def test_attention_tune_writes_rows_the_dispatcher_uses(sm90, spec_copy, capsys,
                                                       attention_run_texts):
    space = Space(sm90.reg, sm90.target, sms=132)
    runs = []
    for machine, text in zip(("GPU-a", "GPU-b"), attention_run_texts):
        runs.append(tmp := spec_copy.parent / f"attn_{machine}.json")
        tmp.write_text(text)
    assert cli.main(["choose", *map(str, runs), "--write", "--specs", str(spec_copy)]) == 0
    assert "keep" not in capsys.readouterr().out
    data = measured.load_file(str(spec_copy / "measured" / "sm_90.json"))
    # the rows this tune measured (the data file holds others: per-token scales, and Q ≥ 2
    # at one or two programs, which no request of four rows fills)
    rows = [r for t in ("sparse_attn_decode", "sparse_attn_prefill") for r in data.rows(t)
            if r.source == "measured" and "GPU-a" in json.dumps(r.measured)]
    assert rows and {r.when["query_len"] for r in rows if "query_len" in r.when} == {
        (1, 1), (2, None)}
    assert all({k: r.when[k] for k in space.attn_inputs[0]} in space.attn_inputs
               for r in rows)
    for row in rows:
        lo = row.when["programs"][0]
        if row.table == "sparse_attn_prefill" and lo > 512:
            assert (row.choice, row.params["lanes"], row.params["num_warps"]) == \
                ("sparse_attn_tiled", 64, 8), row
        elif row.table == "sparse_attn_decode" and lo == 257:  # lost inside the step
            assert row.choice == "sparse_attn_split" and row.params["splits"] != 4, row
        else:  # the worst case over a bucket's representatives
            assert (row.choice, row.params["splits"], row.params["num_stages"]) == \
                ("sparse_attn_split", 4, 2 if lo == 3 else 3), row
    reg = registry.load(str(spec_copy))
    from codegen.policy import lookup
    p = reg.policies["sparse_attn_decode"]
    point = dict(hardware="sm_90", q_dtype="bf16", kv_dtype="bf16", scales="none", group=16,
                 head_dim=128, query_len=1, programs=100)
    rule = lookup(p, reg.tables["sparse_attn_decode"], tuple(point[a.name] for a in p.axes))
    assert "measured/sm_90.json" in str(rule.loc) and dict(rule.params)["splits"] == 4
    point["query_len"] = 8  # speculative decoding: the row chosen at Q 4
    rule = lookup(p, reg.tables["sparse_attn_decode"], tuple(point[a.name] for a in p.axes))
    assert "query_len ≥ 2" in str(rule.loc) and dict(rule.params)["splits"] == 4
    point["kv_dtype"] = "fp8e5m2"  # an input served by fp8 e4m3's rows (MEASURED_AS)
    rule = lookup(p, reg.tables["sparse_attn_decode"], tuple(point[a.name] for a in p.axes))
    assert "measured/sm_90.json" in str(rule.loc) and "fp8e4m3" in str(rule.loc)
    point["head_dim"] = 64  # inputs without rows: the declared ones
    rule = lookup(p, reg.tables["sparse_attn_decode"], tuple(point[a.name] for a in p.axes))
    assert "specs/sparse_attn.py" in str(rule.loc)


def test_a_decode_tile_of_a_requests_rows_is_chosen_where_fastest(sm90, spec_copy, capsys):
    """Where the query-tiled kernel is the fastest decode launch at Q ≥ 2 on every
    representative (shared lists, own lists, inside the step), the chosen row names it, at
    Q · G lanes, the data file loads, and the dispatcher takes it at any Q ≥ 2 (not at Q 1)."""
    class TiledFast(FakeDevice):
        def sampler(self, fn):
            fn()
            if self.last[0] == "attention" and self.last[1] == A_TILED and \
                    self.last[3] == "decode":
                return lambda n: [5.0] * n
            return super().sampler(lambda: None)

    space = Space(sm90.reg, sm90.target, sms=132, modes=["decode"])
    runs = []
    for machine in ("GPU-a", "GPU-b"):
        runs.append(tmp := spec_copy.parent / f"attn_{machine}.json")
        tmp.write_text(json.dumps(fake_run(space, TiledFast(), {"attention"}, machine=machine)))
    assert cli.main(["choose", *map(str, runs), "--write", "--specs", str(spec_copy)]) == 0
    capsys.readouterr()
    data = measured.load_file(str(spec_copy / "measured" / "sm_90.json"))
    rows = [r for r in data.rows("sparse_attn_decode")
            if r.source == "measured" and "GPU-a" in json.dumps(r.measured)]
    tiled = [r for r in rows if r.choice == A_TILED]
    assert tiled and all(r.when["query_len"] == (2, None) for r in tiled)
    assert all(r.params["lanes"] == 4 * r.when["group"] for r in tiled)
    assert all(r.choice != A_TILED for r in rows if r.when["query_len"] == (1, 1))
    reg = registry.load(str(spec_copy))
    p = reg.policies["sparse_attn_decode"]
    row = tiled[0]
    point = dict(hardware="sm_90", **{k: row.when[k] for k in space.attn_inputs[0]},
                 query_len=8, programs=row.when["programs"][0])
    rule = lookup(p, reg.tables["sparse_attn_decode"], tuple(point[a.name] for a in p.axes))
    assert rule.variant == A_TILED, rule


def test_attention_runs_from_before_query_lengths_are_chosen_as_q1_runs(sm90):
    """Runs written before decode rows were by query length (Q 1 points only, no query_len in
    their buckets, points or planned buckets) are chosen as Q 1 runs: the same Q 1 rows as runs
    of now, no Q ≥ 2 row; with Q 4 runs of two other machines (`--query-lens 4`) beside them,
    every row a run of now gives."""
    space = Space(sm90.reg, sm90.target, sms=132, modes=["decode"])
    runs = [fake_run(space, FakeDevice(), {"attention"}, machine=m) for m in ("GPU-a", "GPU-b")]

    def strip(bucket):
        return {k: v for k, v in bucket.items() if k != "query_len"}
    old_runs = []
    for run in runs:
        old = json.loads(json.dumps(run))
        old["points"] = [{**{k: v for k, v in p.items() if k != "query_len"},
                          "buckets": [strip(b) for b in p["buckets"]]}
                         for p in old["points"] if p["buckets"][0]["query_len"] == [1, 1]]
        old["planned"] = [{**e, "bucket": strip(e["bucket"])} for e in old["planned"]
                          if e["bucket"]["query_len"] == [1, 1]]
        old_runs.append(old)
    q4 = Space(sm90.reg, sm90.target, sms=132, modes=["decode"], query_lens=[4])
    q4_runs = [fake_run(q4, FakeDevice(), {"attention"}, machine=m) for m in ("GPU-c", "GPU-d")]

    def chosen(rows):
        return sorted(json.dumps([r["table"], {k: r[k] for k in r if k in (
            "q_dtype", "kv_dtype", "scales", "group", "head_dim", "query_len", "programs")},
            r["variant"], r["params"]], sort_keys=True) for r in rows)
    now, _, _ = choose.choose(runs, space)
    assert {json.dumps(r["query_len"]) for r in now} == {"[1, 1]", "[2, null]"}
    q1 = [r for r in now if r["query_len"] == [1, 1]]
    assert chosen(choose.choose(old_runs, space)[0]) == chosen(q1)
    assert chosen(choose.choose(old_runs + q4_runs, space)[0]) == chosen(now)


def test_attention_runs_measured_before_a_bucket_edge_moved_are_chosen_as_now(
        sm90, attention_run_texts):
    """A run whose attention points were filed under a bucket since split (9–32, before
    9–16 and 17–32), without the points' ``programs`` field, is re-filed by the P of each
    label: it chooses the same rows as the run filed now, and plans both new buckets."""
    space = Space(sm90.reg, sm90.target, sms=132)
    runs = [json.loads(text) for text in attention_run_texts]  # (GPU-a, GPU-b)

    def joined(bucket):
        lo, hi = bucket["programs"]
        return {**bucket, "programs": [9, 32]} if 9 <= lo and hi is not None and hi <= 32 \
            else bucket
    old_runs = []
    for run in runs:
        old = json.loads(json.dumps(run))
        for point in old["points"]:
            if point["table"].startswith("sparse_attn"):
                assert point.pop("programs") > 0
                point["buckets"] = [joined(b) for b in point["buckets"]]
        planned = []
        for entry in old["planned"]:
            e = {**entry, "bucket": joined(entry["bucket"])} \
                if entry["table"].startswith("sparse_attn") else entry
            if e not in planned:
                planned.append(e)
        old["planned"] = planned
        old_runs.append(old)
    assert any(b["programs"] == [9, 32] for r in old_runs for p in r["points"]
               for b in p["buckets"])
    rows_now, report_now, _ = choose.choose(runs, space)
    rows_old, report_old, _ = choose.choose(old_runs, space)
    assert rows_old == rows_now and report_old == report_now
    spans = {tuple(r["programs"]) for r in rows_now if r["table"] == "sparse_attn_decode"}
    assert {(9, 16), (17, 32)} <= spans and (9, 32) not in spans
    # a machine that planned 9–32 but lost its 16-program points still counts for 9–16
    old_runs[1]["points"] = [p for p in old_runs[1]["points"]
                             if not (p["table"] == "sparse_attn_decode" and " P16" in p["rep"])]
    rows, report, _ = choose.choose(old_runs, space)
    spans = {tuple(r["programs"]) for r in rows if r["table"] == "sparse_attn_decode"}
    assert (9, 16) not in spans and (17, 32) in spans
    assert any("keep sparse_attn_decode" in line and "9–16" in line and
               "not measured by GPU-b" in line for line in report), report


def test_a_new_target_is_written_and_loads(reg, spec_copy):
    """A B200 (capability 10.0) is the new target sm_100: its data file (hardware facts,
    measured and default rows) is written into specs/, loads through the registry next to
    the others, and the generated runtime detects it."""
    hw, declared = target.target_of(facts("NVIDIA B200", (10, 0)), reg.hardware)
    assert (hw.name, declared, hw.aliases) == ("sm_100", False, ("sm100", "b200"))
    space = Space(reg, hw, sms=148, quick=True)
    assert not space.measured_here and space.current(
        "router_gemm", space.router_bucket((6144, 128), 1, 1, "bf16")) is None
    run = fake_run(space, FakeDevice(), {"router", "decode"}, shapes=[(6144, 128)],
                   contexts=[131072])
    rows, _, labels = choose.choose([run], space)
    data = write.update(write.skeleton(space, hw), rows, [run], labels, "test", "now", 0.01)
    path = write.write(data, rows, str(spec_copy))
    assert path == str(spec_copy / "measured" / "sm_100.json")
    new = measured.load_file(path)
    sources = {r.source for t in new.tables.values() for r in t}
    assert sources == {"measured", "default"}
    assert new.provenance["runs"] == {"GPU-a": run["run"]}
    assert new.provenance["tunes"][0]["sections"] == ["decode", "router"]
    new_reg = registry.load(str(spec_copy))
    assert set(new_reg.hardware) == {"gfx950", "sm_90", "sm_100", "generic"}
    runtime = render_all(new_reg)["_runtime.py"]
    assert '"sm_100": ("nvidia", None, (10, 0))' in runtime


def _rows_text(path, table):
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    start = lines.index(f'  "{table}": [')
    return lines[start:lines.index("  ],", start) if "  ]," in lines[start:] else None]


def test_retuning_one_half_keeps_the_other(sm90, spec_copy, capsys):
    """`choose --write` with router-only runs replaces the router rows they measured and
    keeps every decode row (and its provenance) byte for byte; then decode-only runs keep the
    router rows the first tune wrote."""
    path = spec_copy / "measured" / "sm_90.json"
    before = {t: _rows_text(path, t) for t in ("index_score", "index_topk")}
    runs = []
    for machine, slow in (("GPU-a", 1.0), ("GPU-b", 1.1)):
        run = fake_run(sm90, FakeDevice(lambda k, p, s=slow: s), {"router"}, machine=machine,
                       shapes=[(4096, 8)])
        runs.append(tmp := spec_copy.parent / f"router_{machine}.json")
        tmp.write_text(json.dumps(run))
    assert cli.main(["choose", *map(str, runs), "--write", "--specs", str(spec_copy)]) == 0
    out = capsys.readouterr().out
    assert "wrote" in out and "router_gemm shape 4096x8, x_dtype bf16, num_tokens 1:" in out
    after = measured.load_file(str(path))
    for table in ("index_score", "index_topk"):
        assert _rows_text(path, table) == before[table]
    new_router = [r for r in after.rows("router_gemm") if r.source == "measured"
                  and "'GPU-a'" in str(r.measured)]
    assert {r.when["shape"] for r in new_router} == {(4096, 8)}
    assert {r.when["x_dtype"] for r in new_router} == {"bf16", "fp32"}
    assert all(set(r.measured["winner"]["us"][f"M1 {r.when['x_dtype']}"]) == {"GPU-a", "GPU-b"}
               for r in new_router if r.when["num_tokens"] == (1, 1))
    runs_before = set(measured.read(SM90)["provenance"]["runs"])
    assert runs_before | {"GPU-a", "GPU-b"} == set(after.provenance["runs"])
    # the decode half, written through the same functions: the new router rows stay
    router_before = _rows_text(path, "router_gemm")
    space = Space(registry.load(str(spec_copy)), sm90.target, sms=132, quick=True)
    run = fake_run(space, FakeDevice(), {"decode"}, contexts=[8192])
    rows, _, labels = choose.choose([run], space)
    data = write.update(measured.read(str(path)), rows, [run], labels, "test", "now", 0.01)
    write.write(data, rows, str(spec_copy))
    assert _rows_text(path, "router_gemm") == router_before
    assert _rows_text(path, "index_score") != before["index_score"]


def test_a_router_tune_of_some_token_counts_splits_the_rows_around_them(sm90, spec_copy,
                                                                        capsys):
    """`measure --tokens 4,32` measures the buckets serving 4 and 32 tokens only; written, their
    rows cut wider rows (here the generic layout 1–4, 5–16, 17–32), whose other token counts
    keep the launch they had."""
    shape = (3072, 256)
    full = Space(sm90.reg, sm90.target, sms=132)
    assert [b[1] for b in full.router_buckets([shape], [4, 32])] == [(3, 4), (25, 32)]
    assert [b[1] for b in full.router_buckets([shape], [3, 10])] == [(3, 4), (9, 12)]
    assert [b[1] for b in full.router_buckets([(7168, 896)], [12, 32])] == []  # capped at 9
    path = spec_copy / "measured" / "sm_90.json"
    data = measured.read(str(path))
    data["router_gemm"] = [r for r in data["router_gemm"] if tuple(r["shape"]) != shape]
    for x_dtype in ("bf16", "fp32"):
        data["router_gemm"] += write._default_rows(full, "router_gemm",
                                                   {"shape": shape, "x_dtype": x_dtype},
                                                   "num_tokens", 1, 32)
    measured.write(str(path), data)
    wide = Space(registry.load(str(spec_copy)), sm90.target, sms=132)
    runs = []
    for machine in ("GPU-a", "GPU-b"):
        run = fake_run(full, FakeDevice(), {"router"}, machine=machine, shapes=[shape],
                       tokens=[4, 32])
        assert {p["rep"].split()[0] for p in run["points"]} == {"M4", "M32"}
        runs.append(tmp := spec_copy.parent / f"router_{machine}.json")
        tmp.write_text(json.dumps(run))
    assert cli.main(["choose", *map(str, runs), "--write", "--specs", str(spec_copy)]) == 0
    capsys.readouterr()
    space = Space(registry.load(str(spec_copy)), sm90.target, sms=132)  # gap-free, it loads
    for x_dtype in ("bf16", "fp32"):
        for m in range(1, 33):
            point = {"shape": shape, "x_dtype": x_dtype, "num_tokens": (m, m)}
            if not (m in (3, 4) or m >= 25):  # outside the new rows: as before
                assert space.row("router_gemm", point, "sm_90") == \
                    wide.row("router_gemm", point, "sm_90"), (m, x_dtype)
        buckets = sorted(tuple(r.when["num_tokens"])
                         for r in measured.load_file(str(path)).rows("router_gemm")
                         if r.when["shape"] == shape and r.when["x_dtype"] == x_dtype)
        assert buckets == [(1, 2), (3, 4), (5, 16), (17, 24), (25, 32)]


def test_a_cut_measured_row_keeps_the_bucket_it_was_measured_for():
    """write.apply cuts a wider row around a new one; the measured pieces name the bucket
    their measurements were taken for (their representatives may lie outside the piece)."""
    measured_row = {"shape": [3072, 256], "x_dtype": "bf16", "num_tokens": [9, 32],
                    "kernel": "per_expert", "params": {"block_m": 4}, "source": "measured",
                    "measured": {"winner": {"us": {"M32 bf16": {"GPU-a": 9.0}}}}}
    default_row = {**measured_row, "x_dtype": "fp32", "source": "default"}
    del default_row["measured"]
    data = {"router_gemm": [measured_row, default_row]}
    for x_dtype in ("bf16", "fp32"):
        write.apply(data, "router_gemm", {**measured_row, "x_dtype": x_dtype,
                                          "num_tokens": [13, 16]})
        write.apply(data, "router_gemm", {**measured_row, "x_dtype": x_dtype,
                                          "num_tokens": [25, 32]})
    pieces = {(r["x_dtype"], tuple(r["num_tokens"])): r for r in data["router_gemm"]}
    assert set(pieces) == {(dt, b) for dt in ("bf16", "fp32")
                           for b in ((9, 12), (13, 16), (17, 24), (25, 32))}
    for b in ((9, 12), (17, 24)):
        assert pieces[("bf16", b)]["measured"]["bucket"] == [9, 32]  # cut twice: the first
        assert "measured" not in pieces[("fp32", b)]
    assert "bucket" not in pieces[("bf16", (13, 16))]["measured"]


def test_readme_states_the_tuners_buckets_and_step_context(reg):
    """README's tuning section says where the router buckets end and at which context the step
    representative is measured: the same facts as tools/tune/space.py."""
    from tools.tune.space import ATTN_STEP_CONTEXT

    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = " ".join(f.read().split())
    ends = [hi for _, hi in Space(reg, reg.hardware["sm_90"], sms=132).token_buckets]
    said = ", ".join(map(str, ends[:-1])) + f" and {ends[-1]} tokens"
    assert f"Router buckets end at {said}" in readme, said
    assert f"`sparse_decode_step` at {ATTN_STEP_CONTEXT // 1024}k contexts" in readme


FP16 = {"q_dtype": "fp16", "cache_dtype": "fp16"}  # inputs sm_90 has no rows for


def test_other_decode_inputs_get_their_own_rows(sm90, spec_copy, capsys):
    """`measure --inputs q_dtype=fp16,cache_dtype=fp16` times scorers only (selector rows are
    not keyed by the inputs); `choose --write` adds fp16 scorer rows (default rows where not
    measured) and keeps every bf16 and selector row byte for byte; sm_90 then dispatches fp16
    by its own rows, and every unmeasured input still by the default grid."""
    path = spec_copy / "measured" / "sm_90.json"
    before = {t: _rows_text(path, t) for t in ("router_gemm", "index_topk")}
    rows_before = [r for r in measured.load_file(str(path)).rows("index_score")]
    space = Space(sm90.reg, sm90.target, sms=132, quick=True, inputs=FP16)
    assert space.inputs == {**MEASURED_SCORE, **FP16} and not space.measures_selector
    run = fake_run(space, FakeDevice(), {"decode"}, contexts=[8192])
    assert {p["table"] for p in run["points"]} == {"index_score"}
    assert all(p["buckets"][0]["q_dtype"] == "fp16" for p in run["points"])
    run_file = spec_copy.parent / "fp16_run.json"
    run_file.write_text(json.dumps(run))
    assert cli.main(["choose", str(run_file), "--write", "--specs", str(spec_copy)]) == 0
    out = capsys.readouterr().out
    assert "index_score q_dtype fp16, cache_dtype fp16, head_dim 128" in out
    for table, rows in before.items():
        assert _rows_text(path, table) == rows
    after = measured.load_file(str(path))
    fp16 = [r for r in after.rows("index_score") if r.when["q_dtype"] == "fp16"]
    assert {r.source for r in fp16} == {"measured", "default"}
    assert [r.when for r in after.rows("index_score") if r.when["q_dtype"] != "fp16"] == \
        [r.when for r in rows_before]
    reg = registry.load(str(spec_copy))
    fp16_space = Space(reg, reg.hardware["sm_90"], sms=132, inputs=FP16)
    fp16_before = Space(sm90.reg, sm90.target, sms=132, inputs=FP16)
    for row in fp16:
        bucket = {a: v for a, v in row.when.items()}
        assert fp16_space.current("index_score", bucket) == (row.choice, row.params)
        if row.source == "default":  # what sm_90 launched for fp16 before: nothing changes
            assert fp16_before.current("index_score", bucket) == (row.choice, row.params)
    other = Space(reg, reg.hardware["sm_90"], sms=132, inputs={"q_dtype": "fp16",
                                                              "cache_dtype": "bf16"})
    bucket = other.score_bucket(64, 1, 1024)
    rule = lookup(reg.policies["index_score"], reg.tables["index_score"],
                  other.point("index_score", bucket, "sm_90"))
    assert "not measured" in rule.note
    with pytest.raises(ValueError, match="q_dtype 'fp64' is not in"):
        Space(reg, reg.hardware["sm_90"], sms=132, inputs={"q_dtype": "fp64"})
    with pytest.raises(ValueError, match="unknown axes \\['colour'\\]"):
        Space(reg, reg.hardware["sm_90"], sms=132, inputs={"colour": "red"})
    with pytest.raises(ValueError, match="one index head"):
        Space(reg, reg.hardware["sm_90"], sms=132, inputs={"num_heads": 2})


def test_choose_refuses_router_runs_without_x_dtype(sm90, tmp_path):
    """A router run measured before the rows were keyed by x dtype (its buckets name no
    x_dtype) is refused by name, not merged."""
    run = fake_run(sm90, FakeDevice(), {"router"}, shapes=[(4096, 8)])
    for point in run["points"]:
        for bucket in point["buckets"]:
            bucket.pop("x_dtype")
    path = tmp_path / "old_router.json"
    path.write_text(json.dumps(run))
    with pytest.raises(SystemExit, match="x dtype"):
        cli.main(["choose", str(path)])


def test_measure_command_records_a_run_choose_accepts(sm90, tmp_path):
    """`measure` (the device replaced by the fake): warm-up, then the measurement, written as
    a run file that `choose` merges."""
    out = tmp_path / "run.json"
    argv = ["measure", "--out", str(out), "--sections", "router", "--shapes", "4096x8",
            "--rounds", "2", "--per-round", "1", "--machine", "box-b"]
    steps = []
    env = {"date": "now", "torch": "0", "triton": "0", "l2_flush": "read"}
    rc = cli.record_run(cli.parse_args(argv), argv, sm90, FakeDevice(),
                        facts("NVIDIA H200", (9, 0)), True, env,
                        warm_up=lambda *a: steps.append("warm") or {"skipped": True})
    assert rc == 0 and steps == ["warm"]
    run = json.loads(out.read_text())
    assert run["run"]["machine"] == "box-b"
    assert {p["buckets"][0]["shape"] == [4096, 8] for p in run["points"]} == {True}
    rows, _, labels = choose.choose([run], sm90)
    assert labels == ["box-b"] and len(rows) == 2 * 2  # two token buckets × two x dtypes


def test_measure_refuses_a_filter_that_leaves_nothing_to_measure(sm90, tmp_path):
    """`--programs 256 --quick` (the quick representatives are 16 and 2048) once recorded a run
    of no points: it is refused before the warm-up, naming the filter."""
    out = tmp_path / "run.json"
    argv = ["measure", "--out", str(out), "--sections", "attention", "--programs", "256",
            "--quick"]
    quick = Space(sm90.reg, sm90.target, sms=132, quick=True)
    steps = []
    env = {"date": "now", "torch": "0", "triton": "0", "l2_flush": "read"}
    with pytest.raises(SystemExit, match=r"--programs leaves no attention representative"):
        cli.record_run(cli.parse_args(argv), argv, quick, FakeDevice(),
                       facts("NVIDIA H200", (9, 0)), True, env,
                       warm_up=lambda *a: steps.append("warm") or {"skipped": True})
    assert steps == [] and not out.exists()


def test_warm_up_groups_cover_each_compile_once(sm90):
    groups = warm.warm_groups(sm90, ["router", "decode"], shapes=[(6144, 128)],
                              contexts=[8192])
    tasks = [repr(t) for g in groups for t in g]
    assert len(tasks) == len(set(tasks)) and tasks
    kernels = {t[4] for g in groups for t in g if t[0] == "router"}
    assert kernels == {"per_expert", "splitk"}
    assert any(t[0] == "decode" for g in groups for t in g)


def test_warm_up_groups_cover_each_attention_candidate_once(sm90):
    """Every candidate of every attention point measured is compiled (launched at a point of
    the same mode and inputs, inside the step too where a decode point needs it), each
    compile once however many points (head counts, query lengths) measure it, in groups of a
    few."""
    programs = [16, 128, 1024]
    sm90 = Space(sm90.reg, sm90.target, sms=132)  # the whole space (quick has one point)
    groups = warm.warm_groups(sm90, ["attention"], programs=programs)
    tasks = [t for g in groups for t in g]
    assert all(0 < len(g) <= warm.ATTN_CHUNK for g in groups)

    def compiles(mode, inputs, P, variant, params):
        return (mode, repr(sorted(inputs.items())), variant, repr(params),
                mode == "decode" and P <= ATTN_STEP_MAX_PROGRAMS)

    known = {}

    def candidates(mode, inputs, P, Q):
        """sm90.attn_candidates_at, computed once a point (the checks below ask for each
        point's list once per task)."""
        at = (mode, repr(sorted(inputs.items())), P, Q)
        if at not in known:
            known[at] = sm90.attn_candidates_at(mode, inputs, P, Q)
        return known[at]

    got = [compiles(t[1], t[2], t[3], t[6], t[7]) for t in tasks]
    want = {compiles(mode, inputs, P, variant, params)
            for mode, inputs, P, H, Q in sm90.attn_points(programs)
            for variant, params in candidates(mode, inputs, P, Q)}
    assert len(got) == len(set(got)) and set(got) == want and want
    # (fewer tasks than the points' candidates: the 1-KV-head and Q 4 points add no compile)
    points = sm90.attn_points(programs)
    assert len(tasks) < sum(len(candidates(m, i, P, Q)) for m, i, P, _, Q in points)
    # each task's point measures it, and it is the smallest that does (the largest points'
    # inputs take up to 16 GiB: in every worker at once they ran the device out of memory)
    for t in tasks:
        assert t[1:6] in points and (t[6], t[7]) in candidates(*t[1:4], t[5])
        step = t[1] == "decode" and t[3] <= ATTN_STEP_MAX_PROGRAMS
        assert t[3] == min(P for m, i, P, _, Q in points if (m, i) == (t[1], t[2])
                           and (m == "decode" and P <= ATTN_STEP_MAX_PROGRAMS) == step
                           and (t[6], t[7]) in candidates(m, i, P, Q))


def test_command_line():
    args = cli.parse_args(["measure", "--out", "x.json", "--sections", "router",
                           "--contexts", "131072", "--requests", "1,4", "--shapes", "6144x128"])
    assert (args.sections, args.contexts, args.requests, args.shapes) == (
        ["router"], (131072,), (1, 4), [(6144, 128)])
    with pytest.raises(SystemExit):
        cli.parse_args(["measure", "--out", "x.json", "--sections", "scorer"])
    args = cli.parse_args(["choose", "a.json", "b.json", "--write"])
    assert args.runs == ["a.json", "b.json"] and args.write
    args = cli.parse_args(["measure", "--out", "x.json", "--inputs",
                           "q_dtype=fp32, cache_dtype=fp32,head_dim=64"])
    assert args.inputs == {"q_dtype": "fp32", "cache_dtype": "fp32", "head_dim": 64}
    for bad in ("dtype=fp32", "q_dtype", "q_dtype=fp32,colour=red"):
        with pytest.raises(SystemExit):
            cli.parse_args(["measure", "--out", "x.json", "--inputs", bad])


def test_a_candidate_slower_in_every_cell_is_not_as_fast(sm90):
    """Within the noise but slower at both representatives on both machines (four cells): the
    loss is systematic, so the faster candidate wins; faster in one of the four cells, the
    simpler one is kept as before."""
    bucket = {**MEASURED_SCORE, "max_q": [2, 8], "max_block": [0, 64], "num_reqs": [9, 11]}
    default = ("index_score_split", json.dumps(dict(kv_chunks=32, high_batch=False,
                                                    static_chunks=False, num_warps=None,
                                                    num_stages=None)))
    fancy = ("index_score_split", _split(16, True))
    reps = ("R11 Q4 mb64", "R9 Q4 mb64")
    for ties, kept in ((0, False), (1, True)):
        runs = []
        for i, machine in enumerate(("GPU-a", "GPU-b")):
            simple = {rep: 103.0 for rep in reps}
            if ties and i == 0:
                simple[reps[0]] = 99.0  # one cell where the simpler one is faster
            runs.append(_synthetic(machine, "index_score", bucket, {
                default: simple, fancy: {rep: 100.0 for rep in reps}}, 0.03))
        (row,), _, _ = choose.choose(runs, sm90)
        m = row["measured"]
        assert m["noise"] == 0.06 and m["winner"]["worst"] < 1.07
        assert (row["params"]["kv_chunks"] == 32) == kept, (ties, row)
        assert m["rule"] == ("simpler within noise" if kept else "fastest")


def test_with_fewer_cells_a_loss_beyond_the_floor_in_each_is_not_as_fast(sm90):
    """One representative on two machines (a router bucket's two cells): the simpler candidate
    slower in both by more than the noise floor is not "as fast"; slower by less, it is kept."""
    bucket = {**MEASURED_SCORE, "max_q": [2, 8], "max_block": [0, 64], "num_reqs": [9, 11]}
    default = ("index_score_split", json.dumps(dict(kv_chunks=32, high_batch=False,
                                                    static_chunks=False, num_warps=None,
                                                    num_stages=None)))
    fancy = ("index_score_split", _split(16, True))
    for simple_us, kept in ((103.0, False), (100.5, True)):
        runs = [_synthetic(machine, "index_score", bucket, {
            default: {"R11 Q4 mb64": simple_us}, fancy: {"R11 Q4 mb64": 100.0}}, 0.03)
            for machine in ("GPU-a", "GPU-b")]
        (row,), _, _ = choose.choose(runs, sm90)
        assert row["measured"]["noise"] == 0.06  # both within the noise
        assert (row["params"]["kv_chunks"] == 32) == kept, (simple_us, row)


def test_a_tune_keeps_the_runs_it_names_while_a_row_cites_one_of_them():
    """A later choose overwrote every row of run b; the tune that chose from a and b stays
    (a row still cites a) and so does b's description (the data file must describe every run a
    tune names); a tune no row cites any more goes, with its runs."""
    from codegen.measured import TABLES

    data = {t: [] for t in TABLES}
    data["router_gemm"] = [{"measured": {"winner": {"us": {"M1 bf16": {"a": 5.0}}}}}]
    data["provenance"] = {"runs": {"a": {"machine": "a"}, "b": {"machine": "b"},
                                   "c": {"machine": "c"}},
                          "tunes": [{"runs": ["a", "b"], "sections": ["router"]},
                                    {"runs": ["c"], "sections": ["router"]}]}
    data = write.update(data, [], [], [], "test", "now", 0.01)
    assert data["provenance"]["tunes"] == [{"runs": ["a", "b"], "sections": ["router"]}]
    assert set(data["provenance"]["runs"]) == {"a", "b"}


def test_gpu_device_builds_requests_of_q_rows(reg):
    """kernels.GpuDevice's Q 4 decode case on the CPU interpreter (tiny): P / Hkv rows are
    requests of four rows at the context's last four tokens, whose lists share all blocks but
    each token's own; a request's listed blocks have pages of their own; alone and inside the
    step two launches agree within the tuner's check; at Q 1 each row is a request."""
    import torch

    from tools.tune.kernels import GpuDevice

    space = Space(reg, reg.hardware["sm_90"], sms=132)
    dev = GpuDevice(space, device="cpu")
    inputs = {**next(i for i in space.attn_inputs if i["group"] == 16), "head_dim": 64}
    case = dev.attn_case("decode", inputs, 8, 1, Q=4, ctx=1000, topk=4)
    assert case["decode_query_len"] == 4 and case["seq_lens"].tolist() == [1000, 1000]
    ids, table = case["topk_idx"][0], case["block_table"]
    assert ids.shape == (8, 4)
    for r in range(2):
        rows = ids[4 * r:4 * r + 4]
        own = [(1000 - 4 + j) // 128 for j in range(4)]  # tokens 996..999: block 7
        assert all(o in row.tolist() for o, row in zip(own, rows))
        listed = torch.unique(rows[rows >= 0])
        assert torch.unique(table[r, listed.long()]).numel() == listed.numel()
    launch = dict(kv_tile=128, head_split=1, merge_kernel=False, num_warps=4, num_stages=2)
    for c in (case, dev.attn_step_case(case)):
        ref = dev.attn_reference(c, dev.attn_call(c, "sparse_attn_split",
                                                  dict(splits=2, **launch)))
        assert bool(torch.isfinite(ref).all())
        assert dev.attn_problem(c, ref, dev.attn_call(c, "sparse_attn_split",
                                                      dict(splits=1, **launch))) is None
    one = dev.attn_case("decode", inputs, 8, 1, ctx=1000, topk=4)
    assert one["decode_query_len"] == 1 and one["seq_lens"].numel() == 8
    # each row its own list (vLLM's benchmark rows): a request's rows list other blocks but
    # their own, each listed block of a request on a page of its own
    own = dev.attn_case("decode", inputs, 8, 1, Q=4, ctx=1000, topk=4, own_lists=True)
    ids, table = own["topk_idx"][0], own["block_table"]
    for r in range(2):
        rows = ids[4 * r:4 * r + 4]
        assert all(7 in row.tolist() for row in rows)
        assert len({tuple(row.tolist()) for row in rows}) > 1
        listed = torch.unique(rows[rows >= 0])
        assert torch.unique(table[r, listed.long()]).numel() == listed.numel()
    ref = dev.attn_reference(own, dev.attn_call(own, "sparse_attn_split",
                                                dict(splits=2, **launch)))
    assert dev.attn_problem(own, ref, dev.attn_call(own, "sparse_attn_split",
                                                    dict(splits=1, **launch))) is None


def test_gpu_device_times_attention_inside_the_step(reg, monkeypatch):
    """kernels.GpuDevice's step representative on the CPU interpreter (tiny): the step case
    runs sparse_decode_step with the launch given, over a cache whose every block has a page
    of its own, and two launches agree within the tuner's check."""
    import torch

    from tools.tune import kernels
    from tools.tune.kernels import GpuDevice

    space = Space(reg, reg.hardware["sm_90"], sms=132)
    dev = GpuDevice(space, device="cpu")
    inputs = {**next(i for i in space.attn_inputs if i["group"] == 16), "head_dim": 64}
    case = dev.attn_case("decode", inputs, 2, 1, ctx=1024, topk=4)
    step = dev.attn_step_case(case)
    R, mb = 2, 1024 // 128
    assert step["kv"].shape[0] == R * mb + 1
    assert torch.unique(step["block_table"]).numel() == R * mb  # no two blocks share a page
    launch = dict(kv_tile=128, head_split=1, merge_kernel=False, num_warps=4, num_stages=2)
    ref = dev.attn_reference(step, dev.attn_call(step, "sparse_attn_split",
                                                 dict(splits=2, **launch)))
    assert bool(torch.isfinite(ref).all())
    assert dev.attn_problem(step, ref, dev.attn_call(step, "sparse_attn_split",
                                                     dict(splits=1, **launch))) is None
    # the ids are the indexer's, written into the step's own output
    assert int(step["step"]["topk_out"].max()) < mb
    # contexts longer than the step's are cut to it (the attention reads topk blocks anyway)
    monkeypatch.setattr(kernels, "ATTN_STEP_CONTEXT", 512)
    short = dev.attn_step_case(case)
    assert short["step"]["max_seq_len"] == 512 and short["block_table"].shape == (R, 4)
    assert short["seq_lens"].tolist() == [512, 512] and case["seq_lens"].tolist() == [1024] * 2
    ref = dev.attn_reference(short, dev.attn_call(short, "sparse_attn_split",
                                                  dict(splits=2, **launch)))
    assert bool(torch.isfinite(ref).all())
    assert dev.attn_problem(short, ref, dev.attn_call(short, "sparse_attn_split",
                                                      dict(splits=1, **launch))) is None
    assert int(short["step"]["topk_out"].max()) < 4  # within the cut context's blocks


def test_benchmarks_time_interleaved_rounds_like_the_tuner(monkeypatch):
    """`common.time_graphs` (the router benchmark's timing): the ops' graphs replayed in
    rounds of rotating order after a discarded settle round, each op's time the median of its
    round medians. A slow phase at the start (after heavy work) costs the op it hits one round,
    not its time; the settle round's samples are not in the summary."""
    import common

    class Graph:
        def __init__(self, name):
            self.name = name

        def replay(self):
            pass

    drawn = []

    def replay_times(replay, n, flush_mode, settled):
        assert settled and flush_mode is None  # the settle round is interleave's
        drawn.append(replay.__self__.name)
        slow = 10.0 if len(drawn) <= 3 else 0.0  # both settle batches and round 1's first
        return [{"a": 5.0, "b": 6.0}[drawn[-1]] + slow] * n

    monkeypatch.setattr(common, "capture_graph", lambda fn: Graph(fn()))
    monkeypatch.setattr(common, "replay_times", replay_times)
    settled = []
    monkeypatch.setattr(common, "settle",
                        lambda replay, flush_mode: settled.append(replay.__self__.name))
    got = common.time_graphs({"a": lambda: "a", "b": lambda: "b"}, reps=30, rounds=5)
    assert drawn == ["a", "b", "a", "b", "b", "a", "a", "b", "b", "a", "a", "b"]
    assert got["a"]["rounds"] == [15.0, 5.0, 5.0, 5.0, 5.0] and got["a"]["median_us"] == 5.0
    assert got["b"]["median_us"] == 6.0 and got["b"]["n"] == got["a"]["n"] == 30
    assert got["a"]["p90_us"] == 15.0 and got["b"]["p90_us"] == 6.0  # settle batches dropped
    assert settled == ["a", "b"] and got["a"]["graph"] and "capture_error" not in got["a"]


def test_benchmarks_time_an_uncapturable_op_eagerly(monkeypatch):
    """An op that cannot be captured in a CUDA graph is timed by eager calls in the same
    rounds and says so (``graph`` False, ``capture_error``), as `common.time_graph` does."""
    import common

    class Graph:
        def replay(self):
            pass

    def capture(fn):
        if fn() == "b":
            raise RuntimeError("operation not permitted when stream is capturing")
        return Graph()

    monkeypatch.setattr(common, "capture_graph", capture)
    monkeypatch.setattr(common, "settle", lambda replay, flush_mode: None)
    monkeypatch.setattr(common, "replay_times", lambda replay, n, flush_mode, settled: [
        7.0 if getattr(replay, "__self__", None) is None else 5.0] * n)
    import torch
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)  # no device here
    got = common.time_graphs({"a": lambda: "a", "b": lambda: "b"}, reps=10, rounds=2)
    assert got["a"]["graph"] and got["a"]["median_us"] == 5.0
    assert not got["b"]["graph"] and got["b"]["median_us"] == 7.0
    assert "stream is capturing" in got["b"]["capture_error"]


def test_smoke_timings_take_the_checked_calls_time(monkeypatch):
    """A smoke run (the interpreter) does not run a call it already ran to check its output
    (`common.Checked`): `time_graphs` and `interleaved_medians` take that call's time; a call
    never checked is run once and timed then."""
    import common

    clock, ran = iter(range(100)), []
    monkeypatch.setattr(common.time, "perf_counter", lambda: next(clock) / 4)  # 0.25 s a call
    checked = common.Checked(lambda: ran.append("checked") or "out")
    assert checked.last_us is None and checked() == "out" and checked.last_us == 25e4
    fresh = lambda: ran.append("fresh")  # noqa: E731
    got = common.time_graphs({"checked": checked, "fresh": fresh}, smoke=True)
    assert got["checked"]["median_us"] == 25e4 and not got["checked"]["graph"]
    assert got["fresh"]["median_us"] == 25e4 and ran == ["checked", "fresh"]
    assert common.interleaved_medians({"checked": checked, "fresh": fresh}, smoke=True) == {
        "checked": 25e4, "fresh": 25e4}
    assert ran == ["checked", "fresh", "fresh"]


def test_as_fast_means_within_the_noise_in_every_cell(sm90):
    """A simpler candidate 9 % slower in six of eight cells and faster in two has a worst case
    within the noise of the fastest's (one noisy cell sets a 6 % noise), but it is not "as
    fast": the fastest is kept. Within the noise in every cell, the simpler one is kept."""
    bucket = {**MEASURED_SCORE, "max_q": [2, 8], "max_block": [0, 64], "num_reqs": [9, 11]}
    default = ("index_score_split", json.dumps(dict(kv_chunks=32, high_batch=False,
                                                    static_chunks=False, num_warps=None,
                                                    num_stages=None)))
    fancy = ("index_score_split", _split(16, True))
    reps = ("R11 Q4 mb64", "R9 Q4 mb64", "R10 Q4 mb64", "R11 Q2 mb64")
    for simple_us, kept in (((109.0, 109.0, 109.0, 95.0), False), ((103.0, 103.0, 103.0, 95.0),
                                                                  True)):
        runs = [_synthetic(machine, "index_score", bucket, {
            default: dict(zip(reps, simple_us)),
            fancy: {rep: 100.0 if rep != reps[0] else 102.0 for rep in reps}}, 0.03)
            for machine in ("GPU-a", "GPU-b")]
        (row,), _, _ = choose.choose(runs, sm90)
        assert (row["params"]["kv_chunks"] == 32) == kept, (simple_us, row)


def _choose_attention_at_64_programs(space, spec_copy, capsys):
    """`tune choose --write` into ``spec_copy`` of two fake machines' attention runs of
    ``space`` at 64 programs."""
    runs = []
    for machine in ("GPU-a", "GPU-b"):
        dev = FakeDevice()
        r = measure.Run(space, dev, rounds=2, per_round=1, budget_s=1e9, say=lambda *a: None)
        r.attention([64])
        run = json.loads(json.dumps({**fake_run(space, dev, set(), machine=machine),
                                     "sections": ["attention"], "points": r.points,
                                     "planned": r.planned}))
        runs.append(tmp := spec_copy.parent / f"attn_pt_{machine}.json")
        tmp.write_text(json.dumps(run))
    assert cli.main(["choose", *map(str, runs), "--write", "--specs", str(spec_copy)]) == 0
    capsys.readouterr()


def test_an_fp8_scale_mode_is_tuned_as_its_own_input(sm90, spec_copy, capsys):
    """`--kv-dtypes fp8e4m3:per_token`: the fp8 inputs with per-token scales, labelled apart;
    a tune of some program counts writes per-token rows for those buckets and keeps the rows
    per-token scales took until then (fp8 e4m3's without scales) for the others, so the
    table stays whole; e5m2 with per-token scales takes the new rows, a cache without scales
    its own."""
    space = Space(sm90.reg, sm90.target, sms=132, kv_dtypes=("fp8e4m3:per_token",))
    assert {(i["kv_dtype"], i["scales"], i["group"]) for i in space.attn_inputs} == {
        ("fp8e4m3", "per_token", 16), ("fp8e4m3", "per_token", 8)}
    labels = {space.attn_rep_label(*point) for point in space.attn_points([64])}
    assert "decode G16 P64 fp8e4m3:per_token" in labels, labels
    for bad in ("bf16:per_token", "fp8e4m3:bogus"):
        with pytest.raises(ValueError, match="scales"):
            Space(sm90.reg, sm90.target, sms=132, kv_dtypes=(bad,))
    from codegen.policy import lookup
    p = sm90.reg.policies["sparse_attn_decode"]

    def rule_at(reg, programs, kv="fp8e4m3", scales="per_token", Q=1):
        point = dict(hardware="sm_90", q_dtype="bf16", kv_dtype=kv, scales=scales, group=16,
                     head_dim=128, query_len=Q, programs=programs)
        return lookup(p, reg.tables["sparse_attn_decode"], tuple(point[a.name] for a in p.axes))

    before = {P: dict(rule_at(sm90.reg, P).params) for P in (1, 64, 4096)}
    _choose_attention_at_64_programs(space, spec_copy, capsys)
    reg = registry.load(str(spec_copy))  # (loads: the tables are proven gap-free)
    data = measured.load_file(str(spec_copy / "measured" / "sm_90.json"))
    pt = [r for r in data.rows("sparse_attn_decode") if r.values()["scales"] == "per_token"]
    assert {r.values()["group"] for r in pt} == {16, 8}
    for P in (1, 64, 4096):
        rule = rule_at(reg, P)
        assert "measured/sm_90.json" in str(rule.loc) and "per_token" in rule.note, rule
        if P != 64:
            assert dict(rule.params) == before[P]  # kept
    # the fake device's fastest at 33-64 programs: four splits, three stages
    for Q in (1, 4):  # each query length's rows (new rows for each of its groups)
        rule = rule_at(reg, 64, Q=Q)
        assert (dict(rule.params)["splits"], dict(rule.params)["num_stages"]) == (4, 3)
        assert "per_token" in rule.note and f"Q {'1' if Q == 1 else '≥ 2'}," in rule.note
    assert "per_token" in rule_at(reg, 64, kv="fp8e5m2").note
    assert "per_token" not in rule_at(reg, 64, scales="none").note


def test_choose_adds_default_rows_only_for_the_inputs_measured(sm90):
    """A tune of bf16 inputs over a data file without fp8 e4m3 decode rows adds none for
    fp8 e4m3 (which keeps following bf16's rows as they are re-chosen: MEASURED_AS), and a
    first tune of a scale mode gets the rows it took until then."""
    from tools.tune import write

    space = Space(sm90.reg, sm90.target, sms=132)
    data = measured.read(os.path.join(ROOT, "specs", "measured", "sm_90.json"))
    data["sparse_attn_decode"] = [r for r in data["sparse_attn_decode"]
                                  if r["kv_dtype"] != "fp8e4m3"]
    before = len(data["sparse_attn_decode"])
    bf16 = next(i for i in space.attn_inputs if i["kv_dtype"] == "bf16")
    write.add_attention_rows(data, space, {"sparse_attn_decode": [bf16]})
    assert len(data["sparse_attn_decode"]) == before
    scalar = dict(bf16, kv_dtype="fp8e4m3", scales="scalar")
    write.add_attention_rows(data, space, {"sparse_attn_decode": [scalar]})
    new = [r for r in data["sparse_attn_decode"] if r["scales"] == "scalar"]
    assert new and all(r["source"] == "default" for r in new)


def test_a_tune_of_one_mode_writes_rows_of_that_table_only(sm90, spec_copy, capsys):
    """`--kv-dtypes fp8e4m3:per_token --modes decode`: per-token decode rows, and none in the
    prefill table (a frozen copy of the rows it followed would keep it off fp8 e4m3's rows
    when those are re-chosen): per-token prefill still takes fp8 e4m3's (MEASURED_AS), here
    from a data file whose prefill table has no per-token rows."""
    from codegen.policy import lookup

    path = str(spec_copy / "measured" / "sm_90.json")
    data = measured.read(path)
    data["sparse_attn_prefill"] = [r for r in data["sparse_attn_prefill"]
                                   if r["scales"] != "per_token"]
    measured.write(path, data)
    prefill_before = measured.read(path)["sparse_attn_prefill"]
    space = Space(sm90.reg, sm90.target, sms=132, kv_dtypes=("fp8e4m3:per_token",),
                  modes=("decode",))
    _choose_attention_at_64_programs(space, spec_copy, capsys)
    reg = registry.load(str(spec_copy))
    data = measured.load_file(path)
    scales = {t: {r.values()["scales"] for r in data.rows(t)}
              for t in ("sparse_attn_decode", "sparse_attn_prefill")}
    assert "per_token" in scales["sparse_attn_decode"], scales
    assert "per_token" not in scales["sparse_attn_prefill"], scales
    assert measured.read(path)["sparse_attn_prefill"] == prefill_before
    p = reg.policies["sparse_attn_prefill"]
    for P in (64, 8192):
        point = dict(hardware="sm_90", q_dtype="bf16", kv_dtype="fp8e4m3", group=16,
                     head_dim=128, programs=P)
        rules = [lookup(p, reg.tables["sparse_attn_prefill"],
                        tuple({**point, "scales": s}[a.name] for a in p.axes))
                 for s in ("per_token", "none")]
        assert rules[0].loc == rules[1].loc and "measured/sm_90.json" in str(rules[0].loc)


@pytest.mark.parametrize("mode", ["scalar", "per_token"])
def test_gpu_device_attention_cases_carry_their_scales(reg, mode):
    """kernels.GpuDevice's attention cases of an fp8 scale mode (CPU interpreter, tiny): k_scale
    and v_scale over the case's cache (per token: one per KV head and slot, the step case's
    over its own larger cache), used by the launches timed (the output differs from the same
    case without them) and by the step."""
    import torch

    from tools.tune.kernels import GpuDevice

    space = Space(reg, reg.hardware["sm_90"], sms=132, kv_dtypes=(f"fp8e4m3:{mode}",))
    dev = GpuDevice(space, device="cpu")
    inputs = {**next(i for i in space.attn_inputs if i["group"] == 16), "head_dim": 64}
    case = dev.attn_case("decode", inputs, 2, 1, ctx=1024, topk=4)
    step = dev.attn_step_case(case)
    for c in (case, step):
        slots = c["kv"].shape[0] * c["kv"].shape[2]
        want = (1,) if mode == "scalar" else (1, slots)
        assert c["k_scale"].shape == c["v_scale"].shape == want
    launch = dict(splits=2, kv_tile=128, head_split=1, merge_kernel=False, num_warps=4,
                  num_stages=2)
    for c in (case, step):
        ref = dev.attn_reference(c, dev.attn_call(c, "sparse_attn_split", launch))
        assert bool(torch.isfinite(ref).all())
        plain = {k: v for k, v in c.items() if k not in ("k_scale", "v_scale")}
        other = dev.attn_reference(plain, dev.attn_call(plain, "sparse_attn_split", launch))
        assert not torch.equal(ref, other)
        assert dev.attn_problem(c, ref, dev.attn_call(
            c, "sparse_attn_split", dict(launch, splits=1))) is None
