"""Sparse attention family: attention over the indexer's selected blocks (split-K with an exact
log-sum-exp merge). Variants and policies are declared directly in ``specs/sparse_attn.py``."""
from __future__ import annotations

from .common import variant_file_context

NAME = "sparse_attn"
SPEC_TYPES = ()


def expand(specs: tuple, hardware: dict):
    return [], [], None


def check(registry) -> None:
    """Nothing beyond the variant's parameters: any power-of-two split count runs (a row
    list shorter than it leaves splits empty; the host clamps splits to next_pow2(topk))."""


def context(path: str, variants: list, reg) -> dict:
    """Render context of one generated file of the family (`common.variant_file_context`)."""
    return variant_file_context(path, variants, reg, NAME)
