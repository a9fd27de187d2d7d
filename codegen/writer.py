"""Write generated/ from rendered text: only changed files, atomically, deleting the files an
earlier run generated that no spec produces now; or, for ``--check``, compare and describe
every difference without writing anything."""
from __future__ import annotations

import difflib
import json
import os
import tempfile

from .render import REGENERATE

FIX_HINT = (f"generated/ is stale: specs or templates changed → run `{REGENERATE}`; "
            "if you edited generated/ by hand, move the change into specs/ or a template.")

IGNORED_DIRS = {"__pycache__"}
MANIFEST = "MANIFEST.json"


class ForeignDirectory(Exception):
    """The output directory holds files but no generated package: writing there could
    overwrite or delete files codegen did not make."""


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


def _generated_before(out_dir: str) -> set[str]:
    """The files out_dir's manifest says an earlier run generated (the manifest included).
    Raises ForeignDirectory where out_dir holds files but no readable manifest."""
    present = existing_files(out_dir)
    if not present:
        return set()
    try:
        with open(os.path.join(out_dir, MANIFEST), encoding="utf-8") as f:
            listed = json.load(f)["files"]
        return {MANIFEST, *listed}
    except (OSError, ValueError, KeyError, TypeError):
        raise ForeignDirectory(
            f"{out_dir} holds {len(present)} file(s) (e.g. {present[0]}) and no readable "
            f"{MANIFEST}: not a generated package; pass an empty directory or one codegen "
            "wrote") from None


def write(out_dir: str, files: dict[str, str]) -> dict[str, list[str]]:
    """Bring out_dir to ``files``: write those that differ, delete those the previous run
    generated (its manifest) that ``files`` no longer has; other files are left alone.
    Returns {"written": [...], "deleted": [...], "kept": [...]} (kept: files no run generated,
    left in place); raises ForeignDirectory (nothing written) where out_dir holds files and no
    manifest."""
    written, deleted, kept = [], [], []
    before = _generated_before(out_dir)
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
        if rel in files:
            continue
        if rel in before:
            os.remove(os.path.join(out_dir, rel))
            deleted.append(rel)
        else:
            kept.append(rel)
    return {"written": written, "deleted": deleted, "kept": kept}


def check(out_dir: str, files: dict[str, str], shown: str = "generated") -> list[str]:
    """Unified diffs (expected = rendered) for every stale, edited, missing or extra file;
    paths shown under ``shown``."""
    problems = []
    for rel, text in sorted(files.items()):
        have = _read(os.path.join(out_dir, rel))
        if have == text:
            continue
        if have is None:
            problems.append(f"missing: {shown}/{rel}\n")
            continue
        diff = difflib.unified_diff(have.splitlines(keepends=True), text.splitlines(keepends=True),
                                    f"{shown}/{rel} (on disk)", f"{shown}/{rel} (from specs)")
        problems.append("".join(diff))
    for rel in existing_files(out_dir):
        if rel not in files:
            problems.append(f"extra: {shown}/{rel} (no spec produces it)\n")
    return problems
