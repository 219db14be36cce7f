"""The payload check written out for each class's fields (``Payload.checker``) decides exactly as the field by
field one: the same PayloadError, word for word, or the same acceptance and the same flatness, for every
class of every kind and any payload at all, and an append gives the same error before and after it compiles."""

from __future__ import annotations

import enum
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent import events as ev
from agent.errors import PayloadError
from agent.events import payload as payload_mod
from agent.events.payload import COMPILE_AFTER, Payload, flat
from agent.store.log import EventLog

_CLASSES = sorted({v.payload for k in ev.KINDS.values() for v in k.versions}, key=lambda c: c.__qualname__)


class _Text(str):
    pass


class _Number(enum.IntEnum):
    ONE = 1


class _Object(dict):  # type: ignore[type-arg]
    pass


_scalars = (st.none() | st.booleans() | st.integers() | st.sampled_from([2**64, -2**63 - 1, _Number.ONE])
            | st.floats() | st.sampled_from([1e-4, 1e-5, -9.99e-5, -0.0, 0.0, math.inf, -math.nan, 5e-324])
            | st.text(max_size=5) | st.builds(_Text, st.text(max_size=3)))
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=2) | st.tuples(inner)
                       | st.dictionaries(st.text(max_size=3), inner, max_size=2), max_leaves=4)
# Values of each field type as appends give them, floats at the edges of flatness.
_USUAL = {"str": st.text(max_size=5), "int": st.integers(), "bool": st.booleans(),
          "float": st.integers(-3, 3) | st.floats(allow_nan=False) | st.sampled_from([1e-4, 9.99e-5, -0.0, 1e-300]),
          "dict": st.dictionaries(st.text(max_size=3), _scalars, max_size=2), "list": st.lists(_scalars, max_size=2),
          "any": _scalars}


@st.composite
def _payloads(draw: st.DrawFn, cls: type[Payload]) -> Any:
    """Mostly payloads an append would take, each field now and then absent, null or any other value;
    now and then extra keys (text or not), a dict subclass, or not a dict at all."""
    out: dict[Any, Any] = {}
    for s in cls.fields_of():
        how = draw(st.sampled_from(["usual"] * 6 + ["absent", "null", "other"]))
        if how != "absent":
            out[s.name] = {"usual": lambda s=s: draw(_USUAL[s.base]), "null": lambda: None,
                           "other": lambda: draw(_values)}[how]()
    for k in draw(st.lists(st.text(max_size=4) | st.integers(0, 3) | st.builds(_Text, st.just("text")), max_size=2)):
        out[k] = draw(_values)
    shape = draw(st.sampled_from(["dict"] * 8 + ["subclass", "list", "none"]))
    return {"dict": out, "subclass": _Object(out), "list": list(out), "none": None}[shape]


def _outcome(fn: Any, kind: str, payload: Any) -> tuple[str, object]:
    try:
        return "ok", fn(kind, payload)
    except PayloadError as e:
        return "error", str(e)


_COMPILED: dict[type[Payload], Any] = {}


@pytest.mark.parametrize("cls", _CLASSES, ids=lambda c: c.__qualname__)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_written_out_check_decides_as_the_field_by_field_one(cls: type[Payload], data: st.DataObject) -> None:
    """For any payload of any class: the same error text, or acceptance with the same flatness."""
    payload = data.draw(_payloads(cls))
    compiled = _COMPILED.get(cls) or _COMPILED.setdefault(cls, payload_mod._compile_check(cls))
    want = _outcome(lambda k, p: flat(cls.check_fields(k, p)), "some.kind", payload)
    assert _outcome(compiled, "some.kind", payload) == want


@pytest.mark.parametrize("cls", _CLASSES, ids=lambda c: c.__qualname__)
def test_each_class_takes_its_own_usual_payload_at_a_glance(cls: type[Payload]) -> None:
    """A payload of every declared field with a value of its usual type is accepted, flat exactly when no
    value is an object or an array; without a required field it names that field."""
    usual = {"str": "x", "int": 2, "float": 0.5, "bool": True, "dict": {"a": 1}, "list": [1], "any": "y"}
    specs = cls.fields_of()
    payload = {s.name: usual[s.base] for s in specs}
    compiled = payload_mod._compile_check(cls)
    assert compiled("k", payload) is all(s.base not in ("dict", "list") for s in specs)
    for s in specs:
        if s.required:
            with pytest.raises(PayloadError, match=f"missing required field '{s.name}'"):
                compiled("k", {k: v for k, v in payload.items() if k != s.name})


def test_an_append_refuses_a_bad_payload_alike_before_and_after_the_check_is_written_out(tmp_path: Path) -> None:
    """The same error for the same bad note while the class is checked field by field and once its check
    has been written out (after COMPILE_AFTER payloads), singly and in a batch; nothing bad is written."""
    bad = {"text": "t", "by": 3}
    with EventLog(tmp_path / "a.db") as log:
        cls = ev.kind("operator.note").payload
        cls._checker, cls._asked = None, 0
        errors = []
        with pytest.raises(PayloadError) as first:
            log.append("operator.note", bad, "operator")
        errors.append(str(first.value))
        log.append_many([("operator.note", {"text": f"n{i}", "by": "a"}, "operator", None)
                         for i in range(COMPILE_AFTER)])
        assert cls._checker is not None
        for call in (lambda: log.append("operator.note", bad, "operator"),
                     lambda: log.append_many([("operator.note", {"text": "ok", "by": "a"}, "operator", None),
                                              ("operator.note", bad, "operator", None)])):
            with pytest.raises(PayloadError) as e:
                call()
            errors.append(str(e.value))
        assert errors == ["operator.note: field 'by' must be str, got int"] * 3
        assert log.count() == COMPILE_AFTER and log.verify().ok
