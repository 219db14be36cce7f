"""What ``fleet-agent status`` shows: the daemon, the last tick, the fleet, alerts, context size.

Everything comes from the lock file and the event log (and its read models);
nothing here calls vast.ai or the model. ``collect`` returns a JSON-able dict (the CLI's
``agent.cli.status`` writes the operator's view of it; the console reads the parts it shows).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent import logsetup
from agent.runtime.app import App
from agent.store.log import EventLog

log = logsetup.get_logger(__name__)

LOCK_NAME = "fleet-agent.runtime.lock"


def daemon_state(data_path: Path) -> dict[str, Any]:
    """Whether a process holds the single-writer lock, and who (from the lock file).

    The holder writes its pid into the file and empties it on release; a
    non-blocking shared ``flock`` tells a live holder from a crashed one's leftovers.
    """
    path = Path(data_path) / LOCK_NAME
    out: dict[str, Any] = {"running": False, "holder": None, "lock_file": str(path)}
    try:
        holder = path.read_text(encoding="utf-8").strip()
    except OSError:
        return out
    if not holder:
        return out
    from agent.runtime.leader import flocked_by_someone

    held = flocked_by_someone(path)
    if held:
        out.update(running=True, holder=holder)
    elif held is False:
        out["stale_holder"] = holder  # a process that died without releasing (the kernel dropped its lock)
    return out


def leadership(settings: Any, env: Any = None) -> dict[str, Any]:
    """The fleet's active daemon and its waiting standbys, as its leadership lock (agent.runtime.leader)
    sees them: on SQLite the lease file and the standbys' files in the data directory, on PostgreSQL the
    sessions the server has (the lock's holder, the daemons' other sessions). Keys: ``running``,
    ``holder`` (when a daemon is active), ``standbys`` (pid, host; ``since`` on SQLite), ``lock``; on
    PostgreSQL ``error`` when the server could not be asked."""
    if settings.storage.is_pg:
        return _pg_leadership(settings, env)
    return _file_leadership(settings)


def _file_leadership(settings: Any) -> dict[str, Any]:
    import time

    from agent.errors import LockError
    from agent.runtime.leader import FileLeader, file_standbys, flocked_by_someone

    lead = FileLeader(settings.data_path, settings.agent_id, failover_seconds=float(settings.storage.failover_seconds))
    out: dict[str, Any] = {"lock": "file", "standbys": file_standbys(settings.data_path)}
    try:
        lease = lead.read_lease()
    except LockError:
        lease = None
    if lease and not lease.get("released"):
        age = time.time() - float(lease.get("beat") or 0)
        who = f"pid {lease.get('pid')} on {lease.get('host')}, heartbeat {age:.1f}s ago"
        if lease.get("has_flock") and flocked_by_someone(lead.flock.path) is not True:
            out["stale_lease"] = f"{who} (it died: the kernel let go of its lock)"
        elif age <= lead.failover_seconds:
            out.update(running=True, holder=who)
        else:
            out["stale_lease"] = f"{who} (past failover_seconds: suspended, hung or dead)"
    return out


def _pg_leadership(settings: Any, env: Any) -> dict[str, Any]:
    import psycopg

    from agent.runtime.leader import PgLeader, leader_for

    lead = leader_for(settings, env)
    assert isinstance(lead, PgLeader)
    out: dict[str, Any] = {"lock": "postgresql", "running": False, "holder": None, "standbys": []}
    try:
        holders, others = lead.daemons()
    except psycopg.Error as e:
        out["error"] = f"cannot ask the server who holds the lock: {str(e).strip()[:200]}"
        return out
    if holders:
        h = holders[0]
        out.update(running=True, holder=_pg_name(h.application_name, settings.agent_id) + f", server pid {h.pid}")
    out["standbys"] = [_pg_daemon(x.application_name, settings.agent_id) for x in others]
    return out


def _pg_daemon(application_name: str, agent_id: str) -> dict[str, Any]:
    """``fleet-agent <agent_id> <host> <pid>`` as pid and host (a name cut at 63 characters: as it is)."""
    rest = application_name[len(f"fleet-agent {agent_id} "):]
    host, _, pid = rest.rpartition(" ")
    return {"pid": int(pid), "host": host} if pid.isdigit() and host else {"pid": None, "host": rest}


def _pg_name(application_name: str, agent_id: str) -> str:
    if not application_name.startswith(f"fleet-agent {agent_id} "):
        return f"'{application_name}' (not a fleet-agent daemon)"
    d = _pg_daemon(application_name, agent_id)
    return f"pid {d['pid']} on {d['host']}" if d["pid"] is not None else f"'{application_name}'"


def _last(log_: EventLog, *kinds: str) -> Any:
    return next(log_.read(0, kinds=kinds, newest_first=True, limit=1), None)


def _tick_usage(log_: EventLog, tick: int) -> dict[str, int]:
    """Summed usage of the tick's model responses."""
    total = {"prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0, "model_calls": 0}
    for e in log_.read(0, kinds=["model.response"], tick=tick):
        u = e.payload.get("usage") or {}
        for k in ("prompt_tokens", "completion_tokens", "cached_tokens"):
            v = u.get(k)
            if isinstance(v, int):
                total[k] += v
        total["model_calls"] += 1
    return total


def last_tick(log_: EventLog) -> dict[str, Any] | None:
    end = _last(log_, "tick.completed", "tick.failed")
    if end is None:
        return None
    p = end.payload
    usage = _tick_usage(log_, end.tick) if end.tick is not None else {}
    reported = p.get("usage") or {}
    if not usage.get("model_calls") and reported:
        usage = {k: int(reported.get(k) or 0) for k in ("prompt_tokens", "completion_tokens", "cached_tokens")}
    tokens = int(usage.get("prompt_tokens") or 0) + int(usage.get("completion_tokens") or 0)
    return {
        "tick": end.tick, "at": end.ts, "ok": end.kind == "tick.completed",
        "reason": p.get("reason"), "steps": p.get("steps"), "duration_ms": p.get("duration_ms"),
        "tokens": tokens, "prompt_tokens": usage.get("prompt_tokens", 0),
        "completion_tokens": usage.get("completion_tokens", 0), "cached_tokens": usage.get("cached_tokens", 0),
    }


def running_tick(log_: EventLog) -> dict[str, Any] | None:
    """The newest tick that started and has not ended (running now, or interrupted)."""
    t = log_.store.open_tick()
    return None if t is None else {"tick": t.tick, "since": t.ts}


def _instance_row(i: dict[str, Any]) -> dict[str, Any]:
    return {"id": i.get("id"), "gpu_name": i.get("gpu_name"), "num_gpus": i.get("num_gpus", 1),
            "status": i.get("status") or "provisioning", "dph": i.get("dph"), "ours": i.get("ours", True)}


def _apply_effects(log_: EventLog, since: int, rows: dict[Any, dict[str, Any]]) -> int:
    """Apply the rents and destroys logged after seq ``since`` to ``rows``; how many changed it."""
    changed = 0
    for e in log_.read(since, kinds=["tool.result", "instance.adopted", "instance.gone"]):
        p = e.payload
        eff = (p.get("effect") or {}) if e.kind == "tool.result" else p
        kind = eff.get("type") if e.kind == "tool.result" else e.kind
        iid = eff.get("instance_id")
        if iid is None:
            continue
        if kind in ("rented", "instance.adopted") and iid not in rows:
            rows[iid] = _instance_row({"id": iid, "gpu_name": eff.get("gpu_name"), "dph": eff.get("dph"),
                                       "status": "provisioning"})
            changed += 1
        elif kind in ("destroyed", "instance.gone") and iid in rows:
            del rows[iid]
            changed += 1
    return changed


def fleet(log_: EventLog) -> dict[str, Any] | None:
    """The fleet, balance and demand as the last ``tick.started`` observed them, with the rents and destroys
    logged since (``acted``: how many changes were applied on top of the observation)."""
    start = _last(log_, "tick.started")
    if start is None:
        return None
    obs = start.payload.get("observation") or {}
    rows = {i.get("id"): _instance_row(i) for i in obs.get("instances") or []}
    acted = _apply_effects(log_, start.seq, rows)
    instances = list(rows.values())
    states: dict[str, int] = {}
    for i in instances:
        states[i["status"]] = states.get(i["status"], 0) + 1
    dph = obs.get("fleet_dph")
    if acted or not isinstance(dph, int | float):
        dph = round(sum(i["dph"] for i in instances if isinstance(i["dph"], int | float)), 4)
    return {"tick": start.tick, "at": start.ts, "instances": instances, "states": states, "dph": dph,
            "traffic_dph": obs.get("traffic_dph") or 0.0,  # measured bandwidth $/h on top of dph
            "balance": obs.get("balance"), "account_balance": obs.get("account_balance"),
            "demand": obs.get("demand"), "acted": acted, "credit_stopped": list(obs.get("credit_stopped") or [])}


def open_alerts(log_: EventLog) -> list[dict[str, Any]]:
    return [{"id": a.id, "severity": a.severity, "title": a.title, "count": a.count, "first_ts": a.first_ts,
             "last_ts": a.last_ts, "raised_by": a.raised_by} for a in log_.store.open_alerts()]


def context_size(app: App) -> dict[str, Any]:
    """The last request's size against the budget (its manifest), and tokens left before compaction.

    Read from the log, not projected afresh: status loads neither the tokenizer nor the prompts
    and tools (``fleet-agent context`` renders and counts the next request)."""
    from agent.model.window import effective_context

    c = effective_context(app.log, app.settings)  # lowered when the model server said its window is smaller
    budget = c.budget_tokens
    # A request that would pass the budget less the reply's reserve is compacted too (before any text is cut)
    compact_at = int(min(c.high_water * budget, budget - c.output_reserve))
    out: dict[str, Any] = {"budget": budget, "output_reserve": c.output_reserve, "compact_at": compact_at}
    if budget != app.settings.context.budget_tokens:
        out["configured_budget"] = app.settings.context.budget_tokens
    req = _last(app.log, "model.request")
    manifest = req.payload.get("manifest") or {} if req is not None else {}
    tokens = manifest.get("calibrated_tokens", manifest.get("estimated_tokens"))
    out["tokens"] = int(tokens) if isinstance(tokens, int | float) else 0
    out["method"] = "last request" if req is not None else "no request yet"
    if req is not None:
        out["as_of"] = req.ts
    out["until_compaction"] = max(0, compact_at - out["tokens"])
    return out


def knowledge(app: App) -> dict[str, Any]:
    """The knowledge files the log holds against the directory, by stat alone (no file is read, whatever
    their number): new, changed and removed files the next tick will log, and, when they pass
    ``pinned_max_tokens``, how many the pinned block shows in full (most recently changed first)."""
    from agent.feedback.knowledge import CHARS_PER_TOKEN, disk_state, load_memo, shown_in_full

    s = app.settings
    d = disk_state(app.log, s.knowledge_path, load_memo(s.data_path))
    live = sorted((k for k in app.log.store.knowledge_latest().values() if k.hash is not None),
                  key=lambda k: (-k.seq, k.name))
    tokens = sum(k.size for k in live) // CHARS_PER_TOKEN
    cap = s.context.pinned_max_tokens
    return {"files": d.files, "on_disk": d.on_disk, "tokens_estimate": tokens, "pinned_max_tokens": cap,
            "shown_in_full": shown_in_full([k.size for k in live], cap, s.context.knowledge_max_tokens),
            "pending": {"new": d.new[:20], "changed": d.changed[:20], "removed": d.removed[:20]},
            "pending_counts": {"new": len(d.new), "changed": len(d.changed), "removed": len(d.removed)}}


def daemon_events(log_: EventLog) -> dict[str, Any]:
    started = _last(log_, "daemon.started")
    stopped = _last(log_, "daemon.stopped")
    out: dict[str, Any] = {}
    if started is not None:
        out["started_at"] = started.ts
        out["version"] = started.payload.get("version")
        out["pid"] = started.payload.get("pid")
    if stopped is not None and (started is None or stopped.seq > started.seq):
        out["stopped_at"] = stopped.ts
        out["stop_reason"] = stopped.payload.get("reason")
    return out


def steering_state(app: App) -> dict[str, Any]:
    """Whether the fleet is paused (by whom, why, until when), the policy overrides in force, the
    excluded hosts, and the spend today and this month."""
    from agent.fleet import spend, steering

    lg = app.log
    p = steering.paused(lg)
    mtd = spend.month_to_date(lg)
    return {
        "paused": None if p is None else {"id": p.id, "by": p.by, "reason": p.reason, "since": p.ts,
                                          "until": p.until},
        "overrides": [{"id": o.id, "key": o.key, "value": o.value, "by": o.by, "reason": o.reason, "until": o.until}
                      for o in steering.active_overrides(lg).values()],
        "excluded_hosts": sorted(steering.excluded_hosts(app.settings, lg)),
        "spend": {"today": mtd["today"], "month": mtd["month"],
                  "max_daily_spend": app.settings.policy.max_daily_spend,
                  "max_monthly_spend": app.settings.policy.max_monthly_spend},
    }


def model_cost(app: App) -> dict[str, Any]:
    """What the model costs (agent.fleet.spend.model_cost): the price sheet in force, and the dollars per
    tick, per day, per instance-day and per job served over the newest ticks."""
    from agent.fleet import spend

    return spend.model_cost(app.log, app.settings)


def budget_split(app: App) -> dict[str, Any] | None:
    """How the last request used the budget: the fixed blocks, the history, the output reserve and what was
    free (its manifest's sections; agent.context.shares). None before the first request."""
    from agent.context.shares import split
    from agent.model.window import effective_context

    req = _last(app.log, "model.request")
    sections = ((req.payload.get("manifest") or {}).get("sections") if req is not None else None) or {}
    if not sections:
        return None
    c = effective_context(app.log, app.settings)
    return {"budget": c.budget_tokens, "parts": split(sections, c.budget_tokens, c.output_reserve)}


def collect(app: App) -> dict[str, Any]:
    """Everything ``status`` shows, as a JSON-able dict."""
    s = app.settings
    st: dict[str, Any] = {"agent_id": s.agent_id, "config": s.source_path, "database": s.log_location}
    st["daemon"] = daemon_state(s.data_path)
    st["daemon"].update(leadership(s, app.env))
    if not s.storage.is_pg and not s.db_path.exists():
        st["error"] = f"no database at {s.db_path}; run 'fleet-agent init' or fix data_dir"
        return st
    lg = app.log
    st["daemon"].update(daemon_events(lg))
    st["last_tick"] = last_tick(lg)
    st["running_tick"] = running_tick(lg)
    st["fleet"] = fleet(lg)
    st["alerts"] = open_alerts(lg)
    st["steering"] = steering_state(app)
    st["model_cost"] = model_cost(app)
    st["context"] = context_size(app)
    st["budget_split"] = budget_split(app)
    st["knowledge"] = knowledge(app)
    st["events"] = lg.last_seq()
    return st
