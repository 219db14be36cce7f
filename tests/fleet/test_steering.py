"""Steering that binds: policy overrides, pause, host exclusion and manual actions are events (who,
when, why), reach the model as tagged operator messages, and are enforced in the tool pipeline
whatever the model asks; the simulator sees no call they forbid."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent import cli
from agent.errors import FleetAgentError, UsageError
from agent.fleet import steering
from agent.runtime.tick import run_tick
from tests.conftest import events_of, mutating_requests, plant_ours, rent_puts, tool_messages, within_policy
from tests.fakes.openai_server import reply


def _rent(offer_id: int) -> tuple[str, dict[str, Any]]:
    return ("rent_instance", {"offer_id": offer_id, "reason": "scripted"})


def _good_offers(sim: Any, settings: Any, n: int) -> list[dict[str, Any]]:
    return sorted((o for o in sim.offers.values() if within_policy(settings, o) and not o["rented"]
                   and o["host_id"] not in sim.bad_hosts), key=lambda o: (o["dph_total"], o["id"]))[:n]


def renter(app: Any) -> tuple[Any, Any]:
    """One tick's tool context (refreshed once, as a tick does) and ``rent(n, offer)``: the model's n-th
    rent_instance call through the tool pipeline in it, as (its outcome, whether a guardrail blocked it)."""
    from agent.fleet.pipeline import run_tool_call
    from agent.fleet.policy import Policy
    from agent.fleet.toolkit import ToolContext, load_tools

    ctx = ToolContext(settings=app.settings, log=app.log, vast=app.vast(), demand=None,
                      policy=Policy(app.settings), tick=1)
    ctx.refresh()
    tools = load_tools()

    def rent(n: int, offer: dict[str, Any]) -> tuple[Any, bool]:
        call = {"id": f"c{n}", "name": "rent_instance",
                "arguments": json.dumps({"offer_id": offer["id"], "reason": "s"})}
        return run_tool_call(tools, ctx, call, dry_run=False)  # type: ignore[arg-type]

    return ctx, rent


def _cli(app: Any, *argv: str) -> int:
    """Run a command's real parser and handler against ``app`` (the test's clock and simulator)."""
    args = cli.build_parser().parse_args(list(argv))
    return int(args.func(args, app))


def _contents(fake_model: Any) -> list[str]:
    return [str(m.get("content") or "") for m in fake_model.chat_requests[-1].json["messages"]]


def test_override_binds_is_shown_to_the_model_and_expires_as_an_event(sim, make_app, fake_model):
    """`policy set max_instances 1 --for 2h` refuses the model's second rent (max_instances, counting the
    override), the model sees '[policy override #N · alice] max_instances 1 until ...' and the restated
    steering; after 2 h the next tick logs the expiry and the config's limit is in force again."""
    app = make_app(policy={"max_rents_per_hour": 100})
    offers = _good_offers(sim, app.settings, 3)
    assert _cli(app, "policy", "set", "max_instances", "1", "--for", "2h", "--reason", "budget review",
                "--by", "alice") == 0
    ov = events_of(app, "policy.overridden")[0]
    fake_model.enqueue(reply("two", tool_calls=[_rent(offers[0]["id"]), _rent(offers[1]["id"])]), reply("done"))
    assert run_tick(app).ok
    assert len(rent_puts(sim)) == 1
    assert [b.payload["rule"] for b in events_of(app, "policy.blocked")] == ["max_instances"]
    seen = _contents(fake_model)
    tag = f"[policy override #{ov.seq} · alice] max_instances 1 until "
    assert any(c.startswith(tag) and c.endswith(" — budget review") for c in seen)
    assert any(c.startswith("[system · steering in force]") and tag in c for c in seen)

    sim.advance(2 * 3600 + 60)
    fake_model.enqueue(reply("again", tool_calls=[_rent(offers[2]["id"])]), reply("done"))
    assert run_tick(app).ok
    ended = events_of(app, "policy.override_ended")
    assert [(e.payload["override_id"], e.payload["how"]) for e in ended] == [(ov.seq, "expired")]
    assert len(rent_puts(sim)) == 2
    assert f"[policy override #{ov.seq} ended · system] max_instances back to 8 (expired)" in _contents(fake_model)


@pytest.mark.parametrize(("key", "value", "why"), [
    ("max_instances", "9", "may only tighten"),
    ("min_reliability", "0.5", "may only tighten"),
    ("allowed_gpus", "RTX 4090,H100 SXM", "may only tighten"),
    ("dry_run", "true", "cannot be overridden"),
    ("max_total_dph", "lots", "is not valid"),
])
def test_loosening_or_bad_overrides_are_refused_and_nothing_is_logged(make_app, key, value, why):
    """An override that loosens the config (a higher cap, a lower reliability floor, a GPU outside the
    list), a key that cannot be overridden or a bad value: one clear error, nothing appended."""
    app = make_app()
    before = app.log.last_seq()
    with pytest.raises(UsageError) as e:
        _cli(app, "policy", "set", key, value, "--reason", "x")
    assert why in str(e.value) and key in str(e.value)
    assert app.log.last_seq() == before


def test_policy_show_reset_and_json(make_app, capsys):
    """`policy show --json` gives config, effective values and overrides; `policy reset` ends the
    override (an event the model sees) and the config value is effective again."""
    app = make_app()
    assert _cli(app, "policy", "set", "allowed_gpus", "RTX 4090", "--reason", "only 4090s today",
                "--by", "bob") == 0
    capsys.readouterr()
    assert _cli(app, "policy", "show", "--json") == 0
    view = json.loads(capsys.readouterr().out)
    assert view["effective"]["allowed_gpus"] == ["RTX 4090"]
    assert view["config"]["allowed_gpus"] == app.settings.policy.allowed_gpus
    assert [o["key"] for o in view["overrides"]] == ["allowed_gpus"]
    assert _cli(app, "policy", "reset", "allowed_gpus", "--reason", "done") == 0
    assert steering.effective_policy(app.settings, app.log) == app.settings.policy
    with pytest.raises(UsageError):
        _cli(app, "policy", "reset", "allowed_gpus")


def test_pause_refuses_every_side_effect_while_ticks_still_observe(sim, make_app, fake_model):
    """While paused, the model's rent, destroy and reboot are refused ('paused', with who and why), the
    simulator gets no mutating call, the tick still observes and completes, and the model is told it is
    paused; after `resume` the same rent goes through."""
    app = make_app()
    offer, other = _good_offers(sim, app.settings, 2)
    iid = plant_ours(app, sim, other["id"])
    assert _cli(app, "pause", "--reason", "host migration", "--by", "alice") == 0
    fake_model.enqueue(reply("act", tool_calls=[_rent(offer["id"]),
                                                ("destroy_instance", {"instance_id": iid, "reason": "s"}),
                                                ("reboot_instance", {"instance_id": iid, "reason": "s"})]),
                       reply("done"))
    r = run_tick(app)
    assert r.ok
    assert mutating_requests(sim) == []
    assert {b.payload["rule"] for b in events_of(app, "policy.blocked")} == {"paused"}
    assert len(events_of(app, "tick.started")) == 1
    seen = _contents(fake_model)
    assert any(c.startswith("[operator pause · alice] paused until resumed") for c in seen)
    assert any("- PAUSED (#" in c and "host migration" in c for c in seen)
    refusals = [m["content"] for m in tool_messages(fake_model.chat_requests[-1].json)]
    assert all("blocked by policy: paused (paused by alice since" in c for c in refusals)

    assert _cli(app, "resume", "--by", "alice") == 0
    fake_model.enqueue(reply("rent", tool_calls=[_rent(offer["id"])]), reply("done"))
    assert run_tick(app).ok
    assert len(rent_puts(sim)) == 1
    with pytest.raises(UsageError):
        _cli(app, "resume")
    assert _cli(app, "replay", "--verify") == 0  # every request re-derives from the log, steering included


def test_a_timed_pause_ends_by_itself_with_an_event(sim, make_app, fake_model):
    """`pause --for 30m`: a tick after 30 minutes logs the pause's expiry (the model sees it) and runs
    actions again."""
    app = make_app()
    offer = _good_offers(sim, app.settings, 1)[0]
    assert _cli(app, "pause", "--for", "30m", "--reason", "lunch") == 0
    assert steering.paused(app.log) is not None
    sim.advance(31 * 60)
    assert steering.paused(app.log) is None
    fake_model.enqueue(reply("rent", tool_calls=[_rent(offer["id"])]), reply("done"))
    assert run_tick(app).ok
    assert [e.payload["how"] for e in events_of(app, "fleet.resumed")] == ["expired"]
    assert len(rent_puts(sim)) == 1


def test_excluded_hosts_are_refused_left_out_of_search_and_the_model_can_only_add(sim, make_app, fake_model):
    """A host excluded by `hosts exclude` (operator) or by the model's exclude_host tool is left out of
    search_offers and a rent on it is refused ('excluded_hosts'); no tool includes a host again, and
    `hosts include` does."""
    app = make_app(policy={"max_rents_per_hour": 100})
    a, b = _good_offers(sim, app.settings, 2)
    assert _cli(app, "hosts", "exclude", str(a["host_id"]), "--for", "7d", "--reason", "flaky disk") == 0
    fake_model.enqueue(reply("look", tool_calls=[("search_offers", {"limit": 25}), _rent(a["id"]),
                                                 ("exclude_host", {"host_id": b["host_id"], "reason": "slow"}),
                                                 _rent(b["id"])]), reply("done"))
    assert run_tick(app).ok
    assert rent_puts(sim) == []
    assert [x.payload["rule"] for x in events_of(app, "policy.blocked")] == ["excluded_hosts", "excluded_hosts"]
    search = tool_messages(fake_model.chat_requests[-1].json)[0]["content"]
    assert f"| {a['host_id']} |" not in search and "offers on excluded hosts left out" in search
    assert [x.payload["source"] for x in events_of(app, "host.excluded")] == ["operator", "model"]
    names = [t["function"]["name"] for t in app.tool_specs()]
    assert "exclude_host" in names and not [n for n in names if "include" in n]
    assert _cli(app, "hosts", "include", str(b["host_id"]), "--reason", "fixed") == 0
    fake_model.enqueue(reply("rent", tool_calls=[_rent(b["id"])]), reply("done"))
    assert run_tick(app).ok
    assert len(rent_puts(sim)) == 1


def test_config_excluded_host_cannot_be_included_from_the_cli(sim, make_app):
    """A host in policy.excluded_hosts is refused for rents and `hosts include` says to edit the config."""
    offer = _good_offers(sim, make_app().settings, 1)[0]
    app = make_app(policy={"excluded_hosts": [offer["host_id"]]})
    assert offer["host_id"] in steering.excluded_hosts(app.settings, app.log)
    with pytest.raises(UsageError) as e:
        _cli(app, "hosts", "include", str(offer["host_id"]))
    assert "policy.excluded_hosts" in str(e.value)


def test_two_failures_on_a_host_within_a_day_exclude_it_automatically_with_an_alert(sim, make_app, fake_model):
    """Two instances of ours on one host that exit are logged as host failures; the second excludes the
    host for policy.host_failure_exclusion with an alert, and a rent there is refused."""
    app = make_app(policy={"host_failure_exclusion": 3600.0})

    def free_on(host: int) -> list[dict[str, Any]]:
        return sorted((o for o in sim.offers.values() if o["host_id"] == host and not o["rented"]),
                      key=lambda o: o["id"])

    # The rent refused must be of an offer within policy (the fleet's disk fits, the price caps hold); the
    # two instances that fail may have taken any other offers on its host, since a failure counts against
    # the host whatever the offer. So: the eligible offer whose host holds the most free offers.
    target = max((o for o in sim.offers.values() if not o["rented"] and within_policy(app.settings, o)),
                 key=lambda o: (len(free_on(o["host_id"])), -o["id"]))
    host = target["host_id"]
    failing = [o for o in free_on(host) if o["id"] != target["id"]][:2]
    assert len(failing) == 2, f"host {host} holds {len(failing) + 1} free offers; the test needs 3"
    ids = [plant_ours(app, sim, o["id"], key=f"k{n:011d}") for n, o in enumerate(failing)]
    for iid in ids:
        sim.instances[iid]["actual_status"] = "exited"
        sim.instances[iid]["_next"] = None
    fake_model.enqueue(reply("rent", tool_calls=[_rent(target["id"])]), reply("done"))
    assert run_tick(app).ok
    assert sorted(e.payload["instance_id"] for e in events_of(app, "host.failed")) == sorted(ids)
    assert [(e.payload["host_id"], e.payload["source"]) for e in events_of(app, "host.excluded")] == [(host, "system")]
    assert app.log.store.live_alerts(key=f"host:excluded:{host}")
    assert [b.payload["rule"] for b in events_of(app, "policy.blocked")] == ["excluded_hosts"]
    sim.advance(3700)
    fake_model.enqueue(reply("nothing"))
    assert run_tick(app).ok
    assert [e.payload["how"] for e in events_of(app, "host.included")] == ["expired"]
    assert len(events_of(app, "host.failed")) == 2  # each failure counted once


def test_operator_destroy_goes_through_the_pipeline_and_refuses_not_ours(sim, make_app, fake_model, capsys):
    """`destroy ID --yes --reason` on ours: operator.destroy, then an intent with an idempotency key and
    the operator's name, the DELETE, the result; the model sees who and why. An instance that is not ours
    is refused (nothing logged, nothing sent) unless --force. Without --yes and no terminal, refused."""
    app = make_app()
    a, b = _good_offers(sim, app.settings, 2)
    ours = plant_ours(app, sim, a["id"])
    foreign = sim.create_instance(b["id"], label="someone-else")
    before = app.log.last_seq()
    with pytest.raises(UsageError) as e:
        _cli(app, "destroy", str(foreign), "--yes", "--reason", "cleanup")
    assert "not ours" in str(e.value) and "--force" in str(e.value)
    with pytest.raises(UsageError):
        _cli(app, "destroy", str(ours), "--reason", "cleanup")  # no --yes, stdin is not a terminal
    assert app.log.last_seq() == before and mutating_requests(sim) == []

    assert _cli(app, "destroy", str(ours), "--yes", "--reason", "stuck in loading", "--by", "alice") == 0
    assert ours not in sim.instances
    called = events_of(app, "tool.called")[-1].payload
    assert called["name"] == "destroy_instance" and called["by"] == "alice" and called["idempotency_key"]
    assert events_of(app, "tool.result")[-1].payload["effect"] == {"type": "destroyed", "instance_id": ours}
    assert app.log.store.instance(ours).status == "destroyed"
    assert _cli(app, "destroy", str(foreign), "--yes", "--force", "--reason", "stray") == 0
    assert foreign not in sim.instances
    fake_model.enqueue(reply("seen"))
    assert run_tick(app).ok
    seen = _contents(fake_model)
    assert f"[operator destroy · alice] instance {ours} — stuck in loading" in seen
    assert any(c.startswith("[late tool result · call op_") and f"destroyed instance {ours}" in c for c in seen)


def test_an_operator_destroy_interrupted_after_its_intent_is_completed_by_reconcile(sim, make_app, fake_model):
    """A crash between the operator's logged intent and the call: the next tick's reconcile completes
    the destroy (it is idempotent) and records a recovered result."""
    app = make_app()
    ours = plant_ours(app, sim, _good_offers(sim, app.settings, 1)[0]["id"])
    e = app.log.append("operator.destroy", {"instance_id": ours, "by": "alice", "reason": "x"}, "operator")
    app.log.append("tool.called", {"call_id": f"op_{e.seq}", "name": "destroy_instance",
                                   "arguments": json.dumps({"instance_id": ours, "reason": "x"}),
                                   "idempotency_key": "abc123abc123", "side_effect": True, "by": "alice"},
                   "tool")
    fake_model.enqueue(reply("ok"))
    assert run_tick(app).ok
    assert ours not in sim.instances
    res = [r.payload for r in events_of(app, "tool.result") if r.payload["call_id"] == f"op_{e.seq}"]
    assert len(res) == 1 and res[0]["recovered"] and res[0]["ok"]


def test_drain_pauses_then_destroys_all_of_ours_and_leaves_others(sim, make_app, capsys):
    """`drain --yes` pauses, destroys every instance of ours through the log, leaves others alone."""
    app = make_app()
    a, b, c = _good_offers(sim, app.settings, 3)
    ours = [plant_ours(app, sim, a["id"], key="aaaaaaaaaaaa"), plant_ours(app, sim, b["id"], key="bbbbbbbbbbbb")]
    foreign = sim.create_instance(c["id"], label="someone-else")
    assert _cli(app, "drain", "--yes", "--reason", "end of campaign") == 0
    assert sorted(sim.instances) == [foreign]
    assert sorted(e.payload["instance_id"] for e in events_of(app, "operator.destroy")) == sorted(ours)
    assert steering.paused(app.log) is not None
    kinds = [e.kind for e in app.log.read(0) if e.kind in ("operator.drain", "fleet.paused", "operator.destroy")]
    assert kinds == ["operator.drain", "fleet.paused", "operator.destroy", "operator.destroy"]
    assert "drained: 2 of 2 instances destroyed" in capsys.readouterr().out


def test_instances_lists_ours_and_others_with_status_since_and_json(sim, make_app, fake_model, capsys):
    """`instances` lists every instance on the account: ours or not, status and since when (from the
    log's observations), age, $/h, host and label; --json gives the same rows."""
    app = make_app()
    a, b = _good_offers(sim, app.settings, 2)
    ours = plant_ours(app, sim, a["id"])
    foreign = sim.create_instance(b["id"], label="someone-else")
    sim.advance(600)
    fake_model.enqueue(reply("ok"))
    assert run_tick(app).ok
    sim.advance(60)
    capsys.readouterr()
    assert _cli(app, "instances", "--json") == 0
    rows = {r["id"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows[ours]["ours"] and not rows[foreign]["ours"]
    assert rows[foreign]["label"] == "someone-else" and rows[ours]["status"] == "running"
    assert rows[ours]["status_since"] == events_of(app, "tick.started")[0].ts
    assert rows[ours]["age_s"] == 660
    assert _cli(app, "instances") == 0
    text = capsys.readouterr().out.splitlines()
    assert len(text) == 3 and any(line.startswith(f"{foreign} ") and " no " in line for line in text)


def test_status_shows_pause_and_overrides(make_app):
    """status's JSON and text carry the pause (who, why, until) and each override in force."""
    from agent.cli.status import format_text
    from agent.runtime import status

    app = make_app()
    steering.pause(app.log, by="alice", reason="maintenance", until=None)
    steering.set_override(app.log, app.settings, "max_instances", "2", by="bob", reason="review", until=None)
    st = status.collect(app)
    assert st["steering"]["paused"]["by"] == "alice"
    assert [o["key"] for o in st["steering"]["overrides"]] == ["max_instances"]
    text = format_text(st)
    assert "PAUSED by alice" in text and "policy override #" in text and "max_instances 2 until reset" in text


def test_excluding_an_already_excluded_host_changes_nothing(make_app):
    """exclude_host from the model on a host already excluded leaves the log unchanged (no duplicate)."""
    from agent.fleet.policy import Policy
    from agent.fleet.toolkit import ToolContext, load_tools

    app = make_app()
    steering.exclude_host(app.log, 77, by="alice", reason="r", source="operator", until=None)
    ctx = ToolContext(settings=app.settings, log=app.log, vast=app.vast(), demand=None,
                      policy=Policy(app.settings), tick=1)
    tool = load_tools().get("exclude_host")
    before = app.log.last_seq()
    out = tool.handler(ctx, {"host_id": 77, "reason": "again"})  # type: ignore[call-arg]
    assert out.ok and "already excluded" in out.output
    assert app.log.last_seq() == before
    with pytest.raises(FleetAgentError):
        steering.include_host(app.log, app.settings, 78, by="x", reason=None)


def test_a_pause_stops_reconcile_from_destroying_orphans_too(sim, make_app, fake_model):
    """With policy.destroy_orphans, an orphan carrying our label is only alerted on while paused; after
    `resume` the next tick's reconcile destroys it."""
    app = make_app(policy={"destroy_orphans": True})
    s = app.settings
    offer = _good_offers(sim, s, 1)[0]
    iid = sim.create_instance(offer["id"], label=f"{s.fleet.label_prefix}{s.agent_id}-0rphan0000001")
    steering.pause(app.log, by="alice", reason="investigating", until=None)
    fake_model.enqueue(reply("ok"))
    assert run_tick(app).ok
    assert iid in sim.instances and mutating_requests(sim) == []
    assert app.log.store.live_alerts(key=f"orphan:{iid}")
    steering.resume(app.log, by="alice", reason=None)
    fake_model.enqueue(reply("ok"))
    assert run_tick(app).ok
    assert iid not in sim.instances


def test_an_override_set_or_reset_while_a_tick_runs_binds_its_next_call(sim, make_app):
    """The pipeline reads the overrides at every call: one set between two calls of the same context
    refuses the second, and its reset lets the third through (overrides never compound)."""
    app = make_app(policy={"max_rents_per_hour": 100})
    a, b, c = _good_offers(sim, app.settings, 3)
    ctx, rent = renter(app)
    assert rent(1, a)[0].ok
    steering.set_override(app.log, app.settings, "max_instances", "1", by="alice", reason="r", until=None)
    steering.set_override(app.log, app.settings, "max_total_dph", "11", by="alice", reason="r", until=None)
    out, blocked = rent(2, b)
    assert blocked and out.blocked[0] == "max_instances"
    steering.reset_override(app.log, app.settings, "max_instances", by="alice", reason=None)
    assert rent(3, c)[0].ok
    assert ctx.settings.policy.max_instances == app.settings.policy.max_instances
    assert ctx.settings.policy.max_total_dph == 11
    assert len(rent_puts(sim)) == 2
