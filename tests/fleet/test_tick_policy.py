"""Policy is code: whatever a scripted model asks for through the real SDK, the tool layer
refuses what policy forbids, tells the model why, logs ``policy.blocked``, and the simulator
sees no such call. ``dry_run`` sends nothing that changes the fleet."""

from __future__ import annotations

from typing import Any

import pytest

from agent.fleet.block import norm_gpu
from agent.runtime.tick import MAX_CALLS_PER_STEP, run_tick
from tests.conftest import (
    events_of,
    mutating_requests,
    plant_ours,
    priced,
    rent_puts,
    tool_messages,
    within_policy,
)
from tests.fakes.openai_server import reply


def _rent(offer_id: int, **extra: Any) -> tuple[str, dict[str, Any]]:
    return ("rent_instance", {"offer_id": offer_id, "reason": "scripted", **extra})


def _blocked_seen(app: Any, last_request: dict[str, Any]) -> dict[str, str]:
    """call id -> the tool message content the model saw, for every policy.blocked event."""
    seen = {m["tool_call_id"]: m["content"] for m in tool_messages(last_request)}
    return {e.payload["call_id"]: seen[e.payload["call_id"]] for e in events_of(app, "policy.blocked")}


@pytest.mark.parametrize(("policy", "rule"), [
    ({"max_instances": 4, "max_rents_per_hour": 100}, "max_instances"),
    ({"max_total_dph": 1.0, "max_rents_per_hour": 100}, "max_total_dph"),
], ids=["max_instances", "max_total_dph"])
def test_asking_for_fifty_instances_rents_only_what_the_caps_allow(sim, make_app, fake_model,
                                                                   policy: dict[str, Any], rule: str):
    """A model that asks for 50 instances in one tick gets only what the instance or spend cap
    allows, counting what it rented earlier in the same tick; every other rent is refused by
    policy with the rule in the message it sees next, one policy.blocked event per refusal."""
    app = make_app(policy=policy)
    p = app.settings.policy
    valid = sorted((o for o in sim.offers.values() if within_policy(app.settings, o)),
                   key=lambda o: (o["dph_total"], o["id"]))
    allowed, spend = 0, 0.0
    for o in valid:
        if allowed + 1 > p.max_instances or spend + priced(app.settings, o) > p.max_total_dph:
            break
        allowed, spend = allowed + 1, spend + priced(app.settings, o)
    assert 0 < allowed < len(valid)
    calls = [_rent(valid[i % len(valid)]["id"]) for i in range(50)]
    chunks = [calls[i:i + MAX_CALLS_PER_STEP] for i in range(0, 50, MAX_CALLS_PER_STEP)]
    fake_model.enqueue(*[reply("scale to 50", tool_calls=c) for c in chunks], reply("done"))

    r = run_tick(app)
    assert r.ok, r.reason

    assert len(sim.instances) == allowed
    assert len(rent_puts(sim)) == allowed
    assert sum(i["dph_total"] for i in sim.instances.values()) <= p.max_total_dph
    results = events_of(app, "tool.result", 1)
    assert len(results) == 50
    assert sum(e.payload["ok"] for e in results) == allowed
    blocked = events_of(app, "policy.blocked", 1)
    assert len(blocked) == 50 - allowed
    assert {e.payload["rule"] for e in blocked} == {rule, "offer_unavailable"}
    assert sum(e.payload["rule"] == rule for e in blocked) >= len(valid) - allowed
    seen = _blocked_seen(app, fake_model.chat_requests[-1].json)
    for e in blocked:
        assert f"blocked by policy: {e.payload['rule']} (" in seen[e.payload["call_id"]]
    titles = [a.title for a in app.log.store.open_alerts()]
    assert f"{50 - allowed} tool calls blocked by policy in one tick" in titles


def test_forbidden_gpu_price_image_and_foreign_instance_are_each_refused(sim, make_app, fake_model):
    """A GPU model not allowed, an offer over the price cap, a custom image, and destroying or
    rebooting an instance that is not ours: each refused with 'blocked by policy: <rule> (...)' in
    the tool message the model sees next, a policy.blocked event each, and no call reaches vast.ai."""
    app = make_app(policy={"max_dph_per_instance": 1.0})
    s = app.settings
    h100 = sim.find_offer("H100 SXM", num_gpus=1)
    pricey = next(o for o in sorted(sim.offers.values(), key=lambda o: o["id"])
                  if norm_gpu(o["gpu_name"]) in {norm_gpu(g) for g in s.policy.allowed_gpus}
                  and o["dph_total"] > s.policy.max_dph_per_instance and not o["rented"])
    fine = next(o for o in sorted(sim.offers.values(), key=lambda o: o["dph_total"]) if within_policy(s, o))
    spare = sim.find_offer("RTX A6000")
    foreign = sim.create_instance(spare["id"], label="other-team-batch-7")
    before = sim.state()["instances"]
    fake_model.enqueue(
        reply("trying things", tool_calls=[
            _rent(h100["id"]),
            _rent(pricey["id"]),
            _rent(fine["id"], image="docker.io/someone/miner:latest"),
            ("destroy_instance", {"instance_id": foreign, "reason": "looks idle"}),
            ("reboot_instance", {"instance_id": foreign, "reason": "looks stuck"}),
        ]),
        reply("understood"))

    r = run_tick(app)
    assert r.ok, r.reason

    rules = [e.payload["rule"] for e in events_of(app, "policy.blocked", 1)]
    assert rules == ["allowed_gpus", "max_dph_per_instance", "fleet_template", "not_ours", "not_ours"]
    seen = _blocked_seen(app, fake_model.chat_requests[-1].json)
    assert len(seen) == 5
    for e in events_of(app, "policy.blocked", 1):
        assert f"blocked by policy: {e.payload['rule']} (" in seen[e.payload["call_id"]]
    assert mutating_requests(sim) == []
    assert set(sim.instances) == {foreign}
    assert [i["id"] for i in sim.state()["instances"]] == [i["id"] for i in before]
    assert not any(sim.offers[o]["rented"] for o in (h100["id"], pricey["id"], fine["id"]))
    assert events_of(app, "tool.called", 1) == []  # a refused call logs no intent


def test_dry_run_sends_no_mutating_call(sim, make_app, fake_model):
    """With dry_run, rents, destroys and reboots that pass policy are logged and answered
    'dry run' but never sent: the simulator sees no PUT /asks/, DELETE or PUT /instances/."""
    app = make_app(policy={"dry_run": True})
    fine = next(o for o in sorted(sim.offers.values(), key=lambda o: o["dph_total"]) if within_policy(app.settings, o))
    mine = plant_ours(app, sim, sim.find_offer("RTX 4090")["id"])
    fake_model.enqueue(
        reply("act", tool_calls=[
            ("search_offers", {}),
            _rent(fine["id"]),
            ("destroy_instance", {"instance_id": mine, "reason": "scale down"}),
            ("reboot_instance", {"instance_id": mine, "reason": "stuck"}),
        ]),
        reply("done"))

    r = run_tick(app)
    assert r.ok, r.reason

    assert mutating_requests(sim) == []
    assert set(sim.instances) == {mine}
    results = {e.payload["name"]: e.payload for e in events_of(app, "tool.result", 1)}
    for name in ("rent_instance", "destroy_instance", "reboot_instance"):
        assert results[name]["ok"] and results[name]["output"].startswith("dry run"), results[name]
        assert "effect" not in results[name]
    seen = [m["content"] for m in tool_messages(fake_model.chat_requests[-1].json)]
    assert sum("dry run" in c for c in seen) == 3
    assert app.log.store.row_counts(["instances", "intents"]) == {"instances": 1, "intents": 0}  # the planted one only


def test_an_action_goes_check_intent_call_result_under_the_key_of_its_intent(sim, make_app, fake_model):
    """A rent and a destroy that pass policy each run check -> intent -> call -> result: the rent's
    offer is looked up once, by the check, and the handler rents what it found; the tool.called
    intent carries a fresh 12-hex idempotency key; the rent request vast.ai receives carries the
    label made from that key; the result's effect names the same key and label and the offer's
    GPU and $/h. Each call's two events are adjacent and in that order."""
    app = make_app()
    s = app.settings
    fine = next(o for o in sorted(sim.offers.values(), key=lambda o: o["dph_total"]) if within_policy(s, o))
    base = s.fleet.label_prefix + s.agent_id + "-"
    mine = plant_ours(app, sim, sim.find_offer("RTX 4090")["id"])
    fake_model.enqueue(
        reply("act", tool_calls=[_rent(fine["id"]), ("destroy_instance", {"instance_id": mine, "reason": "spare"})]),
        reply("done"))

    r = run_tick(app)
    assert r.ok, r.reason

    pairs = [(e.kind, e.payload["name"]) for e in app.log.read(0, kinds=["tool.called", "tool.result"], tick=1)]
    assert pairs == [("tool.called", "rent_instance"), ("tool.result", "rent_instance"),
                     ("tool.called", "destroy_instance"), ("tool.result", "destroy_instance")]
    rent_called, destroy_called = events_of(app, "tool.called", 1)
    rent_result, destroy_result = events_of(app, "tool.result", 1)
    key = rent_called.payload["idempotency_key"]
    assert len(key) == 12 and int(key, 16) >= 0
    assert destroy_called.payload["idempotency_key"] not in (None, key)
    lookups = [q for q in sim.requests if q["method"] == "POST" and q["path"].startswith("/api/v0/bundles/")
               and (q["body"] or {}).get("id") == {"in": [str(fine["id"])]}]
    assert len(lookups) == 1
    (put,) = rent_puts(sim, fine["id"])
    assert put["body"]["label"] == base + key
    effect = rent_result.payload["effect"]
    assert (effect["idem_key"], effect["label"], effect["offer_id"]) == (key, base + key, fine["id"])
    assert (effect["gpu_name"], effect["dph"]) == (fine["gpu_name"], pytest.approx(priced(app.settings, fine)))
    assert destroy_result.payload["effect"] == {"type": "destroyed", "instance_id": mine}
    assert mine not in sim.instances
