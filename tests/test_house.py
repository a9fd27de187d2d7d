"""Each fact written once, one family interface, no import circle (issue 12, items 4 and 6)."""
from __future__ import annotations

import ast
import importlib
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


def test_axis_order_is_read_by_name():
    """The generated host code looks the index_score axes up by name, so reordering the
    policy's axes cannot silently swap arguments."""
    text = open(os.path.join(GENERATED, "decode_indexer.py"), encoding="utf-8").read()
    assert "key[4]" not in text
