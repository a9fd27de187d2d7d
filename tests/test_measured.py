"""Measured targets as data (specs/measured/<target>.json, codegen/measured.py): the one writer's
stable format, errors naming file:line, table, target and bucket, rules located at their rows,
`codegen explain` showing the measured row, and the target naming shared with the runtime."""
from __future__ import annotations

import inspect
import json
import os
import re
import shutil

import pytest

from codegen import cli, measured, registry, targets
from codegen.model import SpecError
from specs.index_decode import MEASURED_SCORE

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SM90 = os.path.join(ROOT, "specs", "measured", "sm_90.json")
BF16 = dict(MEASURED_SCORE)  # the inputs sm_90's scorer rows were measured for


@pytest.fixture(scope="module")
def text():
    with open(SM90, encoding="utf-8") as f:
        return f.read()


def _line_of(text: str, needle: str) -> int:
    return text[:text.index(needle)].count("\n") + 1


# Facts of the checked-in file the error cases below are built from (it changes with every
# tune; the cases must not): the first scorer row's first run label, and a split-K router row.
with open(SM90, encoding="utf-8") as _f:
    _TEXT = _f.read()
FIRST_RUN = re.search(r'"us": \{"R1 Q1 mb64": \{"([^"]+)"', _TEXT).group(1)
SPLITK = re.search(r'"shape": \[(\d+), (\d+)\], "x_dtype": "(\w+)", "num_tokens": \[(\d+), '
                   r'(\d+)\], "kernel": "splitk", "params": \{"block_k": (\d+), [^}]*'
                   r'"split_k": (\d+)', _TEXT)
_K, _N, _X, _LO, _HI, _BK, _ = SPLITK.groups()
SPLITK_MESSAGE = (f"(router_gemm row sm_90: shape {_K}x{_N}, x_dtype {_X}, num_tokens "
                  f"{_LO}..{_HI}): spec "
                  f"'RouterGemmShape router_gemm_k{_K}_n{_N}', field 'launch.sm_90.split_k': "
                  f"bucket {_LO}..{_HI}, kernel='splitk': block_k·split_k = {_BK}·7 = "
                  f"{7 * int(_BK)} does not divide hidden_size {_K}")


def test_the_writer_reproduces_the_file(text):
    """specs/measured/sm_90.json is exactly what the one writer produces from its content, and
    every table row sits on a line of its own."""
    assert measured.dumps(measured.read(SM90)) == text
    target = measured.loads(text, SM90)
    lines = text.splitlines()
    for table, rows in target.tables.items():
        # every table holds rows, but the attention ones until that section is tuned
        assert rows or table.startswith("sparse_attn"), table
        for row in rows:
            assert lines[row.loc.line - 1].lstrip().startswith("{\"")
            assert row.loc.row.startswith(f"{table} row sm_90: ")
    assert target.hardware.capability == (9, 0)


def test_measured_rows_name_described_runs(text):
    """Every measured row keeps the µs of its winner (and runner-up) per representative, under
    run labels described in provenance; default rows carry none (e.g. the 64-request, 128k,
    Q1 scorer row, measured at R64 Q1 mb1024)."""
    target = measured.loads(text, SM90)
    for table, rows in target.tables.items():
        for r in rows:
            if r.source == "default":
                assert not r.measured, r.loc
                continue
            for part in ("winner", "runner_up"):
                for by_run in r.measured.get(part, {}).get("us", {}).values():
                    assert set(by_run) <= set(target.provenance["runs"]), r.loc
    row = next(r for r in target.rows("index_score")
               if r.when == {**BF16, "max_q": (1, 1), "max_block": (257, 65534),
                             "num_reqs": (33, 64)})
    assert row.source == "measured" and "R64 Q1 mb1024" in row.measured["winner"]["us"]


BF16_TEXT = json.dumps(BF16)[1:-1]  # as the one writer spells them
BF16_LABEL = ", ".join(f"{axis} {value}" for axis, value in BF16.items())
FIRST_SCORE = '{' + BF16_TEXT + ', "max_q": [1, 1], "max_block": [0, 64], "num_reqs": [1, 2]'
SECOND_SCORE = '{' + BF16_TEXT + ', "max_q": [1, 1], "max_block": [0, 64], "num_reqs": [3, 4]'
FIRST_LABEL = f"(index_score row sm_90: {BF16_LABEL}, max_q 1, max_block 0..64, num_reqs 1..2)"
SECOND_LABEL = f"(index_score row sm_90: {BF16_LABEL}, max_q 1, max_block 0..64, num_reqs 3..4)"


@pytest.mark.parametrize("old, new, at, label, field, rule", [
    (FIRST_SCORE + ",", FIRST_SCORE + ', "colour": 1,', FIRST_SCORE, FIRST_LABEL, "colour",
     "unknown key"),
    ('"num_reqs": [3, 4]', '"num_reqs": [4, 4]', SECOND_SCORE.replace("[3, 4]", "[4, 4]"),
     f"(index_score row sm_90: {BF16_LABEL}, max_q 1, max_block 0..64, num_reqs 4)", "num_reqs",
     "gap: num_reqs 3..3"),
    ('"num_reqs": [3, 4]', '"num_reqs": [2, 4]', SECOND_SCORE.replace("[3, 4]", "[2, 4]"),
     f"(index_score row sm_90: {BF16_LABEL}, max_q 1, max_block 0..64, num_reqs 2..4)",
     "num_reqs",
     "overlaps the row at line"),
    (FIRST_SCORE + ', "variant": "index_score_split", "params": {"high_batch": false, '
                   '"kv_chunks": 64',
     FIRST_SCORE + ', "variant": "index_score_split", "params": {"high_batch": false, '
                   '"kv_chunks": 64.5', FIRST_SCORE, FIRST_LABEL, "params.kv_chunks",
     "must be int, bool or null, got 64.5"),
    ('"us": {"R1 Q1 mb64": {"' + FIRST_RUN + '"',
     '"us": {"R1 Q1 mb64": {"mystery-run"', FIRST_SCORE, FIRST_LABEL,
     "measured.winner.us.R1 Q1 mb64", "run 'mystery-run' is not described in provenance.runs"),
    ('"num_reqs": [257, null], "variant": "index_score_split", "params": {"high_batch": false, '
     '"kv_chunks": 1, "num_stages": 3, "num_warps": 4, "static_chunks": false}, "source": '
     '"default"',
     '"num_reqs": [257, null], "variant": "index_score_split", "params": {"high_batch": false, '
     '"kv_chunks": 1, "num_stages": 3, "num_warps": 4, "static_chunks": false}, "source": '
     '"guessed"', '"num_reqs": [257, null]', f"(index_score row sm_90: {BF16_LABEL}, "
     "max_q 1, max_block 0..64, num_reqs ≥ 257)", "source", "must be one of measured, default"),
    (FIRST_SCORE, FIRST_SCORE.replace('"head_dim": 128', '"head_dim": "128"'),
     FIRST_SCORE.replace('"head_dim": 128', '"head_dim": "128"'), "(index_score row 1)", "head_dim", "must be a positive int, got '128'"),
    ('"name": "sm_90"', '"name": "sm_91"', '"hardware"', "(hardware sm_90)", "hardware.name",
     "the file of target 'sm_91' must be named sm_91.json"),
    ('"vendor": "nvidia"', '"vendor": "nvidia", "vendor": "amd"', '"hardware"', "", "vendor",
     "key given twice"),
    ('"shape": [4096, 8], "x_dtype": "bf16", "num_tokens": [1, 1]',
     '"shape": [4096, 8], "x_dtype": "bf16", "num_tokens": [1, 1],',
     '"shape": [4096, 8], "x_dtype": "bf16", "num_tokens": [1, 1]', "", None,
     "not valid JSON"),
], ids=["unknown-key", "gap", "overlap", "float-param", "unknown-run", "source", "inputs-type",
        "file-name", "duplicate-key", "bad-json"])
def test_errors_name_file_line_row_and_rule(text, old, new, at, label, field, rule):
    assert old in text
    bad = text.replace(old, new, 1)
    with pytest.raises(SpecError) as info:
        measured.loads(bad, SM90)
    message = str(info.value)
    line = _line_of(bad, at)
    assert message.startswith(f"specs/measured/sm_90.json:{line}"), message
    assert label in message and "spec 'measured target sm_90'" in message, message
    if field:
        assert f"field '{field}'" in message, message
    assert rule in message, message


@pytest.fixture
def spec_copy(tmp_path):
    dest = tmp_path / "specs"
    shutil.copytree(os.path.join(ROOT, "specs"), dest,
                    ignore=shutil.ignore_patterns("__pycache__"))
    return dest


@pytest.mark.parametrize("old, new, at, expected", [
    # a launch parameter the variant's Param refuses (found when the policy is flattened)
    (FIRST_SCORE + ', "variant": "index_score_split", "params": {"high_batch": false, '
                   '"kv_chunks": 64',
     FIRST_SCORE + ', "variant": "index_score_split", "params": {"high_batch": false, '
                   '"kv_chunks": 48', FIRST_SCORE,
     FIRST_LABEL + ": spec 'Rule', field 'params.kv_chunks': must be a power of two, got 48"),
    # a router tile rule of the family (split-K: block_k·split_k must divide hidden_size)
    (SPLITK.group(0), SPLITK.group(0)[:-len(SPLITK.group(7))] + "7",
     SPLITK.group(0).split(', "kernel"')[0],
     SPLITK_MESSAGE),
], ids=["param-range", "router-tile"])
def test_a_bad_value_in_a_row_is_reported_at_the_row(spec_copy, text, old, new, at, expected):
    """Rules built from a data file carry the row's location: the registry's own checks name
    file:line, the table, the hardware target and the bucket."""
    path = spec_copy / "measured" / "sm_90.json"
    assert old in text
    bad = text.replace(old, new, 1)
    path.write_text(bad)
    with pytest.raises(SpecError) as info:
        registry.load(str(spec_copy))
    message = str(info.value)
    assert re.search(rf"specs/measured/sm_90\.json:{_line_of(bad, at)} ", message), message
    assert expected in message, message


def test_score_input_axes_agree():
    """The decode inputs a scorer row is keyed by (codegen/measured.py) are the specs' measured
    shape, their domains, and axes of the index_score policy, all by the same names."""
    from specs import index_decode

    assert set(index_decode.MEASURED_SCORE) == set(index_decode.SCORE_INPUT_DOMAINS) == \
        set(measured.SCORE_INPUTS)
    axes = {a.name: a for a in registry.load().policies["index_score"].axes}
    for name, domain in index_decode.SCORE_INPUT_DOMAINS.items():
        assert tuple(axes[name].values) == tuple(domain), name


def test_inputs_outside_the_domain_are_reported_at_the_row(spec_copy, text):
    """Every scorer row renamed to a query dtype the policy does not know: the tiling holds,
    the policy refuses the value at the first row's line."""
    path = spec_copy / "measured" / "sm_90.json"
    bad = text.replace('"q_dtype": "bf16"', '"q_dtype": "bf17"')
    path.write_text(bad)
    with pytest.raises(SpecError) as info:
        registry.load(str(spec_copy))
    message = str(info.value)
    assert re.search(rf"specs/measured/sm_90\.json:{_line_of(bad, 'bf17')} ", message), message
    assert "field 'when.q_dtype': value 'bf17' is not in the axis domain" in message, message


@pytest.mark.parametrize("old, new, rule", [
    ('"num_reqs": [1, 2]', '"num_reqs": [2, 2]', "must start at num_reqs 1"),
    ('"num_reqs": [257, null]', '"num_reqs": [257, 1000]', "must be unbounded"),
], ids=["start", "end"])
def test_a_group_covers_every_request_count(text, old, new, rule):
    """A scorer group's rows start at one request and end unbounded (reported at the row)."""
    bad = text.replace(old, new, 1)
    with pytest.raises(SpecError) as info:
        measured.loads(bad, SM90)
    message = str(info.value)
    assert message.startswith(f"specs/measured/sm_90.json:{_line_of(bad, new)} "), message
    assert rule in message and "field 'num_reqs'" in message, message


def test_explain_and_dispatch_name_the_measured_row(capsys):
    assert cli.main(["explain", "router_gemm", "hardware=sm_90", "shape=6144x128",
                     "x_dtype=bf16", "num_tokens=12", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    # the row serving 12 tokens (its bucket changes with the tunes)
    row = next(r for r in measured.load_file(SM90).rows("router_gemm")
               if r.when["shape"] == (6144, 128) and r.when["x_dtype"] == "bf16"
               and r.when["num_tokens"][0] <= 12 <= r.when["num_tokens"][1])
    lo, hi = row.when["num_tokens"]
    # (cited by table and bucket, not by line: a re-tune's runs added above it move no citation)
    assert info["where"] == (f"specs/measured/sm_90.json (router_gemm row sm_90: shape "
                             f"6144x128, x_dtype bf16, num_tokens {lo}..{hi})")
    assert info["measured_row"]["source"] == "measured"
    assert info["measured_row"]["measured"]["winner"]["us"] == row.measured["winner"]["us"]
    with open(os.path.join(ROOT, "generated", "DISPATCH.md"), encoding="utf-8") as f:
        assert info["where"] in f.read()


def test_runtime_names_devices_with_the_shared_function():
    """generated/_runtime.py holds codegen/targets.py's device_target verbatim, and it names
    declared targets by capability / gcn arch and new ones as the tuner would."""
    import generated._runtime as rt

    assert inspect.getsource(rt.device_target) == inspect.getsource(targets.device_target)
    hw = rt.HARDWARE
    assert rt.device_target(hw, "nvidia", capability=(9, 0)) == ("sm_90", True)
    assert rt.device_target(hw, "nvidia", capability=(10, 0)) == ("sm_100", False)
    assert rt.device_target(hw, "amd", gcn_arch="gfx950:sramecc+:xnack-") == ("gfx950", True)
    assert rt.device_target(hw, "amd", gcn_arch="gfx942:sramecc+") == ("gfx942", False)


@pytest.mark.parametrize("rows_for", ["bf16", "fp8e4m3"])
def test_fp8_inputs_take_the_rows_of_the_input_they_are_measured_as(spec_copy, rows_for):
    """specs/sparse_attn.py MEASURED_AS, on a target whose file holds attention rows for one
    cache dtype without scales (``rows_for``: its bf16 rows, or those renamed fp8 e4m3): every
    fp8 cache and scale mode whose chain reaches that input takes its rows in both tables, and
    so does an fp16 q over those caches (over an fp16 cache: bf16's); inputs it does not serve
    (a bf16 cache once the rows are fp8's, scaled bf16 caches, an fp32 q) take the declared
    rules."""
    from codegen.policy import lookup

    data = measured.read(SM90)
    for table in ("sparse_attn_decode", "sparse_attn_prefill"):
        data[table] = [dict(r, kv_dtype=rows_for) for r in data[table]
                       if r["kv_dtype"] == "bf16"]
    (spec_copy / "measured" / "sm_90.json").write_text(measured.dumps(data))
    changed, before = registry.load(str(spec_copy)), registry.load()

    def row(reg, table, **values):
        policy = reg.policies[table]
        values = {"hardware": "sm_90", "q_dtype": "bf16", "scales": "none", "group": 16,
                  "head_dim": 128, "query_len": 4, **values}
        rule = lookup(policy, reg.tables[table], tuple(values[a.name] for a in policy.axes))
        return rule.variant, dict(rule.params)

    served = [("fp8e4m3", "none"), ("fp8e4m3", "per_token"), ("fp8e5m2", "none"),
              ("fp8e5m2", "scalar")]
    for table in ("sparse_attn_decode", "sparse_attn_prefill"):
        for programs in (1, 16, 32, 100, 600, 5000):
            bf16_row = row(before, table, kv_dtype="bf16", programs=programs)
            declared = row(before, table, kv_dtype="bf16", head_dim=64, programs=programs)
            for kv, mode in served:
                assert row(changed, table, kv_dtype=kv, scales=mode,
                           programs=programs) == bf16_row, (table, programs, kv, mode)
            assert row(changed, table, kv_dtype="bf16", programs=programs) == (
                bf16_row if rows_for == "bf16" else declared)
            assert row(changed, table, kv_dtype="bf16", scales="scalar",
                       programs=programs) == declared
            # an fp16 q: a bf16 q's rows over the same cache, over an fp16 cache bf16's
            for kv, mode in served:
                assert row(changed, table, kv_dtype=kv, scales=mode, q_dtype="fp16",
                           programs=programs) == bf16_row, (table, programs, kv, mode)
            assert row(changed, table, kv_dtype="fp16", q_dtype="fp16", programs=programs) \
                == (bf16_row if rows_for == "bf16" else declared)
            assert row(changed, table, kv_dtype="fp8e4m3", q_dtype="fp32",
                       programs=programs) == row(before, table, kv_dtype="bf16", q_dtype="fp32",
                                                 head_dim=64, programs=programs)


# A mutation audit found these checks of a data file untested.
FIRST_US = re.search(r'"us": \{"R1 Q1 mb64": \{"[^"]+": [0-9.]+', _TEXT).group(0)
FIRST_ROUTER = re.search(r'\{"shape": \[\d+, \d+\], "x_dtype": "\w+", "num_tokens": \[1, 1\], '
                         r'[^\n]*"source": "measured"', _TEXT).group(0)
ROUTER_LABEL = re.search(r'"shape": \[(\d+), (\d+)\], "x_dtype": "(\w+)"', FIRST_ROUTER).groups()


@pytest.mark.parametrize("change, rule", [
    ("drop", "the last row of its inputs' rows must be unbounded ([1, null]; got 1)"),
    ("widen", "overlaps the row at line"),
])
def test_decode_query_lengths_tile_each_inputs_rows(change, rule):
    """One input's decode rows must cover every query length: without its Q ≥ 2 rows, or with
    those widened to overlap its Q 1 rows, the file fails to load at a row of that input (its
    groups still tile their programs each), naming query_len."""
    data = measured.read(SM90)
    g16 = dict(q_dtype="bf16", kv_dtype="bf16", scales="none", group=16, head_dim=128)
    mine = [r for r in data["sparse_attn_decode"] if all(r[k] == v for k, v in g16.items())]
    assert {json.dumps(r["query_len"]) for r in mine} == {"[1, 1]", "[2, null]"}
    for row in [r for r in mine if r["query_len"] == [2, None]]:
        if change == "drop":
            data["sparse_attn_decode"].remove(row)
        else:
            row["query_len"] = [1, None]
    bad = measured.dumps(data)
    with pytest.raises(SpecError) as info:
        measured.loads(bad, SM90)
    message = str(info.value)
    assert "field 'query_len'" in message and rule in message, message
    assert "sparse_attn_decode row sm_90: q_dtype bf16, kv_dtype bf16, scales none, " \
        "group 16, head_dim 128, query_len" in message, message
    line = int(message.split(":", 2)[1].split()[0])
    assert '"group": 16' in bad.splitlines()[line - 1], message


@pytest.mark.parametrize("old, new, at, label, field, rule", [
    ('  "format": "kspec-measured-target/5",\n',
     '  "format": "kspec-measured-target/5",\n  "colour": 1,\n', '"colour"', "", "colour",
     "unknown key (known: format, hardware, provenance, router_gemm"),
    ('"format": "kspec-measured-target/5"', '"format": "kspec-measured-target/4"', '"format"',
     "", "format", "must be 'kspec-measured-target/5', got 'kspec-measured-target/4'"),
    ('"vendor": "nvidia"', '"vendor": "nvidia", "colour": 1', '"colour"', "(hardware sm_90)",
     "hardware.colour", "unknown key (known: name, vendor"),
    (FIRST_US, FIRST_US[:FIRST_US.rindex(" ") + 1] + "0", FIRST_SCORE, FIRST_LABEL,
     f"measured.winner.us.R1 Q1 mb64.{FIRST_RUN}", "must be a positive number of µs, got 0"),
    (FIRST_ROUTER, FIRST_ROUTER.replace('"source": "measured"', '"source": "default"'),
     FIRST_ROUTER.split(', "kernel"')[0],
     f"(router_gemm row sm_90: shape {ROUTER_LABEL[0]}x{ROUTER_LABEL[1]}, x_dtype "
     f"{ROUTER_LABEL[2]}, num_tokens 1)", "measured",
     "a default row carries no measurements"),
    ('"num_reqs": [1, 2]', '"num_reqs": [2, 1]', '"num_reqs": [2, 1]', "(index_score row 1)",
     "num_reqs", "empty range [2, 1]"),
    ('"num_reqs": [1, 2]', '"num_reqs": [1, Infinity]', '"num_reqs": [1, Infinity]', "", None,
     "not valid JSON: Infinity is not a number JSON allows"),
    (FIRST_SCORE, FIRST_SCORE.replace('"max_q": [1, 1], ', ''),
     FIRST_SCORE.replace('"max_q": [1, 1], ', ''), "(index_score row 1)", "max_q",
     "missing (each row gives q_dtype, cache_dtype, head_dim, num_heads, max_q"),
    ('"winner": {', '"winner": 7, "w": {', '"winner": 7', "", "measured.winner",
     "must be an object with 'us', got 7"),
    ('"winner": {', '"winner": false, "w": {', '"winner": false', "", "measured.winner",
     "must be an object with 'us', got False"),
    (FIRST_US, FIRST_US[:FIRST_US.rindex(" ") + 1] + "1e999", FIRST_SCORE, FIRST_LABEL,
     f"measured.winner.us.R1 Q1 mb64.{FIRST_RUN}", "must be a positive number of µs, got inf"),
    (FIRST_US, FIRST_US[:FIRST_US.rindex(" ") + 1] + "NaN", FIRST_SCORE, "", None,
     "not valid JSON: NaN is not a number JSON allows"),
    ('  "provenance": {\n', '  "provenance": {\n    "extra": 1,\n', '"extra"', "",
     "provenance.extra", "unknown key (known: runs, tunes)"),
    ('"sections": [\n', '"sections": [\n          "bogus",\n', '"sections"', "",
     "provenance.tunes.sections",
     "must list the sections tuned (of router, decode, prefill, attention)"),
    ('"runs": {\n', '"runs": {\n      "GPU-bogus": 5,\n', '"GPU-bogus"', "",
     "provenance.runs.GPU-bogus",
     "must be an object of the run's facts naming its 'machine', got 5"),
], ids=["unknown-top-key", "format", "unknown-hardware-key", "zero-us", "default-with-measured",
        "empty-range", "infinity", "missing-axis", "winner-not-an-object", "winner-false",
        "infinite-us", "nan", "unknown-provenance-key", "unknown-section", "run-not-an-object"])
def test_more_errors_name_file_line_and_rule(text, old, new, at, label, field, rule):
    assert text.count(old) >= 1, old
    bad = text.replace(old, new, 1)
    with pytest.raises(SpecError) as info:
        measured.loads(bad, SM90)
    message = str(info.value)
    line = _line_of(bad, at)  # (a JSON error: the line of the value)
    assert re.match(rf"specs/measured/sm_90\.json:{line}[: ]", message), message
    assert label in message and "spec 'measured target sm_90'" in message, message
    if field:
        assert f"field '{field}'" in message, message
    assert rule in message, message


@pytest.mark.parametrize("old, new, field, rule", [
    ('"capability": [9, 0]', '"capability": [9, "x"]', "capability",
     "must be (major, minor), two ints ≥ 0, got (9, 'x')"),
    ('"capability": [9, 0]', '"capability": [9]', "capability",
     "must be (major, minor), two ints ≥ 0, got (9,)"),
    ('"aliases": ["sm90"', '"aliases": ["SM90"', "aliases",
     "must be lower case, non-empty and unpadded, got 'SM90'"),
], ids=["capability-type", "capability-short", "alias-upper-case"])
def test_the_hardware_of_a_data_file_is_checked_as_a_spec(text, old, new, field, rule):
    """A capability that no device has (it would never match one) and an alias the runtime's
    lower-cased lookup could never find are refused at the file's hardware line."""
    bad = text.replace(old, new, 1)
    with pytest.raises(SpecError) as info:
        measured.loads(bad, SM90)
    assert str(info.value).startswith(
        f"specs/measured/sm_90.json:{_line_of(bad, new)} (hardware sm_90): spec 'Hardware "
        f"sm_90', field '{field}': {rule}"), str(info.value)


def test_a_measured_row_needs_its_measurements():
    data = measured.read(SM90)
    row = next(r for r in data["router_gemm"] if r["source"] == "measured"
               and r["shape"] == [int(ROUTER_LABEL[0]), int(ROUTER_LABEL[1])]
               and r["x_dtype"] == ROUTER_LABEL[2] and r["num_tokens"] == [1, 1])
    del row["measured"]
    bad = measured.dumps(data)
    with pytest.raises(SpecError) as info:
        measured.loads(bad, SM90)
    message = str(info.value)
    line = _line_of(bad, FIRST_ROUTER.split(', "kernel"')[0])
    assert message.startswith(f"specs/measured/sm_90.json:{line} (router_gemm row sm_90"), \
        message
    assert "field 'measured': a measured row needs its measurements" in message, message


@pytest.mark.parametrize("runs", [lambda old: list(old) + ["ghost-run"], lambda old: 5],
                         ids=["undescribed-run", "not-a-list"])
def test_a_tune_naming_runs_it_does_not_describe_is_refused(runs):
    data = measured.read(SM90)
    data["provenance"]["tunes"][0]["runs"] = runs(data["provenance"]["tunes"][0]["runs"])
    bad = measured.dumps(data)
    with pytest.raises(SpecError) as info:
        measured.loads(bad, SM90)
    message = str(info.value)
    tunes = _line_of(bad, '"tunes": [')
    runs_key = bad[:bad.index('"runs": ', bad.index('"tunes": ['))].count("\n") + 1
    assert tunes < runs_key and re.match(rf"specs/measured/sm_90\.json:{runs_key}: ", message), \
        message
    assert "field 'provenance.tunes.runs': must list the runs the tune chose from, each " \
        "described in provenance.runs" in message, message


def test_a_row_that_is_not_an_object_is_refused_at_its_table():
    data = measured.read(SM90)
    data["index_topk"][0] = [0, 64]
    bad = json.dumps(data, indent=1)
    with pytest.raises(SpecError) as info:
        measured.loads(bad, SM90)
    line = _line_of(bad, '"index_topk": [')
    assert str(info.value).startswith(
        f"specs/measured/sm_90.json:{line}: spec 'measured "
        f"target sm_90', field 'index_topk': row 1 must be an object, got [0, 64]"), \
        str(info.value)


def test_a_tune_without_runs_is_refused():
    data = measured.read(SM90)
    del data["provenance"]["tunes"][0]["runs"]
    with pytest.raises(SpecError, match="field 'provenance.tunes.runs': must list the runs"):
        measured.loads(measured.dumps(data), SM90)


def test_a_data_file_that_is_not_utf8_is_refused_at_its_line(tmp_path):
    raw = open(SM90, "rb").read().replace(b'"description": "', b'"description": "\xff', 1)
    path = tmp_path / "sm_90.json"
    path.write_bytes(raw)
    line = raw[:raw.index(b"\xff")].count(b"\n") + 1
    with pytest.raises(SpecError, match=rf"sm_90\.json:{line}: spec 'measured target sm_90': "
                                        r"not valid UTF-8"):
        measured.load_file(str(path))


def _load_bad_copy(spec_copy, text, old, new, count=1):
    assert old in text, old
    bad = text.replace(old, new, count)
    (spec_copy / "measured" / "sm_90.json").write_text(bad)
    with pytest.raises(SpecError) as info:
        registry.load(str(spec_copy))
    return bad, str(info.value)


def test_a_row_naming_a_variant_its_table_does_not_pick_is_refused_at_the_row(spec_copy, text):
    """Each table picks among its policy's variants: a decode attention row naming the
    step's host variant, or a fused scorer row with the split scorer's parameters, is refused
    at the row (the fused row before its topk fallback reads them)."""
    row = re.search(r'\{"q_dtype": "bf16", "kv_dtype": "bf16"[^\n]*"query_len"[^\n]*?"variant": '
                    r'"sparse_attn_split"', text).group(0)
    bad, message = _load_bad_copy(spec_copy, text, row,
                                  row.replace("sparse_attn_split", "sparse_attn"))
    assert message.startswith(f"specs/measured/sm_90.json:{_line_of(bad, row[:60])} "), message
    assert "field 'variant': policy 'sparse_attn_decode' picks one of sparse_attn_split, " \
        "sparse_attn_tiled, got 'sparse_attn'" in message, message
    bad, message = _load_bad_copy(spec_copy, text, FIRST_SCORE + ', "variant": "index_score_split"',
                                  FIRST_SCORE + ', "variant": "index_decode_fused"')
    assert message.startswith(f"specs/measured/sm_90.json:{_line_of(bad, FIRST_SCORE)} "), message
    assert "variant 'index_decode_fused' has no launch parameter 'high_batch'" in message, message


def test_router_rows_of_an_undeclared_shape_are_refused(spec_copy):
    """(a whole group of rows for it: rows nothing would read)"""
    data = measured.read(SM90)
    shape = [int(ROUTER_LABEL[0]), int(ROUTER_LABEL[1])]
    data["router_gemm"] += [dict(r, shape=[1024, 8]) for r in data["router_gemm"]
                            if r["shape"] == shape and r["x_dtype"] == ROUTER_LABEL[2]]
    bad = measured.dumps(data)
    (spec_copy / "measured" / "sm_90.json").write_text(bad)
    with pytest.raises(SpecError) as info:
        registry.load(str(spec_copy))
    message = str(info.value)
    assert "field 'shape': [1024, 8] is not a weight shape specs/router_gemm.py declares" \
        in message, message
    assert message.startswith(f"specs/measured/sm_90.json:{_line_of(bad, '[1024, 8]')} "), \
        message



def test_a_gap_names_the_rows_next_to_it(spec_copy, text):
    """A gap the rows leave along an axis the loader does not tile (max_block of a selector
    row) is reported by the policy's proof, naming the data file's rows around it."""
    old = '{"max_block": [0, 64], "rows_x_heads"'
    bad, message = _load_bad_copy(spec_copy, text, old, old.replace("[0, 64]", "[1, 64]"),
                                  count=-1)
    assert "gap: no rule covers hardware=sm_90, topk=16, max_block=0, rows_x_heads=1" in message
    assert re.search(r"rules next to it: specs/measured/sm_90\.json:\d+ \(index_topk row sm_90: "
                     r"max_block 1\.\.64, rows_x_heads 1\.\.2\) \(all but max_block\)", message), \
        message


def test_an_alias_repeating_a_target_name_is_the_aliasing_targets_error(spec_copy, text):
    bad, message = _load_bad_copy(spec_copy, text, '"aliases": ["', '"aliases": ["generic", "')
    line = _line_of(bad, '"hardware"')
    assert message.startswith(f"specs/measured/sm_90.json:{line}"), message
    assert "spec 'Hardware sm_90', field 'aliases': alias 'generic' already names 'generic'" \
        in message, message


def test_a_retune_changes_only_its_rows_in_the_generated_dispatch(spec_copy):
    """Generated rules cite a data-file row by its table and bucket, not its line: a re-tune
    that describes a new run (lines added near the top of the file) and changes one row's
    launch changes only the launches of that row's rules in generated/dispatch.py and
    DISPATCH.md, besides the inputs hash (before 2026-12-05 every later rule's citation
    moved: a 6-row re-tune was a 2000-line diff)."""
    import difflib

    from codegen import render

    data = measured.read(SM90)
    runs = data["provenance"]["runs"]
    label, facts = next(iter(runs.items()))
    runs["GPU-00000000"] = dict(facts, machine="GPU-00000000")
    row = next(r for r in data["sparse_attn_decode"] if r["kv_dtype"] == "fp8e4m3"
               and r["scales"] == "none" and r["group"] == 16 and r["programs"] == [65, 128])
    row["params"] = dict(row["params"], num_stages=2)
    row["measured"] = json.loads(json.dumps(row["measured"]).replace(label, "GPU-00000000"))
    (spec_copy / "measured" / "sm_90.json").write_text(measured.dumps(data))
    before, after = (render.render_all(registry.load(path))
                     for path in (os.path.join(ROOT, "specs"), str(spec_copy)))
    for name in ("dispatch.py", "DISPATCH.md"):
        changed = [line for line in difflib.unified_diff(
            before[name].splitlines(), after[name].splitlines(), lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]
        # the hash, and the launch of each rule the row gives (fp8 caches it serves: MEASURED_AS)
        assert sum("inputs-sha256" in line for line in changed) == 2, (name, changed)
        gone = [line[1:] for line in changed if line[0] == "-" and "inputs-sha256" not in line]
        came = [line[1:] for line in changed if line[0] == "+" and "inputs-sha256" not in line]
        assert gone and [line.replace("'num_stages': 2", "'num_stages': 3").replace(
            "num_stages=2", "num_stages=3") for line in came] == gone, (name, changed)
