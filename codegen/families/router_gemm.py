"""Router GEMM family: fp32 low-token router GEMM, one variant per (hidden, experts) shape.

``specs/router_gemm.py`` declares one :class:`RouterGemmFamily` (the tensor contracts and the
token cap) and one :class:`RouterGemmShape` per supported weight shape, each with a launch
table by token-count bucket for every hardware target. This module lowers them to variants
and to the ``router_gemm`` dispatch policy.
"""
from __future__ import annotations

import attrs

from ..model import (LOC, NUM_STAGES, NUM_WARPS, Location, Param, TensorContract, Variant,
                     _to_tuple, fail, is_pow2, seq_of, spec_class, typed)
from ..policy import Axis, Buckets, Policy, Rule

NAME = "router_gemm"
OUTPUT = "moe_router.py"
TEMPLATE = "moe_router.py.j2"

PARAMS = (
    Param(name="block_m", kind="int", pow2=True, maximum=32, doc="token rows per program"),
    Param(name="block_k", kind="int", pow2=True, maximum=8192, doc="hidden columns per step"),
    NUM_WARPS,
    NUM_STAGES,
)


@spec_class
class RouterGemmFamily:
    """Facts shared by every router GEMM shape."""

    max_tokens: int = attrs.field(validator=typed(int))
    hidden_states: TensorContract = attrs.field(validator=typed(TensorContract))
    router_weight: TensorContract = attrs.field(validator=typed(TensorContract))
    logits: TensorContract = attrs.field(validator=typed(TensorContract))
    loc: Location = LOC

    @property
    def name(self) -> str:
        return NAME


@spec_class
class RouterGemmShape:
    """One supported (hidden_size, num_experts) weight shape and its launch tables."""

    hidden_size: int = attrs.field(validator=typed(int))
    num_experts: int = attrs.field(validator=typed(int))
    models: str = attrs.field(validator=typed(str))
    launch: dict = attrs.field(validator=typed(dict))  # hardware -> Buckets over num_tokens
    loc: Location = LOC

    @property
    def name(self) -> str:
        return f"router_gemm_k{self.hidden_size}_n{self.num_experts}"

    @hidden_size.validator
    def _k(self, attribute, value):
        if value <= 0 or value % 64:
            fail(self, "hidden_size", f"must be a positive multiple of 64, got {value}")

    @num_experts.validator
    def _n(self, attribute, value):
        if value <= 0:
            fail(self, "num_experts", f"must be positive, got {value}")

    @launch.validator
    def _launch(self, attribute, value):
        for hw, table in sorted(value.items()):
            if not isinstance(table, Buckets) or table.axis != "num_tokens":
                fail(self, f"launch.{hw}", "must be Buckets(axis='num_tokens', rows=...)")
            for lo, hi, params in table.rows:
                block_k = params.get("block_k")
                if is_pow2(block_k) and self.hidden_size % block_k:
                    fail(self, f"launch.{hw}.block_k",
                         f"{block_k} does not divide hidden_size {self.hidden_size} "
                         f"(the kernel has no K masking)")


SPEC_TYPES = (RouterGemmFamily, RouterGemmShape)


def expand(specs: tuple, hardware: dict):
    fam = [s for s in specs if isinstance(s, RouterGemmFamily)]
    shapes = [s for s in specs if isinstance(s, RouterGemmShape)]
    if not shapes:
        return [], [], None
    if len(fam) != 1:
        where = shapes[0].loc
        raise_at = fam[1] if len(fam) > 1 else None
        from ..model import SpecError
        raise SpecError(raise_at.loc if raise_at else where, "RouterGemmFamily", None,
                        "exactly one RouterGemmFamily spec is required")
    family = fam[0]
    tensors = (family.hidden_states, family.router_weight, family.logits)
    variants, rules = [], []
    for shape in sorted(shapes, key=lambda s: (s.hidden_size, s.num_experts)):
        variants.append(Variant(
            family=NAME, name=shape.name, template=TEMPLATE, output=OUTPUT,
            doc=f"fp32 router GEMM for hidden {shape.hidden_size}, {shape.num_experts} experts "
                f"({shape.models})",
            hardware=tuple(sorted(shape.launch)),
            constants=(("HIDDEN_SIZE", shape.hidden_size), ("NUM_EXPERTS", shape.num_experts)),
            params=PARAMS, tensors=tensors, loc=shape.loc))
        for hw, table in sorted(shape.launch.items()):
            rules.append(Rule(when={"hardware": hw, "shape": (shape.hidden_size, shape.num_experts)},
                              variant=shape.name, by=table, loc=shape.loc,
                              note=shape.models))
    shape_values = tuple((s.hidden_size, s.num_experts)
                         for s in sorted(shapes, key=lambda s: (s.hidden_size, s.num_experts)))
    policy = Policy(
        name=NAME, family=NAME, loc=family.loc,
        doc="launch configuration of the router GEMM by weight shape and token count",
        axes=(
            Axis(name="hardware", kind="enum", values=tuple(hardware), doc="normalized target",
                 loc=family.loc),
            Axis(name="shape", kind="enum", values=shape_values,
                 doc="(hidden_size, num_experts) of the router weight", loc=family.loc),
            Axis(name="num_tokens", kind="int", lo=1, hi=family.max_tokens,
                 doc="rows of hidden_states (M); M = 0 launches nothing", loc=family.loc),
        ),
        rules=tuple(rules))
    return variants, [policy], family


def context(path: str, variants: list, reg) -> tuple[dict, list[str]]:
    """Render context of generated/router_gemm.py and the names it exports."""
    from ..render import literal, lower_contract

    family = reg.extras[NAME]
    shapes = [{"key": literal((v.constant("HIDDEN_SIZE"), v.constant("NUM_EXPERTS"))),
               "variant": v.name, "doc": v.doc, "where": str(v.loc)} for v in variants]
    ctx = {
        "max_tokens": family.max_tokens,
        "shapes": shapes,
        "x": lower_contract(family.hidden_states),
        "w": lower_contract(family.router_weight),
        "out": lower_contract(family.logits),
        "table": NAME.upper(),
    }
    names = ["ROUTER_GEMM_SHAPES", "can_use_router_gemm", "explain_router_gemm",
             "explain_router_logits", "launch_router_gemm", "router_gemm", "router_logits"]
    return ctx, names
