"""Operator feedback is never compacted before the model has seen it, verbatim and tagged."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent import context, feedback
from agent.context import request_payload, select
from agent.context.compaction import Plan, compaction_payload, plan, summarise
from agent.context.seen import is_operator_input
from agent.events import Event, render
from agent.runtime.tick import run_tick
from tests.context.test_context import POLICY, TOOLS, observation, words
from tests.context.test_context_build import METER, TIGHT, MemLog, project_mem
from tests.context.test_context_props import PROMPTS
from tests.fakes.openai_server import is_summary_request, reply, summary_reply

# No masking: these tests need ticks that end past high water, which a masking-only compaction avoids.
SETTINGS = {"budget_tokens": 6000, "output_reserve": 500, "high_water": 0.6, "low_water": 0.3,
            "tool_output_max_tokens": 700, "summary_max_tokens": 500, "pinned_max_tokens": 1200,
            "mask_after_ticks": 0}

# Runs on SQLite and on PostgreSQL (make_app opens the log on the test's backend).
pytestmark = pytest.mark.usefixtures("backend")


def _agent(body: dict[str, Any]) -> Any:
    """Search offers once per tick, then stop; as a summariser (asked for the summary), a short text. The
    closing answer's length varies with the conversation's, so the context grows unevenly from tick to tick
    and some tick ends past high water whatever the fixed part of the request (prompt, tools, policy) weighs."""
    if is_summary_request(body):
        return summary_reply(body)
    if body["messages"][-1]["role"] == "tool":
        return reply("fleet looks fine " + words(len(body["messages"]), len(body["messages"]) * 7 % 60))
    return reply("checking the market", tool_calls=[("search_offers", {"limit": 50})])


def _over_high_water(app: Any) -> bool:
    cs = app.settings.context
    p = context.project(app.log, app.prompts, cs, policy=app.policy_dict(), tools=app.tool_specs(),
                        model=app.settings.model.name)
    return context.needs_compaction(p, cs)


def test_feedback_between_ticks_at_high_water_reaches_the_next_request_verbatim(make_app, fake_model, sim_clock,
                                                                               tmp_path):
    """With the context past high water when a tick ends, an ack with a note, a note and a knowledge
    edit made before the next tick are all in that tick's first request verbatim, although the tick
    compacts (or warns of the compaction) before asking: the cut stops at the newest event the model has
    seen."""
    kdir = tmp_path / "knowledge"
    kdir.mkdir()
    (kdir / "hosts.md").write_text("# Hosts\n- all hosts allowed\n", encoding="utf-8")
    fake_model.default = _agent
    # one step per tick: a tick whose request crosses high water is warned, runs its call and ends past it
    app = make_app(context=SETTINGS, schedule={"max_steps": 1})
    for _ in range(60):
        assert run_tick(app).ok
        sim_clock.advance(300)
        if _over_high_water(app):
            break
    assert _over_high_water(app), ("the ticks never reached high water", [
        (e.seq, e.kind, e.payload.get("method"), e.payload.get("tokens_before"), e.payload.get("tokens_after"))
        for e in app.log.read(0, kinds=["context.compacted", "context.pressure", "tick.failed"])][-8:])
    alert_id, _ = feedback.raise_alert(app.log, key="test:stuck", severity="warning",
                                       title="Instance 7 stuck in loading", settings=app.settings)
    feedback.ack(app.log, alert_id, "bob", "rebooted it by hand")
    feedback.say(app.log, "demand spike expected at 18:00", "alice")
    (kdir / "hosts.md").write_text("# Hosts\n- avoid host 4417: flaky\n", encoding="utf-8")
    before_seq = app.log.last_seq()
    before = len(fake_model.chat_requests)
    assert run_tick(app).ok

    compactions = list(app.log.read(before_seq, kinds=["context.compacted"]))
    warnings = list(app.log.read(before_seq, kinds=["context.pressure"]))
    assert compactions or warnings, "the tick compacted, or warned of the compaction"
    first = next(r.json for r in fake_model.chat_requests[before:] if not is_summary_request(r.json))
    text = "\n".join(m.get("content") or "" for m in first["messages"])
    assert f"[alert #{alert_id} acked · bob] Instance 7 stuck in loading — note: rebooted it by hand" in text
    assert "[operator note · alice] demand spike expected at 18:00" in text
    assert "[knowledge edit · hosts.md] changed" in text and "+- avoid host 4417: flaky" in text
    # a compaction before the first request (no warning was due) stops short of the unseen feedback; after
    # a memory-pressure warning the first request carried it, so a later step may fold it
    assert warnings or all(c.payload["covered_to"] < before_seq for c in compactions)


# ------------------------------------------------------------------ random interleavings, in memory

STEPS = st.lists(st.sampled_from(["tick", "tick", "note", "pin", "ack", "knowledge", "unpin", "compact"]),
                 min_size=1, max_size=40)


def _operator(log: MemLog, what: str, i: int, pins: list[int]) -> None:
    if what == "note":
        log.append("operator.note", {"text": f"note {i}: " + words(i, 30), "by": "alice"}, "operator")
    elif what == "pin":
        pins.append(log.append("operator.note", {"text": f"order {i}", "by": "bob", "pin": True}, "operator").seq)
    elif what == "ack":
        log.append("alert.acked", {"alert_id": 3, "by": "carol", "title": "disk full", "note": f"cleaned {i}"},
                   "operator")
    elif what == "knowledge":
        log.append("knowledge.changed", {"name": "notes.md", "change": "changed", "hash": f"h{i}", "size": 100,
                                         "text": words(i, 60), "diff": f"+line {i}"}, "operator")
    elif what == "unpin" and pins:
        log.append("directive.unpinned", {"directive_id": pins.pop(0), "by": "bob"}, "operator")


def _compact(log: MemLog, tick: int, force: bool) -> None:
    p = plan(select(log.events), prompts=PROMPTS, settings=TIGHT, policy=POLICY, tools=TOOLS, meter=METER,
             open_alert_ids=[3], owned_instance_ids=[1000], force=force)
    if isinstance(p, Plan):
        summary, method, attempts = summarise(p, None, TIGHT.summary_max_tokens)
        log.append("context.compacted", compaction_payload(p, summary, method, attempts, prompts=PROMPTS,
                                                           settings=TIGHT, policy=POLICY, tools=TOOLS), "system", tick)


def _ask(log: MemLog, tick: int, calls: list[dict[str, Any]]) -> list[Any]:
    _compact(log, tick, force=False)
    proj = project_mem(log.events, TIGHT)
    req = log.append("model.request", request_payload(proj), "system", tick)
    log.append("model.response", {"text": "", "tool_calls": calls, "request_seq": req.seq}, "model", tick)
    return proj.messages


def _tick(log: MemLog, n: int, sent: list[tuple[int, list[Any]]]) -> None:
    log.append("tick.started", {"observation": observation(n)}, "scheduler", n)
    call = {"id": f"c{n}", "name": "search_offers", "arguments": "{}"}
    sent.append((log.events[-1].seq, _ask(log, n, [call])))
    log.append("tool.result", {"call_id": call["id"], "name": "search_offers", "ok": True, "output": words(n, 500)},
               "tool", n)
    sent.append((log.events[-1].seq, _ask(log, n, [])))
    log.append("tick.completed", {"steps": 2}, "scheduler", n)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(STEPS)
def test_every_operator_event_is_in_a_request_before_a_summary_covers_it(steps):
    """Over random interleavings of ticks, operator events (note, directive, ack, knowledge edit, unpin)
    and forced compactions, every operator event is rendered verbatim in some request sent before the
    first compaction whose summary covers it."""
    log = MemLog()
    sent: list[tuple[int, list[Any]]] = []   # (seq of the request's event, its messages)
    pins: list[int] = []
    n = 0
    for i, what in enumerate(steps):
        if what == "tick":
            n += 1
            _tick(log, n, sent)
        elif what == "compact":
            _compact(log, n, force=True)
        else:
            _operator(log, what, i, pins)
    comps = [e for e in log.events if e.kind == "context.compacted"]
    for e in (x for x in log.events if is_operator_input(x)):
        first = next((c for c in comps if c.payload["covered_to"] >= e.seq), None)
        if first is None:
            continue
        content = _content(e)
        assert any(seq < first.seq and any(m.get("content") == content for m in msgs) for seq, msgs in sent), (
            f"{e.kind} #{e.seq} summarised by #{first.seq} before any request showed it")


def _content(e: Event) -> str:
    msg = render(e)
    assert msg is not None
    return str(msg["content"])
