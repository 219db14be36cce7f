"""Operator feedback through real ticks: the scripted fake model sees each tagged message once,
in the right place, and a pinned directive survives compactions."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent import feedback
from agent.runtime.tick import run_tick
from tests.fakes.openai_server import is_summary_request, reply, summary_reply

# Runs on SQLite and on PostgreSQL (make_app opens the log on the test's backend).
pytestmark = pytest.mark.usefixtures("backend")


def _contents(body: dict[str, Any]) -> list[str]:
    return [m.get("content") or "" for m in body["messages"]]


def _index(contents: list[str], needle: str) -> int:
    hits = [i for i, c in enumerate(contents) if needle in c]
    assert len(hits) == 1, f"{needle!r} appears {len(hits)} times in the request"
    return hits[0]


def test_ack_note_and_knowledge_edit_reach_the_model_tagged_once_in_order(make_app, fake_model, sim_clock,
                                                                          tmp_path):
    """An ack and a note made between ticks, and a knowledge edit found at the next tick start,
    are each in the next request exactly once: the ack and the note after the previous tick and
    before the new observation, the edit right after the new observation; all as user messages."""
    kdir = tmp_path / "knowledge"
    kdir.mkdir()
    (kdir / "hosts.md").write_text("# Hosts\n- all hosts allowed\n", encoding="utf-8")
    app = make_app()
    assert run_tick(app).ok
    alert_id, _ = feedback.raise_alert(app.log, key="test:stuck", severity="warning",
                                       title="Instance 7 stuck in loading", settings=app.settings)
    feedback.ack(app.log, alert_id, "bob", "rebooted it by hand")
    feedback.say(app.log, "demand spike expected at 18:00", "alice")
    (kdir / "hosts.md").write_text("# Hosts\n- avoid host 4417: flaky\n", encoding="utf-8")
    sim_clock.advance(300)
    assert run_tick(app).ok

    body = fake_model.chat_requests[-1].json
    contents = _contents(body)
    roles = [m["role"] for m in body["messages"]]
    t1 = _index(contents, "[tick 1 · ")
    ack = _index(contents, f"[alert #{alert_id} acked · bob] Instance 7 stuck in loading — note: rebooted it by hand")
    note = _index(contents, "[operator note · alice] demand spike expected at 18:00")
    t2 = _index(contents, "[tick 2 · ")
    edit = _index(contents, "[knowledge edit · hosts.md] changed")
    assert t1 < ack < note < t2 < edit
    assert "+- avoid host 4417: flaky" in contents[edit]
    assert all(roles[i] == "user" for i in (ack, note, edit))


def _agent_or_summariser(body: dict[str, Any]) -> Any:
    """The scripted model: search offers once per tick, then stop; as a summariser (asked for the summary),
    a summary that names everything it is asked to."""
    if is_summary_request(body):
        return summary_reply(body)
    last = body["messages"][-1]
    if last["role"] == "tool":
        return reply("fleet looks fine")
    return reply("checking the market", tool_calls=[("search_offers", {"limit": 25})])


def test_a_pinned_directive_is_in_every_request_after_several_compactions(make_app, fake_model, sim_clock,
                                                                         tmp_path):
    """A `say --pin` directive is in every agent request of twelve ticks (the summariser's
    requests aside) exactly once and verbatim: as its tagged message until a compaction
    summarises the thread it arrived in, in the pinned block from then on, through several
    compactions."""
    (tmp_path / "knowledge").mkdir()
    fake_model.default = _agent_or_summariser
    app = make_app(context={"budget_tokens": 6600, "output_reserve": 500, "high_water": 0.6, "low_water": 0.3,  # room for system.md with its "Each tick" steps
                            "tool_output_max_tokens": 400, "summary_max_tokens": 500,
                            "pinned_max_tokens": 1200})
    directive = feedback.say(app.log, "never rent outside Europe this week", "alice", pin=True)
    for _ in range(12):
        assert run_tick(app).ok
        sim_clock.advance(300)
    compactions = list(app.log.read(0, kinds=["context.compacted"]))
    assert len(compactions) >= 2
    assert all(e.payload["covered_to"] > directive.seq for e in compactions)
    tagged = f"[operator directive #{directive.seq} · alice] never rent outside Europe this week"
    agent_requests = [r.json for r in fake_model.chat_requests if not is_summary_request(r.json)]
    warnings = list(app.log.read(0, kinds=["context.pressure"]))
    assert warnings
    # A warning given between two steps of a tick gets a step of its own; one given at a tick's start comes
    # with the tick's observation in its first request. Which of the two happens depends on where the token
    # counts fall, so the count follows the log.
    between = sum(1 for w in warnings
                  if next(app.log.read(0, until_seq=w.seq, tick=w.tick, kinds=["model.request"]), None) is not None)
    assert len(agent_requests) == 24 + between  # two per tick (the search, the answer), one more per such warning
    warned = [b for b in agent_requests if _contents(b)[-1].startswith("[memory pressure")]
    assert len(warned) == len(warnings)  # each warning reaches the model once, as the newest message
    forms: list[str] = []
    for n, body in enumerate(agent_requests):
        hits = [c for c in _contents(body) if "never rent outside Europe this week" in c]
        assert len(hits) == 1, f"agent request {n}: the directive appears {len(hits)} times"
        if hits[0] == tagged:
            forms.append("thread")
        else:
            assert hits[0].startswith("[pinned") and tagged.split("] ")[1] in hits[0], f"agent request {n}"
            forms.append("pinned")
    first_pinned = forms.index("pinned")
    assert first_pinned > 0 and forms == ["thread"] * first_pinned + ["pinned"] * (len(forms) - first_pinned)


@pytest.mark.parametrize("budget", [8000, 9000])
def test_a_budget_under_the_reserve_over_one_minus_high_water_still_compacts(make_app, fake_model, sim_clock,
                                                                            tmp_path, budget):
    """budget_tokens below output_reserve / (1 - high_water) (10,240 with the defaults): the request is cut
    to fit before it ever reaches high water. Compaction still runs (a request that had to be cut is due),
    so a pinned directive is in every request and nothing is left out for space."""
    (tmp_path / "knowledge").mkdir()
    fake_model.default = _agent_or_summariser
    app = make_app(context={"budget_tokens": budget})
    assert app.settings.context.output_reserve / (1 - app.settings.context.high_water) > budget
    feedback.say(app.log, "never rent outside Europe this week", "alice", pin=True)
    for _ in range(20):
        assert run_tick(app).ok
        sim_clock.advance(300)
    assert list(app.log.read(0, kinds=["context.compacted"]))
    agent_requests = [r.json for r in fake_model.chat_requests if not is_summary_request(r.json)]
    for n, body in enumerate(agent_requests):
        contents = _contents(body)
        assert sum("never rent outside Europe this week" in c for c in contents) == 1, f"request {n}"
        assert not any("not shown for space" in c for c in contents), f"request {n} left messages out"


def test_search_history_finds_the_operators_note_itself_before_any_summary_quoting_it(make_app, fake_model,
                                                                                      sim_clock, tmp_path):
    """After compactions have summarised a note, search_history's first hit is the note itself, not a
    summary or the summariser's request that quoted it; those come only with include_summaries; since/until
    keep to a time range."""
    from agent.fleet.pipeline import run_tool_call
    from agent.fleet.policy import Policy
    from agent.fleet.toolkit import ToolContext, load_tools

    (tmp_path / "knowledge").mkdir()

    def quoting(body: dict[str, Any]) -> Any:  # a summariser that quotes the note, as real ones do
        if not is_summary_request(body):
            return _agent_or_summariser(body)
        text = summary_reply(body).text
        return reply(text + "\n- alice said: host 4242 overheats under zebrafinch loads")

    fake_model.default = quoting
    app = make_app(context={"budget_tokens": 6000, "output_reserve": 500, "high_water": 0.6, "low_water": 0.3,
                            "tool_output_max_tokens": 400, "summary_max_tokens": 500})
    sim_clock.advance(3600)
    note = feedback.say(app.log, "host 4242 overheats under zebrafinch loads", "alice")
    for _ in range(12):
        assert run_tick(app).ok
        sim_clock.advance(300)
    assert list(app.log.read(0, kinds=["context.compacted"]))
    quoted = [e for e, _ in app.log.search("zebrafinch", limit=50) if e.seq != note.seq]
    assert quoted and all(e.kind in ("context.compacted", "summary.request", "summary.response") for e in quoted)

    ctx = ToolContext(settings=app.settings, log=app.log, vast=app.vast(), demand=None, policy=Policy(app.settings),
                      tick=99, clock=sim_clock)
    tools = load_tools()

    def search(**args: Any) -> str:
        out, _ = run_tool_call(tools, ctx, {"id": "s", "name": "search_history",
                                            "arguments": json.dumps({"query": "zebrafinch", **args})}, dry_run=False)
        assert out.ok, out.error
        return out.output

    first = search(limit=1).splitlines()
    assert first == [first[0]] and first[0].startswith(f"#{note.seq} ") and "operator.note" in first[0]
    assert len(search().splitlines()) == 1
    both = search(include_summaries=True).splitlines()
    assert both[0].startswith(f"#{note.seq} ") and len(both) > 1
    assert search(since="30m ago") .startswith("no matches")
    assert search(until=note.ts).startswith(f"#{note.seq} ")
