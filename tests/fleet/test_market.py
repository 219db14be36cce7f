"""What the market does to instances already rented, end to end over HTTP against the simulator: hosts' price
increases accepted within policy or rejected and replaced, outbid interruptible instances handled (no host
blamed), and bandwidth billed per GB counted in spend."""

from __future__ import annotations

from typing import Any

from agent.fleet import spend
from agent.runtime.tick import run_tick
from agent.sim import Simulator
from tests.conftest import events_of, good_offer, plant_ours


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
    assert ev.payload["action"] == "rebid" and ev.payload["new_bid"] == round(offer["min_bid"] * 1.2, 4)
    assert iid in sim.instances and iid not in sim.destroyed  # kept, with its disk
    [req] = [r for r in sim.requests if r["path"] == f"/api/v0/instances/bid_price/{iid}/"]
    assert req["body"]["price"] == ev.payload["new_bid"]
    for _ in range(12):
        sim.advance(300)
        assert run_tick(app).ok
    assert sim.instances[iid]["actual_status"] == "running"
    rep = {i["instance_id"]: i for i in spend.report(app.log)["instances"]}
    billed = sim.billing()[iid]
    # at the old bid it would be 1/1.2 of this: the spend follows the new bid (the rest: observation gaps)
    assert abs(rep[iid]["spent"] - billed) / billed < 0.05, (rep[iid]["spent"], billed)
