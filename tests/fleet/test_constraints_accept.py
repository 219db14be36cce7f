"""Operators' words bind once accepted: `say` proposes what code can enforce and shows it at once (and
raises the `constraint:proposed` alert); `policy accept N` enforces it through the same paths as `hosts
exclude` and `policy set`; a model that ignores the note, and the rules provider, then cannot break it —
the simulator sees no rent that does."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from agent import cli
from agent.errors import UsageError
from agent.fleet import constraints, steering
from agent.runtime.tick import run_tick
from tests.conftest import events_of, rent_puts, within_policy
from tests.fakes.openai_server import reply


def _cli(app: Any, *argv: str) -> int:
    args = cli.build_parser().parse_args(list(argv))
    return int(args.func(args, app))


def _rent(offer_id: int) -> tuple[str, dict[str, Any]]:
    return ("rent_instance", {"offer_id": offer_id, "reason": "scripted"})


def _eligible(sim: Any, settings: Any) -> list[dict[str, Any]]:
    return sorted((o for o in sim.offers.values() if within_policy(settings, o) and not o["rented"]
                   and o["host_id"] not in sim.bad_hosts), key=lambda o: (o["dph_total"], o["id"]))


def _proposed(capsys: Any) -> list[int]:
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("accept: fleet-agent policy accept "))
    return [int(x) for x in line.split("policy accept ")[1].split("reject:")[0].split()]


def test_say_proposes_shows_and_alerts_and_accept_refuses_the_rent_in_code(sim, make_app, fake_model, capsys):
    """`say "stay off host H, only GPU"` prints the proposals and what stays advice and opens the
    constraint:proposed alert; nothing binds yet. After `policy accept`, a scripted model that ignores the
    note rents on H and rents another GPU model: both refused in code, the simulator sees neither; the
    model was told in a tagged message."""
    app = make_app(policy={"max_rents_per_hour": 100})
    offers = _eligible(sim, app.settings)
    bad = offers[0]
    gpu = bad["gpu_name"]  # the host to avoid offers the one model allowed: only the exclusion refuses it
    other_gpu = next(o for o in offers if o["gpu_name"] != gpu and o["host_id"] != bad["host_id"])
    keep = next(o for o in offers if o["gpu_name"] == gpu and o["host_id"] != bad["host_id"])
    words = gpu.replace("_", " ").lower().replace("rtx ", "")
    assert _cli(app, "say", f"only {words}s from now on, and stay off host {bad['host_id']}. jobs are urgent") == 0
    out = capsys.readouterr().out
    assert "proposed constraints (not enforced until accepted):" in out
    assert f"exclude host {bad['host_id']}" in out
    assert "kept as advice, not a rule: jobs are urgent" in out
    ids = [e.seq for e in events_of(app, "constraint.proposed")]
    assert len(ids) == 2 and f"policy accept {ids[0]} {ids[1]}" in out
    assert [a.dedup_key for a in app.store.alerts(all_=False)] == ["constraint:proposed"]
    assert bad["host_id"] not in steering.excluded_hosts(app.settings, app.log)  # proposed binds nothing

    assert _cli(app, "policy", "accept", *map(str, ids)) == 0
    assert bad["host_id"] in steering.excluded_hosts(app.settings, app.log)
    assert steering.effective_policy(app.settings, app.log).allowed_gpus == [gpu.replace("_", " ")]
    assert app.store.alerts(all_=False) == []  # every proposal decided: the alert resolved
    fake_model.enqueue(reply("ignore the note", tool_calls=[_rent(bad["id"]), _rent(other_gpu["id"]),
                                                          _rent(keep["id"])]), reply("done"))
    assert run_tick(app).ok
    rules = [x.payload["rule"] for x in events_of(app, "policy.blocked")]
    assert rules == ["excluded_hosts", "allowed_gpus"]
    assert len(rent_puts(sim)) == 1 and rent_puts(sim, keep["id"])
    seen = [str(m.get("content")) for m in fake_model.chat_requests[0].json["messages"]]
    assert any("accepted · " in c and f"exclude_host {bad['host_id']}" in c for c in seen)


def test_say_enforce_accepts_in_one_step_and_reject_leaves_advice(sim, make_app, capsys):
    """`say --enforce` accepts every proposal at once; `policy reject` leaves one as advice (nothing
    enforced); deciding twice, or an unknown number, is refused with nothing written."""
    app = make_app()
    assert _cli(app, "say", "--enforce", "Avoid hosts 67568, 83792: flaky") == 0
    out = capsys.readouterr().out
    assert "enforced now:" in out and "accepted #" in out
    assert {67568, 83792} <= set(steering.excluded_hosts(app.settings, app.log))
    assert _cli(app, "say", "pause until tomorrow") == 0
    (pid,) = _proposed(capsys)
    assert _cli(app, "policy", "reject", str(pid), "--reason", "not now") == 0
    assert steering.paused(app.log) is None
    n = app.log.last_seq()
    for argv in (("policy", "accept", str(pid)), ("policy", "reject", str(pid)), ("policy", "accept", "99999")):
        with pytest.raises(UsageError):
            _cli(app, *argv)
    assert app.log.last_seq() == n
    capsys.readouterr()
    assert _cli(app, "policy", "proposals", "--all", "--json") == 0
    rows = json.loads(capsys.readouterr().out)
    assert sorted(r["state"] for r in rows) == ["accepted", "accepted", "rejected"]


def test_accepting_never_widens_what_is_in_force(make_app, capsys):
    """A cap looser than an override already in force changes nothing; a ban removes one model from the
    allowed list in force; a GPU allow-list naming no allowed model is refused, nothing written."""
    app = make_app()
    assert _cli(app, "policy", "set", "max_instances", "2", "--reason", "budget") == 0
    assert _cli(app, "say", "--enforce", "at most 5 instances") == 0
    assert steering.effective_policy(app.settings, app.log).max_instances == 2
    assert "max_instances is already 2" in capsys.readouterr().out
    allowed = list(app.settings.policy.allowed_gpus)
    _cli(app, "say", "--enforce", f"no {allowed[0]}s please")
    assert steering.effective_policy(app.settings, app.log).allowed_gpus == allowed[1:]
    _cli(app, "say", "only H200s")
    (pid,) = _proposed(capsys)
    n = app.log.last_seq()
    with pytest.raises(UsageError, match="allow no GPU"):
        _cli(app, "policy", "accept", str(pid))
    assert app.log.last_seq() == n


def test_accepted_machine_exclusion_is_refused_in_code(sim, make_app, fake_model):
    """Machine ids have no other exclusion path: an accepted `exclude_machine` refuses a rent there."""
    app = make_app(policy={"max_rents_per_hour": 100})
    offer = _eligible(sim, app.settings)[0]
    if offer.get("machine_id") is None:
        pytest.skip("the simulator's offers carry no machine_id")
    _cli(app, "say", "--enforce", f"pls stay away from machine {offer['machine_id']}")
    assert offer["machine_id"] in constraints.excluded_machines(app.log)
    fake_model.enqueue(reply("rent", tool_calls=[_rent(offer["id"])]), reply("done"))
    assert run_tick(app).ok
    assert rent_puts(sim) == []
    assert [x.payload["rule"] for x in events_of(app, "policy.blocked")] == ["excluded_machines"]


def test_the_rules_provider_obeys_accepted_constraints_and_names_advice_it_cannot_parse(sim, make_app):
    """With the rules provider: after `say --enforce "only MODEL, stay off host H"` (H holding the cheapest
    offer) no rent in two ticks breaks it and none needs refusing (it plans around what binds); a pinned
    directive it cannot parse is named in its decision text as not followed."""
    app = make_app(provider="rules", policy={"max_instances": 4, "max_rents_per_hour": 20, "max_total_dph": 20.0})
    sim.pending = 500
    cheapest = _eligible(sim, app.settings)[0]
    gpu = cheapest["gpu_name"].replace("_", " ")
    _cli(app, "say", "--enforce", f"only {gpu}s, and stay off host {cheapest['host_id']}.")
    _cli(app, "say", "--pin", "prefer offers in Europe when the queue is long")
    for _ in range(2):
        assert run_tick(app).ok
    rented = [sim.instances[i] for i in sim.instances]
    assert rented, "the rules provider rented nothing"
    assert all(i["host_id"] != cheapest["host_id"] and i["gpu_name"].replace("_", " ") == gpu for i in rented)
    assert events_of(app, "policy.blocked") == []
    texts = [e.payload["text"] for e in events_of(app, "model.response")]
    assert any("cannot parse into a rule, not followed: 'prefer offers in Europe" in t for t in texts)


def test_a_knowledge_edit_found_by_the_tick_proposes_its_new_words_only(sim, make_app, fake_model):
    """A knowledge file written on disk is proposed from at the tick that finds it (the demo's own
    "Avoid hosts 67568, 83792: flaky" gives both hosts); a later edit proposes only its added lines."""
    app = make_app()
    kdir = app.settings.knowledge_path
    kdir.mkdir(parents=True, exist_ok=True)
    (kdir / "hosts.md").write_text("# Hosts\nAvoid hosts 67568, 83792: flaky\n")
    fake_model.enqueue(reply("ok"))
    assert run_tick(app).ok
    got = [(e.payload["constraint"], e.payload["value"], e.payload["source"]) for e in events_of(app, "constraint.proposed")]
    assert got == [("exclude_host", 67568, "knowledge"), ("exclude_host", 83792, "knowledge")]
    (kdir / "hosts.md").write_text("# Hosts\nAvoid hosts 67568, 83792: flaky\nno 3090s until Friday\n")
    fake_model.enqueue(reply("ok"))
    assert run_tick(app).ok
    got = [(e.payload["constraint"], e.payload["value"]) for e in events_of(app, "constraint.proposed")][2:]
    assert got == [("ban_gpus", "RTX 3090")]


def test_say_enforce_that_cannot_enforce_one_rule_says_so_and_exits_non_zero(make_app, capsys):
    """`say --enforce` with a rule that would allow no GPU at all: the host is enforced, the allow-list stays
    proposed with a clear line on stderr, exit 1."""
    app = make_app()
    assert _cli(app, "say", "--enforce", "only H200s and avoid host 41234") == 1
    err = capsys.readouterr().err
    assert "not enforced, it stays proposed" in err and "allow no GPU" in err
    assert 41234 in steering.excluded_hosts(app.settings, app.log)
    assert [p.constraint.kind for p in constraints.proposals(app.log).values() if p.state == "proposed"] == [
        "allow_gpus"]


_WIDE = {"allowed_gpus": ["RTX 4090", "RTX 3090", "L40S", "A100 SXM4", "H100 SXM", "RTX A6000", "RTX A5000",
                          "RTX A4000"],
         "max_instances": 20, "max_dph_per_instance": 5.0, "max_total_dph": 100.0, "min_reliability": 0.9,
         "max_rents_per_hour": 50}


def _breaking(app: Any, c: Any) -> Any:
    """A Block (or the pause) for an action that breaks accepted constraint ``c``, from the policy code the
    tool pipeline runs; None when nothing refuses it."""
    from agent.clients.vast import Offer
    from agent.fleet.policy import Policy

    pol = steering.effective_policy(app.settings, app.log)
    policy = Policy(replace(app.settings, policy=pol))
    ok_gpu = pol.allowed_gpus[0]
    offer = {"id": 1, "machine_id": 1, "host_id": 1, "gpu_name": ok_gpu, "dph_total": 0.01, "reliability": 0.999}
    if c.kind == "exclude_host":
        return policy.check_money_and_host(app.log, Offer(**{**offer, "host_id": c.value}))
    if c.kind == "exclude_machine":
        return policy.check_money_and_host(app.log, Offer(**{**offer, "machine_id": c.value}))
    if c.kind in ("allow_gpus", "ban_gpus"):
        named = c.value if c.kind == "allow_gpus" else [c.value]
        hit = constraints._resolve_gpus(list(named), list(app.settings.policy.allowed_gpus))
        outside = [g for g in app.settings.policy.allowed_gpus if (g not in hit) == (c.kind == "allow_gpus")]
        return all(policy.check_rent(Offer(**{**offer, "gpu_name": g}), 0, 0.0, 0) for g in outside)
    if c.kind == "max_dph_per_instance":
        return policy.check_rent(Offer(**{**offer, "dph_total": c.value + 0.01}), 0, 0.0, 0)
    if c.kind == "max_total_dph":
        return policy.check_rent(Offer(**offer), 1, float(c.value), 0)
    if c.kind == "max_instances":
        return policy.check_rent(Offer(**offer), int(c.value), 0.0, 0)
    if c.kind == "min_reliability":
        return policy.check_rent(Offer(**{**offer, "reliability": c.value - 0.001}), 0, 0.0, 0)
    if c.kind == "max_rents_per_hour":
        return policy.check_rent(Offer(**offer), 0, 0.0, int(c.value))
    if c.kind in ("max_daily_spend", "max_monthly_spend"):  # an instance that alone would pass the budget
        return policy.check_money_and_host(app.log, Offer(**{**offer, "dph_total": float(c.value) * 100}))
    if c.kind == "pause":
        return steering.paused(app.log)
    return None


def test_every_held_out_wording_once_accepted_is_refused_in_code(make_app, tmp_path, capsys):
    """Aim: 0 violations after a note in every wording of the corpus's held-out part. For each held-out note,
    `say --enforce` it on a fresh log; every constraint it gives is then refused in the policy code the tool
    pipeline runs (an offer breaking it is blocked, or the fleet is paused), whatever a model asks."""
    from tests.fleet.test_constraints import NOTES

    violations, checked = [], 0
    for note in (n for n in NOTES if n["split"] == "held-out" and n["expect"]):
        app = make_app(policy=_WIDE, storage={"url": str(tmp_path / f"{note['id']}.db")})  # a fresh log each
        _cli(app, "say", "--enforce", note["text"])
        for p in constraints.proposals(app.log).values():
            assert p.state == "accepted", (note["id"], p)
            checked += 1
            if not _breaking(app, p.constraint):
                violations.append((note["id"], p.constraint))
        app.close()
    capsys.readouterr()
    assert checked >= 100 and violations == []
