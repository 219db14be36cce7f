"""Kill -9: ``fleet-agent tick`` SIGKILLed at random moments against a faulty simulator.

Promise 1 (nothing is ever lost) and promise 4 (no side effect happens twice), checked
after every restart and audited against the simulator at the end. The planted variant
proves the harness notices when the intent is logged after the rent instead of before.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest

from tests.reliability.harness import run_kill9, run_lag_destroys

# Runs on SQLite and on PostgreSQL (the harness writes configs naming the test's database).
pytestmark = pytest.mark.usefixtures("backend")


@pytest.mark.slow
def test_kill9_loop_loses_no_event_and_rents_nothing_twice(fast_root, zygote):
    """12 SIGKILLs (half aimed right after a rent, destroy or reboot reached the simulator, two
    of the runs through the real console script) with ~20% API faults, ambiguous rents and
    faults after the action (answers lost, requests delivered late) on every side-effecting
    endpoint: after each restart every committed (seq, hash) is still there, integrity_check
    is ok, the chain verifies and read models rebuild equal; after a final clean tick there
    are no duplicate rentals, no untraced or untracked instances and no intent without a
    result; the simulator's own state was never over the caps, no intent sent a request
    twice, and the log never adopted an instance it had destroyed."""
    rep = run_kill9(fast_root, kills=12, seed=5, spawner=zygote, exec_every=6, after_action=0.15,
                    install="tests.reliability.harness:install_reboots")
    assert rep.problems == []
    assert rep.kills == 12
    assert rep.kills_after_mutation >= 3
    assert rep.final_tick_rc == 0
    assert rep.audit["created"] >= 5
    assert rep.audit["duplicates"] == 0
    assert rep.audit["untraced"] == 0
    assert rep.audit["untracked"] == 0
    assert rep.audit["dangling_intents"] == 0
    assert rep.audit["calls_without_result"] == 0
    assert sum(rep.faults.values()) >= 10
    assert rep.events_checked > rep.events
    assert rep.monitor["polls"] > 0
    assert (rep.monitor["over_max_instances"], rep.monitor["over_max_total_dph"]) == (0, 0)
    assert rep.intents["duplicate_requests"] == 0
    assert rep.intents["adopted_after_destroyed"] == 0


# ------------------------------------------------------------------ the planted bug


def install_rent_before_intent() -> None:
    """Rewire the rent tool so the money moves first and the intent is logged afterwards
    (with the very key used for the label): the bug promise 4 exists to prevent. The
    replaced tool reaches the tick the way every tool does, through the entry point."""
    import agent.fleet.pipeline as pipeline_mod
    import tools
    from agent.fleet.block import Block
    from agent.fleet.toolkit import Outcome

    real_uuid = pipeline_mod.uuid
    rent = next(t for t in tools.TOOLS if t.name == "rent_instance")

    class _HandOver:
        """Gives the pipeline the key the rent already used."""

        def __init__(self) -> None:
            self.next: Any = None

        def uuid4(self) -> Any:
            u, self.next = self.next, None
            return u or real_uuid.uuid4()

    keys = _HandOver()
    pipeline_mod.uuid = keys  # type: ignore[assignment]

    def check(ctx: Any, args: dict[str, Any]) -> Any:
        offer = rent.check(ctx, args)
        if isinstance(offer, Block):
            return offer
        u = real_uuid.uuid4()
        f = ctx.settings.fleet
        out = ctx.vast.rent(int(args["offer_id"]), image=f.image, disk=f.disk_gb,
                            label=ctx.policy.label_for(u.hex[:12]), onstart=f.onstart, env=f.env,
                            runtype=f.runtype)
        time.sleep(0.3)  # the window a slow disk or a busy database would open
        keys.next = u
        return out, offer

    def handler(ctx: Any, args: dict[str, Any], prepared: Any, key: str) -> Outcome:
        out, offer = prepared
        if out.status != "created":
            return Outcome(False, error=f"not rented: {out.error}")
        label = ctx.policy.label_for(key)
        return Outcome(True, f"rented offer {args['offer_id']} as instance {out.instance_id}",
                       effect={"type": "rented", "instance_id": out.instance_id, "label": label,
                               "idem_key": key, "offer_id": int(args["offer_id"]),
                               "gpu_name": offer.gpu_name, "dph": offer.dph_total})

    tools.TOOLS = tuple(dataclasses.replace(t, check=check, handler=handler) if t is rent else t
                        for t in tools.TOOLS)


@pytest.mark.slow
def test_harness_reports_untracked_instances_when_the_rent_precedes_its_intent(fast_root, zygote):
    """The same loop against the planted variant (rent, then log the intent): kills aimed
    after the rent request leave instances carrying our label that no event knows, and the
    audit counts them as untraced (untracked too, unless a later tick destroyed the orphan
    it saw carrying our label)."""
    rep = run_kill9(fast_root, kills=6, seed=5, spawner=zygote, fault_rate=0.0, ambiguous=0.0,
                    install="tests.reliability.test_kill9:install_rent_before_intent")
    assert rep.kills_after_mutation >= 1
    assert rep.audit["untraced"] >= 1  # an instance with our label that no tool.called key explains
    assert rep.audit["duplicates"] + rep.audit["untraced"] + rep.audit["untracked"] >= 1


# ------------------------------------------------------------------ destroys inside the listing lag


@pytest.mark.slow
def test_a_destroy_whose_answer_is_lost_inside_the_listing_lag_is_not_recorded_done(fast_root, zygote):
    """Tick pairs: the second comes seconds after the first rented, so the new instance is not listed yet;
    the provider destroys it and every such DELETE loses its answer before vast.ai acts. The log never
    calls an instance destroyed that the simulator still has, and the simulator's own state never holds
    more instances than the cap."""
    r = run_lag_destroys(fast_root, rounds=4, spawner=zygote)
    assert r.get("errors") is None
    assert r["faults"]["lag_destroy_fail"] >= 2
    assert r["destroyed_but_alive"] == []
    assert (r["monitor"]["over_max_instances"], r["monitor"]["over_max_total_dph"]) == (0, 0)
    assert (r["audit"]["duplicates"], r["audit"]["untracked"], r["audit"]["dangling_intents"]) == (0, 0, 0)
    assert r["problems"] == []


@pytest.mark.slow
def test_harness_finds_destroyed_but_alive_when_absence_inside_the_lag_counts_as_gone(fast_root, zygote):
    """The same ticks against the planted variant that takes one listing without the instance as proof it
    is gone (issue 42's defect): the harness finds instances the log calls gone or destroyed alive in the
    simulator (reconcile records the unlisted replacement gone before the provider even sees it)."""
    r = run_lag_destroys(fast_root, rounds=4, spawner=zygote,
                         install="tests.reliability.harness:plant_absence_as_gone")
    assert r["destroyed_but_alive"] != []


@pytest.mark.slow
def test_kill9_loop_with_lost_destroy_answers_inside_the_listing_lag(fast_root, zygote):
    """The kill -9 loop with half the runs inside the listing lag of the previous run's rents, the provider
    destroying unlisted instances, the fault proxy losing 60% of those answers (before, after, late), a cap
    of 3 and an operator noting and acking beside every tick: nothing over the cap in the simulator, nothing
    the log calls destroyed alive there, no duplicate or untracked instance, every note and ack kept once."""
    rep = run_kill9(fast_root, kills=10, seed=7, spawner=zygote, after_action=0.15, lag_destroy=0.6,
                    max_instances=3, operators=True, install="tests.reliability.harness:install_lag_destroys")
    assert rep.problems == []
    assert rep.final_tick_rc == 0
    assert rep.destroyed_but_alive == []
    assert (rep.monitor["over_max_instances"], rep.monitor["over_max_total_dph"]) == (0, 0)
    assert (rep.audit["duplicates"], rep.audit["untracked"], rep.audit["dangling_intents"]) == (0, 0, 0)
    assert rep.operators["notes"] == rep.runs
    assert {k: rep.operators[k] for k in ("failed_commands", "lost_notes", "lost_acks", "notes_twice",
                                          "acks_twice")} == dict.fromkeys(("failed_commands", "lost_notes",
                                                                           "lost_acks", "notes_twice",
                                                                           "acks_twice"), 0)
