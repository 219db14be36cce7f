"""A fork replays the market its origin saw until its first different decision (agent/fork/replay.py).

The origin is a real log: the rules provider deciding against the simulator (flaky hosts, jobs finishing
at their own pace) through real HTTP, with an operator note between two ticks. A fork without a change
must decide exactly as the origin did, tick after tick: the same calls, the same search results, the same
alerts, though its own simulator would have shown it a market of its own. A fork with another policy, or
whose model asks for something else mid-tick, goes on with its own simulator from there."""

from __future__ import annotations

from typing import Any

import pytest

from agent.fork import Change, Where, diff_fork, make_fork, render
from agent.runtime.app import App
from agent.runtime.tick import run_tick
from agent.store.log import EventLog
from tests.conftest import events_of, offer_rows
from tests.fakes.openai_server import reply

TICKS = 6


@pytest.fixture
def rules_origin(sim, sim_clock, make_app) -> App:
    """Six rules-provider ticks five minutes apart; the operator notes something between ticks 3 and 4."""
    app = make_app(provider="rules", policy={"max_instances": 4, "max_rents_per_hour": 100})
    for n in range(1, TICKS + 1):
        if n > 1:
            sim_clock.advance(300)
            sim.tick()
        if n == 4:
            app.log.append("operator.note", {"text": "watch the queue", "by": "ops", "pin": False}, "operator")
        assert run_tick(app).ok
    app.close()
    return app


def _results(log: EventLog, since: int, name: str) -> list[str]:
    """What the ``name`` calls of the origin's ticks returned (none of a later tick)."""
    return [str(e.payload.get("output")) for e in log.read(since, kinds=["tool.result"])
            if e.payload["name"] == name and (e.tick or 0) <= TICKS]


def test_a_fork_without_a_change_decides_as_the_origin_did_tick_after_tick(rules_origin, sim, tmp_path):
    """Forked at tick 2 with the rules provider and no change, for the five ticks the origin ran from there
    and one more: every tick the origin ran is decided as the origin did (fork diff says 'same decisions'),
    every search showed the offers the origin's showed, the operator's note is in the fork where the origin
    had it, the tick past the origin's last runs on the fork's own simulator, and the origin's simulator got
    not one request."""
    app = rules_origin
    calls_before = len(sim.requests)
    r = make_fork(app.settings, Where(tick=2), Change(), ticks=TICKS, out=tmp_path / "same")
    assert [t.ok for t in r.ticks] == [True] * TICKS
    assert len(sim.requests) == calls_before
    _, diffs, _ = diff_fork(r.out)
    assert [d.same for d in diffs[:-1]] == [True] * (TICKS - 1), "\n".join(render(diffs))
    origin = EventLog(app.settings.db_path, readonly=True)
    fork = EventLog(r.out / "data" / "fleet-agent.db", readonly=True)
    try:
        searches = _results(origin, r.point.seq, "search_offers")
        assert searches and _results(fork, r.point.seq + 1, "search_offers") == searches
        notes = [e.payload["text"] for e in fork.read(r.point.seq, kinds=["operator.note"])]
        assert notes == ["watch the queue"]
        assert fork.verify().ok
    finally:
        origin.close()
        fork.close()
    assert r.replayed == list(range(2, TICKS + 1)) and r.live_why == f"the origin's log has no tick {TICKS + 1}"


def test_a_fork_with_a_lower_cap_goes_on_with_its_own_simulator_and_diff_says_different(rules_origin, tmp_path):
    """policy.max_instances=1 binds from the fork's first tick: the rules provider rents less than the
    origin did there, fork diff labels that tick DIFFERENT and names the rents only the origin made."""
    app = rules_origin
    first_rents = [e for e in events_of(app, "tool.result", 1) if e.payload["name"] == "rent_instance"]
    assert len(first_rents) >= 2
    r = make_fork(app.settings, Where(tick=1), Change(sets=("policy.max_instances=1",)), ticks=2,
                  out=tmp_path / "cap")
    assert r.replayed == [] and r.live_why is not None and "policy" in r.live_why
    _, diffs, _ = diff_fork(r.out)
    assert not diffs[0].same
    lines = render(diffs)
    assert lines[0] == "tick 1: DIFFERENT"
    rents = [d for s in diffs[0].fork.steps for d in s if d.name == "rent_instance" and d.outcome == "ok"]
    assert len(rents) == 1


def test_a_step_that_asks_for_something_else_runs_on_a_simulator_holding_the_earlier_steps(
        sim_clock, make_app, fake_model, tmp_path):
    """The origin's model searched, then rented the cheapest offer. The fork's model searches the same
    (the origin's result is replayed) and then rents the second offer: from that step on the fork runs on
    its own simulator, seeded with what the origin had then, and the rent succeeds there. fork diff: step 1
    the same, step 2 different."""
    app = make_app(policy={"max_instances": 8, "max_rents_per_hour": 100})
    fake_model.enqueue(reply("look", tool_calls=[("search_offers", {})]), reply("none yet"))
    assert run_tick(app).ok
    offers = offer_rows(events_of(app, "tool.result", 1)[0].payload["output"])[:2]
    sim_clock.advance(300)

    def tick2(offer: dict[str, Any]) -> list[Any]:
        return [reply("look", tool_calls=[("search_offers", {})]),
                reply("rent", tool_calls=[("rent_instance", {"offer_id": offer["id"], "reason": "scripted"})]),
                reply("done")]

    fake_model.enqueue(*tick2(offers[0]))
    assert run_tick(app).ok
    app.close()
    fake_model.enqueue(*tick2(offers[1]))
    r = make_fork(app.settings, Where(tick=2), Change(model=(fake_model.base_url, "scripted")), ticks=1,
                  out=tmp_path / "other")
    assert r.replayed == [2] and r.live_why == "tick 2 step 2: the calls differ from the origin's"
    assert r.ticks[0].ok and r.ticks[0].actions and r.ticks[0].actions[0].startswith("rented ")
    (d,) = diff_fork(r.out)[1]
    assert not d.same
    assert d.original.steps[0][0].key == d.fork.steps[0][0].key  # the search: what the origin was shown
    assert d.fork.steps[1][0].outcome == "ok" and d.fork.steps[1][0].arguments != d.original.steps[1][0].arguments

