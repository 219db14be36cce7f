"""Crash recovery: settle every side effect whose outcome the log does not know.

Runs at the start of every tick (and at daemon start), before any new paid
call, against ONE instance listing:
- a rent intent without a result: its label exists -> a recovered success (the
  instance becomes ours); absent -> a recovered "pending" (the request may still
  land, and vast.ai lists new instances late). Never re-sent.
- a pending rent (outcome unknown): its label listed -> adopted; absent for
  ``vast.settle_after`` and at least two listings -> ``rent.settled`` "not created".
  Until then the caps count it as live.
- a destroy intent without a result: completed by sending it again (destroy is idempotent;
  an instance already gone answers no_such_instance, which counts as done).
- a reboot intent without a result: recorded as unknown, with the instance's state.
- tool calls of the last model response without a result (a crash mid-tick):
  a recovered "interrupted" result, so the conversation stays well formed.
- a tick that started and never ended: ``tick.failed`` (interrupted).
- instances carrying our label that no event knows: adopted when the label's key
  belongs to one of our rent intents; otherwise orphans -> alert, destroyed if
  policy says so; an orphan alert resolves once the orphan is gone.
- instances we own that vast.ai no longer lists -> ``instance.gone``; one never listed yet is gone
  only once it was rented ``vast.settle_after`` ago (vast.ai lists new instances late).

Every decision uses the state after reconcile's own actions: an instance it destroyed
is out of the listing it goes on with, and an instance the log already knows (rented,
adopted or destroyed by us) is never adopted again, so the log never says "destroyed,
then adopted" for one instance.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from agent import logsetup
from agent.clients.vast import Instance, VastClient, VastError
from agent.config import Settings, VastSettings
from agent.fleet.market import note_traffic
from agent.fleet.pipeline import result_payload
from agent.fleet.policy import Policy
from agent.fleet.spend import storage_dph
from agent.fleet.toolkit import Outcome
from agent.store.log import EventLog
from agent.store.queries import InstanceState
from agent.times import parse_ts

log_ = logsetup.get_logger(__name__)

UNLISTED = "unlisted"  # the status observations give an instance of ours vast.ai has not listed yet


@dataclass
class ReconcileReport:
    recovered: list[str] = field(default_factory=list)
    orphans: list[int] = field(default_factory=list)
    gone: list[int] = field(default_factory=list)
    adopted: list[int] = field(default_factory=list)


def reconcile(log: EventLog, vast: VastClient, policy: Policy, *, destroy_orphans: bool,
              instances: list[Instance] | None = None, settings: Settings | None = None,
              ) -> tuple[ReconcileReport, list[Instance]]:
    """Settle dangling intents and ownership against one listing; returns the report and
    the (possibly refreshed) listing."""
    rep = ReconcileReport()
    listing = instances if instances is not None else vast.list_instances()
    destroyed = _settle_intents(log, vast, policy, listing, rep)
    listing = [i for i in listing if i.id not in destroyed]  # the state after our own actions
    _settle_unanswered_calls(log, rep)
    _settle_open_tick(log)
    gone = _settle_ownership(log, vast, policy, listing, rep, destroy_orphans=destroy_orphans, settings=settings)
    destroyed |= gone
    listing = [i for i in listing if i.id not in destroyed]
    _settle_pending_rents(log, policy, listing, (settings.vast if settings else VastSettings()).settle_after)
    _resolve_gone_orphans(log, listing, policy)
    if destroyed:
        listing = [i for i in vast.list_instances() if i.id not in destroyed]
    note_traffic(log, listing, set(log.owned_instance_ids()))  # bandwidth is billed per GB: spend counts it
    return rep, listing


def _settle_intents(log: EventLog, vast: VastClient, policy: Policy, listing: list[Instance],
                    rep: ReconcileReport) -> set[int]:
    """Each side-effect intent without a result gets a recovered one; returns the ids destroyed."""
    by_label = {i.label: i for i in listing if i.label}
    by_id = {i.id: i for i in listing}
    destroyed: set[int] = set()

    # 1. Dangling side-effect intents.
    for intent in log.store.dangling_intents():
        call_id, key, tool, raw_args = intent.call_id, intent.idem_key, intent.tool, intent.arguments
        tick = log.get(intent.called_seq).tick  # type: ignore[union-attr]
        try:
            args = json.loads(raw_args)
        except json.JSONDecodeError:
            args = {}
        if tool == "rent_instance":
            outcome = _settled_rent(policy, key, args, by_label)
        elif tool == "destroy_instance":
            outcome = _settled_destroy(vast, args, by_id)
            if outcome.effect:
                destroyed.add(int(args.get("instance_id", 0)))
        else:
            iid = int(args.get("instance_id", 0))
            st = by_id[iid].actual_status if iid in by_id else "not listed"
            outcome = Outcome(False, error=f"recovered after a restart: outcome unknown; instance {iid} is {st}")
        p = result_payload(call_id, tool, outcome, recovered=True)
        log.append("tool.result", p, "system", tick)
        rep.recovered.append(call_id)
        log_.warning("reconcile.intent", call_id=call_id, tool=tool, ok=p["ok"])
    return destroyed


def _settled_rent(policy: Policy, key: str | None, args: dict[str, Any], by_label: dict[str, Instance]) -> Outcome:
    """Our label on a listed instance: the rent succeeded; none: pending (it may still land). Never re-sent."""
    label = policy.label_for(key or "")
    inst = by_label.get(label)
    if inst is None:
        eff = {"type": "rent_pending", "label": label, "idem_key": key, "offer_id": args.get("offer_id"),
               "dph": policy.p.max_dph_per_instance}
        return Outcome(True, f"recovered after a restart: PENDING: no instance carries label {label} yet; the "
                       "request may still land (it was not re-sent). It counts against the caps as live until "
                       "its label is listed or the settle window passes", effect=eff)
    eff = {"type": "rented", "instance_id": inst.id, "label": label, "idem_key": key,
           "offer_id": args.get("offer_id"), "gpu_name": inst.gpu_name, "dph": inst.dph_total}
    return Outcome(True, f"recovered after a restart: instance {inst.id} carries our label "
                   f"{label}, so the rent succeeded", effect=eff)


def _settled_destroy(vast: VastClient, args: dict[str, Any], by_id: dict[int, Instance]) -> Outcome:
    """Destroy is idempotent: sent again to complete it, listed or not (vast.ai lists new instances late, so
    "not listed" does not prove gone); an instance already gone answers no_such_instance, which is done."""
    iid = int(args.get("instance_id", 0))
    try:
        vast.destroy(iid)
    except VastError as e:
        where = "it is still listed" if iid in by_id else "it is not listed"
        return Outcome(False, error=f"recovered after a restart: destroy of instance {iid} did not complete "
                       f"({e}); {where}")
    return Outcome(True, f"recovered after a restart: instance {iid} is destroyed",
                   effect={"type": "destroyed", "instance_id": iid})


def _settle_unanswered_calls(log: EventLog, rep: ReconcileReport) -> None:
    # 2. Tool calls of the last model response that have no result (crash between calls).
    last = next(log.read(0, kinds=["model.response"], newest_first=True, limit=1), None)
    if last is not None and last.payload.get("tool_calls"):
        done = {e.payload["call_id"] for e in log.read(last.seq, kinds=["tool.result"])}
        missing = [c for c in last.payload["tool_calls"] if c["id"] not in done]
        if missing:
            interrupted = Outcome(False, error="interrupted: the tick stopped before this call finished; "
                                  "it did not run")
            log.append_many([("tool.result", result_payload(c["id"], c["name"], interrupted, recovered=True),
                              "system", last.tick) for c in missing])
            rep.recovered.extend(c["id"] for c in missing)


def _settle_open_tick(log: EventLog) -> None:
    # 3. A tick that started and never ended.
    started = log.store.open_tick()
    if started is not None:
        log.append("tick.failed", {"reason": "interrupted: the process stopped during this tick; "
                                   "recovered at the next start", "error_kind": "interrupted"},
                   "system", started.tick)


def _settle_ownership(log: EventLog, vast: VastClient, policy: Policy, listing: list[Instance], rep: ReconcileReport, *,
                      destroy_orphans: bool, settings: Settings | None) -> set[int]:
    """Adopt, flag orphans (destroyed when policy says so), record the gone; returns the ids destroyed."""
    by_id = {i.id: i for i in listing}
    destroyed: set[int] = set()

    # 4. Ownership: adopt, orphans, gone. An instance the log knows in any state is never adopted
    # again (a destroyed one vast.ai still lists is on its way out).
    owned = set(log.owned_instance_ids())
    ours = [i for i in listing if policy.is_our_label(i.label)]
    known = log.store.known_instance_ids(i.id for i in ours) if ours else set()
    for inst in ours:
        if inst.id in known:
            continue
        key = policy.key_of(inst.label)
        if key is not None and log.store.has_rent_key(key):
            log.append("instance.adopted", {"instance_id": inst.id, "label": inst.label, "idem_key": key,
                                            "gpu_name": inst.gpu_name, "dph": inst.dph_total,
                                            "storage_dph": storage_dph(inst.raw.get("disk_space"),
                                                                       inst.raw.get("storage_cost"))}, "system")
            rep.adopted.append(inst.id)
            continue
        rep.orphans.append(inst.id)
        if _orphan(log, vast, inst, destroy_orphans=destroy_orphans, settings=settings):
            destroyed.add(inst.id)
    settle_after = (settings.vast if settings else VastSettings()).settle_after
    states = log.instance_states()
    for iid in sorted(owned - set(by_id)):
        if not absence_proves_gone(log, iid, states, settle_after):
            continue  # rented, not listed yet: vast.ai lists new instances late
        log.append("instance.gone", {"instance_id": iid, "last_status": None}, "system")
        rep.gone.append(iid)
    return destroyed


def absence_proves_gone(log: EventLog, iid: int, states: dict[int, InstanceState], settle_after: float) -> bool:
    """An owned instance the listing lacks is gone when a listing showed it before, or when it was
    rented longer than ``settle_after`` ago (it would have been listed by now). Within the listing lag
    of its rent, absence proves nothing."""
    state = states.get(iid)
    if state is not None and state.status != UNLISTED:
        return True
    inst = log.store.instance(iid)
    rented = log.get(inst.rented_seq) if inst is not None else None
    return rented is None or (log.clock() - parse_ts(rented.ts)).total_seconds() >= settle_after


def _settle_pending_rents(log: EventLog, policy: Policy, listing: list[Instance], settle_after: float) -> None:
    """A pending rent whose label no listing showed for ``settle_after`` and at least two listings
    (this one and a tick's since): ``rent.settled`` "not created". One listing proves nothing:
    the request may land late and vast.ai lists new instances late."""
    labels = {i.label for i in listing if i.label}
    now = log.clock()
    for intent in log.store.pending_rents():
        label = policy.label_for(intent.idem_key or "")
        result = log.get(intent.result_seq) if intent.result_seq is not None else None
        if label in labels or result is None:
            continue
        age = (now - parse_ts(result.ts)).total_seconds()
        listings = 1 + log.store.count_events_after(result.seq, "tick.started")
        if age >= settle_after and listings >= 2:
            log.append("rent.settled", {"call_id": intent.call_id, "label": label, "idem_key": intent.idem_key,
                                        "created": False,
                                        "reason": f"no listing showed the label in {int(age)} s ({listings} "
                                        "listings); it was not re-sent"}, "system", result.tick)
            log_.warning("reconcile.rent_not_created", call_id=intent.call_id, label=label)


def _resolve_gone_orphans(log: EventLog, listing: list[Instance], policy: Policy) -> None:
    """Orphan alerts whose instance is no longer listed (or is ours now) are resolved."""
    from agent.feedback import resolve_absent

    ours = [i for i in listing if policy.is_our_label(i.label)]
    known = log.store.known_instance_ids(i.id for i in ours) if ours else set()
    present = {f"orphan:{i.id}" for i in ours if i.id not in known}
    resolve_absent(log, "orphan:", present, reason="the orphan instance is gone")


def _orphan(log: EventLog, vast: VastClient, inst: Instance, *, destroy_orphans: bool,
            settings: Settings | None) -> bool:
    """An instance carrying our label that no event knows: a critical alert, and destroyed if policy
    says so (True when it was)."""
    from agent.feedback import raise_alert

    raise_alert(log, key=f"orphan:{inst.id}", severity="critical",
                title=f"Orphan instance {inst.id} carries our label but no event knows it",
                detail=f"label {inst.label}, {inst.gpu_name}, ${inst.dph_total or 0:.3f}/h, status "
                f"{inst.actual_status}; " + ("destroying it (policy.destroy_orphans)" if destroy_orphans
                                             else "set policy.destroy_orphans or destroy it by hand"),
                settings=settings)
    if not destroy_orphans:
        return False
    try:
        vast.destroy(inst.id)
    except VastError as e:
        log_.warning("reconcile.orphan_destroy_failed", instance_id=inst.id, error=str(e))
        return False
    return True
