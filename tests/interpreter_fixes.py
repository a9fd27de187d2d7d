"""Patches for two defects of Triton 3.6.0's CPU interpreter (``TRITON_INTERPRET=1``).

Kernels must be written for the GPU compiler; they are never bent around interpreter bugs.
Instead, CI installs these small patches before any kernel runs (``tests/conftest.py`` calls
:func:`install`). Both are no-ops on a GPU run, and :func:`install` is idempotent.

1. ``tl.dot`` on bfloat16 operands. The interpreter stores bf16 tensors as their raw 16-bit
   patterns in ``uint16`` numpy arrays; ``InterpreterBuilder.create_dot`` only converts fp8
   operands and so multiplies the *bit patterns* of bf16 operands. The patch widens bf16
   patterns to their exact fp32 values (a bf16 is the upper half of an fp32), forms the products
   and sums them in fp64 and rounds once to the accumulator dtype before adding the accumulator.
   This models "exact products, fp32 accumulation" and is deterministic (no BLAS blocking),
   so two kernels that call the same helper produce bitwise-identical results.

2. Loop bounds that are loaded values (``for i in range(lo, hi)`` / ``tl.range`` with ``lo`` or
   ``hi`` from ``tl.load``). The interpreter represents a scalar as a 1-element 1-D numpy array,
   and its patched ``tensor.__index__`` calls ``int(array)``, which numpy >= 2 rejects for arrays
   that are not 0-dimensional ("only 0-dimensional arrays can be converted to Python scalars").
   The patch reads the single element instead (and still refuses real blocks).

3. ``constexpr <op> tensor``. In the interpreter a ``for`` induction variable is a Python int, so
   ``b * BLOCK`` (with a module-level ``tl.constexpr`` BLOCK) stays a ``constexpr`` and a following
   ``+ tl.arange(...)`` goes through ``constexpr.__add__``, which wraps the resulting *tensor* in a
   ``constexpr``; indexing it (``[None, :]``) then fails. The compiler never does this (the
   induction variable is a tensor there). The patch makes ``constexpr`` binary operators return a
   bare tensor when the result is a tensor.
"""
from __future__ import annotations

import os

import numpy as np

_MARK = "_kernels_interpreter_fix"


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _bf16_bits_to_f32(data: np.ndarray) -> np.ndarray:
    return (np.asarray(data).astype(np.uint32) << np.uint32(16)).view(np.float32)


def _scalar_index(data) -> int:
    arr = np.asarray(data)
    if arr.size != 1:
        raise TypeError(f"only scalar tensors can be used as an index (got shape {arr.shape})")
    return int(arr.reshape(()).item())


def install() -> bool:
    """Install the patches when the interpreter is active. Returns True if they are in place."""
    if not _interpreting():
        return False
    import triton.language as tl
    from triton.runtime import interpreter as itp

    # -- 1. bf16 tl.dot -------------------------------------------------------------------
    builder_cls = itp.InterpreterBuilder
    if not getattr(builder_cls.create_dot, _MARK, False):
        orig_dot = builder_cls.create_dot

        def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
            if a.dtype != tl.bfloat16 and b.dtype != tl.bfloat16:
                return orig_dot(self, a, b, d, input_precision, max_num_imprecise_acc)
            a_data = _bf16_bits_to_f32(a.data) if a.dtype == tl.bfloat16 else a.data
            b_data = _bf16_bits_to_f32(b.data) if b.dtype == tl.bfloat16 else b.data
            prod = np.matmul(a_data.astype(np.float64), b_data.astype(np.float64))
            out = prod.astype(d.data.dtype) + d.data
            return itp.TensorHandle(out.astype(d.data.dtype, copy=False), d.dtype.scalar)

        setattr(create_dot, _MARK, True)
        builder_cls.create_dot = create_dot

    # -- 2. loaded loop bounds (tensor.__index__ on a 1-element array) --------------------
    if not getattr(itp._patch_lang_tensor, _MARK, False):
        orig_patch_tensor = itp._patch_lang_tensor

        def _patch_lang_tensor(tensor, scope):
            orig_patch_tensor(tensor, scope)
            scope.set_attr(tensor, "__index__", lambda self: _scalar_index(self.handle.data))

        setattr(_patch_lang_tensor, _MARK, True)
        # `_patch_lang` looks this name up in the module globals at every kernel call.
        itp._patch_lang_tensor = _patch_lang_tensor

    # -- 3. constexpr <op> tensor stays a tensor -------------------------------------------
    cls = tl.constexpr
    for name in _CONSTEXPR_BINOPS:
        orig = cls.__dict__.get(name)
        if orig is None or getattr(orig, _MARK, False):
            continue
        setattr(cls, name, _unwrap_tensor_result(orig))
    return True


_CONSTEXPR_BINOPS = (
    "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__mod__",
    "__truediv__", "__rtruediv__", "__floordiv__", "__rfloordiv__",
    "__gt__", "__rgt__", "__ge__", "__rge__", "__lt__", "__rlt__", "__le__", "__rle__",
    "__eq__", "__ne__", "__and__", "__or__", "__xor__", "__pow__", "__rpow__",
    "__rshift__", "__lshift__",
)


def _unwrap_tensor_result(op):
    import triton.language as tl

    def wrapper(self, other):
        out = op(self, other)
        if isinstance(out, tl.constexpr) and isinstance(out.value, tl.tensor):
            return out.value
        return out

    wrapper.__name__ = op.__name__
    setattr(wrapper, _MARK, True)
    return wrapper
