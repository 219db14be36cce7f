"""Manual actions through the log: the account's instances, an operator's destroy, a drain.

An operator's destroy is the model's ``destroy_instance`` run through the same pipeline
(agent.fleet.pipeline.run_tool_call): ``operator.destroy`` (who, why) is logged first, then the intent
(``tool.called`` with its idempotency key), the call, and the result, so a crash between them is
reconciled like any other destroy. It is refused for an instance that is not ours unless forced;
the model's pause and hourly destroy limit do not bind an operator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent.clients.vast import Instance
from agent.errors import UsageError
from agent.fleet import steering
from agent.fleet.pipeline import run_destroy
from agent.fleet.policy import Policy
from agent.fleet.toolkit import Outcome, ToolContext
from agent.runtime.app import App
from agent.store.log import EventLog
from agent.times import utc_ts

HISTORY_TICKS = 500  # how many past observations 'since' looks back through


def _status(i: Instance) -> str:
    return i.actual_status or "provisioning"


def status_since(log: EventLog, ids: set[int], limit: int = HISTORY_TICKS) -> dict[int, str]:
    """instance id -> the ts of the oldest observation in the unbroken run of ticks that saw it in its
    current (newest observed) status, from the last ``limit`` ticks."""
    current: dict[int, str] = {}
    since: dict[int, str] = {}
    open_ = set(ids)
    for e in log.read(0, kinds=["tick.started"], newest_first=True, limit=limit):
        seen = {int(x["id"]): str(x.get("status")) for x in (e.payload.get("observation") or {}).get("instances", [])
                if isinstance(x.get("id"), int)}
        for iid in list(open_):
            st = seen.get(iid)
            if st is None or (iid in current and st != current[iid]):
                open_.discard(iid)
                continue
            current.setdefault(iid, st)
            since[iid] = e.ts
        if not open_:
            break
    return since


def _context(app: App, by: str | None) -> ToolContext:
    s = app.settings
    return ToolContext(settings=s, log=app.log, vast=app.vast(), demand=None, policy=Policy(s),
                       tick=None, clock=app.clock, operator=by)


def instances(app: App) -> list[dict[str, Any]]:
    """Every instance on the account (ours and others) as vast.ai lists it now."""
    ctx = _context(app, None)
    ctx.refresh()
    owned = {i.id for i in ctx.ours()}
    now = app.clock()
    since = status_since(app.log, {i.id for i in ctx.instances})
    rows = []
    for i in sorted(ctx.instances, key=lambda x: x.id):
        rows.append({"id": i.id, "ours": i.id in owned, "status": _status(i), "status_since": since.get(i.id),
                     "age_s": round(max(0.0, now - i.start_date), 0) if i.start_date else None,
                     "dph": i.dph_total, "gpu_name": i.gpu_name, "num_gpus": i.num_gpus or 1, "host_id": i.host_id,
                     "label": i.label, "status_msg": i.status_msg})
    return rows


@dataclass(frozen=True)
class Destroyed:
    instance_id: int
    outcome: Outcome
    event_seq: int


def _ours(ctx: ToolContext, iid: int, label: str | None) -> bool:
    return ctx.known_to_log(iid) or ctx.policy.is_our_label(label)


def check_destroyable(ctx: ToolContext, iid: int, *, force: bool) -> Instance:
    """The listed instance ``iid``; a UsageError when it is not listed, or not ours without ``force``."""
    inst = next((i for i in ctx.instances if i.id == iid), None)
    if inst is None:
        raise UsageError(f"instance {iid} is not on the account (vast.ai does not list it); "
                         "'fleet-agent instances' lists what is")
    if not force and not _ours(ctx, iid, inst.label):
        raise UsageError(f"instance {iid} is not ours (label {inst.label or 'none'!r}; no event of ours rented "
                         "or adopted it); pass --force to destroy it anyway")
    return inst


def destroy(app: App, iid: int, *, by: str, reason: str, force: bool) -> Destroyed:
    """Destroy ``iid`` through the tool pipeline, after logging who asked and why."""
    ctx = _context(app, by)
    ctx.refresh()
    check_destroyable(ctx, iid, force=force)
    return _destroy_one(app, ctx, iid, by=by, reason=reason, force=force)


def _destroy_one(app: App, ctx: ToolContext, iid: int, *, by: str, reason: str, force: bool) -> Destroyed:
    e = app.log.append("operator.destroy", {"instance_id": iid, "by": by, "reason": reason,
                                            "force": force or None}, "operator")
    outcome = run_destroy(ctx, iid, call_id=f"op_{e.seq}", reason=reason, dry_run=app.settings.policy.dry_run)
    return Destroyed(iid, outcome, e.seq)


def drain(app: App, *, by: str, reason: str) -> tuple[list[Destroyed], int]:
    """Pause (open-ended, so no tick rents meanwhile), then destroy every instance of ours. Returns the
    destroys and the pause's seq."""
    ctx = _context(app, by)
    ctx.refresh()
    ours = sorted(i.id for i in ctx.ours())
    app.log.append("operator.drain", {"by": by, "reason": reason, "instance_ids": ours}, "operator")
    p = steering.paused(app.log)
    seq = p.id if p is not None else steering.pause(app.log, by=by, reason=f"drain: {reason}", until=None).seq
    done = [_destroy_one(app, ctx, iid, by=by, reason=f"drain: {reason}", force=False) for iid in ours]
    return done, seq


def now_ts(app: App) -> str:
    return utc_ts(app.log.clock())
