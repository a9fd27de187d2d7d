"""Each fact written once, one family interface, no import circle (issue 12, items 4 and 6)."""
from __future__ import annotations

import ast
import importlib
import io
import os
import subprocess
import sys

import generated
from codegen import families, render
from codegen.families import Family

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GENERATED = os.path.join(ROOT, "generated")


def _module_defs(path):
    """Top-level names a module defines itself (def, class, assignment), not imports."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_exports_are_what_each_template_declares():
    """generated/__init__ re-exports exactly the union of the modules' own __all__, and every
    name in a module's __all__ is defined by that module (a renamed function fails here)."""
    union = {"dispatch", "verify"}
    for fname in sorted(os.listdir(GENERATED)):
        if not fname.endswith(".py") or fname == "__init__.py":
            continue
        path = os.path.join(GENERATED, fname)
        declared = render.declared_exports(open(path, encoding="utf-8").read())
        missing = set(declared) - _module_defs(path)
        assert not missing, f"{fname}: __all__ names {sorted(missing)} it does not define"
        module = importlib.import_module(f"generated.{fname[:-3]}")
        for name in declared:
            assert getattr(generated, name) is getattr(module, name), name
        union |= set(declared)
    assert set(generated.__all__) == union


def test_both_families_implement_the_family_protocol():
    for family in families.ALL:
        assert isinstance(family, Family), family.__name__
        assert family.NAME and isinstance(family.SPEC_TYPES, tuple)


def test_no_import_circle_in_codegen():
    """Each codegen module imports on its own in a fresh interpreter, in any order (an import
    circle shows up as a partially initialised module)."""
    modules = ["codegen.lower", "codegen.capabilities", "codegen.families.router_gemm",
               "codegen.families.index_decode", "codegen.registry", "codegen.render",
               "codegen.cli", "codegen.measured"]
    for first in modules:
        run = subprocess.run([sys.executable, "-c", f"import {first}"], cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, (first, run.stderr[-1500:])
    # and no codegen module imports codegen.render from inside a function any more
    for dirpath, _, files in os.walk(os.path.join(ROOT, "codegen")):
        for fname in files:
            if fname.endswith(".py"):
                text = open(os.path.join(dirpath, fname), encoding="utf-8").read()
                assert "from ..render import" not in text and "from .render import literal" \
                    not in text, fname


def _reversed_table(table):
    """The same dispatch table with its axes in reverse order (rows' conditions too)."""
    rows = tuple(r._replace(conds=tuple(reversed(r.conds))) for r in table.rows)
    return type(table)(table.name, tuple(reversed(table.axes)), tuple(reversed(table.domains)),
                       rows)


def _decisions():
    """Launch decisions of every entry over points of every table (hardware × dtypes × sizes)."""
    out = []
    for hw in ("gfx950", "sm_90", "generic"):
        for q, cache, d, h in (("bf16", "bf16", 128, 1), ("fp32", "fp8e4m3", 64, 2)):
            for reqs, blocks in ((1, 64), (16, 1024), (128, 1024)):
                out.append(generated.explain_index_decode(hw, q, cache, d, reqs, blocks, reqs * 4,
                                                          h, 16, 4))
            for tokens, blocks in ((64, 32), (4096, 1024)):
                out.append(generated.explain_index_prefill(hw, q, cache, d, h, tokens, blocks,
                                                           16))
        for (k, n), (_, cap) in generated.ROUTER_GEMM_LIMITS.items():
            for x in ("bf16", "fp32"):
                out += [generated.explain_router_gemm(k, n, m, hw, x) for m in (1, 4, cap)]
        for mode, programs, Q in (("decode", 1, 1), ("decode", 64, 1), ("decode", 64, 4),
                                  ("prefill", 512, None)):
            for group in (8, 16):
                out.append(generated.explain_sparse_attn(mode, hw, "bf16", "bf16", "none",
                                                         group, 128, programs, Q))
    return out


def test_axis_order_is_read_by_name(monkeypatch):
    """Every generated module looks its tables up by axis name: with every table's axes (and
    rows) in reverse order, every launch decision is the same."""
    before = _decisions()
    tables = generated.dispatch.TABLES
    reversed_tables = {id(t): _reversed_table(t) for t in tables.values()}
    patched = 0
    for fname in sorted(os.listdir(GENERATED)):
        if not fname.endswith(".py") or fname in ("__init__.py", "dispatch.py"):
            continue
        module = importlib.import_module(f"generated.{fname[:-3]}")
        for attr, value in list(vars(module).items()):
            if id(value) in reversed_tables:
                monkeypatch.setattr(module, attr, reversed_tables[id(value)])
                patched += 1
            elif isinstance(value, dict) and any(id(v) in reversed_tables
                                                 for v in value.values()):
                monkeypatch.setattr(module, attr, {k: reversed_tables.get(id(v), v)
                                                   for k, v in value.items()})
                patched += 1
    assert patched >= len(tables)  # every table is used by some module
    assert _decisions() == before


def test_generator_and_generated_code_have_no_unused_or_undefined_names():
    """pyflakes over codegen/ and generated/: no unused import, variable or function argument
    it can see, no undefined name (generated code is read by people)."""
    from pyflakes import api, reporter

    out = io.StringIO()
    paths = [os.path.join(ROOT, d) for d in ("codegen", "generated", "specs")]
    found = api.checkRecursive(paths, reporter.Reporter(out, out))
    assert found == 0, out.getvalue()
