"""Kernel families: one module each, all implementing :class:`Family`.

A family turns its own spec classes (``SPEC_TYPES``) into variants and dispatch policies
(``expand``), adds the feasibility rules a generic policy cannot know (``check``) and lowers the
render context of each generated file its variants write (``context``). Each generated module
declares its public names itself (``__all__`` in its template); `generated/__init__.py` re-exports
exactly those.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

from . import index_decode, index_prefill, router_gemm, sparse_attn


@runtime_checkable
class Family(Protocol):
    NAME: str  # the family name variants and policies carry
    SPEC_TYPES: tuple  # the family's own spec classes (may be empty)

    def expand(self, specs: tuple, hardware: dict) -> tuple:
        """(variants, policies, extra render data) from the family's specs."""

    def check(self, registry) -> None:
        """Raise SpecError for a rule the family's kernels cannot run."""

    def context(self, path: str, variants: list, registry) -> dict:
        """Render context of one generated file of the family (literals only)."""


ALL = (index_decode, index_prefill, router_gemm, sparse_attn)
