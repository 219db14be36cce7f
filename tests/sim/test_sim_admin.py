"""The simulator's scripting endpoints over real HTTP: arrivals, prices, credit, host outages, offers,
flaps, accounting, and `fleet-agent sim --manual-clock` moved only by /_sim/advance."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from agent.sim import GPU_MODELS, SimServer, Simulator


@pytest.fixture(autouse=True)
def _no_rate_limit(sim: Simulator) -> None:
    sim.realism.update({"rate_interval": 0, "logs_delay": 0, "listing_lag": 0})


@pytest.fixture
def http(sim_server: SimServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=sim_server.url, timeout=10,
                      headers={"Authorization": "Bearer sim-key"}) as client:
        yield client


def post(http: httpx.Client, path: str, body: dict[str, Any], status: int = 200) -> Any:
    r = http.post(path, json=body)
    assert r.status_code == status, r.text
    return r.json()


def advance(http: httpx.Client, seconds: float) -> float:
    return float(post(http, "/_sim/advance", {"seconds": seconds})["now"])


def search(http: httpx.Client, **q: Any) -> list[dict[str, Any]]:
    r = http.post("/api/v0/bundles/", json={"order": [["dph_total", "asc"]], "limit": 1000, **q})
    assert r.status_code == 200, r.text
    return list(r.json()["offers"])


def rent(http: httpx.Client, offer_id: int) -> int:
    r = http.put(f"/api/v0/asks/{offer_id}/", json={"image": "sim/prover:latest", "disk": 10, "label": "t"})
    assert r.status_code == 200, r.text
    return int(r.json()["new_contract"])


def accounting(http: httpx.Client) -> dict[str, Any]:
    r = http.get("/_sim/accounting")
    assert r.status_code == 200
    return dict(r.json())


def good_single(sim: Simulator, gpu: str = "RTX 4090") -> dict[str, Any]:
    return sim.find_offer(gpu, good=True)


def test_arrivals_constant_ramp_day_and_seeded(http: httpx.Client, sim: Simulator) -> None:
    post(http, "/_sim/demand", {"pending": 0})
    got = post(http, "/_sim/arrivals", {"shape": "constant", "rate": 60})
    assert got["shape"] == "constant" and got["rate_now"] == 60
    advance(http, 1800)
    acc = accounting(http)
    assert acc["jobs_arrived"] == pytest.approx(30.0)
    assert acc["pending"] == pytest.approx(30.0)  # nothing rented: nobody works on them
    # A backlog growing 1 job a minute for 30 minutes waits about 1+2+...+30 job-minutes (minute steps,
    # the first and last cut where the clock's start falls within a minute).
    assert acc["job_hours_waited"] == pytest.approx(sum(range(1, 31)) / 60.0, rel=0.01)

    post(http, "/_sim/arrivals", {"shape": "ramp", "points": [[0, 10], [3600, 70]]})
    advance(http, 1800)
    assert http.get("/_sim/arrivals").json()["rate_now"] == pytest.approx(40.0)
    advance(http, 7200)
    assert http.get("/_sim/arrivals").json()["rate_now"] == pytest.approx(70.0)  # flat after the last point

    post(http, "/_sim/arrivals", {"shape": "day", "rate": 20, "amplitude": 0.5, "period_s": 4 * 3600,
                                  "bursts": [{"at_s": 600, "for_s": 600, "x": 3}]})
    advance(http, 900)
    burst = http.get("/_sim/arrivals").json()["rate_now"]
    advance(http, 3600 - 900)  # the top of the cycle, burst over
    assert burst > 20 * 2 and http.get("/_sim/arrivals").json()["rate_now"] == pytest.approx(30.0)

    post(http, "/_sim/arrivals", {"shape": "seeded"})
    assert http.get("/_sim/arrivals").json()["rate_now"] == pytest.approx(sim.arrival_rate(sim.now()), abs=1e-3)


@pytest.mark.parametrize("body", [
    {"shape": "wave", "rate": 1}, {"shape": "constant"}, {"shape": "constant", "rate": -1},
    {"shape": "ramp", "points": []}, {"shape": "ramp", "points": [[60, 1], [0, 2]]},
    {"shape": "day", "rate": 5, "bursts": [{"at_s": 1}]},
])
def test_arrivals_refuses_a_bad_shape_and_keeps_the_old(http: httpx.Client, body: dict[str, Any]) -> None:
    post(http, "/_sim/arrivals", {"shape": "constant", "rate": 12})
    err = post(http, "/_sim/arrivals", body, status=400)
    assert err["error"] == "invalid_args" and err["msg"].startswith("arrivals:")
    assert http.get("/_sim/arrivals").json()["rate_now"] == 12


def test_jobs_done_at_each_gpu_rate_per_instance_and_in_demand_workers(http: httpx.Client, sim: Simulator) -> None:
    sim.realism.update({"quick": 1})  # both start within the same minutes, so their jobs compare by rate
    post(http, "/_sim/demand", {"pending": 500})
    post(http, "/_sim/arrivals", {"shape": "constant", "rate": 0})
    slow, fast = good_single(sim, "RTX 3090"), good_single(sim, "H100 SXM")
    a, b = rent(http, slow["id"]), rent(http, fast["id"])
    advance(http, 600)  # both are running by now
    before = accounting(http)
    advance(http, 3600)
    after = accounting(http)
    done = {i["id"]: i["jobs_done"] - next(j["jobs_done"] for j in before["instances"] if j["id"] == i["id"])
            for i in after["instances"]}
    rates = {m.name: m.jobs_per_h_per_gpu for m in GPU_MODELS}
    assert done[a] == pytest.approx(rates["RTX 3090"], abs=0.01)
    assert done[b] == pytest.approx(rates["H100 SXM"], abs=0.01)
    workers = http.get("/demand").json()["workers"]
    assert set(workers) == {str(a), str(b)} and workers[str(b)]["completed"] == int(after["instances"][1]["jobs_done"])
    # Stopped: it finishes nothing more.
    assert http.put(f"/api/v0/instances/{a}/", json={"state": "stopped"}).status_code == 200
    advance(http, 3600)
    row = next(i for i in accounting(http)["instances"] if i["id"] == a)
    assert row["jobs_done"] == pytest.approx(next(i for i in after["instances"] if i["id"] == a)["jobs_done"])


def test_prices_per_gpu_model_and_per_offer(http: httpx.Client, sim: Simulator) -> None:
    before = {o["id"]: o["dph_total"] for o in search(http, gpu_name={"eq": "RTX 3090"})}
    got = post(http, "/_sim/prices", {"gpu_name": "RTX 3090", "multiplier": 2})
    assert {o["id"] for o in got["offers"]} >= set(before)
    after = {o["id"]: o["dph_total"] for o in search(http, gpu_name={"eq": "RTX 3090"})}
    for oid, dph in before.items():
        assert after[oid] == pytest.approx(2 * dph, rel=0.01)
    one = next(iter(before))
    post(http, "/_sim/prices", {"offer_id": one, "dph": 0.1})
    shown = next(o for o in search(http) if o["id"] == one)
    assert shown["dph_base"] == pytest.approx(0.1 * shown["num_gpus"])
    post(http, "/_sim/prices", {"gpu_name": "RTX 3090", "multiplier": 1})
    assert {o["id"]: o["dph_total"] for o in search(http, gpu_name={"eq": "RTX 3090"})} == before


def test_a_price_change_leaves_rented_instances_at_their_price(http: httpx.Client, sim: Simulator) -> None:
    offer = good_single(sim, "RTX 4090")
    iid = rent(http, offer["id"])
    dph = next(i for i in accounting(http)["instances"] if i["id"] == iid)["dph_total"]
    post(http, "/_sim/prices", {"gpu_name": "RTX 4090", "multiplier": 3})
    assert next(i for i in accounting(http)["instances"] if i["id"] == iid)["dph_total"] == dph


@pytest.mark.parametrize("body,status", [
    ({"gpu_name": "RTX 3090"}, 400), ({"gpu_name": "RTX 3090", "dph": 1, "multiplier": 2}, 400),
    ({"gpu_name": "GTX 480", "multiplier": 2}, 404), ({"offer_id": 1, "multiplier": 2}, 404),
    ({"gpu_name": "RTX 3090", "multiplier": "x"}, 400),
])
def test_prices_refuses_bad_bodies(http: httpx.Client, body: dict[str, Any], status: int) -> None:
    post(http, "/_sim/prices", body, status=status)


def test_credit_sets_and_tops_up_the_balance(http: httpx.Client, sim: Simulator) -> None:
    assert post(http, "/_sim/credit", {"balance": 3.5})["balance"] == 3.5
    assert post(http, "/_sim/credit", {"top_up": 10})["balance"] == 13.5
    assert http.get("/api/v0/users/current/").json()["credit"] == pytest.approx(13.5)
    post(http, "/_sim/credit", {"balance": 1, "top_up": 1}, status=400)
    post(http, "/_sim/credit", {"top_up": -5}, status=400)
    post(http, "/_sim/credit", {"balance": 0})
    offer = good_single(sim)
    r = http.put(f"/api/v0/asks/{offer['id']}/", json={"image": "x", "disk": 10})
    assert r.status_code == 402  # no credit, no rent


def test_host_outage_takes_its_instances_and_offers_and_gives_them_back(http: httpx.Client, sim: Simulator) -> None:
    offer = good_single(sim)
    host = offer["host_id"]
    iid = rent(http, offer["id"])
    advance(http, 600)
    on_host = [o["id"] for o in search(http) if o["host_id"] == host]
    post(http, "/_sim/host", {"host_id": host, "online": False})
    listed = http.get("/api/v0/instances/").json()["instances"]
    assert next(i for i in listed if i["id"] == iid)["actual_status"] == "offline"
    assert not [o for o in search(http) if o["host_id"] == host]
    if on_host:
        assert http.put(f"/api/v0/asks/{on_host[0]}/", json={"image": "x", "disk": 10}).status_code == 404
    done = next(i for i in accounting(http)["instances"] if i["id"] == iid)["jobs_done"]
    advance(http, 1800)
    assert next(i for i in accounting(http)["instances"] if i["id"] == iid)["jobs_done"] == done
    post(http, "/_sim/host", {"host_id": host, "online": True})
    advance(http, 600)
    listed = http.get("/api/v0/instances/").json()["instances"]
    assert next(i for i in listed if i["id"] == iid)["actual_status"] == "running"
    assert sorted(o["id"] for o in search(http) if o["host_id"] == host) == sorted(on_host)
    post(http, "/_sim/host", {"host_id": host, "online": "no"}, status=400)
    post(http, "/_sim/host", {"host_id": 1, "online": False}, status=404)


def test_offers_withdraw_keep_restore_add(http: httpx.Client) -> None:
    everything = search(http)
    one = everything[0]["id"]
    got = post(http, "/_sim/offers", {"withdraw": [one]})
    assert one in got["withdrawn"] and one not in {o["id"] for o in search(http)}
    got = post(http, "/_sim/offers", {"keep": 1})
    thin = search(http)
    assert len({o["gpu_name"] for o in thin}) == len(thin)  # one offer per GPU model left
    post(http, "/_sim/offers", {"restore": "all"})
    assert len(search(http)) == len(everything)
    added = post(http, "/_sim/offers", {"add": [{"gpu_name": "RTX 4090", "dph": 0.05, "num_gpus": 2}]})["added"]
    new = next(o for o in search(http) if o["id"] == added[0])
    assert new["gpu_name"] == "RTX 4090" and new["num_gpus"] == 2 and new["dph_base"] == pytest.approx(0.1)
    assert rent(http, new["id"])
    post(http, "/_sim/offers", {"withdraw": "all"})
    assert search(http) == []
    # A bad body changes nothing.
    post(http, "/_sim/offers", {"restore": "all", "add": [{"gpu_name": "GTX 480"}]}, status=400)
    assert search(http) == []
    post(http, "/_sim/offers", {"withdraw": [123]}, status=400)


def test_flap_does_no_jobs_while_down_and_shows_between_looks(http: httpx.Client, sim: Simulator) -> None:
    sim.realism.update({"quick": 1})  # both running from the same minute: the flap is the only difference
    post(http, "/_sim/demand", {"pending": 1000})
    post(http, "/_sim/arrivals", {"shape": "constant", "rate": 0})
    a, b = rent(http, good_single(sim, "RTX 4090")["id"]), rent(http, sim.find_offer("RTX 4090", good=True)["id"])
    advance(http, 600 - sim.now() % 300)  # both running, on a 5-minute boundary
    post(http, "/_sim/flap", {"instance_id": a, "down_s": 180, "every_s": 300, "phase_s": 60})
    start = {i["id"]: i["jobs_done"] for i in accounting(http)["instances"]}
    for _ in range(12):  # an hour of looks on 5-minute boundaries: always up then
        advance(http, 300)
        row = next(i for i in http.get("/api/v0/instances/").json()["instances"] if i["id"] == a)
        assert row["actual_status"] == "running"
        assert row["uptime_mins"] <= 1.0  # it restarted a minute ago
    end = {i["id"]: i["jobs_done"] for i in accounting(http)["instances"]}
    assert end[b] - start[b] == pytest.approx(8.0, abs=0.01)
    assert end[a] - start[a] == pytest.approx(8.0 * 2 / 5, abs=0.01)
    assert next(i for i in accounting(http)["instances"] if i["id"] == a)["flapping"] is True
    post(http, "/_sim/flap", {"instance_id": a, "stop": True})
    assert next(i for i in accounting(http)["instances"] if i["id"] == a)["flapping"] is False
    post(http, "/_sim/flap", {"instance_id": a, "down_s": 300, "every_s": 300}, status=400)
    post(http, "/_sim/flap", {"instance_id": 1, "down_s": 1, "every_s": 300}, status=404)


def test_accounting_spend_is_the_billing(http: httpx.Client, sim: Simulator) -> None:
    iid = rent(http, good_single(sim)["id"])
    advance(http, 3600)
    assert http.delete(f"/api/v0/instances/{iid}/").status_code == 200
    advance(http, 3600)
    acc = accounting(http)
    assert acc["spend"] == pytest.approx(sum(sim.billing().values()), abs=1e-5) and acc["spend"] > 0
    row = next(i for i in acc["instances"] if i["id"] == iid)
    assert row["status"] == "destroyed" and row["destroyed_at"] == pytest.approx(acc["now"] - 3600)


def test_accounting_shows_the_traffic_billed_within_the_cost(http: httpx.Client, sim: Simulator) -> None:
    """An instance's bandwidth, billed per GB at its host's prices on top of dph_total, is shown apart in its
    accounting row: what the API's counters say it moved, at those prices, and part of its cost."""
    offer = good_single(sim)
    sim.offers[offer["id"]].update(inet_up_cost=0.01, inet_down_cost=0.02)
    iid = rent(http, offer["id"])
    advance(http, 3600)
    inst = next(i for i in http.get("/api/v0/instances/").json()["instances"] if i["id"] == iid)
    assert http.delete(f"/api/v0/instances/{iid}/").status_code == 200
    advance(http, 600)
    row = next(i for i in accounting(http)["instances"] if i["id"] == iid)
    moved = inst["inet_up_billed"] / 1024 * 0.01 + inst["inet_down_billed"] / 1024 * 0.02
    assert moved > 0 and row["traffic_cost"] == pytest.approx(moved, abs=1e-5)
    assert 0 < row["traffic_cost"] < row["cost"] - 0.5 * row["dph_total"]  # running most of the hour besides


def test_cli_manual_clock_moves_only_when_advanced() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "agent.cli", "sim", "--manual-clock", "--port", str(port),
                             "--start", "1800000000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert "listening on" in first, first + (proc.stderr.read() if proc.stderr else "")
        url = first.rsplit(" ", 1)[-1].strip()
        assert "manual clock" in proc.stdout.readline() + proc.stdout.readline()
        with httpx.Client(base_url=url, timeout=10) as c:
            t0 = c.get("/_sim/accounting").json()["now"]
            assert t0 == 1_800_000_000.0 and c.get("/_sim/accounting").json()["now"] == t0
            assert c.post("/_sim/advance", json={"seconds": 300}).json()["now"] == t0 + 300
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_unmet_job_ticks_count_what_the_running_fleet_leaves_per_advance(http: httpx.Client, sim: Simulator) -> None:
    post(http, "/_sim/arrivals", {"shape": "constant", "rate": 0})
    post(http, "/_sim/demand", {"pending": 20})
    advance(http, 300)
    assert accounting(http)["unmet_job_ticks"] == pytest.approx(20.0)  # nobody works: all 20 unmet
    rent(http, good_single(sim, "H100 SXM")["id"])
    advance(http, 600)  # running now; 30 jobs/h
    acc = accounting(http)
    assert acc["capacity_jobs_per_h"] == 30
    before, pending = acc["unmet_job_ticks"], acc["pending"]
    advance(http, 300)
    after = accounting(http)
    assert after["pending"] == pytest.approx(pending - 2.5, abs=0.01)
    assert after["unmet_job_ticks"] - before == pytest.approx(max(0.0, after["pending"] - 2.5), abs=0.01)


def _listed(http: httpx.Client, iid: int) -> dict[str, Any]:
    return dict(next(i for i in http.get("/api/v0/instances/").json()["instances"] if i["id"] == iid))


def test_an_on_demand_instance_is_never_outbid_and_a_host_side_stop_keeps_it_stopped(http: httpx.Client,
                                                                                    sim: Simulator) -> None:
    """vast.ai never outbids an on-demand instance: /_sim/outbid refuses one (400) and nothing changes.
    /_sim/stop stops it as its host's side would: stopped, no outbid message, its owner's intent still
    running, storage billed and the GPU not, no jobs done; it starts again only when its owner starts it."""
    offer = good_single(sim)
    iid = rent(http, offer["id"])
    advance(http, 600)
    assert _listed(http, iid)["actual_status"] == "running"
    refused = post(http, "/_sim/outbid", {"instance_id": iid}, status=400)
    assert "on-demand" in refused["msg"] and "/_sim/stop" in refused["msg"]
    assert _listed(http, iid)["actual_status"] == "running"

    assert post(http, "/_sim/stop", {"instance_ids": [iid]}) == {"success": True, "stopped": [iid]}
    row = _listed(http, iid)
    assert (row["actual_status"], row["intended_status"], row["status_msg"]) == ("stopped", "running", None)
    before = next(i for i in accounting(http)["instances"] if i["id"] == iid)
    advance(http, 7200)  # two hours: it does not start by itself
    after = next(i for i in accounting(http)["instances"] if i["id"] == iid)
    assert _listed(http, iid)["actual_status"] == "stopped"
    assert after["jobs_done"] == before["jobs_done"]
    assert 0 < after["cost"] - before["cost"] < offer["dph_base"] * 2 / 10  # storage only
    assert http.put(f"/api/v0/instances/{iid}/", json={"state": "running"}).status_code == 200
    advance(http, 600)
    assert _listed(http, iid)["actual_status"] == "running"

    post(http, "/_sim/stop", {"instance_id": iid, "status_msg": "machine restarted"})
    assert _listed(http, iid)["status_msg"] == "machine restarted"
    post(http, "/_sim/stop", {}, status=400)
    post(http, "/_sim/stop", {"instance_ids": [iid], "status_msg": 3}, status=400)
    post(http, "/_sim/stop", {"instance_ids": [iid, 1]}, status=404)


def test_traffic_scale_sets_the_data_instances_rented_from_then_on_move(http: httpx.Client, sim: Simulator) -> None:
    """POST /_sim/traffic {"scale": x}: instances rented after it move x times the GB an hour the simulator
    draws for them (the workload's data volume), those rented before keep theirs; a bad scale is refused."""
    offers = [o for o in sim.offers.values() if o["num_gpus"] == 1 and o["host_id"] not in sim.bad_hosts
              and o["disk_space"] >= 20][:2]
    for o in offers:
        sim.offers[o["id"]].update(inet_up_cost=0.01, inet_down_cost=0.01)
    before = rent(http, offers[0]["id"])
    assert http.post("/_sim/traffic", json={"scale": 0}).json() == {"scale": 0.0}
    after = rent(http, offers[1]["id"])
    advance(http, 3600)
    rows = {i["id"]: i for i in accounting(http)["instances"]}
    assert rows[before]["traffic_cost"] > 0 and rows[after]["traffic_cost"] == 0
    assert rows[before]["inet_up_cost"] == 0.01  # the accounting lists the $/GB prices
    assert http.post("/_sim/traffic", json={"scale": -1}).status_code == 400
    assert http.get("/_sim/traffic").json() == {"scale": 0.0}
