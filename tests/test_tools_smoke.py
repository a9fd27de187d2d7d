"""The benchmark's code paths on the CPU (`tools/bench.py --smoke`: Triton's interpreter, tiny
shapes, timings meaningless) and the command lines of the device-only exploration tools."""
import contextlib
import io
import json
import os
import runpy
import subprocess
import sys
import textwrap
import warnings

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(args, timeout=600):
    """``python3 ARGS`` from the repository root. A tool's --smoke run goes through Triton's
    interpreter: where this process runs kernels there too, the tool runs here as its own
    ``__main__`` (the same code, without a Python start and a torch import per run); a
    process that compiles for a GPU cannot switch to the interpreter, so there, and for every
    other command line, it runs in a new process."""
    if "--smoke" in args and args[0].endswith(".py") and \
            os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        return _run_here(args)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = ROOT
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _run_here(args):
    """``_run``'s result for a tool run as ``__main__`` in this process: its exit status, its
    output; the working directory, sys.argv and sys.path as they were afterwards."""
    path = os.path.join(ROOT, args[0])
    out, err, code = io.StringIO(), io.StringIO(), 0
    saved = os.getcwd(), sys.argv, list(sys.path)
    os.chdir(ROOT)
    sys.argv = [path, *args[1:]]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            runpy.run_path(path, run_name="__main__")
        for w in caught:  # the process would have printed them (timing-only variants warn)
            err.write(warnings.formatwarning(w.message, w.category, w.filename, w.lineno))
    except SystemExit as e:  # as the process would end: a status, or a message and 1
        code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
        if not isinstance(e.code, (int, type(None))):
            err.write(f"{e.code}\n")
    finally:
        os.chdir(saved[0])
        sys.argv, sys.path[:] = saved[1], saved[2]
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def test_bench_smoke_runs_every_section(tmp_path):
    run = _run([os.path.join("tools", "bench.py"), "--smoke", "--out", str(tmp_path)])
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads((tmp_path / "bench.json").read_text())
    assert report["errors"] == []
    # latency floors: the pointer chase checks where its chain ends, per hop count
    assert sorted(report["dependent_loads"]) == ["1", "2", "3"]
    assert all(t["median_us"] > 0 for t in report["dependent_loads"].values())
    assert report["router"], "no router rows"
    for row in report["router"]:
        assert row["rel_err"] < 1e-5, row
        assert row["w_read_splits"] in (1, 2, 4, 8, 16)
        assert row["w_read_minus_empty_us"] is not None
    assert report["decode"], "no decode rows"
    for row in report["decode"]:
        assert row["policies_agree"] is True, row["name"]
        if row["kind"] == "bf16":  # the interpreter's generic tables and the measured sm_90's
            assert set(row["ours"]) == {"generic", "sm_90"}, row["name"]
        assert row["match_rows"] == row["rows"], row["name"]
    # every other input kind runs (the interpreter handles fp8) and is paired with its bf16 row
    other = [row for row in report["decode"] if row["kind"] != "bf16"]
    assert {row["kind"] for row in other} == {"fp8kv", "fp8", "fp32"}
    assert all(row["vs_bf16"] > 0 for row in other)


def test_bench_prefill_smoke_checks_every_path(tmp_path):
    run = _run([os.path.join("tools", "bench_prefill.py"), "--smoke", "--reps", "2",
                "--out", str(tmp_path)])
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads((tmp_path / "bench_prefill.json").read_text())
    assert report["rows"], "no prefill rows"
    for row in report["rows"]:
        assert row["check"]["ok"], row["check"]
        assert set(row["us"]) == {"score", "topk", "two_kernels", "stream", "table"}
        assert row["scratch_bytes"]["stream"] == 0 < row["scratch_bytes"]["two_kernels"]


def test_bench_attn_smoke_checks_every_row(tmp_path):
    run = _run([os.path.join("tools", "bench_attn.py"), "--smoke", "--reps", "2",
                "--out", str(tmp_path)])
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads((tmp_path / "bench_attn.json").read_text())
    assert report["rows"] and all(r["check"]["ok"] for r in report["rows"])
    assert all(r["floor_us"] > 0 and r["us"] > 0 for r in report["rows"])
    assert report["rows"][0]["step"]["step_equals_two_calls"]
    assert report["prefill"] and all(
        r[name]["check_ok"] and r[name]["tflops"] > 0 for r in report["prefill"]
        for name in ("table", "per-token", "tiled", "tiled sorted"))


def test_bench_attn_times_a_peer_beside_ours_on_its_cache(tmp_path):
    """`--peer FILE:FUNCTION:packed`: the peer (here the float64 reference over a packed
    [pages, Hkv, 128, 2·D] cache) gets sparse_attn_decode's arguments with the cache packed and
    the scales by name, is checked like ours and timed in the same rounds; ours runs on that
    cache too (checked, its bits those of the split cache's), and the report compares with
    the peer."""
    run = _run([os.path.join("tools", "bench_attn.py"), "--smoke", "--reps", "2", "--only",
                "decode", "--contexts", "512", "--kv", "fp8e4m3:per_token", "--peer",
                "tests/peer_attn.py:attend_packed:packed", "--out", str(tmp_path)])
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads((tmp_path / "bench_attn.json").read_text())
    assert report["env"]["peer"]["function"] == "attend_packed"
    assert report["env"]["peer"]["layout"] == "packed"
    assert len(report["env"]["peer"]["sha256"]) == 64
    (row,) = report["rows"]
    # (the peer is the reference that checks it: any difference is a wrong argument)
    assert row["peer_check"]["ok"] and row["peer_check"]["max_abs"] == 0.0
    assert row["check_on_peer_cache"]["ok"] and row["same_as_split"]
    assert row["vs_peer"] == pytest.approx(row["us_on_peer_cache"] / row["peer_us"])
    assert [v["what"] for v in row["targets"]] == ["≤ the peer beside"]
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import attn_report

    table = attn_report.table([str(tmp_path / "bench_attn.json")])
    assert "| peer µs (A) | ours / peer (worst) |" in table
    assert f"| {row['us_on_peer_cache']:.1f} | {round(row['peer_us'], 1)} | " \
           f"{row['vs_peer']:.2f} |" in table


def test_bench_attn_withholds_the_comparison_with_a_wrong_or_failing_peer(tmp_path):
    """A peer whose output fails its float64 check is recorded but judged against nothing,
    and the report shows "–" for it; a peer that raises is left out (``peer_error``) while
    ours still counts."""
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import attn_report

    def run(function):
        out = tmp_path / function
        # (the smoke's 1k row, 16/1 heads at Q 1: a peer of the cache as it is needs no second
        # KV head or query row, which the packed peer's test keeps; a quarter of the programs)
        got = _run([os.path.join("tools", "bench_attn.py"), "--smoke", "--reps", "2",
                    "--only", "decode", "--contexts", "1024", "--peer",
                    f"tests/peer_attn.py:{function}", "--out", str(out)])
        assert got.returncode == 0, got.stdout[-3000:] + got.stderr[-3000:]
        return out / "bench_attn.json"

    wrong = run("attend_zeros")
    (row,) = json.loads(wrong.read_text())["rows"]
    assert row["check"]["ok"] and not row["peer_check"]["ok"] and "vs_peer" in row
    assert "us_on_peer_cache" in row and "same_as_split" not in row  # (split: ours as is)
    assert not any(v["what"] == "≤ the peer beside" for v in row["targets"])
    table = attn_report.table([str(wrong)])
    assert "| – | – | – |" in table and "At or below peer on every run: 0 of 1" in table
    (row,) = json.loads(run("attend_raising").read_text())["rows"]
    assert row["check"]["ok"] and "no such kernel here" in row["peer_error"]
    assert "vs_peer" not in row and "peer_us" not in row


def test_bench_attn_times_a_prefill_peer_beside_the_table(tmp_path):
    """`--peer-prefill FILE:FUNCTION:packed` on the prefill rows: the peer (the float64
    reference over the packed cache) and ours on that cache run beside the table's launch,
    each checked; a peer that raises is recorded and ours still counts."""
    run = _run([os.path.join("tools", "bench_attn.py"), "--smoke", "--reps", "2", "--only",
                "prefill", "--peer-prefill", "tests/peer_attn.py:attend_prefill_packed:packed",
                "--out", str(tmp_path)])
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads((tmp_path / "bench_attn.json").read_text())
    assert report["env"]["peer_prefill"]["function"] == "attend_prefill_packed"
    (row,) = report["prefill"]
    for name in ("table", "peer", "table on the peer's cache"):
        assert row[name]["check_ok"] and row[name]["us"] > 0, name
    assert "peer" in run.stdout and "ours on its cache" in run.stdout
    run = _run([os.path.join("tools", "bench_attn.py"), "--smoke", "--reps", "2", "--only",
                "prefill", "--peer-prefill", "tests/peer_attn.py:attend_prefill_packed",
                "--out", str(tmp_path)])  # (a peer that raises: the packed one, unpacked)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (row,) = json.loads((tmp_path / "bench_attn.json").read_text())["prefill"]
    assert row["peer"]["error"] == "ValueError: kv: the peer takes [pages, Hkv, 128, 2·D]"
    assert row["table"]["check_ok"]


def test_bench_attn_full_prefill_lists_have_no_hole_where_vllm_reads():
    """With a prefill peer the rows' lists are full: token t's list starts with its own block
    and holds min(topk, own + 1) distinct blocks at or below it, then −1 (vLLM's prefill
    kernel reads that many ids without checking for −1)."""
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import bench_attn

    for prefix, chunk in ((230, 300), (0, 700), (1024, 128)):
        ids = bench_attn.make_prefill_case((16, 1, prefix, chunk), "cpu", 64, 16,
                                           full=True)["topk_idx"][0].tolist()
        for t, lst in enumerate(ids):
            own = (prefix + t) // 128
            n = min(16, own + 1)
            assert lst[0] == own and len(set(lst[:n])) == n, (prefix, t, lst)
            assert all(0 <= b <= own for b in lst[:n]) and all(b == -1 for b in lst[n:])


def test_bench_attn_reads_its_peer_option():
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import bench_attn

    assert bench_attn.peer_option("x/p.py:fn") == ("x/p.py", "fn", "split")
    assert bench_attn.peer_option("p.py:fn:packed") == ("p.py", "fn", "packed")
    for bad in ("p.py", "p.txt:fn", "p.py:fn:hnd", "p.py:1fn"):
        with pytest.raises(Exception, match="FILE.py:FUNCTION"):
            bench_attn.peer_option(bad)


def test_step_study_times_each_launch_of_the_attention_and_checks_its_bits(tmp_path):
    run = _run([os.path.join("tools", "step_study.py"), str(tmp_path), "--smoke",
                "--cap", "2"])
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (row,) = json.loads((tmp_path / "step_study.json").read_text())["rows"]
    assert set(row["us"]) == {"table", "dependent", "plain", "two calls", "indexer",
                              "attention", "dependent cap", "plain cap"}
    assert row["same_bits"] == {"table": True, "dependent": True, "plain": True,
                                "dependent cap": True, "plain cap": True}


def test_step_study_reads_rows_with_their_cache():
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import step_study

    assert step_study.parse_rows("32/2/128/32768/1,8/1/64/8192/4:fp8e4m3:per_token") == [
        ((32, 2, 128, 32768, 1), "bf16"), ((8, 1, 64, 8192, 4), "fp8e4m3:per_token")]
    assert all(len(r) == 5 for r, _ in step_study.parse_rows(step_study.ROWS))


def test_union_study_times_the_table_and_each_tiled_walk_on_both_list_kinds(tmp_path):
    # --smoke's two rows (G 16 and 8, one KV head, 4k contexts, 4 blocks a row) at Q 2 instead
    # of Q 4 (--rows takes q/kv/G/Hkv/programs/Q): one request whose rows share a tile, at
    # half the programs
    run = _run([os.path.join("tools", "union_study.py"), str(tmp_path), "--smoke", "--rows",
                "bf16/bf16/16/1/2/2,bf16/bf16/8/1/2/2"])
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rows = json.loads((tmp_path / "union_study.json").read_text())["rows"]
    assert [(r["group"], r["lists"]) for r in rows] == [
        (16, "shared"), (16, "own"), (8, "shared"), (8, "own")]
    for row in rows:
        assert set(row["us"]) == {"table", "tiled sorted w4", "tiled sorted w8",
                                  "tiled minima w4", "tiled minima w8", "tiled sorted s2 w4",
                                  "tiled sorted s4 w4"}
        assert max(row["max_err"].values()) <= 2e-2
    # a request's 2 rows share most of their lists in one, hardly any in the other
    assert rows[0]["union_blocks"] < rows[1]["union_blocks"]


# attn_ablation's decode studies on one request of the smoke row's shape (--smoke alone takes
# 16/1 heads, 2 requests, 1k contexts, Q 1): every variant, launch, read and merge runs as on
# two requests, on half the interpreted programs
ONE_REQUEST = ("--rows", "16/1/1/1024/1")


def test_attn_ablation_smoke_builds_and_times_every_variant(tmp_path):
    run = _run([os.path.join("tools", "attn_ablation.py"), str(tmp_path), "--smoke",
                *ONE_REQUEST])
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads((tmp_path / "attn_ablation.json").read_text())
    names = {k.split(" ")[-1] for k in report[0]["us"]}
    assert {"base", "no_merge", "no_atomic", "no_kv", "no_table", "no_pick", "merge_kernel",
            "scratch_pick", "gather_pick", "packed_pick", "scalar_pick",
            "keys_rows", "warp_splits", "spin_merge", "merge_empty", "wgmma",
            "wgmma_split_only", "below_page_last", "log2_scores",
            "sums_per_step", "mask_every_step", "bf16_partials", "regs128"} <= names
    # the variants that compute the generated kernel's result give its bits (keys_rows,
    # warp_splits and wgmma: within their bound)
    assert {k.split(" ")[-1] for k in report[0]["same_bits"]} >= {
        "keys_rows", "warp_splits", "wgmma", "below_page_last", "log2_scores",
        "sums_per_step", "mask_every_step", "bf16_partials", "regs128"}
    assert report[0]["same_bits"] and all(report[0]["same_bits"].values())


def test_attn_ablation_prefill_times_variants_at_the_tables_launch(tmp_path):
    """--prefill: bench_attn's prefill rows (one tiny row here) at the table's launch, each
    variant timed; an fp16 q's probabilities take P·V another way (p16_acc)."""
    run = _run([os.path.join("tools", "attn_ablation.py"), str(tmp_path), "--smoke",
                "--prefill", "--kv", "fp16", "--variants", "base,p16_acc,splits_first"])
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads((tmp_path / "attn_ablation.json").read_text())
    assert len(report) == 1 and report[0]["launch"]["variant"] == "sparse_attn_split"
    assert set(report[0]["us"]) == {"base", "p16_acc", "splits_first"}
    assert report[0]["same_bits"] == {"splits_first": True}  # (p16_acc: timing only)


def test_attn_ablation_tile_keys_rows_gives_the_query_tiles_result(tmp_path):
    """--prefill at a query-tiled --launch over an fp8 cache with per-token scales:
    tile_keys_rows (keys as the rows of both products) within its bound of the kernel."""
    run = _run([os.path.join("tools", "attn_ablation.py"), str(tmp_path), "--smoke",
                "--prefill", "--kv", "fp8e4m3:per_token", "--variants", "base,tile_keys_rows",
                "--launch", "lanes=16,sorted_union=True,num_warps=4,num_stages=2"])
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads((tmp_path / "attn_ablation.json").read_text())
    assert report[0]["launch"]["variant"] == "sparse_attn_tiled"
    assert report[0]["same_bits"] == {"tile_keys_rows": True}


def test_attn_ablation_over_an_fp8_cache_widens_it_other_ways(tmp_path):
    run = _run([os.path.join("tools", "attn_ablation.py"), str(tmp_path), "--smoke", "--kv",
                "fp8e4m3", "--variants", "base,k_bits,k_byte,k_pairs_tl,no_kv", *ONE_REQUEST])
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads((tmp_path / "attn_ablation.json").read_text())
    assert {k.split(" ")[-1] for k in report[0]["us"]} >= {"base", "k_bits", "k_byte",
                                                           "k_pairs_tl", "no_kv"}
    # K widened by integer ops: the kernel's bits; K read as 16-bit pairs (q's columns split
    # to match): within its bound (k_byte is wrong for e4m3, no_kv for any cache: timing only)
    checks = {k.split(" ")[-1]: v for k, v in report[0]["same_bits"].items()}
    assert checks == {"k_bits": True, "k_pairs_tl": True}, checks


def test_attn_ablation_over_scaled_fp8_caches_takes_their_scales_other_ways(tmp_path):
    """Per-token V scales ranged per tile at a launch whose splits take several steps (the
    kernel ranges them once per split there), scalar scales read at every step: both give
    the kernel's result within their bound."""
    for kv, variant in (("fp8e4m3:per_token", "pt_range_per_tile"),
                        ("fp8e5m2:scalar", "scales_per_step")):
        out = tmp_path / variant
        run = _run([os.path.join("tools", "attn_ablation.py"), str(out), "--smoke", "--kv", kv,
                    "--variants", f"base,{variant}", "--launch", "splits=1", *ONE_REQUEST])
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        report = json.loads((out / "attn_ablation.json").read_text())
        # the variant at both launches, and the second launch against the table's
        checks = report[0]["same_bits"]
        assert set(checks) == {f"s4 w4 st2 {variant}", f"s1 w4 st2 {variant}",
                               "s1 w4 st2 base"} and all(checks.values()), (kv, checks)


def test_attn_ablation_prints_its_usage():
    """--help prints the study's usage (exit 0); no output directory first: usage, exit 2."""
    run = _run([os.path.join("tools", "attn_ablation.py"), "--help"])
    assert run.returncode == 0 and "python3 tools/attn_ablation.py OUTDIR" in run.stdout
    run = _run([os.path.join("tools", "attn_ablation.py"), "--smoke"])
    assert run.returncode == 2 and "--against NAME=FILE" in run.stdout


def test_attn_ablation_times_other_revisions_of_the_kernel(tmp_path):
    """`--against NAME=FILE` builds another revision of the generated module (here its own
    source) and checks its result against the kernel's."""
    other = tmp_path / "sparse_attn_other.py"
    other.write_text(open(os.path.join(ROOT, "generated", "sparse_attn.py")).read())
    run = _run([os.path.join("tools", "attn_ablation.py"), str(tmp_path), "--smoke",
                "--variants", "base", "--against", f"other={other}", *ONE_REQUEST])
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads((tmp_path / "attn_ablation.json").read_text())
    assert report[0]["same_bits"] == {"s4 w4 st2 other": True}, report[0]["same_bits"]
    assert "other / base: " in run.stdout  # the summary's ratio


def test_attn_ablation_times_other_launches_beside_the_tables(tmp_path):
    run = _run([os.path.join("tools", "attn_ablation.py"), str(tmp_path), "--smoke", "--table",
                "--variants", "base", "--launch",
                "splits=1,head_split=4,num_warps=8;splits=2;splits=2,table_first=True",
                "--where", *ONE_REQUEST])
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads((tmp_path / "attn_ablation.json").read_text())
    timed = {k for k in report[0]["us"] if k != "empty kernel"}
    reads = {k for k in timed if k.startswith("read ")}
    assert {"s1 w8 st2 hs4 base", "s2 w4 st2 base", "s2 w4 st2 tf base",
            "table launch, packed pages"} <= timed and len(timed) == 5 + len(reads), timed
    # --where: each plain read of the listed blocks summed the bytes it stands for
    assert {"read none in order p1 t32 w8 b1", "read pages random p1 t32 w8 b1",
            "read list random p1 t32 w8 b1", "read pages random p1 t16 w4 b2"} <= reads
    assert all(report[0]["same_bits"][k] for k in reads)
    # each other launch's output checked against the table launch's
    launches = {"s1 w8 st2 hs4 base", "s2 w4 st2 base", "s2 w4 st2 tf base"}
    assert all(report[0]["same_bits"][k] for k in launches), report[0]["same_bits"]
    # the summary: each other launch over the table's, one ratio per row
    assert "s2 w4 st2 tf / the first launch: " in run.stdout and " over 1\n" in run.stdout


def test_attn_ablation_floor_times_reads_with_partials_and_their_merge(tmp_path):
    """--floor: the listed reads writing a split's partials, alone and with the merge kernel
    after them, each shape's merged output checked (the mean of its parts' column sums); the
    shapes include two and four blocks per program (four: the row's whole list, one split)
    and 16-bit partials (eight and sixteen blocks: not at its four-entry lists)."""
    run = _run([os.path.join("tools", "attn_ablation.py"), str(tmp_path), "--smoke",
                "--variants", "base", "--floor", *ONE_REQUEST])
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads((tmp_path / "attn_ablation.json").read_text())
    checks = {k: v for k, v in report[0]["same_bits"].items() if k.startswith("floor ")}
    assert len(checks) == 20 and all(checks.values()), checks  # both merges of 10 shapes
    shapes = {k.rsplit(" +", 1)[0] for k in checks}
    assert any(" b2 fp16 " in k for k in shapes) and any(" b4 fp16 " in k for k in shapes)
    timed = set(report[0]["us"])
    assert len(shapes) == 10 and all(f"{k} reads+partials" in timed and f"{k} +merge" in timed
                                    and f"{k} +rolled merge" in timed for k in shapes)


def test_decode_ablation_smoke_builds_and_times_every_variant(tmp_path):
    run = _run([os.path.join("tools", "decode_ablation.py"), str(tmp_path), "--smoke"])
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads((tmp_path / "decode_ablation.json").read_text())
    assert set(report[0]["us"]) >= {"base", "no_k", "no_gather", "no_wait", "no_prefetch",
                                    "scorer alone", "selector alone", "single launch"}
    assert all(t > 0 for t in report[0]["us"].values())


def test_router_ablation_smoke_builds_and_times_every_variant(tmp_path):
    run = _run([os.path.join("tools", "router_ablation.py"), str(tmp_path), "--smoke"])
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads((tmp_path / "router_ablation.json").read_text())
    common = {"empty kernel", "F.linear", "base"}
    assert [r["kernel"] for r in report] == ["per_expert"] * 4 + ["splitk"] * 4
    assert all(set(r["us"]) == common | {"no_x", "no_w", "no_loads"} for r in report[:4])
    assert all(set(r["us"]) == common | {"sk_partials_only", "sk_relaxed", "sk_one_partial",
                                         "sk_tf32", "sk_no_loads", "sk_one_chain",
                                         "sk_builtin", "sk_unguarded"}
               for r in report[4:])
    # the split-K rows cover every x · w dtype pair (each branch of the products, the correct
    # variants checked against the kernel)
    assert {(r["x_dtype"], r["w_dtype"]) for r in report[4:]} == {
        (x, w) for x in ("fp32", "bf16") for w in ("float32", "bfloat16")}


def test_launch_compare_times_only_the_rows_whose_launch_changed(tmp_path):
    """An old data file equal to the current one but for one router row and one attention row,
    each missing a parameter added later (filled with the launcher's default): those two rows
    are timed old against new, every other row is the same launch."""
    with open(os.path.join(ROOT, "specs", "measured", "sm_90.json"), encoding="utf-8") as f:
        data = json.load(f)
    router = next(r for r in data["router_gemm"] if r["shape"] == [4096, 8]
                  and r["x_dtype"] == "bf16" and r["num_tokens"][0] == 1)
    router["params"]["num_warps"] = 1 if router["params"]["num_warps"] != 1 else 2
    router["kernel"], router["params"] = "per_expert", {
        k: v for k, v in router["params"].items() if k in ("block_m", "block_k", "num_warps",
                                                          "num_stages")} | {"block_m": 1}
    attn = next(r for r in data["sparse_attn_decode"] if r["group"] == 16
                and r["programs"][0] == 1)
    attn["params"] = {"splits": 2, "kv_tile": 128, "head_split": 1, "num_warps": 4,
                      "num_stages": 2}  # no merge_kernel: False, as before it existed
    old = tmp_path / "old.json"
    old.write_text(json.dumps(data))
    run = _run([os.path.join("tools", "launch_compare.py"), str(tmp_path), "--old", str(old),
                "--smoke"])
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rows = json.loads((tmp_path / "launch_compare.json").read_text())["rows"]
    timed = {r["row"] for r in rows if "us" in r}
    assert timed == {"router (4096,8) M1 bf16", "attention 16/1 R2 1024 tokens Q1"}, rows
    for r in rows:
        if "us" in r:
            assert set(r["us"]) == {"empty kernel", "old", "new"}
            assert r["old"] != r["new"]
            if r["row"].startswith("attention"):  # also timed inside sparse_decode_step
                assert set(r["step_us"]) == {"old", "new"}
        else:
            assert r["same"] and r["old"] == r["new"]
    assert len(rows) > len(timed)


@pytest.mark.parametrize("kv, rows_of", [("fp8e4m3:per_token", ("fp8e4m3", "per_token")),
                                          ("fp8e5m2", ("fp8e4m3", "none"))])
def test_launch_compare_times_the_attention_over_the_cache_it_is_given(tmp_path, kv, rows_of):
    """--kv: the attention rows take the data file's rows of that cache, or of the cache it
    is measured as (an e5m2 cache: e4m3's, MEASURED_AS); an old file differing from the
    current one in one such row (and in a bf16 row, which this comparison does not look at)
    times exactly that row, alone and in the step."""
    with open(os.path.join(ROOT, "specs", "measured", "sm_90.json"), encoding="utf-8") as f:
        data = json.load(f)

    def row(kv_dtype, scales):
        return next(r for r in data["sparse_attn_decode"] if r["group"] == 16
                    and r["kv_dtype"] == kv_dtype and r["scales"] == scales
                    and r["programs"][0] == 1)
    for r in (row(*rows_of), row("bf16", "none")):
        r["params"] = {**r["params"], "splits": 1 if r["params"]["splits"] != 1 else 2}
    old = tmp_path / "old.json"
    old.write_text(json.dumps(data))
    run = _run([os.path.join("tools", "launch_compare.py"), str(tmp_path), "--old", str(old),
                "--only", "attention", "--kv", kv, "--smoke"])
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads((tmp_path / "launch_compare.json").read_text())
    assert result["kv"] == list(bench_kv(kv))
    timed = [r for r in result["rows"] if "us" in r]
    assert [r["row"] for r in timed] == [f"attention 16/1 R2 1024 tokens Q1 {kv}"]
    assert set(timed[0]["step_us"]) == {"old", "new"}
    assert all(r["row"].endswith(kv) and "no row" not in r for r in result["rows"])


def bench_kv(text):
    """bench_attn.py's reading of a --kv option: (dtype, scale mode)."""
    dtype, _, mode = text.partition(":")
    return dtype, mode or "none"


TOOLS = sorted(name for name in os.listdir(os.path.join(ROOT, "tools")) if name.endswith(".py")
               and '__name__ == "__main__"' in open(os.path.join(ROOT, "tools", name)).read())


@pytest.mark.parametrize("tool", TOOLS)
def test_every_tool_prints_its_usage_and_makes_nothing(tool, tmp_path):
    """`tools/X.py --help` exits 0 with its usage (argparse's, or the study's docstring naming
    the tool) before any device setup, and writes nothing (a study once made a folder named
    `--help` and went on to look for a GPU)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = ROOT
    run = subprocess.run([sys.executable, os.path.join(ROOT, "tools", tool), "--help"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "usage:" in run.stdout or f"tools/{tool}" in run.stdout, run.stdout[:500]
    assert not list(tmp_path.iterdir())


def test_hostcost_peer_rows_time_the_peer_and_judge_ours_on_its_cache(monkeypatch):
    """`hostcost.py --peer`: each attention group gains the peer's call and ours on the peer's
    (packed) cache, that one judged against the peer's median; both calls run and write their
    outputs (CPU interpreter, a tiny row)."""
    import importlib

    import generated

    monkeypatch.syspath_prepend(os.path.join(ROOT, "tools"))
    hostcost = importlib.import_module("hostcost")
    bench_attn = importlib.import_module("bench_attn")
    peer_path = os.path.join(ROOT, "tests", "peer_attn.py")
    fn, _ = bench_attn.load_peer(peer_path, "attend_packed")
    monkeypatch.setattr(hostcost, "PEER", (fn, (peer_path, "attend_packed", "packed")))
    rows = hostcost.attention_rows(generated, (16, 1, 2, 1024, 1), "cpu", 64, 4)
    by_name = {name: (call, target) for name, call, target in rows}
    peer_name = "peer attend_packed 16/1 R2 1k Q1"
    ours_name = "sparse_attn_decode 16/1 R2 1k Q1 on the peer's cache"
    assert list(by_name)[-2:] == [peer_name, ours_name]
    assert by_name[peer_name][1] is None and by_name[ours_name][1] == ((peer_name,), 0.0)
    for name in (peer_name, ours_name):
        by_name[name][0]()  # (runs: the packed cache is what each takes)
    zeros, _ = bench_attn.load_peer(peer_path, "attend_zeros")
    monkeypatch.setattr(hostcost, "PEER", (zeros, (peer_path, "attend_zeros", "packed")))
    with pytest.raises(SystemExit, match="differs from ours"):
        hostcost.attention_rows(generated, (16, 1, 2, 1024, 1), "cpu", 64, 4)
    with pytest.raises(SystemExit, match="one at a time"):
        hostcost.main(["--peer", "p.py:f", "--against", "x"])
    with pytest.raises(SystemExit, match="FILE.py:FUNCTION"):
        hostcost.main(["--peer", "p.txt"])


def test_hostcost_times_a_group_in_turns_and_judges_a_row_in_its_best_pass(monkeypatch):
    """tools/hostcost.py's bookkeeping (the GPU timing faked: a call's µs is its value): a
    group's rows are timed together; a target naming rows of its group is their sum plus the
    offset, taken from the pass that gave the row its lowest median (not each row's own
    lowest); a target naming a row outside its group is refused; `--against` pairs each row
    with the other package's and records an error for a group that package cannot make; a
    package is named by its manifest's hash."""
    import importlib

    monkeypatch.syspath_prepend(os.path.join(ROOT, "tools"))
    hostcost = importlib.import_module("hostcost")
    timed_together = []

    def turns(fns, calls):
        timed_together.append(len(fns))
        return [fn() for fn in fns]

    def groups(package):
        yield lambda: [("a", lambda: 1.0, None), ("b", lambda: 2.0, 5.0),
                       ("c", lambda: 3.5, (("a", "b"), 1.0))]
        if package == "other":
            yield lambda: {}["index_prefill"]  # (an entry the other package lacks)
        else:
            yield lambda: [("d", lambda: 4.0, None)]

    monkeypatch.setattr(hostcost, "groups", groups)
    monkeypatch.setattr(hostcost, "host_us_turns", turns)
    monkeypatch.setattr(hostcost, "load_package", lambda folder: "other")
    assert hostcost.measure(10) == {
        "a": {"host_us": 1.0, "target_us": None, "passes": [1.0]},
        "b": {"host_us": 2.0, "target_us": 5.0, "passes": [2.0]},
        "c": {"host_us": 3.5, "target_us": 4.0, "passes": [3.5]},
        "d": {"host_us": 4.0, "target_us": None, "passes": [4.0]}}
    assert timed_together == [3, 1]
    # a pass where the host was slow for every row of the group: c's lowest is in pass 2, and
    # its target sums a and b of pass 2, not a's lowest (pass 3) and b's (pass 1)
    timed = {"a": iter([1.0, 1.2, 0.5]), "b": iter([1.5, 2.0, 2.5]), "c": iter([9.0, 3.0, 4.0])}

    def groups_by_name(package):
        yield lambda: [("a", lambda: "a", None), ("b", lambda: "b", 5.0),
                       ("c", lambda: "c", (("a", "b"), 1.0))]

    monkeypatch.setattr(hostcost, "host_us_turns", lambda fns, calls: [next(timed[fn()])
                                                                        for fn in fns])
    monkeypatch.setattr(hostcost, "groups", groups_by_name)
    got = hostcost.measure(10, passes=3)
    assert got["a"] == {"host_us": 0.5, "target_us": None, "passes": [1.0, 1.2, 0.5]}
    assert got["b"] == {"host_us": 1.5, "target_us": 5.0, "passes": [1.5, 2.0, 2.5]}
    assert got["c"] == {"host_us": 3.0, "target_us": 4.2, "passes": [9.0, 3.0, 4.0]}

    def across_groups(package):
        yield lambda: [("a", lambda: 1.0, None)]
        yield lambda: [("c", lambda: 3.0, (("a",), 0.0))]

    monkeypatch.setattr(hostcost, "host_us_turns", turns)
    monkeypatch.setattr(hostcost, "groups", across_groups)
    with pytest.raises(ValueError, match=r"c: its target names \['a'\], not rows of its group"):
        hostcost.measure(10)
    monkeypatch.setattr(hostcost, "host_us_turns", lambda fns, calls: [fns[0](), fns[1]() + 0.5])
    monkeypatch.setattr(hostcost, "groups", groups)
    got = hostcost.compare(10, "OLD")
    assert got["c"] == {"host_us": 3.5, "against_us": 4.0}
    assert got["d"] == {"error": "KeyError: 'index_prefill'"}
    import generated

    assert hostcost.manifest_hash(generated) and len(hostcost.manifest_hash(generated)) == 16


def test_hostcost_turns_rotate_and_leave_queue_room(monkeypatch):
    """`host_us_turns`: every call timed once per round, each round starting one later, at
    most ~100 calls between two GPU sleeps (the GPU calls stubbed: no CUDA here)."""
    import importlib

    import torch

    monkeypatch.syspath_prepend(os.path.join(ROOT, "tools"))
    hostcost = importlib.import_module("hostcost")
    log = []
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: log.append("sleep"))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    fns = [lambda k=k: log.append(k) for k in range(3)]
    medians = hostcost.host_us_turns(fns, 70)
    assert len(medians) == 3 and all(us >= 0 for us in medians)
    calls = [x for x in log if x != "sleep"]
    assert calls[:3] == [0, 1, 2]  # (each called once before the timing)
    assert calls[3:12] == [0, 1, 2, 1, 2, 0, 2, 0, 1]
    assert [calls[3:].count(k) for k in range(3)] == [70, 70, 70]
    between = "".join("s" if x == "sleep" else "c" for x in log[3:]).split("s")[1:]
    assert [len(b) for b in between] == [99, 99, 12]  # (33 rounds of 3 per sleep)


def test_tuner_runs_as_a_module():
    run = _run(["-m", "tools.tune", "measure", "--help"], timeout=120)
    assert run.returncode == 0 and "--requests" in run.stdout, run.stderr[-2000:]


def test_gpu_check_refuses_an_unknown_tune_section(tmp_path):
    run = subprocess.run(["bash", os.path.join(ROOT, "tools", "gpu_check.sh"), "tune", "scorer"],
                         cwd=ROOT, env={**os.environ, "OUT": str(tmp_path)}, capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 2 and "usage:" in run.stdout and "tune router|decode" in run.stdout


def test_gpu_check_names_tune_runs_by_their_inputs(tmp_path):
    """Runs of other decode inputs do not overwrite the default inputs' run files (the
    measuring python replaced by `true`: only the names are checked)."""
    run = subprocess.run(["bash", os.path.join(ROOT, "tools", "gpu_check.sh"), "tune", "decode",
                          "--inputs", "q_dtype=fp32,cache_dtype=fp32"], cwd=ROOT,
                         env={**os.environ, "OUT": str(tmp_path), "PYTHON": "true"},
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    logs = sorted(p.name for p in tmp_path.glob("tune_*.log"))
    assert logs == ["tune_decode_q_dtype_fp32_cache_dtype_fp32.log"], logs


def test_gpu_check_names_attention_tune_runs_by_their_filters(tmp_path):
    """Two attention tunes of one device call (another cache, another query length) write
    two run files."""
    for filters in (["--kv-dtypes", "fp8e4m3", "--query-lens", "1"],
                    ["--modes", "decode", "--kv-dtypes", "fp8e4m3:per_token"]):
        run = subprocess.run(["bash", os.path.join(ROOT, "tools", "gpu_check.sh"), "tune",
                              "attention", *filters], cwd=ROOT,
                             env={**os.environ, "OUT": str(tmp_path), "PYTHON": "true"},
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    logs = sorted(p.name for p in tmp_path.glob("tune_*.log"))
    assert logs == ["tune_attention_kv_dtypes_fp8e4m3_query_lens_1.log",
                    "tune_attention_modes_decode_kv_dtypes_fp8e4m3_per_token.log"], logs


@pytest.mark.parametrize("errors,jobs", [(0, None), (2, None), (0, "8")])
def test_gpu_check_memcheck_runs_the_kernel_tests_and_counts_errors(tmp_path, errors, jobs):
    """`gpu_check.sh memcheck` with a stand-in compute-sanitizer (it records its command line
    and writes a log as memcheck does): the kernels' non-gpu tests, the caching allocator off,
    any error reported fails the run; a plain run on 8 xdist workers first, then the sanitized
    run in one process, or on GPU_TEST_JOBS xdist workers."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "compute-sanitizer"
    fake.write_text(textwrap.dedent(f"""\
        #!/usr/bin/env bash
        echo "$PYTORCH_NO_CUDA_MEMORY_CACHING $*" > "{tmp_path}/argv"
        while [ $# -gt 0 ]; do
          if [ "$1" = --log-file ]; then log=${{2/\\%p/123}}; fi
          shift
        done
        if [ {errors} -gt 0 ]; then
          echo "========= Invalid __global__ read of size 2 bytes" >> "$log"
          echo "=========     at _sparse_attn_kernel+0x1f0" >> "$log"
        fi
        echo "========= ERROR SUMMARY: {errors} errors" >> "$log"
        echo "3 passed"
        """))
    fake.chmod(0o755)
    # (the python running pytest: it records when it ran, plain or under the sanitizer)
    python = bin_dir / "python"
    python.write_text(f'#!/usr/bin/env bash\necho "${{PYTORCH_NO_CUDA_MEMORY_CACHING:-plain}} $*"'
                      f' >> "{tmp_path}/python_runs"\n')
    python.chmod(0o755)
    out = tmp_path / "out"
    run = subprocess.run(["bash", os.path.join(ROOT, "tools", "gpu_check.sh"), "memcheck",
                          "-k", "merge"], cwd=ROOT,
                         env={**{k: v for k, v in os.environ.items() if k != "GPU_TEST_JOBS"},
                              **({"GPU_TEST_JOBS": jobs} if jobs else {}),
                              "OUT": str(out), "PYTHON": str(python),
                              "PATH": f"{bin_dir}:{os.environ['PATH']}"},
                         capture_output=True, text=True, timeout=60)
    argv = (tmp_path / "argv").read_text()
    assert argv.startswith("1 --tool memcheck --target-processes all"), argv
    runs = (tmp_path / "python_runs").read_text() + argv
    # the plain run compiles on 8 workers; the sanitized run is one process, or GPU_TEST_JOBS's
    assert runs.count("-n 8") == (2 if jobs else 1) and " -n " not in runs.replace("-n 8", ""), runs
    assert ("-n 8" in argv) == bool(jobs), argv
    # a plain run of the same tests first compiles the kernels outside the sanitizer
    plain = [r for r in (tmp_path / "python_runs").read_text().splitlines()
             if r.startswith("plain -m pytest")]
    assert len(plain) == 1 and "tests/test_sparse_attn.py" in plain[0], plain
    assert plain[0].rstrip().endswith("-k merge") and "-m not gpu" in plain[0], plain
    assert "plain run: rc=0" in run.stdout, run.stdout
    assert "tests/test_sparse_attn.py" in argv and "-m not gpu" in argv, argv
    assert argv.rstrip().endswith("-k merge"), argv
    assert f"memcheck: {errors} errors in 1 log(s)" in run.stdout, run.stdout
    assert (run.returncode != 0) == (errors > 0), run.stdout[-2000:]
    assert ("Invalid __global__ read" in run.stdout) == (errors > 0)


def _launch_compare():
    if os.path.join(ROOT, "tools") not in sys.path:
        sys.path[:0] = [ROOT, os.path.join(ROOT, "tools")]
    import launch_compare

    return launch_compare


def _restore_case():
    """(lc module, current data, old data, results of two machines, rows): the old file differs
    in three router rows' launches: one the old launch won on both machines, one on one
    machine only, one whose current row is not the launch timed as new."""
    import copy

    lc = _launch_compare()
    with open(os.path.join(ROOT, "specs", "measured", "sm_90.json"), encoding="utf-8") as f:
        data = json.load(f)
    old = copy.deepcopy(data)
    rows = {"won": "router (6144,128) M1 bf16", "lost": "router (3072,256) M4 bf16",
            "stale": "router (6144,256) M1 fp32"}
    rows_of = lc.bench_rows(False)
    for label in rows.values():
        table, point = rows_of[label]
        row = lc.row_for(old[table], point)
        row["params"] = {k: v for k, v in row["params"].items() if k != "block_e"}
        row["params"]["num_warps"] = 1 if row["params"]["num_warps"] != 1 else 2
        row["measured"]["winner"]["us"] = {"M1 bf16": {"GPU-old": 5.0}}
        row["measured"]["runner_up"]["us"] = {"M1 bf16": {"GPU-old": 5.2}}
    old["provenance"]["runs"]["GPU-old"] = {"machine": "GPU-old"}

    def record(label, new_over_old, new=None):
        table, point = rows_of[label]
        was, now = lc.row_for(old[table], point), lc.row_for(data[table], point)
        return {"row": label, "old": [was["kernel"], {"block_e": 1, **was["params"]}],
                "new": new or [now["kernel"], now["params"]],
                "us": {"old": 5.0, "new": 5.0 * new_over_old, "empty kernel": 3.0}}

    results = [{"env": {"machine": m}, "old": "old.json", "target": "sm_90", "rows": [
        record(rows["won"], 1.05), record(rows["lost"], r),
        record(rows["stale"], 1.5, new=["splitk", {"split_k": 2}])]}
        for m, r in (("A", 1.2), ("B", 0.99))]
    return lc, data, old, results, rows


def test_launch_compare_restore_puts_back_only_rows_the_old_launch_won_everywhere():
    """Only the row slower on both machines gets its old row back, with the parameters as
    timed and the runs its measurements cite; a row whose current launch is not the one timed
    as new is left alone, and so is one whose old row is not the launch timed as old."""
    import copy

    lc, data, old, results, rows = _restore_case()
    fresh = copy.deepcopy(data)
    said = []
    restored = lc.restore(results, data, old, 0.01, said.append)
    assert [(t, shown.split(" new/old")[0], runs) for t, shown, runs in restored] == \
        [("router_gemm", rows["won"], ["GPU-old"])], said
    assert data["provenance"]["runs"]["GPU-old"] == {"machine": "GPU-old"}
    table, point = lc.bench_rows(False)[rows["won"]]
    now = lc.row_for(data[table], point)
    assert now["params"] == {"block_e": 1, **lc.row_for(old[table], point)["params"]}
    assert now["measured"]["winner"]["us"] == {"M1 bf16": {"GPU-old": 5.0}}
    for label in (rows["lost"], rows["stale"]):
        table, point = lc.bench_rows(False)[label]
        assert lc.row_for(data[table], point) == lc.row_for(fresh[table], point), label
    assert any(line.startswith(rows["stale"]) and "not the launch timed as new" in line
               for line in said)
    # the old file moved on (another launch in that row): nothing is restored
    moved = copy.deepcopy(old)
    table, point = lc.bench_rows(False)[rows["won"]]
    lc.row_for(moved[table], point)["params"]["block_k"] = 64
    said = []
    assert lc.restore(results, copy.deepcopy(fresh), moved, 0.01, said.append) == []
    assert any("not the launch timed as old" in line for line in said)


def test_launch_compare_restore_refuses_results_over_different_caches():
    """Result files of `--kv` runs name their cache: restoring from files that timed attention
    rows over different caches is refused (those are different rows of the data file); files
    of router rows alone may name any."""
    lc, data, old, results, _ = _restore_case()
    results[1]["kv"] = ["fp8e4m3", "none"]  # (router rows only: the cache does not matter)
    assert lc.restore(results, data, old, 0.01, lambda _: None)
    lc, data, old, results, _ = _restore_case()
    results[1]["kv"] = ["fp8e4m3", "none"]
    for res in results:
        res["rows"].append({"row": "attention 16/1 R32 32768 tokens Q1", "same": True})
    with pytest.raises(SystemExit, match="different caches"):
        lc.restore(results, data, old, 0.01, lambda _: None)


def test_launch_compare_restore_needs_every_machine_slower_and_the_median_past_the_margin():
    """Slower on each machine but within the margin on one (1.008, 1.03, 1.025): restored;
    slower on each but the median within the margin (1.005, 1.008, 1.02): kept."""
    import copy

    lc, data, old, results, rows = _restore_case()
    fresh = copy.deepcopy(data)

    def with_ratios(ratios):
        out = []
        for m, r in zip("ABC", ratios):
            res = copy.deepcopy(results[0])
            res["env"]["machine"] = m
            for rec in res["rows"]:
                if rec["row"] in (rows["won"], rows["lost"]):  # "lost": faster everywhere
                    rec["us"]["new"] = rec["us"]["old"] * (r if rec["row"] == rows["won"]
                                                           else 0.99)
            out.append(res)
        return out

    said = []
    restored = lc.restore(with_ratios((1.008, 1.03, 1.025)), data, old, 0.01, said.append)
    assert [shown.split(" new/old")[0] for _, shown, _ in restored] == [rows["won"]], said
    data = copy.deepcopy(fresh)
    assert lc.restore(with_ratios((1.005, 1.008, 1.02)), data, old, 0.01, said.append) == []
    assert data == fresh


def test_launch_compare_restore_by_the_step_into_a_split_bucket():
    """The old file's one G 16 row of 129–512 programs, since split in two: judged by the
    launches' own times (the new one faster) nothing comes back; judged inside
    sparse_decode_step (the new one slower) the old launch returns into the bucket that was
    timed, with that bucket's bounds, and the other half is left alone."""
    import copy

    lc = _launch_compare()
    with open(os.path.join(ROOT, "specs", "measured", "sm_90.json"), encoding="utf-8") as f:
        data = json.load(f)
    old = copy.deepcopy(data)
    rows = old["sparse_attn_decode"]
    half = [r for r in rows if r["group"] == 16 and r["kv_dtype"] == "bf16"
            and r["query_len"] == [2, None] and r["programs"][0] in (129, 257)]
    assert [r["programs"] for r in half] == [[129, 256], [257, 512]], half
    merged = half[0]
    merged["programs"] = [129, 512]
    merged["params"] = {**merged["params"], "num_warps": 8 if merged["params"]["num_warps"]
                        != 8 else 4}
    merged["measured"]["winner"]["us"] = {"decode G16 P256": {"GPU-old": 60.0}}
    merged["measured"]["runner_up"]["us"] = {"decode G16 P256": {"GPU-old": 61.0}}
    rows.remove(half[1])
    old["provenance"]["runs"]["GPU-old"] = {"machine": "GPU-old"}
    label = "attention 32/2 R32 32768 tokens Q4"  # 256 programs
    table, point = lc.bench_rows(False)[label]
    now = lc.row_for(data[table], point)
    launch = {"variant": now["variant"], **now["params"]}
    record = {"row": label, "old": {"variant": merged["variant"], **merged["params"]},
              "new": launch, "us": {"old": 60.0, "new": 59.0, "empty kernel": 3.0},
              "step_us": {"old": 130.0, "new": 133.0}}
    results = [{"env": {"machine": m}, "old": "old.json", "target": "sm_90",
                "rows": [copy.deepcopy(record)]} for m in "AB"]
    fresh = copy.deepcopy(data)
    said = []
    assert lc.restore(results, data, old, 0.01, said.append) == []
    assert data == fresh
    restored = lc.restore(results, data, old, 0.01, said.append, judge="step")
    assert [shown.split(" new/old")[0] for _, shown, _ in restored] == [label], said
    back = lc.row_for(data[table], point)
    assert back["programs"] == [129, 256] and back["params"] == merged["params"]
    assert back["measured"]["bucket"] == [129, 512]  # what it was measured for
    for other in ({"programs": 512}, {"query_len": 1}):  # the rest of the old row's range
        assert lc.row_for(data[table], {**point, **other}) == \
            lc.row_for(fresh[table], {**point, **other})
    # a result without the step's times is not judged by them
    for res in results:
        del res["rows"][0]["step_us"]
    said = []
    assert lc.restore(results, copy.deepcopy(fresh), old, 0.01, said.append, judge="step") == []
    assert any("not timed inside the step" in line for line in said)


def test_launch_compare_restore_from_a_file_without_query_lengths():
    """An old file from before decode rows were by query length (kspec-measured-target/4: its
    rows hold every Q) serves the bench's rows; its launch of a Q 4 row comes back into the
    current Q ≥ 2 row only, the Q 1 row of the same programs left as it is."""
    import copy

    lc = _launch_compare()
    with open(os.path.join(ROOT, "specs", "measured", "sm_90.json"), encoding="utf-8") as f:
        data = json.load(f)
    old = copy.deepcopy(data)
    old["sparse_attn_decode"] = [{k: v for k, v in r.items() if k != "query_len"}
                                 for r in old["sparse_attn_decode"] if r["query_len"] == [1, 1]]
    label = "attention 32/2 R8 8192 tokens Q4"  # 64 programs
    table, point = lc.bench_rows(False)[label]
    was = lc.row_for(old[table], point)
    assert was is not None and "query_len" not in was
    was["params"] = {**was["params"], "splits": 2 if was["params"]["splits"] != 2 else 4}
    was["measured"]["winner"]["us"] = {"decode G16 P64": {"GPU-old": 20.0}}
    old["provenance"]["runs"]["GPU-old"] = {"machine": "GPU-old"}
    now = lc.row_for(data[table], point)
    assert now["query_len"] == [2, None]
    record = {"row": label, "old": {"variant": was["variant"], **was["params"]},
              "new": {"variant": now["variant"], **now["params"]},
              "us": {"old": 20.0, "new": 22.0, "empty kernel": 3.0}}
    results = [{"env": {"machine": m}, "old": "old.json", "target": "sm_90",
                "rows": [copy.deepcopy(record)]} for m in "AB"]
    fresh = copy.deepcopy(data)
    restored = lc.restore(results, data, old, 0.01, lambda *a: None)
    assert [shown.split(" new/old")[0] for _, shown, _ in restored] == [label]
    back = lc.row_for(data[table], point)
    assert back["params"] == was["params"] and back["query_len"] == [2, None]
    assert back["programs"] == now["programs"] and "bucket" not in back["measured"]
    assert back["measured"]["query_len"] == [1, 1]  # what its measurements were taken at
    assert lc.row_for(data[table], {**point, "query_len": 1}) == \
        lc.row_for(fresh[table], {**point, "query_len": 1})


def test_launch_compare_restore_relabels_a_run_described_under_another_label():
    """The old file's run is described in the current file under another label: the restored
    row cites that label, and no second description is added; a clashing label gets #n."""
    import copy

    lc, data, old, results, rows = _restore_case()
    same = copy.deepcopy(data)
    same["provenance"]["runs"]["GPU-old#7"] = {"machine": "GPU-old"}
    (_, _, runs), = lc.restore(results, same, old, 0.01, lambda *a: None)
    assert runs == ["GPU-old#7"] and "GPU-old" not in same["provenance"]["runs"]
    table, point = lc.bench_rows(False)[rows["won"]]
    assert lc.row_for(same[table], point)["measured"]["winner"]["us"] == \
        {"M1 bf16": {"GPU-old#7": 5.0}}
    clash = copy.deepcopy(data)
    clash["provenance"]["runs"]["GPU-old"] = {"machine": "another"}
    (_, _, runs), = lc.restore(results, clash, old, 0.01, lambda *a: None)
    assert runs == ["GPU-old#2"] and clash["provenance"]["runs"]["GPU-old#2"] == \
        {"machine": "GPU-old"}


def test_launch_compare_restore_writes_a_data_file_that_loads(tmp_path):
    """--restore --write on a copy: the file loads through the registry's loader, its tune
    names the section and the runs it put back, and runs no row cites any more are gone."""
    from codegen import measured

    lc, data, old, results, rows = _restore_case()
    (tmp_path / "old.json").write_text(json.dumps(old))
    target = tmp_path / "sm_90.json"
    measured.write(str(target), data)
    paths = []
    for i, res in enumerate(results):
        res = {**res, "old": str(tmp_path / "old.json"), "old_digest": lc.file_digest(old)}
        paths.append(tmp_path / f"lc{i}.json")
        paths[-1].write_text(json.dumps(res))
    run = _run([os.path.join("tools", "launch_compare.py"), "--restore", *map(str, paths),
                "--data", str(target), "--write"], timeout=120)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    written = measured.load_file(str(target))
    tune = written.provenance["tunes"][-1]
    assert tune["sections"] == ["router"] and tune["runs"] == ["GPU-old"] and tune["rows"] == 1
    cited = set()
    for rows_ in written.tables.values():
        for row in rows_:
            for part in ("winner", "runner_up"):
                for by_run in (row.measured.get(part) or {}).get("us", {}).values():
                    cited |= set(by_run)
    assert set(written.provenance["runs"]) <= cited | {r for t in written.provenance["tunes"]
                                                       for r in t["runs"]}
    # a result file of another old file is refused
    bad = json.loads(paths[0].read_text())
    bad["old_digest"] = "0" * 16
    paths[0].write_text(json.dumps(bad))
    run = _run([os.path.join("tools", "launch_compare.py"), "--restore", *map(str, paths),
                "--data", str(target)], timeout=120)
    assert run.returncode != 0 and "is not the file the results timed" in run.stderr


def test_profile_kernels_reads_attention_rows(monkeypatch):
    """`profile_kernels.py --attn` takes bench_attn's rows as HQ:HKV:R:CONTEXT:Q and
    `--attn-launch` a launch as KEY=VALUE pairs, each refusing anything else by name; `--decode none` leaves the decode kernels out."""
    monkeypatch.syspath_prepend(os.path.join(ROOT, "tools"))
    import profile_kernels

    assert profile_kernels.parse_attn_rows("8:1:32:32768:1,32:2:32:32768:4") == [
        (8, 1, 32, 32768, 1), (32, 2, 32, 32768, 4)]
    assert profile_kernels.parse_attn_rows(None) == []
    assert profile_kernels.parse_scenarios("none") == []
    for bad in ("8:1:32:32768", "8:1:x:32768:1"):
        with pytest.raises(SystemExit, match="--attn"):
            profile_kernels.parse_attn_rows(bad)
    assert profile_kernels.parse_launch(None) is None
    assert profile_kernels.parse_launch("splits=8, tma=False,num_stages=3") == {
        "splits": 8, "tma": False, "num_stages": 3}
    for bad in ("splits", "splits=x", "=8", "splits=8,", "tma=false"):
        with pytest.raises(SystemExit, match="--attn-launch"):
            profile_kernels.parse_launch(bad)
    # a launch the entry would refuse is refused before anything runs
    with pytest.raises(SystemExit, match="^--attn-launch: launch: missing key 'num_warps'"):
        profile_kernels.main(["--no-router", "--decode", "none", "--attn", "16:1:1:1024:1",
                              "--attn-launch", "splits=2,num_stages=3"])


def test_profile_kernels_runs_attention_rows_at_the_given_launch(monkeypatch, capsys):
    """`profile_attention` runs each row at the table's launch and then at ``--attn-launch``'s
    (not the table's again), through the entry that takes a launch (interpreter, tiny row)."""
    monkeypatch.syspath_prepend(os.path.join(ROOT, "tools"))
    import profile_kernels
    import torch

    import generated
    from generated import sparse_attention

    seen = []
    real = sparse_attention.sparse_attn_with_launch
    monkeypatch.setattr(sparse_attention, "sparse_attn_with_launch",
                        lambda launch, *a, **k: (seen.append(launch), real(launch, *a, **k))[1])
    launch = profile_kernels.parse_launch("splits=2,num_warps=4,num_stages=1,tma=False")
    profile_kernels.profile_attention(torch, generated, [(16, 1, 1, 1024, 1)], launch,
                                      device="cpu")
    assert seen == [launch, launch]
    assert "attention 16/1 R1 1k Q1 at {'splits': 2" in capsys.readouterr().out


def test_sm90_code_compiles_another_revision_or_a_variant_of_the_attention(monkeypatch,
                                                                           tmp_path):
    """`sm90_code.py attention|tiled --source FILE --variant NAME`: while it compiles,
    `generated.sparse_attn` is that file's module with attn_ablation's variant applied, and
    the generated module again afterwards."""
    monkeypatch.syspath_prepend(os.path.join(ROOT, "tools"))
    import inspect

    import generated
    import sm90_code

    base = generated.sparse_attn
    old = tmp_path / "old.py"
    old.write_text(inspect.getsource(base).replace("_BLOCK - 1", "(_BLOCK - 1)"))
    with sm90_code.sparse_attn_module(str(old), "below_page_last"):
        src = inspect.getsource(generated.sparse_attn)
        assert generated.sparse_attn is not base
        assert "(_BLOCK - 1)" in src and "tl.where(offs_t + first < 0, last" in src
    assert generated.sparse_attn is base and sys.modules["generated.sparse_attn"] is base
    with sm90_code.sparse_attn_module():
        assert generated.sparse_attn is base


def test_sm90_code_counts_one_pass_through_the_loop_with_the_products(monkeypatch):
    """`sm90_code.py`'s main-loop count: of the loops (a label and a later branch back to it)
    the one holding the matrix products, each instruction once per pass; none without one."""
    monkeypatch.syspath_prepend(os.path.join(ROOT, "tools"))
    import sm90_code

    def sass(*lines):
        return "\n".join(line if line.startswith(".L") else
                         f"        /*{16 * i:04x}*/                   {line} ;"
                         for i, line in enumerate(lines))

    code = sass("MOV R1, R2", ".L_x_0:", "IADD3 R1, R1, 0x1", "@P0 BRA `(.L_x_0)",
                ".L_x_1:", "LDSM.16.M88.4 R4, [R2]", "HMMA.16816.F32.BF16 R8, R4, R6, R8",
                "HMMA.16816.F32.BF16 R12, R4, R6, R12", "@!P1 BRA `(.L_x_2)",
                "BAR.SYNC.DEFER_BLOCKING 0x0", ".L_x_2:", "@P0 BRA `(.L_x_1)", "EXIT",
                ".L_x_3:", "BRA `(.L_x_3)")
    assert sm90_code.loop_ops(code) == {"LDSM.16.M88.4": 1, "HMMA.16816.F32.BF16": 2,
                                        "BRA": 2, "BAR.SYNC.DEFER_BLOCKING": 1}
    assert sm90_code.loop_ops(sass("MOV R1, R2", ".L_x_0:", "@P0 BRA `(.L_x_0)")) == {}
    text = sm90_code.summary("k", {"registers": 1, "spill_stores": 0, "spill_loads": 0,
                                   "ops": {}, "loop_ops": {"HMMA.16816.F32.BF16": 2,
                                                           "HMMA.1688.F32": 1, "BRA": 1}})
    assert text.endswith("main loop: 4 instructions per pass: HMMA 3, BRA 1")


def test_sm90_code_tables_screens_the_tables_launches(monkeypatch):
    """`sm90_code.py tables`: the distinct attention launches of a target's dispatch tables
    (the one a lookup gives among them), each compiled for sm_90 with its registers, spills
    and main-loop pass, beside another revision's."""
    monkeypatch.syspath_prepend(os.path.join(ROOT, "tools"))
    import sm90_code
    from generated import dispatch

    launches = sm90_code.table_launches("sm_90")
    assert len(launches) == len(set(launches)) > 0
    table = dispatch.TABLES["sparse_attn_decode"]
    row = table.lookup(*table.point(hardware="sm_90", q_dtype="bf16", kv_dtype="bf16",
                                    scales="none", group=16, head_dim=128, query_len=1,
                                    programs=32))
    assert ("decode", "bf16", "bf16", "none", 16, tuple(sorted(row.params.items()))) in launches
    assert all(scales == "none" for _, _, cache, scales, _, _ in launches
               if not cache.startswith("fp8"))
    run = _run([os.path.join("tools", "sm90_code.py"), "tables", "--mode", "decode", "--q",
                "bf16", "--cache", "bf16", "--limit", "1", "--jobs", "1", "--against",
                os.path.join("generated", "sparse_attn.py")])
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("decode q bf16 cache bf16 scales none G ")
    assert "main loop" in lines[0] and "against:" in lines[0] and "<<" not in lines[0]


def test_sm90_code_shared_compiles_each_launch_at_its_largest_inputs(monkeypatch):
    """`sm90_code.py shared`: every attention launch of the tables at its row's largest group
    and head_dim, each input kind it serves, compiled for sm_90 with the shared memory that
    launch asks for, those past sm_90's named."""
    monkeypatch.syspath_prepend(os.path.join(ROOT, "tools"))
    import sm90_code
    from generated import dispatch

    launches = sm90_code.largest_launches("sm_90")
    assert len(launches) == len(set(launches)) > 0
    assert {(g, d) for _, _, _, _, g, d, _ in launches} >= {(32, 256), (16, 128)}
    table = dispatch.TABLES["sparse_attn_decode"]
    row = table.lookup(*table.point(hardware="sm_90", q_dtype="fp32", kv_dtype="fp8e5m2",
                                    scales="per_token", group=32, head_dim=256, query_len=4,
                                    programs=8))
    assert ("decode", "fp32", "fp8e4m3", "per_token", 32, 256,
            tuple(sorted(row.params.items()))) in launches
    run = _run([os.path.join("tools", "sm90_code.py"), "shared", "--mode", "decode", "--limit",
                "1", "--jobs", "1"])
    assert run.returncode == 0, run.stderr[-3000:]
    last = run.stdout.strip().splitlines()[-1]
    assert last.startswith("1 launches compiled, ") and "the largest asks for" in last, last


def test_attn_ablation_nvidia_only_variants_compile_and_the_timeline_is_read_back():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "ablation_sm90.py")],
                         env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    facts = json.loads(run.stdout.strip().splitlines()[-1])
    merge, timeline = facts["ptx"]["cluster_merge"], facts["ptx"]["timeline"]
    assert merge["barrier.cluster"] and merge["mapa.shared::cluster"] and \
        merge["ld.shared::cluster"] and not merge["%globaltimer"]
    assert timeline["%globaltimer"] >= 4 and timeline["%smid"] and \
        not timeline["barrier.cluster"]
    assert facts["ptx"]["bulk_prefetch"]["cp.async.bulk.prefetch.L2"] >= 2 and \
        not merge["cp.async.bulk.prefetch.L2"]
    # an e4m3 K tile widened by integer ops has no pair conversion left, V's pairs keep
    # theirs (and their permutes); K read as pairs converts by the pair too
    k_bits, k_pairs = (facts["ptx"][n]["cvt.rn.f16x2.e4m3x2"] for n in ("k_bits_asm", "k_pairs"))
    assert 0 < k_bits < k_pairs and facts["ptx"]["k_bits_asm"]["prmt.b32"] > 0
    # the same pairs through a descriptor: K by bulk copies, converted as k_pairs converts
    pairs_tma = facts["ptx"]["k_pairs_tma"]
    assert pairs_tma["cvt.rn.f16x2.e4m3x2"] == k_pairs and pairs_tma["cp.async.bulk.tensor"] \
        and not facts["ptx"]["k_pairs"]["cp.async.bulk.tensor"]
    # the D-split attention: one cluster barrier per key step (arrive and wait) and one at
    # the end, its scores summed over the cluster's four programs, its loads pipelined
    dsplit, alone = facts["ptx"]["dsplit"], facts["ptx"]["dsplit_no_exchange"]
    assert dsplit["barrier.cluster"] == 4 and dsplit["ld.shared::cluster"] >= 4 and \
        dsplit["cp.async.cg"] and not alone["barrier.cluster"] and alone["cp.async.cg"]
    # µs from the first start; the last program to end and its phases
    assert facts["timeline"] == {
        "programs": 3, "sms": 2, "programs_per_sm": [1, 2], "start_median_max": [0.5, 1.0],
        "list_median_max": [1.0, 1.2], "steps_median_max": [3.0, 3.8],
        "tail_median_max": [1.0, 2.5], "end_max": 8.0,
        "last": {"start": 0.5, "listed": 1.7, "looped": 5.5, "end": 8.0, "sm": 7}}


def test_bench_attn_fp16_takes_q_and_cache_to_fp16():
    """`bench_attn.py --kv fp16`: q and cache in fp16 (one 16-bit type: the inputs a bf16 q's
    rows serve), no scales; the bf16 case itself is untouched."""
    import argparse

    import torch
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    try:
        import bench_attn
    finally:
        sys.path.remove(os.path.join(ROOT, "tools"))
    assert bench_attn.kv_option("fp16") == ("fp16", "none")
    with pytest.raises(argparse.ArgumentTypeError):
        bench_attn.kv_option("fp16:scalar")
    case = bench_attn.make_case((16, 1, 2, 1024, 1), "cpu", 64, 4)
    got = bench_attn.with_kv(case, ("fp16", "none"))
    assert got["q"].dtype == got["kv"].dtype == torch.float16
    assert case["q"].dtype == case["kv"].dtype == torch.bfloat16
    assert "k_scale" not in got
    assert torch.equal(got["q"].float(), case["q"].half().float())


def test_bench_attn_prefill_times_the_bf16_table_beside_other_inputs(tmp_path):
    """`--kv fp8e4m3:per_token --only prefill`: the prefill rows time the same row over a bf16
    cache beside the table's launch, each checked against its own float64 reference."""
    run = _run([os.path.join("tools", "bench_attn.py"), "--smoke", "--reps", "2", "--only",
                "prefill", "--kv", "fp8e4m3:per_token", "--out", str(tmp_path)])
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads((tmp_path / "bench_attn.json").read_text())
    assert report["env"]["kv"] == ["fp8e4m3", "per_token"] and not report["rows"]
    assert report["prefill"] and all(
        r[name]["check_ok"] and r[name]["us"] > 0 for r in report["prefill"]
        for name in ("table", "bf16 table"))
    assert "bf16 table" in run.stdout
