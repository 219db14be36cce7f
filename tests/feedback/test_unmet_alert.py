"""Demand left unmet opens ``demand:unmet`` naming its cause, whoever decides; it resolves when the queue
drains. Against the real simulator (its queue, market and billing) through real ticks."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from agent import config
from agent.errors import ConfigError
from agent.feedback.unmet import KEY_UNMET, MarketOffer, Situation, find_cause, unmet_tick
from agent.fleet import steering
from agent.runtime.tick import run_tick
from tests.conftest import events_of

TICK_S = 300.0


def _unmet(app: Any) -> list[Any]:
    return [a for a in app.log.store.every_live_alert() if a.dedup_key == KEY_UNMET]


def _ticks_until_alert(app: Any, sim_clock: Any, most: int) -> int | None:
    """Run up to ``most`` ticks, five minutes apart; the tick (1-based) the alert opened in, or None."""
    for n in range(1, most + 1):
        r = run_tick(app)
        assert r.ok, r.reason
        if _unmet(app):
            return n
        sim_clock.advance(TICK_S)
    return None


def _drain(sim_server: Any) -> None:
    r = httpx.post(f"{sim_server.url}/_sim/demand", json={"pending": 0}, timeout=5.0)
    assert r.status_code == 200 and r.json()["pending"] == 0


def test_a_cap_opens_the_alert_naming_it_and_a_drained_queue_resolves_it(sim, sim_server, sim_clock, make_app):
    """An operator's max_instances=1 under the rules provider: jobs pile up, and by the third tick the alert
    names the cap and who set it; once the queue drains it resolves."""
    app = make_app(provider="rules")
    ov = steering.set_override(app.log, app.settings, "max_instances", "1", by="alice", reason="cost review",
                               until=None)
    opened = _ticks_until_alert(app, sim_clock, 3)
    assert opened == 3  # two unmet ticks are not enough; the third opens it
    (a,) = _unmet(app)
    assert a.title.startswith("jobs waiting 3 ticks: max_instances=1 (override #")
    assert f"override #{ov.seq} by alice: cost review" in a.title
    assert a.title.endswith("reached with 1 live")
    assert a.detail.startswith("the queue needs ~")  # the figures that move each tick stay out of the title
    assert a.raised_by == "system"
    # the cap holds: another unmet tick repeats the alert, it does not open a second one
    sim_clock.advance(TICK_S)
    assert run_tick(app).ok
    assert [x.id for x in _unmet(app)] == [a.id] and app.log.store.alert(a.id).count == 2
    assert not [e for e in events_of(app, "alert.retitled") if e.payload["alert_id"] == a.id]  # same cause
    _drain(sim_server)
    assert run_tick(app).ok
    assert _unmet(app) == []
    resolved = [e for e in events_of(app, "alert.resolved") if e.payload["alert_id"] == a.id]
    assert [e.payload["reason"] for e in resolved] == ["the queue drained"]


def test_an_allowed_gpus_restriction_is_named_with_the_offers_that_would_fit(sim, sim_server, sim_clock, make_app):
    """allowed_gpus narrowed by an operator to a GPU the market has nothing of under the price cap: the
    rules provider rents nothing and the alert says so, counting the offers the config would allow."""
    app = make_app(provider="rules", policy={"max_dph_per_instance": 0.5})
    steering.set_override(app.log, app.settings, "allowed_gpus", "L40S", by="bob", reason="only L40S now",
                          until=None)
    assert _ticks_until_alert(app, sim_clock, 3) == 3
    (a,) = _unmet(app)
    m = re.match(r"jobs waiting 3 ticks: allowed_gpus=\[L40S\] \(override #\d+ by bob: only L40S now\) leaves "
                 r"0 offers under \$0\.5/h; (.+) offers? would fit$", a.title)
    assert m, a.title
    fit = sorted(o for o in sim.offers.values() if not o["rented"] and o["num_gpus"] == 1
                 and o["gpu_name"] in ("RTX 4090", "RTX 3090") and o["disk_space"] >= app.settings.fleet.disk_gb
                 and o["reliability"] >= app.settings.policy.min_reliability
                 and o["dph_base"] + app.settings.fleet.disk_gb * o["storage_cost"] / 730 <= 0.5)
    counts = {g: sum(1 for o in fit if o["gpu_name"] == g) for g in ("RTX 3090", "RTX 4090")}
    named = {g: int(n) for n, g in re.findall(r"(\d+) (RTX \d+)", m.group(1))}
    assert named == {g: n for g, n in counts.items() if n}
    assert re.match(r"\d+ more instances needed", a.detail)
    assert rents(app) == 0
    _drain(sim_server)
    assert run_tick(app).ok
    assert _unmet(app) == []


def rents(app: Any) -> int:
    return sum(1 for e in events_of(app, "tool.result") if e.payload["name"] == "rent_instance" and e.payload["ok"])


def test_a_model_that_does_not_rent_is_named_as_the_cause(sim, sim_clock, make_app, fake_model):
    """Nothing in code stops renting and the model answers with text only: the alert names the decider."""
    app = make_app()
    assert _ticks_until_alert(app, sim_clock, 3) == 3
    (a,) = _unmet(app)
    assert a.title.startswith("jobs waiting 3 ticks: nothing in policy or the market stops renting: the model "
                              "has not rented enough")


def test_unmet_after_zero_is_off(sim, sim_clock, make_app):
    app = make_app(provider="rules", policy={"max_instances": 1}, alerts={"unmet_after": 0})
    assert _ticks_until_alert(app, sim_clock, 4) is None


def test_a_queue_draining_on_course_is_not_unmet():
    """Jobs waiting while the queue shrinks fast enough is service, not unmet demand."""
    assert unmet_tick({"demand": {"pending": 40, "pending_delta": -10}}) is False
    assert unmet_tick({"demand": {"pending": 400, "pending_delta": -10}}) is True
    assert unmet_tick({"demand": {"pending": 5, "pending_delta": 0}}) is True
    assert unmet_tick({"demand": {"pending": 0, "pending_delta": -3}}) is False
    assert unmet_tick({"demand": None}) is None


def _situation(**kw: Any) -> Situation:
    from agent.config import PolicySettings

    base: dict[str, Any] = {"pending": 200, "rate_per_h": 30.0, "live": 2, "starting": 0, "fleet_dph": 0.8,
                            "policy": PolicySettings(), "offers": [MarketOffer("RTX 4090", 0.4, 1)]}
    return Situation(**{**base, **kw})


def test_causes_in_order_pause_credit_and_market():
    """A pause comes first; credit short of an hour of the cheapest offer; an empty market names the filters."""
    causes = find_cause(_situation(paused="paused by carol since 2026-01-01 10:00 UTC, until resumed: maint"))
    assert causes[0].kind == "pause" and "carol" in causes[0].text
    credit = find_cause(_situation(balance=0.1))[0]
    assert credit.text == "credit does not cover an hour of the cheapest fitting offer ($0.400/h); top up the account"
    assert credit.more == "credit $0.10"
    empty = find_cause(_situation(offers=[]))
    assert [c.kind for c in empty] == ["market"]
    assert "0 offers that fit the policy" in empty[0].text
    (unsearched,) = find_cause(_situation(offers=None, market_error="HTTP 503"))
    assert (unsearched.text, unsearched.more) == ("the market could not be searched", "HTTP 503")


def test_a_pause_is_named_before_anything_else(sim, sim_clock, make_app):
    """Paused by an operator with the rules provider deciding: nothing is rented, and the alert says who paused."""
    app = make_app(provider="rules")
    steering.pause(app.log, by="dave", reason="maintenance window", until=None)
    assert _ticks_until_alert(app, sim_clock, 3) == 3
    (a,) = _unmet(app)
    assert a.title.startswith("jobs waiting 3 ticks: the fleet is paused by dave since ")
    assert a.title.endswith("until resumed: maintenance window")
    assert rents(app) == 0


def test_a_cap_set_mid_run_is_named_within_three_ticks_of_it(sim, sim_server, sim_clock, make_app):
    """A served fleet (queue drained at every tick) then a burst of 500 jobs together with an operator's
    max_instances=1: the alert names the cap at the third tick after it, not before."""
    app = make_app(provider="rules")
    for _ in range(3):
        _drain(sim_server)
        assert run_tick(app).ok
        sim_clock.advance(TICK_S)
    assert _unmet(app) == []
    httpx.post(f"{sim_server.url}/_sim/demand", json={"pending": 500}, timeout=5.0).raise_for_status()
    steering.set_override(app.log, app.settings, "max_instances", "1", by="erin", reason="budget", until=None)
    assert _ticks_until_alert(app, sim_clock, 3) == 3
    (a,) = _unmet(app)
    assert a.title.startswith("jobs waiting 3 ticks: max_instances=1 (override #")


def test_every_cap_that_binds_is_listed_most_binding_first():
    """max_instances reached, max_total_dph with no room for the cheapest fitting offer, a spend budget and
    the hourly rent limit: all named, in that order, each with who set it; then the thin market."""
    from agent.config import PolicySettings

    p = PolicySettings(max_instances=2, max_total_dph=1.0, max_rents_per_hour=3)
    causes = find_cause(_situation(policy=p, fleet_dph=0.8, budget_block="$9.80 spent today + ... > budget $10.00",
                                   budget_rule="max_daily_spend", rents_last_hour=3,
                                   sources={"max_total_dph": "override #5 by frank: cost"}))
    assert [c.key for c in causes] == ["max_instances", "max_total_dph", "budget", "max_rents_per_hour", "market"]
    assert causes[0].text == "max_instances=2 (config) reached with 2 live"
    assert causes[0].more.startswith("the queue needs ~")
    assert causes[1].text == "max_total_dph=$1/h (override #5 by frank: cost) leaves no room for the cheapest " \
        "fitting offer ($0.400/h)"
    assert (causes[2].text, causes[2].more) == ("max_daily_spend (config) refuses the cheapest fitting offer",
                                                "$9.80 spent today + ... > budget $10.00")
    assert (causes[3].text, causes[3].more) == ("max_rents_per_hour=3 (config) used up", "3 rents in the last hour")


def test_a_negative_unmet_after_is_refused_naming_the_key():
    with pytest.raises(ConfigError) as exc:
        config.parse("agent_id: fleet-1\nalerts:\n  unmet_after: -2\n", "/etc/fa/config.yaml")
    assert "alerts.unmet_after" in str(exc.value) and "0 to turn the unmet-demand alert off" in str(exc.value)
    assert config.parse("agent_id: fleet-1\n", "/etc/fa/config.yaml").alerts.unmet_after == 3
