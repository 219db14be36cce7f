"""Before a compaction summarises, the model is warned once and gets one step to save what it needs.

When a request passes high water and the coming compaction would summarise (not only mask), the tick first
appends ``context.pressure``, rendered as ``[memory pressure · system] ...`` naming how many of the oldest
ticks go, and asks the model once more; the next step compacts. What the model saved with ``remember`` is in
the pinned block of that compaction. The warning is an event, so replay re-derives the request carrying it.
"""

from __future__ import annotations

from typing import Any

from agent.context.replay import replay, replay_summaries
from agent.runtime.tick import run_tick
from tests.context.test_context_seen import SETTINGS
from tests.fakes.openai_server import is_summary_request, reply, summary_reply


def _agent(body: dict[str, Any]) -> Any:
    """Search once per tick; when warned of memory pressure, remember a fact; as summariser, summarise."""
    if is_summary_request(body):
        return summary_reply(body)
    last = body["messages"][-1]
    if last["role"] == "user" and last["content"].startswith("[memory pressure · system]"):
        return reply("saving", tool_calls=[("remember", {"key": "host-4417", "text": "flaky, avoid"})])
    if last["role"] == "tool":
        return reply("fleet looks fine")
    return reply("checking the market", tool_calls=[("search_offers", {"limit": 50})])


def test_the_model_is_warned_once_and_what_it_saves_survives_the_compaction(make_app: Any, fake_model: Any,
                                                                             sim_clock: Any) -> None:
    """Over ticks that compact several times: each summarising compaction is preceded by exactly one
    warning the model answered; what it remembered stays in view through the compaction (kept past the
    cut or pinned by it) to the last request; every request (the warned ones included) replays."""
    fake_model.default = _agent
    app = make_app(context=SETTINGS)
    for _ in range(20):
        assert run_tick(app).ok
        sim_clock.advance(300)
    events = list(app.log.read(0))
    warnings = [e for e in events if e.kind == "context.pressure"]
    comps = [e for e in events if e.kind == "context.compacted" and e.payload["method"] != "masked"]
    assert warnings and comps
    for w in warnings:
        nxt = next((c for c in comps if c.seq > w.seq), None)
        if nxt is None:
            continue
        between = [e for e in events if w.seq < e.seq < nxt.seq]
        assert sum(e.kind == "context.pressure" for e in between) == 0
        saved = [e for e in between if e.kind == "memory.written"]
        assert saved   # kept verbatim past the cut, or already pinned by it
        assert saved[0].seq >= nxt.payload["first_kept_seq"] or "host-4417" in nxt.payload["pinned"]["memory"]
    last = [r.json for r in fake_model.chat_requests if not is_summary_request(r.json)][-1]
    assert any("host-4417" in (m.get("content") or "") for m in last["messages"])
    warned = [r.json for r in fake_model.chat_requests
              if r.json["messages"][-1]["content"].startswith("[memory pressure · system] The next compaction "
                                                              "will summarise the oldest")]
    assert len(warned) == len(warnings)
    specs, policy = app.tool_specs(), app.policy_dict()
    results = [*replay(app.log, app.prompts, app.settings.context, policy=policy, tools=specs),
               *replay_summaries(app.log, app.prompts, app.settings.context, policy=policy, tools=specs)]
    assert results and all(r.ok for r in results), [r.reasons for r in results if not r.ok][:1]
