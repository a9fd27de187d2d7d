"""Spec model: frozen attrs classes that `specs/` instantiates.

Every spec object remembers where it was written (``loc``: ``specs/file.py:line``) and every
rule it breaks is reported as a :class:`SpecError` naming that place, the spec, the field and
the rule. Nothing in here knows about a particular kernel family; families add their own spec
classes in ``codegen/families/``.
"""
from __future__ import annotations

import math
import os
import sys
from typing import Any, Callable

import attrs

# ---------------------------------------------------------------------------------------------
# Locations and errors


@attrs.frozen(order=True)
class Location:
    file: str
    line: int
    # A row of a measured target's data file: its table, target and bucket
    # (e.g. "router_gemm row sm_90: shape 6144x128, num_tokens 2–4"), shown after file:line.
    row: str = ""
    # An object built inside a helper function of the spec file: the top-level line that
    # called the helper (line is the object's own), shown as "file:line (via :via)".
    via: int = 0

    def __str__(self) -> str:
        return (f"{self.file}:{self.line}" + (f" (via :{self.via})" if self.via else "")
                + (f" ({self.row})" if self.row else ""))

    @property
    def citation(self) -> str:
        """Where generated code and `explain` say a rule comes from: a data-file row by its
        table and bucket, which name it uniquely and stay put when a re-tune adds runs or rows
        above it (so a re-tune's diff of generated/ is the rows it changed); a spec line as
        ``str`` gives it. Errors keep the line (`SpecError`)."""
        return f"{self.file} ({self.row})" if self.row else str(self)


_HERE = os.path.dirname(os.path.abspath(__file__))
# Spec locations read "specs/x.py:12": relative to the directory holding the spec package being
# loaded (registry.load sets it), so generated headers carry no absolute path, also when an
# installed codegen renders a spec directory given with --specs.
_location_root = os.path.dirname(_HERE)


def set_location_root(path: str) -> str:
    """Show spec locations relative to ``path`` from now on; returns the previous root."""
    global _location_root
    previous, _location_root = _location_root, os.path.abspath(path)
    return previous


def _relative(path: str) -> str:
    path = os.path.abspath(path)
    try:
        rel = os.path.relpath(path, _location_root)
    except ValueError:  # pragma: no cover - other drive on Windows
        return path
    return path if rel.startswith("..") else rel


def caller_location() -> Location:
    """The spec line that built the object: the innermost frame in the first spec file found
    outside codegen/ and attrs, and, when that frame is a helper function of the spec file,
    the top-level statement that called it (``via``)."""
    frame = sys._getframe(1)
    while frame is not None:
        fname = frame.f_code.co_filename
        inside = os.path.abspath(fname).startswith(_HERE + os.sep) or fname.startswith("<attrs")
        if not inside and "/attr/" not in fname and "/attrs/" not in fname:
            line = via = frame.f_lineno
            outer = frame.f_back
            while outer is not None and outer.f_code.co_filename == fname:
                via = outer.f_lineno
                outer = outer.f_back
            return Location(_relative(fname), line, via=via if via != line else 0)
        frame = frame.f_back
    return Location("<unknown>", 0)


class SpecError(ValueError):
    """A spec breaks a rule. The message names file:line, spec, field and rule."""

    def __init__(self, loc: Location | None, spec: str, field: str | None, rule: str):
        self.loc, self.spec, self.field, self.rule = loc, spec, field, rule
        where = f"{loc}: " if loc else ""
        what = f"spec '{spec}'" + (f", field '{field}'" if field else "")
        super().__init__(f"{where}{what}: {rule}")


def _spec_name(inst: Any) -> str:
    name = getattr(inst, "name", None)
    return f"{type(inst).__name__} {name}" if name else type(inst).__name__


def fail(inst: Any, field: str | None, rule: str) -> None:
    raise SpecError(getattr(inst, "loc", None), _spec_name(inst), field, rule)


def distinct_names(specs: tuple) -> tuple:
    """``specs`` unchanged, after checking that no two share a name (SpecError at the second,
    naming the first's line). For spec tuples other specs are built from at import time (the
    hardware targets every policy's hardware axis lists), so that a repeat is reported where
    it is written rather than in the first axis built from it."""
    seen: dict = {}
    for spec in specs:
        if spec.name in seen:
            fail(spec, "name", f"two specs with the same name (first at {seen[spec.name].loc})")
        seen[spec.name] = spec
    return specs


# ---------------------------------------------------------------------------------------------
# Validators (each raises SpecError naming the field)


def typed(*types: type, optional: bool = False) -> Callable:
    allowed = tuple(types)

    def check(inst, attribute, value):
        if value is None and optional:
            return
        # bool is an int subclass; an int field must not silently accept True.
        if isinstance(value, bool) and bool not in allowed:
            ok = False
        else:
            ok = isinstance(value, allowed)
        if not ok:
            names = " or ".join(t.__name__ for t in allowed) + (" or None" if optional else "")
            fail(inst, attribute.name, f"must be {names}, got {type(value).__name__} {value!r}")

    return check


def seq_of(*types: type) -> Callable:
    def check(inst, attribute, value):
        if not isinstance(value, tuple):
            fail(inst, attribute.name, f"must be a tuple, got {type(value).__name__}")
        for item in value:
            if not isinstance(item, types) or (isinstance(item, bool) and bool not in types):
                names = " or ".join(t.__name__ for t in types)
                fail(inst, attribute.name, f"items must be {names}, got {item!r}")

    return check


def one_of_values(*values) -> Callable:
    """The field must be one of ``values`` (SpecError naming the field and the choices)."""

    def check(inst, attribute, value):
        if isinstance(value, bool) or value not in values:
            fail(inst, attribute.name, f"must be one of {', '.join(map(str, values))}, got "
                                       f"{value!r}")

    return check


def is_pow2(n: int) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n > 0 and n & (n - 1) == 0


def identifier(inst, attribute, value):
    if not isinstance(value, str) or not value.isidentifier() or value != value.lower():
        fail(inst, attribute.name, f"must be a lower-case identifier, got {value!r}")


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _to_tuple(value):
    if isinstance(value, (list, tuple)):
        return tuple(value)
    return value


def spec_class(cls):
    """Frozen, keyword-only attrs class whose unknown/missing fields raise SpecError."""
    cls = attrs.frozen(kw_only=True)(cls)
    init = cls.__init__
    names = {a.name for a in attrs.fields(cls)}
    required = [a.name for a in attrs.fields(cls) if a.default is attrs.NOTHING]

    def __init__(self, *args, **kwargs):
        if args:
            raise SpecError(caller_location(), cls.__name__, None,
                            "fields must be given by keyword")
        loc = kwargs.get("loc") or caller_location()
        label = f"{cls.__name__} {kwargs['name']}" if isinstance(kwargs.get("name"), str) \
            else cls.__name__
        for key in sorted(kwargs):
            if key not in names:
                raise SpecError(loc, label, key,
                                f"unknown field (known: {', '.join(sorted(names - {'loc'}))})")
        for key in required:
            if key not in kwargs:
                raise SpecError(loc, label, key, "missing required field")
        kwargs["loc"] = loc
        init(self, **kwargs)

    cls.__init__ = __init__
    return cls


LOC = attrs.field(default=None, eq=False, repr=False)

# ---------------------------------------------------------------------------------------------
# Hardware targets

DTYPES = ("bf16", "fp16", "fp32", "fp8e4m3", "fp8e5m2", "int32", "int64")


@spec_class
class Hardware:
    """A normalized hardware target. ``aliases`` are other spellings users may pass."""

    name: str = attrs.field(validator=identifier)
    vendor: str = attrs.field(validator=one_of_values("amd", "nvidia", "any"))
    description: str = attrs.field(validator=typed(str))
    # How a live device is recognised: AMD gcnArchName prefix or NVIDIA (major, minor).
    gcn_arch: str | None = attrs.field(default=None, validator=typed(str, optional=True))
    capability: tuple | None = attrs.field(default=None, converter=_to_tuple,
                                           validator=typed(tuple, optional=True))
    aliases: tuple = attrs.field(default=(), converter=_to_tuple, validator=seq_of(str))
    loc: Location = LOC

    @capability.validator
    def _capability(self, attribute, value):
        if value is not None and not (len(value) == 2 and all(
                _is_count(v) for v in value)):
            fail(self, "capability", f"must be (major, minor), two ints ≥ 0, got {value!r}")

    @aliases.validator
    def _aliases(self, attribute, value):
        for alias in value:  # users' spellings are matched lower-cased (normalize_hardware)
            if not alias or alias != alias.strip().lower():
                fail(self, "aliases", f"must be lower case, non-empty and unpadded, got {alias!r}")


# ---------------------------------------------------------------------------------------------
# Kernel variants


@spec_class
class TensorContract:
    """What a kernel argument must be: rank, dtypes, contiguity."""

    name: str = attrs.field(validator=identifier)
    rank: int = attrs.field(validator=typed(int))
    dtypes: tuple = attrs.field(converter=_to_tuple, validator=seq_of(str))
    contiguous: bool = attrs.field(default=False, validator=typed(bool))
    doc: str = attrs.field(default="", validator=typed(str))
    loc: Location = LOC

    @rank.validator
    def _rank(self, attribute, value):
        if not 0 <= value <= 4:
            fail(self, "rank", f"must be in 0..4, got {value}")

    @dtypes.validator
    def _dtypes(self, attribute, value):
        if not value:
            fail(self, "dtypes", "must name at least one dtype")
        for d in value:
            if d not in DTYPES:
                fail(self, "dtypes", f"unknown dtype {d!r} (known: {', '.join(DTYPES)})")


@spec_class
class Param:
    """A launch parameter a variant accepts (chosen by a dispatch rule)."""

    name: str = attrs.field(validator=identifier)
    kind: str = attrs.field(validator=one_of_values("int", "bool"))
    pow2: bool = attrs.field(default=False, validator=typed(bool))
    optional: bool = attrs.field(default=False, validator=typed(bool))  # None = backend default
    minimum: int = attrs.field(default=1, validator=typed(int))
    maximum: int = attrs.field(default=1 << 16, validator=typed(int))
    doc: str = attrs.field(default="", validator=typed(str))
    loc: Location = LOC

    def __attrs_post_init__(self):
        if self.kind == "int" and self.maximum < self.minimum:
            fail(self, "maximum", f"must be ≥ minimum ({self.minimum}), got {self.maximum}")

    def rule(self) -> tuple:
        """(kind, pow2, minimum, maximum, optional): what a launch given by hand is held to
        (generated `_runtime.LAUNCH_PARAMS`); a bool's range is 0..1."""
        if self.kind == "bool":
            return (self.kind, False, 0, 1, self.optional)
        return (self.kind, self.pow2, self.minimum, self.maximum, self.optional)

    def check(self, owner: Any, field: str, value: Any) -> None:
        """Raise SpecError (against ``owner``) unless ``value`` is valid for this parameter."""
        where = f"{field}.{self.name}"
        if value is None:
            if not self.optional:
                fail(owner, where, "must not be None")
            return
        if self.kind == "bool":
            if not isinstance(value, bool):
                fail(owner, where, f"must be bool, got {value!r}")
            return
        if isinstance(value, bool) or not isinstance(value, int):
            fail(owner, where, f"must be int, got {value!r}")
        if self.pow2 and not is_pow2(value):
            fail(owner, where, f"must be a power of two, got {value}")
        if not self.minimum <= value <= self.maximum:
            fail(owner, where, f"must be in {self.minimum}..{self.maximum}, got {value}")


NUM_WARPS = Param(name="num_warps", kind="int", pow2=True, maximum=16, optional=True,
                  doc="warps per program (None: Triton's default)")
NUM_STAGES = Param(name="num_stages", kind="int", maximum=8, optional=True,
                   doc="software-pipelining depth (None: Triton's default)")


@spec_class
class Variant:
    """One kernel entry the dispatcher can choose.

    ``constants`` are compile-time facts baked into the generated source as literals;
    ``params`` are the launch parameters each dispatch rule must set.
    """

    family: str = attrs.field(validator=identifier)
    name: str = attrs.field(validator=identifier)
    template: str = attrs.field(validator=typed(str))
    output: str = attrs.field(validator=typed(str))  # generated file, relative to generated/
    doc: str = attrs.field(validator=typed(str))
    hardware: tuple = attrs.field(converter=_to_tuple, validator=seq_of(str))
    constants: tuple = attrs.field(default=(), converter=_to_tuple, validator=seq_of(tuple))
    params: tuple = attrs.field(default=(), converter=_to_tuple, validator=seq_of(Param))
    tensors: tuple = attrs.field(default=(), converter=_to_tuple,
                                 validator=seq_of(TensorContract))
    # Launch parameters used when a caller forces this variant and no policy row picks it.
    defaults: dict = attrs.field(factory=dict, validator=typed(dict))
    loc: Location = LOC

    def __attrs_post_init__(self):
        if self.defaults:
            self.check_params(self, "defaults", self.defaults)

    @output.validator
    def _output(self, attribute, value):
        # a module of the generated package: the path its import name gives, one spelling only
        parts = value[:-3].split("/") if value.endswith(".py") else []
        if not parts or not all(p.isidentifier() for p in parts):
            fail(self, "output", f"must be a module path inside generated/ (identifiers joined "
                                 f"by '/', ending .py), got {value!r}")

    @constants.validator
    def _constants(self, attribute, value):
        seen = set()
        for item in value:
            if len(item) != 2 or not isinstance(item[0], str) or not item[0].isidentifier():
                fail(self, "constants", f"entries must be (NAME, value) pairs, got {item!r}")
            if item[0] in seen:
                fail(self, "constants", f"constant {item[0]!r} given twice")
            seen.add(item[0])
            if not isinstance(item[1], (int, float, str, bool)):
                fail(self, "constants", f"constant {item[0]!r} must be a literal, got {item[1]!r}")
            if isinstance(item[1], float) and not math.isfinite(item[1]):
                fail(self, "constants", f"constant {item[0]!r} must be finite (it is written as "
                                        f"a Python literal), got {item[1]!r}")

    @params.validator
    def _params(self, attribute, value):
        names = [p.name for p in value]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            fail(self, "params", f"parameter(s) declared twice: {', '.join(dup)}")

    def constant(self, key: str):
        return dict(self.constants)[key]

    def param(self, key: str) -> Param:
        return {p.name: p for p in self.params}[key]

    def check_params(self, owner: Any, field: str, values: dict) -> None:
        declared = {p.name: p for p in self.params}
        for key in sorted(values):
            if key not in declared:
                fail(owner, f"{field}.{key}",
                     f"variant '{self.name}' has no launch parameter {key!r} "
                     f"(it has: {', '.join(sorted(declared)) or 'none'})")
        for key, p in sorted(declared.items()):
            if key not in values:
                fail(owner, field, f"launch parameter {key!r} of variant '{self.name}' not set")
            p.check(owner, field, values[key])
