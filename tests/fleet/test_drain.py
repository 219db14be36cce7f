"""Drain first (agent/fleet/drain.py): an instance of ours whose contract ends or whose machine goes into
maintenance within policy.contract_min_hours is labelled ``<label>-draining`` (the simulator's workers finish the
job in hand and take no new one), then destroyed once idle, or 30 min before it would stop even while busy; a dry
run labels nothing and logs it once. Whatever the model does (here: nothing). Real HTTP against the simulator."""

from __future__ import annotations

from typing import Any

from agent.fleet import drain
from agent.runtime.tick import run_tick
from agent.sim import ManualClock, Simulator
from agent.sim.instances import jobs_per_h
from tests.conftest import events_of, good_offer, mutating_requests, plant_ours


def _two(app: Any, sim: Simulator) -> tuple[int, int]:
    sim.realism.update({"quick": 1, "price_increases": 0})  # planted instances running at once
    a = plant_ours(app, sim, good_offer(sim, app.settings)["id"], key="feedc0ffee01")
    b = plant_ours(app, sim, good_offer(sim, app.settings)["id"], key="feedc0ffee02")
    sim.advance(600)
    sim.pending = 5000.0  # busy
    return a, b


def _tick(app: Any, sim: Simulator, clock: ManualClock, seconds: float = 300.0) -> None:
    assert run_tick(app).ok
    clock.advance(seconds)
    sim.tick()


def test_an_ending_instance_is_labelled_finishes_its_job_and_goes_once_idle(make_app, sim, sim_clock):
    app = make_app()
    a, b = _two(app, sim)
    sim.instances[a]["end_date"] = sim.now() + 6 * 3600.0
    _tick(app, sim, sim_clock, 1.0)
    [e] = events_of(app, "system.drain")
    assert e.payload["instance_id"] == a and e.payload["ok"] and "contract ends in 6 h" in e.payload["reason"]
    label = sim.instances[a]["label"]
    assert label.endswith(drain.DRAINING) and not sim.instances[b]["label"].endswith(drain.DRAINING)
    assert a in sim.instances  # busy with its job: not destroyed yet
    jobs = sim.instances[a]["_jobs"]
    sim.instances[a]["_drain_left"] = 1200.0  # the job in hand needs 20 more minutes
    _tick(app, sim, sim_clock, 600.0)
    assert a in sim.instances and not [x for x in events_of(app, "system.destroy") if x.payload["instance_id"] == a]
    _tick(app, sim, sim_clock, 900.0)  # its job done by now: idle at the next look
    idle_jobs = sim.instances[a]["_jobs"]
    _tick(app, sim, sim_clock)
    [d] = [x for x in events_of(app, "system.destroy") if x.payload["instance_id"] == a]
    assert d.payload["status"] == "draining" and "its last job is done" in d.payload["reason"]
    gone = sim.destroyed[a]
    assert gone["_jobs"] - jobs <= 1200.0 * jobs_per_h(gone) / 3600.0 + 1e-9  # the job in hand...
    assert gone["_jobs"] == idle_jobs  # ...and no new one
    assert sim.instances[b]["_jobs"] > 2.0  # the other took the work
    assert len(events_of(app, "system.drain")) == 1  # labelled once


def test_a_busy_draining_instance_goes_thirty_minutes_before_its_end(make_app, sim, sim_clock):
    app = make_app()
    a, _ = _two(app, sim)
    sim.instances[a]["end_date"] = sim.now() + 45 * 60.0
    _tick(app, sim, sim_clock, 1.0)
    sim.instances[a]["_drain_left"] = 10 * 3600.0  # a long job: never idle before its end
    _tick(app, sim, sim_clock, 600.0)
    assert a in sim.instances
    _tick(app, sim, sim_clock, 600.0)  # 25 min left
    _tick(app, sim, sim_clock)
    [d] = [x for x in events_of(app, "system.destroy") if x.payload["instance_id"] == a]
    assert "30 min or less left, busy or not" in d.payload["reason"]
    assert sim.destroyed[a]["_destroyed_at"] < sim.destroyed[a]["end_date"] - 20 * 60


def test_a_dry_run_labels_nothing_and_logs_it_once(make_app, sim, sim_clock):
    app = make_app(policy={"dry_run": True})
    a, _ = _two(app, sim)
    sim.instances[a]["end_date"] = sim.now() + 6 * 3600.0
    before = len(mutating_requests(sim))
    for _ in range(3):
        _tick(app, sim, sim_clock)
    [e] = events_of(app, "system.drain")
    assert e.payload["dry_run"] and not e.payload["ok"]
    assert not sim.instances[a]["label"].endswith(drain.DRAINING)
    assert len(mutating_requests(sim)) == before
