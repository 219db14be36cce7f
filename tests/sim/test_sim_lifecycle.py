"""Starts, stops and hosts as vast.ai runs them by default: a rent waits in scheduling and then loads for
minutes, a stop takes seconds, some rents cannot be scheduled or stay in scheduling, and hosts announce
maintenance windows ahead (GET /api/v0/machines/maintenances). ``realism.quick`` restores the instant market.
Real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from agent.sim import SimServer, Simulator
from agent.sim.instances import SCHEDULING_MSG


@pytest.fixture(autouse=True)
def _no_rate_limit(sim: Simulator) -> None:
    sim.realism.update({"rate_interval": 0, "logs_delay": 0, "price_increases": 0, "maintenance": 0})


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10) as client:
        yield client


def _auth(sim: Simulator) -> dict[str, str]:
    return {"Authorization": f"Bearer {sim.api_key}"}


def _walk(sim: Simulator, iid: int, until_s: float) -> list[tuple[float, str | None]]:
    """(seconds since now, status) each time the instance's status changes, in 5 s steps up to ``until_s``."""
    t0, seen = sim.now(), [(0.0, sim.instances[iid]["actual_status"])]
    while sim.now() - t0 < until_s:
        sim.advance(5)
        status = sim.instances[iid]["actual_status"]
        if status != seen[-1][1]:
            seen.append((sim.now() - t0, status))
    return seen


def _rent_round(sim: Simulator) -> list[int]:
    """Rent every free offer on a good host (the CLI's default, no cancel_unavail); their ids."""
    ids = []
    for offer in [o for o in sim.offers.values() if not o["rented"] and o["host_id"] not in sim.bad_hosts]:
        with sim._lock:
            reply = sim._rent(offer["id"], {"image": "sim/prover:latest"}, sim.tick())
        ids.append(int(json.loads(reply.body)["new_contract"]))
    return ids


def test_a_rent_waits_in_scheduling_then_loads_for_minutes_by_default(sim: Simulator) -> None:
    sim.realism.update({"unschedulable": 0, "stuck_scheduling": 0})
    offer = sim.find_offer("RTX 4090")
    iid = sim.create_instance(offer["id"])
    inst = sim.instances[iid]
    assert inst["actual_status"] is None and inst["status_msg"] == SCHEDULING_MSG
    seen = _walk(sim, iid, 20 * 60)
    statuses = [s for _, s in seen]
    assert statuses == [None, "created", "loading", "running"]
    scheduled = seen[1][0]
    running = seen[3][0]
    assert 30 - 5 <= scheduled <= 240 + 5  # 0.5-4 min in scheduling
    assert 150 <= running - scheduled <= 420 + 5  # then 2.5-7 min created and loading
    assert sim.instances[iid]["_cost"] > 0  # storage billed while waiting, GPU once running


def test_a_large_image_loads_for_as_long_as_its_pull_takes_once(http: httpx.Client, sim_server: SimServer,
                                                                 sim: Simulator) -> None:
    """``realism.image_pull`` (set over HTTP, as an operator would): a rent's first load takes that much longer, as a
    large image's pull does on vast.ai; a reboot starts it from the image already on the host."""
    r = http.post(f"{sim_server.url}/_sim/realism", json={"image_pull": 900, "unschedulable": 0,
                                                          "stuck_scheduling": 0})
    assert r.status_code == 200, r.text
    iid = sim.create_instance(sim.find_offer("RTX 4090")["id"])
    seen = _walk(sim, iid, 40 * 60)
    assert [s for _, s in seen] == [None, "created", "loading", "running"]
    assert 900 + 150 <= seen[3][0] - seen[1][0] <= 900 + 420 + 5  # the pull, then the usual 2.5-7 min
    r = http.put(f"{sim_server.url}/api/v0/instances/reboot/{iid}/", json={}, headers=_auth(sim))
    assert r.status_code == 200, r.text
    again = _walk(sim, iid, 20 * 60)
    assert again[-1][1] == "running" and again[-1][0] <= 420 + 60, again


def test_an_instance_says_since_when_it_runs_and_how_old_it_is(http: httpx.Client, sim_server: SimServer,
                                                             sim: Simulator) -> None:
    """As vast.ai lists them (the official CLI shows ``uptime(mins)`` and ``age(hours)`` from these): ``uptime_mins``
    counts from when the instance last started running, none while it is not; ``duration`` is its age in seconds,
    from the rent, scheduling and loading included."""
    sim.realism.update({"unschedulable": 0, "stuck_scheduling": 0})
    iid = sim.create_instance(sim.find_offer("RTX 4090")["id"])
    rented = sim.now()
    seen = _walk(sim, iid, 20 * 60)
    started = rented + seen[-1][0]  # within the 5 s step before
    assert seen[-1][1] == "running"
    sim.advance(600)
    [row] = [i for i in http.get(f"{sim_server.url}/api/v0/instances/", headers=_auth(sim)).json()["instances"]
             if i["id"] == iid]
    assert row["duration"] == round(sim.now() - rented, 1)
    assert 0 <= (sim.now() - row["uptime_mins"] * 60) - (started - 5) <= 5 + 1
    sim.host_stop(iid)
    sim.advance(60)
    [row] = [i for i in http.get(f"{sim_server.url}/api/v0/instances/", headers=_auth(sim)).json()["instances"]
             if i["id"] == iid]
    assert row["actual_status"] == "stopped" and row["uptime_mins"] is None
    assert row["duration"] == round(sim.now() - rented, 1)


def test_quick_restores_the_instant_market(sim: Simulator) -> None:
    sim.realism.update({"quick": 1})
    offer = sim.find_offer("RTX 4090")
    iid = sim.create_instance(offer["id"])
    seen = _walk(sim, iid, 5 * 60)
    assert [s for _, s in seen] == [None, "created", "loading", "running"]
    assert seen[-1][0] <= 12 + 20 + 120 + 5
    assert sim.instances[iid]["status_msg"] != SCHEDULING_MSG


def test_a_stop_takes_ten_to_forty_seconds_and_bills_as_running_until_then(
        http: httpx.Client, sim_server: SimServer, sim: Simulator) -> None:
    sim.realism.update({"quick": 1})
    iid = sim.create_instance(sim.find_offer("RTX 4090")["id"])
    sim.advance(300)
    sim.realism.update({"quick": 0})
    sim.instances[iid]["_quick"] = False  # as if rented under the default market
    r = http.put(f"{sim_server.url}/api/v0/instances/{iid}/", json={"state": "stopped"}, headers=_auth(sim))
    assert r.status_code == 200, r.text
    inst = sim.instances[iid]
    assert inst["actual_status"] == "running" and inst["intended_status"] == "stopped"
    assert inst["status_msg"] == "stopping"
    seen = _walk(sim, iid, 120)
    assert [s for _, s in seen] == ["running", "stopped"]
    assert 10 <= seen[1][0] <= 40 + 5
    assert inst["status_msg"] == "stopped by user"


def test_some_rents_are_unschedulable_and_some_stick_in_scheduling_by_default(sim: Simulator) -> None:
    """3 % of rents cannot be scheduled (created stopped, or refused with cancel_unavail), 2 % never leave
    scheduling: over 200 rents both happen, and most start."""
    seen: list[dict[str, object]] = []
    while len(seen) < 200:
        ids = _rent_round(sim)
        sim.advance(15 * 60)
        seen += [dict(sim.instances[i]) for i in ids]
        with sim._lock:
            for i in ids:
                sim._destroy(i, sim.tick())
    unschedulable = [i for i in seen if "Unable to schedule" in str(i["status_msg"])]
    stuck = [i for i in seen if i["status_msg"] == SCHEDULING_MSG]
    assert 1 <= len(unschedulable) <= 0.08 * len(seen)
    assert all(i["actual_status"] == "stopped" for i in unschedulable)
    assert 1 <= len(stuck) <= 0.06 * len(seen)
    assert all(i["actual_status"] is None for i in stuck)
    assert [i["actual_status"] for i in seen].count("running") >= 0.85 * len(seen)


def test_cancel_unavail_refuses_an_unschedulable_rent(http: httpx.Client, sim_server: SimServer,
                                                     sim: Simulator) -> None:
    sim.realism.update({"unschedulable": 1})
    offer = sim.find_offer("RTX 4090")
    r = http.put(f"{sim_server.url}/api/v0/asks/{offer['id']}/", headers=_auth(sim),
                 json={"client_id": "me", "image": "sim/prover:latest", "cancel_unavail": True})
    assert r.status_code == 400 and "cancel_unavail" in r.json()["msg"]
    assert not sim.instances


def test_maintenance_windows_are_listed_ahead_and_take_the_machine_down(
        http: httpx.Client, sim_server: SimServer, sim: Simulator) -> None:
    sim.realism.update({"quick": 1})
    iid = sim.create_instance(sim.find_offer("RTX 4090")["id"])
    other = sim.create_instance(sim.find_offer("RTX 3090")["id"])
    sim.advance(300)
    machine = sim.instances[iid]["machine_id"]
    r = http.post(f"{sim_server.url}/_sim/maintenance", json={"instance_id": iid, "in_s": 7200,
                                                              "duration_hours": 3, "category": "gpu"})
    assert r.status_code == 200, r.text
    url = f"{sim_server.url}/api/v0/machines/maintenances"
    r = http.get(url, params={"owner": '"me"', "machine_ids": f"[{machine}]"}, headers=_auth(sim))
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    rows = r.json()
    assert [(w["machine_id"], w["duration_hours"], w["maintenance_category"]) for w in rows] == [(machine, 3, "gpu")]
    assert rows[0]["end_time"] - rows[0]["start_time"] == 3 * 3600
    assert rows[0]["start_time"] - sim.now() == pytest.approx(7200, abs=1)
    other_machine = sim.instances[other]["machine_id"]
    assert http.get(url, params={"machine_ids": f"[{other_machine}]"}, headers=_auth(sim)).json() == []
    assert http.get(url, params={"machine_ids": '"x"'}, headers=_auth(sim)).status_code == 400
    sim.advance(7200 - 120)
    assert sim.instances[iid]["actual_status"] == "running"
    sim.advance(240)
    assert sim.instances[iid]["actual_status"] == "offline"
    assert "maintenance" in sim.instances[iid]["status_msg"]
    assert sim.instances[other]["actual_status"] == "running"
    # A machine down for maintenance hosts nothing: its offer, freed by the destroy, is neither listed nor rentable
    # until the window is over (as an offline machine's on vast.ai).
    offer = sim.instances[iid]["_offer_id"]
    assert http.delete(f"{sim_server.url}/api/v0/instances/{iid}/", headers=_auth(sim)).status_code == 200
    listed = {"id": {"eq": offer}, "rented": {"eq": False}}
    body = {"client_id": "me", "image": "sim/prover:latest", "disk": 10}
    assert http.post(f"{sim_server.url}/api/v0/bundles/", json=listed, headers=_auth(sim)).json()["offers"] == []
    r = http.put(f"{sim_server.url}/api/v0/asks/{offer}/", json=body, headers=_auth(sim))
    assert r.status_code == 404 and "not available" in r.json()["msg"]
    sim.advance(3 * 3600)
    assert http.get(url, params={"machine_ids": f"[{machine}]"}, headers=_auth(sim)).json() == []
    [back] = http.post(f"{sim_server.url}/api/v0/bundles/", json=listed, headers=_auth(sim)).json()["offers"]
    assert back["machine_id"] == machine
    assert http.put(f"{sim_server.url}/api/v0/asks/{offer}/", json=body, headers=_auth(sim)).json()["success"]


def test_hosts_announce_maintenance_at_the_default_rate(sim: Simulator) -> None:
    """0.02 windows per machine per day: 40 machines over 10 simulated days see about 8, each 6-72 h ahead."""
    sim.realism.update({"quick": 1})
    for o in [o for o in sim.offers.values() if not o["rented"] and o["num_gpus"] == 1][:40]:
        sim.create_instance(o["id"])
    sim.realism.update({"quick": 0, "maintenance": 0.02, "stuck_scheduling": 0, "unschedulable": 0})
    for _ in range(10 * 24):
        sim.advance(3600)
    rows = sim.maintenances
    assert 2 <= len(rows) <= 20
    lead_h = [(w["start_time"] - w["_announced"]) / 3600 for w in rows]
    assert all(6 <= h <= 72 for h in lead_h)
    assert all(1 <= w["duration_hours"] <= 8 for w in rows)


def test_a_draining_instance_finishes_its_job_and_takes_no_new_one(sim: Simulator) -> None:
    sim.realism.update({"quick": 1})
    a = sim.create_instance(sim.find_offer("RTX 4090")["id"])
    b = sim.create_instance(sim.find_offer("RTX 4090")["id"])
    sim.advance(300)
    sim.pending = 10_000
    sim.advance(600)
    sim.instances[a]["label"] = "fleet-x-draining"
    jobs_a, jobs_b = sim.instances[a]["_jobs"], sim.instances[b]["_jobs"]
    sim.advance(3 * 3600)
    done_a = sim.instances[a]["_jobs"] - jobs_a
    done_b = sim.instances[b]["_jobs"] - jobs_b
    assert done_b > 5 and 0 <= done_a <= 1.0  # at most the job in hand
    shown = sim._public(sim.instances[a])
    assert shown["gpu_util"] is not None and shown["gpu_util"] < 5  # idle
    assert sim._public(sim.instances[b])["gpu_util"] > 80


def test_the_client_reads_maintenance_windows_as_the_official_cli_asks(vast, sim: Simulator) -> None:
    sim.realism.update({"quick": 1})
    iid = sim.create_instance(sim.find_offer("RTX 4090")["id"])
    machine = sim.instances[iid]["machine_id"]
    assert vast.maintenances([machine]) == []
    row = sim.schedule_maintenance(machine, sim.now() + 3600, 2.5, "disk")
    [w] = vast.maintenances([machine, machine + 1])
    assert (w.machine_id, w.start, w.end, w.category) == (machine, row["start_time"], row["end_time"], "disk")
    req = [r for r in sim.requests if r["path"] == "/api/v0/machines/maintenances"][-1]
    assert req["method"] == "GET" and req["query"] == {"owner": "me", "machine_ids": sorted([machine, machine + 1])}
