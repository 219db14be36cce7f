"""tick.started v9: the observation says what the fleet needs now, and the tools answer in the same terms.

Real simulator over HTTP, real ticks, the scripted fake model: the ``need now:`` line states the arrivals and the
backlog the simulator's queue reports against what our instances deliver, ``to do:`` names the calls; a search's last
line names offers covering the gap, a rent says what is left of it, and a read-only call made twice in one tick is
answered from the first. Outcomes are checked against the simulator's state."""

from __future__ import annotations

import re
from typing import Any

from agent.fleet.throughput import RENT_BELOW
from agent.runtime.tick import MAX_CORRECTIONS, run_tick
from agent.sim import Simulator
from agent.sim.demand import Shape
from tests.conftest import events_of, good_offer, plant_ours, tool_messages
from tests.fakes.openai_server import FakeOpenAI, reply

NEED = re.compile(r"^need now: ([\d.]+) jobs/h \(arriving (\d+)/h \+ (\d+) pending cleared within ([\d.]+)h\) · "
                  r"ours deliver ([\d.]+) jobs/h$", re.M)
COVER = re.compile(r"rent_instance offer_id=(\d+) \(([\d.]+) jobs/h\)")


def _observation(fake: FakeOpenAI, n: int = 0) -> str:
    msgs = fake.requests[n].json["messages"]
    return next(str(m["content"]) for m in reversed(msgs)
                if m["role"] == "user" and str(m.get("content") or "").startswith("[tick "))


NEXT = re.compile(r"still [\d.]+ jobs/h short: rent_instance ((?:offer_id=\d+(?:, )?)+) next")


def _rent_first(request: dict[str, Any]) -> Any:
    """Rent only the first offer the search's last line names (a small model often stops at one)."""
    last = str(tool_messages(request)[-1]["content"])
    ids = [int(i) for i, _ in COVER.findall(last)]
    return reply(tool_calls=[("rent_instance", {"offer_id": ids[0], "reason": "cover the gap"})])


def _rent_next(request: dict[str, Any]) -> Any:
    """Rent the offers the rent's answer names next."""
    m = NEXT.search(str(tool_messages(request)[-1]["content"]))
    ids = [int(i) for i in re.findall(r"offer_id=(\d+)", m.group(1))] if m else []
    return reply(tool_calls=[("rent_instance", {"offer_id": i, "reason": "cover the gap"}) for i in ids])


def test_a_short_fleet_is_told_the_gap_and_the_offers_that_cover_it(
        sim: Simulator, sim_clock: Any, make_app: Any, fake_model: FakeOpenAI) -> None:
    sim.shape = Shape("constant", since=sim_clock(), rate=30.0)
    app = make_app(policy={"max_instances": 6, "drain_within": 3600})
    # the fillers a small model writes for every optional argument are taken as absent
    fake_model.enqueue(reply(tool_calls=[("search_offers", {"order": "per_job", "num_gpus": 1, "max_gpus": 1,
                                                            "max_dph": 0, "min_reliability": 0})]),
                       _rent_first,
                       _rent_next,
                       reply(tool_calls=[("get_demand", {})]),
                       reply(tool_calls=[("get_demand", {})]),
                       reply("done"))
    result = run_tick(app)
    assert result.ok, result

    obs = events_of(app, "tick.started")[-1]
    assert obs.version >= 9
    demand = obs.payload["observation"]["demand"]
    text = _observation(fake_model)
    m = NEED.search(text)
    assert m, text
    need, arriving, pending, drain, capacity = (float(g) for g in m.groups())
    # the simulator's queue as the observation read it; 30/h arriving; nothing of ours yet
    assert (arriving, pending, drain, capacity) == (30.0, float(demand["pending"]), 1.0, 0.0)
    assert need == round(30.0 + demand["pending"] / 1.0, 1)
    assert f'to do: rent {need:.1f} jobs/h more: search_offers with {{"order": "per_job"}} and no other' in text

    # the search's last line: offers covering the gap, cheapest per job first, within the cap
    search = str(tool_messages(fake_model.requests[1].json)[-1]["content"])
    cover = next(x for x in search.splitlines() if x.startswith("to cover the "))
    named = [(int(i), float(j)) for i, j in COVER.findall(cover)]
    assert named, search
    assert len(named) <= 6
    assert sum(j for _, j in named) >= need or (len(named) == 6 and "policy.max_instances" in cover)
    assert sum(j for _, j in named[:-1]) < need  # no more than covers it

    # the first rent said what is left and which offers cover it next; those were rented too (the simulator
    # refuses a few rents: the count allows for that)
    first = str(tool_messages(fake_model.requests[2].json)[-1]["content"])
    if "rented offer" in first and len(named) > 1:
        m = NEXT.search(first)
        assert m, first
        assert [int(i) for i in re.findall(r"offer_id=(\d+)", m.group(1))] == [i for i, _ in named[1:]]
    ours = [i for i in sim.instances.values() if str(i["label"] or "").startswith(app.settings.fleet.label_prefix)]
    assert len(named) - 2 <= len(ours) <= len(named)
    last = str(tool_messages(fake_model.requests[3].json)[-1]["content"])
    assert "need is covered" in last or "policy.max_instances" in cover or "not rented" in last

    # get_demand twice in a tick: the second is answered from the first, not run again
    results = [e.payload for e in events_of(app, "tool.result", tick=result.tick) if e.payload["name"] == "get_demand"]
    assert [r["ok"] for r in results] == [True, False]
    assert "already ran this tick" in str(results[1].get("error") or results[1].get("output"))


def test_an_oversized_fleet_is_told_which_instances_to_destroy(
        sim: Simulator, sim_clock: Any, make_app: Any, fake_model: FakeOpenAI) -> None:
    sim.realism.update({"quick": 1, "price_increases": 0})
    sim.shape = Shape("constant", since=sim_clock(), rate=4.0)
    app = make_app(policy={"max_instances": 8, "drain_within": 3600, "jobs_per_hour": 8.0, "jobs_per_hour_dlperf": 0.0})
    ids = []
    for k in range(4):
        ids.append(plant_ours(app, sim, good_offer(sim, app.settings)["id"], key=f"feedc0ffee{k:02d}"))
    sim_clock.advance(4 * 3600)  # loaded and running; the backlog the queue starts with worked off
    result = run_tick(app)
    assert result.ok, result
    obs = events_of(app, "tick.started")[-1].payload["observation"]
    text = _observation(fake_model)
    m = NEED.search(text)
    assert m, text
    need, capacity = float(m.group(1)), float(m.group(5))
    jph = {i: 8.0 * sim.instances[i]["num_gpus"] for i in ids if sim.instances[i]["actual_status"] == "running"}
    assert capacity == sum(jph.values())
    line = next(x for x in text.splitlines() if x.startswith("to do: "))
    surplus = [int(x) for x in re.findall(r"#(\d+)", line)]
    assert surplus and set(surplus) <= set(jph), text
    assert obs["demand"]["pending"] <= capacity * app.settings.schedule.interval / 3600.0  # the queue is dry
    # the rest still cover the need, and none of the rest could go too
    kept = capacity - sum(jph[i] for i in surplus)
    assert kept >= need
    assert all(kept - jph[i] < need for i in jph if i not in surplus)
    assert "(surplus: the rest cover the need)" in line
    assert capacity >= RENT_BELOW * need


def test_an_empty_reply_while_the_observation_asks_for_calls_is_told_what_it_asks(
        sim: Simulator, sim_clock: Any, make_app: Any, fake_model: FakeOpenAI) -> None:
    """A small model copies an earlier tick's empty ending: told the ``to do:`` line, it acts; at most
    ``MAX_CORRECTIONS`` times a tick. An empty reply when there is nothing to do ends the tick as before."""
    sim.shape = Shape("constant", since=sim_clock(), rate=30.0)
    app = make_app(policy={"max_instances": 6, "drain_within": 3600})
    fake_model.enqueue(reply(""), reply(tool_calls=[("search_offers", {"order": "per_job"})]),
                       reply(""), reply(""), reply(""))
    result = run_tick(app)
    assert result.ok, result
    told = events_of(app, "model.empty_reply", tick=result.tick)
    assert len(told) == MAX_CORRECTIONS
    assert told[0].payload["todo"].startswith("to do: rent ")
    second = fake_model.requests[1].json["messages"][-1]
    assert second["role"] == "user" and second["content"].startswith("[system · empty reply] ")
    assert told[0].payload["todo"] in second["content"]
    assert [e.payload["name"] for e in events_of(app, "tool.result", tick=result.tick)] == ["search_offers"]
    assert len(fake_model.requests) == 4 + MAX_CORRECTIONS - 2  # asked again twice, then the empty reply ends it
