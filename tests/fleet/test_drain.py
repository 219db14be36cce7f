"""Drain first (agent/fleet/drain.py): an instance of ours whose contract ends or whose machine goes into
maintenance within policy.retire_ahead_hours (it works on until then) is labelled ``<label>-draining`` (the simulator's workers finish the
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
    work = sim.instances[a]["_jobs"]
    _tick(app, sim, sim_clock, 5 * 3600.0 + 60.0)
    assert not events_of(app, "system.drain") and not sim.instances[a]["label"].endswith(drain.DRAINING)
    assert sim.instances[a]["_jobs"] > work + 10  # it worked the 5 h as any other
    _tick(app, sim, sim_clock, 1.0)  # under policy.retire_ahead_hours (1 h) left now
    [e] = events_of(app, "system.drain")
    assert e.payload["instance_id"] == a and e.payload["ok"] and "contract ends in 59 min" in e.payload["reason"]
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
    sim.instances[a]["end_date"] = sim.now() + 50 * 60.0
    before = len(mutating_requests(sim))
    for _ in range(3):
        _tick(app, sim, sim_clock)
    [e] = events_of(app, "system.drain")
    assert e.payload["dry_run"] and not e.payload["ok"]
    assert not sim.instances[a]["label"].endswith(drain.DRAINING)
    assert len(mutating_requests(sim)) == before


def test_the_observation_says_maintenance_for_a_maintenance_and_contract_end_for_a_contract(make_app, sim, sim_clock):
    """One instance's machine announces a maintenance window in 5 h, the other's contract ends in 6 h: the
    observation keeps ``ends_s`` (when each stops working, what the rules read) and adds ``maint_s`` for the
    window, and the model reads ``maintenance in 5 h`` for the first and ``contract ends in 6 h`` for the
    second. The same records without ``maint_s`` (a row written before it) read as they always did."""
    import dataclasses

    from agent import events as ev

    app = make_app()
    a, b = _two(app, sim)
    sim.schedule_maintenance(sim.instances[a]["machine_id"], sim.now() + 5 * 3600.0 + 60, 4, "power")
    sim.instances[b]["end_date"] = sim.now() + 6 * 3600.0 + 60
    _tick(app, sim, sim_clock, 1.0)
    e = events_of(app, "tick.started")[-1]
    recs = {i["id"]: i for i in e.payload["observation"]["instances"]}
    assert 5 * 3600 <= recs[a]["maint_s"] == recs[a]["ends_s"] <= 5 * 3600 + 60
    assert recs[b]["maint_s"] is None and 6 * 3600 <= recs[b]["ends_s"] <= 6 * 3600 + 60
    text = ev.render(e)["content"]  # type: ignore[index]
    line_a = next(x for x in text.splitlines() if x.startswith(f"  #{a} "))
    line_b = next(x for x in text.splitlines() if x.startswith(f"  #{b} "))
    assert " · maintenance in 5 h" in line_a and "contract" not in line_a, line_a
    assert " · contract ends in 6 h" in line_b and "maintenance" not in line_b, line_b
    # a row written before maint_s existed: the window read as the contract's end, as v7 wrote it
    old = {**e.payload["observation"], "instances": [{k: v for k, v in i.items() if k != "maint_s"}
                                                     for i in e.payload["observation"]["instances"]]}
    before = ev.render(dataclasses.replace(e, payload={"observation": old}, version=7))["content"]  # type: ignore[index]
    assert " · contract ends in 5 h" in next(x for x in before.splitlines() if x.startswith(f"  #{a} "))


def test_a_large_fleet_names_an_instance_facing_maintenance_as_needing_attention(make_app, sim, sim_clock):
    """v8's compact observation of a fleet past GROUP_OVER: the one instance whose machine goes into maintenance
    is listed by id among those needing attention, as ``maintenance in 5 h``; the healthy rest are counted."""
    from agent import events as ev
    from agent.events.kinds.tick import GROUP_OVER
    from tests.fleet.test_observation_compact import _plant

    sim.realism.update({"rate_interval": 0, "price_increases": 0, "stuck_scheduling": 0, "unschedulable": 0,
                        "maintenance": 0})
    app = make_app()
    ids = _plant(app, sim, GROUP_OVER + 5)
    sim_clock.advance(3600)  # listed and loaded: running
    target = ids[7]
    sim.schedule_maintenance(sim.instances[target]["machine_id"], sim.now() + 5 * 3600.0 + 60, 4, "power")
    _tick(app, sim, sim_clock, 1.0)
    e = events_of(app, "tick.started")[-1]
    assert e.version >= 8
    text = ev.render(e)["content"]  # type: ignore[index]
    head, _, attention = text.partition("instances needing attention")
    assert "contract or maintenance ending" in attention.splitlines()[0], text
    [line] = [x for x in attention.split("changes since last tick")[0].splitlines() if x.startswith(f"  #{target} ")]
    assert " · maintenance in 5 h" in line and "contract" not in line, line
    assert f"#{target}" not in head and "healthy instances of ours" in head
