"""tick.started v8 (agent.events.kinds.tick): a large fleet's observation is as long as its problems, not its size.

Real simulator over HTTP, real tick, the fake model server recording the request: at 500 and 2,000 instances the
observation the model is sent stays under a token bound (v7's text of the same observation is several times it),
every instance needing attention is named by id (not running, a message, not ours), no healthy one is, and
``list_fleet`` with ``gpu_name`` and ``status`` gives the healthy ones' ids on demand."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import pytest

from agent import events as ev
from agent.events.rendering import CHANGES_SHOWN, PROBLEMS_SHOWN, TODO_IDS_SHOWN
from agent.fleet.pipeline import run_tool_call
from agent.fleet.policy import Policy
from agent.fleet.toolkit import ToolContext, load_tools
from agent.runtime.tick import run_tick
from agent.sim import Simulator
from agent.tokens import get_tokenizer
from tests.fakes.openai_server import FakeOpenAI

GPUS = ("RTX 4090", "RTX 3090", "A100 SXM4")
BOUND = 2_500
"""Tokens the observation of a fleet of any size stays under, with up to ``PROBLEMS_SHOWN`` problems listed."""


def _plant(app: Any, sim: Simulator, n: int) -> list[int]:
    """``n`` instances of ours (rented with our label, adopted in the log as reconcile records them)."""
    prefix = app.settings.fleet.label_prefix + app.settings.agent_id + "-"
    ids, adopted = [], []
    for k in range(n):
        offer = sim.market.add_offer(GPUS[k % len(GPUS)])
        sim.offers[offer]["duration"] = 60 * 86400.0   # no contract ends within policy.contract_min_hours
        label = f"{prefix}{k:012x}"
        iid = sim.create_instance(offer, label=label)
        ids.append(iid)
        adopted.append(("instance.adopted", {"instance_id": iid, "label": label, "idem_key": f"{k:012x}"},
                        "system", None))
    app.log.append_many(adopted)
    return ids


def _observation(fake: FakeOpenAI) -> str:
    msgs = fake.requests[-1].json["messages"]
    return next(str(m["content"]) for m in reversed(msgs)
                if m["role"] == "user" and str(m.get("content") or "").startswith("[tick "))


def _list(app: Any, args: dict[str, Any]) -> str:
    ctx = ToolContext(settings=app.settings, log=app.log, vast=app.vast(), demand=None, policy=Policy(app.settings),
                      tick=2)
    outcome, _ = run_tool_call(load_tools(), ctx, {"id": "c", "name": "list_fleet",  # type: ignore[arg-type]
                                                   "arguments": json.dumps(args)}, dry_run=False)
    assert outcome.ok, outcome
    return str(outcome.output)


@pytest.mark.parametrize("size", [500])  # 2,000 failing instances: the rendering test below
def test_a_large_fleets_observation_names_only_its_problems_and_stays_small(
        size: int, sim: Simulator, sim_clock: Any, make_app: Any, fake_model: FakeOpenAI) -> None:
    sim.realism.update({"rate_interval": 0, "price_increases": 0,   # planted healthy: none stuck or retiring
                        "stuck_scheduling": 0, "unschedulable": 0, "maintenance": 0})
    sim.set_credit(1_000_000.0)   # an hour of 2,000 instances
    app = make_app(policy={"max_instances": 3000, "max_total_dph": 100_000.0})
    ids = _plant(app, sim, size)
    foreign = sim.create_instance(sim.find_offer("L40S")["id"], label="other-team-1")
    sim_clock.advance(3600)   # listed and loaded: running
    broken = ids[7::97]       # about one in a hundred: stopped by its host, with vast.ai's message
    for iid in broken:
        sim.set_status(iid, "exited", "host went offline")
    result = run_tick(app)
    assert result.ok, result
    text = _observation(fake_model)
    tick = next(e for e in app.log.read(0, kinds=["tick.started"]))
    assert tick.version >= 8
    insts = tick.payload["observation"]["instances"]
    assert len(insts) == size + 1
    healthy = [i["id"] for i in insts if i["ours"] and i["status"] == "running"]
    assert len(healthy) == size - len(broken)
    todo = next(x for x in text.splitlines() if x.startswith("to do: "))  # v9: at most a few by id, the rest counted
    assert len(re.findall(r"#(\d+)\b", todo)) <= 2 * TODO_IDS_SHOWN
    named = {int(x) for x in re.findall(r"#(\d+)\b", text.split("changes since last tick:")[0].replace(todo, ""))}
    assert named == {*broken, foreign}
    assert f"#{foreign} L40S x1 running" in text and "NOT-OURS" in text
    assert all(f"#{i} " in text for i in broken) and "host went offline" in text
    tokens = app.log.tokenizer.count(text)
    as_v7 = app.log.tokenizer.count_message(ev.render(dataclasses.replace(tick, version=7)))
    assert tokens < BOUND < as_v7, (tokens, as_v7)
    # every healthy instance is counted in a line of its GPU model, and list_fleet gives their ids
    counted = sum(int(n) for n in re.findall(r"^  (\d+) × .* running · ", text, re.M))
    assert counted == len(healthy)
    rows = _list(app, {"gpu_name": "rtx_3090", "status": "running"}).splitlines()[1:]
    want = {i["id"] for i in insts if i["gpu_name"] == "RTX 3090" and i["status"] == "running"}
    assert {int(r.split(" | ")[0]) for r in rows} == want and all(" | RTX 3090 x1 | running | " in r for r in rows)
    exited = _list(app, {"status": "exited"}).splitlines()[1:]
    assert {int(r.split(" | ")[0]) for r in exited} == set(broken)
    none = _list(app, {"gpu_name": "H100 SXM"})
    assert none.startswith("no instances with gpu_name 'H100 SXM' (of ") and "RTX 3090" in none


def test_a_fleet_all_failing_lists_the_most_pressing_by_id_and_counts_the_rest() -> None:
    """2,000 instances all in trouble (a mass outage): ``PROBLEMS_SHOWN`` of them by id, the not-running ones
    before one that merely restarted, the rest counted alike; the text stays under the bound; the changes are
    cut to the first ones by id and the rest counted."""
    insts: list[dict[str, Any]] = [
        {"id": 30_000_000 + k, "gpu_name": GPUS[k % 3], "num_gpus": 1, "status": "running" if k == 0 else "exited",
         "status_msg": None if k == 0 else "host went offline", "age_s": 600, "dph": 0.4, "host_id": 9000 + k // 4,
         "ours": True, "restarts": 2 if k == 0 else 0} for k in range(2000)]
    obs = {"time": 1_795_000_000, "balance": 900.0, "fleet_dph": 800.0, "instances": insts,
           "changes": [f"#{i['id']} running -> exited" for i in insts[1:]]}
    e = ev.Event(seq=1, id="e", ts="2026-12-06T10:00:00.000000Z", kind="tick.started", source="scheduler", tick=3,
                 payload={"observation": obs}, version=8)
    text = str(ev.render(e)["content"])  # type: ignore[index]
    listed = re.findall(r"^  #(\d+) ", text.split("changes since last tick:")[0], re.M)
    assert len(listed) == PROBLEMS_SHOWN and str(insts[0]["id"]) not in listed   # exited before restarted
    assert f"  and {2000 - PROBLEMS_SHOWN} more, not listed by id (list_fleet shows them):" in text
    shown_last = 30_000_000 + PROBLEMS_SHOWN   # the first ones by id among the exited: #1..#PROBLEMS_SHOWN
    assert listed == [str(30_000_001 + k) for k in range(PROBLEMS_SHOWN)]
    rest_4090 = sum(1 for i in insts[1:] if i["id"] > shown_last and i["gpu_name"] == "RTX 4090")
    assert f"    {rest_4090} × RTX 4090 x1 exited — host went offline\n" in text
    assert "    1 × RTX 4090 x1 running\n" in text   # the one that restarted, counted last
    rest = 1999 - CHANGES_SHOWN
    assert f"  and {rest} more: {rest} × running -> exited" in text
    assert get_tokenizer().count(text) < BOUND
