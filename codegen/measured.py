"""Measured hardware targets as data: ``specs/measured/<target>.json``.

One file per target whose tables a tuner measured (today sm_90): the target's hardware facts,
every row of its measured tables and their provenance. This module is the only reader and
writer of the format; ``tools/tune`` writes through it and ``specs/`` read through it. Nothing
edits Python source.

Layout (one writer, :func:`dumps`: fixed key order, one table row per line, so a re-tune
reviews as a row-by-row diff)::

    {
      "format": "kspec-measured-target/5",
      "hardware": {"name": "sm_90", "vendor": "nvidia", "capability": [9, 0], ...},
      "provenance": {"runs": {LABEL: {date, device, driver, torch, triton, command,
                                      state, machine, ...}},
                     "tunes": [{date, command, sections, runs, rule, ...}, ...]},
      "router_gemm": [
        {"shape": [6144, 128], "x_dtype": "bf16", "num_tokens": [2, 4], "kernel": "per_expert",
         "params": {...},
         "source": "measured", "measured": {"winner": {"us": {REP: {LABEL: µs}}}, ...}},
        ...],
      "index_score": [{"q_dtype": "bf16", "cache_dtype": "bf16", "head_dim": 128,
                       "num_heads": 1, "max_q": [1, 1], "max_block": [0, 64],
                       "num_reqs": [1, 2], "variant": "index_score_split", "params": {...},
                       "source": ...}, ...],
      "index_topk": [{"max_block": [0, 64], "rows_x_heads": [1, 2], "variant": ..., ...}, ...],
      "index_prefill_score": [{q_dtype, cache_dtype, head_dim, num_heads, "max_block": [0, 64],
                               "num_tokens": [1, 2048], "variant": ..., ...}, ...],
      "index_prefill_topk": [{"max_block": ..., "rows_x_heads": ..., ...}, ...],
      "index_prefill": [{..the scorer's keys.., "variant": "index_prefill_stream" or
                         "index_prefill" (the two kernels), ...}, ...],
      "sparse_attn_decode": [{"q_dtype": "bf16", "kv_dtype": "bf16", "scales": "none",
                              "group": 16, "head_dim": 128, "query_len": [1, 1],
                              "programs": [1, 32], "variant": "sparse_attn_split", ...}, ...],
      "sparse_attn_prefill": [{..the same keys but query_len.., "variant":
                               "sparse_attn_split" or "sparse_attn_tiled", ...}, ...]
    }

Ranges are inclusive ``[lo, hi]`` (``hi`` null: unbounded). The scorer rows of one set of
decode inputs (q_dtype, cache_dtype, head_dim, num_heads) tile their buckets; the inputs a
target has no rows for take the spec's defaults. A row whose bucket was never
measured says so (``"source": "default"``, no ``measured``). ``measured.*.us`` maps each
representative (``"M8 fp32"``, ``"R64 Q1 mb1024"``) to its µs per run label; every label is
described in ``provenance.runs`` (one process on one machine in one state), and every tune
(one choice over several runs, for the router, decode, prefill and/or attention section) in
``provenance.tunes``. A row a later tune cut (a narrower bucket measured inside it) keeps the
bucket it was measured for in ``measured.bucket``; a decode row whose measurements were taken
at other query lengths than its own (Q ≥ 2 rows holding what was chosen at Q 1) names those in
``measured.query_len``.

Loading checks the structure and the rows' tiling and turns every row into a :class:`Row`
whose ``loc`` is ``file:line (table row target: bucket)``; specs build dispatch rules from the
rows with that location, so a bad value found later (a parameter out of range, an infeasible
tile) is reported at the row, naming its table, hardware target and bucket.
"""
from __future__ import annotations

import bisect
import json
import os
import re
import tempfile
from typing import Any

import attrs

from .model import Hardware, Location, SpecError, _relative
from .policy import Between

FORMAT = "kspec-measured-target/5"
SOURCES = ("measured", "default")


# What a value axis holds (a value rather than an inclusive range), and how it is checked.
VALUE_KINDS = {
    "pair": ("[int, int] (positive)",
             lambda v: isinstance(v, list) and len(v) == 2 and all(_is_int(x) and x > 0
                                                                   for x in v)),
    "name": ("a name (string)", lambda v: isinstance(v, str) and bool(v)),
    "count": ("a positive int", lambda v: _is_int(v) and v > 0),
}


@attrs.frozen
class Layout:
    """How one table's rows are keyed: ``axes`` in row order (the last one is the axis the
    rows of a group tile), the key naming the kernel/variant, and the value axes with their
    kind (VALUE_KINDS: a value such as the router weight shape or the query dtype rather than
    an inclusive range). Whether a value is in its policy axis' domain is checked by the
    policy, at the row's location. ``spans``: group range axes whose ranges, over the rows of
    one set of values, must tile [lo, unbounded) (axis → lo)."""

    axes: tuple
    choice: str
    values: dict = attrs.field(factory=dict)
    open_ended: bool = True  # a group's last row is unbounded (False: it ends at a cap)
    spans: dict = attrs.field(factory=dict)

    @property
    def group(self) -> tuple:
        return self.axes[:-1]

    @property
    def bucket(self) -> str:
        return self.axes[-1]


# index_score rows name the decode inputs they were measured for (a target can hold rows for
# several: bf16, an fp8 cache, fp32 queries and cache); index_topk scores are fp32 whatever the
# inputs, so its rows do not.
SCORE_INPUT_KINDS = {"q_dtype": "name", "cache_dtype": "name", "head_dim": "count",
                     "num_heads": "count"}
SCORE_INPUTS = tuple(SCORE_INPUT_KINDS)
ATTN_INPUT_KINDS = {"q_dtype": "name", "kv_dtype": "name", "scales": "name", "group": "count",
                    "head_dim": "count"}
ATTN_INPUTS = tuple(ATTN_INPUT_KINDS)
TABLES = {
    # keyed by the hidden states' dtype too (a bf16 x moves half the bytes of an fp32 one)
    "router_gemm": Layout(("shape", "x_dtype", "num_tokens"), "kernel",
                          values={"shape": "pair", "x_dtype": "name"},
                          open_ended=False),  # a shape's rows end at its token cap
    "index_score": Layout(SCORE_INPUTS + ("max_q", "max_block", "num_reqs"), "variant",
                          values=SCORE_INPUT_KINDS),
    "index_topk": Layout(("max_block", "rows_x_heads"), "variant"),
    # prefill (docs/KERNELS.md §7): the scorer's and the one-call rows are keyed like the decode
    # scorer's (by inputs), over context and token buckets; the selector's like the decode one's
    "index_prefill_score": Layout(SCORE_INPUTS + ("max_block", "num_tokens"), "variant",
                                  values=SCORE_INPUT_KINDS),
    "index_prefill_topk": Layout(("max_block", "rows_x_heads"), "variant"),
    "index_prefill": Layout(SCORE_INPUTS + ("max_block", "num_tokens"), "variant",
                            values=SCORE_INPUT_KINDS),
    # sparse attention (docs/KERNELS.md §15): keyed by its inputs, over (row · KV head) programs;
    # decode by its query length too (decode_query_len: each request's rows are as many)
    "sparse_attn_decode": Layout(ATTN_INPUTS + ("query_len", "programs"), "variant",
                                 values=ATTN_INPUT_KINDS, spans={"query_len": 1}),
    "sparse_attn_prefill": Layout(ATTN_INPUTS + ("programs",), "variant",
                                  values=ATTN_INPUT_KINDS),
}
TOP_KEYS = ("format", "hardware", "provenance") + tuple(TABLES)
# what a tune measures (tools/tune measure --sections), as its provenance names it
TUNE_SECTIONS = ("router", "decode", "prefill", "attention")
HARDWARE_KEYS = ("name", "vendor", "capability", "gcn_arch", "aliases", "description")


@attrs.frozen
class Row:
    """One row of a measured table, as loaded: the bucket (``when``: axis → (lo, hi) or, for a
    value axis, the value), the kernel/variant (``choice``), its launch parameters, where it
    comes from (``source``) and the measurements behind it."""

    table: str
    target: str
    when: dict
    choice: str
    params: dict
    source: str
    measured: dict
    loc: Location

    def conditions(self) -> dict:
        """``when`` as dispatch-rule conditions: ranges as Between (hi None: unbounded)."""
        out = {}
        for axis, value in self.when.items():
            out[axis] = value if axis in TABLES[self.table].values else Between(*value)
        return out

    def values(self) -> dict:
        """The row's value axes (e.g. the decode inputs it was measured for)."""
        return {a: self.when[a] for a in TABLES[self.table].values}


@attrs.frozen
class MeasuredTarget:
    path: str  # as locations show it (relative to the repository when inside it)
    hardware: Hardware
    provenance: dict
    tables: dict  # table -> tuple[Row] in file order

    @property
    def name(self) -> str:
        return self.hardware.name

    def rows(self, table: str) -> tuple:
        return self.tables[table]

    def router_rows(self, shape: tuple) -> tuple:
        """The router_gemm rows of one (hidden_size, num_experts) weight shape."""
        rows = tuple(r for r in self.tables["router_gemm"] if r.when["shape"] == tuple(shape))
        if not rows:
            raise SpecError(Location(self.path, 1), f"measured target {self.name}",
                            "router_gemm",
                            f"no rows for weight shape {tuple(shape)}: add them (e.g. the "
                            f"generic rows, with \"source\": \"default\"), then measure the "
                            f"router on a {self.name} device (README: How to add a router "
                            f"weight shape)")
        return rows


def is_measured(hardware: Hardware) -> bool:
    """Whether a Hardware spec comes from a data file (a measured target) rather than from
    hand-written specs (gfx950's upstream tables, generic)."""
    return hardware.loc is not None and str(hardware.loc.file).endswith(".json")


# ---------------------------------------------------------------------------------------------
# Reading


class _Obj(dict):
    """A JSON object that remembers the line of its opening brace and of each key."""

    line = 0
    key_lines: dict = {}


# Every object's opening brace and every key (a string followed by a colon), outside strings,
# in document order; a string that is not a key is matched too, to be skipped whole.
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"(?P<key>[ \t\n\r]*:)?|\{')


def _located(text: str) -> Any:
    """Parse JSON keeping line numbers of objects: the C parser builds the values (raising on
    text that is not JSON, or holds a constant JSON does not allow), then one walk in document
    order takes each object's and each key's line from the scan of the text's braces and
    keys."""
    newlines = [m.start() for m in re.finditer("\n", text)]
    # (is a brace, line) of every brace and key, in document order
    marks = [(m.group("key") is None, bisect.bisect_left(newlines, m.start()) + 1)
             for m in _TOKENS.finditer(text) if m.group("key") is not None or m.group(0) == "{"]
    at = 0

    def pairs_hook(pairs):
        obj = _Obj(pairs)
        obj.pairs = pairs  # in document order, repeated keys too (read by the walk, then gone)
        return obj

    def walk(value) -> None:
        nonlocal at
        if isinstance(value, list):
            for item in value:
                if isinstance(item, (list, _Obj)):
                    walk(item)
            return
        brace, value.line = marks[at]
        assert brace, "JSON scan out of step"
        at += 1
        value.key_lines = {}
        for key, item in value.__dict__.pop("pairs"):
            brace, key_line = marks[at]
            assert not brace, "JSON scan out of step"
            at += 1
            if key in value.key_lines:
                raise _Duplicate(key, key_line)
            value.key_lines[key] = key_line
            if isinstance(item, (list, _Obj)):
                walk(item)

    data = json.loads(text, object_pairs_hook=pairs_hook, parse_constant=_no_constants)
    if isinstance(data, (list, _Obj)):
        walk(data)
    return data


class _Duplicate(Exception):
    def __init__(self, key, line):
        self.key, self.line = key, line


# strings (skipped whole) and the constants JSON does not allow
_CONSTANTS = re.compile(r'"(?:[^"\\]|\\.)*"|(?P<c>-?Infinity|NaN)')


def _no_constants(name):
    raise ValueError(f"{name} is not a number JSON allows")


class _File:
    """Error reporting for one data file."""

    def __init__(self, path: str, target: str):
        self.path, self.target = path, target

    def fail(self, line: int, field: str | None, rule: str, row: str = "") -> None:
        raise SpecError(Location(self.path, line, row), f"measured target {self.target}", field,
                        rule)


# The last few texts parsed: a process that loads the registry again (the tuner, the tests:
# one call per spec directory, copies of one data file at other paths) parses an unchanged
# text once (~0.2 s for a 0.5 MB file). Nothing modifies a parsed file (the checks build new
# values from it); a text with a problem raises every time.
_PARSED: dict = {}
_PARSED_MAX = 8


def _parse(text: str, path: str) -> _Obj:
    data = _PARSED.get(text)
    if data is None:
        data = _parse_new(text, path)
        if len(_PARSED) >= _PARSED_MAX:
            del _PARSED[next(iter(_PARSED))]
        _PARSED[text] = data
    return data


def _parse_new(text: str, path: str) -> _Obj:
    shown = _relative(path)
    name = os.path.splitext(os.path.basename(path))[0]
    f = _File(shown, name)
    try:
        data = _located(text)
    except json.JSONDecodeError as e:
        f.fail(e.lineno, None, f"not valid JSON: {e.msg} (column {e.colno})")
    except ValueError as e:  # NaN or ±Infinity (json names no place): the first one outside
        # strings
        at = next((m.start("c") for m in _CONSTANTS.finditer(text) if m.group("c")), 0)
        f.fail(text.count("\n", 0, at) + 1, None, f"not valid JSON: {e}")
    except _Duplicate as e:
        f.fail(e.line, e.key, "key given twice")
    if not isinstance(data, _Obj):
        f.fail(1, None, "must be a JSON object")
    return data


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _fmt_range(lo, hi) -> str:
    return str(Between(lo, hi))


def _label(table: str, target: str, when: dict) -> str:
    parts = []
    for axis, value in when.items():
        if axis in TABLES[table].values:
            shown = "x".join(map(str, value)) if isinstance(value, tuple) else value
            parts.append(f"{axis} {shown}")
        else:
            parts.append(f"{axis} {_fmt_range(*value)}")
    return f"{table} row {target}: {', '.join(parts)}"


def _check_row(f: _File, table: str, index: int, row, runs: dict, table_line: int) -> Row:
    layout = TABLES[table]
    where = f"{table} row {index + 1}"
    if not isinstance(row, _Obj):
        f.fail(table_line, table, f"row {index + 1} must be an object, got {row!r}")
    when = {}
    for axis in layout.axes:
        if axis not in row:
            f.fail(row.line, axis, "missing (each row gives " + ", ".join(layout.axes) + ")",
                   where)
        value = row[axis]
        if axis in layout.values:
            what, ok = VALUE_KINDS[layout.values[axis]]
            if not ok(value):
                f.fail(row.line, axis, f"must be {what}, got {value!r}", where)
        else:
            if not (isinstance(value, list) and len(value) == 2 and _is_int(value[0])
                    and (value[1] is None or _is_int(value[1]))):
                f.fail(row.line, axis, f"must be an inclusive range [lo, hi] (ints; hi null: "
                                       f"unbounded), got {value!r}", where)
            if value[1] is not None and value[1] < value[0]:
                f.fail(row.line, axis, f"empty range {value!r}", where)
        when[axis] = tuple(value) if isinstance(value, list) else value
    label = _label(table, f.target, when)
    loc_fail = lambda field, rule: f.fail(row.line, field, rule, label)  # noqa: E731
    known = set(layout.axes) | {layout.choice, "params", "source", "measured"}
    for key in row:
        if key not in known:
            loc_fail(key, f"unknown key (known: {', '.join(sorted(known))})")
    choice = row.get(layout.choice)
    if not isinstance(choice, str) or not choice:
        loc_fail(layout.choice, f"must name the {layout.choice}, got {choice!r}")
    params = row.get("params")
    if not isinstance(params, dict):
        loc_fail("params", f"must be an object of launch parameters, got {params!r}")
    for key, value in params.items():
        if not (value is None or isinstance(value, bool) or _is_int(value)):
            loc_fail(f"params.{key}", f"must be int, bool or null, got {value!r}")
    source = row.get("source")
    if source not in SOURCES:
        loc_fail("source", f"must be one of {', '.join(SOURCES)}, got {source!r}")
    measured = row.get("measured")
    if source == "default" and measured is not None:
        loc_fail("measured", "a default row carries no measurements (source: measured?)")
    if source == "measured":
        if not isinstance(measured, dict):
            loc_fail("measured", "a measured row needs its measurements (an object)")
        for part in ("winner", "runner_up"):
            entry = measured.get(part, {})
            if entry is None and part == "runner_up":  # (a bucket of one candidate)
                entry = {}
            if not isinstance(entry, dict):
                loc_fail(f"measured.{part}", f"must be an object with 'us', got {entry!r}")
            times = entry.get("us", {})
            if not isinstance(times, dict):
                loc_fail(f"measured.{part}.us", "must map representatives to {run: µs}")
            for rep, by_run in times.items():
                if not isinstance(by_run, dict):
                    loc_fail(f"measured.{part}.us.{rep}", "must map run labels to µs")
                for run, us in by_run.items():
                    if run not in runs:
                        loc_fail(f"measured.{part}.us.{rep}",
                                 f"run {run!r} is not described in provenance.runs "
                                 f"(known: {', '.join(sorted(runs)) or 'none'})")
                    if isinstance(us, bool) or not isinstance(us, (int, float)) or \
                            not 0 < us < float("inf"):
                        loc_fail(f"measured.{part}.us.{rep}.{run}",
                                 f"must be a positive number of µs, got {us!r}")
    return Row(table=table, target=f.target, when=when, choice=choice, params=dict(params),
               source=source, measured=dict(measured or {}),
               loc=Location(f.path, row.line, label))


def _check_tiling(f: _File, rows: list) -> None:
    """Within a group (the same values of every axis but the last), the rows' last-axis ranges
    start at 1 and follow each other without gap or overlap, the last one unbounded where the
    table's layout is open-ended; the ranges of a span axis (Layout.spans) over the rows of one
    set of values tile [lo, unbounded) likewise."""
    groups: dict = {}
    spans: dict = {}
    for row in rows:
        layout = TABLES[row.table]
        groups.setdefault(tuple(row.when[a] for a in layout.group), []).append(row)
        for axis in layout.spans:
            by_range = spans.setdefault((axis, tuple(row.when[a] for a in layout.values)), {})
            by_range.setdefault(row.when[axis], row)  # one row of each range, to report at
    for members in groups.values():
        layout = TABLES[members[0].table]
        _check_span(f, layout.bucket, members, 1, layout.open_ended, "its group")
    for (axis, _), by_range in spans.items():
        members = list(by_range.values())
        lo = TABLES[members[0].table].spans[axis]
        _check_span(f, axis, members, lo, True, "its inputs' rows")


def _check_span(f: _File, axis: str, members: list, lo: int, open_ended: bool,
                whose: str) -> None:
    """``members``' ranges of ``axis`` start at ``lo`` and follow each other without gap or
    overlap, the last one unbounded where ``open_ended``."""
    ordered = sorted(members, key=lambda r: r.when[axis][0])
    first, last = ordered[0], ordered[-1]
    if first.when[axis][0] != lo:
        f.fail(first.loc.line, axis, f"the first row of {whose} must start at {axis} {lo} "
                                     f"(got {_fmt_range(*first.when[axis])})", first.loc.row)
    if open_ended and last.when[axis][1] is not None:
        f.fail(last.loc.line, axis, f"the last row of {whose} must be unbounded "
                                    f"([{last.when[axis][0]}, null]; got "
                                    f"{_fmt_range(*last.when[axis])})", last.loc.row)
    for a, b in zip(ordered, ordered[1:]):
        (alo, ahi), (blo, bhi) = a.when[axis], b.when[axis]
        if ahi is None or ahi >= blo:
            f.fail(b.loc.line, axis, f"{axis} {_fmt_range(blo, bhi)} overlaps the row at "
                                     f"line {a.loc.line} ({axis} {_fmt_range(alo, ahi)})",
                   b.loc.row)
        if ahi + 1 != blo:
            f.fail(b.loc.line, axis, f"gap: {axis} {ahi + 1}..{blo - 1} between this row and "
                                     f"the row at line {a.loc.line} is covered by no row",
                   b.loc.row)


def _check_provenance(f: _File, prov, line: int) -> None:
    """provenance: {"runs": label → the run's facts (an object naming its machine),
    "tunes": [each tune's command, date, sections (of TUNE_SECTIONS) and the runs it chose
    from]}."""
    if not (isinstance(prov, _Obj) and isinstance(prov.get("runs"), _Obj)
            and isinstance(prov.get("tunes"), list)):
        f.fail(line, "provenance",
               "must be an object with 'runs' (label → run facts) and 'tunes' (a list)")
    for key in prov:
        if key not in ("runs", "tunes"):
            f.fail(prov.key_lines[key], f"provenance.{key}", "unknown key (known: runs, tunes)")
    runs = prov["runs"]
    for label, facts in runs.items():
        if not (isinstance(facts, _Obj) and isinstance(facts.get("machine"), str)):
            f.fail(getattr(facts, "line", runs.key_lines[label]), f"provenance.runs.{label}",
                   f"must be an object of the run's facts naming its 'machine', got {facts!r}")
    for tune in prov["tunes"]:
        where = getattr(tune, "line", prov.key_lines["tunes"])
        if not isinstance(tune, _Obj):
            f.fail(where, "provenance.tunes", f"each tune must be an object, got {tune!r}")
        sections, chose = tune.get("sections"), tune.get("runs")
        if not (isinstance(sections, list) and sections
                and all(isinstance(x, str) and x in TUNE_SECTIONS for x in sections)):
            f.fail(tune.key_lines.get("sections", where), "provenance.tunes.sections",
                   f"must list the sections tuned (of {', '.join(TUNE_SECTIONS)}), got "
                   f"{sections!r}")
        if not (isinstance(chose, list) and chose
                and all(isinstance(r, str) and r in runs for r in chose)):
            f.fail(tune.key_lines.get("runs", where), "provenance.tunes.runs",
                   f"must list the runs the tune chose from, each described in "
                   f"provenance.runs, got {chose!r}")


def loads(text: str, path: str) -> MeasuredTarget:
    """A data file's text → MeasuredTarget (SpecError naming file:line on any problem)."""
    data = _parse(text, path)
    f = _File(_relative(path), os.path.splitext(os.path.basename(path))[0])
    for key in data:
        if key not in TOP_KEYS:
            f.fail(data.key_lines[key], key, f"unknown key (known: {', '.join(TOP_KEYS)})")
    for key in TOP_KEYS:
        if key not in data:
            f.fail(1, key, "missing")
    if data["format"] != FORMAT:
        f.fail(data.key_lines["format"], "format", f"must be {FORMAT!r}, got {data['format']!r}")
    hw = data["hardware"]
    if not isinstance(hw, _Obj):
        f.fail(data.key_lines["hardware"], "hardware", "must be an object")
    hw_loc = Location(f.path, hw.line, f"hardware {f.target}")
    for key in hw:
        if key not in HARDWARE_KEYS:
            f.fail(hw.key_lines[key], f"hardware.{key}",
                   f"unknown key (known: {', '.join(HARDWARE_KEYS)})", hw_loc.row)
    fields = {k: (tuple(v) if isinstance(v, list) else v) for k, v in hw.items()}
    try:  # missing fields and bad types: SpecError at hw_loc from the Hardware spec itself
        hardware = Hardware(**fields, loc=hw_loc)
    except SpecError:
        raise
    except (TypeError, ValueError) as e:  # attrs' own validators (e.g. vendor)
        raise SpecError(hw_loc, f"measured target {f.target}", "hardware", str(e)) from None
    if hardware.name != f.target:
        f.fail(hw.line, "hardware.name", f"the file of target {hardware.name!r} must be named "
                                         f"{hardware.name}.json", hw_loc.row)
    prov = data["provenance"]
    _check_provenance(f, prov, data.key_lines["provenance"])
    tables = {}
    for table in TABLES:
        rows = data[table]
        if not isinstance(rows, list):
            f.fail(data.key_lines[table], table, "must be a list of rows")
        checked = [_check_row(f, table, i, row, prov["runs"], data.key_lines[table])
                   for i, row in enumerate(rows)]
        _check_tiling(f, checked)
        tables[table] = tuple(checked)
    return MeasuredTarget(path=f.path, hardware=hardware, provenance=_plain(prov), tables=tables)


def _text(path: str) -> str:
    """A data file's text; SpecError at the line of the first byte that is not UTF-8."""
    with open(path, "rb") as fh:
        raw = fh.read()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpecError(Location(_relative(path), raw.count(b"\n", 0, e.start) + 1),
                        f"measured target {os.path.splitext(os.path.basename(path))[0]}",
                        None, f"not valid UTF-8 (byte {e.start})") from None


def load_file(path: str) -> MeasuredTarget:
    return loads(_text(path), path)


def load_dir(path: str) -> dict:
    """Every ``<target>.json`` of a directory, by target name (sorted); none when missing."""
    if not os.path.isdir(path):
        return {}
    out = {}
    for name in sorted(os.listdir(path)):
        if name.endswith(".json"):
            target = load_file(os.path.join(path, name))
            out[target.name] = target
    return out


def read(path: str) -> dict:
    """A data file as plain data (checked like :func:`load_file`), for a writer to edit."""
    text = _text(path)
    loads(text, path)
    return _plain(json.loads(text))


def _plain(value):
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def row_at(loc: Location) -> dict | None:
    """The raw row a location names (a data-file row), or None (a Python spec line)."""
    if not loc.row or not str(loc.file).endswith(".json"):
        return None
    path = loc.file if os.path.isabs(loc.file) else os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), loc.file)
    try:
        with open(path, encoding="utf-8") as fh:
            data = _located(fh.read())
    except (OSError, ValueError, _Duplicate):
        return None
    for table in TABLES:
        for row in data.get(table, ()):
            if isinstance(row, _Obj) and row.line == loc.line:
                return _plain(row)
    return None


# ---------------------------------------------------------------------------------------------
# Writing


# Inside a row, these keys come first in this order (the decision before its evidence); any
# other key follows in natural order ("M2 bf16" before "M16 bf16").
KEY_ORDER = ("rule", "noise", "winner", "runner_up", "kernel", "variant", "params", "worst",
             "us")


def _natural(k: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", k))


def _ordered(value):
    if isinstance(value, dict):
        first = [k for k in KEY_ORDER if k in value]
        rest = sorted((k for k in value if k not in KEY_ORDER), key=_natural)
        return {k: _ordered(value[k]) for k in first + rest}
    if isinstance(value, (list, tuple)):
        return [_ordered(v) for v in value]
    return value


def _compact(value) -> str:
    return json.dumps(_ordered(value), ensure_ascii=False, separators=(", ", ": "))


def _row_text(table: str, row: dict) -> str:
    layout = TABLES[table]
    keys = list(layout.axes) + [layout.choice, "params", "source", "measured"]
    unknown = sorted(set(row) - set(keys))
    if unknown:
        raise ValueError(f"{table} row has unknown keys {unknown}")
    return "{" + ", ".join(f"{json.dumps(k)}: {_compact(row[k])}" for k in keys
                           if k in row) + "}"


def sort_rows(table: str, rows: list) -> list:
    """The canonical row order: by each axis' lower end (value axes by value), in axis order."""
    layout = TABLES[table]

    def key(row):
        return tuple((tuple(row[a]) if isinstance(row[a], list) else row[a])
                     if a in layout.values else
                     (row[a][0], float("inf") if row[a][1] is None else row[a][1])
                     for a in layout.axes)

    return sorted(rows, key=key)


def dumps(data: dict) -> str:
    """The one formatting of a data file: fixed key order, hardware on one line, provenance
    indented with sorted keys, one row per line in canonical order."""
    unknown = sorted(set(data) - set(TOP_KEYS))
    if unknown:
        raise ValueError(f"unknown top-level keys {unknown}")
    hw = {k: data["hardware"][k] for k in HARDWARE_KEYS if data["hardware"].get(k) is not None}
    hw_line = "{" + ", ".join(f"{json.dumps(k)}: {_compact(v)}" for k, v in hw.items()) + "}"
    prov = json.dumps(data["provenance"], ensure_ascii=False, sort_keys=True, indent=2)
    lines = ["{", f'  "format": {json.dumps(FORMAT)},', f'  "hardware": {hw_line},',
             '  "provenance": ' + prov.replace("\n", "\n  ") + ","]
    for i, table in enumerate(TABLES):
        rows = sort_rows(table, data[table])
        end = "," if i < len(TABLES) - 1 else ""
        if not rows:
            lines.append(f'  "{table}": []{end}')
            continue
        lines.append(f'  "{table}": [')
        lines += [f"    {_row_text(table, r)}{',' if j < len(rows) - 1 else ''}"
                  for j, r in enumerate(rows)]
        lines.append(f"  ]{end}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def write(path: str, data: dict) -> MeasuredTarget:
    """Format ``data``, check it loads (as ``path``), then replace ``path`` atomically."""
    text = dumps(data)
    target = loads(text, path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".tmp-")
    with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
        fh.write(text)
    os.replace(tmp, path)
    return target
