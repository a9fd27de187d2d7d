"""Interpreter speed (generated/_interpreter.py, fix 5: helper calls inside a launch no longer
re-patch triton.language; a kernel computes exactly what it computed without the patch) and
one thread per xdist worker (tests/conftest.py)."""
from __future__ import annotations

import os

import pytest
import torch
import triton
import triton.language as tl

from generated import _interpreter as interpreter_speed

interpreter_only = pytest.mark.skipif(not interpreter_speed._rt.interpreting(),
                                      reason="the patch is for Triton's CPU interpreter only")


@triton.jit
def _helper(x, i):
    return x + i


@triton.jit
def _kernel(out_ptr, N: tl.constexpr, CALLS: tl.constexpr):
    offs = tl.arange(0, N)
    acc = tl.zeros((N,), dtype=tl.float32)
    for i in tl.static_range(CALLS):
        acc = _helper(acc, i)
    # tl.max is a jit function of triton.language.standard, whose globals hold
    # triton.language.core: a module the launch itself did not patch.
    top = tl.max(acc, axis=0)
    tl.store(out_ptr + tl.program_id(0) * N + offs, acc + top)


def _run(monkeypatch, patch_lang):
    from triton.runtime import interpreter as itp

    monkeypatch.setattr(itp, "_patch_lang", patch_lang)
    out = torch.empty((4, 16), dtype=torch.float32)
    _kernel[(4,)](out, N=16, CALLS=8)
    return out


@interpreter_only
def test_helper_calls_skip_the_repatch_with_the_same_result(monkeypatch):
    from triton.runtime import interpreter as itp

    assert getattr(itp._patch_lang, interpreter_speed._MARK, False), "import generated installs it"
    real = itp._patch_lang.original
    slow, fast = [], []

    def counted(log):
        def patch_lang(fn):
            log.append(fn.__name__)
            return real(fn)
        return patch_lang

    want = _run(monkeypatch, counted(slow))  # the interpreter as shipped
    got = _run(monkeypatch, interpreter_speed.fast_patch_lang(counted(fast)))
    assert torch.equal(want, torch.full((4, 16), 56.0)) and torch.equal(got, want)
    assert len(slow) >= 4 * 9, slow  # every helper call of every program re-patched
    assert fast[0] == "_kernel" and len(fast) <= 3, fast  # the launch + tl.max's module


@pytest.mark.skipif(not os.environ.get("PYTEST_XDIST_WORKER"), reason="only under pytest -n")
def test_xdist_workers_use_one_thread():
    """One worker per core: neither torch in the worker nor the tools it starts spin extra
    threads (tests/conftest.py)."""
    assert torch.get_num_threads() == 1
    assert os.environ["OMP_NUM_THREADS"] == "1"
