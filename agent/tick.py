"""One tick: lock, reconcile, observe, ingest feedback, compact, model loop.

Every step is an event committed before anything depends on it: the intent of
a side effect is logged before the call, its result after. Any failure ends the
tick with ``tick.failed`` and a reason; the next tick starts clean.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import structlog

from agent import compaction, context, feedback
from agent.clients.demand import DemandError
from agent.clients.vast import VastError
from agent.errors import FleetAgentError
from agent.llm import LLMError
from agent.lock import FleetLock
from agent.policy import Policy
from agent.reconcile import reconcile
from tools import fleet as fleet_tools
from tools import registry
from tools.registry import Outcome, ToolContext, ToolInputError

log_ = structlog.get_logger(__name__)

MAX_CALLS_PER_STEP = 16
UNREACHABLE = ("timeout", "connection", "server", "rate_limit", "auth")


@dataclass
class TickResult:
    tick: int
    ok: bool
    reason: str | None
    steps: int
    usage: dict[str, int] = field(default_factory=dict)
    duration_ms: float = 0.0
    actions: list[str] = field(default_factory=list)


def next_tick_number(app: Any) -> int:
    row = app.log.conn.execute("SELECT MAX(tick) FROM events WHERE kind IN ('tick.started', 'tick.failed')").fetchone()
    return (row[0] or 0) + 1


def _status(i: Any) -> str:
    return i.actual_status or "provisioning"


def observe(app: Any, ctx: ToolContext, tick: int) -> dict[str, Any]:
    """The compact, deterministic observation of this tick (one list call, done by reconcile)."""
    now = app.clock()
    owned = ctx.owned_ids()
    insts = []
    for i in sorted(ctx.instances, key=lambda x: x.id):
        ours = i.id in owned or ctx.policy.is_our_label(i.label)
        insts.append({"id": i.id, "label": i.label or "", "gpu_name": i.gpu_name or "?", "num_gpus": i.num_gpus or 1,
                      "status": _status(i), "status_msg": (i.status_msg or None) if _status(i) != "running" else None,
                      "dph": round(i.dph_total or 0.0, 4), "age_s": round(max(0.0, now - (i.start_date or now)), 0),
                      "host_id": i.host_id, "ours": ours})
    obs: dict[str, Any] = {"time": round(now, 0), "instances": insts,
                           "fleet_dph": round(sum(x["dph"] for x in insts if x["ours"]), 4), "errors": []}
    try:
        obs["balance"] = ctx.vast.current_user().balance
    except VastError as e:
        obs["balance"] = None
        obs["errors"].append(f"balance unavailable: {e}")
    prev = next(app.log.read(0, kinds=["tick.started"], newest_first=True, limit=1), None)
    prev_obs = prev.payload["observation"] if prev else {}
    if ctx.demand is not None:
        try:
            d = ctx.demand.get()
            pd = (prev_obs.get("demand") or {}).get("pending")
            obs["demand"] = {"pending": d.pending, "running": d.running, "completed": d.completed,
                             "arrival_rate_per_h": d.arrival_rate_per_h,
                             "pending_delta": (d.pending - pd) if isinstance(pd, int) else None}
        except (DemandError, VastError) as e:
            obs["demand"] = None
            obs["errors"].append(f"demand unavailable: {e}")
    else:
        obs["demand"] = None
    before = {x["id"]: x["status"] for x in prev_obs.get("instances", [])}
    changes = []
    for x in insts:
        if x["id"] not in before:
            changes.append(f"#{x['id']} new ({x['status']})")
        elif before[x["id"]] != x["status"]:
            changes.append(f"#{x['id']} {before[x['id']]} -> {x['status']}")
    for iid in sorted(set(before) - {x["id"] for x in insts}):
        changes.append(f"#{iid} gone")
    obs["changes"] = changes
    obs["open_alerts"] = [f"#{r[0]} {r[1]}: {r[2]} (x{r[3]})" for r in app.log.conn.execute(
        "SELECT id, severity, title, count FROM alerts WHERE status = 'open' ORDER BY id")]
    return obs


def execute_call(ctx: ToolContext, call: dict[str, Any], *, dry_run: bool) -> tuple[Outcome, bool]:
    """Validate, check policy, log the intent, run, log the result. Returns (outcome, blocked)."""
    log, tick, cid, name = ctx.log, ctx.tick, call["id"], call["name"]

    def result(o: Outcome) -> None:
        p: dict[str, Any] = {"call_id": cid, "name": name, "ok": o.ok}
        if o.ok:
            p["output"] = o.output
        else:
            p["error"] = o.error or o.output or "failed"
        if o.effect:
            p["effect"] = o.effect
        log.append("tool.result", p, "tool", tick)

    try:
        tool = registry.get(name)
        args = registry.parse_arguments(tool, call["arguments"])
    except ToolInputError as e:
        o = Outcome(False, error=f"not run: {e}")
        result(o)
        return o, False
    try:
        if tool.side_effect:
            check = fleet_tools.CHECKS.get(name)
            block = check(ctx, args) if check else None
            if block is not None:
                o = Outcome(False, error=block.message(), blocked=(block.rule, block.detail))
                log.append_many([
                    ("policy.blocked", {"call_id": cid, "name": name, "rule": block.rule, "detail": block.detail},
                     "system", tick),
                    ("tool.result", {"call_id": cid, "name": name, "ok": False, "error": block.message()}, "tool",
                     tick),
                ])
                log_.warning("policy.blocked", tick=tick, tool=name, rule=block.rule, detail=block.detail)
                return o, True
            if dry_run:
                log.append("tool.called", {"call_id": cid, "name": name, "arguments": call["arguments"],
                                           "side_effect": False, "dry_run": True}, "tool", tick)
                o = Outcome(True, f"dry run: {name} passed policy and was NOT sent "
                            f"({json.dumps({k: v for k, v in args.items() if not k.startswith('_')}, sort_keys=True)})")
                result(o)
                return o, False
            ctx.idem_key = uuid.uuid4().hex[:12]
            # The intent is committed before the call: after a crash, reconcile finds it.
            log.append("tool.called", {"call_id": cid, "name": name, "arguments": call["arguments"],
                                       "idempotency_key": ctx.idem_key, "side_effect": True}, "tool", tick)
        else:
            log.append("tool.called", {"call_id": cid, "name": name, "arguments": call["arguments"],
                                       "side_effect": False}, "tool", tick)
        o = tool.handler(ctx, args)
    except (VastError, DemandError) as e:
        o = Outcome(False, error=f"{name} failed: {e}")
    except FleetAgentError as e:
        o = Outcome(False, error=f"{name} failed: {e}")
    finally:
        ctx.idem_key = None
    result(o)
    return o, False


def _normalise_calls(reply: Any, tick: int, step: int) -> list[dict[str, Any]]:
    """Give every tool call an id unique in the whole log (models reuse ids like 'call_0')."""
    return [{"id": f"call_{tick}_{step}_{n}", "name": c.name or "", "arguments": c.arguments or ""}
            for n, c in enumerate(reply.tool_calls)]


def run_tick(app: Any, *, stop: threading.Event | None = None) -> TickResult:
    """Run one tick end to end; never raises for ordinary failures (returns ok=False)."""
    lock = None
    if not getattr(app, "lock_held", False):
        lock = FleetLock(app.settings.data_path).acquire(wait=5.0)
    try:
        return _run(app, stop or threading.Event())
    finally:
        if lock is not None:
            lock.release()


def _run(app: Any, stop: threading.Event) -> TickResult:
    s = app.settings
    log = app.log
    t0 = time.monotonic()
    tick = next_tick_number(app)
    usage = {"prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0}
    actions: list[str] = []
    steps = 0
    structlog.contextvars.bind_contextvars(tick=tick)
    try:
        policy = Policy(s)
        ctx = ToolContext(settings=s, log=log, vast=app.vast(), demand=app.demand(), policy=policy, tick=tick,
                          clock=app.clock)
        try:
            rep, ctx.instances = reconcile(log, ctx.vast, policy, destroy_orphans=s.policy.destroy_orphans,
                                           settings=s)
        except VastError as e:
            return _fail(app, tick, f"vast.ai unavailable, nothing done: {e}", "vast", 0, usage, t0)
        obs = observe(app, ctx, tick)
        log.append("tick.started", {"observation": obs}, "scheduler", tick)
        feedback.scan_knowledge(log, s, tick)
        feedback.check_conditions(log, s, obs, tick)

        provider = app.provider()
        tools = app.tool_specs()
        policy_d = app.policy_dict()
        cs = s.context
        model_name = getattr(provider, "name", s.model.name)
        summarizer = provider if getattr(provider, "can_summarise", True) else None
        deadline = t0 + s.schedule.tick_timeout
        overflow_retried = False
        blocks = 0
        while steps < s.schedule.max_steps:
            if stop.is_set():
                return _fail(app, tick, "stopped: the daemon is shutting down", "stopped", steps, usage, t0)
            if time.monotonic() > deadline:
                return _fail(app, tick, f"time budget of {s.schedule.tick_timeout:.0f}s used up", "timeout",
                             steps, usage, t0)
            proj = context.project(log, app.prompts, cs, policy=policy_d, tools=tools, model=model_name,
                                   cache=app.projection_cache)
            if context.needs_compaction(proj, cs) or not context.fits(proj, cs):
                _compact(app, tick, summarizer, policy_d, tools, model_name, force=False)
                proj = context.project(log, app.prompts, cs, policy=policy_d, tools=tools, model=model_name,
                                       cache=app.projection_cache)
            req = log.append("model.request", context.request_payload(proj), "system", tick)
            steps += 1
            try:
                reply = provider.complete(proj.messages, tools)
            except LLMError as e:
                log.append("model.failed", {"error_kind": e.kind, "message": str(e)[:500], "request_seq": req.seq},
                           "system", tick)
                if e.kind == "context_length" and not overflow_retried:
                    overflow_retried = True
                    _compact(app, tick, summarizer, policy_d, tools, model_name, force=True)
                    continue
                if e.kind in UNREACHABLE:
                    feedback.raise_alert(log, key="model:unreachable", severity="warning",
                                         title="Model endpoint failing", detail=f"{e.kind}: {str(e)[:300]}",
                                         tick=tick, settings=s)
                return _fail(app, tick, f"model call failed ({e.kind}): {str(e)[:300]}", e.kind, steps, usage, t0)
            feedback.resolve_alert(log, "model:unreachable", "the model answered again", tick)
            calls = _normalise_calls(reply, tick, steps)
            payload = reply.to_payload()
            payload.update({"tool_calls": calls, "request_seq": req.seq, "provider": getattr(provider, "name", "")})
            log.append("model.response", payload, "model", tick)
            for k in usage:
                usage[k] += int(payload["usage"].get(k, 0) or 0)
            if reply.usage.prompt_tokens:
                context.update_calibration(log, proj.tokens, reply.usage.prompt_tokens, tick=tick)
            if not calls:
                break
            for n, call in enumerate(calls):
                if n >= MAX_CALLS_PER_STEP:
                    log.append("tool.result", {"call_id": call["id"], "name": call["name"], "ok": False,
                                               "error": f"not run: at most {MAX_CALLS_PER_STEP} tool calls run "
                                               "per response"}, "tool", tick)
                    continue
                outcome, blocked = execute_call(ctx, call, dry_run=s.policy.dry_run)
                blocks += int(blocked)
                if outcome.effect:
                    actions.append(f"{outcome.effect['type']} {outcome.effect.get('instance_id')}")
        feedback.note_policy_blocks(log, s, blocks, tick)
        dur = (time.monotonic() - t0) * 1000
        log.append("tick.completed", {"steps": steps, "usage": usage, "actions": actions, "duration_ms": dur},
                   "system", tick)
        log_.info("tick", tick=tick, ok=True, steps=steps, actions=actions, duration_ms=round(dur), **usage)
        return TickResult(tick, True, None, steps, usage, dur, actions)
    except FleetAgentError as e:
        return _fail(app, tick, str(e), type(e).__name__, steps, usage, t0)
    except Exception as e:  # noqa: BLE001 - a tick must end as tick.failed whatever broke; the schedule goes on
        log_.exception("tick.crashed", tick=tick)
        return _fail(app, tick, f"internal error: {type(e).__name__}: {e}", "internal", steps, usage, t0)
    finally:
        structlog.contextvars.unbind_contextvars("tick")


def _compact(app: Any, tick: int, summarizer: Any, policy_d: dict[str, Any], tools: list[dict[str, Any]],
             model_name: str, *, force: bool) -> None:
    log = app.log
    open_ids = [r[0] for r in log.conn.execute("SELECT id FROM alerts WHERE status = 'open'")]
    owned = [r[0] for r in log.conn.execute("SELECT instance_id FROM instances WHERE status = 'active'")]
    compaction.compact(log, app.prompts, app.settings.context, policy=policy_d, tools=tools, summarizer=summarizer,
                       tick=tick, open_alert_ids=open_ids, owned_instance_ids=owned, model_name=model_name,
                       force=force, cache=app.projection_cache)


def _fail(app: Any, tick: int, reason: str, kind: str, steps: int, usage: dict[str, int], t0: float) -> TickResult:
    from agent.secrets import scrub

    reason = scrub(reason)
    dur = (time.monotonic() - t0) * 1000
    try:
        app.log.append("tick.failed", {"reason": reason, "error_kind": kind, "steps": steps}, "system", tick)
    except FleetAgentError:
        log_.exception("tick.failed_unlogged", tick=tick)
    log_.warning("tick", tick=tick, ok=False, reason=reason, steps=steps, duration_ms=round(dur), **usage)
    return TickResult(tick, False, reason, steps, usage, dur)


def reconcile_at_start(app: Any) -> None:
    """At daemon start: settle dangling intents before the first tick acts."""
    try:
        reconcile(app.log, app.vast(), Policy(app.settings), destroy_orphans=app.settings.policy.destroy_orphans,
                  settings=app.settings)
    except VastError as e:
        log_.warning("reconcile.deferred", reason=str(e))
