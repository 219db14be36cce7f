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

from agent.policy import Policy
from agent.store.log import EventLog

log_ = structlog.get_logger(__name__)


@dataclass
class ReconcileReport:
    recovered: list[str] = field(default_factory=list)
    orphans: list[int] = field(default_factory=list)
    gone: list[int] = field(default_factory=list)
    adopted: list[int] = field(default_factory=list)


def _result(call_id: str, name: str, ok: bool, text: str, effect: dict[str, Any] | None = None) -> dict[str, Any]:
    p: dict[str, Any] = {"call_id": call_id, "name": name, "ok": ok, "recovered": True}
    if ok:
        p["output"] = text
    else:
        p["error"] = text
    if effect:
        p["effect"] = effect
    return p


def reconcile(log: EventLog, vast: Any, policy: Policy, *, destroy_orphans: bool,
              instances: list[Any] | None = None, settings: Any = None) -> tuple[ReconcileReport, list[Any]]:
    """Settle dangling intents and ownership against one listing; returns the report and
    the (possibly refreshed) listing."""
    rep = ReconcileReport()
    listing = instances if instances is not None else vast.list_instances()
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
            label = policy.label_for(key or "")
            inst = by_label.get(label)
            if inst is not None:
                eff = {"type": "rented", "instance_id": inst.id, "label": label, "idem_key": key,
                       "offer_id": args.get("offer_id"), "gpu_name": inst.gpu_name, "dph": inst.dph_total}
                p = _result(call_id, tool, True, f"recovered after a restart: instance {inst.id} carries our label "
                            f"{label}, so the rent succeeded", eff)
            else:
                p = _result(call_id, tool, False, f"recovered after a restart: no instance carries label {label}; "
                            "the rent did not happen (it was not re-sent)")
        elif tool == "destroy_instance":
            iid = int(args.get("instance_id", 0))
            if iid in by_id:
                vast.destroy(iid)
                changed = True
            p = _result(call_id, tool, True, f"recovered after a restart: instance {iid} is destroyed",
                        {"type": "destroyed", "instance_id": iid})
        else:
            iid = int(args.get("instance_id", 0))
            st = by_id[iid].actual_status if iid in by_id else "not listed"
            p = _result(call_id, tool, False, f"recovered after a restart: outcome unknown; instance {iid} is {st}")
        log.append("tool.result", p, "system", tick)
        rep.recovered.append(call_id)
        log_.warning("reconcile.intent", call_id=call_id, tool=tool, ok=p["ok"])

    # 2. Tool calls of the last model response that have no result (crash between calls).
    last = next(log.read(0, kinds=["model.response"], newest_first=True, limit=1), None)
    if last is not None and last.payload.get("tool_calls"):
        done = {e.payload["call_id"] for e in log.read(last.seq, kinds=["tool.result"])}
        missing = [c for c in last.payload["tool_calls"] if c["id"] not in done]
        if missing:
            log.append_many([("tool.result", _result(c["id"], c["name"], False,
                                                     "interrupted: the tick stopped before this call finished; "
                                                     "it did not run"), "system", last.tick) for c in missing])
            rep.recovered.extend(c["id"] for c in missing)

    # 3. A tick that started and never ended.
    started = log.store.open_tick()
    if started is not None:
        log.append("tick.failed", {"reason": "interrupted: the process stopped during this tick; "
                                   "recovered at the next start", "error_kind": "interrupted"},
                   "system", started.tick)

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
        from agent.feedback import raise_alert

        raise_alert(log, key=f"orphan:{inst.id}", severity="critical",
                    title=f"Orphan instance {inst.id} carries our label but no event knows it",
                    detail=f"label {inst.label}, {inst.gpu_name}, ${inst.dph_total or 0:.3f}/h, status "
                    f"{inst.actual_status}; " + ("destroying it (policy.destroy_orphans)" if destroy_orphans
                                                 else "set policy.destroy_orphans or destroy it by hand"),
                    settings=settings)
        if destroy_orphans:
            vast.destroy(inst.id)
            changed = True
    for iid in sorted(owned - set(by_id)):
        log.append("instance.gone", {"instance_id": iid, "last_status": None}, "system")
        rep.gone.append(iid)

    if changed:
        listing = vast.list_instances()
    return rep, listing
