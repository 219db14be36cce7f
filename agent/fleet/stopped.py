"""The tick's own destroy of an instance of ours that vast.ai shows stopped.

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
from agent.fleet import steering
from agent.fleet.pipeline import run_destroy
from agent.fleet.toolkit import Outcome, ToolContext

log_ = logsetup.get_logger(__name__)

STOPPED = "stopped"
REASON = "stopped without our asking: fleet-agent never stops an instance; it bills storage"


def _already(ctx: ToolContext) -> set[int]:
    """Instances the system has already destroyed (or tried to) because they were stopped."""
    return {int(e.payload["instance_id"]) for e in ctx.log.read(0, kinds=["system.destroy"])}


def destroy_stopped(ctx: ToolContext, *, dry_run: bool) -> list[Outcome]:
    """Destroy each listed instance of ours that shows stopped and was not destroyed for it before.
    Nothing while the fleet is paused. Returns the outcomes, in instance order."""
    stopped = sorted(i.id for i in ctx.ours() if i.actual_status == STOPPED)
    if not stopped or steering.paused(ctx.log) is not None:
        return []
    done = _already(ctx)
    outcomes = []
    for iid in (i for i in stopped if i not in done):
        e = ctx.log.append("system.destroy", {"instance_id": iid, "status": STOPPED, "reason": REASON}, "system",
                           ctx.tick)
        outcome = run_destroy(ctx, iid, call_id=f"sys_{e.seq}", reason=REASON, dry_run=dry_run)
        log_.warning("stopped.destroyed", instance_id=iid, ok=outcome.ok, dry_run=dry_run)
        if outcome.ok and not dry_run:
            ctx.instances = [i for i in ctx.instances if i.id != iid]
        outcomes.append(outcome)
    return outcomes
