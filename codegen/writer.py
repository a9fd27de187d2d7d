"""Write generated/ from rendered text: only changed files, atomically, deleting orphans;
or, for ``--check``, compare and describe every difference without writing anything."""
from __future__ import annotations

import difflib
import os
import tempfile

from .render import REGENERATE

FIX_HINT = (f"generated/ is stale: specs or templates changed → run `{REGENERATE}`; "
            "if you edited generated/ by hand, move the change into specs/ or a template.")

IGNORED_DIRS = {"__pycache__"}


def existing_files(out_dir: str) -> list[str]:
    found = []
    if not os.path.isdir(out_dir):
        return found
    for root, dirs, names in os.walk(out_dir):
        dirs[:] = sorted(d for d in dirs if d not in IGNORED_DIRS)
        for name in sorted(names):
            if name.endswith(".pyc"):
                continue
            found.append(os.path.relpath(os.path.join(root, name), out_dir).replace(os.sep, "/"))
    return sorted(found)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", newline="") as f:
            return f.read()
    except FileNotFoundError:
        return None


def write(out_dir: str, files: dict[str, str]) -> dict[str, list[str]]:
    """Bring out_dir to exactly ``files``. Returns {"written": [...], "deleted": [...]}."""
    written, deleted = [], []
    os.makedirs(out_dir, exist_ok=True)
    for rel, text in sorted(files.items()):
        dest = os.path.join(out_dir, rel)
        if _read(dest) == text:
            continue
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(dest), prefix=".tmp-")
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.replace(tmp, dest)
        written.append(rel)
    for rel in existing_files(out_dir):
        if rel not in files:
            os.remove(os.path.join(out_dir, rel))
            deleted.append(rel)
    return {"written": written, "deleted": deleted}


def check(out_dir: str, files: dict[str, str]) -> list[str]:
    """Unified diffs (expected = rendered) for every stale, edited, missing or extra file."""
    problems = []
    for rel, text in sorted(files.items()):
        have = _read(os.path.join(out_dir, rel))
        if have == text:
            continue
        if have is None:
            problems.append(f"missing: generated/{rel}\n")
            continue
        diff = difflib.unified_diff(have.splitlines(keepends=True), text.splitlines(keepends=True),
                                    f"generated/{rel} (on disk)", f"generated/{rel} (from specs)")
        problems.append("".join(diff))
    for rel in existing_files(out_dir):
        if rel not in files:
            problems.append(f"extra: generated/{rel} (no spec produces it)\n")
    return problems
