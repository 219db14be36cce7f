"""Memory tools: remember / forget facts, search the whole history, read knowledge, raise and resolve alerts.

``search_history`` is how the agent recalls what compaction took out of its
context: full-text search over every event in the log, tool output included.
"""

from __future__ import annotations

from datetime import UTC, datetime

from agent.events import Event
from agent.fleet.toolkit import AnyTool, Args, Outcome, Tool, ToolContext, obj

SEARCH_LIMIT = 10
# How many matches, newest first, a search sorts into sources and copies before it keeps ``limit``.
SEARCH_POOL = 200
# Events that quote others (the summaries and the summariser's requests): found only on request.
COPY_KINDS = frozenset({"context.compacted", "summary.request", "summary.response"})
SNIPPET_EVENT_CHARS = 300


def _remember(ctx: ToolContext, args: Args) -> Outcome:
    ctx.log.append("memory.written", {"key": args["key"], "text": args["text"]}, "tool", tick=ctx.tick)
    return Outcome(True, f"remembered {args['key']!r}; it stays pinned in your context until you forget it")


def _forget(ctx: ToolContext, args: Args) -> Outcome:
    if not ctx.log.store.memory_has(args["key"]):
        return Outcome(False, error=f"nothing remembered under {args['key']!r}")
    ctx.log.append("memory.deleted", {"key": args["key"]}, "tool", tick=ctx.tick)
    return Outcome(True, f"forgot {args['key']!r}")


def _quotes(e: Event) -> bool:
    """Whether an event holds copies of others: a summary, the summariser's request, or a search of
    the history (its query and its results)."""
    return e.kind in COPY_KINDS or (e.kind in ("tool.called", "tool.result")
                                    and e.payload.get("name") == "search_history")


def _search_history(ctx: ToolContext, args: Args) -> Outcome:
    """Sources before copies: an operator's note, a knowledge edit or a tool result is found as itself, not
    as the summaries that quoted it (those only with ``include_summaries``), newest first, within
    ``since``/``until`` when given."""
    from agent.times import parse_operator_time, utc_ts

    limit = int(args.get("limit", SEARCH_LIMIT))
    now = ctx.clock()
    bounds = []
    for key in ("since", "until"):
        text = args.get(key)
        bounds.append(utc_ts(parse_operator_time(text, datetime.fromtimestamp(now, UTC))) if text else None)
    since, until = bounds
    hits = [(e, snip) for e, snip in ctx.log.search(args["query"], limit=SEARCH_POOL)
            if (since is None or e.ts >= since) and (until is None or e.ts <= until)]
    sources = [h for h in hits if not _quotes(h[0])]
    copies = [h for h in hits if _quotes(h[0])] if args.get("include_summaries") else []
    hits = (sources + copies)[:limit]
    if not hits:
        more = "" if args.get("include_summaries") else " (summaries left out; include_summaries: true adds them)"
        return Outcome(True, "no matches" + more)
    lines = []
    for e, snip in hits:
        tick = f" tick {e.tick}" if e.tick is not None else ""
        lines.append(f"#{e.seq} {e.ts[:16]}Z {e.kind}{tick}: {snip[:SNIPPET_EVENT_CHARS]}")
    return Outcome(True, "\n".join(lines))


def _read_knowledge(ctx: ToolContext, args: Args) -> Outcome:
    from agent.feedback import read_knowledge

    text = read_knowledge(ctx.log, args["name"])
    if text is None:
        return Outcome(False, error=f"no knowledge file named {args['name']!r}")
    return Outcome(True, text)


def _new_alerts_this_tick(ctx: ToolContext) -> int:
    return sum(1 for e in ctx.log.read(kinds=["alert.raised"], tick=ctx.tick) if e.payload.get("raised_by") == "model")


def _raise_alert(ctx: ToolContext, args: Args) -> Outcome:
    from agent.feedback import raise_alert

    key = args.get("key") or f"model:{args['title'].strip().lower()[:80]}"
    cap = ctx.settings.alerts.max_new_per_tick
    if not ctx.log.store.live_alerts(key=key) and _new_alerts_this_tick(ctx) >= cap:
        return Outcome(False, error=f"you already opened {cap} new alerts this tick (alerts.max_new_per_tick); "
                       "put further findings in the detail of an open alert, or raise them next tick")
    alert_id, new = raise_alert(ctx.log, key=key, severity=args["severity"], title=args["title"],
                                detail=args.get("detail", ""), raised_by="model", tick=ctx.tick,
                                settings=ctx.settings)
    return Outcome(True, f"alert #{alert_id} {'raised' if new else 'already open (count increased)'}; "
                   "operators see it with 'fleet-agent alerts list'")


def _resolve_alert(ctx: ToolContext, args: Args) -> Outcome:
    """Close an alert the model raised itself; alerts raised by code or operators close when their condition
    clears or an operator acts, never at the model's word."""
    from agent.feedback.alerts import resolve_in

    alert_id, reason = int(args["alert_id"]), args["reason"].strip()
    if not reason:
        return Outcome(False, error="give a reason: say what changed, for the operators who read the alert")
    with ctx.log.transaction() as tx:
        a = tx.store.alert(alert_id)
        if a is None:
            return Outcome(False, error=f"no alert #{alert_id}; the observation's open_alerts lists the open ones")
        if a.status == "resolved":
            return Outcome(False, error=f"alert #{alert_id} is already resolved; nothing to do")
        if a.raised_by != "model":
            who = "an operator" if a.raised_by == "operator" else "code (a condition fleet-agent checks)"
            return Outcome(False, error=f"alert #{alert_id} ({a.dedup_key}) was raised by {who}, not by you: only "
                           "alerts you raised with raise_alert can be resolved by you; this one resolves when its "
                           "condition clears, or an operator acks it")
        resolve_in(tx, a, f"resolved by the model: {reason}", ctx.tick)
    return Outcome(True, f"alert #{alert_id} resolved")


RECALL_LIMIT = 50


def _recall_facts(ctx: ToolContext, args: Args) -> Outcome:
    """Facts about hosts (failures, refusals, last seen) and GPU prices seen, from every summarised event
    (the newest compaction's facts) and the events since."""
    from agent.context.facts import fold_facts, gpu_line, host_line

    comp = next(iter(ctx.log.read(0, kinds=["context.compacted"], newest_first=True, limit=1)), None)
    base = comp.payload.get("facts") if comp is not None and comp.version >= 3 else None
    since = int(comp.payload["covered_to"]) if comp is not None else 0
    facts = fold_facts(base, ctx.log.read(since))
    host, gpu = args.get("host"), args.get("gpu")
    hosts = {k: v for k, v in facts["hosts"].items() if host is None or k == str(host)}
    gpus = {k: v for k, v in facts["gpus"].items() if gpu is None or k.lower() == str(gpu).lower()}
    if host is not None or gpu is not None:
        hosts = hosts if host is not None else {}
        gpus = gpus if gpu is not None else {}
    ranked = sorted(hosts.items(), key=lambda kv: (-(kv[1]["failures"] + kv[1]["refusals"]), kv[0]))
    lines = [host_line(k, v) for k, v in ranked] + [gpu_line(k, v) for k, v in gpus.items()]
    if not lines:
        return Outcome(True, "no facts recorded" + (f" about host {host}" if host is not None else "")
                       + (f" about {gpu}" if gpu is not None else ""))
    more = f"\n[... {len(lines) - RECALL_LIMIT:,} more; ask for one host or GPU]" if len(lines) > RECALL_LIMIT else ""
    return Outcome(True, "\n".join(lines[:RECALL_LIMIT]) + more)


KEY = {"type": "string", "minLength": 1, "maxLength": 80}
TOOLS: tuple[AnyTool, ...] = (
    Tool("remember", "Remember a fact under a key; memory stays pinned in your context.",
         obj({"key": KEY, "text": {"type": "string", "minLength": 1, "maxLength": 2000}}, ["key", "text"]),
         _remember),
    Tool("forget", "Forget the fact stored under a key.", obj({"key": KEY}, ["key"]), _forget),
    Tool("search_history", "Full-text search over the whole history (every tick, tool output, operator "
         "message), newest first; the original events, not the summaries that quoted them (include_summaries "
         "adds those). since/until take a time (2026-11-29 10:00, 2h ago, yesterday). Use it to recall what is "
         "no longer in your context.",
         obj({"query": {"type": "string", "minLength": 1, "maxLength": 200},
              "limit": {"type": "integer", "minimum": 1, "maximum": 25},
              "since": {"type": "string", "minLength": 1, "maxLength": 60},
              "until": {"type": "string", "minLength": 1, "maxLength": 60},
              "include_summaries": {"type": "boolean"}}, ["query"]), _search_history),
    Tool("recall_facts", "Facts gathered from the whole history: per host, how many of our instances failed "
         "on it, how many rents of its offers were refused, when it was last seen; per GPU model, the price "
         "range seen. Give a host id or a GPU model to narrow it.",
         obj({"host": {"type": "integer", "minimum": 0}, "gpu": {"type": "string", "minLength": 1, "maxLength": 60}},
             []), _recall_facts),
    Tool("read_knowledge", "The full text of an operator knowledge file.",
         obj({"name": {"type": "string", "minLength": 1, "maxLength": 120}}, ["name"]), _read_knowledge),
    Tool("raise_alert", "Raise an alert for the operators (deduplicated by key or title).",
         obj({"severity": {"type": "string", "enum": ["info", "warning", "critical"]},
              "title": {"type": "string", "minLength": 1, "maxLength": 200},
              "detail": {"type": "string", "maxLength": 2000},
              "key": {"type": "string", "maxLength": 100}}, ["severity", "title"]), _raise_alert),
    Tool("resolve_alert", "Resolve an alert you raised (with raise_alert) once its cause is gone; alerts raised "
         "by code or operators close by themselves when their condition clears.",
         obj({"alert_id": {"type": "integer", "minimum": 1},
              "reason": {"type": "string", "minLength": 1, "maxLength": 500}}, ["alert_id", "reason"]),
         _resolve_alert),
)
