"""Hosts where one of ours died, end to end over HTTP against the simulator with the rules provider: such a host
is not rented again the same day, though its offer stays the cheapest on the market."""

from __future__ import annotations

from typing import Any

import httpx

from agent.runtime.tick import run_tick
from agent.sim import Simulator
from agent.sim.http import SimServer
from tests.conftest import events_of, rent_puts, within_policy


def test_a_host_where_one_of_ours_died_is_not_rented_again_the_same_day(
        sim: Simulator, sim_server: SimServer, make_app):
    """The cheapest offer is on a host whose containers exit minutes after they start. The fleet rents it, the
    instance dies and is replaced elsewhere. Five hours later the fleet needs a second instance and that host's
    offer is still the cheapest: the rent goes to another host (a host that failed stays suspect for a day, not
    only for the few hours of observations the rules read)."""
    app = make_app(provider="rules", policy={"max_instances": 4, "jobs_per_hour_by_gpu": {"RTX 4090": 8.0}})

    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        r = httpx.post(f"{sim_server.url}{path}", json=body, timeout=5.0)
        r.raise_for_status()
        return dict(r.json())

    def ok(host: int) -> bool:
        return any(o["host_id"] == host and o["reliability"] >= app.settings.policy.min_reliability
                   for o in sim.offers.values())

    bad = next(h for h, b in sorted(sim.bad_hosts.items()) if b == "exits" and ok(h))
    post("/_sim/offers", {"withdraw": "all"})
    [cheap] = post("/_sim/offers", {"add": [{"gpu_name": "RTX 4090", "dph": 0.20, "host_id": bad}]})["added"]
    post("/_sim/offers", {"add": [{"gpu_name": "RTX 4090", "dph": 0.40}] * 4})
    assert within_policy(app.settings, sim.offers[cheap])
    post("/_sim/demand", {"pending": 0})
    post("/_sim/arrivals", {"shape": "constant", "rate": 8.0})  # one RTX 4090's work
    for _ in range(12):  # the cheap host's instance runs, exits, and is replaced on another host
        sim.advance(300)
        assert run_tick(app).ok
    assert rent_puts(sim, cheap) and [e for e in events_of(app, "host.failed") if e.payload["host_id"] == bad]
    ours = [i for i in sim.instances.values() if str(i["label"] or "").startswith(app.settings.fleet.label_prefix)]
    assert ours and all(i["host_id"] != bad for i in ours)
    for _ in range(60):  # five hours on
        sim.advance(300)
        assert run_tick(app).ok
    assert sim.offers[cheap]["id"] == cheap and not sim.offers[cheap]["rented"]  # still listed, still the cheapest
    before = len(rent_puts(sim, cheap))
    post("/_sim/arrivals", {"shape": "constant", "rate": 16.0})  # a second instance is needed
    for _ in range(6):
        sim.advance(300)
        assert run_tick(app).ok
    assert len(rent_puts(sim, cheap)) == before, [e.payload["text"] for e in events_of(app, "model.response")][-3:]
    ours = [i for i in sim.instances.values() if str(i["label"] or "").startswith(app.settings.fleet.label_prefix)]
    assert len([i for i in ours if i["actual_status"] == "running"]) >= 2  # the second one rented elsewhere
