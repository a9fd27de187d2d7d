"""A speed patch for Triton 3.6.0's CPU interpreter (``TRITON_INTERPRET=1``); results unchanged.

Every call of a ``@triton.jit`` helper from inside a kernel runs ``_patch_lang`` on the helper's
module: ``inspect.getmembers`` over ``triton.language`` and a re-patch of every builtin, which
the launch already did for the same modules. The decode kernels call helpers per block and per
program, so this bookkeeping was a third to a half of their CPU time (the router kernel, with
fewer helpers, about a sixth). The patch skips the re-patch when every ``triton.language``
module the helper sees was already patched during the current launch; the first call that sees
a new one (``triton.language.core`` from ``tl.max``'s module, say) still patches it, as before.
No-op without the interpreter; :func:`install` is idempotent.
"""
from __future__ import annotations

import inspect
import os

_MARK = "_kspec_interpreter_speed"
_LAUNCHES: list = []  # one set per running launch: ids of the modules patched so far
_LANGS: dict = {}  # id(a function's globals) -> ids of the triton.language modules in them


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _langs(fn) -> frozenset:
    import triton.language as tl

    key = id(fn.__globals__)
    if key not in _LANGS:
        _LANGS[key] = frozenset(id(v) for v in fn.__globals__.values()
                                if inspect.ismodule(v) and v in (tl, tl.core))
    return _LANGS[key]


def fast_patch_lang(original):
    """``original`` (the interpreter's ``_patch_lang``), skipped for helper calls whose modules
    the running launch has already patched."""

    def patch_lang(fn):
        mine = _langs(fn)
        if _LAUNCHES and mine <= _LAUNCHES[-1]:
            return None  # a helper call: the interpreter ignores the scope of those anyway
        scope = original(fn)
        if _LAUNCHES:
            _LAUNCHES[-1].update(mine)
        return scope

    patch_lang.original = original
    setattr(patch_lang, _MARK, True)
    return patch_lang


def install() -> bool:
    """Install the patch when the interpreter is active. Returns True if it is in place."""
    if not _interpreting():
        return False
    from triton.runtime import interpreter as itp

    if getattr(itp._patch_lang, _MARK, False):
        return True
    grid_call = itp.GridExecutor.__call__

    def launch(self, *args, **kwargs):
        # The launch patches the kernel's modules (and restores them when it ends).
        _LAUNCHES.append(set())
        try:
            return grid_call(self, *args, **kwargs)
        finally:
            _LAUNCHES.pop()

    itp.GridExecutor.__call__ = launch
    itp._patch_lang = fast_patch_lang(itp._patch_lang)  # a module global, looked up per call
    return True
