"""Drain first: an instance being retired finishes its job before it goes.

An instance of ours is being retired when it will stop working within ``policy.retire_ahead_hours`` (never under
two ticks): its contract ends (vast.ai stops it for good) or its machine's next maintenance window starts (the host
takes the machine down for hours; ``GET /machines/maintenances``). Until then it works as any other: a window
announced a day ahead does not cost the fleet a day of a machine it chose for its price. Its replacement is
rented ahead of time (the instance no longer counts as capacity, agent/model/rules.py). The tick, whatever the
model provider:

1. labels it ``<label>-draining`` (``system.drain``): the workers finish the job in hand and take no new one;
2. destroys it once it is idle (GPU utilisation under ``IDLE_UTIL`` %, or not running at all), or ``FINAL_S``
   before it would stop, whatever it is doing (``system.destroy``, status ``draining``, through the same pipeline
   as the model's destroys).

Nothing while the fleet is paused; a dry run logs each label once and sends nothing.
"""

from __future__ import annotations

from dataclasses import replace

from agent import logsetup
from agent.clients.vast import Instance, VastError
from agent.fleet import contracts, steering
from agent.fleet.pipeline import system_destroy
from agent.fleet.toolkit import Outcome, ToolContext

log_ = logsetup.get_logger(__name__)

DRAINING = "-draining"  # the label suffix the workers read: finish the job in hand, take no new one
FINAL_S = 1800.0  # destroyed this long before it would stop, busy or not
IDLE_UTIL = 5.0  # % GPU utilisation under which a draining instance has finished its job
GONE = ("exited", "offline", "unknown", "stopped")  # not working any more: the rest of the tick handles those


def draining(label: str | None) -> bool:
    return bool(label) and str(label).endswith(DRAINING)


def with_maintenance(ctx: ToolContext) -> None:
    """Set ``maint_start`` on each listed instance of ours whose machine has a maintenance window not over yet
    (the earliest). One call; when it fails the tick goes on without (logged as a warning)."""
    first = contracts.maintenance_starts(ctx.vast, [i.machine_id for i in ctx.ours() if i.machine_id is not None])
    ctx.instances = [replace(i, maint_start=first[i.machine_id]) if i.machine_id in first else i
                     for i in ctx.instances]


def why(inst: Instance, left: float) -> str:
    ending = "its machine's maintenance starts" if inst.maint_start is not None and (
        inst.end_date is None or inst.maint_start <= inst.end_date) else "its contract ends"
    return f"{ending} {contracts.ends_in(left).removeprefix('ends ')}"


def _idle(inst: Instance) -> bool:
    return inst.actual_status != "running" or (inst.gpu_util is not None and inst.gpu_util < IDLE_UTIL)


def _destroyed(ctx: ToolContext) -> set[int]:
    return {int(e.payload["instance_id"]) for e in ctx.log.read(0, kinds=["system.destroy"])}


def drain(ctx: ToolContext, now: float, *, dry_run: bool) -> list[Outcome]:
    """Label the instances of ours being retired, and destroy the drained ones. Returns the destroys' outcomes."""
    if steering.paused(ctx.log) is not None:
        return []
    labelled_dry = {int(e.payload["instance_id"]) for e in ctx.log.read(0, kinds=["system.drain"])
                    if e.payload.get("dry_run")}
    done = _destroyed(ctx)
    outcomes: list[Outcome] = []
    for inst in sorted(ctx.ours(), key=lambda i: i.id):
        left = contracts.instance_left(inst, now)
        if left is None or not contracts.retiring(left, ctx.settings) or inst.actual_status in GONE or inst.id in done:
            continue
        reason = why(inst, left)
        if not draining(inst.label):
            if dry_run and inst.id in labelled_dry:
                continue
            label = f"{inst.label or ''}{DRAINING}"
            payload: dict[str, object] = {"instance_id": inst.id, "label": label, "reason": reason, "ok": not dry_run}
            if dry_run:
                payload["dry_run"] = True
            else:
                try:
                    ctx.vast.set_label(inst.id, label)
                    ctx.instances = [replace(i, label=label) if i.id == inst.id else i for i in ctx.instances]
                except VastError as e:
                    payload.update(ok=False, error=str(e))
            ctx.log.append("system.drain", payload, "system", ctx.tick)
            log_.info("drain.labelled", instance_id=inst.id, ok=payload["ok"], dry_run=dry_run)
            continue
        if not (_idle(inst) or left <= FINAL_S):
            continue
        text = (f"drained: {reason}; " + ("its last job is done" if _idle(inst) else
                                            f"{int(FINAL_S // 60)} min or less left, busy or not"))
        outcome = system_destroy(ctx, inst.id, status="draining", reason=text, dry_run=dry_run)
        log_.info("drain.destroyed", instance_id=inst.id, ok=outcome.ok, dry_run=dry_run)
        outcomes.append(outcome)
    return outcomes


__all__ = ["DRAINING", "FINAL_S", "IDLE_UTIL", "drain", "draining", "why", "with_maintenance"]
