"""Rents vast.ai never schedules: the rules provider replaces an instance still waiting in scheduling after
``SCHEDULING_LIMIT`` (10 min; vast.ai schedules in 0.5-4 min), and avoids a host only after its machine failed to
schedule two of our rents (one is the market's luck). Against the real simulator, whose rents stick in
scheduling at ``realism.stuck_scheduling``."""

from __future__ import annotations

from typing import Any

from agent.model import rules
from agent.sim import Simulator
from agent.sim.instances import SCHEDULING_MSG
from tests.conftest import events_of
from tests.model.test_rules_sizing import FLEET, ROOMY, _ticks, json_args


def _destroys(app: Any) -> list[dict[str, Any]]:
    return [json_args(c) for e in events_of(app, "model.response") for c in e.payload["tool_calls"]
            if c["name"] == "destroy_instance"]


def _rents(app: Any, sim: Simulator) -> list[tuple[int, int]]:
    """(tick, host) of every rent the tool made, in order."""
    out = []
    for e in events_of(app, "tool.result"):
        if e.payload["name"] == "rent_instance" and e.payload["ok"]:
            iid = int((e.payload.get("effect") or {})["instance_id"])
            inst = sim.instances.get(iid) or sim.destroyed[iid]
            out.append((e.tick, int(inst["host_id"])))
    return out


def test_a_rent_stuck_in_scheduling_is_replaced_and_its_host_avoided_after_two(make_app, sim, sim_clock):
    sim.realism.update({"stuck_scheduling": 1.0, "unschedulable": 0, "maintenance": 0, "price_increases": 0})
    sim.pending = 20.0
    app = make_app(provider="rules", policy={**ROOMY, "max_instances": 1}, fleet=FLEET)
    _ticks(app, sim, sim_clock, 12)
    waiting = [i for i in sim.instances.values() if i["status_msg"] == SCHEDULING_MSG]
    assert waiting, "the simulator's rents stick in scheduling"
    reasons = [d["reason"] for d in _destroys(app)]
    assert reasons and all("waited in scheduling" in r and "over 10" in r for r in reasons), reasons
    obs = [e.payload["observation"] for e in events_of(app, "tick.started")]
    for r, d in zip(reasons, _destroys(app), strict=True):
        seen = [i for o in obs for i in o["instances"] if i["id"] == d["instance_id"]]
        assert max(i["age_s"] for i in seen) > rules.SCHEDULING_LIMIT  # not before ten minutes
    rents = _rents(app, sim)
    first_host = rents[0][1]
    on_first = [t for t, h in rents if h == first_host]
    assert len(on_first) == 2, rents  # rented there again after one failure: one failure is luck...
    assert rents[2][1] != first_host, rents  # ...two are the host
    # a failed schedule is not the host's failure: no 24 h exclusion of a host, no host.failed
    assert not events_of(app, "host.failed")


def test_one_scheduling_failure_avoids_no_host_two_do() -> None:
    stuck = {"ours": True, "host_id": 5, "status": "provisioning", "status_msg": SCHEDULING_MSG, "age_s": 700}
    early = {**stuck, "id": 3, "age_s": 300}
    unsched = {"ours": True, "host_id": 5, "id": 2, "status": "stopped", "age_s": 0,
               "status_msg": "Unable to schedule: the machine is unavailable; instance created stopped"}
    assert rules._scheduling_failed([{"instances": [{**stuck, "id": 1}]}]) == set()
    assert rules._scheduling_failed([{"instances": [{**stuck, "id": 1}, early]}]) == set()  # 5 min: still fine
    assert rules._scheduling_failed([{"instances": [{**stuck, "id": 1}]}, {"instances": [{**stuck, "id": 1}]}]) \
        == set()  # the same instance seen twice is one failure
    assert rules._scheduling_failed([{"instances": [{**stuck, "id": 1}]}, {"instances": [unsched]}]) == {5}
    assert rules._is_dead({**stuck, "id": 1}, 1200) and not rules._is_dead(early, 1200)
