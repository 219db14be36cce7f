"""Contract end dates in the tools: search_offers shows when a rent would end and leaves out offers ending
within policy.contract_min_hours; rent_instance refuses them with the reason. Real simulator over HTTP."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent import config
from agent.errors import ConfigError
from agent.fleet.contracts import ends_in
from agent.fleet.pipeline import run_tool_call
from agent.fleet.policy import Policy
from agent.fleet.toolkit import ToolContext, load_tools
from agent.sim import Simulator


def _ctx(app: Any) -> ToolContext:
    ctx = ToolContext(settings=app.settings, log=app.log, vast=app.vast(), demand=None, policy=Policy(app.settings),
                      tick=1)
    ctx.refresh()
    return ctx


def _call(ctx: ToolContext, name: str, args: dict[str, Any]) -> Any:
    outcome, _ = run_tool_call(load_tools(), ctx, {"id": "c", "name": name,  # type: ignore[arg-type]
                                                   "arguments": json.dumps(args)}, dry_run=False)
    return outcome


def test_ends_in_reads_as_days_hours_minutes() -> None:
    assert [ends_in(x) for x in (None, -5, 600, 5 * 3600, 3 * 86400)] == \
        ["no end date", "ended", "ends in 10 min", "ends in 5 h", "ends in 3 d"]


def test_offers_ending_soon_are_left_out_of_searches_and_refused(sim: Simulator, make_app) -> None:
    sim.realism.update({"rate_interval": 0})
    short = sim.find_offer("RTX 4090")
    sim.offers[short["id"]]["duration"] = 5 * 3600.0
    app = make_app(provider="rules", policy={"min_reliability": 0.9, "allowed_gpus": ["RTX 4090"]},
                   fleet={"disk_gb": 10.0})
    assert app.settings.policy.contract_min_hours == 24.0
    ctx = _ctx(app)
    out = _call(ctx, "search_offers", {"limit": 25})
    assert out.ok, out
    lines = out.output.splitlines()
    assert lines[0].endswith(" | contract")
    rows = [x for x in lines[1:] if x[:1].isdigit()]
    assert rows and all(" | ends in " in r for r in rows)
    assert not any(r.startswith(f"{short['id']} ") for r in rows)
    assert "offers whose contract ends within policy.contract_min_hours 24 h left out" in out.output
    refused = _call(_ctx(app), "rent_instance", {"offer_id": short["id"], "reason": "cheapest"})
    assert not refused.ok and "contract_min_hours" in (refused.error or "") and "ends in 5 h" in (refused.error or "")
    assert not any(i["_offer_id"] == short["id"] for i in sim.instances.values())
    # With the check off (0) the same offer is listed and rented.
    app0 = make_app(provider="rules", policy={"min_reliability": 0.9, "allowed_gpus": ["RTX 4090"],
                                              "contract_min_hours": 0.0}, fleet={"disk_gb": 10.0})
    rented = _call(_ctx(app0), "rent_instance", {"offer_id": short["id"], "reason": "cheapest"})
    assert rented.ok, rented


def test_contract_min_hours_is_validated_with_its_line() -> None:
    assert config.parse("policy:\n  contract_min_hours: 48.0\n").policy.contract_min_hours == 48.0
    with pytest.raises(ConfigError) as exc:
        config.parse("agent_id: f\npolicy:\n  contract_min_hours: -1.0\n", "/etc/fa/config.yaml")
    assert str(exc.value).startswith("/etc/fa/config.yaml:3: policy.contract_min_hours: must not be negative")


def test_an_instance_whose_contract_ended_is_destroyed_without_blaming_its_host(sim: Simulator, make_app,
                                                                              sim_clock) -> None:
    from agent.runtime.tick import run_tick
    from tests.conftest import events_of, plant_ours

    sim.realism.update({"rate_interval": 0, "price_increases": 0})
    sim.pending = 0.0
    app = make_app(provider="rules", policy={"min_reliability": 0.9}, fleet={"disk_gb": 10.0})
    iid = plant_ours(app, sim, sim.find_offer("RTX 4090")["id"])
    sim.instances[iid]["end_date"] = sim.now() + 600.0
    sim_clock.advance(900)
    sim.tick()
    assert sim.instances[iid]["actual_status"] == "stopped"
    assert run_tick(app).ok
    [rec] = [i for i in events_of(app, "tick.started")[-1].payload["observation"]["instances"] if i["id"] == iid]
    assert rec["ends_s"] <= 0
    assert iid not in sim.instances  # destroyed: an expired instance only bills storage
    assert not events_of(app, "host.failed")
