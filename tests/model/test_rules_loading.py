"""Rents that load for good, against the real simulator: an instance loading well past what this fleet's own
instances took to load (``agent.model.loading``) stops counting as capacity, so the rules provider rents cover
for it, on another host, while ``alerts.stuck_after`` still decides its fate. A fleet whose image takes twenty
minutes to load learns that from its own loads and rents no cover for a normal start."""

from __future__ import annotations

from typing import Any

import httpx

from agent.model import loading
from agent.sim import Simulator
from tests.conftest import events_of
from tests.model.test_rules_scheduling import _destroys
from tests.model.test_rules_sizing import FLEET, ROOMY, _ticks

CALM = {"stuck_scheduling": 0, "unschedulable": 0, "maintenance": 0, "price_increases": 0}


def _rents(app: Any, sim: Simulator) -> list[tuple[int, int, int]]:
    """(tick, instance id, host) of every rent the tool made, in order."""
    out = []
    for e in events_of(app, "tool.result"):
        if e.payload["name"] == "rent_instance" and e.payload["ok"]:
            iid = int((e.payload.get("effect") or {})["instance_id"])
            out.append((e.tick, iid, int((sim.instances.get(iid) or sim.destroyed[iid])["host_id"])))
    return out


def _observations(app: Any) -> dict[int, dict[str, Any]]:
    return {e.tick: e.payload["observation"] for e in events_of(app, "tick.started")}


def _arrivals(sim_server: Any, rate: float) -> None:
    r = httpx.post(f"{sim_server.url}/_sim/arrivals", json={"shape": "constant", "rate": rate}, timeout=10.0)
    assert r.status_code == 200, r.text


def _ran(sim: Simulator) -> list[dict[str, Any]]:
    return [i for i in [*sim.instances.values(), *sim.destroyed.values()] if i.get("_running_since") is not None
            or i["actual_status"] == "running"]


def test_an_instance_loading_past_the_fleets_own_loads_gets_cover_on_another_host(make_app, sim: Simulator,
                                                                                  sim_server, sim_clock):
    sim.realism.update(CALM)
    sim.bad_hosts.clear()  # the first rents start as vast.ai's do (0.5-4 min scheduled, 2.5-7 min loading)
    _arrivals(sim_server, 5.0)
    sim.pending = 5.0
    app = make_app(provider="rules", policy=ROOMY, fleet=FLEET)
    _ticks(app, sim, sim_clock, 6)
    assert len(_ran(sim)) >= loading.LOADING_SAMPLES, "the fleet has starts of its own to learn from"
    for o in sim.offers.values():  # from now on, every host loads for good
        sim.bad_hosts[o["host_id"]] = "stuck_loading"
    before = len(_rents(app, sim))
    _arrivals(sim_server, 40.0)  # most of the fleet rented now, within the instance cap: room for cover
    sim.pending = 40.0
    _ticks(app, sim, sim_clock, 6)
    rents = _rents(app, sim)[before:]
    assert rents, "the fleet rents for the backlog"
    first_tick = rents[0][0]
    first = {iid: host for t, iid, host in rents if t == first_tick}
    assert all((sim.instances.get(i) or sim.destroyed[i])["actual_status"] == "loading" for i in first)
    # the longest start (rent to running) of the fleet's first rents, from the simulator's own record
    took = max(i["_running_since"] - i["start_date"] for i in _ran(sim) if i["id"] not in first)
    limit = max(loading.LOADING_FLOOR, loading.LOADING_MARGIN * took)
    destroy_ticks = [e.tick for e in events_of(app, "tool.result") if e.payload["name"] == "destroy_instance"
                     and e.payload["ok"] and (e.payload.get("effect") or {}).get("instance_id") in first]
    obs = _observations(app)
    rented_at = obs[first_tick]["time"]  # rents follow the tick's observation
    # the first tick they had loaded well past the fleet's longest start since their rent
    past = min(t for t, o in obs.items() if o["time"] - rented_at > limit)
    cover = [host for t, _, host in rents if t == past]
    assert cover, (rents, past, took)  # cover is rented then, no later...
    assert not destroy_ticks or min(destroy_ticks) > past, destroy_ticks  # ...before the stuck limit gives up on them
    seen = [i for i in obs[past]["instances"] if i["id"] in first]
    assert seen and all(i["status"] == "loading" for i in seen), seen  # ...while they still load
    assert obs[past]["need"]["gap"] > 0  # the observation's need (what a model is shown) sizes it the same way
    assert not set(cover) & set(first.values()), "the cover is rented on another host"
    text = next(e.payload["text"] for e in events_of(app, "model.response") if e.tick == past)
    assert "not counted" in text, text
    reasons = [d["reason"] for d in _destroys(app) if d["instance_id"] in first]
    assert all("loading after" in r for r in reasons), reasons  # given up on only by the stuck limit, as before


def test_a_fleet_whose_image_loads_for_twenty_minutes_rents_no_cover_for_a_normal_start(make_app, sim: Simulator,
                                                                                       sim_server, sim_clock):
    sim.realism.update({**CALM, "image_pull": 900.0})  # every first load takes 17.5-22 min
    sim.bad_hosts.clear()  # and every host starts what it is rented for: each start is a normal one
    _arrivals(sim_server, 10.0)
    sim.pending = 10.0
    app = make_app(provider="rules", policy=ROOMY, fleet=FLEET,
                   alerts={"stuck_after": 3600.0})
    _ticks(app, sim, sim_clock, 8)  # the first rents load for twenty minutes and run
    assert len(_ran(sim)) >= loading.LOADING_SAMPLES
    before = len(_rents(app, sim))
    _arrivals(sim_server, 60.0)
    sim.pending = 100.0
    _ticks(app, sim, sim_clock, 7)
    later = [iid for _, iid, _ in _rents(app, sim)[before:]]
    assert later, "the fleet rents for the backlog"
    obs = _observations(app)
    # the later rents load for as long as the first did: past a fixed 8 minutes, never past the fleet's own starts
    ages = [i["age_s"] for o in obs.values() for i in o["instances"] if i["id"] in later and i["status"] == "loading"]
    assert max(ages) >= 600, ages
    texts = [e.payload["text"] for e in events_of(app, "model.response")]
    assert not [t for t in texts if "not counted" in t], texts
