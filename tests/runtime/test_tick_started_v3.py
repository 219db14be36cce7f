"""tick.started v3 stores the observation's instance records as columns (agent.events.kinds.tick):
every reader gets the records back exactly as appended, the model sees the same text as v2, the hash
covers the stored form (verify, export and a fork's copy check it), and a log of v2 observations reads
the same as one of v3."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from agent import events as ev
from agent.errors import PayloadError
from agent.events import Event
from agent.events.canonical import canonical
from agent.events.columns import pack_instances, unpack_instances
from agent.store.log import GENESIS, EventLog, row_hash
from tests.tamper import Tamper

MSG = "Error response from daemon: failed to create task for container"


def record(iid: int, status: str = "running", **extra: Any) -> dict[str, Any]:
    base = {"id": iid, "label": "fleet-a", "gpu_name": "RTX 4090", "num_gpus": 1, "status": status,
            "status_msg": None if status == "running" else MSG, "dph": 0.31, "age_s": 600.0,
            "since": 1750000300.0, "intended": "running", "host_id": 40 + iid, "ours": True}
    return {**base, **extra}


def observation(t: float, records: list[dict[str, Any]]) -> dict[str, Any]:
    return {"time": t, "instances": records, "fleet_dph": round(sum(r["dph"] for r in records if r["ours"]), 4),
            "errors": [], "balance": 120.5, "account_balance": -3.0, "demand": None, "changes": []}


TICKS = [
    observation(1750001000.0, [record(1), record(2, "loading"), record(3, ours=False)]),
    observation(1750001300.0, [record(1), record(2), record(3, "exited", ours=False)]),
    observation(1750001600.0, [record(2, "offline", dph=0.29)]),
    observation(1750001900.0, []),
]


@pytest.fixture
def log(tmp_path: Path):
    with EventLog(tmp_path / "data" / "events.db") as lg:
        yield lg


def test_records_round_trip_exactly_and_odd_lists_stay_lists() -> None:
    """Packing then unpacking gives the records back with their JSON types (1, 1.0, true and -0.0 kept
    apart); a value every record shares is stored once and not shared between the records read back;
    ``id`` is always a column; an empty list, records whose keys differ and non-records stay lists;
    packing what unpacking gave returns the stored table unchanged."""
    records = [{"id": 1, "a": 1, "b": 0.0, "c": {"k": [1]}, "d": None},
               {"id": 2, "a": 1.0, "b": -0.0, "c": {"k": [1]}, "d": None},
               {"id": 3, "a": True, "b": 0.0, "c": {"k": [1]}, "d": None}]
    packed = pack_instances(records)
    assert packed == {"n": 3, "columns": {"id": [1, 2, 3], "a": [1, 1.0, True], "b": [0.0, -0.0, 0.0]},
                      "same": {"c": {"k": [1]}, "d": None}}
    back = unpack_instances(json.loads(canonical(packed)))
    assert canonical(back) == canonical(records)
    assert [type(r["a"]) for r in back] == [int, float, bool]
    back[0]["c"]["k"].append(2)
    assert back[1]["c"] == {"k": [1]}
    assert pack_instances(back[1:]) == {"n": 2, "columns": {"id": [2, 3], "a": [1.0, True], "b": [-0.0, 0.0]},
                                        "same": {"c": {"k": [1]}, "d": None}}
    one = pack_instances([{"id": 7, "x": 1}])
    assert one == {"n": 1, "columns": {"id": [7]}, "same": {"x": 1}} and unpack_instances(one) == [{"id": 7, "x": 1}]
    for odd in ([], [{"id": 1}, {"id": 2, "x": 1}], [{"id": 1, "x": 1}, {"id": 2, "y": 1}], [1, 2], [{"id": 1}, 2]):
        assert pack_instances(odd) == odd
    assert unpack_instances({"n": 2, "columns": {"id": [1]}, "same": {}}) == {"n": 2, "columns": {"id": [1]},
                                                                               "same": {}}


def test_a_tick_is_stored_as_columns_and_read_back_as_appended(log: EventLog) -> None:
    """The row holds the table (fewer bytes than the records); every read gives the appended payload;
    the chain verifies; an export line holds the stored form, whose hash is the event's."""
    appended = [log.append("tick.started", {"observation": o}, "scheduler", n + 1) for n, o in enumerate(TICKS)]
    assert all(e.version >= 3 for e in appended)  # v3, or v4, which stores the same table
    assert [e.payload["observation"] for e in appended] == TICKS
    assert [e.payload["observation"] for e in log.read()] == TICKS
    assert log.get(1) == appended[0]
    stored = ev.stored_payload(appended[0])["observation"]["instances"]
    assert stored["columns"]["id"] == [1, 2, 3] and stored["same"]["gpu_name"] == "RTX 4090"
    n, size = log.store.payload_bytes_by_kind()["tick.started"]
    assert n == 4 and size < sum(len(canonical({"observation": o})) for o in TICKS) * 0.8
    assert log.verify().ok
    out = io.StringIO()
    log.export(out)
    for line, e in zip(out.getvalue().splitlines(), appended, strict=True):
        d = json.loads(line)
        assert d["payload"] == ev.stored_payload(e)
        assert row_hash(d["seq"], d["id"], d["ts"], d["kind"], d["version"], d["source"], d["tick"],
                        canonical(d["payload"]), d["tokens"], d["prev_hash"]) == e.hash


def test_an_edit_to_the_stored_table_fails_verification(log: EventLog) -> None:
    """Changing a value in a stored column (a status) breaks that row's hash: verify names its seq."""
    for n, o in enumerate(TICKS):
        log.append("tick.started", {"observation": o}, "scheduler", n + 1)
    with Tamper(log.path) as t:
        t.replace_in_payload(2, '"exited"', '"running"')
    r = log.verify()
    assert not r.ok and r.first_bad_seq == 2


def test_instances_that_are_not_a_list_are_refused(log: EventLog) -> None:
    """An observation whose instances is not a list is refused with the field named; nothing is written."""
    with pytest.raises(PayloadError, match=r"tick.started: observation.instances must be a list"):
        log.append("tick.started", {"observation": {"instances": {"n": 0, "columns": {}, "same": {}}}}, "scheduler", 1)
    assert log.last_seq() == 0


def _chained(items: list[tuple[int, dict[str, Any]]]) -> list[Event]:
    """tick.started events as a release at ``version`` wrote them, chained from genesis."""
    out, prev = [], GENESIS
    for n, (version, payload) in enumerate(items, start=1):
        eid, ts = f"00000000-0000-4000-8000-{n:012d}", f"2026-11-29T10:{n:02d}:00.000000Z"
        stored = ev.VOCABULARY.encode("tick.started", version, payload)
        h = row_hash(n, eid, ts, "tick.started", version, "scheduler", n, canonical(stored), None, prev)
        out.append(Event(seq=n, id=eid, ts=ts, kind="tick.started", source="scheduler", tick=n, payload=payload,
                         version=version, prev_hash=prev, hash=h))
        prev = h
    return out


def _seen(log: EventLog) -> dict[str, Any]:
    return {"read": [e.payload for e in log.read()],
            "content": [(ev.render(e) or {}).get("content") for e in log.read()],
            "states": log.store.instance_states(),
            "running": log.store.observed_runs(""),
            "rates": [r[2] for r in log.store.fleet_rates(after_seq=0, since_ts="")]}


@pytest.mark.parametrize("new", [3, 4, 5])
def test_readers_see_a_v3_or_v4_log_as_they_see_a_v2_log(tmp_path: Path, new: int) -> None:
    """The same observations logged as v2 and as v3 or v4 (and a v2 log continued by v3, then v4) read the
    same everywhere: the payloads, the text the model sees, the instance states, the spend's running
    observation runs (the spend read model) and the fleet's $/h; each log verifies, and a v3 or v4 log
    copies into a fork's log with its hashes."""
    payloads = [{"observation": o} for o in TICKS]
    logs = {}
    for name, versions in (("v2", [2, 2, 2, 2]), ("new", [new] * 4), ("mixed", [2, 2, 3, new])):
        lg = EventLog(tmp_path / name / "events.db")
        lg.adopt(_chained(list(zip(versions, payloads, strict=True))))
        assert lg.verify().ok
        logs[name] = lg
    try:
        seen = {name: _seen(lg) for name, lg in logs.items()}
        assert seen["new"] == seen["v2"] and seen["mixed"] == seen["v2"]
        t1, t2, t3 = (f"2026-11-29T10:0{n}:00.000000Z" for n in (1, 2, 3))
        assert seen["v2"]["running"] == {1: [(t1, t2, True)], 2: [(t1, t1, False), (t2, t2, True), (t3, t3, False)]}
        with EventLog(tmp_path / "fork" / "events.db") as fork:
            assert fork.adopt(logs["new"].read()) == 4
            assert [e.hash for e in fork.read()] == [e.hash for e in logs["new"].read()] and fork.verify().ok
    finally:
        for lg in logs.values():
            lg.close()
