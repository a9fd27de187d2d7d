"""The benchmark's targets (tools/targets.py) and report (tools/bench_report.py) on small
synthetic bench.json files: the spread of several runs, the verdicts judged on the worst run,
and the targets naming rows the bench really runs."""
import json
import os
import sys

import pytest

import generated

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import bench  # noqa: E402
import bench_report  # noqa: E402
import targets  # noqa: E402

K128 = 131072


def _decode(R, ctx, Q, us, kind="bf16", vs_bf16=None):
    sc = bench.Scenario(R, ctx, Q, kind=kind)
    row = {"name": sc.name.strip(), "R": R, "ctx": ctx, "Q": Q, "mixed": False, "kind": kind,
           "q": sc.q, "cache": sc.cache,
           "ours": {"sm_90": {"median_us": us}}, "target_policy": "sm_90",
           "policies": ["sm_90"], "torch": {"median_us": None}, "floor_us": 1.0,
           "cache_bytes": sc.floor_bytes()[1]}
    if vs_bf16 is not None:
        row["vs_bf16"] = vs_bf16
    return row


def _router(K, N, M, us, x_dtype="bf16", linear=None):
    return {"K": K, "N": N, "M": M, "x_dtype": x_dtype, "ours": {"median_us": us},
            "linear": {"median_us": linear or 2 * us}, "floor_us": us / 2,
            "ours_minus_empty_us": us - 3}


def _write(tmp_path, name, decode, router):
    report = {"env": {"device": "NVIDIA H200", "date": name}, "mode": "full", "errors": [],
              "decode": decode, "router": router}
    targets.attach(report)  # as bench.py does
    path = tmp_path / name / "bench.json"
    path.parent.mkdir()
    path.write_text(json.dumps(report))
    return str(path)


@pytest.fixture
def two_runs(tmp_path):
    """Run 1 passes where run 2 fails, except the small-context row (both pass) and the
    128k cache read (both fail)."""
    return [_write(tmp_path, name, [
        _decode(32, K128, 1, r32), _decode(1, 8192, 4, r1),
        _decode(4, 32768, 4, 20.0), _decode(4, 32768, 4, 20.0 * fp8, "fp8kv", fp8)],
        [_router(3072, 256, 1, router)])
        for name, r32, r1, fp8, router in (("run1", 260.0, 5.5, 0.55, 5.5),
                                           ("run2", 275.0, 5.9, 0.62, 5.9))]


def _verdicts(reports):
    return {(label, v["what"]): v for _, label, v, _ in bench_report.judged(reports)}


def test_several_runs_are_judged_on_the_worst(two_runs):
    got = _verdicts([bench_report.load_run(p) for p in two_runs])
    vllm = got[("R32 128k Q1", "≤ vLLM")]
    assert (vllm["value"], vllm["limit"], vllm["pass"], vllm["runs_pass"]) == (275.0, 268.4,
                                                                                False, 1)
    rate = got[("R32 128k Q1", "cache read")]  # a "≥" target: the slowest run is the worst
    assert rate["value"] == pytest.approx(32 * K128 * 128 * 2 / 275e-6 / 1e12)
    assert (rate["pass"], rate["runs_pass"], rate["runs"]) == (False, 0, 2)
    small = got[("R1 8k Q4", "small context")]
    assert (small["value"], small["pass"], small["runs_pass"]) == (5.9, True, 2)
    fp8 = got[("R4 32k Q4 fp8kv", "fp8kv/bf16")]
    assert (fp8["value"], fp8["limit"], fp8["pass"], fp8["runs_pass"]) == (0.62, 0.6, False, 1)
    router = got[("(3072,256) M1 bf16", "≤ vLLM")]
    assert (router["value"], router["limit"], router["pass"]) == (5.9, 5.89, False)
    assert ("R4 32k Q4", "small context") in got and ("R4 32k Q4", "≤ vLLM") not in got


def test_a_run_without_the_time_fails_the_target(two_runs, tmp_path):
    broken = _write(tmp_path, "broken", [_decode(1, 8192, 4, None)], [])
    got = _verdicts([bench_report.load_run(p) for p in two_runs + [broken]])
    small = got[("R1 8k Q4", "small context")]
    assert (small["value"], small["pass"], small["runs_pass"], small["runs"]) == (None, False,
                                                                                   2, 3)


def test_report_prints_the_spread_and_the_verdicts(two_runs, capsys):
    bench_report.main(two_runs)
    out = capsys.readouterr().out
    lines = {line.split("  ")[0]: " ".join(line.split()) for line in out.splitlines()}
    assert lines["R32 128k Q1"] == "R32 128k Q1 260.0 275.0 260.0 275.0 5.8%"
    assert lines["(3072,256) M1 bf16"] == "(3072,256) M1 bf16 5.50 5.90 5.50 5.90 7.3%"
    assert "largest spread: 7.3 % ((3072,256) M1 bf16)" in out
    assert ("issue 15 decode R32 128k Q1 ≤ vLLM 275.0 µs ≤ 268.4 FAIL (1/2 runs pass)"
            in " ".join(out.split()))
    assert "router ≤ vLLM: 0/1 PASS; FAIL: (3072,256) M1 bf16 5.90>5.89" in out
    assert out.rstrip().endswith("TARGETS (worst run) issue 18: 0 PASS, 1 FAIL | "
                                 "issue 20: 1 PASS, 2 FAIL | issue 15: 0 PASS, 2 FAIL | "
                                 "issue 5: 1 PASS, 0 FAIL")


def test_one_run_prints_its_tables(two_runs, capsys):
    bench_report.main(two_runs[:1])
    out = capsys.readouterr().out
    assert "decode indexer end to end" in out and "fp8kv/bf16 0.55" in out
    assert "#1" not in out  # no spread table for one run
    assert ("TARGETS issue 18: 1 PASS, 0 FAIL | issue 20: 2 PASS, 1 FAIL | issue 15: 1 PASS, 1 FAIL"
            " | issue 5: 1 PASS, 0 FAIL") in out


def test_results_of_record_are_judged_too():
    report = bench_report.load_run(os.path.join(ROOT, "docs", "results",
                                                "2026-12-01_h200_bench_quick.json"))
    got = _verdicts([report])
    assert got[("R64 128k Q1", "≤ vLLM")]["value"] == 473.5
    assert got[("R64 128k Q1", "cache read")]["pass"] is True
    assert got[("(3072,256) M1 bf16", "≤ vLLM")]["value"] == 5.7


def test_every_target_names_a_row_the_bench_runs():
    full = {sc.key: sc for sc in bench.decode_scenarios(quick=False, smoke=False)}
    quick = {sc.key for sc in bench.decode_scenarios(quick=True, smoke=False)}
    for table in (targets.VLLM_DECODE_US, targets.SMALL_CONTEXT_US, targets.ISSUE5_DECODE_US):
        for R, ctx, Q in table:
            assert (R, ctx, Q, False, "bf16") in full and (R, ctx, Q, False, "bf16") in quick
    assert any(targets.is_large_batch(sc.R, sc.ctx) for sc in full.values())
    for keys in (full, quick):
        other = [k for k in keys if k[4] != "bf16"]
        assert {k[4] for k in other} == set(bench.KINDS) - {"bf16"}
        assert all(k[:4] + ("bf16",) in keys for k in other), "a row without its bf16 pair"
        for kind, rows in targets.VLLM_KIND_US.items():
            assert all((R, ctx, Q, False, kind) in keys for R, ctx, Q in rows), kind
    assert set(targets.FP8_KINDS) < set(bench.KINDS)
    limits = {targets.fp8_ratio_limit(k[1]) for k in full if k[4] in targets.FP8_KINDS}
    assert limits == {limit for _, limit in targets.FP8_RATIO}
    ms = bench.router_token_counts(generated.moe_router.MAX_TOKENS)
    x_dtypes = {"bf16", "fp32"}  # the bench times both (run_router's dtypes)
    assert {(K, N, x) for K, N in targets.VLLM_ROUTER_SHAPES for x in x_dtypes} \
        == set(targets.VLLM_ROUTER_US)
    for (K, N, _), times in targets.VLLM_ROUTER_US.items():
        assert (K, N) in generated.ROUTER_GEMM_SHAPES
        assert generated.ROUTER_GEMM_LIMITS[(K, N)][1] >= max(targets.ROUTER_MS)
        assert len(times) == len(targets.ROUTER_MS)
    assert set(targets.ROUTER_MS) <= set(ms)


def test_router_rows_are_judged_per_x_dtype_or_against_f_linear():
    def judged(row):
        return {v["what"]: v for v in targets.router_verdicts(row)}
    fp32 = judged(_router(3072, 256, 4, 5.8, x_dtype="fp32"))["≤ vLLM"]
    bf16 = judged(_router(3072, 256, 4, 5.8))["≤ vLLM"]
    assert (fp32["limit"], fp32["pass"]) == (5.8, True)  # vLLM's fp32-x 5.70 + 0.1
    assert (bf16["limit"], bf16["pass"]) == (5.99, True)
    assert judged(_router(3072, 256, 4, 5.81, x_dtype="fp32"))["≤ vLLM"]["pass"] is False
    # a shape vLLM hands to F.linear: at least 2x faster than it
    slow = judged(_router(7168, 896, 4, 10.0, linear=19.0))
    fast = judged(_router(7168, 896, 4, 10.0, linear=20.0))
    assert "≤ vLLM" not in slow and "≤ vLLM" not in judged(_router(3072, 256, 2, 5.0))
    assert (slow["vs F.linear"]["value"], slow["vs F.linear"]["pass"]) == (1.9, False)
    assert fast["vs F.linear"]["pass"] is True


def test_a_condensed_run_is_judged_like_the_run(two_runs, tmp_path):
    """--condense writes a result of record (input kinds and ratios kept) whose verdicts are
    the run's."""
    out = tmp_path / "record.json"
    bench_report.main([two_runs[1], "--condense", str(out), "--source", "test"])
    record = json.loads(out.read_text())
    assert record["source"] == "test"
    assert [r["name"] for r in record["decode"]][-1] == "R4 32k Q4 fp8kv"
    run, back = bench_report.load_run(two_runs[1]), bench_report.load_run(str(out))
    assert back["decode"][-1]["kind"] == "fp8kv"
    assert _verdicts([back]) == _verdicts([run])


def test_a_condensed_router_row_keeps_the_time_taken_in_a_row(tmp_path):
    """The router bench times ours in rotating rounds (the row's time) and, beside it, as
    30 replays in a row (how vLLM's reference times were taken): the record keeps both."""
    row = _router(3072, 256, 4, 5.5)
    row["ours_in_a_row"] = {"median_us": 6.456}
    run = _write(tmp_path, "run", [], [row, _router(3072, 256, 8, 6.0)])
    out = tmp_path / "record.json"
    bench_report.main([run, "--condense", str(out), "--source", "test"])
    got = json.loads(out.read_text())["router"]
    assert (got[0]["ours_us"], got[0]["ours_in_a_row_us"]) == (5.5, 6.46)
    assert "ours_in_a_row_us" not in got[1]


def test_router_report_states_how_far_replays_in_a_row_sit_above_the_rounds(tmp_path):
    """Runs that also timed ours as replays in a row (condensed or not) get a line each: the
    gap over the rotating rounds' time on vLLM's rows and how many of them pass counted that
    way (5.5 ≤ 5.79 + 0.1; 6.1 > 5.89 + 0.1; 7.9 > 7.39 + 0.1); runs without it get none."""
    import router_report

    rows = [_router(3072, 256, 1, 5.0), _router(3072, 256, 4, 6.0), _router(6144, 128, 8, 7.0)]
    for row, in_a_row in zip(rows, (5.5, 6.1, 7.9)):
        row["ours_in_a_row"] = {"median_us": in_a_row}
    run = _write(tmp_path, "run", [], rows)
    record = tmp_path / "record.json"
    bench_report.main([run, "--condense", str(record), "--source", "test"])
    plain = _write(tmp_path, "plain", [], [_router(3072, 256, 1, 5.0)])
    text = router_report.table([run, str(record), plain])
    for n in (1, 2):
        assert f"Run {n}: replays in a row minus rotating rounds, over 3 rows: median +0.50 µs, " \
               f"from +0.10 to +0.90; counted in a row, 1 of them at or below vLLM + 0.1 µs." \
               in text
    assert "Run 3:" not in text


def test_router_report_judges_every_row_on_the_worst_run(tmp_path):
    """tools/router_report.py: a cell is bold when any run is above vLLM + the slack; the
    counts per run and on every run; F.linear shapes judged by the worst run's speedup."""
    import router_report

    limit = targets.VLLM_ROUTER_US[(3072, 256, "bf16")]
    slack = targets.ROUTER_SLACK_US
    a = _write(tmp_path, "a", [], [
        _router(3072, 256, 1, limit[0] + slack),          # at the limit: passes
        _router(3072, 256, 4, limit[1] - 1.0),
        _router(4096, 8, 1, 4.0, linear=10.0)])           # 2.5×
    b = _write(tmp_path, "b", [], [
        _router(3072, 256, 1, limit[0] - 0.5),
        _router(3072, 256, 4, limit[1] + slack + 0.01),   # over on run b only
        _router(4096, 8, 1, 4.0, linear=7.0)])            # 1.75×: the worst run
    text = router_report.table([a, b])
    row = next(line for line in text.splitlines() if line.startswith("| (3072,256) bf16"))
    cells = [c.strip() for c in row.split("|")[2:-1]]
    assert not cells[0].startswith("**") and cells[1].startswith("**"), cells
    assert cells[2] == "–"  # no run timed M 8
    assert "At or below vLLM + 0.1 µs: 2, 1 of 2 rows on the 2 runs, 1 on every run." in text
    assert "(4096,8) bf16 1.8–1.8×" in text and "at least 2× in 0 of 1 rows" in text
