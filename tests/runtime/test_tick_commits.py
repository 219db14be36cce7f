"""How many commits (fsyncs) a tick takes, and that grouping them keeps "committed before anything
depends on it": counted from SQLite's own trace of the log's connection, on real ticks against the
simulator and the scripted model server."""

from __future__ import annotations

from typing import Any

from agent.runtime.tick import run_tick
from agent.store import plans
from agent.store.log import EventLog
from tests.conftest import events_of, offer_rows, tool_messages
from tests.fakes.openai_server import Step, reply


def _tick(app: Any) -> tuple[Any, int]:
    with plans.record(app.log) as statements:
        r = run_tick(app)
    assert r.ok, r.reason
    return r, plans.commits_that_wrote(statements)


def _side_effects(app: Any, tick: int) -> int:
    return sum(1 for e in events_of(app, "tool.called", tick) if e.payload.get("side_effect"))


def test_a_tick_with_reads_only_commits_once_per_model_step_plus_start_and_end(make_app, fake_model):
    """A tick whose model searches once (and names a tool that does not exist) then stops (2 steps, no
    side effect) commits 4 times: its start, each request (the last reply, its read-only call and both
    results ride along with the next), its end; the second tick (1 step) three times.
    Every event of the tick is in the log and the chain verifies. The model client is built first, as a
    daemon's is after its first tick (see the test below for a process's first tick)."""
    app = make_app()
    app.provider()
    fake_model.enqueue(reply("looking", tool_calls=[("search_offers", {"limit": 5}), ("no_such_tool", {})]),
                       reply("nothing to do"))
    r, commits = _tick(app)
    assert (r.steps, _side_effects(app, r.tick)) == (2, 0)
    assert commits == 2 + r.steps == 4
    kinds = [e.kind for e in app.log.read(0, tick=r.tick)]
    assert kinds.count("model.response") == 2 and kinds.count("tool.result") == 2
    assert kinds[-1] == "tick.completed"
    fake_model.enqueue(reply("still nothing to do"))
    r2, commits2 = _tick(app)
    assert r2.steps == 1 and commits2 == 3
    assert app.log.verify().ok


def test_a_process_first_tick_commits_as_a_later_one_does(make_app, fake_model):
    """A process's first tick (which builds the model client) commits its start, each request and its end,
    as the next tick of the same process does: 2 + steps for a tick of reads only."""
    app = make_app()
    fake_model.enqueue(reply("looking", tool_calls=[("search_offers", {"limit": 5})]), reply("nothing to do"))
    r, commits = _tick(app)
    assert r.steps == 2 and commits == 2 + r.steps == 4
    fake_model.enqueue(reply("looking", tool_calls=[("search_offers", {"limit": 5})]), reply("nothing to do"))
    r2, commits2 = _tick(app)
    assert r2.steps == 2 and commits2 == 2 + r2.steps == 4
    assert app.log.verify().ok


def _rent_first_shown(body: dict[str, Any]) -> Step:
    rows = offer_rows(tool_messages(body)[-1]["content"])
    return reply("renting one", tool_calls=[("rent_instance", {"offer_id": rows[0]["id"], "reason": "queue"})])


def test_each_side_effecting_call_adds_two_commits_and_its_intent_is_durable_before_the_call(
        sim, make_app, fake_model):
    """Search, rent one offer, stop: 3 steps and 1 side-effecting call commit 2 + 3 + 2 times. When the
    model is asked, the request is already committed (another connection reads it); when the rent
    reaches vast.ai its intent is already committed."""
    sim.pending = 600.0
    app = make_app()
    app.provider()  # built, as a daemon's is after its first tick
    seen: dict[str, Any] = {}

    def rent_checking(body: dict[str, Any]) -> Step:
        with EventLog(app.log.path, readonly=True, create=False) as other:
            seen["requests"] = len(list(other.read(0, kinds=["model.request"])))
            seen["results"] = len(list(other.read(0, kinds=["tool.result"])))
        return _rent_first_shown(body)

    fake_model.enqueue(reply("looking", tool_calls=[("search_offers", {"limit": 5})]), rent_checking,
                       reply("rented one"))
    r, commits = _tick(app)
    assert (r.steps, _side_effects(app, r.tick)) == (3, 1)
    assert commits == 2 + r.steps + 2 * 1 == 7
    # the second request and the search's result (which it shows) were committed before the model saw it
    assert seen == {"requests": 2, "results": 1}
    intent = events_of(app, "tool.called", r.tick)[-1]
    assert intent.payload["name"] == "rent_instance" and intent.payload["side_effect"]
    label = [i for i in sim.instances.values() if i.get("label")][0]["label"]
    assert intent.payload["idempotency_key"] in label
    assert app.log.verify().ok
