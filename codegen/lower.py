"""Lowering: spec values to the literals templates substitute (templates never compute).

Shared by the renderer and the families' render contexts (a module of its own so that neither
imports the other).
"""
from __future__ import annotations

from typing import Any

from .policy import Between

TORCH_DTYPES = {
    "bf16": "torch.bfloat16", "fp16": "torch.float16", "fp32": "torch.float32",
    "fp8e4m3": "torch.float8_e4m3fn", "fp8e5m2": "torch.float8_e5m2", "int32": "torch.int32",
    "int64": "torch.int64",
}


def literal(value: Any) -> str:
    """Python source for a spec value (ints, floats, strings, bools, None, tuples, Between)."""
    if isinstance(value, Between):
        return f"Range({value.lo}, {value.hi})"
    if isinstance(value, tuple):
        inner = ", ".join(literal(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{literal(k)}: {literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (bool, int, str)) or value is None:
        return repr(value)
    raise TypeError(f"cannot lower {value!r} to a literal")


def tuple_source(items: list) -> str:
    """Python source of a tuple of the given expressions (one item keeps its comma)."""
    return f"({items[0]},)" if len(items) == 1 else "(" + ", ".join(items) + ")"


def lower_contract(t) -> dict:
    return {"name": t.name, "rank": t.rank, "contiguous": literal(t.contiguous),
            "dtypes": tuple_source([TORCH_DTYPES[d] for d in t.dtypes]),
            "dtype": TORCH_DTYPES[t.dtypes[0]],
            "dtype_names": " or ".join(TORCH_DTYPES[d].split(".")[1] for d in t.dtypes),
            "doc": t.doc}
