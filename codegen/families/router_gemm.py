"""Router GEMM family: fp32 low-token router GEMM, two kernels per (hidden, experts) shape.

``specs/router_gemm.py`` declares one :class:`RouterGemmFamily` (the tensor contracts and the
token cap) and one :class:`RouterGemmShape` per supported weight shape, each with a launch
table by token-count bucket for every hardware target. This module lowers them to variants
and to the ``router_gemm`` dispatch policy.

Kernels (a launch table row picks one with ``kernel=``; default ``per_expert``):

- ``per_expert`` (variant ``router_gemm_k{K}_n{N}``): docs/KERNELS.md §11, one program per
  (row tile, expert tile of block_e experts; block_e divides N), BLOCK_M×BLOCK_E×BLOCK_K fp32
  partials reduced at the end; the program's x tile is read once for its block_e experts.
  Params block_m, block_e, block_k, num_warps, num_stages.
- ``splitk`` (variant ``router_gemm_splitk_k{K}_n{N}``): grid (cdiv(N, block_n), split_k), one
  row tile of block_m ≥ M rows; program (nt, ks) forms the [block_m, block_n] partial of its K
  slice with a ``tl.dot``: exact fp32 FMAs, or with ``tf32x3=True`` TF32 tensor-core
  products that keep fp32's accuracy (an fp32 operand splits into head and remainder: head·head
  + head·rest + rest·head; a bf16 operand does not split; bf16·bf16 is one exact 16-bit
  product; NVIDIA compute capability ≥ 8.0 only, checked at load); with split_k > 1 the last program to arrive at the tile's counter sums the split_k
  partials in ks order (deterministic). Params block_m, block_n, block_k, split_k, tf32x3,
  num_warps, num_stages.

A shape's table for one hardware target is either hand-written (a ``Buckets``: one dispatch Rule
per run of consecutive buckets with the same kernel, a Rule names one variant) or a measured
target's rows (``codegen.measured.Row``, from specs/measured/<target>.json: one Rule per row,
located at its data-file row, so every error names that row).
"""
from __future__ import annotations

import itertools

import attrs

from ..capabilities import supports_tf32x3
from ..lower import TORCH_DTYPES, literal, lower_contract
from ..measured import Row as MeasuredRow
from ..model import (LOC, NUM_STAGES, NUM_WARPS, Location, Param, SpecError, TensorContract,
                     Variant, _spec_name, fail, is_pow2, spec_class, typed)
from ..policy import Axis, Buckets, Outside, Policy, Rule, between

NAME = "router_gemm"
OUTPUT = "moe_router.py"
TEMPLATE = "moe_router.py.j2"

PER_EXPERT = "per_expert"
SPLITK = "splitk"
KERNELS = (PER_EXPERT, SPLITK)  # the first one is the default of a row without `kernel=`

PARAMS = (
    Param(name="block_m", kind="int", pow2=True, maximum=32, doc="token rows per program"),
    Param(name="block_e", kind="int", pow2=True, maximum=64,
          doc="experts per program (dividing num_experts; each reads its x tile once)"),
    Param(name="block_k", kind="int", pow2=True, maximum=8192, doc="hidden columns per step"),
    NUM_WARPS,
    NUM_STAGES,
)

SPLITK_MIN_BLOCK = 16  # tl.dot needs every tile dimension ≥ 16
SPLITK_PARAMS = (
    Param(name="block_m", kind="int", pow2=True, minimum=SPLITK_MIN_BLOCK, maximum=32,
          doc="token rows of the one row tile (≥ every M of the bucket)"),
    Param(name="block_n", kind="int", pow2=True, minimum=SPLITK_MIN_BLOCK, maximum=256,
          doc="experts per program"),
    Param(name="block_k", kind="int", pow2=True, minimum=SPLITK_MIN_BLOCK, maximum=8192,
          doc="hidden columns per tl.dot step"),
    Param(name="split_k", kind="int", minimum=1, maximum=64,
          doc="programs per expert tile along K (each owns hidden_size/split_k columns)"),
    Param(name="tf32x3", kind="bool",
          doc="tl.dot on tensor cores as tf32x3 (NVIDIA only) instead of fp32 FMAs"),
    NUM_WARPS,
    NUM_STAGES,
)


def row_kernel(params: dict) -> str:
    """Kernel a launch table row names (``kernel=``, default ``per_expert``)."""
    return params.get("kernel", PER_EXPERT)


def _is_measured(table) -> bool:
    return isinstance(table, tuple) and bool(table) and all(
        isinstance(r, MeasuredRow) and r.table == NAME for r in table)


def launch_rows(shape, table) -> list:
    """(lo, hi, params with ``kernel``, location, x dtype or None for every one) of one
    hardware's launch table: a hand-written Buckets (every row at the shape's spec line, for
    every x dtype) or a measured target's rows (each at its own data-file row, for the x dtype
    it was measured with)."""
    if isinstance(table, Buckets):
        return [(lo, hi, params, shape.loc, None) for lo, hi, params in table.rows]
    return [(*row.when["num_tokens"], {"kernel": row.choice, **row.params}, row.loc,
             row.when["x_dtype"]) for row in table]


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
    # The router weight's dtype (read as stored, accumulated in fp32) and the most tokens the
    # kernels serve for this shape (None: the family's max_tokens); above it router_logits
    # falls back to F.linear(x.float(), w.float()).
    weight_dtype: str = attrs.field(default="fp32", validator=typed(str))
    max_tokens: int | None = attrs.field(default=None, validator=typed(int, optional=True))
    loc: Location = LOC

    @property
    def name(self) -> str:
        return f"router_gemm_k{self.hidden_size}_n{self.num_experts}"

    def variant_name(self, kernel: str) -> str:
        if kernel == SPLITK:
            return f"router_gemm_splitk_k{self.hidden_size}_n{self.num_experts}"
        return self.name

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
            if not (isinstance(table, Buckets) and table.axis == "num_tokens") and \
                    not _is_measured(table):
                _fail_at(self, self.loc, f"launch.{hw}",
                         "must be Buckets(axis='num_tokens', rows=...) or a measured target's "
                         "router_gemm rows")
            for lo, hi, params, loc, _ in launch_rows(self, table):
                kernel = row_kernel(params)
                if kernel not in KERNELS:
                    _fail_at(self, loc, f"launch.{hw}.kernel",
                             f"unknown kernel {kernel!r} in bucket {lo}..{hi} "
                             f"(known: {', '.join(KERNELS)})")
                if kernel == SPLITK:
                    self._check_splitk(hw, lo, hi, params, loc)
                    continue
                own = {p.name for p in PARAMS}
                foreign = sorted(k for k in params if k != "kernel" and k not in own and
                                 k in {p.name for p in SPLITK_PARAMS})
                if foreign:
                    _fail_at(self, loc, f"launch.{hw}.{foreign[0]}",
                             f"bucket {lo}..{hi}: {foreign[0]!r} is a parameter of the split-K "
                             f"kernel, but the row takes the per-expert kernel (add "
                             f"kernel='splitk')")
                block_k = params.get("block_k")
                if is_pow2(block_k) and self.hidden_size % block_k:
                    _fail_at(self, loc, f"launch.{hw}.block_k",
                             f"{block_k} does not divide hidden_size {self.hidden_size} "
                             f"(the kernel has no K masking)")
                block_e = params.get("block_e")
                if is_pow2(block_e) and self.num_experts % block_e:
                    _fail_at(self, loc, f"launch.{hw}.block_e",
                             f"{block_e} does not divide num_experts {self.num_experts} "
                             f"(the kernel has no expert masking)")

    def _check_splitk(self, hw, lo, hi, params, loc):
        """Tile rules of the split-K kernel (types and unknown/missing keys are reported by
        the variant's Param checks when the policy is flattened)."""
        where = f"launch.{hw}"
        bucket = f"bucket {lo}..{hi}, kernel='splitk'"

        def fail(_, field, rule):
            _fail_at(self, loc, field, rule)

        def ints(*names):
            return all(isinstance(params.get(n), int) and not isinstance(params.get(n), bool)
                       for n in names)

        if ints("block_m"):
            bm = params["block_m"]
            if not (is_pow2(bm) and SPLITK_MIN_BLOCK <= bm <= 32):
                fail(self, f"{where}.block_m",
                     f"{bucket}: must be a power of two in {SPLITK_MIN_BLOCK}..32 (tl.dot needs "
                     f"≥ {SPLITK_MIN_BLOCK} rows; one row tile holds every token), got {bm}")
        if ints("block_n"):
            bn = params["block_n"]
            if not (is_pow2(bn) and bn >= SPLITK_MIN_BLOCK):
                fail(self, f"{where}.block_n",
                     f"{bucket}: must be a power of two ≥ {SPLITK_MIN_BLOCK} (tl.dot), got {bn}")
        if ints("block_k"):
            bk = params["block_k"]
            if not (is_pow2(bk) and bk >= SPLITK_MIN_BLOCK):
                fail(self, f"{where}.block_k",
                     f"{bucket}: must be a power of two ≥ {SPLITK_MIN_BLOCK} (tl.dot), got {bk}")
        if ints("split_k") and params["split_k"] < 1:
            fail(self, f"{where}.split_k", f"{bucket}: must be ≥ 1, got {params['split_k']}")
        if ints("block_k", "split_k") and params["split_k"] >= 1 and \
                self.hidden_size % (params["block_k"] * params["split_k"]):
            bk, sk = params["block_k"], params["split_k"]
            fail(self, f"{where}.split_k",
                 f"{bucket}: block_k·split_k = {bk}·{sk} = {bk * sk} does not divide hidden_size "
                 f"{self.hidden_size} (each of the split_k programs steps block_k over an equal "
                 f"K slice; the kernel has no K masking)")


def _fail_at(spec, loc, field, rule):
    raise SpecError(loc, _spec_name(spec), field, rule)


SPEC_TYPES = (RouterGemmFamily, RouterGemmShape)

def check(registry) -> None:
    """A split-K row may ask for tf32x3 only on NVIDIA hardware with TF32 tensor cores."""
    for rule in registry.tables.get(NAME, ()):
        if not dict(rule.params).get("tf32x3"):
            continue
        hw_pos = [a.name for a in registry.policies[NAME].axes].index("hardware")
        for name in rule.conds[hw_pos] or registry.policies[NAME].axes[hw_pos].values:
            if not supports_tf32x3(registry.hardware[name]):
                raise SpecError(rule.loc, "Policy router_gemm", "params.tf32x3",
                                f"tf32x3 needs NVIDIA compute capability ≥ 8.0 (TF32 tensor "
                                f"cores); the rule covers hardware {name!r}")


def expand(specs: tuple, hardware: dict):
    fam = [s for s in specs if isinstance(s, RouterGemmFamily)]
    shapes = [s for s in specs if isinstance(s, RouterGemmShape)]
    if not shapes:
        return [], [], None
    if len(fam) != 1:
        where = shapes[0].loc
        raise_at = fam[1] if len(fam) > 1 else None
        raise SpecError(raise_at.loc if raise_at else where, "RouterGemmFamily", None,
                        "exactly one RouterGemmFamily spec is required")
    family = fam[0]
    tensors = (family.hidden_states, family.router_weight, family.logits)
    seen = {}
    for shape in shapes:
        key = (shape.hidden_size, shape.num_experts)
        if key in seen:
            fail(shape, "hidden_size/num_experts", f"shape {key} is declared twice (first at "
                                                   f"{seen[key].loc})")
        seen[key] = shape
        missing = [hw for hw in hardware if hw not in shape.launch]
        if missing:
            fail(shape, "launch", f"no launch table for hardware {', '.join(map(repr, missing))}"
                                  f" (every shape needs one per declared target: "
                                  f"{', '.join(hardware)})")
    variants, rules, outside = [], [], []
    for shape in sorted(shapes, key=lambda s: (s.hidden_size, s.num_experts)):
        key = (shape.hidden_size, shape.num_experts)
        cap = token_cap(shape, family)
        if not 1 <= cap <= family.max_tokens:
            fail(shape, "max_tokens", f"must be in 1..{family.max_tokens} (the family's "
                                      f"max_tokens), got {cap}")
        if shape.weight_dtype not in family.router_weight.dtypes:
            fail(shape, "weight_dtype", f"{shape.weight_dtype!r} is not a router_weight dtype "
                                        f"of the family ({', '.join(family.router_weight.dtypes)})")
        if cap < family.max_tokens:
            outside.append(Outside(when={"shape": key,
                                         "num_tokens": between(cap + 1, family.max_tokens)},
                                   reason=f"num_tokens: the {key} router GEMM serves at most "
                                          f"{cap} tokens", loc=shape.loc))
        common = dict(family=NAME, template=TEMPLATE, output=OUTPUT,
                      hardware=tuple(hardware),
                      tensors=tensors, loc=shape.loc)
        for kernel, params, what in ((PER_EXPERT, PARAMS, "fp32 router GEMM"),
                                     (SPLITK, SPLITK_PARAMS, "fp32 split-K router GEMM (tl.dot)")):
            variants.append(Variant(
                name=shape.variant_name(kernel),
                doc=f"{what} for hidden {shape.hidden_size}, {shape.num_experts} experts "
                    f"({shape.models})",
                constants=(("HIDDEN_SIZE", shape.hidden_size),
                           ("NUM_EXPERTS", shape.num_experts), ("KERNEL", kernel)),
                params=params, **common))
        for hw, table in sorted(shape.launch.items()):
            rows = sorted(launch_rows(shape, table), key=lambda r: (r[4] or "", r[0]))
            if isinstance(table, Buckets):
                # one Rule per run of consecutive buckets that use the same kernel
                runs = [(tuple(run), shape.loc, table.loc) for _, run in
                        itertools.groupby(rows, key=lambda r: row_kernel(r[2]))]
            else:  # a measured target: one Rule per data-file row
                runs = [((row,), row[3], row[3]) for row in rows]
            for run, loc, table_loc in runs:
                kernel = row_kernel(run[0][2])
                if kernel == SPLITK:
                    for lo, hi, params, row_loc, _ in run:
                        top = cap if hi is None else min(hi, cap)
                        bm = params.get("block_m")
                        if isinstance(bm, int) and bm < top:
                            _fail_at(shape, row_loc, f"launch.{hw}.block_m",
                                     f"bucket {lo}..{hi}, kernel='splitk': block_m {bm} < {top} "
                                     f"tokens (the split-K kernel has a single row tile, so "
                                     f"block_m must cover the bucket's largest token count)")
                by = Buckets(axis="num_tokens", loc=table_loc,
                             rows=tuple((lo, hi, {k: v for k, v in p.items() if k != "kernel"})
                                        for lo, hi, p, _, _ in run))
                x_dtype = run[0][4]  # a measured row's; None: every x dtype
                when = {"hardware": hw, "shape": key}
                if x_dtype is not None:
                    when["x_dtype"] = x_dtype
                rules.append(Rule(when=when,
                                  variant=shape.variant_name(kernel), by=by, loc=loc,
                                  note=shape.models if kernel == PER_EXPERT
                                  else f"{shape.models}; split-K"))
    shape_values = tuple((s.hidden_size, s.num_experts)
                         for s in sorted(shapes, key=lambda s: (s.hidden_size, s.num_experts)))
    policy = Policy(
        name=NAME, family=NAME, loc=family.loc,
        doc="launch configuration of the router GEMM by weight shape, hidden-states dtype and "
            "token count",
        axes=(
            Axis(name="hardware", kind="enum", values=tuple(hardware), doc="normalized target",
                 loc=family.loc),
            Axis(name="shape", kind="enum", values=shape_values,
                 doc="(hidden_size, num_experts) of the router weight", loc=family.loc),
            Axis(name="x_dtype", kind="enum", values=tuple(family.hidden_states.dtypes),
                 doc="dtype of hidden_states", loc=family.loc),
            Axis(name="num_tokens", kind="int", lo=1, hi=family.max_tokens,
                 doc="rows of hidden_states (M); M = 0 launches nothing", loc=family.loc),
        ),
        rules=tuple(rules), outside=tuple(outside))
    return variants, [policy], family


def token_cap(shape, family) -> int:
    """The most tokens the kernels serve for ``shape``."""
    return family.max_tokens if shape.max_tokens is None else shape.max_tokens


def context(path: str, variants: list, reg) -> dict:
    """Render context of generated/moe_router.py."""

    family = reg.extras[NAME]

    def entries(kernel):
        return [{"key": literal((v.constant("HIDDEN_SIZE"), v.constant("NUM_EXPERTS"))),
                 "variant": v.name, "doc": v.doc, "where": str(v.loc)}
                for v in variants if v.constant("KERNEL") == kernel]

    shapes = sorted(reg.family_specs[NAME], key=lambda s: (getattr(s, "hidden_size", 0),
                                                           getattr(s, "num_experts", 0)))
    limits = [{"key": literal((s.hidden_size, s.num_experts)),
               "weight": TORCH_DTYPES[s.weight_dtype], "cap": token_cap(s, family)}
              for s in shapes if isinstance(s, RouterGemmShape)]

    ctx = {
        "max_tokens": family.max_tokens,
        "limits": limits,
        "shapes": entries(PER_EXPERT),
        "splitk_shapes": entries(SPLITK),
        "kernels": [{"variant": v.name, "kernel": v.constant("KERNEL")} for v in variants],
        # counter slots: ≥ cdiv(N, block_n) for every shape (block_n ≥ SPLITK_MIN_BLOCK)
        "counter_slots": max(-(-v.constant("NUM_EXPERTS") // SPLITK_MIN_BLOCK)
                             for v in variants),
        "splitk_min_block": SPLITK_MIN_BLOCK,
        "x": lower_contract(family.hidden_states),
        "x_dtype_keys": literal(tuple(family.hidden_states.dtypes)),
        "w": lower_contract(family.router_weight),
        "out": lower_contract(family.logits),
        "table": NAME.upper(),
    }
    return ctx
