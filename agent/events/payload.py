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

import dataclasses
import math
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Self, Union, cast, get_args, get_origin, get_type_hints

from agent.errors import PayloadError
from agent.events.event import JsonObject

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


def field_types(cls: type) -> dict[str, object]:
    """Each dataclass field's type, as ``typing.get_type_hints`` gives it."""
    hints = get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _required(f: dataclasses.Field[Any]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def _field_specs(cls: type) -> tuple[FieldSpec, ...]:
    hints = field_types(cls)
    specs = []
    for f in dataclasses.fields(cls):
        spec = FieldSpec(f.name, _type_name(hints[f.name]), _required(f))
        if not spec.required and not spec.nullable:
            raise TypeError(f"{cls.__name__}.{f.name}: an optional field may be null, so annotate it "
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


_SCALARS = (str, int, float, bool, type(None))


def flat(payload: dict[str, Any]) -> bool:
    """True when every key is text and every value a JSON scalar: text, an integer, a boolean, null, or a float
    that is 0 or finite and at least 1e-4 in magnitude."""
    for k, v in payload.items():
        if type(k) is not str or type(v) not in _SCALARS:
            return False
        if type(v) is float and not (v == 0.0 or (math.isfinite(v) and abs(v) >= 1e-4)):
            return False
    return True


_MISSING = object()


@dataclass(frozen=True, kw_only=True)
class Payload:
    """Base of every payload class. Subclasses are frozen, keyword-only dataclasses."""

    FIELDS: ClassVar[tuple[FieldSpec, ...]] = ()

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.FIELDS = ()  # filled by fields_of() once the dataclass decorator has run

    @classmethod
    def fields_of(cls) -> tuple[FieldSpec, ...]:
        if not cls.FIELDS and dataclasses.fields(cls):
            cls.FIELDS = _field_specs(cls)
        return cls.FIELDS

    @classmethod
    def check(cls, kind: str, payload: object) -> JsonObject:
        """``payload`` itself; PayloadError naming ``kind`` and the field when it does not fit this class.
        Fields are checked in order, required ones first."""
        if not isinstance(payload, dict):
            raise PayloadError(f"{kind}: payload must be a JSON object, got {type(payload).__name__}")
        for spec in cls.fields_of():
            value = payload.get(spec.name, _MISSING)
            if value is not _MISSING:
                _check_type(kind, spec, value)
            elif spec.required:
                required = ", ".join(sorted(s.name for s in cls.fields_of() if s.required))
                raise PayloadError(f"{kind}: payload is missing required field {spec.name!r} "
                                   f"(required: {required})")
        return cast(JsonObject, payload)

    @classmethod
    def checker(cls, n: int = 1) -> Callable[[str, object], bool]:
        """``check`` as a function that returns whether the payload is ``flat`` (what the log's append asks)."""
        return lambda kind, payload: flat(cls.check(kind, payload))

    @classmethod
    def parse(cls, kind: str, payload: object) -> Self:
        """The typed view of ``payload`` (checked first; extra keys are left out)."""
        obj = cls.check(kind, payload)
        return cls(**{s.name: obj[s.name] for s in cls.fields_of() if s.name in obj})
