"""One tool call, start to end: validate -> check -> log intent -> call -> log result.

Every call the model makes runs through ``run_tool_call`` and nowhere else:

1. validate: the tool exists and the arguments match its spec, else an error
   result ("not run: ...") and nothing else happens;
1b. steer: the policy in force is the config with the operator's unexpired overrides
   (agent.fleet.steering); while the fleet is paused an ``Action`` is refused (``paused``);
2. check: an ``Action``'s ``check`` returns a policy ``Block`` (logged as
   ``policy.blocked`` with the result; nothing is sent) or the prepared value; a ``Tool``
   may declare a check that returns a ``Block`` or None;
3. log intent: an action's ``tool.called``, committed before the call, carries a
   fresh idempotency key (its instance label), which is what reconcile finds after
   a crash; then the log's fence (a daemon's leadership check, agent.runtime.leader) must
   pass, or nothing is sent; a call with no side effect (a read, a dry run, marked ``dry_run``) logs
   its ``tool.called`` with its result instead, in one transaction;
4. call: the handler, given the prepared value and the key for an action;
5. log result: ``tool.result``, built by ``result_payload`` (the one builder of
   that payload, which reconcile uses for the results it recovers).
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from typing import Any, TypedDict

from agent import logsetup
from agent.errors import FleetAgentError
from agent.fleet import steering
from agent.fleet.block import Block
from agent.fleet.policy import Policy
from agent.fleet.toolkit import (
    Action,
    Args,
    Outcome,
    Toolbox,
    ToolContext,
    ToolInputError,
    load_tools,
    parse_arguments,
)
from agent.store.log import EventLog

log_ = logsetup.get_logger(__name__)


class ToolCall(TypedDict):
    """A call as the tick logs it in ``model.response`` (its id rewritten unique in the log)."""

    id: str
    name: str
    arguments: str


def result_payload(call_id: str, name: str, outcome: Outcome, *, recovered: bool = False) -> dict[str, Any]:
    """The ``tool.result`` payload of an outcome (``recovered``: settled by reconcile, not run)."""
    p: dict[str, Any] = {"call_id": call_id, "name": name, "ok": outcome.ok}
    if recovered:
        p["recovered"] = True
    if outcome.ok:
        p["output"] = outcome.output
    else:
        p["error"] = outcome.error or outcome.output or "failed"
    if outcome.effect:
        p["effect"] = outcome.effect
    return p


def log_result(log: EventLog, call: ToolCall, outcome: Outcome, tick: int | None) -> Outcome:
    log.append("tool.result", result_payload(call["id"], call["name"], outcome), "tool", tick)
    return outcome


def bind_steering(ctx: ToolContext) -> None:
    """Check the call against the policy in force now: the config with the operator's unexpired
    overrides applied (read from the log at every call, so an override set while a tick runs binds
    its next call)."""
    if ctx.configured is None:
        ctx.configured = ctx.settings
    effective = steering.effective_policy(ctx.configured, ctx.log)
    if effective != ctx.settings.policy:
        ctx.settings = dataclasses.replace(ctx.configured, policy=effective)
        ctx.policy = Policy(ctx.settings)


def pause_block(ctx: ToolContext) -> Block | None:
    """While the fleet is paused no side-effecting call runs (an operator's own destroy does)."""
    if ctx.operator is not None:
        return None
    p = steering.paused(ctx.log)
    if p is None:
        return None
    return Block("paused", f"{p.describe()}; nothing that changes the fleet runs until an operator runs "
                 "'fleet-agent resume' or the pause ends")


def run_tool_call(toolbox: Toolbox, ctx: ToolContext, call: ToolCall, *, dry_run: bool) -> tuple[Outcome, bool]:
    """Run one call through the pipeline. Returns (outcome, blocked by policy)."""
    try:
        tool = toolbox.get(call["name"])
        args = parse_arguments(tool, call["arguments"])
    except ToolInputError as e:
        return _not_run(ctx.log, call, str(e), ctx.tick), False
    try:
        bind_steering(ctx)
        if isinstance(tool, Action):
            block = pause_block(ctx)
            if block is not None:
                return _blocked(ctx, call, block), True
            return _run_action(tool, ctx, call, args, dry_run=dry_run)
        block = tool.check(ctx, args) if tool.check is not None else None
        if block is not None:
            return _blocked(ctx, call, block), True
        outcome = tool.handler(ctx, args)
    except FleetAgentError as e:  # vast.ai, the demand queue, the log: the model reads what failed
        outcome = Outcome(False, error=f"{call['name']} failed: {e}")
    return _log_read_only(ctx, call, {"side_effect": False}, outcome), False


def _run_action(tool: Action[Any], ctx: ToolContext, call: ToolCall, args: Args, *,
                dry_run: bool) -> tuple[Outcome, bool]:
    prepared = tool.check(ctx, args)
    if isinstance(prepared, Block):
        return _blocked(ctx, call, prepared), True
    if dry_run:
        sent = json.dumps(args, sort_keys=True)
        outcome = Outcome(True, f"dry run: {tool.name} passed policy and was NOT sent ({sent})")
        return _log_read_only(ctx, call, {"side_effect": False, "dry_run": True}, outcome), False
    key = uuid.uuid4().hex[:12]
    # The intent is committed before the call: after a crash, reconcile finds it.
    who = {"by": ctx.operator} if ctx.operator else {}
    _log_call(ctx, call, {"idempotency_key": key, "side_effect": True, **who})
    # Fencing: a daemon that lost the fleet's lock since the intent committed sends nothing
    # (LeadershipLost propagates; the active daemon's reconcile settles the intent).
    ctx.log.check_fence()
    try:
        outcome = tool.handler(ctx, args, prepared, key)
    except FleetAgentError as e:
        outcome = Outcome(False, error=f"{tool.name} failed: {e}")
    return log_result(ctx.log, call, outcome, ctx.tick), False


def _log_call(ctx: ToolContext, call: ToolCall, extra: dict[str, Any]) -> None:
    ctx.log.append("tool.called", {"call_id": call["id"], "name": call["name"], "arguments": call["arguments"],
                                   **extra}, "tool", ctx.tick)


def _log_read_only(ctx: ToolContext, call: ToolCall, extra: dict[str, Any], outcome: Outcome) -> Outcome:
    """A call with no side effect: its ``tool.called`` and ``tool.result`` commit together, after it ran,
    with the next commit of the tick (``EventLog.holding``: the model sees neither before the next
    request). Events the handler itself appended (memory, an alert) come before them; ``tool.called``
    is not model-visible, so what the model sees is in the same order."""
    ctx.log.append_held([
        ("tool.called", {"call_id": call["id"], "name": call["name"], "arguments": call["arguments"], **extra},
         "tool", ctx.tick),
        ("tool.result", result_payload(call["id"], call["name"], outcome), "tool", ctx.tick),
    ])
    return outcome


def _blocked(ctx: ToolContext, call: ToolCall, block: Block) -> Outcome:
    outcome = Outcome(False, error=block.message(), blocked=(block.rule, block.detail))
    ctx.log.append_held([
        ("policy.blocked", {"call_id": call["id"], "name": call["name"], "rule": block.rule,
                            "detail": block.detail}, "system", ctx.tick),
        ("tool.result", result_payload(call["id"], call["name"], outcome), "tool", ctx.tick),
    ])
    log_.warning("policy.blocked", tick=ctx.tick, tool=call["name"], rule=block.rule, detail=block.detail)
    return outcome


def refuse_call(log: EventLog, call: ToolCall, reason: str, tick: int) -> Outcome:
    """A call the tick does not run at all (past the per-response limit): its error result only."""
    return _not_run(log, call, reason, tick)


def _not_run(log: EventLog, call: ToolCall, reason: str, tick: int | None) -> Outcome:
    """The error result of a call that did not run: nothing happened, so it commits with the next commit
    of the tick (``EventLog.holding``), as a read-only call's result does."""
    outcome = Outcome(False, error=f"not run: {reason}")
    log.append_held([("tool.result", result_payload(call["id"], call["name"], outcome), "tool", tick)])
    return outcome


def run_destroy(ctx: ToolContext, iid: int, *, call_id: str, reason: str, dry_run: bool) -> Outcome:
    """Destroy ``iid`` through this pipeline (intent with idempotency key, call, result) on behalf of an
    operator or of the system's own repair, whose reason event the caller has logged. The installed
    ``destroy_instance`` tool runs with a check that only hands its handler the id: the caller has settled
    ownership, and the model's limits (hourly destroys) do not bind these."""
    tool = load_tools().get("destroy_instance")
    if not isinstance(tool, Action):
        raise FleetAgentError("the installed destroy_instance tool is not an action; reinstall fleet-agent")
    call: ToolCall = {"id": call_id, "name": "destroy_instance",
                      "arguments": json.dumps({"instance_id": iid, "reason": reason}, sort_keys=True)}
    outcome, _ = run_tool_call(Toolbox.of([dataclasses.replace(tool, check=lambda ctx, args: iid)]), ctx, call,
                               dry_run=dry_run)
    return outcome


def system_destroy(ctx: ToolContext, iid: int, *, status: str, reason: str, dry_run: bool) -> Outcome:
    """The system's own destroy of ``iid``: ``system.destroy`` (why) first, then ``run_destroy``; on success (not
    a dry run) it leaves ``ctx.instances``."""
    e = ctx.log.append("system.destroy", {"instance_id": iid, "status": status, "reason": reason}, "system",
                       ctx.tick)
    outcome = run_destroy(ctx, iid, call_id=f"sys_{e.seq}", reason=reason, dry_run=dry_run)
    if outcome.ok and not dry_run:
        ctx.instances = [i for i in ctx.instances if i.id != iid]
    return outcome
