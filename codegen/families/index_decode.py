"""Decode index family: scorers, fused top-k selector, page-16 sparse table.

Its variants and policies are declared directly in ``specs/index_decode.py``; this module adds
the feasibility rules a generic policy cannot know.
"""
from __future__ import annotations

from ..model import SpecError

NAME = "index_decode"
SPEC_TYPES = ()


def expand(specs: tuple, hardware: dict):
    return [], [], None


def check(registry) -> None:
    """The single-tile selector ignores blocks past one tile per chunk, and the adaptive merge
    handles at most 16 chunks: a rule may only enable them where that is safe."""
    policy = registry.policies.get("index_topk")
    if policy is None:
        return
    pos = [a.name for a in policy.axes].index("max_block")
    for rule in registry.tables["index_topk"]:
        params = dict(rule.params)
        cap = params["topk_chunks"] * params["topk_tile"]
        hi = rule.conds[pos].hi if rule.conds[pos] is not None else None
        if params["single_tile"] and (hi is None or hi > cap):
            raise SpecError(rule.loc, "Policy index_topk", "params.single_tile",
                            f"single_tile needs max_block ≤ topk_chunks·topk_tile = {cap}, "
                            f"but the rule covers max_block up to {hi if hi is not None else '∞'}")
        if params["adaptive_merge"] and params["topk_chunks"] > 16:
            raise SpecError(rule.loc, "Policy index_topk", "params.adaptive_merge",
                            "adaptive_merge supports at most 16 chunks")
