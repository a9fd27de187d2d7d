"""Prefill index family: query-tile scorer, per-token selector, streaming scorer + selector.

Its variants and policies are declared directly in ``specs/index_prefill.py``; this module adds
the feasibility rules a generic policy cannot know.
"""
from __future__ import annotations

from ..model import SpecError
from .common import variant_file_context

NAME = "index_prefill"
SPEC_TYPES = ()
MIN_DOT_ROWS = 16  # a tile's query lanes (block_m · H) feed tl.dot: at least 16 rows


def expand(specs: tuple, hardware: dict):
    return [], [], None


def _axis_hi(policy, rule, axis: str):
    """The largest value of int axis ``axis`` a flat rule covers (None: unbounded)."""
    pos = [a.name for a in policy.axes].index(axis)
    cond = rule.conds[pos]
    return policy.axes[pos].hi if cond is None else cond.hi


def _heads(policy, rule):
    pos = [a.name for a in policy.axes].index("num_heads")
    return rule.conds[pos] or policy.axes[pos].values


def check(registry) -> None:
    """A tile needs block_m · H ≥ 16 query lanes for every head count its rule covers; a
    selector tile (block_k) and a streaming key list (topk_tile) must hold next_pow2(topk) for
    every topk the rule covers."""
    for name in ("index_prefill_score", "index_prefill"):
        policy = registry.policies.get(name)
        if policy is None:
            continue
        for rule in registry.rules(name):
            params = dict(rule.params)
            if "block_m" not in params:
                continue  # the two-kernel row: each kernel's own table decides
            for h in _heads(policy, rule):
                if params["block_m"] * h < MIN_DOT_ROWS:
                    raise SpecError(rule.loc, f"Policy {name}", "params.block_m",
                                    f"block_m · H must be ≥ {MIN_DOT_ROWS} query lanes; "
                                    f"block_m {params['block_m']} with H = {h} gives "
                                    f"{params['block_m'] * h}")
            if "topk_tile" in params:
                _fits(policy, rule, name, "topk_tile", params["topk_tile"])
    policy = registry.policies.get("index_prefill_topk")
    if policy is not None:
        for rule in registry.rules("index_prefill_topk"):
            _fits(policy, rule, "index_prefill_topk", "block_k", dict(rule.params)["block_k"])


def _fits(policy, rule, name: str, param: str, tile: int) -> None:
    hi = _axis_hi(policy, rule, "topk")
    need = None if hi is None else max(2, 1 << (hi - 1).bit_length())
    if need is None or need > tile:
        raise SpecError(rule.loc, f"Policy {name}", f"params.{param}",
                        f"next_pow2(topk) must fit {param}: the rule covers topk up to "
                        f"{hi if hi is not None else '∞'}, which needs {param} ≥ {need}, got "
                        f"{tile}")


def context(path: str, variants: list, reg) -> dict:
    """Render context of one generated file of the family (`common.variant_file_context`)."""
    return variant_file_context(path, variants, reg, NAME)
