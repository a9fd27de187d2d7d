"""Write chosen rows into a target's data file (specs/measured/<target>.json), through
codegen/measured.py, after the registry has loaded the result.

The chosen rows replace exactly the buckets they cover; every other row stays as it is (a
router-only tune keeps the decode rows and their provenance, and the other way round; a tune
of the 128k contexts keeps the 8k and 32k rows; a tune of fp32 inputs keeps the bf16 rows). A
target measured for the first time, and decode inputs measured for the first time, start from
default rows (what the generic target launches) for every bucket of the tuner's layout.
Before anything is written, a copy of specs/ with the new file is loaded through
codegen.registry (the generator's own checks and dispatch proof) and every chosen row is looked
up back at its bucket's corners. Targets whose tables are written by hand (gfx950) are refused.
"""
from __future__ import annotations

import os
import shutil
import tempfile

from codegen import measured, registry
from codegen.measured import SCORE_INPUTS, TABLES
from codegen.model import Hardware
from codegen.policy import lookup

from .choose import CHOICE_KEY, RULE, SECTION, table_of
from .space import ATTN_TABLES, Space, as_json
from .target import hardware_dict

HERE = os.path.dirname(os.path.abspath(__file__))
SPECS = os.path.join(os.path.dirname(os.path.dirname(HERE)), "specs")


def data_file(target: str, specs_dir: str = SPECS) -> str:
    return os.path.join(specs_dir, "measured", f"{target}.json")


def refuse_hand_written(reg, name: str) -> None:
    """SystemExit when ``name`` is a target whose tables are written by hand in specs/."""
    hw = reg.hardware.get(name)
    if hw is not None and not measured.is_measured(hw):
        raise SystemExit(f"tune: {name!r} is a hardware target whose tables are written by hand "
                         f"in specs/ ({hw.loc}); it is not measured: nothing to tune")


def _default_rows(space, table, group: dict, axis: str, lo: int, hi, hardware="generic"):
    """Rows over [lo, hi] of ``axis`` in one group: ``hardware``'s rows there, clipped."""
    policy = space.reg.policies[table]
    pos = [a.name for a in policy.axes].index(axis)
    rows, v = [], lo
    while v is not None and (hi is None or v <= hi):
        bucket = {**group, axis: (v, v)}
        rule = lookup(policy, space.reg.tables[table], space.point(table, bucket, hardware))
        end = rule.conds[pos].hi if rule.conds[pos] is not None else None
        end = hi if end is None else (end if hi is None else min(end, hi))
        rows.append({**as_json(group), axis: [v, end],
                     CHOICE_KEY[table]: space.choice_of(table, rule.variant),
                     "params": dict(rule.params), "source": "default"})
        v = None if end is None else end + 1
    return rows


def skeleton(space, hardware: Hardware) -> dict:
    """A new target's data: its hardware facts and default rows over the tuner's layout."""
    data = {"format": measured.FORMAT, "hardware": hardware_dict(hardware),
            "provenance": {"runs": {}, "tunes": []},
            **{table: [] for table in TABLES}}
    for shape in space.shapes:
        for x_dtype in space.router_x_dtypes:
            data["router_gemm"] += _default_rows(space, "router_gemm",
                                                 {"shape": shape, "x_dtype": x_dtype},
                                                 "num_tokens", 1, space.token_cap(shape))
    add_input_rows(data, space)
    for mbb in space.topk_mb_buckets:
        data["index_topk"] += _default_rows(space, "index_topk", {"max_block": mbb},
                                            "rows_x_heads", 1, None)
    add_prefill_rows(data, space)
    add_attention_rows(data, space, {t: list(space.attn_inputs)
                                     for t in ATTN_TABLES.values()})
    return data


def add_input_rows(data: dict, space) -> None:
    """Default scorer rows for the space's decode inputs, when the data has none for them yet:
    what the target launches for them now (the default split grid of a measured target, the
    generic rows for a new one), so only the chosen rows, which replace the buckets they
    cover, change a launch."""
    if any(all(row[a] == space.inputs[a] for a in SCORE_INPUTS) for row in data["index_score"]):
        return
    now = space.target.name if space.measured_here else "generic"
    for qb in space.q_buckets:
        for mbb in space.score_mb_buckets:
            data["index_score"] += _default_rows(
                space, "index_score", {**space.inputs, "max_q": qb, "max_block": mbb},
                "num_reqs", 1, None, hardware=now)


def add_prefill_rows(data: dict, space) -> None:
    """Rows for the prefill tables over the tuner's buckets, for the space's prefill inputs the
    data has none for yet: what the target launches there now (its declared rows; the generic
    rows for a new target), so only chosen rows change a launch."""
    now = space.target.name if space.measured_here else "generic"
    for table in ("index_prefill_score", "index_prefill"):
        for inputs in space.prefill_inputs:
            if any(all(row[a] == inputs[a] for a in SCORE_INPUTS) for row in data[table]):
                continue
            for mbb in space.prefill_mb_buckets:
                data[table] += _default_rows(space, table, {**inputs, "max_block": mbb},
                                             "num_tokens", 1, None, hardware=now)
    if not data["index_prefill_topk"]:
        for mbb in space.prefill_mb_buckets:
            data["index_prefill_topk"] += _default_rows(
                space, "index_prefill_topk", {"max_block": mbb}, "rows_x_heads", 1, None,
                hardware=now)


def add_attention_rows(data: dict, space, measured: dict) -> None:
    """Rows over the programs axis (decode: for each query-length bucket) for the inputs
    ``measured`` (table → the inputs measured there) that the data has none for yet in that
    table: what the target launches there now
    (for an fp8 scale mode tuned for the first time, the rows it took until then:
    `specs.sparse_attn.MEASURED_AS`), so only the chosen rows change a launch. No other
    input gets rows: one without rows of its own keeps following MEASURED_AS, and so the rows
    it follows as they are re-chosen."""
    now = space.target.name if space.measured_here else "generic"
    for table, inputs_measured in measured.items():
        # decode rows are by query length too: a group of rows for each of its buckets
        query_lens = space.attn_q_buckets if table == ATTN_TABLES["decode"] else (None,)
        for inputs in inputs_measured:
            if any(all(row[a] == inputs[a] for a in inputs) for row in data[table]):
                continue
            for qb in query_lens:
                group = dict(inputs) if qb is None else {**inputs, "query_len": qb}
                data[table] += _default_rows(space, table, group, "programs", 1, None,
                                             hardware=now)


def _clipped(row: dict, axis: str, lo: int, hi) -> dict:
    """``row`` cut to [lo, hi] of ``axis``; a measured row keeps the bucket its measurements
    were taken for (``measured.bucket``: its representatives may lie outside the cut)."""
    out = {**row, axis: [lo, hi]}
    if row.get("measured") is not None and "bucket" not in row["measured"]:
        out["measured"] = {**row["measured"], "bucket": list(row[axis])}
    return out


def apply(data: dict, table: str, new: dict) -> None:
    """Put ``new`` into its table: rows of its group overlapping its range are clipped away."""
    layout = TABLES[table]
    axis, group = layout.bucket, as_json({a: new[a] for a in layout.group})
    lo, hi = new[axis]
    kept = []
    for row in data[table]:
        a, b = row[axis]
        if as_json({g: row[g] for g in layout.group}) != group or \
                (b is not None and b < lo) or (hi is not None and a > hi):
            kept.append(row)
            continue
        if a < lo:
            kept.append(_clipped(row, axis, a, lo - 1))
        if hi is not None and (b is None or b > hi):
            kept.append(_clipped(row, axis, hi + 1, b))
    data[table] = kept + [new]


def _referenced(data) -> set:
    labels = set()
    for table in TABLES:
        for row in data[table]:
            for part in ("winner", "runner_up"):
                for by_run in ((row.get("measured") or {}).get(part) or {}).get("us", {}).values():
                    labels |= set(by_run)
    return labels


def update(data: dict, rows: list, runs: list, labels: list, command: str, date: str,
           noise_floor: float) -> dict:
    """``data`` with the chosen rows (each tagged with its table by choose), the runs they come
    from and this tune in provenance; a tune none of whose runs a row cites any more is dropped,
    and a run neither a row nor a remaining tune cites."""
    by_table = {t: [{k: v for k, v in r.items() if k != "table"} for r in rows
                    if table_of(r) == t] for t in TABLES}
    for table, chosen in by_table.items():
        for row in chosen:
            apply(data, table, row)
    prov = data["provenance"]
    used = _referenced(by_table)
    for run, label in zip(runs, labels):
        if label in used:
            prov["runs"][label] = run["run"]
    if rows:
        tune = {"date": date, "command": command, "rule": RULE,
                "sections": sorted({SECTION[t] for t, c in by_table.items() if c}),
                "runs": [lb for lb in labels if lb in used], "noise_floor": noise_floor,
                "rows": len(rows)}
        # choosing from the same runs again replaces that tune's entry
        prov["tunes"] = [t for t in prov["tunes"] if (t["runs"], t["sections"]) !=
                         (tune["runs"], tune["sections"])] + [tune]
    return prune(data)


def prune(data: dict) -> dict:
    """``data`` without the tunes none of whose runs a row cites any more, and without the
    runs neither a row nor a remaining tune cites."""
    prov = data["provenance"]
    alive = _referenced(data)
    prov["tunes"] = [t for t in prov["tunes"] if set(t["runs"]) & alive]
    cited = alive.union(*(t["runs"] for t in prov["tunes"]))
    prov["runs"] = {k: v for k, v in prov["runs"].items() if k in cited}
    return data


def verify(data: dict, rows: list, specs_dir: str = SPECS):
    """Load a copy of specs/ holding ``data`` through the registry; check every chosen row is
    what the tables give at its bucket's corners. Returns the registry (SpecError / Assertion
    on failure)."""
    name = data["hardware"]["name"]
    tmp = tempfile.mkdtemp(prefix="tune_verify_")
    try:
        copy = os.path.join(tmp, "specs")
        shutil.copytree(specs_dir, copy, ignore=shutil.ignore_patterns("__pycache__"))
        measured.write(data_file(name, copy), data)
        reg = registry.load(copy)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    space = Space(reg, reg.hardware[name], sms=132)
    for row in rows:
        table = table_of(row)
        corners = []
        values = TABLES[table].values
        for axis in TABLES[table].axes:
            v = row[axis]
            corners.append([tuple(v) if isinstance(v, list) else v] if axis in values else
                           sorted({v[0], v[0] + 1000 if v[1] is None else v[1]}))
        for corner in _product(TABLES[table].axes, values, corners):
            got = space.row(table, corner, name)
            assert got == (row[CHOICE_KEY[table]], row["params"]), \
                f"{table} {corner}: the loaded table gives {got}, the tune chose {row}"
    return reg


def _product(axes, value_axes, corners):
    """Every bucket of single points from each axis' corner values (a value axis as is)."""
    out = [{}]
    for axis, vs in zip(axes, corners):
        out = [{**o, axis: v if axis in value_axes else (v, v)} for o in out for v in vs]
    return out


def write(data: dict, rows: list, specs_dir: str = SPECS) -> str:
    """Verify, then write specs_dir/measured/<target>.json. Returns its path."""
    verify(data, rows, specs_dir)
    path = data_file(data["hardware"]["name"], specs_dir)
    measured.write(path, data)
    return path
