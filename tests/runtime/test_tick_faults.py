"""Model faults through the real SDK: bad tool calls become error results the model sees;
failed model calls are logged and end the tick as tick.failed with a reason; a context-length
error compacts once and retries once. Nothing raises out of run_tick."""

from __future__ import annotations

from typing import Any

import pytest

from agent.runtime.tick import run_tick
from tests.conftest import events_of, mutating_requests, tool_messages
from tests.fakes.openai_server import (
    Step,
    context_length_error,
    empty_choices,
    error,
    hang,
    is_summary_request,
    raw,
    reply,
)

SUMMARY = ("## Fleet state and commitments\n- no instances yet\n## Decisions and why\n- waited for demand\n"
           "## Open problems\n- none\n## Operator directives\n- none\n## Completed actions\n- none")

# Runs on SQLite and on PostgreSQL (make_app opens the log on the test's backend).
pytestmark = pytest.mark.usefixtures("backend")


def _ends(app: Any) -> dict[int, list[str]]:
    """tick -> the kinds of its terminal events."""
    out: dict[int, list[str]] = {}
    for e in app.log.read(0, kinds=["tick.completed", "tick.failed"]):
        out.setdefault(e.tick, []).append(e.kind)
    return out


def test_malformed_arguments_and_unknown_tool_become_error_results(sim, make_app, fake_model):
    """Unparseable arguments, a missing argument and an unknown tool run nothing: each gets an
    error tool result the model sees in its next request, and the tick completes."""
    fake_model.enqueue(
        reply("acting", tool_calls=[("rent_instance", '{"offer_id": 12, "reason": '),
                                    ("destroy_instance", {"reason": "no id"}),
                                    ("launch_rockets", {"count": 40})]),
        reply("I will fix my calls next time"))
    app = make_app()

    r = run_tick(app)

    assert r.ok, r.reason
    results = events_of(app, "tool.result", 1)
    assert [e.payload["ok"] for e in results] == [False, False, False]
    errors = [e.payload["error"] for e in results]
    assert "not valid JSON" in errors[0]
    assert "missing required argument 'instance_id'" in errors[1]
    assert "unknown tool 'launch_rockets'" in errors[2]
    assert events_of(app, "tool.called") == []
    seen = [m["content"] for m in tool_messages(fake_model.chat_requests[-1].json)]
    assert len(seen) == 3 and all("· error]" in c for c in seen)
    assert "unknown tool 'launch_rockets'" in seen[2]
    assert mutating_requests(sim) == []
    assert _ends(app) == {1: ["tick.completed"]}


@pytest.mark.parametrize(("step", "kind"), [
    (empty_choices(), "empty"),
    (error(500), "server"),
    (hang(6.0), "timeout"),
    (raw(b"this is not json at all"), "malformed"),
], ids=["empty_choices", "http_500", "timeout", "garbage_body"])
def test_failed_model_call_is_logged_and_the_tick_fails_cleanly(sim, make_app, fake_model, step: Step,
                                                                kind: str):
    """A model call that fails (no choices, a 500, no answer within the timeout, a body that is
    not a completion) is logged as model.failed with its kind, the tick ends tick.failed with a
    reason naming it, and the next tick runs normally."""
    fake_model.enqueue(step)
    app = make_app(model={"timeout": 1.5})  # only the scripted hang is slower, however loaded the machine

    r = run_tick(app)

    assert not r.ok
    assert kind in r.reason
    failed = events_of(app, "model.failed", 1)
    assert [e.payload["error_kind"] for e in failed] == [kind]
    assert events_of(app, "model.response", 1) == []
    assert _ends(app) == {1: ["tick.failed"]}
    assert events_of(app, "tick.failed", 1)[0].payload["reason"] == r.reason

    fake_model.enqueue(reply("back again"))
    r2 = run_tick(app)
    assert r2.ok, r2.reason
    assert _ends(app) == {1: ["tick.failed"], 2: ["tick.completed"]}
    assert app.log.verify().ok


def test_unreachable_model_raises_an_alert_that_resolves_when_it_answers(sim, make_app, fake_model):
    """A timeout or server error opens the 'model endpoint failing' alert; the next answer resolves it."""
    fake_model.enqueue(error(503))
    app = make_app()
    assert not run_tick(app).ok
    assert [a.status for a in app.log.store.alerts(all_=True) if a.dedup_key == "model:unreachable"] \
        == ["open"]
    fake_model.enqueue(reply("fine"))
    assert run_tick(app).ok
    assert [a.status for a in app.log.store.alerts(all_=True) if a.dedup_key == "model:unreachable"] \
        == ["resolved"]


# An earlier tick's long reply: the compaction after a context-length error folds it into a smaller summary
# (a compaction that does not shrink the request is not re-sent; see tests/model/test_models.py).
LONG_REPLY = "Weighing each offer against the queue before deciding anything. " * 60


def _earlier_ticks(app: Any, fake_model: Any) -> None:
    """Two ticks before the one under test: a long reply, then a request the model answered after it, so a
    compaction may fold the long reply (a cut never passes what no answered request has shown)."""
    fake_model.enqueue(reply(LONG_REPLY))
    assert run_tick(app).ok
    assert run_tick(app).ok


def test_context_length_error_is_not_re_sent_when_compaction_does_not_shrink_it(sim, make_app, fake_model):
    """After a context-length error, a request that compaction did not make smaller (a short earlier tick
    folds into a summary longer than itself) is not sent again: the tick fails saying so and the fix."""
    fake_model.default = _router
    app = make_app()
    assert run_tick(app).ok
    fake_model.enqueue(context_length_error())
    n_before = len(fake_model.chat_requests)
    r = run_tick(app)
    assert not r.ok and "compaction did not make the request smaller" in (r.reason or "")
    assert "lower context.budget_tokens" in (r.reason or "")
    assert len([q for q in fake_model.chat_requests[n_before:] if not is_summary_request(q.json)]) == 1


def _router(body: dict[str, Any]) -> Step:
    """The summariser's calls carry no tools; the agent's do."""
    return reply(SUMMARY) if is_summary_request(body) else reply("done after compaction")


class _Overflow:
    """A server that refuses the agent's next ``errors`` requests as too long (OpenAI's 400, naming an
    8,192-token window) and answers the summariser with a summary naming the open alert."""

    def __init__(self) -> None:
        self.errors = 0

    def __call__(self, body: dict[str, Any]) -> Step:
        if is_summary_request(body):
            return reply(SUMMARY + "\n## Open problems\n- alert #1: the server's window is smaller than the budget")
        if self.errors:
            self.errors -= 1
            return context_length_error()
        return reply("done after compaction")


def test_context_length_error_compacts_once_and_retries_once(sim, make_app, fake_model):
    """The provider's context-length error triggers exactly one compaction and one retry of the
    request, which then succeeds: the tick completes and the retry carries the summary."""
    server = fake_model.default = _Overflow()
    app = make_app(alerts={"unmet_after": 0})  # the summary names alert #1, the only one open
    _earlier_ticks(app, fake_model)
    server.errors = 1
    n_before = len(fake_model.chat_requests)

    r = run_tick(app)

    assert r.ok, r.reason
    assert [e.payload["error_kind"] for e in events_of(app, "model.failed", 3)] == ["context_length"]
    compacted = events_of(app, "context.compacted", 3)
    assert len(compacted) == 1
    assert compacted[0].payload["method"] == "llm"
    assert len(events_of(app, "model.request", 3)) == 2
    agent_reqs = [q for q in fake_model.chat_requests[n_before:] if not is_summary_request(q.json)]
    assert len(agent_reqs) == 2
    retry = agent_reqs[-1].json["messages"]
    assert any(m["role"] == "user" and m["content"].startswith("[summary of #") for m in retry)
    assert _ends(app) == {1: ["tick.completed"], 2: ["tick.completed"], 3: ["tick.completed"]}


def test_context_length_error_twice_fails_the_tick_after_one_compaction(sim, make_app, fake_model):
    """A second context-length error in the same tick is not retried again: one compaction,
    two model.failed events, tick.failed with a reason."""
    server = fake_model.default = _Overflow()
    app = make_app()
    _earlier_ticks(app, fake_model)
    server.errors = 2

    r = run_tick(app)

    assert not r.ok and "context_length" in (r.reason or "")
    assert [e.payload["error_kind"] for e in events_of(app, "model.failed", 3)] == ["context_length"] * 2
    assert len(events_of(app, "context.compacted", 3)) == 1
    assert _ends(app)[3] == ["tick.failed"]


def test_a_tick_whose_first_request_cannot_fit_fails_and_raises_a_critical_alert(sim, make_app, fake_model):
    """A budget the config accepts but that cannot hold even the tools and the newest observation after
    compaction: the model is never asked, and the tick is not 'ok with 0 steps' but failed, naming the
    budget and the fix, with a critical alert the operator sees; nothing is sent to the model."""
    app = make_app(context={"budget_tokens": 2000, "output_reserve": 500})
    result = run_tick(app)
    assert not result.ok and result.steps == 0
    assert "does not fit context.budget_tokens" in (result.reason or "")
    (alert,) = [a for a in app.log.store.alerts(all_=True) if a.dedup_key == "context:over_budget"]
    assert alert.severity == "critical"
    assert fake_model.chat_requests == []
    assert events_of(app, "context.step_refused")
