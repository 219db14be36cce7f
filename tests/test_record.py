"""``agent.record.record`` behaves as ``dataclasses.dataclass`` for everything a record class is used for.

Each check builds the same class twice, once with ``dataclasses.dataclass`` and once with ``record``,
and compares what they do: construction (positional, keyword, defaults, factories, ``__post_init__``,
the errors), ``repr``, equality, hashing, frozenness, and the functions of ``dataclasses`` (``fields``,
``asdict``, ``replace``, ``is_dataclass``), which see genuine ``Field`` objects made on first use.
"""

from __future__ import annotations

import copy
import dataclasses
import threading
from typing import Any, ClassVar  # noqa: F401  (dataclasses reads the annotation "ClassVar[str]" through this name)

import pytest

from agent import record as rec

calls: list[str] = []


def _pair(frozen: bool = True) -> tuple[type, type]:
    """The same class, as a dataclass and as a record (``Point`` in both, defined at module level)."""

    def body(field: Any) -> dict[str, Any]:
        return {
            "__module__": __name__, "__qualname__": "Point",
            "__annotations__": {"x": "int", "y": "int", "label": "str", "tags": "tuple[str, ...]",
                                "note": "str | None", "kind": "ClassVar[str]"},
            "y": 0, "label": "p", "tags": field(default_factory=tuple),
            "note": field(default=None, compare=False, repr=False, metadata={"internal": True}),
            "kind": "point",
        }

    dc = dataclasses.dataclass(frozen=frozen)(type("Point", (), body(dataclasses.field)))
    rc = rec.record(frozen=frozen)(type("Point", (), body(rec.field)))
    return dc, rc


def _outcome(fn: Any) -> tuple[str, str]:
    try:
        return "ok", repr(fn())
    except Exception as e:  # noqa: BLE001  (the exception's type and words are what is compared)
        return type(e).__name__, str(e).replace("__init__() ", "")


CALLS: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    ((1,), {}), ((1, 2), {}), ((1, 2, "a", ["t"], "n"), {}), ((), {"x": 1, "y": 2}), ((1,), {"label": "q"}),
    ((), {}), ((1, 2, "a", [], None, 9), {}), ((1,), {"x": 2}), ((1,), {"z": 2}), ((), {"y": 2}),
    ((), {"x": 1, "y": 2, "label": "l", "tags": ["a"], "note": "n"}),
]


@pytest.mark.parametrize(("args", "kwargs"), CALLS, ids=range(len(CALLS)))
def test_construction_and_repr_match_dataclass(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """A call with these arguments gives the same repr, or the same error type and message, for both."""
    dc, rc = _pair()
    assert _outcome(lambda: rc(*args, **kwargs)) == _outcome(lambda: dc(*args, **kwargs))


def test_equality_hash_and_frozenness_match_dataclass() -> None:
    """Equal when the compared fields are (the uncompared note aside), unequal to another class, hashed as
    dataclass hashes (the tuple of compared fields), frozen against assignment and deletion alike; not
    frozen: unhashable and assignable."""
    dc, rc = _pair()
    a, b, c = rc(1, 2, note="x"), rc(1, 2, note="y"), rc(1, 3)
    assert a == b and a != c and a != dc(1, 2) and (a == dc(1, 2)) is False
    assert hash(a) == hash(b) == hash(dc(1, 2, note="z"))
    acts = (lambda o: setattr(o, "x", 5), lambda o: delattr(o, "x"), lambda o: setattr(o, "other", 1))
    for act in acts:
        assert _outcome(lambda act=act: act(rc(1))) == _outcome(lambda act=act: act(dc(1)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.x = 5  # type: ignore[attr-defined]
    dcm, rcm = _pair(frozen=False)
    m = rcm(1)
    m.x = 7
    assert m.x == 7 and rcm.__hash__ is None and dcm.__hash__ is None
    assert rc.__match_args__ == dc.__match_args__ == ("x", "y", "label", "tags", "note")  # type: ignore[attr-defined]


def test_dataclasses_functions_see_genuine_fields() -> None:
    """fields() gives the dataclass's own Field objects (names, types, defaults, factories, compare, repr,
    metadata), the ClassVar left out; asdict, astuple, replace and is_dataclass answer as for the dataclass."""
    dc, rc = _pair()
    assert "__dataclass_fields__" not in vars(rc) or not isinstance(vars(rc)["__dataclass_fields__"], dict)

    def shape(cls: type) -> list[tuple[Any, ...]]:
        return [(f.name, f.type, f.default, f.default_factory, f.compare, f.repr, f.hash, dict(f.metadata),
                 f.init, f.kw_only, f._field_type) for f in dataclasses.fields(cls)]  # type: ignore[attr-defined]

    assert shape(rc) == shape(dc)
    assert dataclasses.is_dataclass(rc) and dataclasses.is_dataclass(rc(1))
    p, q = rc(1, 2, tags=("a",), note="n"), dc(1, 2, tags=("a",), note="n")
    assert dataclasses.asdict(p) == dataclasses.asdict(q) == rec.asdict(p)
    assert dataclasses.astuple(p) == dataclasses.astuple(q)
    assert repr(dataclasses.replace(p, y=5)) == repr(dataclasses.replace(q, y=5)) == repr(rec.replace(p, y=5))
    assert rc.__dataclass_params__.frozen is True  # type: ignore[attr-defined]
    assert [name for name, _, _, _ in rec.fields_of(rc)] == [f.name for f in dataclasses.fields(dc)]


def test_a_record_is_hashed_the_same_before_and_after_its_fields_are_made() -> None:
    """A record put in a set before dataclasses first looks at its class is still found there after."""
    _, rc = _pair()
    p = rc(1, 2)
    seen = {p}
    dataclasses.fields(rc)
    assert rc(1, 2) in seen and hash(p) == hash(rc(1, 2))


def test_nested_records_asdict_and_copies() -> None:
    """asdict takes nested records, lists and dicts apart like dataclasses.asdict; records pickle, copy and
    deep-copy to equal objects."""

    @rec.record(frozen=True)
    class Inner:
        n: int
        tags: list[str] = rec.field(default_factory=list)

    @rec.record(frozen=True)
    class Outer:
        inner: Inner
        more: dict[str, Any] = rec.field(default_factory=dict)

    o = Outer(Inner(1, ["a"]), {"k": [Inner(2)], "t": (1, 2)})
    assert rec.asdict(o) == dataclasses.asdict(o) == {"inner": {"n": 1, "tags": ["a"]},
                                                    "more": {"k": [{"n": 2, "tags": []}], "t": (1, 2)}}
    assert rec.asdict(o)["inner"]["tags"] is not o.inner.tags
    assert copy.copy(o) == o and copy.deepcopy(o) == o and copy.deepcopy(o).more is not o.more


def test_post_init_inheritance_and_order_checks() -> None:
    """__post_init__ runs after the fields are set (and may refuse); a record base's fields come first; a
    field without a default after one with a default, a mutable default, slots or a dataclass base are
    refused when the class is defined, as dataclass refuses them."""

    @rec.record(frozen=True)
    class Base:
        a: int
        b: int = 2

        def __post_init__(self) -> None:
            calls.append(f"{self.a},{self.b}")
            if self.a < 0:
                raise ValueError("a must not be negative")

    @rec.record(frozen=True)
    class Child(Base):
        c: str = "c"

    assert repr(Child(1, c="z")) == "test_post_init_inheritance_and_order_checks.<locals>.Child(a=1, b=2, c='z')"
    assert calls[-1] == "1,2"
    with pytest.raises(ValueError, match="negative"):
        Child(-1)
    assert [f.name for f in dataclasses.fields(Child)] == ["a", "b", "c"]
    with pytest.raises(TypeError, match="non-default argument 'y' follows default argument"):
        rec.record(type("Bad", (), {"__annotations__": {"x": "int", "y": "int"}, "x": 1}))
    with pytest.raises(ValueError, match="mutable default"):
        rec.record(type("Bad", (), {"__annotations__": {"x": "list[int]"}, "x": []}))
    with pytest.raises(TypeError, match="slots"):
        rec.record(type("Bad", (), {"__annotations__": {"x": "int"}, "__slots__": ("x",)}))
    base = dataclasses.dataclass(type("D", (), {"__annotations__": {"x": "int"}}))
    with pytest.raises(TypeError, match="is a dataclass"):
        rec.record(type("Bad", (base,), {"__annotations__": {"y": "int"}, "y": 1}))


def test_fields_are_made_once_when_threads_ask_together() -> None:
    """Eight threads asking for a record's fields at once all get the one dict the class keeps."""
    _, rc = _pair()
    got: list[object] = []
    barrier = threading.Barrier(8)

    def ask() -> None:
        barrier.wait()
        got.append(dataclasses.fields(rc))
        got.append(vars(rc)["__dataclass_fields__"])

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 16 and all(g == got[0] for g in got[::2])
    assert all(g is vars(rc)["__dataclass_fields__"] for g in got[1::2])


KW_CALLS: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    ((), {"a": 1}), ((), {"a": 1, "b": "x"}), ((1,), {}), ((), {}), ((), {"b": "x"}), ((), {"a": 1, "c": 2}),
]


@pytest.mark.parametrize(("args", "kwargs"), KW_CALLS, ids=range(len(KW_CALLS)))
def test_keyword_only_records_construct_and_refuse_as_dataclass_does(args: tuple[Any, ...],
                                                                     kwargs: dict[str, Any]) -> None:
    """A kw_only record (the event payload classes) takes its fields by keyword only, a required one after a
    defaulted one included: the same repr or error as the kw_only dataclass; fields() agree, no match args."""
    body: dict[str, Any] = {"__module__": __name__, "__qualname__": "Kw",
                            "__annotations__": {"b": "str | None", "a": "int"}, "b": None}
    dc = dataclasses.dataclass(frozen=True, kw_only=True)(type("Kw", (), dict(body)))
    rc = rec.record(frozen=True, kw_only=True)(type("Kw", (), dict(body)))
    assert _outcome(lambda: rc(*args, **kwargs)) == _outcome(lambda: dc(*args, **kwargs))
    assert [(f.name, f.kw_only) for f in dataclasses.fields(rc)] == [(f.name, f.kw_only) for f in dataclasses.fields(dc)]
    assert rc.__match_args__ == dc.__match_args__ == ()  # type: ignore[attr-defined]


def test_a_dataclass_may_subclass_a_record_payload_base() -> None:
    """A payload class still written with dataclasses.dataclass on the record base Payload gets its fields
    and schema as before: the required field checked, extras dropped by parse, the optional one null."""
    from agent.errors import PayloadError
    from agent.events.payload import Payload

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Legacy(Payload):
        a: int
        b: str | None = None

    assert [(s.name, s.type, s.required) for s in Legacy.fields_of()] == [("a", "int", True), ("b", "str?", False)]
    assert repr(Legacy.parse("k", {"a": 2, "z": 1})).endswith("Legacy(a=2, b=None)")
    with pytest.raises(PayloadError, match="missing required field 'a'"):
        Legacy.check("k", {})
