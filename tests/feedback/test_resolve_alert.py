"""The model resolves the alerts it raised (``resolve_alert``), through the real tool pipeline and the real
SDK against the scripted model server; alerts raised by code or operators it cannot close."""

from __future__ import annotations

from typing import Any

from agent import feedback
from agent.runtime.idle import actionable_alerts
from agent.runtime.tick import run_tick
from tests.conftest import events_of, plant_ours, tool_messages
from tests.fakes.openai_server import reply


def _results(app: Any, name: str) -> list[dict[str, Any]]:
    return [e.payload for e in events_of(app, "tool.result") if e.payload["name"] == name]


def test_the_model_resolves_an_alert_it_raised(sim, make_app, fake_model):
    """Raised in one tick, resolved in the next: one alert.resolved with the model's reason; the model sees
    the tool's answer."""
    app = make_app(alerts={"unmet_after": 0})
    fake_model.enqueue(reply(tool_calls=[("raise_alert", {"severity": "warning", "title": "host 1 looks slow",
                                                          "key": "slow:1"})]), reply("done"))
    assert run_tick(app).ok
    (a,) = [x for x in app.log.store.open_alerts() if x.dedup_key == "slow:1"]
    assert a.raised_by == "model"
    fake_model.enqueue(reply(tool_calls=[("resolve_alert", {"alert_id": a.id, "reason": "host 1 recovered"})]),
                       reply("done"))
    assert run_tick(app).ok
    assert app.log.store.alert(a.id).status == "resolved"
    (ev,) = [e for e in events_of(app, "alert.resolved") if e.payload["alert_id"] == a.id]
    assert ev.payload["reason"] == "resolved by the model: host 1 recovered" and ev.tick == 2
    assert _results(app, "resolve_alert")[-1]["ok"] is True
    seen = [m["content"] for m in tool_messages(fake_model.chat_requests[-1].json)]
    assert f"alert #{a.id} resolved" in seen[-1]


def test_alerts_of_code_or_operators_and_unknown_or_resolved_ones_are_refused(sim, make_app, fake_model):
    """Each refusal says why and changes nothing; the alert stays open."""
    app = make_app(alerts={"unmet_after": 0})
    code_id, _ = feedback.raise_alert(app.log, key="model:window", severity="warning", title="window shrank")
    op_id, _ = feedback.raise_alert(app.log, key="op:note", severity="info", title="watch host 7",
                                    raised_by="operator")
    gone_id, _ = feedback.raise_alert(app.log, key="old", severity="info", title="old", raised_by="model")
    feedback.resolve_alert(app.log, "old", "cleared")
    before = len(events_of(app, "alert.resolved"))
    calls = [("resolve_alert", {"alert_id": i, "reason": "fixed"}) for i in (code_id, op_id, 999, gone_id)]
    fake_model.enqueue(reply(tool_calls=calls), reply("done"))
    assert run_tick(app).ok
    errors = [p["error"] for p in _results(app, "resolve_alert")]
    assert all(not p["ok"] for p in _results(app, "resolve_alert"))
    assert "raised by code" in errors[0] and "only alerts you raised" in errors[0]
    assert "raised by an operator" in errors[1]
    assert errors[2].startswith("no alert #999")
    assert "already resolved" in errors[3]
    assert len(events_of(app, "alert.resolved")) == before
    assert {app.log.store.alert(code_id).status, app.log.store.alert(op_id).status} == {"open"}


def test_model_idle_counts_only_alerts_the_model_can_act_on(sim, sim_clock, make_app, fake_model):
    """An open alert about credit, or one the model raised, is no work for the model: text-only ticks do not
    open model:idle. A stuck instance's alert is: it does."""
    app = make_app(alerts={"idle_ticks": 2, "unmet_after": 0}, demand=False)
    feedback.raise_alert(app.log, key="model:window", severity="warning", title="window shrank")
    feedback.raise_alert(app.log, key="mine", severity="info", title="noted", raised_by="model")
    for _ in range(3):
        assert run_tick(app).ok
    assert not [a for a in app.log.store.open_alerts() if a.dedup_key == "model:idle"]
    iid = plant_ours(app, sim, sim.find_offer(good=False, behaviour="stuck_loading")["id"])
    for _ in range(3):  # created, then loading for good: stuck once past alerts.stuck_after (20 min)
        assert run_tick(app).ok
        sim_clock.advance(25 * 60)
    assert run_tick(app).ok
    (stuck,) = [a for a in app.log.store.open_alerts() if a.dedup_key == f"stuck:{iid}"]
    assert actionable_alerts(app.log, [f"#{stuck.id} warning: stuck (x1)", "#1 warning: window shrank (x1)",
                                       "#2 info: noted (x1)"]) == [stuck.id]
    for _ in range(2):
        assert run_tick(app).ok
    assert [a.title for a in app.log.store.open_alerts() if a.dedup_key == "model:idle"] == \
        ["the model has not acted for 2 ticks"]
