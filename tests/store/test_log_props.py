"""Property tests: whatever JSON goes in comes back out, in a gap-free, verifiable chain."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.errors import PayloadError
from agent.events import KINDS
from agent.events.canonical import canonical
from agent.store.log import EventLog, row_hash

_scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**63 - 1)
            | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=40))
json_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=20)
extras = st.dictionaries(st.text(max_size=12).filter(lambda k: k not in ("text", "by", "pin")), json_values,
                         max_size=5)

_props = settings(max_examples=60, deadline=None,
                  suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture
def log(backend, new_log, tmp_path):
    """The log on each backend (SQLite: tmp_path/props.db; PostgreSQL: a fresh database)."""
    if backend == "sqlite":
        with EventLog(tmp_path / "props.db") as lg:
            yield lg
    else:
        yield new_log()


@_props
@given(text=st.text(max_size=200), by=st.text(min_size=1, max_size=20), extra=extras,
       tick=st.none() | st.integers(min_value=0, max_value=2**40))
def test_any_json_payload_round_trips(log, text, by, extra, tick):
    """Any JSON payload (extra keys included) reads back identical, at seq = previous + 1, chained."""
    before, prev_hash = log.head()
    payload = {"text": text, "by": by, **extra}
    e = log.append("operator.note", payload, "operator", tick=tick)
    assert e.seq == before + 1
    assert e.prev_hash == prev_hash
    back = log.get(e.seq)
    assert back == e
    assert back.payload == payload
    assert back.tick == tick
    assert list(log.read(before)) == [e]


@_props
@given(batch=st.lists(st.tuples(st.text(max_size=30), extras), min_size=1, max_size=8))
def test_batches_stay_gap_free_and_verify(log, batch):
    """Batches of events get consecutive seqs with no gaps and the whole chain verifies."""
    before = log.last_seq()
    got = log.append_many([("operator.note", {"text": t, "by": "p", **x}, "operator", None) for t, x in batch])
    assert [e.seq for e in got] == list(range(before + 1, before + 1 + len(batch)))
    seqs = [e.seq for e in log.read()]
    assert seqs == list(range(1, len(seqs) + 1))
    assert log.verify().ok


def _wrong_value(typ: str):
    base = typ.rstrip("?")
    return {"str": 1, "int": "1", "float": "1.0", "bool": 1, "dict": [], "list": {}, "any": None}[base]


_required = [(k, f, t) for k, spec in sorted(KINDS.items()) for f, t in sorted(spec.required.items())]


def _valid_payload(kind: str) -> dict:
    sample = {"str": "x", "int": 1, "float": 1.5, "bool": True, "dict": {}, "list": [], "any": 1}
    return {f: sample[t.rstrip("?")] for f, t in KINDS[kind].required.items()}


@pytest.mark.parametrize(("kind", "field", "typ"), _required, ids=[f"{k}.{f}" for k, f, _ in _required])
def test_every_required_field_is_enforced(log, kind, field, typ):
    """For every kind, dropping a required field or giving it the wrong type raises PayloadError; nothing is
    written."""
    good = _valid_payload(kind)
    missing = {k: v for k, v in good.items() if k != field}
    with pytest.raises(PayloadError, match=field):
        log.append(kind, missing, "system")
    if not (typ.endswith("?") or typ == "any"):
        with pytest.raises(PayloadError, match=field):
            log.append(kind, {**good, field: _wrong_value(typ)}, "system")
    assert log.count() == 0


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_accepts_extra_keys(log, kind):
    """Every kind accepts extra payload keys and stores them unchanged."""
    payload = {**_valid_payload(kind), "extra_field": {"nested": [1, 2.5, None, "x"]}}
    if kind == "knowledge.changed":
        payload["change"] = "changed"
    e = log.append(kind, payload, "system")
    assert log.get(e.seq).payload == payload


@_props
@given(bad=st.sampled_from([math.nan, math.inf, -math.inf]), where=st.sampled_from(["top", "nested", "list"]))
def test_non_finite_numbers_are_refused(log, bad, where):
    """NaN and Infinity anywhere in a payload raise PayloadError and nothing is written."""
    before = log.head()
    extra = {"top": {"x": bad}, "nested": {"x": {"y": bad}}, "list": {"x": [1, bad]}}[where]
    with pytest.raises(PayloadError):
        log.append("operator.note", {"text": "t", "by": "b", **extra}, "operator")
    assert log.head() == before


@_props
@given(name=st.text(min_size=1, max_size=20).filter(lambda n: n not in KINDS))
def test_unknown_kinds_are_refused(log, name):
    """Any kind name outside the vocabulary raises PayloadError and nothing is written."""
    with pytest.raises(PayloadError, match="unknown event kind"):
        log.append(name, {"text": "t", "by": "b"}, "operator")
    assert log.count() == 0


# Flat payloads: every scalar, at the edges where JSON encoders differ (tiny floats, integers
# beyond 64 bits, -0.0, exponents, lone surrogates).
_flat_scalars = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                 | st.floats(min_value=-1e-3, max_value=1e-3) | st.text()
                 | st.sampled_from([1e-4, 1e-5, -9.99e-5, 5e-324, -0.0, 1e16, 1.5e17, 1e300, 2**64, -2**63 - 1]))
flat_extras = st.dictionaries(st.text(max_size=12).filter(lambda k: k not in ("text", "by", "pin")), _flat_scalars,
                              max_size=6)


@_props
@given(text=st.text(max_size=50), extra=flat_extras)
def test_a_flat_payload_is_hashed_over_its_canonical_text(log, text, extra):
    """The row of a flat payload holds canonical(payload): the hash recomputed over it matches (what
    copying a log into a fork recomputes), and the chain verifies."""
    payload = {"text": text, "by": "p", **extra}
    try:
        canonical(payload).encode()
    except UnicodeEncodeError:
        return  # a lone surrogate: no log can hold it
    e = log.append("operator.note", payload, "operator")
    assert e.hash == row_hash(e.seq, e.id, e.ts, e.kind, e.version, e.source, e.tick, canonical(payload), None,
                              e.prev_hash)
    assert log.get(e.seq).payload == payload
