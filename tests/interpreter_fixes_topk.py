"""Triton 3.6.0 interpreter patch needed by the top-k selector tests (``TRITON_INTERPRET=1`` only).

Defect: the interpreter evaluates ``tl.reduce`` with any combine function other than
min/max/argmin/argmax/sum through ``ReduceOps.generic_reduce``, a per-element Python loop that
builds interpreter tensors for every element. ``tl.sort`` / ``tl.topk`` / ``tl.flip`` are built on
``xor_sum`` (one xor reduction over a size-2 hypercube axis per compare-and-swap step), so a single
``tl.topk`` over 512 keys costs tens of thousands of Python calls and the selector tests become
several times slower than they need to be.

Fix: :func:`install_xor_reduce_fast_path` evaluates xor reductions with ``np.bitwise_xor.reduce``
(exact for integers, same output shape/dtype as the slow path). The kernels still run Triton's own
sort/top-k algorithm; only the per-step reduction is vectorised. No-op on a GPU run; idempotent.
"""
from __future__ import annotations

import os

import numpy as np

_MARK = "_topk_interpreter_fix"


def install_xor_reduce_fast_path() -> bool:
    """Install the xor-reduction fast path when the interpreter is active."""
    if os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        return False
    import triton.language as tl
    from triton.runtime import interpreter as itp

    ops = itp.ReduceOps
    if getattr(ops.apply_impl, _MARK, False):
        return True
    slow_apply_impl = ops.apply_impl

    def apply_impl(self, input):
        if self.combine_fn != tl.standard._xor_combine or len(input) != 1:
            return slow_apply_impl(self, input)
        data = input[0].handle.data
        if self.axis is None:  # whole tensor -> scalar (or all-ones shape with keep_dims)
            res = np.bitwise_xor.reduce(data.reshape(-1))
            res = res.reshape((1,) * data.ndim) if self.keep_dims else res.item()
        else:
            res = np.bitwise_xor.reduce(data, axis=self.axis, keepdims=self.keep_dims)
        return [self.to_tensor(res, input[0].dtype)]

    setattr(apply_impl, _MARK, True)
    ops.apply_impl = apply_impl
    return True
