"""Typed payloads: one frozen dataclass per kind and version, checked field by field.

A payload class declares its fields with their JSON types; a field without a
default is required, one with a default is optional (and, as it always was,
an optional field may be null). The annotation is the whole schema:

    str  int  float  bool  JsonObject  JsonArray  object   (JSON types)
    X | None                                               (null allowed)

``float`` accepts integers; ``int`` and ``float`` refuse booleans. Payloads may
carry extra keys: they are stored unchanged and ignored by the typed view.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any, ClassVar, Self, Union, cast, get_args, get_origin

from agent.errors import PayloadError
from agent.events.event import JsonObject
from agent.record import fields_of
from agent.record import record as dataclass  # a dataclass, defined without importing dataclasses

_NAMES: dict[object, str] = {str: "str", int: "int", float: "float", bool: "bool", dict: "dict", list: "list",
                             object: "any", Any: "any"}
_CHECKS: dict[str, type | tuple[type, ...]] = {"str": str, "int": int, "float": (int, float), "bool": bool,
                                               "dict": dict, "list": list, "any": object}


@dataclass(frozen=True)
class FieldSpec:
    """One payload field: its name, JSON type ('str', 'int?', ...) and whether it is required."""

    name: str
    type: str
    required: bool

    @property
    def nullable(self) -> bool:
        return self.type.endswith("?")

    @property
    def base(self) -> str:
        return self.type.rstrip("?")


def _type_name(annotation: object) -> str:
    origin = get_origin(annotation)
    if origin is Union or origin is types.UnionType:
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) != 1 or len(get_args(annotation)) != 2:
            raise TypeError(f"a payload field is one JSON type or that type | None, not {annotation!r}")
        return _type_name(args[0]) + "?"
    base = origin if origin is not None else annotation
    try:
        return _NAMES[base]
    except (KeyError, TypeError):
        raise TypeError(f"{annotation!r} is not a JSON type a payload field can have") from None


_HINTS: dict[tuple[str, str], object] = {}


def field_types(cls: type) -> dict[str, object]:
    """Each field's type, as ``typing.get_type_hints`` gives it: the annotation text evaluated in the module of
    the class that declares the field, once per distinct (module, text). get_type_hints compiles every
    annotation of every class afresh: some 370 compiles for the vocabulary's payload classes, which a
    command that appends one event paid for at import."""
    out: dict[str, object] = {}
    for name, t, _, _ in fields_of(cls):
        if isinstance(t, str):
            owner = next(k for k in cls.__mro__ if name in vars(k).get("__annotations__", {}))
            key = (owner.__module__, t)
            if key not in _HINTS:
                _HINTS[key] = eval(t, vars(sys.modules[owner.__module__]))  # noqa: S307  (the class's own annotation)
            t = _HINTS[key]
        out[name] = t
    return out


def _field_specs(cls: type) -> tuple[FieldSpec, ...]:
    hints = field_types(cls)
    specs = []
    for name, _, _, required in fields_of(cls):
        spec = FieldSpec(name, _type_name(hints[name]), required)
        if not required and not spec.nullable:
            raise TypeError(f"{cls.__name__}.{name}: an optional field may be null, so annotate it "
                            f"'{spec.type} | None'")
        specs.append(spec)
    return tuple(sorted(specs, key=lambda s: not s.required))  # required first, each group in order


def _check_type(kind: str, spec: FieldSpec, value: object) -> None:
    if value is None:
        if spec.nullable or not spec.required:
            return
        raise PayloadError(f"{kind}: field {spec.name!r} must be {spec.base}, got null")
    base = spec.base
    if (base in ("int", "float") and isinstance(value, bool)) or not isinstance(value, _CHECKS[base]):
        raise PayloadError(f"{kind}: field {spec.name!r} must be {base}, got {type(value).__name__}")


_EXACT: dict[str, frozenset[type]] = {"str": frozenset({str}), "int": frozenset({int}), "float": frozenset({int, float}),
                                      "bool": frozenset({bool}), "dict": frozenset({dict}), "list": frozenset({list}),
                                      "any": frozenset({str, int, float, bool, dict, list})}
_MISSING = object()


def _fast_check(spec: FieldSpec) -> tuple[str, frozenset[type], FieldSpec]:
    """(name, the exact types a value of ``spec`` may have without a closer look, spec): null among them
    when it may be null; any other value (a subclass, a wrong type) goes through ``_check_type``."""
    ok = _EXACT[spec.base]
    return spec.name, ok | {type(None)} if spec.nullable or not spec.required else ok, spec


_SCALARS = frozenset({str, int, float, bool, type(None)})
_INF = float("inf")


def flat(payload: dict[str, Any]) -> bool:
    """True when every key is text and every value a JSON scalar that encodes and decodes unchanged and
    that orjson writes byte for byte as the json module does: text, an integer, a boolean, null, or a float
    that is 0 or finite and at least 1e-4 in magnitude (orjson writes 1e-05 as 0.00001)."""
    for k, v in payload.items():
        t = type(v)
        if type(k) is not str or t not in _SCALARS:
            return False
        if t is float and not (1e-4 <= abs(v) < _INF or v == 0.0):
            return False
    return True


# Writing a class's check out costs about what 250 checks through the generic one save (a command that
# appends an event or two never pays for it; the daemon does once a kind).
COMPILE_AFTER = 256

# The compiled check (``Payload.checker``): per field, the lines that take a value of one of the field's usual
# types (``v`` holds it, ``t`` its type) and return ``slow(kind, payload)`` on anything else, leaving ``fl``
# False once the value is not a flat scalar. ``slow`` is the generic check: it raises the error a bad value
# gets, or accepts what only a closer look accepts (a subclass), and says whether the payload is flat.
_FLOAT_OK = "(1e-4 <= abs(v) < INF or v == 0.0)"
_TAKE: dict[str, list[str]] = {
    "str": ["if type(v) is not str:", "    return slow(kind, payload)"],
    "int": ["if type(v) is not int:", "    return slow(kind, payload)"],
    "bool": ["if type(v) is not bool:", "    return slow(kind, payload)"],
    "float": ["t = type(v)", "if t is float:", f"    fl = fl and {_FLOAT_OK}", "elif t is not int:",
              "    return slow(kind, payload)"],
    "dict": ["if type(v) is not dict:", "    return slow(kind, payload)", "fl = False"],
    "list": ["if type(v) is not list:", "    return slow(kind, payload)", "fl = False"],
    "any": ["t = type(v)", "if t is float:", f"    fl = fl and {_FLOAT_OK}", "elif t is dict or t is list:",
            "    fl = False", "elif t is not str and t is not int and t is not bool:", "    return slow(kind, payload)"],
}


def _field_lines(spec: FieldSpec) -> list[str]:
    """The compiled check's lines for one field (see ``_TAKE``): a value that may be null and is takes no
    closer look; an optional field that is absent counts as not there (``n``: optional fields present); a
    required one that is absent reads as ``M``, whose type no field takes."""
    take = _TAKE[spec.base]
    if not spec.required:  # optional, so nullable
        return [f"v = get({spec.name!r}, M)", "if v is not M:", "    n += 1", "    if v is not None:",
                *("        " + line for line in take)]
    if spec.nullable:
        return [f"v = get({spec.name!r}, M)", "if v is not None:", *("    " + line for line in take)]
    return [f"v = get({spec.name!r}, M)", *take]


def _compile_check(cls: type[Payload]) -> Callable[[str, object], bool]:
    """``cls.check`` as one function written for its fields (see ``Payload.checker``)."""
    specs = cls.fields_of()
    required = sum(s.required for s in specs)
    body = [line for s in specs for line in _field_lines(s)]
    src = "\n".join(["def check(kind, payload):", "    if type(payload) is not dict:",
                     "        return slow(kind, payload)", "    get = payload.get", "    n = 0", "    fl = True",
                     *("    " + line for line in body),
                     f"    return fl and (len(payload) == {required} + n or flat(payload))"])

    namespace: dict[str, Any] = {"slow": cls._check_flat, "flat": flat, "M": _MISSING, "INF": _INF}
    exec(compile(src, f"<{cls.__qualname__}.checker>", "exec"), namespace)  # our own source: field names and fixed lines
    check: Callable[[str, object], bool] = namespace["check"]
    return check


@dataclass(frozen=True, kw_only=True)
class Payload:
    """Base of every payload class. Subclasses are frozen, keyword-only dataclasses."""

    FIELDS: ClassVar[tuple[FieldSpec, ...]] = ()

    _CHECKS: ClassVar[tuple[tuple[str, frozenset[type], FieldSpec], ...] | None] = None
    _checker: ClassVar[Callable[[str, object], bool] | None] = None  # compiled by checker()
    _asked: ClassVar[int] = 0  # payloads checker() was asked for before it compiled

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.FIELDS = ()  # filled by fields_of() once the dataclass decorator has run
        cls._CHECKS = None  # filled by check() on its first call, from fields_of()
        cls._checker, cls._asked = None, 0

    @classmethod
    def fields_of(cls) -> tuple[FieldSpec, ...]:
        if not cls.FIELDS and fields_of(cls):
            cls.FIELDS = _field_specs(cls)
        return cls.FIELDS

    @classmethod
    def check(cls, kind: str, payload: object) -> JsonObject:
        """``payload`` itself; PayloadError naming ``kind`` and the field when it does not fit this class."""
        cls.checker()(kind, payload)
        return cast(JsonObject, payload)  # the check raised unless it is a dict

    @classmethod
    def checker(cls, n: int = 1) -> Callable[[str, object], bool]:
        """The check for the next ``n`` payloads of this class: a function that raises exactly what
        ``check_fields`` raises and returns whether the payload is ``flat``. Once the class has been asked
        for ``COMPILE_AFTER`` payloads it is written out for the class's fields (Python source compiled
        once: every field's usual types tested in line, no loop, flatness decided on the way); until then,
        and for any value that check does not take at a glance (a wrong type, null, a subclass, a missing
        field), ``check_fields`` decides."""
        fn = cls._checker
        if fn is None:
            cls._asked += n
            if cls._asked < COMPILE_AFTER:
                return cls._check_flat
            fn = cls._checker = _compile_check(cls)
        return fn

    @classmethod
    def _check_flat(cls, kind: str, payload: object) -> bool:
        return flat(cls.check_fields(kind, payload))

    @classmethod
    def check_fields(cls, kind: str, payload: object) -> JsonObject:
        """``check``, field by field (what the compiled check falls back on)."""
        if not isinstance(payload, dict):
            raise PayloadError(f"{kind}: payload must be a JSON object, got {type(payload).__name__}")
        checks = cls._CHECKS
        if checks is None:
            checks = cls._CHECKS = tuple(_fast_check(s) for s in cls.fields_of())
        for name, exact, spec in checks:  # a field in order: required first (the append path: once an event)
            value = payload.get(name, _MISSING)
            if type(value) in exact:
                continue
            if value is not _MISSING:
                _check_type(kind, spec, value)
            elif spec.required:
                required = ", ".join(sorted(s.name for s in cls.fields_of() if s.required))
                raise PayloadError(f"{kind}: payload is missing required field {spec.name!r} "
                                   f"(required: {required})")
        return payload

    @classmethod
    def parse(cls, kind: str, payload: object) -> Self:
        """The typed view of ``payload`` (checked first; extra keys are left out)."""
        obj = cls.check(kind, payload)
        return cls(**{s.name: obj[s.name] for s in cls.fields_of() if s.name in obj})

