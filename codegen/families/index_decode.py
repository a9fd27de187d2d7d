"""Decode index family: scorers, fused top-k selector, page-16 sparse table.

Its variants and policies are declared directly in ``specs/index_decode.py``; this module adds
the feasibility rules a generic policy cannot know.
"""
from __future__ import annotations

from ..capabilities import supports_pdl
from ..model import SpecError
from .common import variant_file_context

NAME = "index_decode"
SPEC_TYPES = ()


def expand(specs: tuple, hardware: dict):
    return [], [], None


FUSED = "index_decode_fused"


def check(registry) -> None:
    """The single-tile selector ignores blocks past one tile per chunk, and the adaptive merge
    handles at most 16 chunks: a rule may only enable them where that is safe. The fused
    single-launch variant selects from one topk_tile of blocks: an `index_score` rule may only
    pick it for max_block ≤ topk_tile and next_pow2(topk) ≤ topk_tile. A selector rule may
    ask for programmatic dependent launch (pdl) only on NVIDIA hardware of compute capability
    ≥ 9.0."""
    _check_fused(registry)
    policy = registry.policies.get("index_topk")
    if policy is None:
        return
    names = [a.name for a in policy.axes]
    pos, topk_pos = names.index("max_block"), names.index("topk")
    hw_pos = names.index("hardware")
    for rule in registry.rules("index_topk"):
        params = dict(rule.params)
        if params["pdl"]:
            for name in rule.conds[hw_pos] or policy.axes[hw_pos].values:
                if not supports_pdl(registry.hardware[name]):
                    raise SpecError(rule.loc, "Policy index_topk", "params.pdl",
                                    f"programmatic dependent launch needs NVIDIA compute "
                                    f"capability ≥ 9.0; the rule covers hardware {name!r}")
        widest = rule.conds[topk_pos].hi if rule.conds[topk_pos] is not None else None
        widest = policy.axes[topk_pos].hi if widest is None else widest
        if 1 << (widest - 1).bit_length() > params["topk_tile"]:
            raise SpecError(rule.loc, "Policy index_topk", "params.topk_tile",
                            f"next_pow2(topk) must fit the tile: topk up to {widest} needs "
                            f"topk_tile ≥ {1 << (widest - 1).bit_length()}, got "
                            f"{params['topk_tile']}")
        cap = params["topk_chunks"] * params["topk_tile"]
        hi = rule.conds[pos].hi if rule.conds[pos] is not None else None
        if params["single_tile"] and (hi is None or hi > cap):
            raise SpecError(rule.loc, "Policy index_topk", "params.single_tile",
                            f"single_tile needs max_block ≤ topk_chunks·topk_tile = {cap}, "
                            f"but the rule covers max_block up to {hi if hi is not None else '∞'}")
        if params["adaptive_merge"] and params["topk_chunks"] > 16:
            raise SpecError(rule.loc, "Policy index_topk", "params.adaptive_merge",
                            "adaptive_merge supports at most 16 chunks")


def _check_fused(registry) -> None:
    """A single-launch rule must fit its one selection tile: max_block ≤ topk_tile and
    next_pow2(topk) ≤ topk_tile over everything it covers (larger topk belongs to another
    rule: specs' `fused_rules` declares the split-K fallback)."""
    policy = registry.policies.get("index_score")
    if policy is None:
        return
    names = [a.name for a in policy.axes]
    for rule in registry.rules("index_score"):
        if rule.variant != FUSED:
            continue
        tile = dict(rule.params)["topk_tile"]
        for axis, what in (("max_block", "max_block"), ("topk", "next_pow2(topk)")):
            pos = names.index(axis)
            cond = rule.conds[pos]
            hi = policy.axes[pos].hi if cond is None else cond.hi
            if axis == "topk" and hi is not None:
                hi = 1 << (hi - 1).bit_length()
            if hi is None or hi > tile:
                raise SpecError(rule.loc, "Policy index_score", "params.topk_tile",
                                f"{FUSED} selects from one tile of topk_tile blocks: it needs "
                                f"{what} ≤ topk_tile = {tile}, but the rule covers {axis} up "
                                f"to {hi if hi is not None else '∞'}")


def context(path: str, variants: list, reg) -> dict:
    """Render context of one generated file of the family (`common.variant_file_context`)."""
    return variant_file_context(path, variants, reg, NAME)
