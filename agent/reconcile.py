"""Crash recovery: settle every side effect whose outcome the log does not know.

Runs at the start of every tick (and at daemon start), before any new paid
call, against ONE instance listing:
- a rent intent without a result: its label exists -> a recovered success (the
  instance becomes ours); absent -> a recovered "not created". Never re-sent.
- a destroy intent without a result: re-checked and completed (destroy is idempotent).
- a reboot intent without a result: recorded as unknown, with the instance's state.
- tool calls of the last model response without a result (a crash mid-tick):
  a recovered "interrupted" result, so the conversation stays well formed.
- a tick that started and never ended: ``tick.failed`` (interrupted).
- instances carrying our label that no event knows: adopted when the label's key
  belongs to one of our rent intents; otherwise orphans -> alert, destroyed if
  policy says so.
- instances we own that vast.ai no longer lists -> ``instance.gone``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import structlog

from agent.clients.vast import Instance, VastClient
from agent.config import Settings
from agent.pipeline import result_payload
from agent.policy import Policy
from agent.store.log import EventLog
from agent.toolkit import Outcome

log_ = structlog.get_logger(__name__)


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
    changed = _settle_intents(log, vast, policy, listing, rep)
    _settle_unanswered_calls(log, rep)
    _settle_open_tick(log)
    changed = _settle_ownership(log, vast, policy, listing, rep, destroy_orphans=destroy_orphans,
                                settings=settings) or changed
    if changed:
        listing = vast.list_instances()
    return rep, listing


def _settle_intents(log: EventLog, vast: VastClient, policy: Policy, listing: list[Instance], rep: ReconcileReport) -> bool:
    """Each side-effect intent without a result gets a recovered one; True when something was destroyed."""
    by_label = {i.label: i for i in listing if i.label}
    by_id = {i.id: i for i in listing}
    changed = False

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
            changed = changed or int(args.get("instance_id", 0)) in by_id
        else:
            iid = int(args.get("instance_id", 0))
            st = by_id[iid].actual_status if iid in by_id else "not listed"
            outcome = Outcome(False, error=f"recovered after a restart: outcome unknown; instance {iid} is {st}")
        p = result_payload(call_id, tool, outcome, recovered=True)
        log.append("tool.result", p, "system", tick)
        rep.recovered.append(call_id)
        log_.warning("reconcile.intent", call_id=call_id, tool=tool, ok=p["ok"])
    return changed


def _settled_rent(policy: Policy, key: str | None, args: dict[str, Any], by_label: dict[str, Instance]) -> Outcome:
    """Our label on a listed instance: the rent succeeded; none: it did not happen. Never re-sent."""
    label = policy.label_for(key or "")
    inst = by_label.get(label)
    if inst is None:
        return Outcome(False, error=f"recovered after a restart: no instance carries label {label}; "
                       "the rent did not happen (it was not re-sent)")
    eff = {"type": "rented", "instance_id": inst.id, "label": label, "idem_key": key,
           "offer_id": args.get("offer_id"), "gpu_name": inst.gpu_name, "dph": inst.dph_total}
    return Outcome(True, f"recovered after a restart: instance {inst.id} carries our label "
                   f"{label}, so the rent succeeded", effect=eff)


def _settled_destroy(vast: VastClient, args: dict[str, Any], by_id: dict[int, Instance]) -> Outcome:
    """Destroy is idempotent: completed when the instance is still listed."""
    iid = int(args.get("instance_id", 0))
    if iid in by_id:
        vast.destroy(iid)
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
                      destroy_orphans: bool, settings: Settings | None) -> bool:
    """Adopt, flag orphans (destroyed when policy says so), record the gone; True when something was destroyed."""
    by_id = {i.id: i for i in listing}
    changed = False

    # 4. Ownership: adopt, orphans, gone.
    owned = set(log.store.owned_instance_ids())
    known_keys = log.store.rent_keys()
    for inst in listing:
        if inst.id in owned or not policy.is_our_label(inst.label):
            continue
        key = policy.key_of(inst.label)
        if key in known_keys:
            log.append("instance.adopted", {"instance_id": inst.id, "label": inst.label, "idem_key": key,
                                            "gpu_name": inst.gpu_name, "dph": inst.dph_total}, "system")
            rep.adopted.append(inst.id)
            continue
        rep.orphans.append(inst.id)
        _orphan(log, vast, inst, destroy_orphans=destroy_orphans, settings=settings)
        changed = changed or destroy_orphans
    for iid in sorted(owned - set(by_id)):
        log.append("instance.gone", {"instance_id": iid, "last_status": None}, "system")
        rep.gone.append(iid)
    return changed


def _orphan(log: EventLog, vast: VastClient, inst: Instance, *, destroy_orphans: bool,
            settings: Settings | None) -> None:
    """An instance carrying our label that no event knows: a critical alert, and destroyed if policy says so."""
    from agent.feedback import raise_alert

    raise_alert(log, key=f"orphan:{inst.id}", severity="critical",
                title=f"Orphan instance {inst.id} carries our label but no event knows it",
                detail=f"label {inst.label}, {inst.gpu_name}, ${inst.dph_total or 0:.3f}/h, status "
                f"{inst.actual_status}; " + ("destroying it (policy.destroy_orphans)" if destroy_orphans
                                             else "set policy.destroy_orphans or destroy it by hand"),
                settings=settings)
    if destroy_orphans:
        vast.destroy(inst.id)
