"""Kernel families. Each module declares NAME, SPEC_TYPES (its own spec classes, may be empty),
``expand(specs, hardware) -> (variants, policies, extra)`` and optionally
``check(registry)`` for cross-spec feasibility rules."""
from . import index_decode, router_gemm

ALL = (index_decode, router_gemm)
