"""Sparse attention family: attention over the indexer's selected blocks (split-K with an exact
log-sum-exp merge). Variants and policies are declared directly in ``specs/sparse_attn.py``;
this module adds the rule a generic policy cannot know."""
from __future__ import annotations

from ..capabilities import supports_tma
from ..model import SpecError
from .common import variant_file_context

NAME = "sparse_attn"
SPEC_TYPES = ()
TABLES = ("sparse_attn_decode", "sparse_attn_prefill")


def expand(specs: tuple, hardware: dict):
    return [], [], None


def check(registry) -> None:
    """A split-kernel row may load its tiles by the tensor memory accelerator (tma) only on
    NVIDIA hardware of compute capability ≥ 9.0. (Any power-of-two split count runs: a row list
    shorter than it leaves splits empty; the host clamps splits to next_pow2(topk).)"""
    for table in TABLES:
        policy = registry.policies.get(table)
        if policy is None:
            continue
        hw_pos = [a.name for a in policy.axes].index("hardware")
        for rule in registry.rules(table):
            if not dict(rule.params).get("tma"):
                continue
            for name in rule.conds[hw_pos] or policy.axes[hw_pos].values:
                if not supports_tma(registry.hardware[name]):
                    raise SpecError(rule.loc, f"Policy {table}", "params.tma",
                                    f"the tensor memory accelerator needs NVIDIA compute "
                                    f"capability ≥ 9.0; the rule covers hardware {name!r}")


def context(path: str, variants: list, reg) -> dict:
    """Render context of one generated file of the family (`common.variant_file_context`)."""
    return variant_file_context(path, variants, reg, NAME)
