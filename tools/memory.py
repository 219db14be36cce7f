"""Memory tools: remember / forget facts, search the whole history, read knowledge, raise alerts.

``search_history`` is how the agent recalls what compaction took out of its
context: full-text search over every event in the log, tool output included.
"""

from __future__ import annotations

from agent.toolkit import AnyTool, Args, Outcome, Tool, ToolContext, obj

SEARCH_LIMIT = 10
SNIPPET_EVENT_CHARS = 300


def _remember(ctx: ToolContext, args: Args) -> Outcome:
    ctx.log.append("memory.written", {"key": args["key"], "text": args["text"]}, "tool", tick=ctx.tick)
    return Outcome(True, f"remembered {args['key']!r}; it stays pinned in your context until you forget it")


def _forget(ctx: ToolContext, args: Args) -> Outcome:
    if not ctx.log.store.memory_has(args["key"]):
        return Outcome(False, error=f"nothing remembered under {args['key']!r}")
    ctx.log.append("memory.deleted", {"key": args["key"]}, "tool", tick=ctx.tick)
    return Outcome(True, f"forgot {args['key']!r}")


def _search_history(ctx: ToolContext, args: Args) -> Outcome:
    hits = ctx.log.search(args["query"], limit=int(args.get("limit", SEARCH_LIMIT)))
    if not hits:
        return Outcome(True, "no matches")
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


KEY = {"type": "string", "minLength": 1, "maxLength": 80}
TOOLS: tuple[AnyTool, ...] = (
    Tool("remember", "Remember a fact under a key; memory stays pinned in your context.",
         obj({"key": KEY, "text": {"type": "string", "minLength": 1, "maxLength": 2000}}, ["key", "text"]),
         _remember),
    Tool("forget", "Forget the fact stored under a key.", obj({"key": KEY}, ["key"]), _forget),
    Tool("search_history", "Full-text search over the whole history (every tick, tool output, operator "
         "message), newest first. Use it to recall what is no longer in your context.",
         obj({"query": {"type": "string", "minLength": 1, "maxLength": 200},
              "limit": {"type": "integer", "minimum": 1, "maximum": 25}}, ["query"]), _search_history),
    Tool("read_knowledge", "The full text of an operator knowledge file.",
         obj({"name": {"type": "string", "minLength": 1, "maxLength": 120}}, ["name"]), _read_knowledge),
    Tool("raise_alert", "Raise an alert for the operators (deduplicated by key or title).",
         obj({"severity": {"type": "string", "enum": ["info", "warning", "critical"]},
              "title": {"type": "string", "minLength": 1, "maxLength": 200},
              "detail": {"type": "string", "maxLength": 2000},
              "key": {"type": "string", "maxLength": 100}}, ["severity", "title"]), _raise_alert),
)
