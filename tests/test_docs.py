"""The kernel contract lives in the repository (docs/KERNELS.md), and every `§N` reference in
code, templates, specs, tests, tools and docs names a section or item that exists there."""
from __future__ import annotations

import itertools
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONTRACT = os.path.join(ROOT, "docs", "KERNELS.md")
SKIP_DIRS = {".git", ".venv", "__pycache__", ".pytest_cache", "build", "out", ".whl",
             "runs", "benchmarks", ".scratch"}  # git-ignored run output
TEXT = (".py", ".j2", ".md", ".txt", ".toml", ".json", ".sh", ".cfg", ".ini", ".yml", ".yaml")
THIS = os.path.abspath(__file__)  # holds the patterns it looks for


def _text_files():
    for base, dirs, names in os.walk(ROOT):
        # hidden folders (.venv, .git, local scratch) are not part of the repository's text
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")
                         and not d.startswith("."))
        for name in sorted(names):
            path = os.path.join(base, name)
            if (name.endswith(TEXT) or name == "Makefile") and path != THIS:
                with open(path, encoding="utf-8", errors="replace") as f:
                    yield os.path.relpath(path, ROOT), f.read()


def _contract():
    """({"N" or "N.M" heading numbers}, {section key: {item numbers}}) of docs/KERNELS.md:
    items are numbered list entries ("3. …") and numbered table rows ("| 3 | …")."""
    headings, items, key = set(), {}, None
    with open(CONTRACT, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"#{2,3} (\d+(?:\.\d+)?)[. ]", line)
            if m:
                key = m.group(1)
                headings.add(key)
                continue
            m = re.match(r"(\d+)\. |\| (\d+) \|", line)
            if m and key:
                items.setdefault(key, set()).add(int(m.group(1) or m.group(2)))
                items.setdefault(key.split(".")[0], set()).add(int(m.group(1) or m.group(2)))
    return headings, items


def _numbers(text: str) -> list[int]:
    out = []
    for piece in re.split(r",|\band\b", text):
        bounds = [int(x) for x in re.findall(r"\d+", piece)]
        if len(bounds) == 2:
            out.extend(range(bounds[0], bounds[1] + 1))
        else:
            out.extend(bounds)
    return out


def test_no_file_points_outside_the_repository():
    bad = [f"{rel}:{text[:m.start()].count(chr(10)) + 1}"
           for rel, text in _text_files() for m in re.finditer(r"\.\./shared|shared/spec", text)]
    assert not bad, f"references to a contract outside the repository: {bad}"


def test_every_kernels_md_mention_is_the_repository_document():
    bad = [f"{rel}:{text[:m.start()].count(chr(10)) + 1}" for rel, text in _text_files()
           if rel != os.path.join("docs", "KERNELS.md")
           for m in re.finditer(r"(?<!docs/)KERNELS\.md", text)]
    assert not bad, f"say docs/KERNELS.md: {bad}"


def test_every_section_reference_exists():
    headings, items = _contract()
    assert {str(n) for n in range(1, 15)} <= headings, sorted(headings)
    assert "Out-of-range inputs" in open(CONTRACT, encoding="utf-8").read()
    bad, seen = [], 0
    for rel, text in _text_files():
        for m in re.finditer(r"§(\d+)(?:\.(\d+))?", text):
            seen += 1
            sec, sub = m.group(1), m.group(2)
            ok = sec in headings and (sub is None or f"{sec}.{sub}" in headings
                                      or int(sub) in items.get(sec, ()))
            if not ok:
                bad.append(f"{rel}: {m.group(0)}")
        for m in re.finditer(r"§(\d+) (?:items?|rows?|steps?) ([\d ,–-]+(?:and [\d ]+)?)", text):
            missing = [n for n in _numbers(m.group(2)) if n not in items.get(m.group(1), ())]
            if missing:
                bad.append(f"{rel}: {m.group(0).strip()} (no item {missing})")
    assert seen > 100  # the scan sees the code's references
    assert not bad, "references to sections or items docs/KERNELS.md lacks:\n" + "\n".join(bad)


def test_generated_result_tables_equal_their_command():
    """A table in docs/PERFORMANCE.md below `<!-- python3 tools/attn_report.py FILES -->` (or
    router_report.py) is that command's output over the results of record it names (one source
    for the numbers)."""
    import importlib
    import sys
    sys.path.insert(0, os.path.join(ROOT, "tools"))

    with open(os.path.join(ROOT, "docs", "PERFORMANCE.md"), encoding="utf-8") as f:
        text = f.read()
    for tool in ("attn_report", "router_report"):
        report = importlib.import_module(tool)
        marks = list(re.finditer(rf"<!-- python3 tools/{tool}\.py ([^>]+?) -->\n", text))
        assert marks, f"docs/PERFORMANCE.md names no {tool} table"
        for m in marks:
            want = report.table([p if p.startswith("--") else os.path.join(ROOT, p)
                                 for p in m.group(1).split()])
            assert text[m.end():m.end() + len(want) + 1] == want + "\n", (
                f"docs/PERFORMANCE.md: the table below `{m.group(0).strip()}` is stale; paste "
                f"the command's output")


def test_every_result_of_record_is_named_where_its_numbers_are_used():
    """Each file in docs/results/ is named by the docs (or a test that reads it): whole, as
    `..._<suffix>.json`, or in brace lists (`..._kinds_quick_{a,b}.json`,
    `name_{bf16,fp8}_{a,b}.json`); a superseded one is removed (git keeps it)."""
    results = os.path.join(ROOT, "docs", "results")
    texts = "\n".join(text for rel, text in _text_files()
                      if rel.endswith(".md") or rel.startswith("tests"))
    expanded = set()  # every name a brace pattern spells: `..._{bf16,fp8}_{after1,before1}.json`
    for pattern in re.findall(r"[\w.\-]*(?:\{[\w.\-,]+\}[\w.\-]*)+\.json", texts):
        parts = re.split(r"\{([^}]*)\}", pattern)
        choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
        expanded.update("".join(c) for c in itertools.product(*choices))
    unnamed = []
    for name in sorted(os.listdir(results)):
        stem = name[:-len(".json")]
        suffix = stem.split("_h200_", 1)[-1]
        head, _, last = suffix.rpartition("_")
        braces = re.findall(rf"{re.escape(head)}_\{{([^}}]*)\}}", texts) if head else []
        if stem not in texts and f"..._{suffix}.json" not in texts and \
                not any(last in b.split(",") for b in braces) and \
                not {name, f"..._{suffix}.json"} & expanded:
            unnamed.append(name)
    assert not unnamed, f"results of record no document names: {unnamed}"


# docs/KERNELS.md §1's names for the specs' contract constants
CONSTANT_NAMES = {"SPARSE_BLOCK_SIZE": "SPARSE_BLOCK_SIZE",
                  "PAGES_PER_SPARSE_BLOCK": "PAGES_PER_SPARSE_BLOCK",
                  "INIT_SCORE": "FORCED_INIT_SCORE", "LOCAL_SCORE": "FORCED_LOCAL_SCORE",
                  "NaN stand-in": "NAN_SCORE", "MAX_SPARSE_BLOCKS": "MAX_SPARSE_BLOCKS",
                  "MAX_TOPK": "MAX_TOPK"}


def test_contract_constants_table_states_the_specs_values():
    """§1's table and specs/index_decode.py's CONSTANTS (what the generated code bakes in)
    give the same values."""
    from specs.index_decode import CONSTANTS

    with open(CONTRACT, encoding="utf-8") as f:
        section = f.read().split("## 1.", 1)[1].split("\n## ", 1)[0]
    stated = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] in CONSTANT_NAMES:
            stated[CONSTANT_NAMES[cells[0]]] = float(cells[1].split()[0].replace("−", "-"))
    assert set(stated) == set(CONSTANT_NAMES.values())
    assert stated == {k: v for k, v in CONSTANTS if k in stated}
