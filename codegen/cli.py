"""`codegen` command line: regenerate, list, explain."""
from __future__ import annotations

import argparse
import json
import os
import sys

from . import measured, registry as registry_mod
from .model import SpecError
from .policy import Between, describe_point, lookup
from .render import render_all
from .writer import ForeignDirectory, check, fix_hint, write

# generated/ of the checkout; None when codegen is installed (never write into site-packages).
DEFAULT_OUT = os.path.join(registry_mod.ROOT, "generated") if registry_mod.IN_CHECKOUT else None


class CliError(Exception):
    """A bad command line: main() prints it as one line on stderr and exits 2."""


def _load(args) -> registry_mod.Registry:
    return registry_mod.load(args.specs)


def _require_paths(args) -> None:
    """Outside a checkout --specs (and --out for regenerate) have no default: say so in a line.
    `explain` then reads the installed generated tables instead."""
    if args.command == "explain":
        return
    missing = [flag for flag, value in (("--specs DIR", args.specs),
                                        ("--out DIR", getattr(args, "out", ""))) if value is None]
    if missing:
        raise CliError(f"codegen {args.command}: not run from a kspec checkout (no specs/ next "
                       f"to the codegen package), so pass {' and '.join(missing)}")


def cmd_regenerate(args) -> int:
    # (a bad --out fails before the specs are loaded and rendered)
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise CliError(f"codegen regenerate: --out {args.out} is not a directory")
    reg = _load(args)
    files = render_all(reg)
    # the checkout's own package as generated/, any other directory as given
    own = bool(DEFAULT_OUT) and os.path.abspath(args.out) == DEFAULT_OUT
    shown = "generated" if own else args.out.rstrip("/\\") or ""
    if args.check:
        problems = check(args.out, files, shown)
        if problems:
            sys.stdout.write("".join(problems))
            command = "codegen regenerate" if own else f"codegen regenerate --out {args.out}"
            print(f"\n{len(problems)} generated file(s) differ from the specs.\n"
                  f"{fix_hint(shown, command)}", file=sys.stderr)
            return 1
        print(f"{shown}/ is up to date ({len(files)} files).")
        return 0
    try:
        result = write(args.out, files, own=own)
    except ForeignDirectory as e:
        raise CliError(f"codegen regenerate: --out {e}") from None
    for rel in result["written"]:
        print(f"wrote   {shown}/{rel}")
    for rel in result["deleted"]:
        print(f"deleted {shown}/{rel}")
    for rel in result["kept"]:
        print(f"kept    {shown}/{rel} (not generated: remove it by hand if it is stale)")
    print(f"{len(files)} files, {len(result['written'])} written, "
          f"{len(result['deleted'])} deleted.")
    return 0


def cmd_list(args) -> int:
    reg = _load(args)
    families = sorted({v.family for v in reg.variants.values()})
    if args.family and args.family not in families:
        raise CliError(f"codegen list: --family {args.family!r} is unknown "
                       f"(known: {', '.join(families)})")
    hardware = None
    if args.hardware:
        # A filter that matches nothing would print an empty table: name the targets instead.
        hardware = registry_mod.hardware_aliases(reg).get(args.hardware.strip().lower())
        if hardware is None:
            raise CliError(f"codegen list: --hardware {args.hardware!r} is unknown "
                           f"(known: {', '.join(reg.hardware)})")
    rows = []
    for v in reg.variants.values():
        if args.family and v.family != args.family:
            continue
        if hardware and hardware not in v.hardware:
            continue
        dtypes = sorted({d for t in v.tensors for d in t.dtypes if not d.startswith("int")})
        rows.append({"family": v.family, "name": v.name, "hardware": list(v.hardware),
                     "dtypes": dtypes, "file": f"generated/{v.output}", "spec": str(v.loc)})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    cols = ("family", "name", "hardware", "dtypes", "file", "spec")
    table = [[", ".join(r[c]) if isinstance(r[c], list) else r[c] for c in cols] for r in rows]
    widths = [max(len(c), *(len(t[i]) for t in table)) if table else len(c)
              for i, c in enumerate(cols)]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths)).rstrip())
    print("  ".join("-" * w for w in widths))
    for t in table:
        print("  ".join(x.ljust(w) for x, w in zip(t, widths)).rstrip())
    return 0


def _parse_value(axis, text: str, aliases: dict):
    """An axis value from the command line: ints range-checked, hardware aliases normalized."""
    if axis.kind == "int":
        try:
            value = int(text)
        except ValueError:
            raise CliError(f"codegen explain: {axis.name}={text!r} is not an integer") from None
        if value < axis.lo or (axis.hi is not None and value > axis.hi):
            raise CliError(f"codegen explain: {axis.name}={value} is outside "
                           f"{Between(axis.lo, axis.hi)}")
        return value
    if axis.name == "hardware":
        text = aliases.get(text.strip().lower(), text)
    for v in axis.values:
        rendered = "x".join(map(str, v)) if isinstance(v, tuple) else str(v)
        if text in (rendered, str(v), ",".join(map(str, v)) if isinstance(v, tuple) else None):
            return v
    raise CliError(f"codegen explain: {axis.name}={text!r} is not one of "
                   f"{', '.join(map(str, axis.values))}")


def explain_policy(reg, policy_name: str, values: dict) -> dict:
    """The rule a policy picks for ``values`` (axis name → value), as a JSON-able dict."""
    policy = reg.policies[policy_name]
    point = tuple(values[a.name] for a in policy.axes)
    rule = lookup(policy, reg.tables[policy_name], point)
    info = {"policy": policy_name, "inputs": {a.name: values[a.name] for a in policy.axes},
            "variant": rule.variant, "params": dict(rule.params),
            "rule": rule.index, "where": rule.loc.citation, "note": rule.note}
    row = measured.row_at(rule.loc)  # a measured target's data-file row: its measurements
    if row is not None:
        info["measured_row"] = {k: row[k] for k in ("source", "measured") if k in row}
    return info


def _generated_tables() -> dict:
    """The installed `generated` package's dispatch tables (policy name → Table)."""
    try:
        from generated import dispatch
    except ImportError as e:
        raise CliError(f"codegen explain: no --specs and no importable `generated` package "
                       f"({e})") from None
    return dispatch.TABLES


def _table_value(table, axis: str, domain, text: str):
    """An axis value of a generated table from the command line (its domain decides the kind)."""
    if hasattr(domain, "lo"):  # an int Range
        try:
            value = int(text)
        except ValueError:
            raise CliError(f"codegen explain: {axis}={text!r} is not an integer") from None
        if value not in domain:
            raise CliError(f"codegen explain: {axis}={value} is outside {domain}")
        return value
    if axis == "hardware":
        from generated import _runtime
        text = _runtime.normalize_hardware(text)
    for v in domain:
        rendered = "x".join(map(str, v)) if isinstance(v, tuple) else str(v)
        if text in (rendered, str(v), ",".join(map(str, v)) if isinstance(v, tuple) else None):
            return v
    raise CliError(f"codegen explain: {axis}={text!r} is not one of "
                   f"{', '.join(map(str, domain))}")


def _row_info(row) -> dict:
    return {"variant": row.variant, "params": dict(row.params), "rule": row.index,
            "where": row.where, "note": row.note}


def explain_generated(args) -> int:
    """`codegen explain` from the generated tables (an installed package, no --specs): the same
    lookups the dispatcher makes at run time; rule locations name the spec lines they came
    from."""
    tables = _generated_tables()
    target = args.target
    variants = {r.variant for t in tables.values() for r in t.rows if r.variant}
    if target in variants and not args.values:
        rows = [{"policy": name, **_row_info(r),
                 "when": ", ".join(f"{a}={c}" for a, c in zip(t.axes, r.conds)
                                   if c is not None)}
                for name, t in tables.items() for r in t.rows if r.variant == target]
        info = {"variant": target, "source": "generated tables", "selected_by": rows}
        print(json.dumps(info, indent=2, default=str) if args.json else _pretty(info))
        return 0
    if target not in tables:
        raise CliError(f"codegen explain: {target!r} is neither a policy "
                       f"({', '.join(tables)}) nor a variant of the generated tables")
    table = tables[target]
    values = {}
    for item in args.values:
        if "=" not in item:
            raise CliError(f"codegen explain: expected axis=value, got {item!r}")
        key, text = item.split("=", 1)
        if key not in table.axes:
            raise CliError(f"codegen explain: policy {target!r} has no axis {key!r} "
                           f"(axes: {', '.join(table.axes)})")
        values[key] = _table_value(table, key, table.domains[table.axes.index(key)], text)
    missing = [a for a in table.axes if a not in values]
    if missing:
        raise CliError(f"codegen explain: give a value for {', '.join(missing)}")
    try:
        row = table.lookup(*table.point(**values))
    except (LookupError, ValueError) as e:
        print(f"codegen explain: {e}", file=sys.stderr)
        return 1
    info = {"policy": target, "inputs": values, **_row_info(row), "source": "generated tables"}
    print(json.dumps(info, indent=2, default=str) if args.json else _pretty(info))
    return 0


def cmd_explain(args) -> int:
    if args.specs is None:
        return explain_generated(args)
    reg = _load(args)
    target = args.target
    if target in reg.variants and not args.values:
        v = reg.variants[target]
        rows = registry_mod.rules_for_variant(reg, target)
        info = {"variant": v.name, "family": v.family, "spec": str(v.loc), "doc": v.doc,
                "file": f"generated/{v.output}", "template": v.template,
                "hardware": list(v.hardware), "constants": dict(v.constants),
                "params": [p.name for p in v.params],
                "selected_by": [{"policy": p, "rule": r.index, "where": r.loc.citation,
                                 "when": describe_point(reg.policies[p], tuple(
                                     str(c) if isinstance(c, Between) else
                                     ("*" if c is None else "|".join(map(str, c)))
                                     for c in r.conds)),
                                 "params": dict(r.params)} for p, r in rows]}
        print(json.dumps(info, indent=2) if args.json else _pretty(info))
        return 0
    if target not in reg.policies:
        print(f"codegen explain: {target!r} is neither a policy "
              f"({', '.join(reg.policies)}) nor a variant", file=sys.stderr)
        return 2
    policy = reg.policies[target]
    values = {}
    for item in args.values:
        if "=" not in item:
            print(f"codegen explain: expected axis=value, got {item!r}", file=sys.stderr)
            return 2
        key, text = item.split("=", 1)
        if key not in [a.name for a in policy.axes]:
            print(f"codegen explain: policy {target!r} has no axis {key!r} "
                  f"(axes: {', '.join(a.name for a in policy.axes)})", file=sys.stderr)
            return 2
        values[key] = _parse_value(policy.axis(key), text, registry_mod.hardware_aliases(reg))
    missing = [a.name for a in policy.axes if a.name not in values]
    if missing:
        print(f"codegen explain: give a value for {', '.join(missing)}", file=sys.stderr)
        return 2
    try:
        info = explain_policy(reg, target, values)
    except LookupError as e:
        print(f"codegen explain: {e}", file=sys.stderr)
        return 1
    print(json.dumps(info, indent=2, default=str) if args.json else _pretty(info))
    return 0


def _pretty(info: dict) -> str:
    lines = []
    for key, value in info.items():
        if isinstance(value, list) and value and isinstance(value[0], dict):
            lines.append(f"{key}:")
            for item in value:
                lines.append("  - " + ", ".join(f"{k}={v}" for k, v in item.items()))
        else:
            lines.append(f"{key}: {value}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="codegen", description=(
        "Declarative kernel-spec code generator: renders specs/ into generated/."))
    parser.add_argument("--specs", default=registry_mod.DEFAULT_SPECS,
                        help="spec package directory (default: the checkout's specs/)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("regenerate", help="write generated/ from the specs",
                       description="Render every spec into generated/: rewrites only files whose "
                                   "content changed and deletes the files an earlier run "
                                   "generated that no spec produces now (other files are "
                                   "kept; a directory with files and no MANIFEST.json is "
                                   "refused).")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 with a unified diff if generated/ is stale, "
                        "hand-edited, missing a file or holding an extra one")
    p.add_argument("--out", default=DEFAULT_OUT,
                   help="output directory (default: the checkout's generated/)")
    p.set_defaults(func=cmd_regenerate)

    p = sub.add_parser("list", help="table of every variant",
                       description="Print every variant: family, name, hardware, dtypes, "
                                   "file, spec.")
    p.add_argument("--family", help="only this family")
    p.add_argument("--hardware", help="only variants declared for this hardware target")
    p.add_argument("--json", action="store_true", help="JSON instead of a table")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("explain", help="which variant and launch parameters a policy picks",
                       description="`codegen explain POLICY axis=value ...` prints the rule the "
                                   "dispatcher matches (variant, launch parameters, spec line); "
                                   "`codegen explain VARIANT` prints a variant, its file and the "
                                   "rules that select it. Example: codegen explain router_gemm "
                                   "hardware=sm_90 shape=6144x128 x_dtype=bf16 num_tokens=4. Outside a "
                                   "checkout without --specs it reads the installed generated "
                                   "tables.")
    p.add_argument("target", help="policy or variant name")
    p.add_argument("values", nargs="*", help="axis=value pairs (policy form)")
    p.add_argument("--json", action="store_true", help="JSON output")
    p.set_defaults(func=cmd_explain)

    args = parser.parse_args(argv)
    try:
        _require_paths(args)
        code = args.func(args)
        sys.stdout.flush()  # a reader that went away shows up here, not at interpreter exit
        return code
    except SpecError as e:
        print(f"codegen: spec error: {e}", file=sys.stderr)
        return 2
    except CliError as e:
        print(e, file=sys.stderr)
        return 2
    except BrokenPipeError:
        # `codegen list | head`: stop quietly, with the status of a command killed by SIGPIPE.
        # stdout goes to /dev/null so the exit-time flush cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
