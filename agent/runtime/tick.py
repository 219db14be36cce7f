"""One tick: lock, reconcile, observe, ingest feedback, compact, model loop.

Every step is an event committed before anything depends on it: the intent of
a side effect is logged before the call, its result after. Any failure ends the
tick with ``tick.failed`` and a reason; the next tick starts clean.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import structlog

from agent import context, feedback, logsetup
from agent.clients.demand import Demand, DemandError
from agent.clients.vast import Instance, VastError, spendable
from agent.config import ContextSettings
from agent.context import compaction
from agent.context.inputs import log_request
from agent.errors import FleetAgentError
from agent.events import Event
from agent.events.kinds.model import NOT_RUN_REJECT, NOT_RUN_REPEAT, NOT_RUN_UNKNOWN
from agent.events.rendering import inline, need_lines
from agent.feedback import credit
from agent.feedback.knowledge import save_memo
from agent.fleet import constraints, contracts, drain, market, spend, steering, stopped, throughput
from agent.fleet.pipeline import ToolCall, refuse_call, run_tool_call
from agent.fleet.policy import Policy
from agent.fleet.reconcile import UNLISTED, reconcile
from agent.fleet.toolkit import Tool, Toolbox, ToolContext, load_tools
from agent.model import loading, window
from agent.model.llm import LLMError, ModelReply, TextCall, call_with_retries, find_text_calls
from agent.runtime import watch
from agent.runtime.app import App
from agent.runtime.idle import check_idle
from agent.runtime.lock import FleetLock
from agent.store.queries import InstanceState

log_ = logsetup.get_logger(__name__)

MAX_CALLS_PER_STEP = 16
MAX_CORRECTIONS = 2  # replies with tool calls written as text answered with a correction, per tick
ASKED_ALREADY = ("the same call with the same arguments already ran this tick; its answer is above and has not "
                 "changed. Act on it: the observation's `to do:` line says what is left, and when nothing is, reply "
                 "in one sentence and call no tool")
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
    return int(app.log.store.next_tick_number())


def _status(i: Instance) -> str:
    return i.actual_status or "provisioning"


def status_since(states: dict[int, InstanceState], i: Instance, now: float) -> float:
    """When the status vast.ai reports for ``i`` was first observed: kept while it stays the same."""
    prev = states.get(i.id)
    return prev.since if prev is not None and prev.status == _status(i) else now


def _unlisted(app: App, ctx: ToolContext, states: dict[int, InstanceState], now: float) -> list[dict[str, Any]]:
    """Instances of ours rented but not listed yet (vast.ai lists new instances late): shown as ``unlisted``
    so neither the model nor the caps forget them."""
    listed = {i.id for i in ctx.instances}
    out = []
    for o in app.log.owned_instances():
        if o.instance_id in listed:
            continue
        prev = states.get(o.instance_id)
        since = prev.since if prev is not None and prev.status == UNLISTED else now
        out.append({"id": o.instance_id, "label": o.label or "", "gpu_name": o.gpu_name or "?", "num_gpus": 1,
                    "status": UNLISTED, "status_msg": "rented; vast.ai does not list it yet",
                    "dph": round(o.dph or 0.0, 4), "age_s": round(max(0.0, now - since), 0), "since": round(since, 3),
                    "intended": "running", "host_id": None, "ours": True,
                    "gpu_util": None, "up_s": None, "restarts": 0, "jobs": None})
    return out


def _uptime_s(i: Instance) -> float | None:
    """How long the instance has run since it last started, as vast.ai reports it (``uptime_mins``)."""
    up = i.raw.get("uptime_mins")
    return round(float(up) * 60.0, 0) if isinstance(up, int | float) and not isinstance(up, bool) and up >= 0 else None


def _ends_s(app: App, i: Instance, now: float) -> float | None:
    """Seconds until ``i``'s contract ends, only when that is within policy.contract_min_hours (else None):
    vast.ai stops the instance for good then, so the model and the rules replace it ahead of time."""
    left = contracts.instance_left(i, now)
    return round(left, 0) if left is not None and contracts.too_short(left, app.settings.policy) else None


def _maint_s(app: App, i: Instance, now: float) -> float | None:
    """Seconds until the next maintenance window of ``i``'s machine starts (negative once it has), only when that
    is within policy.contract_min_hours (else None). ``ends_s`` is the earlier of this and the contract's end: the
    observation says which stop it is."""
    left = None if i.maint_start is None else i.maint_start - now
    return round(left, 0) if left is not None and contracts.too_short(left, app.settings.policy) else None


def _restarts(prev: dict[str, Any] | None, rec: dict[str, Any], dt: float) -> int:
    """Times the instance stopped running since it was rented, carried from the previous observation: it left
    ``running``, or it runs at both observations but its uptime restarted in between (down between ticks). An
    outbid is the market's doing, not a restart: stopped as outbid, or running again at a raised bid (rebid)."""
    if prev is None:
        return 0
    n = int(prev.get("restarts") or 0)
    outbid = rec["status"] == "stopped" and "outbid" in str(rec.get("status_msg") or "").lower()
    rebid = isinstance(prev.get("bid"), int | float) and isinstance(rec.get("bid"), int | float) \
        and rec["bid"] > prev["bid"]
    if prev.get("status") == "running" and not outbid and not rebid:
        if rec["status"] != "running":
            return n + 1
        up0, up1 = prev.get("up_s"), rec.get("up_s")
        if isinstance(up0, int | float) and isinstance(up1, int | float) and up1 + 60 < up0 + dt:
            return n + 1
    return n


def _queue_trend(obs: dict[str, Any], history: list[dict[str, Any]], now: float) -> float | None:
    """The pending jobs' change per hour over the last hour of observations (None without two readings)."""
    pending = (obs.get("demand") or {}).get("pending")
    if not isinstance(pending, int):
        return None
    for o in history:  # oldest first: the first reading within the hour
        t, p = o.get("time"), (o.get("demand") or {}).get("pending")
        if isinstance(t, int | float) and isinstance(p, int) and 0 < now - t <= 3600:
            return round((pending - p) * 3600.0 / (now - t), 1)
    return None


def _economics(app: App, obs: dict[str, Any], history: list[dict[str, Any]],
               dlperf: dict[str, float] | None = None, barred: dict[int, str] | None = None,
               destroys: list[int] | None = None) -> None:
    """Per GPU model of ours: jobs/h per GPU (learned, else the prior: scaled by vast.ai's ``dlperf`` per GPU
    from the measured models where that is known, recorded as ``dlperf``), what that figure rests on (``basis``:
    measured, configured, dlperf or assumed) and $/job at what we pay, measured traffic included (``traffic_dph``:
    the fleet's, when any was measured); the credit runway at the fleet's current burn (what runs, and its
    traffic); the queue's trend; what the fleet needs now (``need``: jobs/h against what ours deliver, the gap to
    rent, the surplus and the dead to destroy, the ``barred`` to replace, the dead the tick ``destroys`` itself;
    agent/fleet/throughput.py)."""
    tp = throughput.from_observations(app.settings, [*history, obs]).with_dlperf(dlperf or {})
    # vast.ai bills bandwidth per GB on top of dph_total: each running instance's traffic $/h as its counters
    # measured it (agent/fleet/market.py) counts in its model's $/job and in the burn the runway is at
    traffic = app.traffic_dph(x["id"] for x in obs["instances"] if x["ours"] and x["status"] == "running")
    if sum(traffic.values()) >= 0.0005:
        obs["traffic_dph"] = round(sum(traffic.values()), 4)
    models: dict[str, dict[str, Any]] = {}
    for x in obs["instances"]:
        if not x["ours"]:
            continue
        gpu = str(x["gpu_name"])
        m = models.setdefault(gpu, {"instances": 0, "gpus": 0, "dph": 0.0})
        m["instances"] += 1
        m["gpus"] += int(x["num_gpus"] or 1)
        m["dph"] += float(x["dph"] or 0.0) + traffic.get(int(x["id"]), 0.0)
    out = {}
    for gpu in sorted(models):
        m, r = models[gpu], tp.rate(gpu)
        per_job = m["dph"] / (r.jobs_per_h * m["gpus"]) if r.jobs_per_h > 0 and m["gpus"] else None
        out[gpu] = {"instances": m["instances"], "jobs_per_h": round(r.jobs_per_h, 2),
                    "measured_gpu_h": round(r.measured_gpu_h, 2),
                    "usd_per_job": None if per_job is None else round(per_job, 4), "basis": tp.basis(gpu)}
        if dlperf and dlperf.get(gpu):
            out[gpu]["dlperf"] = dlperf[gpu]
    obs["gpu_models"] = out
    bal, burn = obs.get("balance"), credit.burn_rate(obs)
    obs["runway_h"] = round(bal / burn, 1) if isinstance(bal, int | float) and burn > 0 else None
    if isinstance(obs.get("demand"), dict):
        obs["demand"]["trend_per_h"] = _queue_trend(obs, history, obs["time"])
    s = app.settings
    limit, rented = loading.of_log(app.log, [*history, obs])
    obs["need"] = throughput.fleet_need(obs, tp, drain_h=float(s.policy.drain_within) / 3600.0,
                                        interruptible=s.policy.interruptible,
                                        tick_h=float(s.schedule.interval) / 3600.0,
                                        stuck_after=float(s.alerts.stuck_after), loading_limit=limit, rented=rented,
                                        barred=barred, destroys=destroys or ())


def observe(app: App, ctx: ToolContext, tick: int) -> dict[str, Any]:
    """The compact, deterministic observation of this tick (one list call, done by reconcile)."""
    now = app.clock()
    owned = ctx.owned_ids()
    states = app.log.instance_states()
    history = throughput.recent_observations(app.log)
    prev_obs = history[-1] if history else {}
    prev_recs = {x.get("id"): x for x in prev_obs.get("instances") or []}
    dt = now - prev_obs["time"] if isinstance(prev_obs.get("time"), int | float) else 0.0
    insts: list[dict[str, Any]] = []
    for i in sorted(ctx.instances, key=lambda x: x.id):
        ours = i.id in owned or ctx.policy.is_our_label(i.label)
        since = status_since(states, i, now)
        # age_s: how long vast.ai has reported this status, by the fleet's own clock (observations), never
        # from start_date: a reboot restarts it, and a simulator or host clock that runs apart cannot skew it.
        rec = {"id": i.id, "label": i.label or "", "gpu_name": i.gpu_name or "?", "num_gpus": i.num_gpus or 1,
               "status": _status(i), "status_msg": (i.status_msg or None) if _status(i) != "running" else None,
               "dph": round(i.dph_total or 0.0, 4), "age_s": round(max(0.0, now - since), 0),
               "since": round(since, 3), "intended": i.intended_status, "host_id": i.host_id, "ours": ours,
               "gpu_util": i.gpu_util, "up_s": _uptime_s(i) if _status(i) == "running" else None,
               "jobs": None, "ends_s": _ends_s(app, i, now), "maint_s": _maint_s(app, i, now)}
        # interruptible: its bid is its $/h (outbid, stopped, when the market's min_bid passes it); null on-demand
        rec["bid"] = round(i.dph_total or 0.0, 4) if i.is_bid else None
        rec["restarts"] = _restarts(prev_recs.get(i.id), rec, dt)
        insts.append(rec)
    insts.extend(_unlisted(app, ctx, states, now))
    obs: dict[str, Any] = {"time": round(now, 0), "instances": insts,
                           "fleet_dph": round(sum(x["dph"] for x in insts if x["ours"]), 4), "errors": []}
    try:
        user = ctx.vast.current_user()
        # "balance" in the observation is what the account can spend: vast.ai's `credit`. vast.ai's own
        # `balance` is the invoice balance (charges not yet settled), kept apart as account_balance.
        obs["balance"] = spendable(user)
        obs["account_balance"] = user.balance
    except VastError as e:
        obs["balance"] = None
        obs["errors"].append(f"balance unavailable: {e}")
    demand, demand_error = _read_demand(ctx)
    if demand is not None:
        d = demand
        for x in insts:  # jobs each instance completed, as the queue reports them
            x["jobs"] = d.workers.get(x["id"])
        pd = (prev_obs.get("demand") or {}).get("pending")
        obs["demand"] = {"pending": d.pending, "running": d.running, "completed": d.completed,
                         "arrival_rate_per_h": d.arrival_rate_per_h,
                         "pending_delta": (d.pending - pd) if isinstance(pd, int) else None}
    else:
        obs["demand"] = None
        if demand_error is not None:
            obs["errors"].append(f"demand unavailable: {demand_error}")
    known = credit.kept_ids(app.log)
    kept = credit.stopped_for_credit(obs, known)
    if kept:
        obs["credit_stopped"] = kept  # a money event, not failures: kept, not destroyed, no host blamed
    _economics(app, obs, history, throughput.dlperf_of(
        (i.gpu_name, i.num_gpus, i.raw.get("dlperf")) for i in ctx.instances
        if i.id in owned or ctx.policy.is_our_label(i.label)), _operators_words(app, obs),
        stopped.to_destroy(ctx, known | set(kept)))
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
    obs["open_alerts"] = feedback.alert_lines(app.log)
    return obs


def _operators_words(app: App, obs: dict[str, Any]) -> dict[int, str]:
    """What the operators' words in force say, as the rules provider reads them (directives, knowledge files, the
    notes in the model's context: ``constraints.operators_view``): their rules go in the observation as
    ``operators_words``, and the instances of ours that break them or what binds (an excluded host, a GPU model
    no longer allowed) are returned, id -> why, for ``need`` to count out and name."""
    view = constraints.operators_view(app.settings, app.log)
    if view.words.constraints:
        obs["operators_words"] = [c.describe() for c in view.words.constraints]
    return {int(x["id"]): why for x in obs["instances"] if x["ours"]
            and (why := view.offer_refusal(str(x["gpu_name"]), 0.0, x["host_id"] if isinstance(x["host_id"], int)
                                           else None))}


def _read_demand(ctx: ToolContext) -> tuple[Demand | None, str | None]:
    """The job queue as read now, or None and why (None, None: no demand source configured)."""
    if ctx.demand is None:
        return None, None
    try:
        return ctx.demand.get(), None
    except (DemandError, VastError) as e:
        return None, str(e)


def _normalise_calls(reply: ModelReply, tick: int, step: int) -> list[ToolCall]:
    """Give every tool call an id unique in the whole log (models reuse ids like 'call_0')."""
    return [{"id": f"call_{tick}_{step}_{n}", "name": c.name or "", "arguments": c.arguments or ""}
            for n, c in enumerate(reply.tool_calls)]


def run_tick(app: App, *, stop: threading.Event | None = None) -> TickResult:
    """Run one tick end to end; never raises for ordinary failures (returns ok=False).

    Before anything is appended the log is verified since its last checkpoint; a log that
    fails raises ``ChainBroken`` and the tick does not start."""
    log = app.log  # refuses a missing, empty or foreign database before the lock file is made
    lock = None
    if not getattr(app, "lock_held", False):
        lock = FleetLock(app.settings.data_path).acquire(wait=5.0)
    try:
        log.check_before_append()  # ChainBroken: nothing is appended to a log that does not verify
        return _run(app, stop or threading.Event())
    finally:
        if lock is not None:
            lock.release()


@dataclass
class _Run:
    """One tick's running totals: what it reports when it completes, and when it fails."""

    app: App
    tick: int
    t0: float
    usage: dict[str, int] = field(default_factory=lambda: {"prompt_tokens": 0, "completion_tokens": 0,
                                                           "cached_tokens": 0})
    actions: list[str] = field(default_factory=list)
    steps: int = 0
    blocks: int = 0
    corrections: int = 0
    called: set[tuple[str, str]] = field(default_factory=set)  # the calls run this tick (_call_key)
    ctx: ToolContext | None = None  # the tick's tool context, once started
    calibration: tuple[int, int] | None = None  # (estimated, reported) prompt tokens of the last reply

    def calibrate(self) -> None:
        """Fold the last reply's reported prompt tokens into the calibration (inside the caller's commit)."""
        if self.calibration is not None:
            context.update_calibration(self.app.log, *self.calibration, tick=self.tick)
            self.calibration = None

    def fail(self, reason: str, kind: str) -> TickResult:
        return _fail(self.app, self.tick, reason, kind, self.steps, self.usage, self.t0)


@dataclass
class _Model:
    """What every model request of a tick shares."""

    provider: Any
    toolbox: Toolbox
    tools: list[dict[str, Any]]
    policy: dict[str, Any]
    name: str
    summarizer: Any
    cs: ContextSettings
    params: dict[str, Any] | None = None
    overflow_retried: bool = False
    overflow_tokens: int | None = None  # calibrated tokens of the request the server refused as too long

    @classmethod
    def of(cls, app: App) -> _Model:
        provider = app.provider()
        toolbox = load_tools()
        specs = toolbox.specs()
        policy = app.policy_dict()
        return cls(provider, toolbox, specs, policy, getattr(provider, "name", app.settings.model.name),
                   provider if getattr(provider, "can_summarise", True) else None,
                   window.effective_context(app.log, app.settings), context.model_params(provider, specs))


def _run(app: App, stop: threading.Event) -> TickResult:
    t0 = time.monotonic()
    run = _Run(app, next_tick_number(app), t0)
    structlog.contextvars.bind_contextvars(tick=run.tick)
    try:
        return _steps(run, stop)
    except FleetAgentError as e:
        return run.fail(str(e), type(e).__name__)
    except Exception as e:  # noqa: BLE001 - a tick must end as tick.failed whatever broke; the schedule goes on
        log_.exception("tick.crashed", tick=run.tick)
        return run.fail(f"internal error: {type(e).__name__}: {e}", "internal")
    finally:
        structlog.contextvars.unbind_contextvars("tick")


def _steps(run: _Run, stop: threading.Event) -> TickResult:
    """Start the tick, then ask the model and run its calls until it calls nothing (or a limit)."""
    s = run.app.settings
    ctx = _start(run)
    if isinstance(ctx, TickResult):
        return ctx
    run.ctx = ctx
    try:
        model = _Model.of(run.app)
        deadline = run.t0 + s.schedule.tick_timeout
        # A reply and the read-only calls it asked for commit with the next commit: the next step's
        # request, an action's intent, or the tick's end (``EventLog.holding``).
        with run.app.log.holding():
            while run.steps < s.schedule.max_steps:
                calls = _ask(run, model, stop, deadline)
                if isinstance(calls, TickResult):
                    return calls
                if calls is None:
                    continue
                if not calls:
                    break
                _run_calls(run, model.toolbox, ctx, calls)
            return _complete(run)
    finally:
        ctx.vast.deadline = None  # the client outlives the tick


def _start(run: _Run) -> ToolContext | TickResult:
    """Reconcile against one listing, observe, log ``tick.started``, take in feedback."""
    app, s, log, tick = run.app, run.app.settings, run.app.log, run.tick
    policy = Policy(s)
    ctx = ToolContext(settings=s, log=log, vast=app.vast(), demand=app.demand(), policy=policy, tick=tick,
                      clock=app.clock)
    replay = getattr(app, "replay", None)  # a fork replaying its origin's tick start (agent/fork/replay.py)
    if replay is not None and replay.start(app, ctx):
        return ctx
    steering.expire(log, s, tick)
    orphans = s.policy.destroy_orphans and steering.paused(log) is None  # a pause stops every side effect
    ctx.vast.deadline = run.t0 + s.schedule.tick_timeout  # no back-off or log poll waits past the tick's end
    try:
        _, ctx.instances = reconcile(log, ctx.vast, policy, destroy_orphans=orphans, settings=s)
    except VastError as e:
        ctx.vast.deadline = None
        return run.fail(f"vast.ai unavailable, nothing done: {e}", "vast")
    rebids = market.rebid_outbid(ctx, dry_run=s.policy.dry_run)  # before the observation: it shows them starting
    if market.lower_bids(ctx, dry_run=s.policy.dry_run):  # the market fell: bids down to the rule's
        try:
            ctx.refresh()
        except VastError as e:
            log_.warning("market.lower_bids_listing_failed", error=str(e))
    drain.with_maintenance(ctx)  # a machine's maintenance ends its instances' work as a contract's end does
    obs = observe(app, ctx, tick)
    known = credit.kept_ids(log)
    kept = obs.get("credit_stopped") or []
    # The tick's start and what its observation brings in: one transaction.
    with log.transaction() as tx:
        log.append("tick.started", {"observation": obs}, "scheduler", tick)
        credit.note_stop(tx, obs, kept, known, float(s.policy.credit_reserve), tick)
        steering.note_in_force(log, tick)
        edits = feedback.scan_knowledge(log, s, tick, memo=app.knowledge_memo)
        constraints.propose_from_knowledge(log, edits, tick)  # proposed only: an operator accepts them
        feedback.check_conditions(log, s, obs, tick)
        steering.note_host_failures(log, s, obs, tick)
    save_memo(s.data_path, app.knowledge_memo)
    # The market's doings first (outbids, price increases: agent/fleet/market.py), then the stopped: fleet-agent
    # never stops an instance, so one of ours that shows stopped is destroyed here, whatever the model
    market.handle_price_increases(ctx, dry_run=s.policy.dry_run)
    for outcome in [*market.handle_outbid(ctx, dry_run=s.policy.dry_run, rebids=rebids),
                    *stopped.destroy_stopped(ctx, dry_run=s.policy.dry_run),
                    *drain.drain(ctx, app.clock(), dry_run=s.policy.dry_run)]:
        if outcome.effect:
            run.actions.append(f"{outcome.effect['type']} {outcome.effect.get('instance_id')}")
    for iid in stopped.start_kept(ctx, obs.get("balance"), dry_run=s.policy.dry_run):
        run.actions.append(f"started {iid}")
    spend.check_budgets(log, s, steering.effective_policy(s, log), tick)
    watch.check_service(ctx, obs, tick)  # demand unmet (and why), instances failing between ticks
    return ctx


def _ask(run: _Run, model: _Model, stop: threading.Event, deadline: float) -> list[ToolCall] | TickResult | None:
    """One model step: the calls it asked for, the tick's end, or None to ask again (the context
    overflowed once and was compacted, or the model wrote its calls as text and was told so)."""
    if stop.is_set():
        return run.fail("stopped: the daemon is shutting down", "stopped")
    if time.monotonic() > deadline:
        return run.fail(f"time budget of {run.app.settings.schedule.tick_timeout:.0f}s used up", "timeout")
    log = run.app.log
    with log.transaction():  # what the last step held commits with this request, which sees it
        run.calibrate()
        proj = _projection(run, model)
        due = context.needs_compaction(proj, model.cs) or not context.fits(proj, model.cs)
        req = None if due else _request(run, model, proj)
    if due:  # compaction asks the model: outside any transaction
        proj = _project(run, model, proj)
        req = _request(run, model, proj)
    if not isinstance(req, Event):
        return req
    run.steps += 1
    try:
        reply = call_with_retries(model.provider, proj.messages, model.tools,
                                  on_retry=lambda n, err, wait: _retry_logged(run, req.seq, n, err, wait),
                                  wait=lambda seconds: _wait(stop, deadline, seconds))
    except LLMError as e:
        return _model_failed(run, model, e, req.seq, proj.calibrated_tokens)
    feedback.resolve_alert(log, "model:unreachable", "the model answered again", run.tick)
    model.overflow_tokens = None
    return _answered(run, model, reply, req.seq, proj.tokens)


def _request(run: _Run, model: _Model, proj: context.Projection) -> Event | TickResult:
    """Log the request about to be sent (with the inputs it uses), or the tick's end when it would not fit."""
    ended = _over_budget(run, model, proj)
    if ended is not None:
        return ended
    log = run.app.log
    with log.transaction():
        req = log_request(log, proj, prompts=run.app.prompts, policy=model.policy, tools=model.tools, tick=run.tick,
                          params=model.params)
    if proj.shrink_notes:  # news when a request goes out shrunk; re-deriving one (context, replay) is not
        log_.warning("context.shrunk", thread_to=proj.manifest["thread_to"], notes=proj.shrink_notes,
                     tokens=proj.tokens, calibrated=proj.calibrated_tokens, request_seq=req.seq)
    return req


def _answered(run: _Run, model: _Model, reply: ModelReply, request_seq: int, estimated: int) -> list[ToolCall] | None:
    """Log the reply; its calls, or None when it wrote calls as text, none ran, and it gets a correction (ask
    again). Calls written as text that run (``model.text_tool_calls: accept``) spend no correction."""
    log = run.app.log
    calls = _normalise_calls(reply, run.tick, run.steps)
    written = find_text_calls(reply.text) if not calls else []
    verdicts = _text_verdicts(run, model, written)
    if any(ran for _, ran, _ in verdicts):
        calls = [{"id": f"call_{run.tick}_{run.steps}_{n}", "name": c.name, "arguments": c.arguments}
                 for n, c in enumerate(c for c, ran, _ in verdicts if ran)]
    payload = reply.to_payload()
    payload.update({"tool_calls": calls, "request_seq": request_seq, "provider": getattr(model.provider, "name", "")})
    for k in run.usage:
        run.usage[k] += int(payload["usage"].get(k, 0) or 0)
    if reply.usage.prompt_tokens:  # folded in with the next commit, before the next projection reads it
        run.calibration = (estimated, reply.usage.prompt_tokens)
    todo = _todo_asked(run) if not calls and not written and not (reply.text or "").strip() else None
    if todo is not None and run.corrections < MAX_CORRECTIONS:
        # Nothing at all, while the observation asks for calls: a small model copies an earlier tick's empty
        # ending. It is told what the observation asks and asked again (a correction, as for calls in text).
        resp = log.append("model.response", payload, "model", run.tick)
        log.append("model.empty_reply", {"response_seq": resp.seq, "todo": todo}, "system", run.tick)
        run.corrections += 1
        return None
    if not written:  # held: it commits with the next commit of the tick (see _steps)
        log.append_held([("model.response", payload, "model", run.tick)])
        return calls
    resp = log.append("model.response", payload, "model", run.tick)
    log.append("model.text_tool_calls", {"response_seq": resp.seq, "accepted": bool(calls),
                                         "calls": [{"name": c.name, "arguments": c.arguments, "shape": c.shape,
                                                    "ran": ran, "why": why} for c, ran, why in verdicts],
                                         "next_call": _next_call(run, verdicts)},
               "system", run.tick)
    log_.warning("model.text_tool_calls", calls=[c.name for c in written], shapes=[c.shape for c in written],
                 ran=[ran for _, ran, _ in verdicts])
    if calls:
        return calls
    run.corrections += 1
    return calls if run.corrections > MAX_CORRECTIONS else None


def _next_call(run: _Run, verdicts: list[tuple[TextCall, bool, str | None]]) -> dict[str, Any] | None:
    """When a call written as text is a repeat that did not run: the call the tick needs next, if the tick's search
    named offers to cover the gap and one is not rented yet. A small model told only "go on" wrote its search again
    every step (Qwen2.5-Coder-1.5B on the CPU); it writes again the newest call it is shown."""
    oid = run.ctx.next_cover() if run.ctx is not None else None
    if oid is None or not any(why == NOT_RUN_REPEAT for _, _, why in verdicts):
        return None
    return {"name": "rent_instance", "arguments": {"offer_id": oid, "reason": "cover the gap the search named"}}


def _todo_asked(run: _Run) -> str | None:
    """The ``to do:`` line of this tick's observation when it asks for calls (a gap to rent, instances to destroy);
    None when it asks for nothing or the observation has no ``need``."""
    obs = next(iter(throughput.recent_observations(run.app.log, 1)), None)
    need = (obs or {}).get("need")
    if not isinstance(need, dict) or not (need.get("gap") or need.get("dead") or need.get("surplus")
                                          or need.get("barred")):
        return None
    return next((x for x in need_lines(obs or {}, inline, words=True) if x.startswith("to do: ")), None)


def _text_verdicts(run: _Run, model: _Model, written: list[TextCall]) -> list[tuple[TextCall, bool, str | None]]:
    """Each call written as text, whether it runs as a real call, and why not. Under ``model.text_tool_calls:
    accept`` every call naming a real tool runs, unless the same call (name and arguments) already ran in this
    tick: a small model told its call ran tends to write it again. Under ``reject`` none runs."""
    if run.app.settings.model.text_tool_calls != "accept":
        return [(c, False, NOT_RUN_REJECT) for c in written]
    out: list[tuple[TextCall, bool, str | None]] = []
    seen = set(run.called)
    for c in written:
        key = _call_key(c.name, c.arguments)
        if c.name not in model.toolbox.by_name:
            out.append((c, False, NOT_RUN_UNKNOWN))
        elif key in seen:
            out.append((c, False, NOT_RUN_REPEAT))
        else:
            seen.add(key)
            out.append((c, True, None))
    return out


def _call_key(name: str, arguments: str) -> tuple[str, str]:
    """A call as (name, its arguments' canonical JSON), to tell the same call written again."""
    try:
        return name, json.dumps(json.loads(arguments or "{}"), sort_keys=True)
    except ValueError:
        return name, arguments


def _retry_logged(run: _Run, request_seq: int, attempt: int, err: LLMError, wait: float) -> None:
    """A retry is an event and a log line, before the wait."""
    run.app.log.append("model.retry", {"attempt": attempt, "error_kind": err.kind, "message": str(err)[:500],
                                       "wait_s": round(wait, 3), "request_seq": request_seq}, "system", run.tick)
    log_.warning("llm.retry", attempt=attempt, kind=err.kind, status=err.status, wait_s=round(wait, 3))


def _wait(stop: threading.Event, deadline: float, seconds: float) -> bool:
    """Wait before a retry; False (give up) when the tick is stopping or the wait would pass its deadline."""
    if time.monotonic() + seconds > deadline:
        return False
    return not stop.wait(seconds)


def _projection(run: _Run, model: _Model) -> context.Projection:
    app = run.app
    return context.project(app.log, app.prompts, model.cs, policy=model.policy, tools=model.tools,
                           model=model.name, cache=app.projection_cache, params=model.params)


def _project(run: _Run, model: _Model, proj: context.Projection) -> context.Projection:
    """The request's context ``proj``, compacted first when it is due or does not fit (at a step boundary:
    every call of the previous step has its result by now)."""
    app, cs = run.app, model.cs
    if context.needs_compaction(proj, cs) or not context.fits(proj, cs):
        if context.fits(proj, cs) and _warn(app, run.tick, model):
            # one step to save what matters before the oldest ticks are summarised
            return context.project(app.log, app.prompts, cs, policy=model.policy, tools=model.tools,
                                   model=model.name, cache=app.projection_cache, params=model.params)
        _compact(app, run.tick, model, force=False)
        proj = context.project(app.log, app.prompts, cs, policy=model.policy, tools=model.tools, model=model.name,
                               cache=app.projection_cache, params=model.params)
    return proj


def _over_budget(run: _Run, model: _Model, proj: context.Projection) -> TickResult | None:
    """The tick's end when the next request would not fit (never sent), or would be no smaller than
    one the server already refused as too long; else None."""
    if model.overflow_tokens is not None and proj.calibrated_tokens >= model.overflow_tokens:
        return run.fail(f"compaction did not make the request smaller ({model.overflow_tokens:,} -> "
                        f"{proj.calibrated_tokens:,} tokens) after the server refused it as too long; not sent "
                        "again: lower context.budget_tokens or raise the server's context window", "context_length")
    if context.fits(proj, model.cs):
        return None
    limit = context.limit_tokens(model.cs)
    run.app.log.append("context.step_refused", {"step": run.steps + 1, "tokens": proj.calibrated_tokens,
                                                "limit": limit}, "system", run.tick)
    log_.warning("context.step_refused", step=run.steps + 1, tokens=proj.calibrated_tokens, limit=limit)
    if run.steps:
        return _complete(run)  # the model acted this tick; the next tick starts after a compaction
    # Not one step: the model cannot be asked at all. Never an "ok" tick, and the operator is told.
    why = (f"the model's request ({proj.calibrated_tokens:,} tokens after compaction) does not fit "
           f"context.budget_tokens less output_reserve ({limit:,}); raise context.budget_tokens or shorten the "
           "pinned directives and knowledge files")
    feedback.raise_alert(run.app.log, key="context:over_budget", severity="critical",
                         title="The model cannot be asked: its context does not fit the budget", detail=why,
                         tick=run.tick, settings=run.app.settings)
    return run.fail(why, "context_budget")


def _model_failed(run: _Run, model: _Model, e: LLMError, request_seq: int, tokens: int) -> TickResult | None:
    """Log the failure; an overflow lowers the budget to the server's window, is compacted and retried once
    (None); anything else ends the tick."""
    log, tick = run.app.log, run.tick
    log.append("model.failed", {"error_kind": e.kind, "message": str(e)[:500], "request_seq": request_seq},
               "system", tick)
    if e.kind == "context_length" and not model.overflow_retried:
        model.overflow_retried = True
        model.overflow_tokens = tokens
        if e.window:
            model.cs = window.learn_window(log, run.app.settings, e.window, "context_length error", tick)
        _compact(run.app, tick, model, force=True)
        return None
    if e.kind in UNREACHABLE:
        feedback.raise_alert(log, key="model:unreachable", severity="warning", title="Model endpoint failing",
                             detail=f"{e.kind}: {str(e)[:300]}", tick=tick, settings=run.app.settings)
    return run.fail(f"model call failed ({e.kind}): {str(e)[:300]}", e.kind)


def _run_calls(run: _Run, toolbox: Toolbox, ctx: ToolContext, calls: list[ToolCall]) -> None:
    """Each call through the tool pipeline, in order; past the per-response limit, refused unrun, as is a
    read-only call already run this tick with the same arguments (its answer is in the context already).
    What the read-only and refused calls log commits with the next commit (an action's intent) or
    at the end, in one transaction (``EventLog.holding``)."""
    before = set(run.called)
    run.called.update(_call_key(c["name"], c["arguments"]) for c in calls)
    replay = getattr(run.app, "replay", None)  # a fork: the origin's results for the origin's calls
    replayed = replay.calls(ctx, calls, run.steps) if replay is not None else None
    if replayed is not None:
        run.actions += replayed[0]
        run.blocks += replayed[1]
        return
    ctx.wanted_offers = {o for o in (_rent_offer(c) for c in calls[:MAX_CALLS_PER_STEP]) if o is not None}
    with run.app.log.holding():
        for n, call in enumerate(calls):
            if n >= MAX_CALLS_PER_STEP:
                refuse_call(run.app.log, call, f"at most {MAX_CALLS_PER_STEP} tool calls run per response", run.tick)
                continue
            key = _call_key(call["name"], call["arguments"])
            tool = toolbox.by_name.get(call["name"])
            if isinstance(tool, Tool) and tool.read and key in before:
                refuse_call(run.app.log, call, ASKED_ALREADY, run.tick)
                continue
            before.add(key)
            outcome, blocked = run_tool_call(toolbox, ctx, call, dry_run=run.app.settings.policy.dry_run)
            run.blocks += int(blocked)
            if outcome.effect:
                run.actions.append(f"{outcome.effect['type']} {outcome.effect.get('instance_id')}")


def _rent_offer(call: ToolCall) -> int | None:
    """The offer a rent call names, when it names one readably (the pipeline validates it properly)."""
    if call["name"] != "rent_instance":
        return None
    try:
        offer = json.loads(call["arguments"] or "{}").get("offer_id")
    except (ValueError, AttributeError):
        return None
    return offer if isinstance(offer, int) and not isinstance(offer, bool) else None


def _complete(run: _Run) -> TickResult:
    log, tick = run.app.log, run.tick
    with log.transaction() as tx:  # the tick's end, with what its last step held: one commit
        run.calibrate()
        feedback.note_policy_blocks(log, run.app.settings, run.blocks, tick)
        feedback.dispatch_notifications(log, run.app.settings, tick=tick)  # repeats and resolutions, too
        if run.app.settings.model.provider != "rules":  # the rules provider is code deciding, not a model to watch
            check_idle(log, run.app.settings, tick)
        dur = (time.monotonic() - run.t0) * 1000
        tx.append("tick.completed", {"steps": run.steps, "usage": run.usage, "actions": run.actions,
                                     "duration_ms": dur}, "system", tick)
        tx.index_search()  # the search index catches up once a tick
    log_.info("tick", tick=tick, ok=True, steps=run.steps, actions=run.actions, duration_ms=round(dur),
              head=_head(app=run.app), **run.usage)
    return TickResult(tick, True, None, run.steps, run.usage, dur, run.actions)


def _warn(app: Any, tick: int, model: _Model) -> bool:
    """Give the memory-pressure warning when it is due (see compaction.warn_pressure)."""
    log = app.log
    return compaction.warn_pressure(log, app.prompts, model.cs, policy=model.policy, tools=model.tools,
                                    tick=tick, open_alert_ids=[a.id for a in log.store.open_alerts()],
                                    owned_instance_ids=log.owned_instance_ids(), model_name=model.name,
                                    cache=app.projection_cache) is not None


def _compact(app: Any, tick: int, model: _Model, *, force: bool) -> None:
    log = app.log
    open_ids = [a.id for a in log.store.open_alerts()]
    owned = log.owned_instance_ids()
    compaction.compact(log, app.prompts, model.cs, policy=model.policy, tools=model.tools,
                       summarizer=model.summarizer, tick=tick, open_alert_ids=open_ids, owned_instance_ids=owned,
                       model_name=model.name, force=force, cache=app.projection_cache)


def _fail(app: App, tick: int, reason: str, kind: str, steps: int, usage: dict[str, int], t0: float) -> TickResult:
    from agent.secrets import scrub

    reason = scrub(reason)
    dur = (time.monotonic() - t0) * 1000
    try:
        with app.log.transaction() as tx:
            tx.append("tick.failed", {"reason": reason, "error_kind": kind, "steps": steps}, "system", tick)
            tx.index_search()
    except FleetAgentError:
        log_.exception("tick.failed_unlogged", tick=tick)
    log_.warning("tick", tick=tick, ok=False, reason=reason, steps=steps, duration_ms=round(dur), head=_head(app=app),
                 **usage)
    return TickResult(tick, False, reason, steps, usage, dur)


def _head(*, app: App) -> str | None:
    """The log's head as SEQ:HASH: the canonical 'tick' line carries it, so the journal keeps a copy
    outside the data directory ('fleet-agent log verify --head SEQ:HASH' checks against it)."""
    try:
        seq, h = app.log.head()
    except FleetAgentError:
        return None
    return f"{seq}:{h}"


def reconcile_at_start(app: App) -> None:
    """At daemon start: settle dangling intents before the first tick acts."""
    try:
        orphans = app.settings.policy.destroy_orphans and steering.paused(app.log) is None
        reconcile(app.log, app.vast(), Policy(app.settings), destroy_orphans=orphans,
                  settings=app.settings)
    except VastError as e:
        log_.warning("reconcile.deferred", reason=str(e))
