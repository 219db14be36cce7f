"""``status`` as text: the operator's view of ``agent.runtime.status.collect``, every field from the model,
vast.ai or an operator passed through ``line`` (one terminal-safe line)."""

from __future__ import annotations

from typing import Any

from agent.cli.output import line


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
    lines.extend(_leadership_lines(d))
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
        after = f", after {f['acted']} rent/destroy" if f.get("acted") else ""
        lines.append(f"fleet (tick {f['tick']}, {_t(f['at'])}{after}): {len(f['instances'])} instances ({states}) · "
                     f"{_money(f['dph'])}/h"
                     + (f" + {_money(f['traffic_dph'])}/h traffic" if f.get("traffic_dph") else "")
                     + f" · credit {_money(f['balance'])} spendable"
                     + (f" (invoice balance {_money(f['account_balance'])}, not money to spend)"
                        if f.get("account_balance") is not None else "")
                     + (f" · {len(f['credit_stopped'])} stopped for lack of credit, kept until a top-up"
                        if f.get("credit_stopped") else ""))
        for i in f["instances"]:
            flag = "" if i.get("ours", True) else " NOT-OURS"
            lines.append(f"  #{line(i['id'])} {line(i['gpu_name'])} x{line(i['num_gpus'])} {line(i['status'])} "
                         f"{_money(i['dph'])}/h{flag}")
        dm = f.get("demand")
        if isinstance(dm, dict):
            lines.append(f"demand: {dm.get('pending', '?')} pending, {dm.get('running', 0)} running, "
                         f"{dm.get('completed', '?')} completed")
    lines.extend(_steering_lines(st.get("steering") or {}))
    lines.extend(model_cost_lines(st.get("model_cost")))
    alerts = st.get("alerts") or []
    lines.append(f"alerts: {len(alerts)} open")
    for a in alerts:
        lines.append(f"  #{a['id']} {a['severity']}: {line(a['title'])} (x{a['count']}, last {_t(a['last_ts'])})")
    c = st.get("context")
    if c:
        when = f" (last request, {_t(c['as_of'])})" if c.get("as_of") else " (no request yet)"
        lowered = (f" (lowered from {c['configured_budget']:,} to the model server's window)"
                   if c.get("configured_budget") else "")
        lines.append(f"context: {c['tokens']:,} of {c['budget']:,} tokens{lowered}{when}; compaction at "
                     f"{c['compact_at']:,}, {c['until_compaction']:,} tokens to go")
    lines.extend(_split_lines(st.get("budget_split")))
    k = st.get("knowledge")
    if k:
        lines.append(_knowledge_line(k))
    return "\n".join(lines)


def _split_lines(sp: dict[str, Any] | None) -> list[str]:
    """The last request's budget split, one line (none before the first request)."""
    from agent.context.shares import split_text

    if not sp:
        return []
    return [f"budget split: {split_text(sp['parts'], sp['budget'])}"]



def _leadership_lines(d: dict[str, Any]) -> list[str]:
    """The standbys waiting to take over, and what the leadership lock could not say."""
    lines = []
    if d.get("error"):
        lines.append(f"  leadership: {line(d['error'])}")
    if d.get("stale_lease"):
        lines.append(f"  the lease names {line(d['stale_lease'])}; a standby takes over")
    sb = d.get("standbys")
    if sb is not None:
        names = ", ".join(f"pid {line(x.get('pid'))} on {line(x.get('host'))}" for x in sb)
        lines.append(f"standbys: {len(sb)} waiting" + (f" ({names})" if names else ""))
    return lines


def _steering_lines(sv: dict[str, Any]) -> list[str]:
    lines = []
    p = sv.get("paused")
    if p:
        until = f" until {_t(p['until'])}" if p.get("until") else " until resumed"
        lines.append(f"PAUSED by {line(p['by'])} since {_t(p['since'])}{until}: {line(p['reason'])} "
                     "(no rent, destroy or reboot runs; 'fleet-agent resume' ends it)")
    for o in sv.get("overrides") or []:
        v = ", ".join(o["value"]) if isinstance(o["value"], list) else o["value"]
        until = f"until {_t(o['until'])}" if o.get("until") else "until reset"
        lines.append(f"policy override #{o['id']}: {line(o['key'])} {line(v)} {until} (by {line(o['by'])}: "
                     f"{line(o['reason'])})")
    if sv.get("excluded_hosts"):
        lines.append("excluded hosts: " + ", ".join(str(h) for h in sv["excluded_hosts"]))
    sp = sv.get("spend") or {}
    if sp:
        day = f" of {_money(sp['max_daily_spend'])}" if sp.get("max_daily_spend") is not None else ""
        mon = f" of {_money(sp['max_monthly_spend'])}" if sp.get("max_monthly_spend") is not None else ""
        lines.append(f"spend: {_money(sp['today'])}{day} today, {_money(sp['month'])}{mon} this month")
    return lines


def _usd(x: Any) -> str:
    """Dollars with the cents a model call's fraction of a cent needs."""
    if not isinstance(x, int | float):
        return "?"
    return f"${x:,.2f}" if abs(x) >= 10 else f"${x:,.4f}" if abs(x) >= 0.01 or x == 0 else f"${x:.6f}"


def model_cost_lines(mc: dict[str, Any] | None) -> list[str]:
    """The model's cost (agent.fleet.spend.model_cost) and the price sheet it is priced by."""
    if not mc:
        return []
    lines = [f"model price: {line(mc['sheet'])}"]
    if not mc.get("ticks"):
        return lines + ["model cost: no tick yet"]
    last = mc.get("last_tick") or {}
    text = (f"model cost: {_usd(mc['per_day'])}/day at the schedule's pace · {_usd(mc['per_tick'])}/tick "
            f"(mean of the last {mc['ticks']} ticks, {mc['calls']} calls, {_usd(mc['cost'])}) · last tick "
            f"#{last.get('tick')} {_usd(last.get('cost'))}")
    if mc.get("per_instance_day") is not None:
        text += f" · {_usd(mc['per_instance_day'])}/instance-day ({mc['instances']} instances)"
    if mc.get("jobs") is not None:
        text += (f" · {_usd(mc['per_job'])}/job ({mc['jobs']:,} jobs served)" if mc["jobs"]
                 else " · no jobs served in these ticks")
    return lines + [text]


def _knowledge_line(k: dict[str, Any]) -> str:
    text = f"knowledge: {k['files']:,} files logged, ~{k['tokens_estimate']:,} tokens"
    if k["shown_in_full"] < k["files"]:
        text += (f", over pinned_max_tokens {k['pinned_max_tokens']:,}: the {k['shown_in_full']:,} most recently "
                 "changed shown in full")
    pending = ", ".join(f"{n:,} {what}" for what, n in k["pending_counts"].items() if n)
    return text + (f"; on disk since the last tick: {pending} (`fleet-agent knowledge status`)" if pending else "")
