"""What `pip install .` gives a user: the wheel's files, the installed `generated` package and
`codegen` command outside a checkout, and package metadata that agrees with what the code
imports and with the pinned dev environment."""
from __future__ import annotations

import ast
import glob
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
import zipfile

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("codegen", "generated")

with open(os.path.join(ROOT, "pyproject.toml"), "rb") as _f:
    PROJECT = tomllib.load(_f)["project"]


def _package_files() -> set[str]:
    """Every file of the two packages in the checkout (what the wheel must hold)."""
    out = set()
    for pkg in PACKAGES:
        for base, dirs, names in os.walk(os.path.join(ROOT, pkg)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in names:
                if not name.endswith(".pyc"):
                    out.add(os.path.relpath(os.path.join(base, name), ROOT).replace(os.sep, "/"))
    return out


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """A wheel built from a copy of the checkout (a build in place would leave build/ behind)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".venv", ".git", "__pycache__", "build", "*.egg-info", ".pytest_cache", "benchmarks"))
    run = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                          "--no-build-isolation", "--wheel-dir", str(tmp / "dist"), str(src)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    (path,) = glob.glob(str(tmp / "dist" / "kspec-*.whl"))
    unpacked = tmp / "site"
    with zipfile.ZipFile(path) as z:
        z.extractall(unpacked)
        names = z.namelist()
    return names, unpacked


def test_wheel_holds_the_packages_templates_manifest_and_license(wheel):
    names, unpacked = wheel
    files = {n for n in names if ".dist-info/" not in n}
    assert files == _package_files(), (sorted(files ^ _package_files()))
    assert {"codegen/templates/dispatch.py.j2", "generated/MANIFEST.json",
            "generated/DISPATCH.md"} <= files
    (info,) = {n.split("/")[0] for n in names if ".dist-info/" in n}
    assert f"{info}/licenses/LICENSE" in names
    with open(unpacked / info / "METADATA", encoding="utf-8") as f:
        meta = f.read()
    assert "License-Expression: Apache-2.0" in meta
    assert f"Requires-Python: {PROJECT['requires-python']}" in meta


def _run(code: str, cwd, pythonpath):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRITON_INTERPRET")}
    env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_installed_generated_imports_and_verifies_from_any_directory(wheel, tmp_path):
    _, unpacked = wheel
    run = _run(f"""
        import generated
        assert generated.__file__.startswith({str(unpacked)!r}), generated.__file__
        assert generated.verify() == [], generated.verify()
        assert callable(generated.index_decode) and callable(generated.router_logits)
        print("ok")
        """, tmp_path, unpacked)
    assert run.returncode == 0 and run.stdout == "ok\n", run.stderr[-3000:]


def test_installed_codegen_asks_for_specs_and_works_with_them(wheel, tmp_path):
    """Outside a checkout: one line naming the missing flags (exit 2), never a traceback or a
    default inside site-packages; with --specs and --out it renders exactly generated/."""
    _, unpacked = wheel
    out = tmp_path / "gen"
    run = _run(f"""
        import contextlib, io, sys
        from codegen import cli
        for argv in (["list"], ["regenerate"], ["--specs", {os.path.join(ROOT, "specs")!r},
                                                "regenerate"]):
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                code = cli.main(argv)
            print(code, err.getvalue(), end="")
        sys.exit(cli.main(["--specs", {os.path.join(ROOT, "specs")!r}, "regenerate",
                           "--out", {str(out)!r}]))
        """, tmp_path, unpacked)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    hint = "not run from a kspec checkout (no specs/ next to the codegen package), so pass"
    assert lines[:3] == [f"2 codegen list: {hint} --specs DIR",
                         f"2 codegen regenerate: {hint} --specs DIR and --out DIR",
                         f"2 codegen regenerate: {hint} --out DIR"], lines
    site_generated = {p for p in os.listdir(unpacked / "generated") if p != "__pycache__"}
    assert site_generated == {p.split("/", 1)[1] for p in _package_files()
                              if p.startswith("generated/")}  # nothing written next to it
    produced = {p: (out / p).read_bytes() for p in os.listdir(out)}
    shipped = {p: open(os.path.join(ROOT, "generated", p), "rb").read()
               for p in os.listdir(os.path.join(ROOT, "generated")) if p != "__pycache__"}
    assert produced == shipped


def test_installed_codegen_explains_every_policy_from_the_generated_tables(wheel, tmp_path):
    """Outside a checkout, `codegen explain` without --specs reads the installed tables: for a
    point of every policy it gives the row the specs give (variant, params, spec line)."""
    _, unpacked = wheel
    import generated
    from codegen import cli, registry

    reg = registry.load()
    cases = []
    for name, table in generated.dispatch.TABLES.items():
        row = next(r for r in table.rows if r.variant)
        values = {}
        for axis, domain, cond in zip(table.axes, table.domains, row.conds):
            pick = domain if cond is None else cond
            value = pick.lo if hasattr(pick, "lo") else pick[0]
            values[axis] = "x".join(map(str, value)) if isinstance(value, tuple) else str(value)
        cases.append((name, [f"{k}={v}" for k, v in values.items()]))
    run = _run(f"""
        import contextlib, io, json
        from codegen import cli
        for name, values in {cases!r}:
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                assert cli.main(["explain", name, *values, "--json"]) == 0
            print(json.dumps(json.loads(out.getvalue())))
        """, tmp_path, unpacked)
    assert run.returncode == 0, run.stderr[-3000:]
    got = [json.loads(line) for line in run.stdout.splitlines()]
    assert {g["policy"] for g in got} == set(reg.policies)
    for (name, values), info in zip(cases, got):
        policy = reg.policies[name]
        parsed = {v.split("=", 1)[0]: cli._parse_value(policy.axis(v.split("=", 1)[0]),
                                                       v.split("=", 1)[1], {})
                  for v in values}
        spec = cli.explain_policy(reg, name, parsed)
        assert (info["variant"], info["params"], info["where"]) == \
            (spec["variant"], spec["params"], spec["where"]), name


def test_checkout_codegen_works_from_another_directory(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = ROOT
    run = subprocess.run([sys.executable, "-m", "codegen", "regenerate", "--check"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "up to date" in run.stdout, run.stdout + run.stderr


# ---------------------------------------------------------------------------------------------
# Metadata


INTERPRETER_ONLY = "generated/_interpreter.py"  # runs only under TRITON_INTERPRET=1


def _third_party_imports(files=None) -> set[str]:
    """Top-level modules that codegen/ and generated/ import, other than stdlib and their own
    (the interpreter fixes' imports are the 'interpreter' extra's)."""
    found = set()
    for rel in files or _package_files() - {INTERPRETER_ONLY}:
        if not rel.endswith(".py"):
            continue
        with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - set(PACKAGES) - {"__future__"}


def test_runtime_dependencies_are_exactly_what_the_packages_import():
    deps = [Requirement(r) for r in PROJECT["dependencies"]]
    assert {d.name for d in deps} == _third_party_imports()
    for d in deps:  # a library states ranges; exact versions belong in requirements-dev.txt
        assert d.specifier and all(s.operator not in ("==", "===", "~=") for s in d.specifier), d
        assert any(s.operator == ">=" for s in d.specifier), f"{d}: needs a lower bound"
    extra = {Requirement(r).name for r in PROJECT["optional-dependencies"]["interpreter"]}
    assert _third_party_imports({INTERPRETER_ONLY}) <= extra | {d.name for d in deps}


def _dev_pins() -> dict[str, str]:
    pins = {}
    with open(os.path.join(ROOT, "requirements-dev.txt"), encoding="utf-8") as f:
        for line in f:
            line = line.split("#")[0].strip()
            if line:
                req = Requirement(line)
                (spec,) = req.specifier
                assert spec.operator == "==", f"requirements-dev.txt: {line} is not a pin"
                pins[req.name] = spec.version
    return pins


def test_python_version_agrees_with_every_dev_pin():
    """The oldest Python that pyproject and the README promise can install every pin."""
    (oldest,) = [s.version for s in SpecifierSet(PROJECT["requires-python"])
                 if s.operator == ">="]
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        stated = set(re.findall(r"Python ≥ (\d+\.\d+)", f.read()))
    assert stated == {oldest}, f"README says Python ≥ {stated}, pyproject {oldest}"
    checked, too_new = [], []
    for name, version in _dev_pins().items():
        meta = importlib.metadata.metadata(name)
        if meta["Version"].split("+")[0] != version:
            continue  # not the pinned build here (e.g. a GPU image): its metadata says nothing
        checked.append(name)
        if not SpecifierSet(meta.get("Requires-Python") or "").contains(oldest):
            too_new.append(f"{name}=={version} needs Python {meta['Requires-Python']}")
    assert not too_new, f"requires-python >={oldest} is too old for: {'; '.join(too_new)}"
    if not checked:
        pytest.skip("no dev pin is installed at its pinned version")


def test_dev_pins_and_readme_lie_inside_the_declared_ranges():
    """Each runtime dependency's pin is a version its range allows, and the README states
    torch's and triton's ranges as pyproject does."""
    pins = _dev_pins()
    ranges = {Requirement(r).name: Requirement(r).specifier for r in PROJECT["dependencies"]}
    for name, spec in ranges.items():
        assert name in pins and spec.contains(pins[name]), (name, str(spec), pins.get(name))
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    for name in ("torch", "triton"):
        lo = [s.version for s in ranges[name] if s.operator == ">="][0]
        hi = [s.version for s in ranges[name] if s.operator == "<"][0]
        major, minor = map(int, hi.split(".")[:2])
        newest = f"{major}.{minor - 1}"
        stated = f"{name} {lo}" if lo == newest else f"{name} {lo}–{newest}"
        assert stated in readme, f"README should say '{stated}' (pyproject: {ranges[name]})"


def test_dev_pins_hold_the_build_backend_the_editable_install_uses():
    """`make` installs the project with --no-build-isolation: the pinned environment must hold
    a build backend that pyproject's build-system accepts."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        needed = [Requirement(r) for r in tomllib.load(f)["build-system"]["requires"]]
    pins = _dev_pins()
    for req in needed:
        assert req.name in pins, f"requirements-dev.txt: no pin for the build backend {req}"
        assert req.specifier.contains(pins[req.name]), (req, pins[req.name])
