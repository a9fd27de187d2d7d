"""Render-context helpers shared by families whose variants are declared directly in specs/."""
from __future__ import annotations

from ..lower import literal, lower_contract
from ..model import SpecError


def variant_file_context(path: str, variants: list, reg, family: str) -> dict:
    """Render context of one generated file: its contract constants (one set shared by every
    variant writing it), tensor contracts, variant names and the declared defaults of every
    variant of ``family``, all lowered to literals."""
    constants = {}
    for v in variants:
        for key, value in v.constants:
            if constants.setdefault(key, value) != value:
                raise SpecError(v.loc, f"Variant {v.name}", "constants",
                                f"{key} = {value!r} disagrees with another variant of {path}")
    contracts = {}
    for v in variants:
        for t in v.tensors:
            contracts[t.name] = lower_contract(t)
    return {
        "constants": [{"name": k, "value": literal(val)} for k, val in constants.items()],
        "c": {k: literal(val) for k, val in constants.items()},
        "contracts": contracts,
        "variants": [v.name for v in variants],
        "defaults": {name: {"params": literal(v.defaults), "where": str(v.loc)}
                     for name, v in reg.variants.items() if v.family == family and v.defaults},
    }
