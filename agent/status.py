"""What ``fleet-agent status`` shows: the daemon, the last tick, the fleet, alerts, context size.

Everything comes from the lock file and the event log (and its read models);
nothing here calls vast.ai or the model. ``collect`` returns a JSON-able dict,
``format_text`` the operator's view of it.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Any

import structlog

from agent.app import App
from agent.cli.output import line
from agent.store.log import EventLog

log = structlog.get_logger(__name__)

LOCK_NAME = "fleet-agent.lock"


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
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return out
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        out.update(running=True, holder=holder)
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        out["stale_holder"] = holder  # a process that died without releasing (the kernel dropped its lock)
    finally:
        os.close(fd)
    return out


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


def fleet(log_: EventLog) -> dict[str, Any] | None:
    """The fleet, balance and demand as the last ``tick.started`` observed them."""
    start = _last(log_, "tick.started")
    if start is None:
        return None
    obs = start.payload.get("observation") or {}
    instances = []
    states: dict[str, int] = {}
    for i in obs.get("instances") or []:
        st = i.get("status") or "provisioning"
        states[st] = states.get(st, 0) + 1
        instances.append({"id": i.get("id"), "gpu_name": i.get("gpu_name"), "num_gpus": i.get("num_gpus", 1),
                          "status": st, "dph": i.get("dph"), "ours": i.get("ours", True)})
    dph = obs.get("fleet_dph")
    if not isinstance(dph, int | float):
        dph = round(sum(i["dph"] for i in instances if isinstance(i["dph"], int | float)), 4)
    return {"tick": start.tick, "at": start.ts, "instances": instances, "states": states, "dph": dph,
            "balance": obs.get("balance"), "account_balance": obs.get("account_balance"),
            "demand": obs.get("demand")}


def open_alerts(log_: EventLog) -> list[dict[str, Any]]:
    return [{"id": a.id, "severity": a.severity, "title": a.title, "count": a.count, "first_ts": a.first_ts,
             "last_ts": a.last_ts, "raised_by": a.raised_by} for a in log_.store.open_alerts()]


def context_size(app: App) -> dict[str, Any]:
    """The next request's size against the budget, and tokens left before compaction."""
    c = app.settings.context
    budget = c.budget_tokens
    compact_at = int(c.high_water * budget)
    out: dict[str, Any] = {"budget": budget, "output_reserve": c.output_reserve, "compact_at": compact_at}
    try:
        from agent.context import project

        proj = project(app.log, app.prompts, c, policy=app.policy_dict(), tools=app.tool_specs())
        tokens = int(proj.manifest.get("calibrated_tokens", proj.tokens))
        out["method"] = "projection"
    except Exception as e:  # noqa: BLE001 - status must show even when the projection cannot be built
        log.debug("status.projection_unavailable", error=type(e).__name__, detail=str(e)[:200])
        tokens = _estimate(app.log)
        out["method"] = "estimate"
    out["tokens"] = tokens
    out["until_compaction"] = max(0, compact_at - tokens)
    return out


def _estimate(log_: EventLog) -> int:
    """Tokens of the model-visible events since the last compaction (plus its summary)."""
    comp = _last(log_, "context.compacted")
    since = int(comp.payload.get("covered_to", comp.seq)) if comp else 0
    summary = log_.tokenizer.count(comp.payload.get("summary") or "") if comp else 0
    return log_.store.thread_tokens_since(since) + summary


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


def collect(app: App) -> dict[str, Any]:
    """Everything ``status`` shows, as a JSON-able dict."""
    s = app.settings
    st: dict[str, Any] = {"agent_id": s.agent_id, "config": s.source_path, "database": str(s.db_path)}
    st["daemon"] = daemon_state(s.data_path)
    if not s.db_path.exists():
        st["error"] = f"no database at {s.db_path}; run 'fleet-agent init' or fix data_dir"
        return st
    lg = app.log
    st["daemon"].update(daemon_events(lg))
    st["last_tick"] = last_tick(lg)
    st["running_tick"] = running_tick(lg)
    st["fleet"] = fleet(lg)
    st["alerts"] = open_alerts(lg)
    st["context"] = context_size(app)
    st["events"] = lg.last_seq()
    return st


# ------------------------------------------------------------------ text


def _money(x: Any) -> str:
    return f"${x:,.2f}" if isinstance(x, int | float) else "?"


def _t(ts: str | None) -> str:
    return f"{ts[:10]} {ts[11:19]}Z" if ts else "?"


def format_text(st: dict[str, Any]) -> str:
    lines = []
    d = st["daemon"]
    if d["running"]:
        since = f" since {_t(d['started_at'])}" if d.get("started_at") else ""
        lines.append(f"daemon: running ({d['holder']}){since}")
    else:
        extra = f"; last stopped {_t(d['stopped_at'])}: {line(d.get('stop_reason'))}" if d.get("stopped_at") else ""
        if d.get("stale_holder"):
            extra += f"; the last holder ({d['stale_holder']}) exited without releasing the lock"
        lines.append(f"daemon: not running{extra}")
    if "error" in st:
        lines.append(st["error"])
        return "\n".join(lines)
    rt = st.get("running_tick")
    if rt:
        lines.append(f"tick {rt['tick']} started {_t(rt['since'])} and has not ended"
                     + (" (running now)" if d["running"] else " (interrupted)"))
    lt = st.get("last_tick")
    if lt:
        outcome = "ok" if lt["ok"] else f"FAILED ({line(lt.get('reason'))})"
        dur = f", {lt['duration_ms'] / 1000:.1f}s" if isinstance(lt.get("duration_ms"), int | float) else ""
        lines.append(f"last tick: #{lt['tick']} {outcome} at {_t(lt['at'])}: {lt.get('steps')} steps, "
                     f"{lt['tokens']:,} tokens ({lt['cached_tokens']:,} cached){dur}")
    else:
        lines.append("last tick: none yet")
    f = st.get("fleet")
    if f:
        states = ", ".join(f"{n} {s}" for s, n in sorted(f["states"].items())) or "none"
        lines.append(f"fleet (tick {f['tick']}, {_t(f['at'])}): {len(f['instances'])} instances ({states}) · "
                     f"{_money(f['dph'])}/h · balance {_money(f['balance'])}"
                     + (f" (vast.ai credit, what it can spend; invoice balance {_money(f['account_balance'])})"
                        if f.get("account_balance") is not None else ""))
        for i in f["instances"]:
            flag = "" if i.get("ours", True) else " NOT-OURS"
            lines.append(f"  #{line(i['id'])} {line(i['gpu_name'])} x{line(i['num_gpus'])} {line(i['status'])} "
                         f"{_money(i['dph'])}/h{flag}")
        dm = f.get("demand")
        if isinstance(dm, dict):
            lines.append(f"demand: {dm.get('pending', '?')} pending, {dm.get('running', 0)} running, "
                         f"{dm.get('completed', '?')} completed")
    alerts = st.get("alerts") or []
    lines.append(f"alerts: {len(alerts)} open")
    for a in alerts:
        lines.append(f"  #{a['id']} {a['severity']}: {line(a['title'])} (x{a['count']}, last {_t(a['last_ts'])})")
    c = st.get("context")
    if c:
        est = " (estimate)" if c.get("method") == "estimate" else ""
        lines.append(f"context: {c['tokens']:,} of {c['budget']:,} tokens{est}; compaction at {c['compact_at']:,}, "
                     f"{c['until_compaction']:,} tokens to go")
    return "\n".join(lines)

