"""The simulated market as vast.ai runs it by default: bids that move and outbid, price increases on running
contracts, contracts that end, and bandwidth billed per GB. Real HTTP on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from agent.sim import SimServer, Simulator


@pytest.fixture(autouse=True)
def _no_rate_limit(sim: Simulator) -> None:
    sim.realism.update({"rate_interval": 0, "logs_delay": 0, "price_increases": 0})


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10) as client:
        yield client


def _auth(sim: Simulator) -> dict[str, str]:
    return {"Authorization": f"Bearer {sim.api_key}"}


def _hour_with_level(sim: Simulator, gpu: str, above: bool) -> float:
    """The start of the first simulated hour from now where the bid market for ``gpu`` is (not) bid up."""
    t = sim.now()
    for h in range(1, 500):
        at = (int(t // 3600) + h) * 3600.0
        if (sim.market.bid_level(gpu, at) > 1.0) == above:
            return at
    raise AssertionError("no such hour in 500")


def test_a_bid_below_the_market_min_bid_is_outbid_by_default(sim: Simulator) -> None:
    """min_bid follows the bid market; a running bid under it is stopped (not destroyed), storage still billed."""
    sim.realism.update({"quick": 1})  # running within the quiet hour the test picked
    offer = sim.find_offer("RTX 4090")
    quiet = _hour_with_level(sim, "RTX 4090", above=False)
    sim.advance(quiet - sim.now() + 1)
    iid = sim.create_instance(offer["id"], price=offer["min_bid"])
    sim.advance(300)
    assert sim.instances[iid]["actual_status"] == "running"
    busy = _hour_with_level(sim, "RTX 4090", above=True)
    sim.advance(busy - sim.now() + 120)
    inst = sim.instances[iid]
    assert inst["actual_status"] == "stopped" and inst["intended_status"] == "running"
    assert "outbid" in inst["status_msg"] and inst["min_bid"] > inst["dph_total"]
    before = sim.balance
    sim.advance(3600)
    assert 0 < before - sim.balance < 0.01  # storage only


def test_change_bid_restarts_an_outbid_instance(http: httpx.Client, sim_server: SimServer, sim: Simulator) -> None:
    offer = sim.find_offer("RTX 3090")
    sim.advance(_hour_with_level(sim, "RTX 3090", above=False) - sim.now() + 1)
    iid = sim.create_instance(offer["id"], price=offer["min_bid"])
    sim.advance(_hour_with_level(sim, "RTX 3090", above=True) - sim.now() + 60)
    assert sim.instances[iid]["actual_status"] == "stopped"
    url = f"{sim_server.url}/api/v0/instances/bid_price/{iid}/"
    low = http.put(url, headers=_auth(sim), json={"client_id": "me", "price": offer["min_bid"]})
    assert low.status_code == 400 and "min_bid" in low.json()["msg"]
    ok = http.put(url, headers=_auth(sim), json={"client_id": "me", "price": sim.instances[iid]["min_bid"] + 0.01})
    assert ok.status_code == 200 and ok.json()["success"] is True
    assert sim.instances[iid]["actual_status"] == "loading"


def _status(http: httpx.Client, sim_server: SimServer, sim: Simulator, iid: int) -> str | None:
    """What GET /instances/ shows for ``iid`` (actual_status)."""
    rows = http.get(f"{sim_server.url}/api/v0/instances/", headers=_auth(sim)).json()["instances"]
    return next(r["actual_status"] for r in rows if r["id"] == iid)


def test_an_outbid_instance_starts_again_by_itself_when_the_market_falls_back(
        http: httpx.Client, sim_server: SimServer, sim: Simulator) -> None:
    """vast.ai stops an outbid interruptible instance and starts it again, with its disk, once its bid holds the
    GPU again: here the bid market falls back at the end of a bid-up hour."""
    sim.realism.update({"quick": 1})
    offer = sim.find_offer("RTX 4090")
    sim.advance(_hour_with_level(sim, "RTX 4090", above=False) - sim.now() + 1)
    iid = sim.create_instance(offer["id"], price=offer["min_bid"])
    busy = _hour_with_level(sim, "RTX 4090", above=True)
    sim.advance(busy - sim.now() + 60)
    assert _status(http, sim_server, sim, iid) == "stopped"
    t = busy + 3600.0
    while sim.market.bid_level("RTX 4090", t) > 1.0:  # the first quiet hour after it
        t += 3600.0
    sim.advance(t - 120 - sim.now())
    assert _status(http, sim_server, sim, iid) == "stopped"  # not while the market stays above the bid
    sim.advance(600)
    assert _status(http, sim_server, sim, iid) in ("loading", "running")
    sim.advance(600)
    assert _status(http, sim_server, sim, iid) == "running"
    assert "outbid" not in sim.instances[iid]["status_msg"]


def test_an_admin_outbid_holds_until_the_market_hour_ends(http: httpx.Client, sim_server: SimServer,
                                                          sim: Simulator) -> None:
    """POST /_sim/outbid: a rival bid holds the GPU until the market hour ends, then the instance starts again by
    itself (its bid still holds at the market's min_bid); not at once."""
    sim.realism.update({"quick": 1})
    sim.market.bid_market = False
    offer = sim.find_offer("RTX 3090")
    iid = sim.create_instance(offer["id"], price=offer["min_bid"])
    sim.advance(300)
    if 3600 - sim.now() % 3600 < 900:  # room in this hour to look twice
        sim.advance(3600 - sim.now() % 3600 + 60)
    assert http.post(f"{sim_server.url}/_sim/outbid", json={"instance_id": iid}).status_code == 200
    hour_ends = (int(sim.now() // 3600) + 1) * 3600.0
    sim.advance(300)
    assert _status(http, sim_server, sim, iid) == "stopped"
    sim.advance(hour_ends - sim.now() - 30)
    assert _status(http, sim_server, sim, iid) == "stopped"
    sim.advance(300)
    assert _status(http, sim_server, sim, iid) in ("loading", "running")


def test_a_higher_bid_ends_an_admin_outbid_at_once(http: httpx.Client, sim_server: SimServer,
                                                   sim: Simulator) -> None:
    sim.market.bid_market = False
    offer = sim.find_offer("RTX 3090")
    iid = sim.create_instance(offer["id"], price=offer["min_bid"])
    sim.advance(300)
    assert http.post(f"{sim_server.url}/_sim/outbid", json={"instance_id": iid}).status_code == 200
    url = f"{sim_server.url}/api/v0/instances/bid_price/{iid}/"
    same = http.put(url, headers=_auth(sim), json={"client_id": "me", "price": offer["min_bid"]})
    assert same.status_code == 200 and _status(http, sim_server, sim, iid) == "stopped"  # the rival still holds it
    up = http.put(url, headers=_auth(sim), json={"client_id": "me", "price": round(offer["min_bid"] * 1.1, 4)})
    assert up.status_code == 200 and _status(http, sim_server, sim, iid) == "loading"


def test_bid_searches_show_the_min_bid_now(http: httpx.Client, sim_server: SimServer, sim: Simulator) -> None:
    busy = _hour_with_level(sim, "A100 SXM4", above=True)
    sim.advance(busy - sim.now() + 1)
    q = {"gpu_name": {"eq": "A100 SXM4"}, "type": "bid"}
    rows = http.post(f"{sim_server.url}/api/v0/bundles/", headers=_auth(sim), json=q).json()["offers"]
    assert rows and all(r["is_bid"] for r in rows)
    for r in rows:
        assert r["min_bid"] == sim.market.min_bid(sim.offers[r["id"]], sim.now())
        assert r["min_bid"] > sim.offers[r["id"]]["min_bid"] or r["min_bid"] == sim.offers[r["id"]]["dph_total"]


def test_pending_price_increase_accept_and_reject(http: httpx.Client, sim_server: SimServer, sim: Simulator) -> None:
    """The endpoints the official CLI uses; body exactly {"pending_price_increase_id": n}; accepted, the new price
    applies at the contract's end date; rejected, the contract ends then (the instance stops)."""
    a = sim.create_instance(sim.find_offer("L40S")["id"])
    b = sim.create_instance(sim.find_offer("RTX A6000")["id"])
    sim.advance(600)
    base = f"{sim_server.url}/api/v0/instances"
    assert http.get(f"{base}/pending-price-increases/", headers=_auth(sim)).json()["pending_price_increases"] == []
    ra = sim.raise_price(a, 1.2, in_s=1800)
    rb = sim.raise_price(b, 1.5, in_s=1800)
    listed = http.get(f"{base}/pending-price-increases/", headers=_auth(sim)).json()
    assert listed["count"] == 2 and {r["contract_id"] for r in listed["pending_price_increases"]} == {a, b}
    row = next(r for r in listed["pending_price_increases"] if r["contract_id"] == a)
    assert row["new_gpu_costpersec"] == pytest.approx(row["old_gpu_costpersec"] * 1.2)
    extra = http.put(f"{base}/accept-price-increase/", headers=_auth(sim),
                     json={"pending_price_increase_id": ra["pending_price_increase_id"], "instance_id": a})
    assert extra.status_code == 400
    old_dph = sim.instances[a]["dph_total"]
    ok = http.put(f"{base}/accept-price-increase/", headers=_auth(sim),
                  json={"pending_price_increase_id": ra["pending_price_increase_id"]}).json()
    assert ok == {"success": True, "pending_price_increase_id": ra["pending_price_increase_id"], "contract_id": a}
    stale = http.put(f"{base}/accept-price-increase/", headers=_auth(sim),
                     json={"pending_price_increase_id": ra["pending_price_increase_id"]})
    assert stale.status_code == 404 and stale.json()["error"] == "no_pending_price_increase"
    assert http.put(f"{base}/reject-price-increase/", headers=_auth(sim),
                    json={"pending_price_increase_id": rb["pending_price_increase_id"]}).status_code == 200
    assert sim.instances[a]["dph_total"] == old_dph  # not before the end date
    sim.advance(1900)
    assert sim.instances[a]["dph_total"] > old_dph and sim.instances[a]["actual_status"] == "running"
    assert sim.instances[b]["actual_status"] == "stopped" and "contract ended" in sim.instances[b]["status_msg"]


def test_hosts_ask_price_increases_by_default(sim: Simulator) -> None:
    """On by default, as vast.ai hosts raise prices: over simulated days some running contracts get one."""
    sim.realism.update({"price_increases": Simulator(seed=1).realism.price_increases})
    assert sim.realism.price_increases > 0
    ids = [sim.create_instance(sim.find_offer(g)["id"]) for g in ("RTX 3090", "RTX 4090", "L40S", "H100 SXM")]
    for _ in range(240):  # ten simulated days
        sim.advance(3600)
    assert any(r["contract_id"] in ids for r in sim.price_increases.values())


def test_instances_show_billed_traffic(sim: Simulator) -> None:
    iid = sim.create_instance(sim.find_offer("RTX 4090")["id"])
    sim.advance(7200)
    shown = sim._public(sim.instances[iid])
    assert shown["inet_up_billed"] > 0 and shown["inet_down_billed"] > 0
    assert "inet_up_cost" in shown and "inet_down_cost" in shown and "_traffic_cost" not in shown


def test_a_contract_ends_at_its_end_date_and_cannot_start_again(http: httpx.Client, sim_server: SimServer,
                                                                  sim: Simulator) -> None:
    """On by default: an instance's end_date is the rent time plus its offer's duration; at that date vast.ai
    stops it ("expired"), its storage still billed, and it cannot be started again."""
    offer = sim.find_offer("RTX 4090")
    sim.offers[offer["id"]]["duration"] = 6 * 3600.0
    t0 = sim.now()
    iid = sim.create_instance(offer["id"])
    shown = http.get(f"{sim_server.url}/api/v0/instances/{iid}/?owner=me", headers=_auth(sim)).json()["instances"]
    assert shown["end_date"] == pytest.approx(t0 + 6 * 3600.0, abs=2)
    sim.advance(5 * 3600)
    assert sim.instances[iid]["actual_status"] == "running"
    sim.advance(3600 + 60)
    inst = sim.instances[iid]
    assert inst["actual_status"] == "stopped" and "contract ended" in inst["status_msg"]
    before = sim.balance
    sim.advance(3600)
    assert 0 < before - sim.balance < 0.01  # storage only
    r = http.put(f"{sim_server.url}/api/v0/instances/{iid}/", headers=_auth(sim), json={"state": "running"})
    assert r.status_code == 400 and "expired" in r.json()["msg"]


def test_offers_carry_their_duration_and_end_date(http: httpx.Client, sim_server: SimServer,
                                                  sim: Simulator) -> None:
    offers = http.post(f"{sim_server.url}/api/v0/bundles/", headers=_auth(sim),
                       json={"gpu_name": {"eq": "RTX 4090"}, "limit": 50}).json()["offers"]
    assert offers and all(7 * 86400 <= o["duration"] <= 90 * 86400 for o in offers)
    assert all(o["end_date"] == pytest.approx(sim.now() + o["duration"], abs=5) for o in offers)
