"""An instance of ours that vast.ai shows stopped is destroyed by the tick itself, whatever the model does:
fleet-agent never stops an instance, so a stopped one is a failure that still bills storage. End to end over
HTTP against the simulator, with a scripted model that never destroys anything."""

from __future__ import annotations

from typing import Any

import httpx

from agent.fleet import steering
from agent.runtime.tick import run_tick
from agent.sim import SimServer, Simulator
from tests.conftest import events_of, good_offer, plant_ours
from tests.fakes.openai_server import reply

REASON = "stopped without our asking: fleet-agent never stops an instance; it bills storage"


def _stop(server: SimServer, iid: int) -> None:
    r = httpx.post(f"{server.url}/_sim/set_status",
                   json={"instance_id": iid, "status": "stopped",
                         "status_msg": "Unable to schedule: the machine is unavailable"})
    assert r.status_code == 200, r.text


def _listed(app: Any) -> set[int]:
    """What vast.ai (the simulator, over HTTP) lists on the account now."""
    return {i.id for i in app.vast().list_instances()}


def _destroy_calls(app: Any) -> list[dict[str, Any]]:
    return [e.payload for e in events_of(app, "tool.called") if e.payload["name"] == "destroy_instance"]


def _dead_alert(app: Any, iid: int) -> Any:
    return next((a for a in app.log.store.open_alerts() if a.dedup_key == f"dead:{iid}"), None)


def test_a_stopped_instance_of_ours_is_destroyed_by_the_tick_through_an_intent(sim: Simulator, sim_server: SimServer,
                                                                                make_app, fake_model):
    app = make_app()
    iid = plant_ours(app, sim, good_offer(sim, app.settings)["id"])
    sim.advance(600)
    _stop(sim_server, iid)
    fake_model.enqueue(reply("nothing to do"), reply("nothing to do"), reply("nothing to do"))
    r = run_tick(app)
    assert r.ok, r.reason

    assert _dead_alert(app, iid) is not None  # the alert opens, as before
    [why] = [e for e in events_of(app, "system.destroy", 1)]
    assert why.source == "system" and why.payload == {"instance_id": iid, "status": "stopped", "reason": REASON}
    [called] = _destroy_calls(app)
    assert called["side_effect"] is True and called["idempotency_key"] and "by" not in called
    [result] = [p for p in (e.payload for e in events_of(app, "tool.result", 1)) if p["call_id"] == called["call_id"]]
    assert result["ok"] and result["effect"] == {"type": "destroyed", "instance_id": iid}
    seqs = [why.seq, *(e.seq for e in events_of(app, "tool.called", 1)),
            *(e.seq for e in events_of(app, "tool.result", 1) if e.payload["call_id"] == called["call_id"])]
    assert seqs == sorted(seqs)  # why -> intent -> result
    assert iid not in _listed(app)
    assert any(x.startswith("destroyed") for x in r.actions)

    r = run_tick(app)  # the next tick: it is gone, nothing is destroyed again, the alert resolves
    assert r.ok, r.reason
    assert len(_destroy_calls(app)) == 1
    assert _dead_alert(app, iid) is None


def test_while_paused_a_stopped_instance_is_only_alerted(sim: Simulator, sim_server: SimServer, make_app,
                                                         fake_model):
    app = make_app()
    iid = plant_ours(app, sim, good_offer(sim, app.settings)["id"])
    steering.pause(app.log, by="ops", reason="maintenance", until=None)
    sim.advance(600)
    _stop(sim_server, iid)
    fake_model.enqueue(reply("nothing to do"), reply("nothing to do"))
    assert run_tick(app).ok
    assert _dead_alert(app, iid) is not None
    assert not _destroy_calls(app) and not events_of(app, "system.destroy")
    assert iid in _listed(app)

    steering.resume(app.log, by="ops", reason=None)  # once resumed, the next tick destroys it
    assert run_tick(app).ok
    assert len(_destroy_calls(app)) == 1 and iid not in _listed(app)


def test_a_dry_run_logs_the_destroy_once_and_sends_nothing(sim: Simulator, sim_server: SimServer, make_app,
                                                          fake_model):
    app = make_app(policy={"dry_run": True})
    iid = plant_ours(app, sim, good_offer(sim, app.settings)["id"])
    sim.advance(600)
    _stop(sim_server, iid)
    fake_model.enqueue(reply("nothing to do"), reply("nothing to do"))
    assert run_tick(app).ok
    assert run_tick(app).ok
    [called] = _destroy_calls(app)
    assert called.get("dry_run") is True and iid in _listed(app)
