"""The market as vast.ai really is, end to end through ticks: the simulator's defaults model it (rate
limits per endpoint, listing lag, small disks, storage in dph_total, log uploads that take seconds,
credit apart from balance, scheduling failures, every actual_status), and the agent copes."""

from __future__ import annotations

from typing import Any

import httpx

from agent.clients.vast import VastClient
from agent.runtime.status import fleet as status_fleet
from agent.runtime.tick import run_tick
from agent.sim import ManualClock, SimServer, Simulator
from agent.sim.simulator import ID_EPOCH
from tests.conftest import events_of, good_offer, offer_rows, plant_ours, rent_puts, tool_messages
from tests.fakes.openai_server import reply

HOUR = 3600.0


def _results(app: Any, tick: int | None = None) -> list[dict[str, Any]]:
    return [e.payload for e in events_of(app, "tool.result", tick)]


def _obs(app: Any, tick: int) -> dict[str, Any]:
    return dict(events_of(app, "tick.started", tick)[0].payload["observation"])


def _mine(obs: dict[str, Any], iid: int) -> dict[str, Any]:
    return next(i for i in obs["instances"] if i["id"] == iid)


def _bundles(sim: Simulator) -> list[dict[str, Any]]:
    return [r for r in list(sim.requests) if r["method"] == "POST" and r["path"] == "/api/v0/bundles/"]


# --- 1. disk ---------------------------------------------------------------------------------------


def test_search_shows_only_offers_with_the_fleets_disk_priced_with_that_storage(sim, make_app, fake_model):
    """search_offers asks vast.ai for offers with at least fleet.disk_gb of disk and prices them with
    allocated_storage = fleet.disk_gb: every offer the model sees can take the disk, a rent of one is not
    refused for disk, and the $/h the caps were checked on is the instance's dph_total (storage included)."""
    app = make_app(policy={"max_rents_per_hour": 100})
    disk = app.settings.fleet.disk_gb
    assert any(o["disk_space"] < disk for o in sim.offers.values())  # the market has small disks

    def rent_first(body: dict[str, Any]) -> Any:
        rows = offer_rows(tool_messages(body)[-1]["content"])
        return reply("rent it", tool_calls=[("rent_instance", {"offer_id": rows[0]["id"], "reason": "cheapest"})])

    fake_model.enqueue(reply("look", tool_calls=[("search_offers", {"limit": 25})]), rent_first, reply("done"))
    r = run_tick(app)
    assert r.ok, r.reason

    search = _bundles(sim)[0]["body"]
    assert search["allocated_storage"] == disk and search["disk_space"] == {"gte": str(disk)}
    shown = offer_rows(_results(app, 1)[0]["output"])
    assert shown and all(sim.offers[o["id"]]["disk_space"] >= disk for o in shown)
    rented = [p for p in _results(app, 1) if p["name"] == "rent_instance"]
    assert rented[0]["ok"], rented[0]
    iid = rented[0]["effect"]["instance_id"]
    assert rented[0]["effect"]["dph"] == sim.instances[iid]["dph_total"]
    assert sim.instances[iid]["disk_space"] == disk and not [p for p in rent_puts(sim) if p["status"] != 200]


# --- 2. rate limits ----------------------------------------------------------------------------------


def test_a_tick_renting_seven_searches_once_and_no_429_reaches_the_model(sim, make_app):
    """With vast.ai's per-endpoint rate limit on (the simulator's default), the rules provider's tick that
    rents 7 (every offer within policy on this market) sends ONE search (each rent uses the offer the search
    returned), all 7 rents go through, and no tool result the model sees carries a 429."""
    app = make_app(provider="rules", policy={"max_instances": 7, "max_rents_per_hour": 8, "max_total_dph": 20.0})
    sim.pending = 5000
    r = run_tick(app)
    assert r.ok, r.reason
    assert len(_bundles(sim)) == 1
    puts = rent_puts(sim)
    assert len(puts) == 7 and all(p["status"] == 200 for p in puts)
    assert len(sim.instances) == 7
    results = _results(app, 1)
    assert all(p["ok"] for p in results), results
    # Hex labels and ids may contain the digits 429; an error reaches the model as "HTTP 429".
    seen = " ".join(p["output"] for p in results)
    assert "HTTP 429" not in seen and "too frequent" not in seen


def test_the_client_paces_one_endpoint_and_a_429_says_so_in_plain_text(sim, sim_server):
    """The simulator refuses a second request to one endpoint sooner than its interval with a plain-text 429
    and no Retry-After, as vast.ai does; a client pacing at min_interval sends 5 back-to-back calls without
    one 429, waiting about the interval between them."""
    wall, waits, sleep = _manual_wall(sim)
    url = f"{sim_server.url}/api/v0/users/current"
    with httpx.Client() as http:
        first = http.get(url, headers={"Authorization": f"Bearer {sim.api_key}"})
        second = http.get(url, headers={"Authorization": f"Bearer {sim.api_key}"})
    assert first.status_code == 200 and second.status_code == 429
    assert second.headers["content-type"].startswith("text/plain") and "Retry-After" not in second.headers
    assert second.text.startswith("API requests too frequent")
    wall.advance(5)
    with VastClient(sim_server.url, sim.api_key, sleep=sleep, monotonic=wall, min_interval=0.6) as client:
        for _ in range(5):
            client.current_user()
    statuses = [r["status"] for r in sim.requests[2:]]
    assert statuses == [200] * 5 and len(waits) == 4 and all(abs(w - 0.6) < 1e-6 for w in waits)


def _manual_wall(sim: Simulator) -> tuple[ManualClock, list[float], Any]:
    """The simulator's wall as a ManualClock, with a sleep that records each wait and moves that clock."""
    wall = ManualClock(0.0)
    sim.wall = wall
    waits: list[float] = []

    def sleep(s: float) -> None:
        waits.append(s)
        wall.advance(s)

    return wall, waits, sleep


def test_a_destroy_or_label_refused_with_429_is_sent_again_after_a_wait(sim, sim_server):
    """A 429 is vast.ai's rate limit refusing the request before acting on it, so a call that changes the fleet
    but may be repeated (destroy, start/stop/label/reboot) is sent again after a wait, as a read is: two
    destroys the network delivered closer than the interval (the first one late) both complete, where the
    second used to fail and left `fleet-agent drain` half done. A rent is still sent once."""
    wall, waits, sleep = _manual_wall(sim)
    free = [oid for oid, o in sorted(sim.offers.items()) if not o.get("rented")][:5]
    a, b, c, d = (sim.create_instance(oid, label=f"x{n}") for n, oid in enumerate(free[:4]))
    wall.advance(5)
    with VastClient(sim_server.url, sim.api_key, sleep=sleep, monotonic=wall, min_interval=0) as client:
        assert client.destroy(a) and client.destroy(b)
        client.set_label(c, "y1")
        client.set_label(d, "y2")
        wall.advance(5)
        first = client.rent(free[4], image="x", disk=10, label="r1", onstart=None, env={})
        second = client.rent(free[4], image="x", disk=10, label="r2", onstart=None, env={})
    deletes = [r["status"] for r in sim.requests if r["method"] == "DELETE"]
    assert deletes == [200, 429, 200] and a not in sim.instances and b not in sim.instances
    labels = [r["status"] for r in sim.requests if r["method"] == "PUT" and "/instances/" in r["path"]]
    assert labels == [200, 429, 200] and sim.instances[d]["label"] == "y2"
    assert len(waits) == 2 and all(w >= 0.5 for w in waits)
    rents = [r["status"] for r in sim.requests if r["method"] == "PUT" and "/asks/" in r["path"]]
    assert first.status == "created" and second.status != "created" and rents == [200, 429]


# --- 3. scheduling failures --------------------------------------------------------------------------


def test_a_rent_the_machine_cannot_schedule_is_refused_not_a_stopped_instance(sim, make_app, fake_model):
    """Every rent sends cancel_unavail: true, so when the machine cannot schedule the instance vast.ai
    refuses the rent (the model sees why) instead of creating a stopped instance that bills storage."""
    app = make_app()
    sim.realism.update({"unschedulable": 1.0})
    offer = good_offer(sim, app.settings)
    fake_model.enqueue(reply("rent", tool_calls=[("rent_instance", {"offer_id": offer["id"], "reason": "x"})]),
                       reply("done"))
    assert run_tick(app).ok
    put = rent_puts(sim)[0]
    assert put["body"]["cancel_unavail"] is True
    res = [p for p in _results(app, 1) if p["name"] == "rent_instance"][0]
    assert not res["ok"] and "cannot schedule" in res["error"]
    assert sim.instances == {}


def test_an_instance_of_ours_stopped_without_our_asking_is_alerted_and_destroyed(sim, make_app):
    """An instance of ours that vast.ai shows stopped (we never stop one) is a failure: a critical alert
    says so and the rules provider destroys it (and avoids its host)."""
    app = make_app(provider="rules")
    iid = plant_ours(app, sim, good_offer(sim, app.settings)["id"])
    sim.advance(600)
    sim.set_status(iid, "stopped", "Unable to schedule: the machine is unavailable")
    assert run_tick(app).ok
    alerts = {a.title: a for a in app.log.store.open_alerts()}
    assert f"instance #{iid} is stopped without our asking (fleet-agent never stops an instance); the tick " \
           "destroys it, as it still bills storage (not while the fleet is paused)" in alerts
    destroyed = [p for p in _results(app, 1) if p["name"] == "destroy_instance"]
    assert destroyed and destroyed[0]["effect"] == {"type": "destroyed", "instance_id": iid}
    assert iid not in sim.instances


# --- 4. states and time --------------------------------------------------------------------------------


def test_a_reboot_restarts_the_clock_stuck_counts_from_the_last_change(sim, make_app):
    """An instance running for 2 h and rebooted 5 s before a tick is not "stuck for 2h": its age counts
    from when its status changed, so it is neither alerted nor destroyed; once it stays in loading longer
    than alerts.stuck_after after that change, a stuck alert names the time since the change."""
    app = make_app(provider="rules", alerts={"stuck_after": 1200.0}, policy={"max_instances": 1})
    iid = plant_ours(app, sim, good_offer(sim, app.settings)["id"])
    sim.pending = 5000  # a target of one: the rules provider neither scales down nor rents
    sim.advance(2 * HOUR)
    assert run_tick(app).ok and _mine(_obs(app, 1), iid)["status"] == "running"
    sim.advance(600)
    sim.set_status(iid, "rebooting", "rebooting")
    sim.advance(5)
    assert run_tick(app).ok
    seen = _mine(_obs(app, 2), iid)
    assert seen["status"] == "rebooting" and seen["age_s"] == 0
    assert not [p for p in _results(app) if p["name"] == "destroy_instance"]
    assert not [a for a in app.log.store.open_alerts() if a.title.startswith(f"instance #{iid}")]
    sim.set_status(iid, "loading", "pulling")
    sim.advance(60)
    assert run_tick(app).ok and _mine(_obs(app, 3), iid)["age_s"] == 0
    sim.advance(21 * 60)
    assert run_tick(app).ok
    assert _mine(_obs(app, 4), iid)["age_s"] == 21 * 60
    titles = [a.title for a in app.log.store.open_alerts()]
    assert f"instance #{iid} stuck in loading for 21m" in titles


def test_every_status_vast_reports_is_observed_and_judged(sim, make_app, fake_model):
    """Each actual_status vast.ai reports (null, created, loading, running, stopped, frozen, exited,
    rebooting, unknown, offline) is shown as it is; the dead ones (exited, offline, unknown, stopped) raise
    a critical alert, the others, just changed, none; the tick completes."""
    app = make_app(policy={"max_instances": 20})
    statuses = [None, "created", "loading", "running", "stopped", "frozen", "exited", "rebooting", "unknown",
                "offline"]
    offers = [o for o in sorted(sim.offers.values(), key=lambda o: o["id"]) if not o["rented"]][:len(statuses)]
    ids = [plant_ours(app, sim, o["id"], key=f"feedc0ffee{n:02d}") for n, o in enumerate(offers)]
    for iid, st in zip(ids, statuses, strict=True):
        sim.set_status(iid, st)
    assert run_tick(app).ok
    obs = _obs(app, 1)
    assert [_mine(obs, i)["status"] for i in ids] == ["provisioning", *statuses[1:]]
    dead = {a.title.split()[1] for a in app.log.store.open_alerts() if a.severity == "critical"}
    assert dead == {f"#{ids[statuses.index(s)]}" for s in ("stopped", "exited", "unknown", "offline")}


# --- 5. listing lag ----------------------------------------------------------------------------------


def test_rents_not_listed_yet_count_toward_max_instances(sim, make_app):
    """Rents vast.ai has not listed yet (the listing lags) count toward max_instances: the tick after a
    rent burst, before any of them is listed, rents nothing more and the fleet never passes the cap."""
    app = make_app(provider="rules", policy={"max_instances": 3, "max_rents_per_hour": 20})
    sim.pending = 5000
    assert run_tick(app).ok
    assert len(sim.instances) == 3
    sim.advance(10)  # under the simulator's 30 s listing lag
    assert run_tick(app).ok
    assert len(sim.instances) == 3 and len(rent_puts(sim)) == 3


# --- 6. logs -----------------------------------------------------------------------------------------


def test_logs_that_take_seconds_to_upload_are_read(sim, make_app, fake_model):
    """A log upload ready only 2.5 s after the request (the simulator's default) is read: the tool polls as
    the official client does (30 x 0.3 s) instead of giving up after 2 s."""
    app = make_app()
    iid = plant_ours(app, sim, good_offer(sim, app.settings)["id"])
    sim.advance(600)
    sim.plant_logs(iid, "prover: job 7 proved\n")
    fake_model.enqueue(reply("logs", tool_calls=[("get_instance_logs", {"instance_id": iid})]), reply("done"))
    assert run_tick(app).ok
    res = [p for p in _results(app, 1) if p["name"] == "get_instance_logs"][0]
    assert res["ok"] and "prover: job 7 proved" in res["output"]


# --- 7. balance ----------------------------------------------------------------------------------------


def test_credit_is_what_the_agent_watches_and_status_shows_both(sim, make_app, fake_model):
    """vast.ai's credit (what the account can spend) and balance (the invoice balance) differ once anything
    is billed: the observation's balance is the credit, the low-balance alert is raised on it, and status
    shows the invoice balance beside it."""
    app = make_app(alerts={"low_balance": 1000.0})
    plant_ours(app, sim, good_offer(sim, app.settings)["id"])
    sim.advance(3 * HOUR)
    assert run_tick(app).ok
    obs = _obs(app, 1)
    assert obs["balance"] == round(sim.balance, 4) and obs["account_balance"] < 0
    assert obs["balance"] != obs["account_balance"]
    assert any(a.title.startswith(f"credit ${obs['balance']:,.2f} is below") for a in app.log.store.open_alerts())
    f = status_fleet(app.log)
    assert f is not None and f["balance"] == obs["balance"] and f["account_balance"] == obs["account_balance"]


# --- 8. destroy --------------------------------------------------------------------------------------------


def test_destroying_an_instance_already_gone_counts_as_destroyed(sim, make_app, fake_model):
    """An instance destroyed behind the agent's back between the listing and the call: vast.ai answers
    no_such_instance with a 400, and the destroy counts as done."""
    app = make_app()
    iid = plant_ours(app, sim, good_offer(sim, app.settings)["id"])
    sim.advance(600)

    def gone_then_destroy(body: dict[str, Any]) -> Any:
        with sim._lock:
            sim._destroy(iid, sim.now())
        return reply("destroy", tool_calls=[("destroy_instance", {"instance_id": iid, "reason": "done"})])

    fake_model.enqueue(gone_then_destroy, reply("done"))
    assert run_tick(app).ok
    res = [p for p in _results(app, 1) if p["name"] == "destroy_instance"][0]
    assert res["ok"] and res["effect"] == {"type": "destroyed", "instance_id": iid}
    assert [r["status"] for r in sim.requests if r["method"] == "DELETE"] == [400]


# --- 9. ids --------------------------------------------------------------------------------------------------


def test_instance_ids_are_never_reused_after_a_restart_without_state():
    """A simulator restarted without --state a second later hands out ids above every id the previous one
    handed out (ids grow with simulated time as well as with each rent)."""
    before = Simulator(seed=3, clock=ManualClock(ID_EPOCH + 1000))
    offers = sorted(before.offers)
    old = [before.create_instance(o) for o in offers[:5]]
    after = Simulator(seed=3, clock=ManualClock(ID_EPOCH + 1001))
    new = [after.create_instance(o) for o in offers[:5]]
    assert min(new) > max(old)
    assert len(set(old)) == 5 and len(set(new)) == 5


def test_the_server_starts_and_serves_with_vast_defaults():
    """A served simulator answers the official first-run calls with the defaults on (sanity of the wiring)."""
    sim = Simulator(seed=2, clock=ManualClock())
    with SimServer(sim) as server, httpx.Client() as http:
        assert http.get(f"{server.url}/_sim/realism").json()["rate_interval"] == 0.5
        assert http.get(f"{server.url}/api/v0/gpu_names/unique/").status_code == 200


def test_ages_and_stuck_alerts_follow_the_fleets_clock_when_the_simulators_runs_ahead(tmp_path, sim, sim_server):
    """With the simulator's clock far ahead of the agent's (`fleet-agent sim --speed 60` against a daemon on
    the wall clock), ages are still counted, by the agent's own clock from the observations, and an instance
    stuck in loading longer than alerts.stuck_after raises the stuck alert (start_date, in the simulator's
    time, would have made every age 0)."""
    from agent.runtime.app import App
    from tests.conftest import settings_for

    fleet_clock = ManualClock(sim.now() - 10 * HOUR)
    s = settings_for(tmp_path, sim_server.url, provider="rules", alerts={"stuck_after": 1200.0},
                     policy={"max_instances": 1})
    app = App(s, env={"VAST_API_KEY": sim.api_key}, clock=fleet_clock)
    try:
        app.init_database(exist_ok=True)
        iid = plant_ours(app, sim, good_offer(sim, s)["id"])
        sim.pending = 5000
        sim.set_status(iid, "loading", "pulling")
        assert run_tick(app).ok
        for _ in range(5):
            sim.advance(300)
            fleet_clock.advance(300)
            assert run_tick(app).ok
        assert _mine(_obs(app, 6), iid)["age_s"] == 1500
        assert f"instance #{iid} stuck in loading for 25m" in [a.title for a in app.log.store.open_alerts()]
    finally:
        app.close()
