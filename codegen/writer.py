"""Write generated/ from rendered text: only changed files, atomically, deleting the files an
earlier run generated that no spec produces now; or, for ``--check``, compare and describe
every difference without writing anything."""
from __future__ import annotations

import difflib
import json
import os
import tempfile

from .render import HEADER_MARK, REGENERATE, sha256

IGNORED_DIRS = {"__pycache__"}
MANIFEST = "MANIFEST.json"


def fix_hint(shown: str = "generated", command: str = REGENERATE) -> str:
    """What to do about a stale ``shown``/ (``command`` regenerates it)."""
    return (f"{shown}/ is stale: specs or templates changed → run `{command}`; if you edited "
            f"{shown}/ by hand, move the change into specs/ or a template.")


FIX_HINT = fix_hint()


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
    except (FileNotFoundError, NotADirectoryError):
        return None


def _manifest(out_dir: str) -> dict | None:
    """path -> sha256 from out_dir's MANIFEST.json where codegen wrote it, else None."""
    try:
        with open(os.path.join(out_dir, MANIFEST), encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        return None
    ok = isinstance(manifest, dict) and str(manifest.get("generator", "")).startswith(
        "codegen ") and isinstance(manifest.get("files"), dict)
    return manifest["files"] if ok else None


def _generated(path: str, digest: str | None) -> bool:
    """Whether the file at ``path`` is one codegen wrote: its content has the digest an
    earlier manifest recorded, or it opens with the do-not-edit header."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return False
    return sha256(data) == digest or HEADER_MARK.encode() in data[:200]


def write(out_dir: str, files: dict[str, str], own: bool = False) -> dict[str, list[str]]:
    """Bring out_dir to ``files``: write those that differ, delete the others codegen wrote
    (recorded in the previous manifest with the same content, or carrying the generated
    header), keep the rest; the manifest last, so an interrupted run leaves the previous one.
    Returns {"written": [...], "deleted": [...], "kept": [...]}. Where out_dir holds files and
    no manifest codegen wrote, raises ForeignDirectory (nothing written) unless ``own`` (the
    checkout's own generated/, whose manifest may be mid-merge)."""
    present = existing_files(out_dir)
    before = _manifest(out_dir)
    if present and before is None and not own:
        raise ForeignDirectory(
            f"{out_dir} holds {len(present)} file(s) (e.g. {present[0]}) and no {MANIFEST} "
            "written by codegen: pass an empty directory or one codegen wrote")
    written, deleted, kept = [], [], []
    os.makedirs(out_dir, exist_ok=True)

    def put(rel: str, text: str) -> None:
        dest = os.path.join(out_dir, rel)
        if _read(dest) == text:
            return
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(dest), prefix=".tmp-")
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.replace(tmp, dest)
        written.append(rel)

    for rel, text in sorted(files.items()):
        if rel != MANIFEST:
            put(rel, text)
    for old in present:
        if old in files:
            continue
        if _generated(os.path.join(out_dir, old), (before or {}).get(old)):
            os.remove(os.path.join(out_dir, old))
            deleted.append(old)
        else:
            kept.append(old)
    if MANIFEST in files:  # last: it describes the finished directory
        put(MANIFEST, files[MANIFEST])
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
