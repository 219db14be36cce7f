"""A credit run-out is a money event, not a host failure. At $0 vast.ai stops every instance (the disks kept,
storage still billed), refuses rents and starts with HTTP 402; after a top-up the instances can be started
again. End to end over HTTP against the simulator: the fleet is kept, no host is blamed, rents are refused in
code below the credit reserve, 402s do not use up the hourly rent limit, and a top-up restarts the kept
instances with their disks."""

from __future__ import annotations

from typing import Any

import pytest

from agent.clients.vast import VastError
from agent.runtime.tick import run_tick
from agent.sim import Simulator
from agent.sim.instances import CREDIT_MSG
from tests.conftest import events_of, good_offer, plant_ours, rent_puts
from tests.fakes.openai_server import reply


def _fleet(app: Any, sim: Simulator, n: int) -> list[int]:
    """``n`` instances of ours, running."""
    ids = []
    for k in range(n):
        ids.append(plant_ours(app, sim, good_offer(sim, app.settings)["id"], key=f"feedc0ffee{k:02d}"))
    sim.advance(600)
    assert all(sim.instances[i]["actual_status"] == "running" for i in ids)
    return ids


def _open(app: Any, prefix: str) -> list[Any]:
    return [a for a in app.log.store.open_alerts() if a.dedup_key.startswith(prefix)]


def _starts(sim: Simulator) -> list[dict[str, Any]]:
    return [r for r in sim.requests if r["method"] == "PUT" and r["path"].startswith("/api/v0/instances/")
            and (r["body"] or {}).get("state") == "running"]


def test_the_simulator_stops_every_instance_at_zero_and_refuses_rents_and_starts(sim: Simulator, vast: Any):
    offer = sim.find_offer()
    iid = sim.create_instance(offer["id"])
    sim.advance(600)
    sim.set_credit(0.0)
    assert sim.instances[iid]["actual_status"] == "stopped" and sim.instances[iid]["status_msg"] == CREDIT_MSG
    before = sim.balance
    sim.advance(3600)
    assert sim.balance < before  # the disk is kept and its storage still bills
    user = vast.current_user()
    assert user.credit is not None and user.credit < 0
    with pytest.raises(VastError) as e:
        vast.start(iid)
    assert e.value.status == 402
    out = vast.rent(sim.find_offer()["id"], image="x", disk=10, label="x", onstart=None, env={})
    assert out.status == "rejected" and out.http_status == 402

    sim.set_credit(50.0)
    assert sim.instances[iid]["actual_status"] == "stopped"  # a top-up starts nothing by itself
    vast.start(iid)
    sim.advance(120)
    assert sim.instances[iid]["actual_status"] == "running" and iid not in sim.destroyed


def test_a_credit_stop_keeps_the_fleet_and_a_top_up_restarts_it(sim: Simulator, make_app):
    app = make_app(provider="rules", policy={"max_instances": 3})
    ids = _fleet(app, sim, 3)
    sim.pending = 200  # demand: the rules would rent more if they could
    sim.set_credit(0.0)

    r = run_tick(app)
    assert r.ok, r.reason
    assert not sim.destroyed  # no disk thrown away
    assert all(sim.instances[i]["actual_status"] == "stopped" for i in ids)
    assert not events_of(app, "host.failed")  # no healthy host blamed
    assert not events_of(app, "host.excluded")
    assert not _open(app, "dead:")  # not "stopped without our asking"
    [credit] = _open(app, "credit:")
    assert credit.severity == "critical" and "credit" in credit.title
    [low] = _open(app, "balance:low")
    assert low.severity == "critical"
    [stop] = events_of(app, "credit.stopped")
    assert sorted(stop.payload["instance_ids"]) == sorted(ids)
    assert not rent_puts(sim)  # nothing rented into a 402

    sim.advance(600)
    assert run_tick(app).ok
    assert not sim.destroyed and not events_of(app, "host.failed") and not rent_puts(sim)

    sim.set_credit(100.0)
    assert run_tick(app).ok
    assert sorted(e.payload["instance_id"] for e in events_of(app, "system.start")) == sorted(ids)
    assert len(_starts(sim)) == 3
    sim.advance(120)
    assert all(sim.instances[i]["actual_status"] == "running" for i in ids)  # the same instances, their disks
    assert not sim.destroyed
    assert run_tick(app).ok
    assert not _open(app, "credit:") and not _open(app, "balance:low")
    assert len(_starts(sim)) == 3  # started once each


def test_rents_are_refused_in_code_below_the_reserve_with_the_rule_named(sim: Simulator, make_app, fake_model):
    app = make_app(policy={"credit_reserve": 20.0})
    sim.set_credit(15.0)
    offer = good_offer(sim, app.settings)
    fake_model.enqueue(reply(tool_calls=[("rent_instance", {"offer_id": offer["id"], "reason": "scripted"})]),
                       reply("ok"))
    assert run_tick(app).ok
    [blocked] = events_of(app, "policy.blocked")
    assert blocked.payload["rule"] == "credit_exhausted"
    assert "$15.00" in blocked.payload["detail"] and "$20.00" in blocked.payload["detail"]
    assert not rent_puts(sim)
    [low] = _open(app, "balance:low")
    assert low.severity == "critical"  # at the reserve the low-credit alert is critical


@pytest.mark.usefixtures("backend")  # the count of refused rents is SQL of its own on each backend
def test_402_refusals_do_not_use_up_the_hourly_rent_limit(sim: Simulator, make_app, fake_model):
    app = make_app(policy={"max_rents_per_hour": 1, "credit_reserve": 0.0})
    offer = good_offer(sim, app.settings)["id"]
    rent = ("rent_instance", {"offer_id": offer, "reason": "scripted"})

    def run_out(body: dict[str, Any]) -> Any:
        sim.set_credit(0.0)  # the credit runs out between the observation and the rents
        return reply(tool_calls=[rent, rent])

    fake_model.enqueue(run_out, reply("ok"))
    assert run_tick(app).ok
    assert [r["status"] for r in rent_puts(sim)] == [402]  # after a 402 the next rent is refused in code
    assert [e.payload["rule"] for e in events_of(app, "policy.blocked")] == ["credit_exhausted"]

    sim.set_credit(100.0)  # the top-up: the refused rent spent nothing and does not count against the hour
    fake_model.enqueue(reply(tool_calls=[rent]), reply("ok"))
    assert run_tick(app).ok
    assert [r["status"] for r in rent_puts(sim)] == [402, 200]
    assert not [e for e in events_of(app, "policy.blocked") if e.payload["rule"] == "max_rents_per_hour"]


def test_doctor_and_status_show_the_spendable_credit(sim: Simulator, make_app):
    from agent.cli.doctor import check_vast
    from agent.cli.status import format_text
    from agent.runtime import status

    app = make_app(provider="rules", policy={"max_instances": 2})
    _fleet(app, sim, 2)
    sim.advance(3600)  # a day's charges: the invoice balance is negative, the credit what is left
    sim.set_credit(0.0)
    assert run_tick(app).ok
    sim.advance(600)
    user = app.vast().current_user()
    assert user.credit is not None and user.balance is not None and user.credit != user.balance
    check = check_vast(app.vast(), app.settings.vast.url)
    assert check.ok and f"credit ${user.credit:,.2f} spendable (invoice balance ${user.balance:,.2f})" in check.detail
    f = status.fleet(app.log)
    assert f is not None
    text = format_text({"daemon": {"running": False}, "fleet": f, "last_tick": None, "alerts": []})
    assert f"credit ${f['balance']:,.2f} spendable" in text and "2 stopped for lack of credit" in text


def test_the_low_credit_alert_states_the_runway_and_turns_critical_at_the_reserve(make_app):
    from agent import feedback

    app = make_app(policy={"credit_reserve": 2.0})

    def obs(credit: float) -> dict[str, Any]:
        return {"balance": credit, "fleet_dph": 4.1, "instances": [
            {"id": 7, "ours": True, "status": "running", "dph": 4.1, "age_s": 60, "host_id": 3}]}

    feedback.check_conditions(app.log, app.settings, obs(4.1 * 160 / 60), 1)
    [a] = _open(app, "balance:low")
    assert a.severity == "warning" and a.title.endswith("credit lasts 2 h 40 min at $4.10/h")
    feedback.check_conditions(app.log, app.settings, obs(1.5), 2)
    [a] = _open(app, "balance:low")
    assert a.severity == "critical" and a.title.endswith("credit lasts 22 min at $4.10/h")
    [changed] = events_of(app, "alert.severity_changed")
    assert changed.payload == {"alert_id": a.id, "severity": "critical", "previous": "warning"}
    feedback.check_conditions(app.log, app.settings, obs(-0.5), 3)
    [a] = _open(app, "balance:low")
    assert a.severity == "critical" and "credit exhausted" in a.title
    assert len(events_of(app, "alert.severity_changed")) == 1  # critical already: no change to log
    assert app.log.rebuild_check() == []  # the read model follows the severity change


def test_a_top_up_starts_only_what_the_policy_in_force_still_wants(sim: Simulator, make_app, fake_model):
    from agent.fleet import steering

    app = make_app(policy={"max_instances": 3})
    ids = _fleet(app, sim, 3)
    sim.set_credit(0.0)
    fake_model.enqueue(reply("nothing to do"), reply("nothing to do"))
    assert run_tick(app).ok
    steering.set_override(app.log, app.settings, "max_instances", "2", by="ops", reason="smaller after the run-out",
                          until=None)
    sim.set_credit(100.0)
    assert run_tick(app).ok
    started = [e.payload["instance_id"] for e in events_of(app, "system.start")]
    assert started == sorted(ids)[:2] and len(_starts(sim)) == 2
    sim.advance(120)
    assert sim.instances[sorted(ids)[2]]["actual_status"] == "stopped"  # kept, for the model to decide
    assert not sim.destroyed and not events_of(app, "host.failed")
    fake_model.enqueue(reply("nothing to do"))
    assert run_tick(app).ok
    [kept] = _open(app, "credit:")  # topped up: no longer critical, still says what is kept
    assert kept.severity == "warning" and kept.title.startswith("1 instance of ours stopped by vast.ai")
    assert len(_starts(sim)) == 2
