"""The client's calls for the market on running contracts, against the simulator over HTTP: pending price
increases read and answered (the body exactly the row's id, as the official CLI sends it), a stale row told
apart, bids changed, and the billed traffic read from the listing."""

from __future__ import annotations

from typing import Any

import pytest

from agent.clients.vast import VastClient, VastError
from agent.sim import Simulator


def test_pending_price_increases_read_and_answered(sim: Simulator, vast: VastClient) -> None:
    iid = sim.create_instance(sim.find_offer("RTX 4090")["id"])
    sim.advance(600)
    assert vast.pending_price_increases() == []
    row = sim.raise_price(iid, 1.25, in_s=7200)
    [pi] = vast.pending_price_increases()
    assert (pi.id, pi.instance_id) == (row["pending_price_increase_id"], iid)
    assert pi.share() == pytest.approx(0.25)
    assert pi.old_dph_gpu == pytest.approx(sim.instances[iid]["dph_base"])
    assert vast.answer_price_increase(pi.id, accept=False) is True
    assert vast.answer_price_increase(pi.id, accept=True) is False  # no longer pending: 404
    sent: list[Any] = [r["body"] for r in sim.requests if "price-increase" in r["path"] and r["method"] == "PUT"]
    assert sent == [{"pending_price_increase_id": pi.id}] * 2


def test_change_bid_and_traffic(sim: Simulator, vast: VastClient) -> None:
    offer = sim.find_offer("RTX 3090")
    iid = sim.create_instance(offer["id"], price=offer["dph_total"])
    on_demand = sim.create_instance(sim.find_offer("L40S")["id"])
    sim.advance(3600)
    vast.change_bid(iid, offer["dph_total"] + 0.01)
    assert sim.instances[iid]["dph_total"] == round(offer["dph_total"] + 0.01, 4)
    with pytest.raises(VastError):
        vast.change_bid(on_demand, 1.0)
    [req] = [r for r in sim.requests if r["path"] == f"/api/v0/instances/bid_price/{iid}/"]
    assert req["body"] == {"client_id": "me", "price": offer["dph_total"] + 0.01}
    listed = {i.id: i for i in vast.list_instances()}
    assert listed[iid].is_bid is True and listed[on_demand].is_bid is False
    up, down = listed[on_demand].traffic_gb()  # type: ignore[misc]
    assert up > 0 and down > 0 and listed[on_demand].inet_down_cost == sim.instances[on_demand]["inet_down_cost"]


def test_offer_duration_and_instance_end_date_are_read(sim: Simulator, vast: VastClient) -> None:
    offer = sim.find_offer("RTX 4090")
    sim.offers[offer["id"]]["duration"] = 30 * 3600.0
    [found] = [o for o in vast.search_offers({"gpu_name": {"eq": "RTX 4090"}}) if o.id == offer["id"]]
    assert found.duration == 30 * 3600.0
    iid = sim.create_instance(offer["id"])
    inst = vast.get_instance(iid)
    assert inst is not None and inst.end_date == pytest.approx(sim.instances[iid]["start_date"] + 30 * 3600.0)
