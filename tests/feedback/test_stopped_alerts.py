"""An instance of ours that vast.ai shows stopped without our asking is an alert the operator sees at the tick
that first lists it: ``dead:<id>`` for an on-demand one (a mass stop of them too: one per instance, each
critical), ``outbid:<id>`` for an interruptible one a higher bid took. vast.ai never outbids an on-demand
instance, so an outbid message on one does not hide it. The simulator is driven over HTTP as a script would."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from agent.runtime.tick import run_tick
from agent.sim import SimServer
from tests.conftest import events_of, plant_ours

TICK_S = 300.0


@pytest.fixture
def admin(sim_server: SimServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=sim_server.url, timeout=10) as client:
        yield client


def _post(admin: httpx.Client, path: str, body: dict[str, Any]) -> Any:
    r = admin.post(path, json=body)
    assert r.status_code == 200, r.text
    return r.json()


def _alerts(app: Any) -> dict[str, Any]:
    return {a.dedup_key: a for a in app.log.store.alerts(all_=True)}


def _raised(app: Any, tick: int) -> set[str]:
    return {e.payload["dedup_key"] for e in events_of(app, "alert.raised", tick)}


def _until_running(app: Any, sim: Any, sim_clock: Any, ids: list[int]) -> None:
    for _ in range(8):
        assert run_tick(app).ok
        sim_clock.advance(TICK_S)
        if all(sim.instances[i]["actual_status"] == "running" for i in ids):
            return
    raise AssertionError({i: sim.instances[i]["actual_status"] for i in ids})


def test_a_mass_stop_of_on_demand_instances_raises_dead_for_each_at_the_next_tick(sim, sim_clock, make_app,
                                                                                  fake_model, admin):
    """Every instance of ours stops at once, as its host's side stops it (POST /_sim/stop: no outbid message):
    the next tick raises a critical ``dead:<id>`` for each, saying it stopped without our asking, and no
    ``outbid:`` (they are on-demand)."""
    app = make_app(alerts={"unmet_after": 0}, policy={"max_instances": 5})
    ids = [plant_ours(app, sim, sim.find_offer(gpu)["id"], key=f"feedc0ffee0{n}")
           for n, gpu in enumerate(("RTX 4090", "RTX 3090", "RTX 4090"))]
    _until_running(app, sim, sim_clock, ids)
    assert not [k for k in _alerts(app) if k.startswith("dead:")]
    _post(admin, "/_sim/stop", {"instance_ids": ids})
    sim_clock.advance(TICK_S)
    r = run_tick(app)
    assert r.ok, r.reason
    alerts = _alerts(app)
    for iid in ids:
        a = alerts[f"dead:{iid}"]
        assert a.severity == "critical" and a.dedup_key in _raised(app, r.tick), a
        assert "stopped without our asking" in a.title, a.title
    assert not [k for k in alerts if k.startswith(("outbid:", "credit:"))], sorted(alerts)


def test_an_outbid_message_on_an_on_demand_instance_does_not_hide_it(sim, sim_clock, make_app, fake_model, admin):
    """vast.ai outbids only an interruptible instance. An on-demand one showing stopped with an outbid message
    stopped without our asking all the same: ``dead:<id>`` and a failure against its host. The bid instance
    a higher bid took gets ``outbid:<id>`` and no ``dead:``."""
    app = make_app(alerts={"unmet_after": 0}, policy={"max_instances": 5})
    on_demand = plant_ours(app, sim, sim.find_offer("RTX 4090")["id"], key="feedc0ffee01")
    offer = sim.find_offer("RTX 3090")
    label = app.settings.fleet.label_prefix + app.settings.agent_id + "-feedc0ffee02"
    bid = sim.create_instance(offer["id"], label=label, price=round(offer["min_bid"] * 1.5, 4))
    app.log.append("instance.adopted", {"instance_id": bid, "label": label, "idem_key": "feedc0ffee02"}, "system")
    _post(admin, "/_sim/bid_market", {"moving": False})
    _until_running(app, sim, sim_clock, [on_demand, bid])
    _post(admin, "/_sim/set_status", {"instance_id": on_demand, "status": "stopped",
                                      "status_msg": "outbid: stopped by a higher bid"})
    _post(admin, "/_sim/outbid", {"instance_id": bid})
    sim_clock.advance(60)
    r = run_tick(app)
    assert r.ok, r.reason
    alerts = _alerts(app)
    dead = alerts.get(f"dead:{on_demand}")
    assert dead is not None and dead.severity == "critical" and dead.dedup_key in _raised(app, r.tick), alerts
    assert f"outbid:{bid}" in alerts and f"dead:{bid}" not in alerts and f"outbid:{on_demand}" not in alerts
    failed = [e.payload["instance_id"] for e in events_of(app, "host.failed")]
    assert on_demand in failed and bid not in failed


def test_a_bid_instance_stopped_while_meant_to_run_is_one_outbid_not_also_dead(sim, sim_clock, make_app, fake_model,
                                                                               admin):
    """An interruptible instance vast.ai shows stopped while it is meant to run, with no outbid message, is read
    as an outbid where the market's handling reads it so (``outbid:<id>``): not also ``dead:``, and no failure
    against its host. Two alerts for one event would page the operator twice."""
    app = make_app(alerts={"unmet_after": 0}, policy={"max_instances": 5})
    offer = sim.find_offer("RTX 3090")
    label = app.settings.fleet.label_prefix + app.settings.agent_id + "-feedc0ffee03"
    bid = sim.create_instance(offer["id"], label=label, price=round(offer["min_bid"] * 1.5, 4))
    app.log.append("instance.adopted", {"instance_id": bid, "label": label, "idem_key": "feedc0ffee03"}, "system")
    _post(admin, "/_sim/bid_market", {"moving": False})
    _until_running(app, sim, sim_clock, [bid])
    _post(admin, "/_sim/stop", {"instance_id": bid})
    sim_clock.advance(60)
    r = run_tick(app)
    assert r.ok, r.reason
    alerts = _alerts(app)
    assert _raised(app, r.tick) == {f"outbid:{bid}"} and f"dead:{bid}" not in alerts, sorted(alerts)
    assert bid not in [e.payload["instance_id"] for e in events_of(app, "host.failed")]
