"""A host's maintenance window announced ahead: the observation shows it once the window starts within
``policy.contract_min_hours``; the instance on that machine works on until ``policy.retire_ahead_hours`` before it,
then stops counting as capacity (as one whose contract ends does), its replacement is rented, and it is drained (no
new work) and destroyed before the machine goes down. Against the real simulator over HTTP."""

from __future__ import annotations

import httpx

from agent.clients.vast import Instance
from agent.fleet import contracts
from agent.sim import ManualClock, SimServer, Simulator
from tests.conftest import events_of
from tests.model.test_rules_sizing import FLEET, ROOMY, _ours, _ticks


def test_instance_left_is_the_earlier_of_contract_end_and_maintenance() -> None:
    now = 1_000_000.0
    assert contracts.instance_left(Instance(id=1), now) is None
    assert contracts.instance_left(Instance(id=1, end_date=now + 7200), now) == 7200
    assert contracts.instance_left(Instance(id=1, maint_start=now + 3600), now) == 3600
    assert contracts.instance_left(Instance(id=1, end_date=now + 7200, maint_start=now + 3600), now) == 3600
    assert contracts.instance_left(Instance(id=1, end_date=now + 600, maint_start=now + 3600), now) == 600


def test_an_instance_facing_maintenance_is_replaced_and_drained_before_the_machine_goes_down(
        make_app, sim: Simulator, sim_server: SimServer, sim_clock: ManualClock) -> None:
    sim.realism.update({"maintenance": 0, "price_increases": 0, "unschedulable": 0, "stuck_scheduling": 0})
    sim.pending = 400.0  # a fleet that needs every instance: the one facing maintenance is replaced, not retired
    app = make_app(provider="rules", policy=ROOMY, fleet=FLEET)
    _ticks(app, sim, sim_clock, 6)
    running = sorted(i["id"] for i in _ours(sim) if i["actual_status"] == "running")
    assert running
    old = running[0]
    machine, host = sim.instances[old]["machine_id"], sim.instances[old]["host_id"]
    r = httpx.post(f"{sim_server.url}/_sim/maintenance",
                   json={"instance_id": old, "in_s": 5 * 3600, "duration_hours": 4, "category": "power"})
    assert r.status_code == 200, r.text
    window = r.json()["maintenance"]
    _ticks(app, sim, sim_clock, 1)
    first = events_of(app, "tick.started")[-1].payload["observation"]
    rec = next(i for i in first["instances"] if i["id"] == old)
    assert 4 * 3600 < rec["ends_s"] <= 5 * 3600  # the window's start, within the horizon (24 h)
    assert all(i["ends_s"] is None for i in first["instances"] if i["id"] != old and i["ours"])

    def busy(n: int) -> None:  # a backlog the whole fleet works on: nothing is surplus
        for _ in range(n):
            sim.pending = max(sim.pending, 400.0)
            _ticks(app, sim, sim_clock, 1)

    busy(47)  # 4 h: the machine is a good one until its window, so it works on
    assert not [e for e in events_of(app, "system.drain") if e.payload["instance_id"] == old]
    assert sim.instances[old]["actual_status"] == "running" and not sim.instances[old]["label"].endswith("-draining")
    busy(2)  # within the hour before the window
    [drained] = [e for e in events_of(app, "system.drain") if e.payload["instance_id"] == old]
    assert drained.payload["ok"] and drained.payload["label"].endswith("-draining")
    assert "maintenance starts in" in drained.payload["reason"] and drained.payload["reason"].endswith(" min")
    assert sim.instances[old]["label"] == drained.payload["label"]  # the workers read it: no new job
    busy(12)
    destroys = [e for e in events_of(app, "system.destroy") if e.payload["instance_id"] == old]
    assert len(destroys) == 1 and destroys[0].payload["status"] == "draining", destroys
    assert destroys[0].payload["reason"].startswith("drained: its machine's maintenance starts in")
    assert old not in sim.instances and sim.destroyed[old]["_destroyed_at"] < window["start_time"]
    assert sim.destroyed[old]["actual_status"] == "running"  # gone before the machine went down
    assert any(i["actual_status"] == "running" and i["machine_id"] != machine for i in _ours(sim))
    assert all(e.payload["host_id"] != host for e in events_of(app, "host.failed"))  # retired, not failed
