"""Dispatch policies: axes, rules, bucket tables, and the generation-time proof.

A policy maps a point of its declared domain (hardware × dtype × head_dim × count buckets …)
to a variant and its launch parameters. Rules are *disjoint*: the generator proves that every
point of the domain matches exactly one rule (no gaps, no overlaps, so no rule is shadowed).
Unknown devices are normalized to the ``generic`` hardware target at run time, which is the
explicit fallback: its rules must cover the domain like any other target's.
"""
from __future__ import annotations

import hashlib
import math
from typing import Any

import attrs

from .model import Location, Param, SpecError, _to_tuple, fail, identifier, one_of_values, \
    seq_of, spec_class, typed, LOC


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)

# ---------------------------------------------------------------------------------------------
# Conditions


@attrs.frozen
class OneOf:
    values: tuple

    def __str__(self) -> str:
        return " | ".join(_fmt(v) for v in self.values)


@attrs.frozen
class NoneOf:
    values: tuple

    def __str__(self) -> str:
        return "not " + " | ".join(_fmt(v) for v in self.values)


@attrs.frozen
class Between:
    lo: int
    hi: int | None  # None: unbounded above

    def __str__(self) -> str:
        if self.hi is None:
            return f"≥ {self.lo}"
        return str(self.lo) if self.lo == self.hi else f"{self.lo}..{self.hi}"


def one_of(*values) -> OneOf:
    return OneOf(tuple(values))


def none_of(*values) -> NoneOf:
    return NoneOf(tuple(values))


def between(lo: int, hi: int) -> Between:
    return Between(lo, hi)


def at_least(lo: int) -> Between:
    return Between(lo, None)


def _fmt(v) -> str:
    if isinstance(v, tuple):
        return "(" + ", ".join(str(x) for x in v) + ")"
    return str(v)


# ---------------------------------------------------------------------------------------------
# Spec classes


@spec_class
class Axis:
    """One dimension of a policy's domain: an enum of values, or an integer range."""

    name: str = attrs.field(validator=identifier)
    kind: str = attrs.field(validator=one_of_values("enum", "int"))
    doc: str = attrs.field(validator=typed(str))
    values: tuple = attrs.field(default=(), converter=_to_tuple, validator=typed(tuple))
    lo: int = attrs.field(default=0, validator=typed(int))
    hi: int | None = attrs.field(default=None, validator=typed(int, optional=True))
    loc: Location = LOC

    def __attrs_post_init__(self):
        if self.kind == "enum":
            if not self.values:
                fail(self, "values", "an enum axis needs at least one value")
            for v in self.values:
                try:
                    hash(v)
                except TypeError:
                    fail(self, "values", f"values are matched as keys: {v!r} is not hashable "
                                         f"(a tuple, not a list?)")
            if len(set(self.values)) != len(self.values):
                twice = sorted({repr(v) for v in self.values if self.values.count(v) > 1})
                fail(self, "values", f"values must be distinct: {', '.join(twice)} given more "
                                     f"than once")
        elif self.values:
            fail(self, "values", "only enum axes take values (int axes take lo/hi)")
        elif self.hi is not None and self.hi < self.lo:
            fail(self, "hi", f"must be ≥ lo ({self.lo}), got {self.hi}")


@spec_class
class Buckets:
    """A bucket table along one int axis: rows of (lo, hi, {param: value})."""

    axis: str = attrs.field(validator=identifier)
    rows: tuple = attrs.field(converter=_to_tuple, validator=seq_of(tuple))
    loc: Location = LOC

    @rows.validator
    def _rows(self, attribute, value):
        for row in value:
            if len(row) != 3 or not _is_int(row[0]) or \
                    not (row[1] is None or _is_int(row[1])) or not isinstance(row[2], dict):
                fail(self, "rows", f"rows must be (lo, hi or None, {{params}}), got {row!r}")
            if row[1] is not None and row[1] < row[0]:
                fail(self, "rows", f"bucket {row[0]}..{row[1]} is empty")
        ordered = sorted(value, key=lambda r: r[0])
        for a, b in zip(ordered, ordered[1:]):
            if a[1] is None or a[1] >= b[0]:
                fail(self, "rows", f"buckets {Between(a[0], a[1])} and {Between(b[0], b[1])} overlap")
            if a[1] + 1 != b[0]:
                fail(self, "rows", f"gap between buckets {Between(a[0], a[1])} and "
                                   f"{Between(b[0], b[1])}: {a[1] + 1}..{b[0] - 1} is not covered")


@spec_class
class Rule:
    """When every condition holds, use ``variant`` with ``params``.

    ``when`` maps axis names to a value, ``one_of(...)``, ``none_of(...)`` or ``between(lo, hi)``;
    axes it leaves out match anything. ``by`` expands the rule over a bucket table, each bucket
    adding its own parameters.
    """

    when: dict = attrs.field(validator=typed(dict))
    variant: str = attrs.field(validator=identifier)
    params: dict = attrs.field(factory=dict, validator=typed(dict))
    by: Buckets | None = attrs.field(default=None, validator=typed(Buckets, optional=True))
    note: str = attrs.field(default="", validator=typed(str))
    loc: Location = LOC


@spec_class
class Outside:
    """A region of the axes' product that is not part of the domain (no rule may cover it): the
    dispatcher rejects its points with ``reason``, a ValueError message naming the argument.
    E.g. a router weight shape that serves fewer tokens than the num_tokens axis spans."""

    when: dict = attrs.field(validator=typed(dict))
    reason: str = attrs.field(validator=typed(str))
    loc: Location = LOC


@spec_class
class Policy:
    """An ordered table of disjoint rules over a declared domain (the axes' product less the
    ``outside`` regions)."""

    name: str = attrs.field(validator=identifier)
    family: str = attrs.field(validator=identifier)
    doc: str = attrs.field(validator=typed(str))
    axes: tuple = attrs.field(converter=_to_tuple, validator=seq_of(Axis))
    rules: tuple = attrs.field(converter=_to_tuple, validator=seq_of(Rule))
    outside: tuple = attrs.field(default=(), converter=_to_tuple, validator=seq_of(Outside))
    # the variants its rules may pick (empty: any of the family's); a rule, or a data file's
    # row, naming another is refused where it is written
    variants: tuple = attrs.field(default=(), converter=_to_tuple, validator=seq_of(str))
    loc: Location = LOC

    @axes.validator
    def _axes(self, attribute, value):
        names = [a.name for a in value]
        if not names or names[0] != "hardware":
            fail(self, "axes", "the first axis must be 'hardware'")
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            fail(self, "axes", f"axis declared twice: {', '.join(dup)}")

    def axis(self, name: str) -> Axis:
        return {a.name: a for a in self.axes}[name]


# ---------------------------------------------------------------------------------------------
# Regions of enum axes: what a measured target's data covers, and the declared rules elsewhere


def elsewhere(prefix: dict, points: list, domains: dict) -> list:
    """Disjoint `when` dicts (under ``prefix``) covering every point of the enum product
    ``domains`` (axis → values) that is not one of ``points``: per axis, the values no point
    has in one piece, then each value some point has, recursively over the remaining axes."""
    if not points:
        return [prefix]  # nothing measured under this prefix
    if not domains:
        return []  # the prefix is a measured point
    (axis, values), rest = next(iter(domains.items())), dict(list(domains.items())[1:])
    taken = [v for v in values if any(p[axis] == v for p in points)]
    others = [v for v in values if v not in taken]
    out = [dict(prefix, **{axis: others[0] if len(others) == 1 else one_of(*others)})] \
        if others else []
    for v in taken:
        out += elsewhere(dict(prefix, **{axis: v}), [p for p in points if p[axis] == v], rest)
    return out


def _allowed(cond, domain) -> set:
    if cond is None:
        return set(domain)
    if isinstance(cond, OneOf):
        return set(cond.values)
    if isinstance(cond, NoneOf):
        return set(domain) - set(cond.values)
    return {cond}


def meet(when: dict, region: dict, domains: dict) -> dict | None:
    """``when`` restricted to ``region`` (None where they do not meet). Enum axes of
    ``domains`` intersect; any other axis of ``region`` must agree with ``when`` or be absent
    from it."""
    out = dict(when)
    for axis, cond in region.items():
        if axis not in domains:
            if axis in out and out[axis] != cond:
                raise ValueError(f"meet: axis {axis!r} is {out[axis]} and {cond}")
            out[axis] = cond
            continue
        both = _allowed(when.get(axis), domains[axis]) & _allowed(cond, domains[axis])
        if not both:
            return None
        ordered = [v for v in domains[axis] if v in both]
        out[axis] = ordered[0] if len(ordered) == 1 else one_of(*ordered)
    return out


def restricted(rules: list, regions: list, domains: dict) -> list:
    """Every rule on each region it meets (same launch, same spec line): e.g. the declared
    rules of the inputs a measured target's data file has no rows for."""
    return [attrs.evolve(rule, when=w) for rule in rules for region in regions
            if (w := meet(rule.when, region, domains)) is not None]


# ---------------------------------------------------------------------------------------------
# Flattened rules: what the generated dispatcher holds


@attrs.frozen
class FlatRule:
    index: int
    conds: tuple  # one per axis: None (any), tuple of allowed values (enum), Between (int)
    variant: str | None  # None: an Outside region (note: why its points are rejected)
    params: tuple  # ((name, value), ...) in the variant's parameter order
    loc: Location
    note: str

    def matches(self, point: tuple) -> bool:
        # a plain loop, not all(...): the proof and the tests call this millions of times
        for cond, value in zip(self.conds, point):
            if cond is not None and not _holds(cond, value):
                return False
        return True


def _holds(cond, value) -> bool:
    """One axis condition of a FlatRule: None (any), a Between, or a tuple of allowed values."""
    if cond is None:
        return True
    if isinstance(cond, Between):
        return cond.lo <= value and (cond.hi is None or value <= cond.hi)
    return value in cond


def _norm_enum(policy: Policy, rule: Rule, axis: Axis, raw: Any) -> tuple:
    if isinstance(raw, OneOf):
        values = raw.values
    elif isinstance(raw, NoneOf):
        values = tuple(v for v in axis.values if v not in raw.values)
        bad = [v for v in raw.values if v not in axis.values]
        if bad:
            fail(rule, f"when.{axis.name}", f"value {bad[0]!r} is not in the axis domain "
                                            f"({', '.join(_fmt(v) for v in axis.values)})")
    elif isinstance(raw, Between):
        fail(rule, f"when.{axis.name}", "a range needs an int axis; this axis is an enum")
    else:
        values = (raw,)
    for v in values:
        if v not in axis.values:
            fail(rule, f"when.{axis.name}", f"value {v!r} is not in the axis domain "
                                            f"({', '.join(_fmt(v) for v in axis.values)})")
    if not values:
        fail(rule, f"when.{axis.name}", "condition matches no value")
    # Keep the axis' declared order so the generated table is stable.
    return tuple(v for v in axis.values if v in values)


def _norm_int(rule: Rule, axis: Axis, raw: Any) -> Between:
    if isinstance(raw, bool) or not isinstance(raw, (int, Between)):
        fail(rule, f"when.{axis.name}", f"an int axis takes an int or between(lo, hi), got {raw!r}")
    cond = Between(raw, raw) if isinstance(raw, int) else raw
    if not all(isinstance(v, int) and not isinstance(v, bool)
               for v in (cond.lo, cond.hi) if v is not None) or cond.lo is None:
        fail(rule, f"when.{axis.name}", f"between takes ints (hi None: unbounded), got "
                                        f"{cond.lo!r}, {cond.hi!r}")
    if cond.hi is not None and cond.hi < cond.lo:
        fail(rule, f"when.{axis.name}", f"range {cond.lo}..{cond.hi} is empty")
    if cond.hi is None and axis.hi is not None:
        cond = Between(cond.lo, axis.hi)  # "at least lo" ends where the domain ends
    if cond.lo < axis.lo or (axis.hi is not None and cond.hi > axis.hi):
        fail(rule, f"when.{axis.name}",
             f"range {cond} leaves the axis domain {Between(axis.lo, axis.hi)}")
    return cond


def _intersect(a: Between | None, b: Between) -> Between | None:
    if a is None:
        return b
    lo = max(a.lo, b.lo)
    his = [h for h in (a.hi, b.hi) if h is not None]
    hi = min(his) if his else None
    if hi is not None and hi < lo:
        return None
    return Between(lo, hi)


def flatten(policy: Policy, variants: dict) -> tuple[FlatRule, ...]:
    """Validate every rule against the axes and variants, expand bucket tables, prove the table.

    ``variants`` maps variant name → Variant. Raises SpecError on the first broken rule.
    """
    axes = {a.name: a for a in policy.axes}
    out: list[FlatRule] = []
    for rule in policy.rules:
        for key in sorted(rule.when):
            if key not in axes:
                fail(rule, f"when.{key}", f"policy '{policy.name}' has no axis {key!r} "
                                          f"(axes: {', '.join(axes)})")
        variant = variants.get(rule.variant)
        if variant is None or variant.family != policy.family:
            known = sorted(n for n, v in variants.items() if v.family == policy.family)
            fail(rule, "variant", f"no variant {rule.variant!r} in family '{policy.family}' "
                                  f"(known: {', '.join(known) or 'none'})")
        if policy.variants and rule.variant not in policy.variants:
            fail(rule, "variant", f"policy '{policy.name}' picks one of "
                                  f"{', '.join(policy.variants)}, got {rule.variant!r}")
        conds = []
        for axis in policy.axes:
            raw = rule.when.get(axis.name)
            if raw is None:
                conds.append(None)
            elif axis.kind == "enum":
                conds.append(_norm_enum(policy, rule, axis, raw))
            else:
                conds.append(_norm_int(rule, axis, raw))
        hw = conds[0] if conds[0] is not None else axes["hardware"].values
        off = [h for h in hw if h not in variant.hardware]
        if off:
            fail(rule, "variant", f"variant '{variant.name}' is not declared for hardware "
                                  f"{off[0]!r} (it supports: {', '.join(variant.hardware)})")
        pieces = [(conds, dict(rule.params), rule.note)]
        if rule.by is not None:
            if rule.by.axis not in axes or axes[rule.by.axis].kind != "int":
                fail(rule, "by.axis", f"bucket axis must be an int axis of the policy, "
                                      f"got {rule.by.axis!r}")
            pos = list(axes).index(rule.by.axis)
            domain = Between(axes[rule.by.axis].lo, axes[rule.by.axis].hi)
            pieces = []
            for lo, hi, extra in rule.by.rows:
                if lo < domain.lo or (domain.hi is not None and hi is not None and hi > domain.hi):
                    fail(rule.by, "rows", f"bucket {Between(lo, hi)} leaves the domain "
                                          f"{domain} of axis {rule.by.axis!r} (policy "
                                          f"'{policy.name}', rule at {rule.loc})")
                clipped = _intersect(conds[pos], Between(lo, hi))
                if clipped is None:
                    continue
                both = sorted(set(extra) & set(rule.params))
                if both:
                    fail(rule, f"by.{both[0]}", "set both by the rule and by its bucket")
                c = list(conds)
                c[pos] = clipped
                pieces.append((c, {**rule.params, **extra}, rule.note))
            if not pieces:
                fail(rule, "by", "no bucket intersects the rule's own range")
        for c, params, note in pieces:
            variant.check_params(rule, "params", params)
            ordered = tuple((p.name, params[p.name]) for p in variant.params)
            out.append(FlatRule(len(out), tuple(c), variant.name, ordered, rule.loc, note))
    # Regions outside the domain take part in the proof as rules without a variant: a rule
    # covering one of their points is an overlap, and the dispatcher rejects them by name.
    for region in policy.outside:
        for key in sorted(region.when):
            if key not in axes:
                fail(region, f"when.{key}", f"policy '{policy.name}' has no axis {key!r}")
        conds = tuple(None if region.when.get(a.name) is None else
                      _norm_enum(policy, region, a, region.when[a.name]) if a.kind == "enum"
                      else _norm_int(region, a, region.when[a.name]) for a in policy.axes)
        out.append(FlatRule(len(out), conds, None, (), region.loc, region.reason))
    prove(policy, out)
    return tuple(out)


def _cells(policy: Policy, rules: list[FlatRule]) -> list[list]:
    """Representative values of the elementary cells of each axis."""
    cells = []
    for i, axis in enumerate(policy.axes):
        if axis.kind == "enum":
            cells.append(list(axis.values))
            continue
        cuts = {axis.lo}
        for r in rules:
            c = r.conds[i]
            if c is not None:
                cuts.add(c.lo)
                if c.hi is not None:
                    cuts.add(c.hi + 1)
        top = None if axis.hi is None else axis.hi + 1
        cells.append(sorted(x for x in cuts if top is None or x < top))
    return cells


def describe_point(policy: Policy, point: tuple) -> str:
    return ", ".join(f"{a.name}={_fmt(v)}" for a, v in zip(policy.axes, point))


# Proofs that succeeded in this process, keyed by the content they proved (axes and rule
# conditions; spec locations do not change the outcome). Repeated registry loads of the same
# specs (the tuner's self-test loads them dozens of times) then cost one hash each.
_PROVED: dict[str, int] = {}


def _proof_key(policy: Policy, rules) -> str:
    axes = tuple((a.name, a.kind, a.values, a.lo, a.hi) for a in policy.axes)
    return hashlib.sha256(repr((axes, tuple(r.conds for r in rules))).encode()).hexdigest()


def prove(policy: Policy, rules) -> int:
    """Every point of the domain matches exactly one rule. Returns the number of cells covered.

    The domain is the product of each axis' elementary cells (``_cells``). Instead of testing
    every rule at every point, each cell of each axis gets the bitmask of the rules that hold
    there; a depth-first walk over the axes ANDs the masks, so a leaf's mask is exactly the
    rules matching that point. A sub-product is walked once per (depth, mask): its outcome
    depends on nothing else. The walk visits points in ``itertools.product`` order, so the
    first gap or overlap reported is the first bad point of the product, naming the two
    lowest-indexed matching rules.
    """
    key = _proof_key(policy, rules)
    if key in _PROVED:
        return _PROVED[key]
    cells = _cells(policy, rules)
    masks = [[sum(1 << k for k, r in enumerate(rules) if _holds(r.conds[i], value))
              for value in axis_cells] for i, axis_cells in enumerate(cells)]
    covered: set = set()  # (depth, mask) whose sub-product is known to be covered exactly once

    def walk(depth: int, live: int, prefix: tuple) -> None:
        if depth == len(cells):
            if not live:
                raise SpecError(policy.loc, f"Policy {policy.name}", "rules",
                                f"gap: no rule covers {describe_point(policy, prefix)} "
                                f"(add a rule or widen a bucket){_bordering(policy, rules, prefix)}")
            if live & (live - 1):
                first = (live & -live).bit_length() - 1
                rest = live & (live - 1)
                a, b = rules[first], rules[(rest & -rest).bit_length() - 1]
                raise SpecError(b.loc, f"Policy {policy.name}", "rules",
                                f"overlap: rule at {b.loc} and rule at {a.loc} both cover "
                                f"{describe_point(policy, prefix)} (rules must be disjoint)")
            return
        if (depth, live) in covered:
            return
        for value, mask in zip(cells[depth], masks[depth]):
            walk(depth + 1, live & mask, prefix + (value,))
        covered.add((depth, live))

    walk(0, (1 << len(rules)) - 1, ())
    _PROVED[key] = math.prod(len(c) for c in cells)
    return _PROVED[key]


def _bordering(policy: Policy, rules, point: tuple, most: int = 2) -> str:
    """The rules of the point's hardware that would cover ``point`` but for one axis (where a
    gap's neighbours are written: a rule's spec line or a data file's row), as a clause of a
    gap's message."""
    near = []
    for rule in rules:
        missed = [a.name for a, cond, v in zip(policy.axes, rule.conds, point)
                  if not _holds(cond, v)]
        if len(missed) == 1 and missed != ["hardware"]:
            near.append(f"{rule.loc} (all but {missed[0]})")
        if len(near) == most:
            break
    return "; rules next to it: " + ", ".join(near) if near else ""


def lookup(policy: Policy, rules: tuple[FlatRule, ...], point: tuple) -> FlatRule:
    for r in rules:
        if r.matches(point):
            if r.variant is None:
                raise LookupError(f"policy '{policy.name}': {describe_point(policy, point)} is "
                                  f"outside the domain ({r.note})")
            return r
    raise LookupError(f"policy '{policy.name}': no rule for {describe_point(policy, point)}")


__all__ = ["Axis", "Between", "Buckets", "FlatRule", "NoneOf", "OneOf", "Outside", "Param",
           "Policy",
           "Rule", "at_least", "between", "flatten", "lookup", "none_of", "one_of", "prove"]
