"""A rent vast.ai refuses creates nothing and bills nothing: a machine it cannot schedule (``cancel_unavail``, about
3 % of rents by default in the simulator as on vast.ai), an offer gone, or no credit. Such refusals do not use up
``policy.max_rents_per_hour``, which guards against renting too much, not against asking. End to end over HTTP
against the simulator, with a scripted model through the real SDK and with the rules provider: a fleet whose
first rents were refused still rents within the hour."""

from __future__ import annotations

from typing import Any

import pytest

from agent.runtime.tick import run_tick
from agent.sim import Simulator
from tests.conftest import events_of, good_offer, rent_puts, within_policy
from tests.fakes.openai_server import reply
from tests.model.test_rules_sizing import FLEET, ROOMY, _ticks

REFUSE_ALL = {"unschedulable": 1.0, "stuck_scheduling": 0, "maintenance": 0, "price_increases": 0}


def _capped(app: Any) -> list[Any]:
    return [e for e in events_of(app, "policy.blocked") if e.payload["rule"] == "max_rents_per_hour"]


@pytest.mark.usefixtures("backend")  # the count of refused rents is SQL of its own on each backend
def test_rents_vast_ai_could_not_schedule_do_not_use_up_the_hourly_rent_limit(sim: Simulator, make_app,
                                                                              fake_model):
    sim.realism.update(REFUSE_ALL)  # every machine is busy: each rent is refused (HTTP 400 unavailable)
    app = make_app(policy={"max_rents_per_hour": 1})
    offer = good_offer(sim, app.settings)["id"]
    rent = ("rent_instance", {"offer_id": offer, "reason": "scripted"})

    fake_model.enqueue(reply(tool_calls=[rent, rent]), reply("ok"))
    assert run_tick(app).ok
    assert [r["status"] for r in rent_puts(sim)] == [400, 400]  # both sent, both refused: neither counts
    assert not _capped(app)
    [result, _] = [e for e in events_of(app, "tool.result") if e.payload["name"] == "rent_instance"]
    assert "cannot schedule" in result.payload["error"]

    sim.realism.update({"unschedulable": 0})
    second = next(o["id"] for o in sorted(sim.offers.values(), key=lambda o: o["dph_total"])
                  if o["id"] != offer and not o["rented"] and o["host_id"] not in sim.bad_hosts
                  and within_policy(app.settings, o) and o["disk_space"] >= app.settings.fleet.disk_gb)
    fake_model.enqueue(reply(tool_calls=[rent, ("rent_instance", {"offer_id": second, "reason": "scripted"})]),
                       reply("ok"))
    assert run_tick(app).ok
    assert [r["status"] for r in rent_puts(sim)] == [400, 400, 200]  # the rent that went through counts
    [blocked] = _capped(app)
    assert "1 rents in the last hour" in blocked.payload["detail"]


def test_the_rules_provider_rents_again_within_the_hour_after_refused_rents(sim: Simulator, make_app, sim_clock):
    sim.realism.update(REFUSE_ALL)
    sim.pending = 30.0
    app = make_app(provider="rules", policy={**ROOMY, "max_rents_per_hour": 3}, fleet=FLEET)
    _ticks(app, sim, sim_clock, 1)
    refused = rent_puts(sim)
    assert len(refused) >= 3 and {r["status"] for r in refused} == {400}  # as many as the limit, all refused

    sim.realism.update({"unschedulable": 0})
    _ticks(app, sim, sim_clock, 1)  # five minutes later: the machines can take them
    assert [r["status"] for r in rent_puts(sim)[len(refused):]].count(200) >= 1
    text = events_of(app, "model.response")[-1].payload["text"]
    assert "no rents left this hour" not in text, text
