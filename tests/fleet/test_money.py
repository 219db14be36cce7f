"""Money, enforced in code: spend from the log's rental history agrees with the simulator's own
billing, spend budgets refuse rents with the figure the model sees, and an alert opens at 80 %."""

from __future__ import annotations

import json

import pytest

from agent import config
from agent.errors import ConfigError
from agent.fleet import spend
from agent.runtime.tick import run_tick
from tests.conftest import events_of, good_offer, priced, rent_puts, tool_messages
from tests.fakes.openai_server import reply
from tests.fleet.test_steering import _cli, _good_offers, _rent


def test_spend_agrees_with_the_simulators_billing_within_one_percent(sim, make_app, fake_model, capsys):
    """Three instances rented through ticks every 5 minutes, one destroyed after an hour, the others run
    4 h: the log's spend (each at its $/h while the ticks saw it running) is within 1 % of what the
    simulator billed in total (within 5 % per GPU model, where a boot weighs more), and `spend --json` prints the same figures."""
    app = make_app(policy={"max_rents_per_hour": 100})
    offers = _good_offers(sim, app.settings, 3)
    fake_model.enqueue(reply("rent", tool_calls=[_rent(o["id"]) for o in offers]), reply("done"))
    assert run_tick(app).ok
    ours = sorted(sim.instances)
    assert len(ours) == 3
    for n in range(1, 48):
        sim.advance(300)
        if n == 12:
            fake_model.enqueue(reply("one less", tool_calls=[("destroy_instance", {"instance_id": ours[0],
                                                                                   "reason": "scripted"})]))
        fake_model.enqueue(reply("ok"))
        assert run_tick(app).ok
    assert ours[0] not in sim.instances

    billed = sim.billing()
    rep = spend.report(app.log)
    sim_total = sum(billed[i] for i in ours)
    assert sim_total > 1.0
    assert abs(rep["total"] - sim_total) / sim_total < 0.01, (rep["total"], sim_total)
    by_gpu: dict[str, float] = {}
    for iid in ours:
        g = sim.destroyed.get(iid, sim.instances.get(iid))["gpu_name"]
        by_gpu[g] = by_gpu.get(g, 0.0) + billed[iid]
    for g, v in by_gpu.items():  # one model may hold only the instance that ran an hour: a boot's share is larger
        assert abs(rep["by_gpu"][g]["spent"] - v) / v < 0.05
    capsys.readouterr()
    assert _cli(app, "spend", "--json") == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["total"] == rep["total"]
    assert {i["instance_id"] for i in shown["instances"]} == set(ours)
    assert [i["live"] for i in shown["instances"]] == [False, True, True]
    # The simulator's clock started at 15:06 UTC: 4 h later it is still the same day, week and month.
    assert shown["periods"]["today"]["spent"] == shown["periods"]["month"]["spent"] == shown["total"]
    assert _cli(app, "spend") == 0
    text = capsys.readouterr().out
    assert "per GPU model:" in text and f"#{ours[0]}" in text


def test_each_instance_bills_from_when_vast_ai_says_it_started_not_half_a_tick_before(sim, make_app, fake_model):
    """Instances rented together wait in scheduling and load for minutes, each its own time, and are destroyed
    after half an hour: each one's spend is within 1 % of what the simulator billed it. The ticks see the boot
    end somewhere in a 5-minute interval; the instance's uptime at the first tick that saw it running says
    where (half the interval was off by up to 2.5 minutes of $/h: up to 8 % of half an hour)."""
    app = make_app(policy={"max_rents_per_hour": 100})
    offers = _good_offers(sim, app.settings, 5)
    fake_model.enqueue(reply("rent", tool_calls=[_rent(o["id"]) for o in offers]), reply("done"))
    assert run_tick(app).ok
    ours = sorted(sim.instances)
    assert len(ours) >= 3  # the simulator refuses or sticks a rent now and then
    for n in range(1, 7):
        sim.advance(300)
        if n == 6:
            fake_model.enqueue(reply("done with them", tool_calls=[
                ("destroy_instance", {"instance_id": iid, "reason": "scripted"}) for iid in ours]))
        fake_model.enqueue(reply("ok"))
        assert run_tick(app).ok
    assert not set(ours) & set(sim.instances)
    billed = sim.billing()
    rep = {i["instance_id"]: i["spent"] for i in spend.report(app.log)["instances"]}
    off = {iid: round((rep[iid] - billed[iid]) / billed[iid], 4) for iid in ours}
    assert all(abs(d) < 0.01 for d in off.values()), off


def test_daily_budget_refuses_the_rent_that_would_pass_it_with_the_figure(sim, make_app, fake_model):
    """With policy.max_daily_spend set so one instance fits until midnight but two do not, the first
    rent goes through and the second is refused by policy: the model sees the spend so far, what the
    live fleet and the new instance would cost by the day's end, and the budget; vast.ai gets one rent."""
    probe = make_app()
    offers = _good_offers(sim, probe.settings, 2)
    hours = spend.periods(probe.log.clock())["today"].end - probe.log.clock()
    h = hours.total_seconds() / 3600
    budget = round(offers[0]["dph_total"] * h + offers[1]["dph_total"] * h * 0.5, 2)
    app = make_app(policy={"max_daily_spend": budget, "max_rents_per_hour": 100})
    fake_model.enqueue(reply("two", tool_calls=[_rent(offers[0]["id"]), _rent(offers[1]["id"])]), reply("done"))
    assert run_tick(app).ok
    assert len(rent_puts(sim)) == 1
    blocked = events_of(app, "policy.blocked")
    assert [b.payload["rule"] for b in blocked] == ["max_daily_spend"]
    seen = tool_messages(fake_model.chat_requests[-1].json)[-1]["content"]
    assert "blocked by policy: max_daily_spend ($0.00 spent today + $" in seen
    assert f"> budget ${budget:.2f}" in seen


def test_monthly_budget_alert_opens_at_eighty_percent_and_resolves_when_the_month_turns(sim, make_app,
                                                                                        fake_model):
    """With a max_monthly_spend the rent fits (the offer's $/h to the month's end, and 10 %), an instance
    running until the month's spend reaches 80 % of it opens a 'spend:month' alert at the next tick (the
    model sees it); a new month starts from zero and the alert resolves."""
    probe = make_app()
    offer = good_offer(sim, probe.settings)
    dph = priced(probe.settings, offer)  # what the rent pays: the GPU and the fleet's disk
    now = probe.log.clock()
    left = (spend.periods(now)["month"].end - now).total_seconds() / 3600
    # The rent must fit the budget (it would run to the month's end), and 80 % of it comes before then.
    budget = round(dph * left * 1.1, 2)
    hours_to_80 = 0.8 * budget / dph
    app = make_app(policy={"max_monthly_spend": budget})
    fake_model.enqueue(reply("rent", tool_calls=[_rent(offer["id"])]), reply("done"))
    assert run_tick(app).ok
    sim.advance(600)  # the next tick sees it running
    fake_model.enqueue(reply("nothing"))
    assert run_tick(app).ok
    sim.advance(hours_to_80 * 0.9 * 3600)
    fake_model.enqueue(reply("nothing"))
    assert run_tick(app).ok
    assert not app.log.store.live_alerts(key="spend:month")
    sim.advance(hours_to_80 * 0.15 * 3600)
    fake_model.enqueue(reply("nothing"))
    assert run_tick(app).ok
    live = app.log.store.live_alerts(key="spend:month")
    assert len(live) == 1 and "of the max_monthly_spend budget" in live[0].title
    assert spend.periods(app.log.clock())["month"].start.month == 6  # still June
    sim.advance((spend.periods(app.log.clock())["month"].end - app.log.clock()).total_seconds() + 60)
    fake_model.enqueue(reply("nothing"))
    assert run_tick(app).ok
    assert not app.log.store.live_alerts(key="spend:month")


@pytest.mark.parametrize(("old", "new", "needle"), [
    ("max_daily_spend: null", "max_daily_spend: -5", "policy.max_daily_spend: must not be negative"),
    ("max_monthly_spend: null", "max_monthly_spend: lots", "policy.max_monthly_spend: expected a number or null"),
    ("excluded_hosts: []", "excluded_hosts: [12, x]", "policy.excluded_hosts: expected a list of host ids"),
])
def test_bad_budget_or_host_list_in_config_is_refused_with_file_and_line(old: str, new: str, needle: str):
    """A negative or non-numeric budget, or a host list with a non-number, is refused naming the key and
    its line."""
    assert old in config.example_text()
    text = config.example_text().replace(old, new)
    with pytest.raises(ConfigError) as e:
        config.parse(text, "/etc/fleet-agent/config.yaml")
    assert needle in str(e.value)
    line = text[:text.index(new)].count("\n") + 1
    assert str(e.value).startswith(f"/etc/fleet-agent/config.yaml:{line}: ")
