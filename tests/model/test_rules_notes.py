"""An unpinned operator note binds the rules provider as a directive does, through the same parser: a note
saying to avoid a host keeps every rent off that host even when the host has the best offers on the market,
and it still binds after a compaction has folded it into the pinned block. A note binds for
``NOTE_BINDS_HOURS`` after it was said; a later note's permission ends it."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

from agent import feedback
from agent.context import compaction
from agent.feedback.notes import NOTE_BINDS_HOURS
from agent.fleet.constraints import note_words
from agent.fleet.toolkit import load_tools
from agent.sim import ManualClock, Simulator
from agent.times import parse_ts, utc_ts
from tests.model.test_rules_sizing import FLEET, ROOMY, _ticks


def _cheap_host(sim: Simulator) -> int:
    """The host with the most single-GPU RTX 4090 offers the policy allows, its offers made the market's
    cheapest by far (a tenth of their price): the rules provider's first choice, but for the note."""
    counts = Counter(o["host_id"] for o in sim.offers.values()
                     if o["gpu_name"] == "RTX 4090" and o["num_gpus"] == 1 and not o["rented"]
                     and o["host_id"] not in sim.bad_hosts and o["reliability"] >= ROOMY["min_reliability"]
                     and o["disk_space"] >= FLEET["disk_gb"])
    host = counts.most_common(1)[0][0]
    for o in list(sim.offers.values()):
        if o["host_id"] == host:
            sim.market.set_price(multiplier=0.1, offer_id=o["id"])
    return host


def _rented_hosts(sim: Simulator, before: set[int]) -> list[int]:
    return [sim.instances[i]["host_id"] for i in sorted(set(sim.instances) - before)]


def _quiet(sim: Simulator) -> None:
    sim.realism.update({"unschedulable": 0, "stuck_scheduling": 0})
    sim.pending = 0.0


def test_a_note_to_avoid_a_host_keeps_rents_off_it(make_app, sim: Simulator, sim_clock: ManualClock):
    _quiet(sim)
    app = make_app(provider="rules", policy=ROOMY, fleet=FLEET)
    host = _cheap_host(sim)
    feedback.say(app.log, f"don't rent on host {host} please, it has been flaky", "alice")
    before = set(sim.instances)
    sim.pending = 300.0
    _ticks(app, sim, sim_clock, 3)
    hosts = _rented_hosts(sim, before)
    assert len(hosts) >= 2, hosts  # it rented, and the cheapest host by far was open to it but for the note
    assert host not in hosts, (host, hosts)


def test_the_note_still_binds_after_a_compaction_folds_it_into_the_pinned_block(
        make_app, sim: Simulator, sim_clock: ManualClock):
    _quiet(sim)
    app = make_app(provider="rules", policy=ROOMY, fleet=FLEET)
    host = _cheap_host(sim)
    note = feedback.say(app.log, f"Avoid host {host}.", "alice")
    _ticks(app, sim, sim_clock, 1)  # nothing to do yet; the note is in the thread behind a tick
    log = app.log
    comp = compaction.compact(log, app.prompts, app.settings.context, policy=app.policy_dict(),
                              tools=load_tools().specs(), summarizer=None, tick=None, open_alert_ids=[],
                              owned_instance_ids=[], force=True)
    assert comp is not None and comp.payload["covered_to"] >= note.seq, comp and comp.payload["covered_to"]
    kept = [w for w in comp.payload["pinned"]["operator"] if w["kind"] == "note"]
    assert [w["id"] for w in kept] == [note.seq], kept  # out of the thread, into the pinned block
    before = set(sim.instances)
    sim.pending = 300.0
    _ticks(app, sim, sim_clock, 3)
    hosts = _rented_hosts(sim, before)
    assert len(hosts) >= 2, hosts
    assert host not in hosts, (host, hosts)


def test_a_note_binds_for_a_day_and_a_later_permission_ends_it():
    said = parse_ts("2026-12-01T10:00:00Z")
    at = utc_ts(said)
    words = note_words([(at, "avoid host 5; no 3090s")], said + timedelta(hours=1))
    assert {(c.kind, c.value) for c in words.constraints} == {("exclude_host", 5), ("ban_gpus", "RTX 3090")}
    assert all(c.until == utc_ts(said + timedelta(hours=NOTE_BINDS_HOURS)) for c in words.constraints)
    # its own shorter limit counts from when it was said, not from now
    short = note_words([(at, "avoid host 5 for 2 hours")], said + timedelta(hours=1))
    assert [c.until for c in short.constraints] == [utc_ts(said + timedelta(hours=2))]
    assert note_words([(at, "avoid host 5 for 2 hours")], said + timedelta(hours=3)).constraints == ()
    assert note_words([(at, "avoid host 5")], said + timedelta(hours=NOTE_BINDS_HOURS, minutes=1)).constraints == ()
    later = utc_ts(said + timedelta(hours=2))
    lifted = note_words([(at, "avoid host 5; no 3090s"), (later, "host 5 is fine again")], said + timedelta(hours=3))
    assert {(c.kind, c.value) for c in lifted.constraints} == {("ban_gpus", "RTX 3090")}


def _running_3090s(make_app: Any, sim: Simulator, sim_clock: ManualClock) -> tuple[Any, list[int]]:
    """A rules fleet with three RTX 3090s of ours running a backlog: the app and their ids."""
    from tests.conftest import plant_ours

    _quiet(sim)
    app = make_app(provider="rules", policy=ROOMY, fleet=FLEET)
    offers = sorted((o for o in sim.offers.values() if o["gpu_name"] == "RTX 3090" and o["num_gpus"] == 1
                     and not o["rented"] and o["host_id"] not in sim.bad_hosts), key=lambda o: o["id"])[:3]
    olds = [plant_ours(app, sim, o["id"], key=f"aaaaaaaa000{n}") for n, o in enumerate(offers)]
    sim.pending = 40.0
    _ticks(app, sim, sim_clock, 4)
    assert all(sim.instances[i]["actual_status"] == "running" for i in olds), [sim.instances[i] for i in olds]
    return app, olds


def test_an_order_for_one_gpu_model_replaces_the_others_before_they_go(make_app, sim: Simulator,
                                                                      sim_clock: ManualClock):
    """"Only RTX 4090 from now on", with RTX 3090s the fleet needs running: each is replaced by RTX 4090s and
    destroyed once they run (not kept as capacity for good, nor dropped before the jobs have somewhere to go)."""
    from tests.conftest import events_of
    from tests.model.test_rules_sizing import json_args

    app, olds = _running_3090s(make_app, sim, sim_clock)
    sim.pending += 60.0  # the 3090s are needed: what else the set-up rented does not cover the need without them
    feedback.say(app.log, "Only RTX 4090 from now on.", "alice")
    said = events_of(app, "operator.note")[-1].seq
    _ticks(app, sim, sim_clock, 8)
    live = [i for i in sim.instances.values() if i["actual_status"] not in ("exited", "offline")]
    assert not [i for i in live if i["id"] in olds], [(i["id"], i["gpu_name"]) for i in live]
    rents = [e.seq for e in events_of(app, "tool.result") if e.seq > said and e.payload["name"] == "rent_instance"
             and e.payload["ok"]]
    gone = [e for e in events_of(app, "model.response") if e.seq > said for c in e.payload["tool_calls"]
            if c["name"] == "destroy_instance" and json_args(c)["instance_id"] in olds]
    assert rents and gone and min(rents) < min(e.seq for e in gone), (rents, [e.seq for e in gone])
    reasons = [json_args(c)["reason"] for e in gone for c in e.payload["tool_calls"]
               if c["name"] == "destroy_instance" and json_args(c)["instance_id"] in olds]
    assert all(r.startswith("retire: RTX 3090 is not among RTX 4090") for r in reasons), reasons
    assert all(i["gpu_name"] == "RTX 4090" for i in live), [(i["id"], i["gpu_name"]) for i in live]


def test_an_order_the_market_cannot_fill_retires_the_barred_once_no_replacement_is_coming(
        make_app, sim: Simulator, sim_clock: ManualClock):
    """"Only RTX 4090 from now on" with RTX 3090s running and two RTX 4090s left on the market: those are
    rented and the 3090s keep working until they run; once they do and no other offer the order allows is left,
    the 3090s go, though the 4090s alone deliver less than the fleet needs. The order holds (no fleet of barred
    GPUs kept for good because the market has nothing better), and the jobs had somewhere to go meanwhile."""
    from tests.conftest import events_of, within_policy
    from tests.model.test_rules_sizing import json_args

    app, olds = _running_3090s(make_app, sim, sim_clock)
    last = sorted((o for o in sim.offers.values() if o["gpu_name"] == "RTX 4090" and o["num_gpus"] == 1
                   and within_policy(app.settings, o) and o["host_id"] not in sim.bad_hosts
                   and sim.market.listed(o)), key=lambda o: o["id"])[:2]
    assert last, "the market has an RTX 4090 to keep"
    sim.market.withdrawn |= {o["id"] for o in sim.offers.values() if o["gpu_name"] == "RTX 4090"
                             and o not in last}
    sim.pending = 60.0
    feedback.say(app.log, "Only RTX 4090 from now on.", "alice")
    said = events_of(app, "operator.note")[-1].seq
    _ticks(app, sim, sim_clock, 8)
    live = [i for i in sim.instances.values() if i["actual_status"] not in ("exited", "offline")]
    assert all(i["gpu_name"] == "RTX 4090" for i in live), [(i["id"], i["gpu_name"], i["actual_status"]) for i in live]
    assert live, "the 4090s on offer were rented"
    gone = [(e.seq, json_args(c)["reason"]) for e in events_of(app, "model.response") if e.seq > said
            for c in e.payload["tool_calls"] if c["name"] == "destroy_instance" and json_args(c)["instance_id"] in olds]
    rents = [e.seq for e in events_of(app, "tool.result") if e.seq > said and e.payload["name"] == "rent_instance"
             and e.payload["ok"]]
    assert rents and gone and min(rents) < min(s for s, _ in gone), (rents, gone)  # replaced before they went
    assert all(r.startswith("retire: RTX 3090 is not among RTX 4090") for _, r in gone), gone
    assert len(gone) == len(olds), gone  # each destroyed once, not again at every step of the tick
