"""Real models' habits, each taught to the fake server as a mode real servers have, then run through
whole ticks: the simulator and the fake model over real HTTP, the real openai SDK, a real SQLite log."""

from __future__ import annotations

import json
from typing import Any

from agent.tick import run_tick
from tests.conftest import events_of
from tests.fakes.openai_server import reply


def _assistant_arguments(body: dict[str, Any]) -> list[str]:
    return [c["function"]["arguments"] for m in body["messages"] if m["role"] == "assistant"
            for c in m.get("tool_calls") or []]


def test_malformed_arguments_stay_in_the_event_but_the_history_sent_back_is_valid_json(make_app, fake_model):
    """A call whose arguments carry text after the JSON is not run (its result says why), the event
    keeps the raw string, and every later request carries '{}' in its place: a strict server (vLLM,
    llama-server) accepts the next tick instead of refusing every tick with HTTP 400."""
    fake_model.strict_history = True
    raw = '{"limit": 3} I will now rent the cheapest'
    fake_model.enqueue(reply("", tool_calls=[("search_offers", raw)]), reply("ok"), reply("still nothing"))
    app = make_app()

    r1 = run_tick(app)
    assert r1.ok, r1.reason
    r2 = run_tick(app)
    assert r2.ok, r2.reason

    resp = events_of(app, "model.response", 1)[0]
    assert resp.payload["tool_calls"][0]["arguments"] == raw
    result = events_of(app, "tool.result", 1)[0].payload
    assert not result["ok"] and "not valid JSON" in result["error"]
    later = fake_model.chat_requests[1:]
    assert len(later) == 2
    for req in later:
        assert _assistant_arguments(req.json) == ["{}"]
    assert app.log.verify().ok


def test_valid_arguments_are_sent_back_byte_for_byte(make_app, fake_model):
    """Arguments that are a JSON object go back exactly as the model wrote them (spacing included),
    so each request stays a byte prefix of the next and prompt caches keep hitting."""
    fake_model.strict_history = True
    raw = '{"limit":   2}'
    fake_model.enqueue(reply("", tool_calls=[("search_offers", raw)]), reply("ok"))
    app = make_app()
    assert run_tick(app).ok
    assert _assistant_arguments(fake_model.chat_requests[1].json) == [raw]
    assert json.loads(raw) == {"limit": 2}
