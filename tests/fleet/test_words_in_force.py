"""tick.started v10: the observation says what the operators' words in force say and which instances of ours they bar.

Real simulator over HTTP, real ticks, the scripted fake model through the real SDK. An operator's note ("Stop using
host H. Only RTX 4090 from now on.") used to reach the model only as its own message, while the observation's
``to do:`` said there was nothing to do, and the search's last line named the cheapest offers whatever the note
said: a small model followed ``to do:``. Now the observation states the words in force, counts the instances they
bar out of what ours deliver, names them in ``to do:``, and the search leaves out the offers they bar. A model
doing what ``to do:`` and the search say leaves the fleet obeying the note, by the simulator's state."""

from __future__ import annotations

import re
from typing import Any

from agent import feedback
from agent.runtime.tick import run_tick
from agent.sim import Simulator
from agent.sim.demand import Shape
from tests.conftest import events_of, offer_rows, plant_ours, tool_messages, within_policy
from tests.fakes.openai_server import FakeOpenAI, reply

COVER = re.compile(r"rent_instance offer_id=(\d+) \(([\d.]+) jobs/h\)")


def _offer(sim: Simulator, app: Any, gpu: str, not_hosts: set[int], *, other: bool = False) -> dict[str, Any]:
    """The cheapest unrented offer of ``gpu`` (``other``: of any model but it) within policy on a host that behaves,
    not on ``not_hosts``."""
    return next(o for o in sorted(sim.offers.values(), key=lambda o: (o["dph_total"], o["id"]))
                if (o["gpu_name"] == gpu) != other and within_policy(app.settings, o) and not o["rented"]
                and o["host_id"] not in {*sim.bad_hosts, *not_hosts} and o["disk_space"] >= app.settings.fleet.disk_gb)


def _observation(body: dict[str, Any]) -> str:
    return next(str(m["content"]) for m in reversed(body["messages"])
                if m["role"] == "user" and str(m.get("content") or "").startswith("[tick "))


def _todo(body: dict[str, Any]) -> str:
    return next(x for x in _observation(body).splitlines() if x.startswith("to do: "))


def _destroy_barred_and_search(body: dict[str, Any]) -> Any:
    """Destroy what ``to do:`` names as barred, and search as it says."""
    barred = [int(i) for part in _todo(body).split(";") if "barred" in part for i in re.findall(r"#(\d+)", part)]
    return reply(tool_calls=[*(("destroy_instance", {"instance_id": i, "reason": "the operator bars it"})
                               for i in barred), ("search_offers", {"order": "per_job"})])


def _rent_cover(body: dict[str, Any]) -> Any:
    """Rent every offer the search's last line names."""
    ids = [int(i) for i, _ in COVER.findall(str(tool_messages(body)[-1]["content"]))]
    return reply(tool_calls=[("rent_instance", {"offer_id": i, "reason": "cover the gap"}) for i in ids])


def test_a_note_bars_instances_in_to_do_and_offers_in_the_search(
        sim: Simulator, sim_clock: Any, make_app: Any, fake_model: FakeOpenAI) -> None:
    sim.realism.update({"quick": 1, "price_increases": 0})
    sim.shape = Shape("constant", since=sim_clock(), rate=30.0)
    app = make_app(policy={"max_instances": 8, "drain_within": 3600, "min_reliability": 0.9,
                           "allowed_gpus": ["RTX 4090", "RTX 3090", "L40S", "A100 SXM4"]}, fleet={"disk_gb": 10.0})
    on_host = _offer(sim, app, "RTX 4090", set(), other=True)
    host = int(on_host["host_id"])
    elsewhere = _offer(sim, app, "RTX 4090", {host}, other=True)
    kept = _offer(sim, app, "RTX 4090", {host})
    a = plant_ours(app, sim, on_host["id"], key="feedc0ffee01")
    b = plant_ours(app, sim, elsewhere["id"], key="feedc0ffee02")
    c = plant_ours(app, sim, kept["id"], key="feedc0ffee03")
    sim_clock.advance(3600)  # loaded and running
    feedback.say(app.log, f"Stop using host {host}. Only RTX 4090 from now on.", "alice")
    fake_model.enqueue(_destroy_barred_and_search, _rent_cover, reply("done"))
    result = run_tick(app)
    assert result.ok, result

    assert events_of(app, "tick.started")[-1].version == 10
    first = fake_model.chat_requests[0].json
    text = _observation(first)
    assert re.search(rf"^operators' words in force: exclude host {host} until [^;]+ UTC; allow only GPU models RTX 4090 "
                     r"until [^;]+ UTC$", text, re.M), text
    todo = _todo(first)
    assert f"#{a} (barred: host {host} is excluded)" in todo, todo
    assert f"#{b} (barred: {elsewhere['gpu_name']} is not among RTX 4090)" in todo, todo
    assert f"#{c}" not in todo and "rent " in todo, todo  # the barred ones' jobs/h are in the gap
    need = re.search(r"ours deliver ([\d.]+) jobs/h, not counting ([\d.]+) jobs/h from 2 instances barred below", text)
    assert need, text

    # the search leaves out every offer the note bars, and says so; its last line names only what it allows
    search = str(tool_messages(fake_model.chat_requests[1].json)[-1]["content"])
    rows = offer_rows(search)
    assert rows and all(r["gpu"].startswith("RTX 4090") and r["host"] != host for r in rows), search
    assert "offers the operators' words in force bar left out: exclude host" in search, search
    named = [int(i) for i, _ in COVER.findall(search)]
    assert named and all(sim.offers[i]["gpu_name"] == "RTX 4090" and sim.offers[i]["host_id"] != host
                         for i in named), search

    # by the simulator: the barred are gone, and every instance of ours left obeys the note (the simulator
    # refuses a few rents: whatever was rented obeys it)
    label = app.settings.fleet.label_prefix
    live = [i for i in sim.instances.values() if str(i["label"] or "").startswith(label)]  # destroyed: gone
    assert {a, b}.isdisjoint(i["id"] for i in live), live
    assert c in {i["id"] for i in live}
    assert all(i["gpu_name"] == "RTX 4090" and i["host_id"] != host for i in live), live
    assert len(live) > 1  # the gap was rented


def test_without_operators_words_nothing_is_barred_and_the_search_is_as_before(
        sim: Simulator, sim_clock: Any, make_app: Any, fake_model: FakeOpenAI) -> None:
    sim.realism.update({"quick": 1, "price_increases": 0})
    sim.shape = Shape("constant", since=sim_clock(), rate=30.0)
    app = make_app(policy={"max_instances": 8, "drain_within": 3600})
    fake_model.enqueue(reply(tool_calls=[("search_offers", {"order": "per_job"})]), reply("done"))
    assert run_tick(app).ok
    text = _observation(fake_model.chat_requests[0].json)
    assert "operators' words in force" not in text and "barred" not in text, text
    search = str(tool_messages(fake_model.chat_requests[1].json)[-1]["content"])
    assert "operators' words" not in search and {r["gpu"].split(" x")[0] for r in offer_rows(search)} != {"RTX 4090"}


def test_instances_the_tick_destroys_itself_are_not_asked_of_the_model(
        sim: Simulator, sim_clock: Any, make_app: Any, fake_model: FakeOpenAI) -> None:
    """Ours stopped without our asking: the tick destroys them itself (agent/fleet/stopped.py) right after the
    observation, which used to name them in ``to do:`` all the same, so a model doing what it says spent its first
    calls destroying instances already gone. Now ``to do:`` asks only for the rent that replaces them."""
    sim.realism.update({"quick": 1, "price_increases": 0})
    sim.shape = Shape("constant", since=sim_clock(), rate=30.0)
    app = make_app(policy={"max_instances": 8, "drain_within": 3600, "min_reliability": 0.9}, fleet={"disk_gb": 10.0})
    first = _offer(sim, app, "RTX 4090", set())
    ids = [plant_ours(app, sim, first["id"], key="feedc0ffee01"),
           plant_ours(app, sim, _offer(sim, app, "RTX 4090", {int(first["host_id"])})["id"], key="feedc0ffee02")]
    sim_clock.advance(3600)  # loaded and running
    for iid in ids:
        sim.host_stop(iid, None)
    fake_model.enqueue(reply("done"))
    run_tick(app)

    need = events_of(app, "tick.started")[-1].payload["observation"]["need"]
    assert sorted(need["dead"]) == sorted(ids) and need["destroying"] == sorted(ids), need
    todo = _todo(fake_model.chat_requests[0].json)
    assert todo.startswith("to do: rent ") and not any(f"#{i}" in todo for i in ids), todo
    destroyed = [int(e.payload["instance_id"]) for e in events_of(app, "system.destroy")]
    assert sorted(destroyed) == sorted(ids)
    assert not set(ids) & set(sim.instances), "the tick destroyed them on the simulator"
