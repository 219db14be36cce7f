"""Dataclasses that cost nothing to define: ``@record`` is ``@dataclasses.dataclass`` for what a command imports.

Defining a dataclass imports ``dataclasses`` (and with it ``inspect``, ``ast``, ``dis`` and ``tokenize``)
and compiles its ``__init__``, ``__repr__``, ``__eq__``, ``__hash__`` and, frozen, ``__setattr__`` from
generated source: about 2 ms a class, 20 ms for the module. Every command defines some twenty (the
config's sections, ``Event``, the alert rows), so ``record`` defines the same methods from one closure
each instead, behaving as the generated ones do: the same ``__init__`` (positional or keyword, defaults,
``default_factory``, ``__post_init__``), ``__repr__``, ``__eq__`` (same class, compared fields in order),
``__hash__`` (the tuple of compared fields, as ``dataclass`` hashes it) and, frozen,
``dataclasses.FrozenInstanceError`` on assignment.

A record is a dataclass to every function of ``dataclasses``: the first time one asks for its fields
(``fields``, ``asdict``, ``replace``, ``is_dataclass``), the genuine ``Field`` objects are made, by
``dataclass`` itself from the same annotations and defaults, and kept on the class. Type checkers see
``dataclasses.dataclass`` and ``dataclasses.field`` themselves.

Supported: ``frozen``, ``eq``, ``repr`` and ``kw_only`` on the class; ``default``, ``default_factory``,
``repr``, ``hash``, ``compare`` and ``metadata`` on a field; bases that are records (``kw_only`` alike, or
without fields). Anything else (``slots``, ``order``, ``init=False``, ``InitVar``) is refused when the
class is defined: use ``dataclasses.dataclass``, which can also define a subclass of a record.
"""

from __future__ import annotations

import _thread

TYPE_CHECKING = False  # (typing is not imported: every command defines records)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeGuard, TypeVar

    _T = TypeVar("_T")

__all__ = ["asdict", "field", "fields_of", "is_record", "record", "replace"]

_MISSING: Any = type("_MissingType", (), {"__repr__": lambda self: "MISSING"})()
_UPGRADE = _thread.RLock()  # one class's Field objects are made once, even with threads asking together


class _Field:
    """What ``field()`` says about one attribute, until ``dataclasses`` makes it a ``Field``."""

    __slots__ = ("compare", "default", "default_factory", "hash", "metadata", "repr")

    def __init__(self, default: Any = _MISSING, default_factory: Any = _MISSING, repr: bool = True,  # noqa: A002
                 hash: bool | None = None, compare: bool = True,  # noqa: A002
                 metadata: dict[str, Any] | None = None) -> None:
        if default is not _MISSING and default_factory is not _MISSING:
            raise ValueError("cannot specify both default and default_factory")
        self.default, self.default_factory, self.repr = default, default_factory, repr
        self.hash, self.compare, self.metadata = hash, compare, metadata

    def options(self) -> dict[str, Any]:
        """The keyword arguments of ``dataclasses.field`` that make the same field."""
        out: dict[str, Any] = {"repr": self.repr, "hash": self.hash, "compare": self.compare,
                               "metadata": self.metadata}
        if self.default is not _MISSING:
            out["default"] = self.default
        if self.default_factory is not _MISSING:
            out["default_factory"] = self.default_factory
        return out


def _field(*, default: Any = _MISSING, default_factory: Any = _MISSING, repr: bool = True,  # noqa: A002
           hash: bool | None = None, compare: bool = True, metadata: dict[str, Any] | None = None) -> Any:
    return _Field(default, default_factory, repr, hash, compare, metadata)


class _Spec:
    """One record class's fields (bases' first, in order) and options."""

    def __init__(self, cls: type, fields: dict[str, tuple[str, _Field]], frozen: bool, eq: bool,
                 repr_: bool, kw_only: bool) -> None:
        self.cls: type = cls
        self.fields = fields
        self.frozen, self.eq, self.repr, self.kw_only = frozen, eq, repr_, kw_only
        self.names = tuple(fields)
        self.positional = () if kw_only else self.names


def _fields_of(cls: type, kw_only: bool) -> dict[str, tuple[str, _Field]]:
    """Each field's (annotation, spec): the record bases' fields, then the class's own annotations."""
    out: dict[str, tuple[str, _Field]] = {}
    for base in reversed(cls.__mro__[1:]):
        spec = base.__dict__.get("__record__")
        if spec is not None:
            if spec.fields and spec.kw_only != kw_only:
                raise TypeError(f"record {cls.__qualname__}: kw_only differs from its base {base.__qualname__}'s")
            out.update(spec.fields)
        elif "__dataclass_fields__" in base.__dict__:
            raise TypeError(f"record {cls.__qualname__}: base {base.__qualname__} is a dataclass; "
                            "make it a record, or make this a dataclass")
    for name, ann in cls.__dict__.get("__annotations__", {}).items():
        text = ann if isinstance(ann, str) else getattr(ann, "__name__", repr(ann))
        if text.startswith(("ClassVar", "typing.ClassVar")):
            continue
        if text.startswith(("InitVar", "dataclasses.InitVar")):
            raise TypeError(f"record {cls.__qualname__}.{name}: InitVar is not supported; use dataclass")
        value = cls.__dict__.get(name, _MISSING)
        f = value if isinstance(value, _Field) else _Field(default=value)
        if f.default is not _MISSING and type(f.default).__hash__ is None:
            raise ValueError(f"mutable default {type(f.default)} for field {name} is not allowed: "
                             "use default_factory")
        if isinstance(value, _Field):  # the class attribute is the default, as dataclass leaves it
            if f.default is _MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, f.default)
        out[name] = (ann, f)
    return out


def _check_order(spec: _Spec) -> None:
    if spec.kw_only:
        return
    seen_default = None
    for name, (_, f) in spec.fields.items():
        if f.default is not _MISSING or f.default_factory is not _MISSING:
            seen_default = name
        elif seen_default is not None:
            raise TypeError(f"non-default argument {name!r} follows default argument")


def _init_fn(spec: _Spec) -> Callable[..., None]:
    names, n, qual = spec.names, len(spec.names), spec.cls.__qualname__
    positional, n_pos = spec.positional, len(spec.positional)
    known = frozenset(names)
    defaults = {k: f.default for k, (_, f) in spec.fields.items() if f.default is not _MISSING}
    factories = {k: f.default_factory for k, (_, f) in spec.fields.items() if f.default_factory is not _MISSING}
    post_init = hasattr(spec.cls, "__post_init__")
    required = sum(1 for k in positional if k not in defaults and k not in factories)
    kind = "keyword-only" if spec.kw_only else "positional"

    def slow(d: dict[str, Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if len(args) > n_pos:
            takes = f"from {required + 1} to {n_pos + 1}" if required < n_pos else f"{n_pos + 1}"
            raise TypeError(f"{qual}.__init__() takes {takes} positional argument{'s' if takes != '1' else ''} "
                            f"but {len(args) + 1} were given")
        given = dict(zip(positional, args, strict=False))
        for k, v in kwargs.items():
            if k not in known:
                raise TypeError(f"{qual}.__init__() got an unexpected keyword argument {k!r}")
            if k in given:
                raise TypeError(f"{qual}.__init__() got multiple values for argument {k!r}")
            given[k] = v
        missing = [k for k in names if k not in given and k not in defaults and k not in factories]
        if missing:
            listed = " and ".join(", ".join(repr(k) for k in missing).rsplit(", ", 1))
            raise TypeError(f"{qual}.__init__() missing {len(missing)} required {kind} argument"
                            f"{'s' if len(missing) > 1 else ''}: {listed}")
        for k in names:
            d[k] = given[k] if k in given else defaults[k] if k in defaults else factories[k]()

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        d = self.__dict__
        if len(args) == n_pos and n_pos:
            if kwargs:
                slow(d, args, kwargs)
            else:
                d.update(zip(names, args, strict=False))
        elif not args and len(kwargs) == n and kwargs.keys() == known:
            for k in names:
                d[k] = kwargs[k]
        else:
            slow(d, args, kwargs)
        if post_init:
            self.__post_init__()

    return __init__


def _repr_fn(spec: _Spec) -> Callable[[Any], str]:
    shown = tuple(k for k, (_, f) in spec.fields.items() if f.repr)
    busy: set[tuple[int, int]] = set()  # (object, thread) being shown: a cycle shows as ..., as dataclass does

    def __repr__(self: Any) -> str:
        key = (id(self), _thread.get_ident())
        if key in busy:
            return "..."
        busy.add(key)
        try:
            return f"{type(self).__qualname__}({', '.join(f'{k}={getattr(self, k)!r}' for k in shown)})"
        finally:
            busy.discard(key)

    return __repr__


def _compared(spec: _Spec) -> tuple[str, ...]:
    return tuple(k for k, (_, f) in spec.fields.items() if f.compare)


def _eq_fn(spec: _Spec) -> Callable[[Any, object], Any]:
    compared = _compared(spec)

    def __eq__(self: Any, other: object) -> Any:
        if other.__class__ is self.__class__:
            return tuple(getattr(self, k) for k in compared) == tuple(getattr(other, k) for k in compared)
        return NotImplemented

    return __eq__


def _hash_fn(spec: _Spec) -> Callable[[Any], int]:
    hashed = tuple(k for k, (_, f) in spec.fields.items() if (f.compare if f.hash is None else f.hash))

    def __hash__(self: Any) -> int:
        return hash(tuple(getattr(self, k) for k in hashed))

    return __hash__


def _frozen_fns(spec: _Spec) -> tuple[Callable[[Any, str, Any], None], Callable[[Any, str], None]]:
    cls: type[Any] = spec.cls
    names = frozenset(spec.names)

    def refuse(name: str) -> None:
        import dataclasses  # only for the error

        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __setattr__(self: Any, name: str, value: Any) -> None:
        if self.__class__ is cls or name in names:
            refuse(name)
        super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if self.__class__ is cls or name in names:
            import dataclasses  # only for the error

            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    return __setattr__, __delattr__


class _Fields:
    """``__dataclass_fields__`` / ``__dataclass_params__`` of a record until something asks for them: then
    ``dataclasses.dataclass`` makes both, from a class with the same annotations and fields, and they
    replace this on the record."""

    def __init__(self, spec: _Spec, attr: str) -> None:
        self.spec, self.attr = spec, attr

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        cls = self.spec.cls
        with _UPGRADE:
            if isinstance(cls.__dict__.get(self.attr), _Fields):
                _upgrade(self.spec)
        return cls.__dict__[self.attr]


def _upgrade(spec: _Spec) -> None:
    import dataclasses

    ns: dict[str, Any] = {"__module__": spec.cls.__module__, "__qualname__": spec.cls.__qualname__,
                          "__annotations__": {k: ann for k, (ann, _) in spec.fields.items()}}
    for k, (_, f) in spec.fields.items():
        ns[k] = dataclasses.field(**f.options())
    model: Any = dataclasses.dataclass(frozen=spec.frozen, eq=spec.eq, repr=spec.repr, kw_only=spec.kw_only)(
        type(spec.cls.__name__, (), ns))
    setattr(spec.cls, "__dataclass_params__", model.__dataclass_params__)  # noqa: B010
    setattr(spec.cls, "__dataclass_fields__", model.__dataclass_fields__)  # noqa: B010


def _install(spec: _Spec) -> None:
    cls = spec.cls

    def put(name: str, value: object) -> None:
        if name not in cls.__dict__:
            setattr(cls, name, value)

    init = _init_fn(spec)
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    put("__init__", init)
    if spec.repr:
        put("__repr__", _repr_fn(spec))
    if spec.eq:
        put("__eq__", _eq_fn(spec))
        d = cls.__dict__
        if "__hash__" not in d or (d["__hash__"] is None and "__eq__" in d):  # not a hash of the class's own
            setattr(cls, "__hash__", _hash_fn(spec) if spec.frozen else None)  # noqa: B010
    if spec.frozen:
        if "__setattr__" in cls.__dict__ or "__delattr__" in cls.__dict__:
            raise TypeError(f"Cannot overwrite attribute __setattr__ in class {cls.__name__}")
        setattr_, delattr_ = _frozen_fns(spec)
        setattr(cls, "__setattr__", setattr_)  # noqa: B010
        setattr(cls, "__delattr__", delattr_)  # noqa: B010
    put("__match_args__", spec.positional)
    setattr(cls, "__dataclass_fields__", _Fields(spec, "__dataclass_fields__"))  # noqa: B010
    setattr(cls, "__dataclass_params__", _Fields(spec, "__dataclass_params__"))  # noqa: B010


def _record(cls: type[_T] | None = None, /, *, frozen: bool = False, eq: bool = True,
            repr: bool = True, kw_only: bool = False) -> Any:  # noqa: A002
    def wrap(c: type[_T]) -> type[_T]:
        if "__slots__" in c.__dict__:
            raise TypeError(f"record {c.__qualname__}: __slots__ is not supported; use dataclass")
        spec = _Spec(c, _fields_of(c, kw_only), frozen, eq, repr, kw_only)
        _check_order(spec)
        setattr(c, "__record__", spec)  # noqa: B010
        _install(spec)
        return c

    return wrap if cls is None else wrap(cls)


def fields_of(cls: type) -> tuple[tuple[str, Any, dict[str, Any], bool], ...]:
    """Each field of a dataclass as (name, annotation, metadata, required), in order: for a record without
    making ``Field`` objects, for any other dataclass from ``dataclasses.fields``."""
    spec: _Spec | None = cls.__dict__.get("__record__")
    if spec is None:
        import dataclasses

        return tuple((f.name, f.type, dict(f.metadata),
                      f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
                     for f in dataclasses.fields(cls))
    return tuple((k, ann, f.metadata or {}, f.default is _MISSING and f.default_factory is _MISSING)
                 for k, (ann, f) in spec.fields.items())


def is_record(t: object) -> TypeGuard[type[Any]]:
    """Whether ``t`` is a class made by ``record``."""
    return isinstance(t, type) and "__record__" in t.__dict__


def replace(obj: _T, /, **changes: Any) -> _T:
    """``dataclasses.replace`` for a record, without making its ``Field`` objects."""
    spec: _Spec = type(obj).__dict__["__record__"]
    for k in changes:
        if k not in spec.fields:
            raise TypeError(f"{type(obj).__qualname__}.__init__() got an unexpected keyword argument {k!r}")
    return type(obj)(**{k: changes[k] if k in changes else getattr(obj, k) for k in spec.names})


_ATOMIC = (str, int, float, bool, type(None), bytes)


def asdict(obj: object) -> dict[str, Any]:
    """``dataclasses.asdict`` for a record (records, lists, tuples and dicts inside it taken apart alike, other
    values deep-copied), without making its ``Field`` objects; for any other dataclass, ``dataclasses.asdict``."""
    if not is_record(type(obj)):
        import dataclasses

        plain: dict[str, Any] = dataclasses.asdict(obj)  # type: ignore[call-overload]
        return plain
    out: dict[str, Any] = _inner(obj)
    return out


def _inner(obj: Any) -> Any:
    if type(obj) in _ATOMIC:
        return obj
    spec = type(obj).__dict__.get("__record__")
    if spec is not None:
        return {k: _inner(getattr(obj, k)) for k in spec.names}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*[_inner(v) for v in obj])
    if isinstance(obj, list | tuple):
        return type(obj)(_inner(v) for v in obj)
    if isinstance(obj, dict):
        return type(obj)((_inner(k), _inner(v)) for k, v in obj.items())
    if hasattr(type(obj), "__dataclass_fields__"):
        import dataclasses

        return dataclasses.asdict(obj)
    import copy

    return copy.deepcopy(obj)


if TYPE_CHECKING:
    from dataclasses import dataclass as record
    from dataclasses import field
else:
    record, field = _record, _field
