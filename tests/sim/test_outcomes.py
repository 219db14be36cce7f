"""bench/outcomes.py at a small size: its figures are the simulator's accounting, the cron arm runs
against the same API, and the model path runs a real tick loop against the scripted OpenAI server."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from bench import outcomes
from bench.cron_arm import LABEL
from tests.fakes.openai_server import FakeOpenAI, Step, fenced_calls, is_summary_request, reply, summary_reply

_OFFER_ROW = re.compile(r"^(\d+) \|", re.M)


def _check_from_simulator(r: outcomes.Result, first: dict[str, Any], last: dict[str, Any]) -> None:
    arrived = last["jobs_arrived"] - first["jobs_arrived"]
    served = last["jobs_served"] - first["jobs_served"]
    spend = last["spend"] - first["spend"]
    assert r.jobs_arrived == pytest.approx(arrived, abs=0.05)
    assert r.jobs_served == pytest.approx(served, abs=0.05)
    assert r.spend == pytest.approx(spend, abs=1e-3)
    assert r.wait_min == pytest.approx(60 * (last["job_hours_waited"] - first["job_hours_waited"]) / arrived, abs=0.01)
    assert r.per_job == pytest.approx(spend / served, rel=1e-3)


def test_rules_and_cron_arms_report_the_simulators_figures() -> None:
    seen: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    sc = outcomes.SCENARIOS["outage"]
    results = {}
    for arm in ("agent", "cron"):
        def observe(first: dict[str, Any], last: dict[str, Any], arm: str = arm) -> None:
            seen[arm] = (first, last)
        results[arm] = outcomes.run_one(sc, arm, 16, 7, None, None, observe=observe)
    for arm, r in results.items():
        first, last = seen[arm]
        _check_from_simulator(r, first, last)
        assert r.jobs_served > 0 and r.spend > 0 and r.failed_ticks == 0
    cron_rows = seen["cron"][1]["instances"]
    assert cron_rows and all((i["label"] or "").startswith(LABEL) for i in cron_rows)
    assert not any((i["label"] or "").startswith(LABEL) for i in seen["agent"][1]["instances"])
    # The outage took the host both arms rented on first; the agent's dead-instance alert fired after it.
    assert any(i["status"] in ("offline", "destroyed") for i in seen["cron"][1]["instances"])
    assert "dead:" in results["agent"].alerts_raised
    assert results["agent"].alerts_raised == sorted(results["agent"].alerts_expected), results["agent"]
    text = outcomes.table(list(results.values()), "rules")
    assert "outage" in text and "x)" in text


def _kept_run(keep: Path, scenario: str) -> tuple[set[str], set[int]]:
    """From an agent run kept by --keep: every alert key, and the instances it logged stopped for credit."""
    from agent.store.log import EventLog

    with EventLog(keep / f"{scenario}-agent" / "data" / "fleet-agent.db", create=False, readonly=True) as log:
        keys = {a.dedup_key for a in log.store.alerts(all_=True)}
        kept = {int(i) for e in log.read(0, kinds=["credit.stopped"]) for i in e.payload["instance_ids"]}
    return keys, kept


def test_a_mass_stop_and_a_credit_stop_each_raise_the_alert_naming_their_cause_within_a_tick(tmp_path: Path) -> None:
    """massstop: the fleet's on-demand instances stop at once on their hosts' side (vast.ai never outbids an
    on-demand instance): a dead: alert within a tick. credit: a run-out is a money event (the instances are
    kept): credit:stopped and balance:low turned critical within a tick of the credit reaching $0, and no
    dead: alert for the instances it stopped."""
    results = {}
    for name in ("massstop", "credit"):
        results[name] = r = outcomes.run_one(outcomes.SCENARIOS[name], "agent", 15, 7, None, None,
                                             opts=outcomes.Options(keep=tmp_path))
        named = [k for k in r.alerts_expected if not k.startswith(outcomes.UNMET_KEY)]
        assert named and set(named) <= set(r.alerts_raised), r
        assert all(r.alert_lag_ticks[k] <= outcomes.within(k) == outcomes.ALERT_WITHIN for k in named), r
    assert {"dead:"} <= set(results["massstop"].alerts_expected)
    assert {"credit:stopped", "balance:low!critical"} <= set(results["credit"].alerts_expected)
    stopped = next(t for t, e in outcomes.SCENARIOS["credit"].events.items() if t > 6)  # the $0 event's tick
    assert outcomes.SCENARIOS["credit"].alerts["credit:stopped"] == stopped
    keys, kept = _kept_run(tmp_path, "credit")
    assert kept and "credit:stopped" in keys and not {f"dead:{i}" for i in kept} & keys, (kept, keys)


def test_a_flap_is_caught_within_three_ticks_and_no_instance_working_at_its_pace_is_called_failing(
        tmp_path: Path) -> None:
    """The fleet's fastest instance goes down 3 of every 5 minutes, up whenever a tick looks: the agent names it
    within 3 ticks (the aim for a failure between ticks), and no other instance: a slow GPU beside faster ones
    is not failing for doing fewer jobs."""
    key = "instance:underperforming:"
    r = outcomes.run_one(outcomes.SCENARIOS["flap"], "agent", 13, 11, None, None, opts=outcomes.Options(keep=tmp_path))
    assert key in r.alerts_raised and r.alert_lag_ticks[key] <= outcomes.within(key) == 3, r
    acc = json.loads((tmp_path / "flap-agent" / "accounting.json").read_text(encoding="utf-8"))
    flapping = {i["id"] for i in acc["instances"] if i["flapping"]}
    keys, _ = _kept_run(tmp_path, "flap")
    assert flapping and {int(k.removeprefix(key)) for k in keys if k.startswith(key)} == flapping, (flapping, keys)


def _empty_market(r: outcomes.Run) -> None:
    r.sim.post("/_sim/arrivals", {"shape": "constant", "rate": 30})
    r.sim.post("/_sim/offers", {"withdraw": "all"})


DRY = outcomes.Scenario("dry", "no offers at all", _empty_market, {}, 0, "capacity")


def test_unmet_demand_is_expected_where_the_simulator_shows_it_and_raised_within_a_tick() -> None:
    """No offer on the market from the start: the simulator shows jobs piling up from the first tick, so
    demand:unmet is due at the tick after the third, and the agent raises it by then. With no arrivals
    nothing is unmet and no such alert is expected."""
    r = outcomes.run_one(DRY, "agent", 6, 7, None, None)
    due = f"{outcomes.UNMET_KEY}@{outcomes.UNMET_AFTER}"
    assert r.alerts_expected == [due], r
    assert r.alerts_raised == [due] and r.alert_lag_ticks[due] <= outcomes.ALERT_WITHIN, r
    quiet = outcomes.Scenario("quiet", "nothing arrives", outcomes.constant(0), {}, 0, "capacity")
    r = outcomes.run_one(quiet, "agent", 6, 7, None, None)
    assert r.alerts_expected == [] and r.unmet_job_ticks == 0, r


def test_the_cron_arms_operator_edits_it_to_obey_the_directive_scenarios_order() -> None:
    """A cron script reads no notes; its operator edits it to leave the host out and rent RTX 4090s only, so
    both arms play the directive scenarios under the same order: it rents after the note, none of those
    rents breaks it, and its fleet complies (react)."""
    seen: dict[str, Any] = {}
    ticks = 30  # the cron arm rents again once its first rents have started (minutes in scheduling and loading)
    sc = outcomes.SCENARIOS["note"]
    r = outcomes.run_one(sc, "cron", ticks, 7, None, None, observe=lambda a, b: seen.update(last=b))
    note_at = seen["last"]["now"] - (ticks - sc.event_tick) * outcomes.TICK_S
    after = [i for i in seen["last"]["instances"] if i["rented_at"] >= note_at]
    broke = [i for i in after if i["gpu_name"] != "RTX 4090"]
    assert after and not broke and r.violations == 0, (after, r)
    assert r.react_ticks is not None, r
    # the note's host is where the scenario listed the cheap offers the cron arm rents first
    host = min((i for i in seen["last"]["instances"] if i["rented_at"] < note_at), key=lambda i: i["dph_total"])["host_id"]
    assert not any(i["host_id"] == host for i in after), host


def _scripted_model(body: dict[str, Any]) -> Step:
    """Each tick: search, rent the first offer listed, stop."""
    if is_summary_request(body):
        return summary_reply(body)
    last = body["messages"][-1]
    if last.get("role") != "tool":
        return reply(tool_calls=[("search_offers", {"limit": 5})])
    ids = _OFFER_ROW.findall(str(last.get("content") or ""))  # the search's table; a rent's result has none
    if ids:
        return reply(tool_calls=[("rent_instance", {"offer_id": int(ids[0]), "reason": "jobs are waiting"})])
    return reply("done for this tick")


def test_the_model_path_runs_ticks_against_a_scripted_model() -> None:
    seen: dict[str, Any] = {}
    with FakeOpenAI(default=_scripted_model) as fake:
        r = outcomes.run_one(outcomes.SCENARIOS["ramp"], "agent", 4, 7, fake.base_url, fake.model,
                             observe=lambda a, b: seen.update(first=a, last=b))
        asked = len(fake.chat_requests)
    _check_from_simulator(r, seen["first"], seen["last"])
    assert r.failed_ticks == 0 and asked >= 4
    assert seen["last"]["instances"], "the scripted model's rents reached the simulator"


def test_the_model_path_is_told_of_unmet_demand_it_cannot_meet() -> None:
    """The same scenario through the model path: the scripted model searches every tick and finds nothing
    to rent; the simulator shows the jobs piling up, and the alert comes within a tick all the same, from
    code, whoever decides."""
    with FakeOpenAI(default=_scripted_model) as fake:
        r = outcomes.run_one(DRY, "agent", 6, 7, fake.base_url, fake.model)
        asked = len(fake.chat_requests)
    due = f"{outcomes.UNMET_KEY}@{outcomes.UNMET_AFTER}"
    assert r.failed_ticks == 0 and asked >= 6
    assert r.jobs_served == 0 and r.alerts_expected == [due], r
    assert r.alerts_raised == [due] and r.alert_lag_ticks[due] <= outcomes.ALERT_WITHIN, r


def _fenced_model(body: dict[str, Any], rents: list[int]) -> Step:
    """Each tick, every call written in a ```json fence as Qwen2.5-Coder-1.5B writes them: read the demand,
    search, rent the first offer listed, stop. Calls that ran show in the history as real calls."""
    if is_summary_request(body):
        return summary_reply(body)
    msgs = body["messages"]
    start = max(i for i, m in enumerate(msgs) if m["role"] == "user" and str(m.get("content")).startswith("[tick "))
    ran = [c["function"]["name"] for m in msgs[start:] if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    if "get_demand" not in ran:
        return fenced_calls([("get_demand", {})], prose="First, the demand.")
    if "search_offers" not in ran:
        return fenced_calls([("search_offers", {"limit": 5})])
    ids = [i for m in msgs[start:] if m["role"] == "tool" for i in _OFFER_ROW.findall(str(m.get("content")))]
    if "rent_instance" not in ran and ids:
        rents.append(int(ids[0]))
        return fenced_calls([("rent_instance", {"offer_id": int(ids[0]), "reason": "jobs are waiting"})])
    return reply("Done for this tick.")


def test_the_model_arm_runs_calls_written_in_fences_with_accept(tmp_path: Path) -> None:
    """bench/outcomes.py's model arm with --text-tool-calls accept against a model that writes every call in a
    fence: each tick reads the demand, searches and rents, and the simulator shows an instance per tick rented
    from the offers the model named. --keep leaves the arm's config, log and the simulator's accounting."""
    seen: dict[str, Any] = {}
    ticks = 3
    opts = outcomes.Options(model_timeout=30, text_tool_calls="accept", keep=tmp_path / "kept")
    rents: list[int] = []
    with FakeOpenAI(default=lambda body: _fenced_model(body, rents)) as fake:
        r = outcomes.run_one(outcomes.SCENARIOS["ramp"], "agent", ticks, 7, fake.base_url, fake.model,
                             observe=lambda a, b: seen.update(first=a, last=b), opts=opts)
    _check_from_simulator(r, seen["first"], seen["last"])
    assert r.failed_ticks == 0, r
    rented = seen["last"]["instances"]
    assert len(rents) == ticks and sorted(i["offer_id"] for i in rented) == sorted(rents), (rented, rents)
    kept = tmp_path / "kept" / "ramp-agent"
    assert "text_tool_calls: accept" in (kept / "config.yaml").read_text(encoding="utf-8")
    assert json.loads((kept / "result.json").read_text(encoding="utf-8"))["jobs_served"] == r.jobs_served
    assert 0 < r.tick_s_mean <= r.tick_s_max


def test_the_model_takes_over_a_running_fleet_from_the_tick_asked(tmp_path: Path) -> None:
    """--model-from-tick: the rules provider decides the first ticks, the model the rest, on one log. The model's
    first request is that tick's, its thread holds the rules' ticks, and the result says which ticks each decided;
    the figures still come from the simulator over every tick."""
    seen: dict[str, Any] = {}
    ticks, start = 4, 3
    opts = outcomes.Options(model_timeout=30, keep=tmp_path / "kept", model_from_tick=start)
    with FakeOpenAI(default=_scripted_model) as fake:
        r = outcomes.run_one(outcomes.SCENARIOS["ramp"], "agent", ticks, 7, fake.base_url, fake.model,
                             observe=lambda a, b: seen.update(first=a, last=b), opts=opts)
        bodies = [q.json for q in fake.chat_requests if not is_summary_request(q.json)]
    _check_from_simulator(r, seen["first"], seen["last"])
    assert r.failed_ticks == 0 and r.decided_by == f"rules 1-{start - 1}, model {start}-{ticks}", r
    observed = [max(int(m) for m in re.findall(r"^\[tick (\d+) ", "\n".join(
        str(x.get("content") or "") for x in b["messages"] if x["role"] == "user"), re.M)) for b in bodies]
    assert observed and min(observed) == start and max(observed) == ticks, observed  # nothing asked before
    thread = "\n".join(str(x.get("content") or "") for x in bodies[0]["messages"])
    assert "[tick 1 " in thread and "rules provider:" in thread  # the rules' ticks, as the model's own past
    rented_before = [i for i in seen["last"]["instances"] if i["rented_at"] < seen["first"]["now"] + (start - 1) * 300]
    assert rented_before, "the rules provider ran the fleet before the hand-over"
    cfg = (tmp_path / "kept" / "ramp-agent" / "config.yaml").read_text(encoding="utf-8")
    assert "provider: openai" in cfg  # the config left behind is the model's: the log reads with it
    text = outcomes.table([r], "model")
    assert f"ticks decided by: ramp rules 1-{start - 1}, model {start}-{ticks}" in text


def test_an_instance_alert_is_not_due_when_the_event_hit_none_of_the_arms_instances() -> None:
    """An outage of a host the fleet had already left kills nothing of its: no ``dead:`` alert is owed. One the
    event hit, or a scenario that names no victims, keeps every alert it expects."""
    alerts = {"dead:": 12, "demand:unmet": 12}
    assert outcomes.due(alerts, []) == {"demand:unmet": 12}
    assert outcomes.due(alerts, [21005501]) == alerts
    assert outcomes.due(alerts, None) == alerts
