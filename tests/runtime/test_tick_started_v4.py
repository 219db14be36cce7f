"""tick.started v4 (agent.events.kinds.tick) stores a column of the instance table whose values repeat
as its distinct values and an index into them: every reader gets the records back exactly as appended,
the model sees the same text as v2 and v3, the hash covers the stored form, and logs of v2, v3 and v4
observations read the same."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent import events as ev
from agent.events.canonical import canonical
from agent.events.columns import dictionary, pack_instances, undictionary, unpack_instances
from agent.store.log import EventLog
from tests.tamper import Tamper

GPUS = ("RTX 3090", "RTX 4090", "RTX A6000")
STATES = ("running", "loading", "exited")


def fleet(n: int) -> list[dict[str, Any]]:
    """``n`` instances of a few GPU models, states and hosts, as a tick observes them."""
    return [{"id": 21_000_000 + i, "label": "", "gpu_name": GPUS[i % 3], "num_gpus": 1, "status": STATES[i % 5 % 3],
             "status_msg": None if i % 5 % 3 == 0 else "Pulling image sim/prover:latest: downloading layers",
             "dph": round(0.2 + 0.01 * i, 4), "age_s": 600.0 * (i % 4), "since": 1750000300.0 + 300 * (i % 4),
             "intended": "running", "host_id": 40_000 + i // 2, "ours": i % 2 == 0} for i in range(n)]


def test_a_repeating_column_is_stored_once_per_value_and_read_back_exactly() -> None:
    """A column whose values repeat becomes {"index", "values"} (each distinct value once, first seen
    first; 1, 1.0 and true are different values); a column of distinct values, and one the index would not
    make shorter, stays a list; ``id`` always stays a list; unpacking gives back the records with their
    JSON types, values not shared between records, and packing them again gives the same table."""
    assert dictionary(["b", "a", "b", "b", "a"]) == ["b", "a", "b", "b", "a"]  # not shorter as an index
    assert dictionary(["RTX 4090"] * 3 + ["A100"]) == ["RTX 4090"] * 3 + ["A100"]  # nor here
    assert dictionary(["RTX 4090"] * 6 + ["A100"]) == {"index": [0] * 6 + [1], "values": ["RTX 4090", "A100"]}
    assert dictionary([{"k": 1}, {"k": 1.0}, {"k": True}] * 6) == {"index": [0, 1, 2] * 6,
                                                                    "values": [{"k": 1}, {"k": 1.0}, {"k": True}]}
    assert dictionary([0.5, 0.25, 0.125]) == [0.5, 0.25, 0.125]
    records = [{"id": i, "gpu": "RTX 4090 PCIe" if i % 3 else "H100 SXM5 80GB", "c": {"k": [i % 2]},
                "x": [1, 1.0, True][i % 3]} for i in range(9)]
    packed = pack_instances(records, dictionaries=True)
    assert packed["columns"]["id"] == list(range(9))
    assert packed["columns"]["gpu"] == {"index": [0, 1, 1] * 3, "values": ["H100 SXM5 80GB", "RTX 4090 PCIe"]}
    back = unpack_instances(json.loads(canonical(packed)), dictionaries=True)
    assert canonical(back) == canonical(records) and [type(r["x"]) for r in back[:3]] == [int, float, bool]
    back[0]["c"]["k"].append(5)
    assert back[2]["c"] == {"k": [0]}
    assert pack_instances(unpack_instances(packed, dictionaries=True), dictionaries=True) == packed
    assert unpack_instances(packed) == packed  # v3 reads no index: a v4 table is not a v3 one


def test_a_malformed_index_is_left_as_stored() -> None:
    """An index out of range, of the wrong length or not of integers, or a dict that is not an index,
    is not expanded: the table is returned as stored (a row edited behind the log's back; verify fails)."""
    assert undictionary({"index": [0, 2], "values": ["a", "b"]}, 2) is None
    assert undictionary({"index": [0], "values": ["a"]}, 2) is None
    assert undictionary({"index": [0, True], "values": ["a", "b"]}, 2) is None
    assert undictionary({"index": [0, 1], "values": ["a", "b"], "x": 1}, 2) is None
    bad = {"n": 2, "columns": {"id": [1, 2], "s": {"index": [0, 5], "values": ["a"]}}, "same": {}}
    assert unpack_instances(bad, dictionaries=True) == bad


def test_a_fleet_observation_is_smaller_as_v4_and_reads_back_as_appended(tmp_path: Path) -> None:
    """Observations of 40 instances are appended in v4's stored form; the stored table is well under v3's for the same
    records; every read gives the appended payload, the model's text is v3's, the chain verifies, and an
    edit to a stored index value fails verification at that row."""
    obs = [{"time": 1750001000.0 + 300 * t, "instances": fleet(40), "fleet_dph": 1.0, "errors": [], "changes": []}
           for t in range(3)]
    with EventLog(tmp_path / "events.db") as log:
        appended = [log.append("tick.started", {"observation": o}, "scheduler", n + 1) for n, o in enumerate(obs)]
        assert {e.version for e in appended} == {ev.KINDS["tick.started"].version} and appended[0].version >= 4
        assert canonical(ev.stored_payload(appended[0])) == canonical(  # v5 on store v4's form
            ev.VOCABULARY.encode("tick.started", 4, {"observation": obs[0]}))
        assert [e.payload["observation"] for e in log.read()] == obs
        v3 = canonical(ev.VOCABULARY.encode("tick.started", 3, {"observation": obs[0]}))
        v4 = canonical(ev.stored_payload(appended[0]))
        assert len(v4) < 0.75 * len(v3), (len(v4), len(v3))
        as_v3 = ev.Event(**{**appended[0].__dict__, "version": 3})
        assert ev.render(appended[0]) == ev.render(as_v3)
        assert log.verify().ok
        with Tamper(log.path) as t:
            t.replace_in_payload(2, '"index":[0,1,2,0,', '"index":[0,1,1,0,')
        r = log.verify()
        assert not r.ok and r.first_bad_seq == 2
