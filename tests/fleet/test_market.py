"""What the market does to instances already rented, end to end over HTTP against the simulator: hosts' price
increases accepted within policy or rejected and replaced, outbid interruptible instances handled (no host
blamed), and bandwidth billed per GB counted in spend."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from agent.clients.vast import Instance
from agent.fleet import spend
from agent.fleet.market import bid_rule, offer_traffic_dph, traffic_gbph
from agent.runtime.tick import run_tick
from agent.sim import Simulator
from agent.times import parse_ts
from tests.conftest import events_of, good_offer, plant_ours, within_policy


def _open(app: Any, prefix: str) -> list[Any]:
    return [a for a in app.log.store.open_alerts() if a.dedup_key.startswith(prefix)]


def _answers(sim: Simulator, what: str) -> list[dict[str, Any]]:
    return [r["body"] for r in sim.requests if r["method"] == "PUT" and r["path"] ==
            f"/api/v0/instances/{what}-price-increase/"]


def test_price_increases_within_the_cap_are_accepted_and_others_rejected_and_replaced(sim: Simulator, make_app):
    app = make_app(provider="rules", policy={"max_instances": 2, "max_price_increase": 0.15})
    small = plant_ours(app, sim, good_offer(sim, app.settings)["id"], key="feedc0ffee01")
    big = plant_ours(app, sim, good_offer(sim, app.settings)["id"], key="feedc0ffee02")
    sim.advance(600)
    ok_row = sim.raise_price(small, 1.1, in_s=86400)
    no_row = sim.raise_price(big, 1.4, in_s=86400)

    assert run_tick(app).ok
    assert _answers(sim, "accept") == [{"pending_price_increase_id": ok_row["pending_price_increase_id"]}]
    assert _answers(sim, "reject") == [{"pending_price_increase_id": no_row["pending_price_increase_id"]}]
    decided = {e.payload["instance_id"]: e.payload for e in events_of(app, "price.increase")}
    assert decided[small]["decision"] == "accepted" and decided[small]["share"] == 0.1
    assert decided[big]["decision"] == "rejected" and decided[big]["share"] == 0.4
    assert big in sim.destroyed and small in sim.instances  # rejected: replaced rather than kept
    [alert] = _open(app, "price:")
    assert str(big) in alert.title
    assert not events_of(app, "host.failed")

    sim.advance(300)
    assert run_tick(app).ok  # decided once: the accepted row is no longer pending; nothing answered again
    assert len(_answers(sim, "accept")) == 1 and len(events_of(app, "price.increase")) == 2
    assert not _open(app, "price:")  # told; resolved once the instance is replaced


def test_an_outbid_instance_is_destroyed_and_alerted_without_blaming_its_host(sim: Simulator, make_app):
    app = make_app(provider="rules", policy={"max_instances": 1})
    offer = good_offer(sim, app.settings)
    key = "feedc0ffee03"
    label = app.settings.fleet.label_prefix + app.settings.agent_id + "-" + key
    iid = sim.create_instance(offer["id"], label=label, price=offer["min_bid"], disk=app.settings.fleet.disk_gb)
    app.log.append("instance.adopted", {"instance_id": iid, "label": label, "idem_key": key}, "system")
    sim.advance(600)
    assert run_tick(app).ok
    sim.outbid(iid)

    assert run_tick(app).ok
    [ev] = events_of(app, "instance.outbid")
    assert ev.payload["instance_id"] == iid and ev.payload["action"] == "destroyed"
    assert iid in sim.destroyed
    assert not events_of(app, "host.failed")  # the market took the GPU, not the host
    assert not _open(app, "dead:")
    reasons = [e.payload["reason"] for e in events_of(app, "system.destroy")]
    assert reasons and all("outbid" in r for r in reasons)


def test_spend_counts_the_traffic_vast_ai_bills(sim: Simulator, make_app):
    app = make_app(provider="rules", policy={"max_instances": 1})
    offer = max((o for o in sim.offers.values() if o["inet_down_cost"] >= 0.01 and o["host_id"] not in sim.bad_hosts
                 and o["disk_space"] >= app.settings.fleet.disk_gb and o["num_gpus"] == 1),
                key=lambda o: -o["dph_total"])
    key = "feedc0ffee04"
    label = app.settings.fleet.label_prefix + app.settings.agent_id + "-" + key
    iid = sim.create_instance(offer["id"], label=label, disk=app.settings.fleet.disk_gb)
    app.log.append("instance.adopted", {"instance_id": iid, "label": label, "idem_key": key,
                                        "dph": sim.instances[iid]["dph_total"]}, "system")
    for _ in range(36):
        assert run_tick(app).ok
        sim.advance(300)
    assert run_tick(app).ok
    notes = events_of(app, "instance.traffic")
    assert notes and {e.payload["instance_id"] for e in notes} == {iid}
    rep = {i["instance_id"]: i for i in spend.report(app.log)["instances"]}
    inst = sim.instances[iid]
    billed = sim.billing()[iid]
    assert inst["_traffic_cost"] > 0.01 * billed  # traffic matters on this host
    assert abs(rep[iid]["spent"] - billed) / billed < 0.01, (rep[iid]["spent"], billed)
    # what the rules provider counts it at an hour: its notes' rate, the simulator's own within 5 %
    rate = inst["_up_gbph"] * inst["inet_up_cost"] + inst["_down_gbph"] * inst["inet_down_cost"]
    assert app.traffic_dph([iid])[iid] == pytest.approx(rate, rel=0.05)


def test_an_outbid_instance_is_rebid_when_the_market_fits_the_policy_and_spend_follows_the_new_bid(
        sim: Simulator, make_app):
    app = make_app(provider="rules", policy={"max_instances": 1, "interruptible": True, "max_bid_share": 0.95})
    sim.market.bid_market = False
    offer = good_offer(sim, app.settings)
    key = "feedc0ffee05"
    label = app.settings.fleet.label_prefix + app.settings.agent_id + "-" + key
    iid = sim.create_instance(offer["id"], label=label, price=offer["min_bid"], disk=app.settings.fleet.disk_gb)
    app.log.append("instance.adopted", {"instance_id": iid, "label": label, "idem_key": key,
                                        "dph": offer["min_bid"]}, "system")
    for _ in range(3):
        sim.advance(300)
        assert run_tick(app).ok
    sim.outbid(iid)
    assert run_tick(app).ok
    [ev] = events_of(app, "instance.outbid")
    assert ev.payload["action"] == "rebid" and ev.payload["new_bid"] == round(offer["min_bid"] * 1.05, 4)
    [bid] = events_of(app, "instance.bid")
    assert bid.payload["bid"] == ev.payload["new_bid"] and bid.payload["why"] == "outbid"
    assert iid in sim.instances and iid not in sim.destroyed  # kept, with its disk
    [req] = [r for r in sim.requests if r["path"] == f"/api/v0/instances/bid_price/{iid}/"]
    assert req["body"]["price"] == ev.payload["new_bid"]
    assert _running_after(app, sim, iid, 12) < 0.05  # spend vs billing; the rest: observation gaps
    led = spend.Ledger.of(app.log)
    [rental] = [r for r in led.rentals if r.instance_id == iid]
    assert led.dph_at(rental, led.now) == ev.payload["new_bid"]  # spend follows the new bid (instance.bid)


def _running_after(app: Any, sim: Simulator, iid: int, ticks: int) -> float:
    """Run ``ticks`` ticks; ``iid`` is running then; spend's figure for it off the simulator's billing, relative."""
    for _ in range(ticks):
        sim.advance(300)
        assert run_tick(app).ok
    assert sim.instances[iid]["actual_status"] == "running"
    rep = {i["instance_id"]: i for i in spend.report(app.log)["instances"]}
    billed = sim.billing()[iid]
    return abs(rep[iid]["spent"] - billed) / billed


def _bid_instance(sim: Simulator, app: Any, key: str, price: float, offer: dict[str, Any]) -> int:
    label = app.settings.fleet.label_prefix + app.settings.agent_id + "-" + key
    iid = sim.create_instance(offer["id"], label=label, price=price, disk=app.settings.fleet.disk_gb)
    app.log.append("instance.adopted", {"instance_id": iid, "label": label, "idem_key": key, "dph": price}, "system")
    return iid


def test_the_bid_rule_is_min_bid_plus_five_percent_capped_at_the_policy_share():
    assert bid_rule(0.40, 1.00, 0.7) == 0.42
    assert bid_rule(0.68, 1.00, 0.7) == 0.70  # capped: min_bid + 5 % would pass 0.7 x on-demand
    assert bid_rule(0.71, 1.00, 0.7) is None  # the min_bid itself is above the cap: no bid
    assert bid_rule(None, 1.00, 0.7) is None and bid_rule(0.4, None, 0.7) is None


def _running_bid_at_the_rule(sim: Simulator, make_app: Any, key: str) -> tuple[Any, int]:
    """The rules provider's app (2 instances at most, bids up to 0.95 of on-demand) and a bid instance of ours at the
    rule's bid, running after three ticks; no scheduling failures, a still bid market."""
    app = make_app(provider="rules", policy={"max_instances": 2, "interruptible": True, "max_bid_share": 0.95})
    sim.realism.update({"unschedulable": 0, "stuck_scheduling": 0})
    sim.market.bid_market = False
    offer = good_offer(sim, app.settings)
    iid = _bid_instance(sim, app, key, bid_rule(offer["min_bid"], offer["dph_total"], 0.95) or 0, offer)
    for _ in range(3):
        sim.advance(300)
        assert run_tick(app).ok
    return app, iid


def test_an_outbid_instance_the_rule_cannot_rebid_is_kept_and_runs_again_when_the_market_falls_back(
        sim: Simulator, make_app):
    """Its bid already at the rule's, an outbid instance is kept stopped (storage only), not destroyed and not
    blamed on its host; vast.ai starts it again once the rival bid's hour ends; the alert then resolves."""
    app, iid = _running_bid_at_the_rule(sim, make_app, "feedc0ffee06")
    sim.outbid(iid)
    hour_ends = (int(sim.now() // 3600) + 1) * 3600.0
    assert run_tick(app).ok
    [ev] = events_of(app, "instance.outbid")
    assert ev.payload["action"] == "kept" and not events_of(app, "instance.bid")
    assert _open(app, "outbid:")
    while sim.now() < hour_ends + 600:
        sim.advance(300)
        assert run_tick(app).ok
        assert iid in sim.instances  # kept: neither the tick nor the rules provider destroys it
    assert sim.instances[iid]["actual_status"] == "running"
    assert not _open(app, "outbid:")
    assert iid not in {e.payload["instance_id"] for e in events_of(app, "host.failed")}  # the market, not the host
    sim.outbid(iid)  # outbid again at the same bid: a new outbid, handled again
    assert run_tick(app).ok
    assert [e.payload["action"] for e in events_of(app, "instance.outbid")] == ["kept", "kept"]
    assert _open(app, "outbid:")


def test_bids_are_lowered_to_the_rule_when_the_market_falls_but_not_within_an_hour_of_an_outbid(
        sim: Simulator, make_app):
    app = make_app(provider="rules", policy={"max_instances": 2, "interruptible": True, "max_bid_share": 0.95})
    sim.realism.update({"unschedulable": 0, "stuck_scheduling": 0})
    sim.market.bid_market = False
    offer = good_offer(sim, app.settings)
    rule = bid_rule(offer["min_bid"], offer["dph_total"], 0.95)
    assert rule is not None
    high = round(min(0.95 * offer["dph_total"], offer["min_bid"] * 1.5), 4)
    iid = _bid_instance(sim, app, "feedc0ffee07", high, offer)
    sim.advance(300)
    sim.outbid(iid)  # outbid at once: the rule's bid is lower than its own, so it waits for the hour's end
    outbid_at = sim.now()
    while sim.now() < outbid_at + 3600 - 300:
        sim.advance(300)
        assert run_tick(app).ok
    assert not events_of(app, "instance.bid")  # within the hour after the outbid: its bid stays
    for _ in range(4):
        sim.advance(300)
        assert run_tick(app).ok
    [ev] = events_of(app, "instance.bid")
    assert ev.payload["why"] == "market_fell" and ev.payload["old_bid"] == high and ev.payload["bid"] == rule
    assert sim.instances[iid]["dph_total"] == rule
    assert _running_after(app, sim, iid, 24) < 0.01  # spend counts the lowered bid


def test_an_outbid_instance_the_market_never_lets_back_is_destroyed_after_two_hours(sim: Simulator, make_app):
    app = make_app(provider="rules", policy={"max_instances": 2, "interruptible": True, "max_bid_share": 0.7})
    sim.realism.update({"unschedulable": 0, "stuck_scheduling": 0})
    sim.market.bid_market = False
    offer = good_offer(sim, app.settings)
    iid = _bid_instance(sim, app, "feedc0ffee08", bid_rule(offer["min_bid"], offer["dph_total"], 0.7) or 0, offer)
    sim.advance(300)
    assert run_tick(app).ok
    sim.market.set_price(multiplier=3.0, offer_id=offer["id"])  # its min_bid now far above any bid the policy allows
    for _ in range(3):
        sim.advance(300)
        assert run_tick(app).ok
    [ev] = events_of(app, "instance.outbid")
    assert ev.payload["action"] == "kept" and iid in sim.instances
    while len(events_of(app, "tick.started")) < ev.tick + 22:  # 22 ticks of 5 min after the outbid
        sim.advance(300)
        assert run_tick(app).ok
    assert iid in sim.instances  # within the two hours: kept
    for _ in range(4):
        sim.advance(300)
        assert run_tick(app).ok
    assert iid in sim.destroyed
    assert [e.payload["reason"] for e in events_of(app, "system.destroy") if e.payload["instance_id"] == iid]


def _one_bid(sim: Simulator, make_app: Any, fake_model: Any, fits: Any) -> tuple[Any, dict[str, Any], int]:
    """An app whose policy bids, and the one instance it rented through the tools at the cheapest good offer that
    ``fits``, with no bid market (the test outbids it) and no scheduling failure."""
    from tests.fakes.openai_server import reply

    app = make_app(policy={"interruptible": True, "max_bid_share": 0.7})
    sim.realism.update({"unschedulable": 0, "stuck_scheduling": 0})
    sim.market.bid_market = False
    offer = min((o for o in sim.offers.values() if within_policy(app.settings, o) and not o["rented"]
                 and o["host_id"] not in sim.bad_hosts and o["disk_space"] >= app.settings.fleet.disk_gb
                 and fits(o)), key=lambda o: (o["dph_total"], o["id"]))
    fake_model.enqueue(reply("rent", tool_calls=[("rent_instance", {"offer_id": offer["id"], "reason": "scripted"})]),
                       reply("done"))
    assert run_tick(app).ok
    [iid] = sim.instances
    assert sim.instances[iid]["is_bid"] is True
    return app, offer, iid


def test_spend_counts_the_storage_an_outbid_instance_bills_while_kept_stopped(sim: Simulator, make_app, fake_model):
    """vast.ai bills an instance's storage while it is stopped: a bid instance rented through the tools, outbid and
    kept stopped for over an hour, costs in spend what the simulator billed for it while stopped (its disk's
    storage), within 1 %; `spend` reports it so."""
    from tests.fakes.openai_server import reply

    app, offer, iid = _one_bid(sim, make_app, fake_model, lambda o: True)
    for _ in range(3):
        sim.advance(300)
        fake_model.enqueue(reply("ok"))
        assert run_tick(app).ok
    sim.advance(150)  # between two observations, as spend counts a change
    sim.market.set_price(multiplier=3.0, offer_id=offer["id"])  # outbid, and no bid the policy allows wins it back
    sim.advance(150)
    fake_model.enqueue(reply("ok"))
    assert run_tick(app).ok
    assert [e.payload["action"] for e in events_of(app, "instance.outbid")] == ["kept"]
    stopped_at, billed_then = app.log.clock(), sim.billing()[iid]
    for _ in range(18):
        sim.advance(300)
        fake_model.enqueue(reply("ok"))
        assert run_tick(app).ok
    inst = sim.instances[iid]
    assert inst["actual_status"] == "stopped" and inst["storage_cost"] > 0
    billed = sim.billing()[iid]
    led = spend.Ledger.of(app.log)
    [rental] = [r for r in led.rentals if r.instance_id == iid]
    while_stopped = led.cost(rental, stopped_at, led.now)
    assert abs(while_stopped - (billed - billed_then)) / (billed - billed_then) < 0.01, (while_stopped, billed)
    assert (billed - billed_then) > 0.05 * billed  # the storage of its stopped hours is a share that matters
    rep = {i["instance_id"]: i for i in spend.report(app.log)["instances"]}
    assert rep[iid]["spent"] == round(led.cost(rental, stopped_at - timedelta(days=1), led.now), 4)


def test_spend_counts_no_traffic_for_the_hours_an_outbid_instance_is_kept_stopped(sim: Simulator, make_app,
                                                                                   fake_model):
    """vast.ai bills traffic only for the data an instance moves, and a stopped one moves none. A bid instance
    on a host that charges for bandwidth runs for an hour (its traffic noted every $0.01), is outbid and kept
    stopped for two: spend's traffic for it is what the simulator billed, within 1 % (the rate its notes measured
    went on over the stopped hours: three times the bill), and so is its spend."""
    from tests.fakes.openai_server import reply

    app, offer, iid = _one_bid(sim, make_app, fake_model, lambda o: o["inet_down_cost"] >= 0.01)
    for _ in range(12):
        sim.advance(300)
        fake_model.enqueue(reply("ok"))
        assert run_tick(app).ok
    sim.advance(90)  # outbid between two observations (the simulator stops it at its next minute's end), as spend
    sim.market.set_price(multiplier=3.0, offer_id=offer["id"])  # counts a stop: no bid the policy allows wins it back
    for n in range(24):
        sim.advance(210 if n == 0 else 300)
        fake_model.enqueue(reply("ok"))
        assert run_tick(app).ok
    assert [e.payload["action"] for e in events_of(app, "instance.outbid")] == ["kept"]
    inst = sim.instances[iid]
    assert inst["actual_status"] == "stopped"
    assert len(events_of(app, "instance.traffic")) >= 3
    led = spend.Ledger.of(app.log)
    [rental] = [r for r in led.rentals if r.instance_id == iid]
    traffic = led.traffic_cost(rental, parse_ts(rental.start_ts), led.now)
    assert abs(traffic - inst["_traffic_cost"]) / inst["_traffic_cost"] < 0.01, (traffic, inst["_traffic_cost"])
    billed = sim.billing()[iid]
    assert inst["_traffic_cost"] > 0.02 * billed  # traffic is a share of this bill that matters
    rep = {i["instance_id"]: i for i in spend.report(app.log)["instances"]}
    assert abs(rep[iid]["spent"] - billed) / billed < 0.01, (rep[iid]["spent"], billed)


def test_outbids_are_not_restarts_an_outbid_instance_is_not_replaced_as_flapping(sim: Simulator, make_app):
    """An interruptible instance outbid three times (kept, started again by vast.ai each time the rival's hour
    ends) stopped because of the market, not its host: no restart is counted, it is not replaced as flapping and
    its host is not avoided."""
    app, iid = _running_bid_at_the_rule(sim, make_app, "feedc0ffee09")
    for _ in range(3):
        assert sim.instances[iid]["actual_status"] == "running"
        sim.outbid(iid)
        hour_ends = (int(sim.now() // 3600) + 1) * 3600.0
        while sim.now() < hour_ends + 600:
            sim.advance(300)
            assert run_tick(app).ok
    assert [e.payload["action"] for e in events_of(app, "instance.outbid")] == ["kept"] * 3
    assert iid in sim.instances and sim.instances[iid]["actual_status"] == "running"
    [rec] = [i for i in events_of(app, "tick.started")[-1].payload["observation"]["instances"] if i["id"] == iid]
    assert rec["restarts"] == 0
    assert not [e for e in events_of(app, "tool.called") if e.payload["name"] == "destroy_instance"
                and f'"instance_id": {iid}' in e.payload["arguments"]]


def test_replacing_an_outbid_instance_does_not_count_against_max_rents_per_hour(sim: Simulator, make_app, fake_model):
    """policy.max_rents_per_hour bounds runaway rents, not the replacement of what the market took: after an outbid
    (kept stopped) one more rent is allowed within the hour; without one the cap refuses it."""
    from tests.fakes.openai_server import reply
    from tests.fleet.test_steering import _good_offers, renter

    app = make_app(policy={"interruptible": True, "max_bid_share": 0.95, "max_rents_per_hour": 1})
    sim.realism.update({"unschedulable": 0, "stuck_scheduling": 0})
    sim.market.bid_market = False
    first, second, third = _good_offers(sim, app.settings, 3)
    _ctx, rent = renter(app)
    out, blocked = rent(1, first)
    assert out.ok and not blocked
    iid = out.effect["instance_id"]
    out, blocked = rent(2, second)
    assert blocked and "max_rents_per_hour" in str(out.error)
    for _ in range(3):
        sim.advance(300)
        fake_model.enqueue(reply("ok"))
        assert run_tick(app).ok
    sim.market.set_price(multiplier=3.0, offer_id=first["id"])  # outbid; no bid the policy allows wins it back
    sim.advance(300)
    fake_model.enqueue(reply("ok"))
    assert run_tick(app).ok
    assert [e.payload["action"] for e in events_of(app, "instance.outbid")] == ["kept"]
    _ctx, rent = renter(app)
    out, blocked = rent(3, second)
    assert out.ok and not blocked, out.error  # the replacement
    out, blocked = rent(4, third)
    assert blocked and "max_rents_per_hour" in str(out.error)  # and no more
    assert iid in sim.instances


def test_the_fleets_traffic_rate_counts_its_own_running_instances_half_an_hour_old_or_more() -> None:
    """GB up and down per hour since the rent, over the owned running instances rented 30 minutes ago or
    more; none measured (None) until one is, and an offer's traffic $/h is 0 until then."""
    now = 10_000.0

    def inst(iid: int, age_h: float, up_mb: float, down_mb: float, status: str = "running") -> Instance:
        return Instance(id=iid, actual_status=status, start_date=now - age_h * 3600, inet_up_billed=up_mb,
                        inet_down_billed=down_mb)

    old = inst(1, 2.0, 2 * 1024, 8 * 1024)  # 1 GB/h up, 4 down
    older = inst(2, 1.0, 3 * 1024, 2 * 1024)  # 3 up, 2 down
    young = inst(3, 0.25, 10 * 1024, 10 * 1024)
    stopped = inst(4, 3.0, 1024, 1024, "stopped")
    theirs = inst(5, 3.0, 90 * 1024, 90 * 1024)
    owned = {1, 2, 3, 4}
    assert traffic_gbph([young, stopped, theirs], owned, now) is None
    assert offer_traffic_dph(0.02, 0.02, None) == 0.0
    up, down = traffic_gbph([old, older, young, stopped, theirs], owned, now) or (0.0, 0.0)
    assert (round(up, 6), round(down, 6)) == (round(5 / 3, 6), round(10 / 3, 6))  # (2 + 3) GB / 3 h, (8 + 2) / 3
    assert offer_traffic_dph(0.01, 0.005, (up, down)) == pytest.approx(5 / 3 * 0.01 + 10 / 3 * 0.005)
