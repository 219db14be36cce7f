"""An unpinned operator note binds the rules provider as a directive does, through the same parser: a note
saying to avoid a host keeps every rent off that host even when the host has the best offers on the market,
and it still binds after a compaction has folded it into the pinned block. A note binds for
``NOTE_BINDS_HOURS`` after it was said; a later note's permission ends it."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

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
