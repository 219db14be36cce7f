"""Real models' habits, each taught to the fake server as a mode real servers have, then run through
whole ticks: the simulator and the fake model over real HTTP, the real openai SDK, a real SQLite log."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from structlog.testing import capture_logs

from agent import context
from agent.context.replay import replay
from agent.runtime.tick import MAX_CORRECTIONS, run_tick
from tests.conftest import events_of
from tests.fakes.openai_server import (
    TEXT_CALL_SHAPES,
    Step,
    error,
    fenced_calls,
    hang,
    is_summary_request,
    reply,
    text_tool_call,
)


def _replays(app: Any) -> None:
    """Every logged request re-derives byte for byte from the log (replay --verify)."""
    results = list(replay(app.log, app.prompts, app.settings.context, policy=app.policy_dict(),
                          tools=app.tool_specs()))
    assert results and all(r.ok for r in results), [r for r in results if not r.ok]


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
    _replays(app)


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


# ------------------------------------------------------------------ tool calls written as text


@pytest.mark.parametrize("shape", TEXT_CALL_SHAPES)
def test_a_call_written_as_text_is_answered_in_the_same_tick_and_not_run(make_app, fake_model, shape):
    """A reply that writes its call in the text (each of the three shapes) runs nothing by default; it is
    logged (model.text_tool_calls), the model is told within the same tick with a tagged system message,
    and its retry with a real tool call runs."""
    fake_model.strict_history = True
    fake_model.enqueue(text_tool_call("search_offers", {"limit": 3}, shape, prose="Looking at the market."),
                       reply("", tool_calls=[("search_offers", {"limit": 3})]), reply("done"))
    app = make_app()

    r = run_tick(app)
    assert r.ok, r.reason
    noted = events_of(app, "model.text_tool_calls", 1)
    assert [(c["name"], c["shape"]) for c in noted[0].payload["calls"]] == [("search_offers", shape)]
    assert noted[0].payload["accepted"] is False
    assert len(fake_model.chat_requests) == 3
    second = fake_model.chat_requests[1].json["messages"]
    assert second[-1]["role"] == "user"
    assert second[-1]["content"].startswith("[system · tool calls written as text]")
    assert "nothing ran" in second[-1]["content"]
    results = events_of(app, "tool.result", 1)
    assert len(results) == 1 and results[0].payload["ok"]
    assert results[0].payload["call_id"] == events_of(app, "model.response", 1)[1].payload["tool_calls"][0]["id"]
    _replays(app)


# What Qwen2.5-Coder-1.5B wrote, three ticks in a row, served as vLLM serves it: a fenced call whose
# arguments quote a fenced text, so the first ``` after the opening is inside a JSON string.
NESTED_FENCE = ('```json\n{\n  "name": "remember",\n  "arguments": {\n    "key": "fleet-notes.md",\n'
                '    "text": "added\\n```text\\n# Fleet notes\\n- Prefer the cheapest allowed offers.\\n```"\n  }\n}\n```')


def test_a_fenced_call_whose_arguments_hold_a_fence_is_still_noticed(make_app, fake_model):
    """The fenced shape is read by the JSON decoder, not up to the next ```: a call whose arguments
    quote fenced text (seen from a real model) is noticed and corrected, with its arguments whole."""
    fake_model.enqueue(reply(NESTED_FENCE), reply("understood"))
    app = make_app()
    assert run_tick(app).ok
    noted = events_of(app, "model.text_tool_calls", 1)
    assert len(noted) == 1
    call = noted[0].payload["calls"][0]
    assert (call["name"], call["shape"]) == ("remember", "fenced")
    assert json.loads(call["arguments"])["key"] == "fleet-notes.md"
    assert "```text" in json.loads(call["arguments"])["text"]


def test_accept_runs_a_single_text_call_naming_a_real_tool(make_app, fake_model):
    """With model.text_tool_calls: accept, a reply's single text-written call naming a real tool runs as a
    real call (the history then shows it as one, with its result) and the model is still told to use real
    tool calls; a text call naming no real tool never runs."""
    fake_model.strict_history = True
    fake_model.enqueue(text_tool_call("search_offers", {"limit": 2}, "tagged"), reply("thanks"),
                       text_tool_call("rent_everything", {"n": 40}, "fenced"), reply("ok"))
    app = make_app(model={"text_tool_calls": "accept"})

    assert run_tick(app).ok
    results = events_of(app, "tool.result", 1)
    assert [(p.payload["name"], p.payload["ok"]) for p in results] == [("search_offers", True)]
    body = fake_model.chat_requests[1].json
    assert body["messages"][-2]["role"] == "tool"
    assert "ran as a real call" in body["messages"][-1]["content"]

    assert run_tick(app).ok
    assert events_of(app, "tool.result", 2) == []
    assert events_of(app, "model.text_tool_calls", 2)[0].payload["accepted"] is False


_OFFER_ROW = re.compile(r"^(\d+) \|", re.M)


def _rent_the_first_offer_found(body: dict[str, Any]) -> Step:
    """The model's third step: rent the first offer of the newest search it was shown, written in a fence."""
    found = [_OFFER_ROW.findall(str(m.get("content") or "")) for m in body["messages"] if m["role"] == "tool"]
    offers = [ids for ids in found if ids]
    if not offers:
        return reply("I could not find any offers.")
    return fenced_calls([("rent_instance", {"offer_id": int(offers[-1][0]), "reason": "jobs are waiting"})],
                        prose="Renting the cheapest offer.")


def test_accept_runs_fenced_calls_as_qwen_writes_them_without_spending_corrections(make_app, fake_model, sim):
    """Qwen2.5-Coder-1.5B writes every call in a ```json fence, sometimes several in one reply. With accept,
    each call naming a real tool runs, and running one spends none of the tick's corrections: a model that
    reads the demand, then searches and reads its balance in one reply, then rents, all written as text,
    rents in the same tick, and each step is told its calls ran (not to write them again)."""
    sim.realism.update({"unschedulable": 0, "stuck_scheduling": 0})
    fake_model.strict_history = True
    fake_model.enqueue(fenced_calls([("get_demand", {})], prose="First, the demand."),
                       fenced_calls([("search_offers", {"limit": 3}), ("get_balance", {})]),
                       _rent_the_first_offer_found, reply("Rented one instance."))
    app = make_app(model={"text_tool_calls": "accept"})

    r = run_tick(app)
    assert r.ok, r.reason
    results = events_of(app, "tool.result", 1)
    assert [p.payload["name"] for p in results] == ["get_demand", "search_offers", "get_balance", "rent_instance"]
    assert all(p.payload["ok"] for p in results), [p.payload for p in results]
    assert len(sim.instances) == 1, "the rent written as text reached vast.ai"
    noted = events_of(app, "model.text_tool_calls", 1)
    assert [[c["ran"] for c in e.payload["calls"]] for e in noted] == [[True], [True, True], [True]]
    told = fake_model.chat_requests[1].json["messages"][-1]["content"]
    assert "ran as a real call" in told and "do not write it again" in told, told
    assert len(fake_model.chat_requests) == 4
    _replays(app)


def test_accept_does_not_run_a_text_call_again_in_the_same_tick(make_app, fake_model):
    """A small model told its call ran may write the same call again: under accept the repeat (same name and
    arguments, however spaced) does not run, spends a correction, and the model is told to go on instead."""
    fake_model.enqueue(fenced_calls([("search_offers", {"limit": 3})]),
                       text_tool_call("search_offers", {"limit": 3}, "tagged"), reply("ok"))
    app = make_app(model={"text_tool_calls": "accept"})

    assert run_tick(app).ok
    assert [p.payload["name"] for p in events_of(app, "tool.result", 1)] == ["search_offers"]
    noted = events_of(app, "model.text_tool_calls", 1)
    assert [(c["ran"], c["why"]) for e in noted for c in e.payload["calls"]] == [(True, None), (False, "repeat")]
    told = fake_model.chat_requests[2].json["messages"][-1]["content"]
    assert "did not run again" in told and "go on to the next step" in told, told


_NAMED_CALL = re.compile(r"(rent_instance|search_offers|destroy_instance) (\{.*?\})(?=[ ,;.(]|$)")


def _write_again_the_newest_call_shown(body: dict[str, Any]) -> Step:
    """What Qwen2.5-Coder-1.5B did after its search ran (``bench/outcomes.py`` with the real model on the CPU):
    it wrote a call again, fenced, the newest one it was shown: a call named in the newest system note if that
    names one, else its own search, however often it was told the search already ran."""
    last = next(m for m in reversed(body["messages"]) if m["role"] == "user")
    named = _NAMED_CALL.findall(str(last.get("content") or ""))
    if named and str(last["content"]).startswith("[system · tool calls written as text]"):
        name, args = named[-1]
        return fenced_calls([(name, json.loads(args))])
    return fenced_calls([("search_offers", {"order": "per_job"})])


def test_a_model_repeating_its_search_is_told_the_rent_the_search_named_and_rents(make_app, fake_model, sim):
    """A small model whose search ran writes the same search again, step after step. The note that the repeat
    did not run names the next call the tick needs: ``rent_instance`` of the first offer the search's last line
    named that is not rented yet. A model that copies the newest call it was shown rents it, and the next
    offer after that: without the named call it searched until its corrections ran out and rented nothing."""
    sim.realism.update({"unschedulable": 0, "stuck_scheduling": 0})
    sim.pending = 20.0
    fake_model.default = _write_again_the_newest_call_shown
    app = make_app(model={"text_tool_calls": "accept"}, schedule={"max_steps": 8})

    assert run_tick(app).ok
    [search] = [e.payload for e in events_of(app, "tool.result", 1) if e.payload["name"] == "search_offers"]
    hint = search["output"].splitlines()[-1]
    named = [int(x) for x in re.findall(r"rent_instance offer_id=(\d+)", hint)]
    assert named, search["output"]
    rents = [e.payload for e in events_of(app, "tool.result", 1) if e.payload["name"] == "rent_instance"]
    assert rents and all(r["ok"] for r in rents), rents
    assert [r["effect"]["offer_id"] for r in rents] == named[:len(rents)]
    assert {i["_offer_id"] for i in sim.instances.values()} == set(named[:len(rents)])  # what vast.ai rented
    told = [e.payload["next_call"] for e in events_of(app, "model.text_tool_calls", 1)
            if any(c["why"] == "repeat" for c in e.payload["calls"])]
    assert told and told[0] == {"name": "rent_instance", "arguments": {"offer_id": named[0],
                                                                       "reason": "cover the gap the search named"}}
    _replays(app)


def _cover_with_offers_the_search_did_not_name(body: dict[str, Any]) -> Step:
    """Rent, fenced, the fastest offers of the newest search that its last line did not name, until they cover the
    jobs/h the observation's ``to do:`` line asks for."""
    out = [str(m.get("content") or "") for m in body["messages"] if m["role"] == "tool"][-1]
    todo = next(str(m["content"]) for m in reversed(body["messages"]) if "to do: rent" in str(m.get("content")))
    gap = float(re.findall(r"to do: rent ([\d.]+) jobs/h more", todo)[-1])
    named = set(re.findall(r"rent_instance offer_id=(\d+)", out))
    rows = [[c.strip() for c in line.split("|")] for line in out.splitlines() if _OFFER_ROW.match(line)]
    picks: list[tuple[str, dict[str, Any]]] = []
    for r in sorted((r for r in rows if r[0] not in named), key=lambda r: -float(r[6])):
        if gap <= 0:
            break
        picks.append(("rent_instance", {"offer_id": int(r[0]), "reason": "the fastest"}))
        gap -= float(r[6])
    return fenced_calls(picks)


def test_no_rent_is_named_once_the_ticks_rents_have_covered_the_gap(make_app, fake_model, sim):
    """A model that covered the gap with an offer the search did not name, and then writes its search again, is
    not told to rent the offers the search named: the fleet is no longer short."""
    sim.realism.update({"unschedulable": 0, "stuck_scheduling": 0})
    sim.pending = 3.0
    search = fenced_calls([("search_offers", {"order": "per_job"})])
    fake_model.enqueue(search, _cover_with_offers_the_search_did_not_name, search, reply("done"))
    app = make_app(model={"text_tool_calls": "accept"}, schedule={"max_steps": 8})

    assert run_tick(app).ok
    rents = [e.payload for e in events_of(app, "tool.result", 1) if e.payload["name"] == "rent_instance"]
    assert rents and all(r["ok"] for r in rents), rents
    assert "short" not in rents[-1]["output"], rents[-1]["output"]  # the gap is covered
    [repeat] = [e.payload for e in events_of(app, "model.text_tool_calls", 1)
                if any(c["why"] == "repeat" for c in e.payload["calls"])]
    assert repeat["next_call"] is None
    assert len(sim.instances) == len(rents)


def test_corrections_per_tick_are_bounded(make_app, fake_model):
    """A model that keeps writing calls as text is corrected at most MAX_CORRECTIONS times in a tick; then
    the tick completes instead of spending every step on it."""
    fake_model.default = text_tool_call("list_instances", {}, "prefixed")
    app = make_app(schedule={"max_steps": 8})
    r = run_tick(app)
    assert r.ok, r.reason
    assert len(fake_model.chat_requests) == MAX_CORRECTIONS + 1
    assert len(events_of(app, "model.text_tool_calls", 1)) == MAX_CORRECTIONS + 1


# ------------------------------------------------------------------ retries and slow models


def test_a_server_error_is_retried_within_the_tick_and_the_retry_is_an_event(make_app, fake_model):
    """HTTP 500 then success: the tick completes on fleet-agent's own retry; the retry is a model.retry
    event naming the failure, and both attempts are the same logged request."""
    fake_model.enqueue(error(500), reply("fine now"))
    app = make_app(model={"max_retries": 1})
    with capture_logs() as logs:
        r = run_tick(app)
    assert r.ok, r.reason
    retries = events_of(app, "model.retry", 1)
    assert [(e.payload["attempt"], e.payload["error_kind"]) for e in retries] == [(1, "server")]
    assert len(events_of(app, "model.request", 1)) == 1
    assert retries[0].payload["request_seq"] == events_of(app, "model.request", 1)[0].seq
    assert len(fake_model.chat_requests) == 2
    assert any(x["event"] == "llm.retry" and x["kind"] == "server" for x in logs)


def test_a_stall_is_not_re_sent_and_the_failure_says_attempts_and_time(make_app, fake_model):
    """A 30 s stall against a short timeout ends the tick once (no second copy queued behind the first),
    with the timeout, attempts and elapsed time in the reason; with retry_timeouts it is sent twice."""
    fake_model.enqueue(hang(30))
    app = make_app(model={"timeout": 0.3, "max_retries": 1})
    r = run_tick(app)
    assert not r.ok
    assert re.search(r"no reply within 0.3 s, 1 attempt, \d+ s", r.reason or ""), r.reason
    assert len(fake_model.chat_requests) == 1

    fake_model.enqueue(hang(30), hang(30))
    app2 = make_app(model={"timeout": 0.3, "max_retries": 1, "retry_timeouts": True})
    r2 = run_tick(app2)
    assert re.search(r"no reply within 0.3 s, 2 attempts, \d+ s", r2.reason or ""), r2.reason
    assert len(fake_model.chat_requests) == 3
    assert len(events_of(app2, "model.retry", 2)) == 1


# ------------------------------------------------------------------ a model that stops acting


def test_a_model_that_stops_acting_raises_an_alert_naming_what_it_did(sim, make_app, fake_model):
    """Empty replies and the same text again, no tool call, for alerts.idle_ticks ticks while demand is
    pending and the fleet is empty: "the model has not acted for 3 ticks" opens, naming what the model
    did instead; a tick with a tool call resolves it."""
    sim.pending = 500.0
    fake_model.enqueue(reply(""), reply("All good."), reply("All good."))
    app = make_app(alerts={"idle_ticks": 3})
    for _ in range(2):
        assert run_tick(app).ok
        assert not [a for a in app.log.store.open_alerts() if "has not acted" in a.title]
    assert run_tick(app).ok
    idle = [a for a in app.log.store.open_alerts() if "has not acted" in a.title]
    assert len(idle) == 1 and idle[0].title == "the model has not acted for 3 ticks"
    opened = [e for e in events_of(app, "alert.raised") if "has not acted" in e.payload["title"]][0]
    assert "empty replies x1" in opened.payload["detail"]
    assert "the same text again x1" in opened.payload["detail"]

    fake_model.enqueue(reply("", tool_calls=[("list_instances", {})]), reply("listed"))
    assert run_tick(app).ok
    assert not [a for a in app.log.store.open_alerts() if "has not acted" in a.title]


def test_no_idle_alert_without_work(sim, make_app, fake_model):
    """Ticks without a tool call while no demand is pending and no alert is open are not idleness."""
    sim.pending = 0.0
    app = make_app(alerts={"idle_ticks": 2})
    for _ in range(3):
        assert run_tick(app).ok
    assert not [a for a in app.log.store.open_alerts() if "has not acted" in a.title]


# ------------------------------------------------------------------ the budget within a tick


def test_a_step_that_would_pass_the_budget_is_never_sent(make_app, fake_model):
    """Long assistant text plus a call inside one tick: the next request would pass budget minus reserve,
    so it is not sent; the tick ends with context.step_refused (and says so to the model next tick), and
    no request ever sent is over the limit."""
    long_text = "I considered every offer in turn. " * 400
    fake_model.enqueue(reply(long_text, tool_calls=[("list_instances", {})]), reply("never asked"),
                       reply("short"))
    app = make_app(context={"budget_tokens": 4000, "output_reserve": 500})
    r = run_tick(app)
    assert r.ok, r.reason
    refused = events_of(app, "context.step_refused", 1)
    assert len(refused) == 1 and refused[0].payload["tokens"] > refused[0].payload["limit"] == 3500
    assert len(fake_model.chat_requests) == 1

    r2 = run_tick(app)
    assert r2.ok, r2.reason
    for e in events_of(app, "model.request"):
        assert e.payload["manifest"]["calibrated_tokens"] <= 3500
    later = fake_model.chat_requests[-1].json["messages"]
    assert any("[system · tick 1 ended early]" in (m.get("content") or "") for m in later)
    _replays(app)


def test_a_request_sent_shrunk_is_warned_once_and_re_deriving_it_warns_nothing(make_app, fake_model):
    """Three searches fill the budget, so the tick's last request goes out with its tool outputs cut: the daemon
    warns context.shrunk once for it, naming the request (whose manifest says shrunk). Re-deriving that request
    later (replay, the operator's `context`) is no news, and logs nothing."""
    fake_model.enqueue(reply("", tool_calls=[("search_offers", {"limit": 25}), ("list_fleet", {}), ("get_demand", {})]),
                       reply("", tool_calls=[("search_offers", {"limit": 25, "order": "per_job"})]), reply("done"))
    app = make_app(context={"budget_tokens": 5000, "output_reserve": 500})
    with capture_logs() as logs:
        r = run_tick(app)
    assert r.ok, r.reason
    requests = events_of(app, "model.request", 1)
    shrunk = [e.seq for e in requests if e.payload["manifest"]["shrunk"]]
    assert shrunk and len(shrunk) < len(requests)
    assert [x["request_seq"] for x in logs if x["event"] == "context.shrunk"] == shrunk
    with capture_logs() as again:
        _replays(app)
        p = context.project(app.log, app.prompts, app.settings.context, policy=app.policy_dict(),
                            tools=app.tool_specs(), until_seq=shrunk[0] - 1, model=app.settings.model.name)
    assert p.shrink_notes  # the same request, shrunk as it went out
    assert [x for x in again if x["event"] == "context.shrunk"] == []


# ------------------------------------------------------------------ the server's window


def test_a_context_length_error_lowers_the_budget_to_the_servers_window_once(make_app, fake_model):
    """A server whose window is smaller than the budget refuses a grown request (vLLM's 400, naming its
    window): the agent records the window (model.window), alerts once, compacts to fit it and sends a
    smaller request, which the server accepts; later ticks aim for the window without another error."""
    fake_model.enqueue(reply("The market, offer by offer. " * 120, tool_calls=[("search_offers", {"limit": 10})]),
                       reply("looked"))
    app = make_app(context={"budget_tokens": 12000, "output_reserve": 500, "summary_max_tokens": 300},
                   model={"max_output_tokens": 500})
    assert run_tick(app).ok
    last = fake_model.chat_requests[-1]
    fake_model.context_window = fake_model.prompt_tokens(last.raw) + 500 + 20
    r = run_tick(app)
    assert r.ok, r.reason
    windows = events_of(app, "model.window")
    assert [e.payload["window"] for e in windows] == [fake_model.context_window]
    failed = events_of(app, "model.failed", 2)
    assert [e.payload["error_kind"] for e in failed] == ["context_length"]
    asked = [q for q in fake_model.chat_requests if not is_summary_request(q.json)]
    sizes = [fake_model.prompt_tokens(q.raw) for q in asked[-2:]]
    assert sizes[1] < sizes[0] and sizes[1] + 500 <= fake_model.context_window
    from agent.runtime import status  # status reports the budget in force, not the configured one
    shown = status.context_size(app)
    assert shown["budget"] < shown["configured_budget"] == app.settings.context.budget_tokens
    alerts = [a for a in app.log.store.open_alerts() if "context window" in a.title]
    assert len(alerts) == 1

    for _ in range(2):
        assert run_tick(app).ok
    assert len(events_of(app, "model.window")) == 1
    assert len(events_of(app, "model.failed")) == 1
    _replays(app)


# ------------------------------------------------------------------ bench/real_model.py


def test_real_model_bench_runs_against_any_openai_compatible_endpoint(fake_model, capsys, tmp_path):
    """bench/real_model.py drives ticks against an endpoint and the simulator and reports the figures the
    issue asks for: calls parsed / executed / refused / not run, text-written calls, idle ticks, cached
    share, step latency."""
    from bench import real_model

    fake_model.strict_history = True
    fake_model.enqueue(reply("", tool_calls=[("search_offers", '{"limit": 3} then rent')]),
                       text_tool_call("search_offers", {"limit": 3}, "tagged"),
                       reply("", tool_calls=[("search_offers", {"limit": 3})]), reply("done"))
    rc = real_model.main([fake_model.base_url, "fake-model", "--ticks", "2", "--keep", str(tmp_path / "b")])
    assert rc == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["ticks"] == 2 and out["ticks_failed"] == 0 and out["verify_ok"]
    assert out["tool_calls_parsed"] == 2 and out["tool_calls_executed"] == 1
    assert out["not_run_bad_arguments_or_tool"] == 1 and out["text_written_calls_detected"] == 1
    assert out["idle_ticks"] == 1
    assert 0 < out["cached_share"] < 1 and out["step_latency_ms_p95"] >= out["step_latency_ms_p50"] > 0
