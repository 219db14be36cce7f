"""The vocabulary at the log's edge: appends record each kind's current version, token counts are
those of the version's rendering, and typed payloads refuse bad fields naming the kind and the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent import events as ev
from agent.context.cache import ProjectionCache
from agent.errors import PayloadError
from agent.events.kinds.feedback import OperatorNoteV1
from agent.store.log import EventLog
from tests.events.test_events_golden import SAMPLES

_WRONG = {"str": 1, "int": "1", "float": "1.0", "bool": 1, "dict": [], "list": {}}
_current = sorted((name, cases[0][1]) for (name, version), cases in SAMPLES.items()
                  if version == ev.KINDS[name].version)


def test_appends_record_current_version_and_its_rendering(tmp_path: Path) -> None:
    """Every kind appended to a real log stores the kind's current version in the row and no token count
    (tokens are counted off the append path): the projection's count of the row is the count of its
    rendering read back from the row (None when not model-visible)."""
    assert {n for n, _ in _current} == set(ev.KINDS)
    with EventLog(tmp_path / "events.db") as log:
        for name, payload in _current:
            log.append(name, payload, "system", tick=1)
        meter = ProjectionCache().meter(log.tokenizer)
        for e in log.read():
            msg = ev.render(e)
            assert e.tokens is None, e.kind
            assert meter.event_tokens(e) == (log.tokenizer.count_message(msg) if msg is not None else None), e.kind
    with EventLog(tmp_path / "events.db", readonly=True) as log:
        rows = [(e.kind, e.version) for e in log.read()]  # the version column as stored
    assert len(rows) == len(ev.KINDS)
    assert all(version == ev.KINDS[kind].version for kind, version in rows)


def test_log_head_is_not_a_kind() -> None:
    """log.head, which nothing ever appended, is gone from the vocabulary (the head is a file, not an event)."""
    with pytest.raises(PayloadError, match="unknown event kind 'log.head'"):
        ev.kind("log.head")


_optional = [(k.name, f.name, f.base) for k in ev.KINDS.values() for f in k.fields
             if not f.required and f.base in _WRONG]


@pytest.mark.parametrize(("name", "field", "base"), _optional, ids=[f"{k}.{f}" for k, f, _ in _optional])
def test_optional_fields_are_type_checked(name: str, field: str, base: str) -> None:
    """An optional field of the wrong JSON type is refused with the kind and the field named; null passes."""
    good = dict(SAMPLES[(name, ev.KINDS[name].version)][0][1])
    with pytest.raises(PayloadError, match=rf"^{name}: field '{field}' must be {base}, got "):
        ev.kind(name).validate({**good, field: _WRONG[base]})
    ev.kind(name).validate({**good, field: None})


@pytest.mark.parametrize("bad", [[], "text", 3, None])
def test_payload_must_be_an_object(bad: Any) -> None:
    """A payload that is not a JSON object is refused, naming the kind."""
    with pytest.raises(PayloadError, match=r"^operator\.note: payload must be a JSON object"):
        ev.kind("operator.note").validate(bad)


def test_missing_field_message_lists_the_required_fields() -> None:
    """A missing required field is named, with every required field of the kind listed."""
    with pytest.raises(PayloadError, match=r"missing required field 'by' \(required: by, text\)"):
        ev.kind("operator.note").validate({"text": "x"})


def test_typed_payload_of_a_stored_event() -> None:
    """payload_of gives the typed payload (extra keys left out, absent optional fields at their defaults)."""
    e = ev.Event(seq=1, id="i", ts="2026-11-29T10:05:12.123456Z", kind="operator.note", source="operator",
                 tick=None, payload={"text": "hi", "by": "alice", "extra": 1})
    p = ev.payload_of(e)
    assert p == OperatorNoteV1(text="hi", by="alice", pin=None)


def test_unknown_kind_suggests_the_nearest_name() -> None:
    """A misspelt kind is refused with the nearest known name."""
    with pytest.raises(PayloadError, match="did you mean 'operator.note'"):
        ev.kind("operator.notes")
