"""The thread: every model-visible event after the summary, each tool call next to its results."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from agent.config import ContextSettings
from agent.context.cache import Message, Meter
from agent.context.seen import OPERATOR_KINDS
from agent.events import KINDS, Event, render_tool_content

PLACEHOLDER = "interrupted: no result recorded yet"


@dataclass
class Entry:
    """One message of the thread and the event it came from."""

    seq: int
    kind: str
    tick: int | None
    message: Message
    tokens: int
    text: str | None = None       # the text a shrink may truncate (tool output or user content)
    tool: tuple[str, bool, bool] | None = None   # (name, ok, recovered) for tool messages
    late: str | None = None       # call id of a tool result whose call is not in view
    pinned_directive: bool = False
    cap: int | None = None        # tokens of ``text`` shown, when it is cut
    version: int = 1              # the stored version of a tool result: it picks the rendering
    operator: bool = False        # operator feedback: shrunk only when nothing else is left to cut

    def copy(self) -> Entry:
        """A copy with its own message dict."""
        return replace(self, message=dict(self.message))

    def shown(self, meter: Meter) -> int:
        n = meter.count(self.text or "")
        return n if self.cap is None else min(n, self.cap)


def _tool_output(p: dict[str, Any]) -> str:
    out = p.get("output") if p["ok"] else (p.get("error") or p.get("output") or "")
    return out or ""


def _tool_message(e: Entry, out: str, marker: str) -> Message:
    name, ok, recovered = e.tool or ("?", False, False)
    content = render_tool_content(name, ok, out, recovered, version=e.version) + marker
    if e.late is not None:
        return {"role": "user", "content": f"[late tool result · call {e.late}]\n{content}"}
    return {"role": "tool", "tool_call_id": e.message["tool_call_id"], "content": content}


def _cut_text(meter: Meter, text: str, cap: int, seq: int, what: str) -> tuple[str, str]:
    """(kept text, marker) for ``text`` cut at ``cap`` tokens; marker is '' when nothing was cut."""
    kept, n, full = meter.cut(text, cap)
    if n >= full:
        return text, ""
    return kept, (f"\n[... {what} truncated: first {n} of {full} tokens shown; the full text is event #{seq} "
                  "(search_history finds it)]")


def shrink_entry(e: Entry, cap: int, meter: Meter) -> None:
    """Cut ``e``'s text at ``cap`` tokens, with a marker naming the event."""
    assert e.text is not None
    if e.tool is not None:
        kept, marker = _cut_text(meter, e.text, cap, e.seq, "output")
        e.message = _tool_message(e, kept, marker)
    else:
        kept, marker = _cut_text(meter, e.text, cap, e.seq, "message")
        e.message = {"role": "user", "content": kept + marker}
    e.cap = cap
    e.tokens = meter.message(e.message)


@dataclass
class _Threader:
    """The state of one pass over the events: calls waiting for results, and what waits behind them."""

    settings: ContextSettings
    meter: Meter
    out: list[Entry] = field(default_factory=list)
    buffer: list[Entry] = field(default_factory=list)
    pending: dict[str, str] = field(default_factory=dict)   # call id -> tool name, in call order
    pending_seq: int = 0
    masked_to: int | None = None   # tool results with seq <= this render as one-line stubs

    def close(self) -> None:
        """Placeholders for calls without results, then whatever waited behind them."""
        version = KINDS["tool.result"].version
        for cid, name in self.pending.items():
            content = render_tool_content(name, False, PLACEHOLDER, version=version)
            e = Entry(self.pending_seq, "placeholder", None, {"role": "tool", "tool_call_id": cid, "content": content},
                      0, tool=(name, False, False), version=version)
            e.tokens = self.meter.message(e.message)
            self.out.append(e)
        self.pending = {}
        self.out.extend(self.buffer)
        self.buffer.clear()

    def result(self, ev: Event, tokens: int, msg: Message) -> None:
        p = ev.payload
        cid = p["call_id"]
        e = Entry(ev.seq, ev.kind, ev.tick, {"role": "tool", "tool_call_id": cid}, tokens,
                  text=_tool_output(p), tool=(p["name"], bool(p["ok"]), bool(p.get("recovered"))), version=ev.version)
        is_late = cid not in self.pending
        if is_late:
            e.late = cid
        if self.masked_to is not None and ev.seq <= self.masked_to and maskable(p["name"], tokens):
            e.message = _tool_message(e, masked_stub(ev, tokens), "")
            e.text = None   # nothing left to shrink
            e.tokens = self.meter.message(e.message)
        elif tokens > self.settings.tool_output_max_tokens or is_late:
            shrink_entry(e, self.settings.tool_output_max_tokens, self.meter)
        else:
            e.message = msg
        if is_late:
            (self.buffer if self.pending else self.out).append(e)
            return
        self.out.append(e)
        del self.pending[cid]
        if not self.pending:
            self.close()

    def other(self, ev: Event, tokens: int, msg: Message) -> None:
        if self.pending and ev.kind in ("model.response", "tick.started"):
            self.close()
        p = ev.payload
        entry = Entry(ev.seq, ev.kind, ev.tick, msg, tokens,
                      text=msg.get("content") if msg["role"] == "user" else None,
                      pinned_directive=ev.kind == "operator.note" and bool(p.get("pin")),
                      operator=ev.kind in OPERATOR_KINDS)
        if ev.kind == "model.response":
            self.out.append(entry)
            self.pending = {c["id"]: c["name"] for c in p.get("tool_calls") or []}
            self.pending_seq = ev.seq
        else:
            self.add(entry)

    def add(self, entry: Entry) -> None:
        """A user message: after the pending calls' results, when calls are pending."""
        (self.buffer if self.pending else self.out).append(entry)


KEEP_UNMASKED = ("remember", "forget")   # their results are the only trace of memory until a compaction pins it
MASK_MIN_TOKENS = 100                      # a stub saves nothing on a short output


def maskable(name: str, tokens: int) -> bool:
    """Whether a tool result may become a stub at a compaction."""
    return name not in KEEP_UNMASKED and tokens > MASK_MIN_TOKENS


def masked_stub(ev: Event, tokens: int) -> str:
    """The one line an old tool output becomes at a compaction: its size and where to read it again (what
    was called stays in the assistant's message, the outcome in the result's header)."""
    return (f"(output masked at compaction: {tokens:,} tokens; event #{ev.seq} has it: search_history, "
            "`fleet-agent thread show`)")


COLLAPSE_AT = 8   # more knowledge changes than this in one tick become one message with a per-file list


def _size(n: int) -> str:
    return f"{n:,} B" if n < 10_000 else f"{n // 1024:,} KiB"


def collapse_knowledge(run: list[Event], settings: ContextSettings, meter: Meter) -> Entry:
    """One message for many ``knowledge.changed`` events of one tick: the counts, then one line per
    file while they fit ``knowledge_max_tokens``, then a marker saying how many are left out and where."""
    counts = {c: sum(1 for e in run if e.payload["change"] == c) for c in ("added", "changed", "removed")}
    head = (f"[knowledge edit · {len(run):,} files] " + ", ".join(f"{n:,} {c}" for c, n in counts.items() if n)
            + " at once; one line per file (read_knowledge(name) has each file's text)")
    lines = [head]
    used = meter.count(head)
    shown = 0
    for e in run:
        p = e.payload
        line = f"- {p['change']} {p['name']}" + (f" ({_size(int(p.get('size') or 0))})" if p.get("text") else "") \
            + f" #{e.seq}"
        n = meter.count(line) + 1
        if used + n > settings.knowledge_max_tokens:
            break
        lines.append(line)
        used += n
        shown += 1
    if shown < len(run):
        lines.append(f"[... {len(run) - shown:,} more files not listed for space (#{run[shown].seq}–#{run[-1].seq}); "
                     "`fleet-agent knowledge status` lists every file, `fleet-agent thread show --kind knowledge.` "
                     "every change]")
    msg: Message = {"role": "user", "content": "\n".join(lines)}
    return Entry(run[0].seq, "knowledge.collapsed", run[0].tick, msg, meter.message(msg), operator=True)


class _Builder:
    """One pass over a thread's events in seq order."""

    def __init__(self, settings: ContextSettings, meter: Meter, masked_to: int | None) -> None:
        self.t = _Threader(settings, meter, masked_to=masked_to)
        self.run: list[tuple[Event, int, Message]] = []   # knowledge changes of one tick not yet placed

    def feed(self, events: list[Event]) -> None:
        """Each event the model sees, with its tokens and its message; a run of more than COLLAPSE_AT
        consecutive knowledge changes of one tick is grouped."""
        for ev in events:
            hit = self.t.meter.event_message(ev)
            if hit is None:
                continue
            if ev.kind == "knowledge.changed":
                if self.run and self.run[-1][0].tick != ev.tick:
                    self._flush()
                self.run.append((ev, hit[1], hit[0]))
                continue
            if self.run:
                self._flush()
            self._place(ev, hit[1], hit[0])

    def _flush(self) -> None:
        run, self.run = self.run, []
        if len(run) > COLLAPSE_AT:
            self.t.add(collapse_knowledge([e for e, _, _ in run], self.t.settings, self.t.meter))
        else:
            for item in run:
                self._place(*item)

    def _place(self, ev: Event, tokens: int, msg: Message) -> None:
        if ev.kind == "tool.result":
            self.t.result(ev, tokens, msg)
        else:
            self.t.other(ev, tokens, msg)

    def finish(self) -> list[Entry]:
        """The thread of the events fed."""
        if self.run:
            self._flush()
        self.t.close()
        return self.t.out


def build_thread(events: list[Event], settings: ContextSettings, meter: Meter,
                 masked_to: int | None = None) -> list[Entry]:
    """The thread's messages for ``events`` (seq order), keeping every tool call next to its results;
    a flood of knowledge changes in one tick is one message; tool outputs up to ``masked_to`` (set by the
    compaction the thread follows) are one-line stubs."""
    b = _Builder(settings, meter, masked_to)
    b.feed(events)
    return b.finish()
