"""Uncertain side effects settle right, against the simulator playing a scripted fault plan.

A fault plan (agent/sim/faults.py, ``script``) makes vast.ai act and lose the answer, receive a
request only after the client's timeout, or fail one listing. Every case runs through
``run_tick`` with the scripted model. The caps hold while an outcome is unknown, a call is sent
at most once per intent, reconcile never says "destroyed, then adopted", and ownership comes
from the log.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from agent.clients.vast import VastClient
from agent.runtime.tick import run_tick
from agent.sim import ManualClock, Simulator
from tests.conftest import events_of, good_offer, rent_puts, tool_messages, within_policy
from tests.fakes.openai_server import FakeOpenAI, reply

# A scripted fault is the only answer slower than the client's timeout: the timeout leaves an ordinary
# request on a loaded machine a wide margin, and a late request lands well after the client gave up.
TIMEOUT_S = 1.0
LATE_S = 2.0

# Runs on SQLite and on PostgreSQL (make_app opens the log on the test's backend).
pytestmark = pytest.mark.usefixtures("backend")


def _rent(offer_id: int) -> tuple[str, dict[str, Any]]:
    return ("rent_instance", {"offer_id": offer_id, "reason": "scripted"})


def _two_offers(sim: Simulator, app: Any) -> list[dict[str, Any]]:
    good = sorted((o for o in sim.offers.values() if within_policy(app.settings, o) and not o["rented"]
                   and o["host_id"] not in sim.bad_hosts), key=lambda o: (o["dph_total"], o["id"]))
    return good[:2]


def _app(make_app: Any, **policy: Any) -> Any:
    return make_app(policy={"max_instances": 1, "max_rents_per_hour": 100, **policy},
                    vast={"timeout": TIMEOUT_S, "max_attempts": 3, "settle_after": 600.0})


def _wait_for(pred: Any, what: str) -> None:
    """Wait (bounded) for the simulator's server thread to deliver a late request."""
    deadline = time.monotonic() + 15.0
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.02)


def _result_of(app: Any, name: str, tick: int) -> Any:
    return next(e for e in events_of(app, "tool.result", tick) if e.payload["name"] == name)


def test_lost_answer_and_failing_lookup_leave_the_rent_pending_and_counted(sim, make_app, fake_model):
    """Cap 1, two rents in one response. The first rent creates the instance and its answer is
    lost (500 after the action), and the listing taken to look for its label fails once. The
    result says pending (not failed), the second rent is refused by max_instances because the
    pending rent counts as live, and exactly one instance exists. The next tick adopts it."""
    app = _app(make_app)
    a, b = _two_offers(sim, app)
    sim.faults.update({"script": [{"method": "PUT", "path": "/api/v0/asks/", "action": "drop"},
                                  {"method": "GET", "path": "/api/v1/instances/", "action": "fail"}]})
    fake_model.enqueue(reply("two", tool_calls=[_rent(a["id"]), _rent(b["id"])]), reply("done"))
    assert run_tick(app).ok
    assert len(sim.instances) == 1
    assert len(rent_puts(sim)) == 1
    first = _result_of(app, "rent_instance", 1).payload
    assert first["effect"]["type"] == "rent_pending"
    assert first["output"].startswith("PENDING") and "rent_instance failed" not in first["output"]
    assert [e.payload["rule"] for e in events_of(app, "policy.blocked", 1)] == ["max_instances"]

    fake_model.enqueue(reply("ok"))
    sim.advance(sim.realism.listing_lag)  # vast.ai lists the new instance
    assert run_tick(app).ok
    iid = next(iter(sim.instances))
    assert [e.payload["instance_id"] for e in events_of(app, "instance.adopted")] == [iid]
    assert app.log.store.owned_instance_ids() == [iid]


def test_late_rent_stays_pending_and_counted_until_it_appears(sim, make_app, fake_model):
    """Cap 1, two rents in one response; the first reaches vast.ai only after the client's
    timeout. One listing without the label does not prove "not created": the model is told the
    rent is pending, the second rent is refused by max_instances, and when the late request
    lands there is one instance, adopted as ours by the next tick."""
    app = _app(make_app)
    a, b = _two_offers(sim, app)
    sim.faults.update({"late_seconds": LATE_S,
                       "script": [{"method": "PUT", "path": "/api/v0/asks/", "action": "late"}]})
    fake_model.enqueue(reply("two", tool_calls=[_rent(a["id"]), _rent(b["id"])]), reply("done"))
    assert run_tick(app).ok
    seen = tool_messages(fake_model.chat_requests[-1].json)
    assert "PENDING" in seen[0]["content"] and "so it was not created" not in seen[0]["content"]
    assert [e.payload["rule"] for e in events_of(app, "policy.blocked", 1)] == ["max_instances"]
    _wait_for(lambda: sim.offers[a["id"]]["rented"], "the late rent lands")
    assert len(sim.instances) == 1
    fake_model.enqueue(reply("ok"))
    sim.advance(sim.realism.listing_lag)  # vast.ai lists the new instance
    assert run_tick(app).ok
    assert [e.payload["instance_id"] for e in events_of(app, "instance.adopted")] == list(sim.instances)


def test_a_rent_never_created_settles_after_the_window_and_two_listings(sim, sim_clock, make_app, fake_model):
    """A rent answered 500 without vast.ai acting stays pending (counted against the caps) through
    the first listing even after ``vast.settle_after``; at the second listing past the window it is
    settled "not created" (rent.settled) and the cap admits a new rent."""
    app = _app(make_app)
    a, b = _two_offers(sim, app)
    sim.faults.update({"script": [{"method": "PUT", "path": "/api/v0/asks/", "action": "fail"}]})
    fake_model.enqueue(reply("one", tool_calls=[_rent(a["id"])]), reply("done"))
    assert run_tick(app).ok
    assert sim.instances == {}
    sim_clock.advance(601.0)
    fake_model.enqueue(reply("again", tool_calls=[_rent(b["id"])]), reply("done"))
    assert run_tick(app).ok
    assert events_of(app, "rent.settled") == []
    assert [e.payload["rule"] for e in events_of(app, "policy.blocked", 2)] == ["max_instances"]
    fake_model.enqueue(reply("again", tool_calls=[_rent(b["id"])]), reply("done"))
    assert run_tick(app).ok
    settled = events_of(app, "rent.settled")
    assert [e.payload["created"] for e in settled] == [False]
    assert len(sim.instances) == 1


def _own_one(sim: Simulator, app: Any, fake_model: FakeOpenAI) -> int:
    offer = good_offer(sim, app.settings)
    fake_model.enqueue(reply("rent", tool_calls=[_rent(offer["id"])]), reply("done"))
    assert run_tick(app).ok
    (iid,) = app.log.store.owned_instance_ids()
    sim.advance(sim.realism.listing_lag)  # listed from now on
    return iid


def _requests(sim: Simulator, method: str, part: str) -> list[dict[str, Any]]:
    return [r for r in list(sim.requests) if r["method"] == method and part in r["path"]]


def test_a_reboot_whose_answer_is_late_is_sent_once(sim, make_app, fake_model):
    """One owned instance; the reboot reaches vast.ai only after the client's timeout. The client
    does not send it again: one logged intent, one reboot request, and the result says the
    outcome is unknown rather than claiming a second attempt."""
    app = _app(make_app)
    iid = _own_one(sim, app, fake_model)
    sim.faults.update({"late_seconds": LATE_S,
                       "script": [{"method": "PUT", "path": "/api/v0/instances/reboot/", "action": "late"}]})
    fake_model.enqueue(reply("reboot", tool_calls=[("reboot_instance", {"instance_id": iid, "reason": "x"})]),
                       reply("done"))
    assert run_tick(app).ok
    time.sleep(LATE_S + 0.5)  # let a re-sent request, if any, land too
    assert len(_requests(sim, "PUT", "/reboot/")) == 1
    assert "unknown" in (_result_of(app, "reboot_instance", 2).payload.get("error") or "")


def test_a_destroy_whose_answer_is_lost_is_sent_once_and_settled_by_looking(sim, make_app, fake_model):
    """The destroy acts and answers 503 (retryable for reads): it is not re-sent; the instance is
    no longer listed, so the result says destroyed."""
    app = _app(make_app)
    iid = _own_one(sim, app, fake_model)
    sim.faults.update({"script": [{"method": "DELETE", "path": "/api/v0/instances/", "action": "drop"}]})
    fake_model.enqueue(reply("rm", tool_calls=[("destroy_instance", {"instance_id": iid, "reason": "x"})]),
                       reply("done"))
    assert run_tick(app).ok
    assert len(_requests(sim, "DELETE", "/instances/")) == 1
    res = _result_of(app, "destroy_instance", 2)
    assert res.payload["ok"] and res.payload["effect"]["type"] == "destroyed"


def test_a_failed_destroy_within_the_listing_lag_is_not_recorded_as_done_and_still_counts(
        sim, make_app, fake_model):
    """Rented this tick, so vast.ai does not list it yet; the destroy answers 500 and did nothing. Absence
    from a listing within the lag proves nothing: the result says the outcome is unknown, the instance stays
    ours and counts against max_instances (a second rent is refused), and once listed it is there, alive."""
    app = _app(make_app)
    offer = good_offer(sim, app.settings)
    fake_model.enqueue(reply("rent", tool_calls=[_rent(offer["id"])]), reply("done"))
    assert run_tick(app).ok
    (iid,) = app.log.store.owned_instance_ids()
    sim.faults.update({"script": [{"method": "DELETE", "path": "/api/v0/instances/", "action": "fail"}]})
    fake_model.enqueue(reply("rm", tool_calls=[("destroy_instance", {"instance_id": iid, "reason": "x"})]),
                       reply("done"))
    assert run_tick(app).ok
    res = _result_of(app, "destroy_instance", 2)
    assert not res.payload["ok"] and "not listed yet" in res.payload["error"]
    assert iid in sim.instances and app.log.store.owned_instance_ids() == [iid]
    other = next(o for o in _two_offers(sim, app) if o["id"] != offer["id"])
    fake_model.enqueue(reply("rent", tool_calls=[_rent(other["id"])]), reply("done"))
    assert run_tick(app).ok
    assert not _result_of(app, "rent_instance", 3).payload["ok"]
    assert len([i for i in sim.instances.values() if i.get("label")]) == 1
    sim.advance(sim.realism.listing_lag)
    fake_model.enqueue(reply("look"))
    assert run_tick(app).ok
    assert app.log.store.owned_instance_ids() == [iid] and not events_of(app, "instance.gone", 4)


def test_reconcile_never_adopts_the_instance_it_just_destroyed(sim, make_app, fake_model):
    """The process stopped after logging a destroy intent (tool.called committed, no result).
    The next tick's reconcile completes the destroy and does not then adopt the same instance
    from the listing it took before destroying: no instance.adopted, the instance is destroyed
    in the read model and in the simulator."""
    app = _app(make_app)
    iid = _own_one(sim, app, fake_model)
    app.log.append("tool.called", {"call_id": "call-rm", "name": "destroy_instance",
                                   "arguments": f'{{"instance_id": {iid}, "reason": "x"}}',
                                   "idempotency_key": "0123456789ab", "side_effect": True}, "tool", 2)
    fake_model.enqueue(reply("ok"))
    assert run_tick(app).ok
    assert iid not in sim.instances
    adopted = [e for e in events_of(app, "instance.adopted") if e.payload["instance_id"] == iid]
    assert adopted == []
    assert app.log.store.owned_instance_ids() == []


def _plant_orphan(sim: Simulator, app: Any) -> int:
    base = f"{app.settings.fleet.label_prefix}{app.settings.agent_id}-"
    offer = good_offer(sim, app.settings)
    return sim.create_instance(offer["id"], label=f"{base}feedfeedfeed")


def test_an_instance_no_event_of_ours_knows_is_out_of_reach(sim, make_app, fake_model):
    """With destroy_orphans false, an instance carrying our label prefix that no event of ours
    rented or adopted cannot be destroyed, rebooted or have its logs read: each call is refused
    by policy (not_ours) and no such request reaches the simulator."""
    app = _app(make_app, destroy_orphans=False, max_instances=4)
    orphan = _plant_orphan(sim, app)
    args = {"instance_id": orphan, "reason": "x"}
    fake_model.enqueue(reply("try", tool_calls=[("destroy_instance", args), ("reboot_instance", args),
                                                ("get_instance_logs", {"instance_id": orphan})]),
                       reply("done"))
    assert run_tick(app).ok
    assert orphan in sim.instances
    assert _requests(sim, "DELETE", "/instances/") == []
    assert _requests(sim, "PUT", "/reboot/") == [] and _requests(sim, "PUT", "/request_logs/") == []
    assert sorted(e.payload["name"] for e in events_of(app, "policy.blocked")) == \
        ["destroy_instance", "get_instance_logs", "reboot_instance"]


def test_the_orphan_alert_resolves_when_the_orphan_is_gone(sim, make_app, fake_model):
    """An orphan raises a critical alert; once the instance is gone from the account, the next
    tick resolves that alert."""
    app = _app(make_app, destroy_orphans=False, max_instances=4)
    orphan = _plant_orphan(sim, app)
    fake_model.enqueue(reply("ok"))
    assert run_tick(app).ok
    alert = next(a for a in app.log.store.alerts(all_=True) if a.dedup_key == f"orphan:{orphan}")
    assert alert.status == "open"
    with sim._lock:
        sim._destroy(orphan, sim.now())
    fake_model.enqueue(reply("ok"))
    assert run_tick(app).ok
    alert = next(a for a in app.log.store.alerts(all_=True) if a.dedup_key == f"orphan:{orphan}")
    assert alert.status == "resolved"


def test_the_caps_count_this_ticks_rents_even_when_vast_reuses_an_id(sim, make_app, fake_model):
    """vast.ai hands out an id the log already knows (a destroyed instance's). The ownership
    upsert skips it, but the instance cap still counts the rent: with a cap of 1 the second rent
    of the same response is refused."""
    app = _app(make_app)
    iid = _own_one(sim, app, fake_model)
    fake_model.enqueue(reply("rm", tool_calls=[("destroy_instance", {"instance_id": iid, "reason": "x"})]),
                       reply("done"))
    assert run_tick(app).ok
    a, b = _two_offers(sim, app)
    sim._next_id = iid  # the next instance gets the destroyed one's id
    fake_model.enqueue(reply("two", tool_calls=[_rent(a["id"]), _rent(b["id"])]), reply("done"))
    assert run_tick(app).ok
    assert len(sim.instances) == 1
    assert [e.payload["rule"] for e in events_of(app, "policy.blocked", 3)] == ["max_instances"]


class _RefusedOnce(httpx.BaseTransport):
    """Real HTTP to the simulator, except that the first connection is refused before anything is sent."""

    def __init__(self) -> None:
        self.real = httpx.HTTPTransport()
        self.refused = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if not self.refused:
            self.refused += 1
            raise httpx.ConnectError("connection refused", request=request)
        return self.real.handle_request(request)


def test_a_side_effect_is_sent_again_only_when_the_connection_was_refused(sim, sim_server):
    """A reboot whose first connection is refused (nothing reached vast.ai) is sent again and lands
    once; a destroy sent for an instance already gone answers no_such_instance, which counts as done."""
    offer = good_offer_any(sim)
    iid = sim.create_instance(offer["id"], label="x")
    transport = _RefusedOnce()
    wall = ManualClock(0.0)
    sim.wall = wall  # the client's waits move the clock the simulator's rate limit runs on
    with VastClient(sim_server.url, sim.api_key, transport=transport, sleep=wall.advance, monotonic=wall) as vast:
        vast.reboot(iid)
        assert transport.refused == 1 and len(_requests(sim, "PUT", "/reboot/")) == 1
        assert vast.destroy(iid) is True
        assert vast.destroy(iid) is True  # already gone: no_such_instance is done
    assert len(_requests(sim, "DELETE", "/instances/")) == 2 and iid not in sim.instances


def good_offer_any(sim: Simulator) -> dict[str, Any]:
    return next(o for o in sorted(sim.offers.values(), key=lambda o: o["id"]) if not o["rented"])
