"""Load `specs/`, lower family specs to variants and policies, and validate the whole set.

One registry drives everything: generation, the dispatch tables, `codegen list/explain` and
test parametrization.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from typing import Any

import attrs

from . import families
from .model import Hardware, Location, SpecError, Variant, distinct_names, set_location_root
from .policy import FlatRule, Policy, flatten

# A source checkout holds specs/ and generated/ next to codegen/; an installed codegen (in
# site-packages) has neither, and its neighbours are other packages: defaults only in a checkout.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IN_CHECKOUT = os.path.isfile(os.path.join(ROOT, "pyproject.toml")) and \
    os.path.isfile(os.path.join(ROOT, "specs", "__init__.py"))
DEFAULT_SPECS = os.path.join(ROOT, "specs") if IN_CHECKOUT else None


@attrs.frozen
class Registry:
    hardware: dict  # name -> Hardware
    variants: dict  # name -> Variant (sorted by name)
    policies: dict  # name -> Policy
    tables: dict  # policy name -> tuple[FlatRule]
    family_specs: dict  # family -> tuple of family spec objects (as written in specs/)
    extras: dict  # family -> extra render data returned by the family's expand()

    def rules(self, policy: str) -> tuple:
        """The flattened rules of ``policy`` that choose a variant and its launch (its table
        without the Outside regions, which only say why their points are refused)."""
        return tuple(r for r in self.tables[policy] if r.variant is not None)


def _import_dir(spec_dir: str):
    """Import ``spec_dir`` as a package under a private name; yield its submodules in name order."""
    spec_dir = os.path.abspath(spec_dir)
    init = os.path.join(spec_dir, "__init__.py")
    if not os.path.exists(init):
        raise SpecError(None, spec_dir, None, "spec directory must be a package (__init__.py)")
    pkg_name = "_kspec_specs_" + hashlib.sha256(spec_dir.encode()).hexdigest()[:12]
    for name in [m for m in sys.modules if m == pkg_name or m.startswith(pkg_name + ".")]:
        del sys.modules[name]
    spec = importlib.util.spec_from_file_location(pkg_name, init,
                                                  submodule_search_locations=[spec_dir])
    pkg = importlib.util.module_from_spec(spec)
    sys.modules[pkg_name] = pkg
    spec.loader.exec_module(pkg)
    modules = []
    for fname in sorted(os.listdir(spec_dir)):
        if fname.endswith(".py") and fname != "__init__.py":
            modules.append(importlib.import_module(f"{pkg_name}.{fname[:-3]}"))
    return modules


def _check_unique(objs: list) -> dict:
    return {obj.name: obj for obj in distinct_names(tuple(objs))}


def load(spec_dir: str | None = None) -> Registry:
    """Load the spec package ``spec_dir`` (default: the checkout's specs/)."""
    spec_dir = spec_dir or DEFAULT_SPECS
    if spec_dir is None:
        raise ValueError("spec_dir: codegen is installed, not run from a checkout, so there is "
                         "no default specs/; pass the spec package directory")
    previous = set_location_root(os.path.dirname(os.path.abspath(spec_dir)))
    try:
        return _load(spec_dir)
    finally:
        set_location_root(previous)


def _load(spec_dir: str) -> Registry:
    collected: list = []
    for module in _import_dir(spec_dir):
        collected.extend(getattr(module, "SPECS", ()))

    hardware = _check_unique([s for s in collected if isinstance(s, Hardware)])
    for needed in ("generic",):
        if needed not in hardware:
            where = next(iter(hardware.values())).loc if hardware else \
                Location(os.path.join(os.path.basename(os.path.abspath(spec_dir)), ""), 0)
            raise SpecError(where, "Hardware", "name",
                            f"the fallback hardware target {needed!r} must be declared "
                            f"(beside the other targets)")
    # every name first: an alias that repeats another target's name or alias is the error of
    # the target declaring it
    aliases: dict[str, str] = {hw.name: hw.name for hw in hardware.values()}
    for hw in hardware.values():
        for alias in hw.aliases:
            if alias in aliases and aliases[alias] != hw.name:
                raise SpecError(hw.loc, f"Hardware {hw.name}", "aliases",
                                f"alias {alias!r} already names {aliases[alias]!r}")
            aliases[alias] = hw.name

    variants = [s for s in collected if isinstance(s, Variant)]
    policies = [s for s in collected if isinstance(s, Policy)]
    family_specs: dict[str, tuple] = {}
    extras: dict[str, Any] = {}
    for family in families.ALL:
        mine = tuple(s for s in collected if isinstance(s, family.SPEC_TYPES))
        family_specs[family.NAME] = mine
        v, p, extra = family.expand(mine, hardware)
        variants.extend(v)
        policies.extend(p)
        extras[family.NAME] = extra
    unknown = [s for s in collected if not isinstance(
        s, (Hardware, Variant, Policy) + tuple(t for f in families.ALL for t in f.SPEC_TYPES))]
    if unknown:
        obj = unknown[0]
        raise SpecError(getattr(obj, "loc", None), type(obj).__name__, None,
                        "SPECS may hold only Hardware, Variant, Policy or family spec objects")

    variant_map = _check_unique(variants)
    for v in variant_map.values():
        for hw in v.hardware:
            if hw not in hardware:
                raise SpecError(v.loc, f"Variant {v.name}", "hardware",
                                f"unknown hardware target {hw!r} "
                                f"(declared: {', '.join(sorted(hardware))})")
    policy_map = _check_unique(policies)
    tables = {}
    for policy in policy_map.values():
        hw_axis = policy.axis("hardware")
        for hw in hw_axis.values:
            if hw not in hardware:
                raise SpecError(hw_axis.loc, f"Policy {policy.name}", "axes.hardware",
                                f"unknown hardware target {hw!r}")
        tables[policy.name] = flatten(policy, variant_map)
    reg = Registry(
        hardware=dict(sorted(hardware.items())),
        variants=dict(sorted(variant_map.items())),
        policies=dict(sorted(policy_map.items())),
        tables=tables,
        family_specs=family_specs,
        extras=extras,
    )
    for family in families.ALL:
        if hasattr(family, "check"):
            family.check(reg)
    return reg


def hardware_aliases(reg: Registry) -> dict:
    out = {}
    for hw in reg.hardware.values():
        for alias in (hw.name,) + hw.aliases:
            out[alias] = hw.name
    return dict(sorted(out.items()))


def rules_for_variant(reg: Registry, variant: str) -> list[tuple[str, FlatRule]]:
    return [(p, r) for p, rules in reg.tables.items() for r in rules if r.variant == variant]
