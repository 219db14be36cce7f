"""The tick's own destroy of an instance of ours that vast.ai shows stopped, and its own start of one that
vast.ai stopped for lack of credit.

vast.ai creates a stopped instance when a rent cannot be scheduled (every rent sends
``cancel_unavail: true``, but hosts stop instances too), and a stopped instance still bills storage.
fleet-agent never stops an instance, so one of ours that shows ``stopped`` is a failure: after reconcile
and the observation, the tick destroys it in code, whatever the model provider. The destroy runs through
the same pipeline as the model's (agent.fleet.pipeline.run_destroy, the installed ``destroy_instance``):
``system.destroy`` (why) first, then the intent with its idempotency key, the call and the result, so a
crash between them is reconciled like any other destroy. Once per instance: an instance whose destroy was
logged is not destroyed again. While the fleet is paused nothing runs (the ``dead:`` alert stays); a dry
run logs the call as not sent.
"""

from __future__ import annotations

from agent import logsetup
from agent.clients.vast import VastError
from agent.feedback import credit
from agent.fleet import market, steering
from agent.fleet.pipeline import system_destroy
from agent.fleet.toolkit import Outcome, ToolContext

log_ = logsetup.get_logger(__name__)

STOPPED = "stopped"
REASON = "stopped without our asking: fleet-agent never stops an instance; it bills storage"


def _already(ctx: ToolContext) -> set[int]:
    """Instances the system has already destroyed (or tried to) because they were stopped."""
    return {int(e.payload["instance_id"]) for e in ctx.log.read(0, kinds=["system.destroy"])}


def to_destroy(ctx: ToolContext, kept: set[int]) -> list[int]:
    """The ids ``destroy_stopped`` destroys this tick: ours listed stopped, not ``kept`` (stopped for lack of credit:
    a money event, kept for a top-up), not outbid (agent/fleet/market.py), not destroyed for it before; none while
    the fleet is paused. The observation leaves them out of what it asks the model to destroy."""
    stopped = sorted(i.id for i in ctx.ours() if i.actual_status == STOPPED and i.id not in kept
                     and not market.is_outbid(i))
    if not stopped or steering.paused(ctx.log) is not None:
        return []
    done = _already(ctx)
    return [i for i in stopped if i not in done]


def destroy_stopped(ctx: ToolContext, *, dry_run: bool) -> list[Outcome]:
    """Destroy each listed instance of ours that shows stopped and was not destroyed for it before.
    Nothing while the fleet is paused. Returns the outcomes, in instance order."""
    outcomes = []
    for iid in to_destroy(ctx, credit.kept_ids(ctx.log)):
        outcome = system_destroy(ctx, iid, status=STOPPED, reason=REASON, dry_run=dry_run)
        log_.warning("stopped.destroyed", instance_id=iid, ok=outcome.ok, dry_run=dry_run)
        outcomes.append(outcome)
    return outcomes


START_REASON = "stopped by vast.ai for lack of credit; the credit is above policy.credit_reserve again"


def start_kept(ctx: ToolContext, balance: float | None, *, dry_run: bool) -> list[int]:
    """After a top-up: start each instance of ours kept since vast.ai stopped it for lack of credit, with its
    disk, once the credit is above ``policy.credit_reserve``, as far as the policy in force still wants them
    (``max_instances`` and ``max_total_dph`` with the operator's overrides, counting what runs; the model
    scales from there). Start is idempotent, so ``system.start`` is logged after the call with its outcome
    (a crash in between is settled by the next tick, which sees the instance running or starts it again).
    Nothing while the fleet is paused; a dry run logs each start once, not sent. Returns the ids started."""
    reserve = float(ctx.settings.policy.credit_reserve)
    if balance is None or balance <= reserve or steering.paused(ctx.log) is not None:
        return []
    kept = credit.kept_ids(ctx.log)
    waiting = sorted((i for i in ctx.ours() if i.id in kept and i.actual_status == STOPPED), key=lambda i: i.id)
    if not waiting:
        return []
    p = steering.effective_policy(ctx.settings, ctx.log)
    others = [i for i in ctx.ours() if i.id not in kept and i.actual_status not in ("stopped", "exited", "offline")]
    count, dph = len(others), sum(i.dph_total or 0.0 for i in others)
    logged = {int(e.payload["instance_id"]) for e in ctx.log.read(0, kinds=["system.start"]) if e.payload.get("dry_run")}
    started = []
    for inst in waiting:
        iid = inst.id
        if count + 1 > p.max_instances or dph + (inst.dph_total or 0.0) > p.max_total_dph + 1e-9:
            continue  # not wanted under the policy in force: kept stopped for the model to decide
        count, dph = count + 1, dph + (inst.dph_total or 0.0)
        payload: dict[str, object] = {"instance_id": iid, "reason": START_REASON}
        if dry_run:
            if iid not in logged:
                ctx.log.append("system.start", {**payload, "ok": False, "dry_run": True}, "system", ctx.tick)
            continue
        try:
            ctx.vast.start(iid)
        except VastError as e:
            ctx.log.append("system.start", {**payload, "ok": False, "error": str(e)}, "system", ctx.tick)
            log_.warning("stopped.start_failed", instance_id=iid, error=str(e))
            continue
        ctx.log.append("system.start", {**payload, "ok": True}, "system", ctx.tick)
        log_.info("stopped.started", instance_id=iid)
        started.append(iid)
    return started
