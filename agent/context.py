"""Projection: the event log -> the messages of one model request, within the budget.

The request is a pure function of the log up to a sequence number, the prompt
files, the settings, the policy and the tool specs::

    [system]   prompts/system.md rendered with the fleet policy        stable
    [pinned]   directives, memory, knowledge as of the last compaction stable between compactions
    [summary]  the latest context.compacted summary (covers seq <= k)   stable between compactions
    [thread]   every model-visible event with seq > k, in order         append-only

Between compactions a new event only appends to the thread, so each request is
a byte prefix extension of the previous one (providers' prompt caches hit).
Every rendering is deterministic, including the truncation of long tool
outputs, so ``replay --verify`` can re-derive any past request and check its
hash. Projecting needs only the newest ``context.compacted`` (found through the
kind index) and the events after it, and uses each event's stored token count:
the cost does not grow with the length of the log.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections import OrderedDict
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from typing import Any

import structlog

from agent import config
from agent.errors import UsageError
from agent.events import Event, fence, render, render_tool_content
from agent.prompts import Prompts, render_system
from agent.store.log import EventLog, canonical, utc_ts
from agent.tokens import REQUEST_OVERHEAD, Tokenizer, get_tokenizer

logger = structlog.get_logger(__name__)

PLACEHOLDER = "interrupted: no result recorded yet"
SHRINK_FLOOR = 48          # never truncate a message's text below this many tokens
MARKER_COST = 40           # tokens a truncation marker may add
CALIBRATION_ALPHA = 0.5    # weight of a new provider observation in the smoothed ratio
CALIBRATION_STEP = 0.02    # record a new ratio only when it moves by more than this share
SECTIONS = ("system", "pinned", "summary", "thread", "tools")
RENDER_CACHE_SIZE = 2048   # rendered thread messages kept per process (a thread is a few hundred at most)


ContextSettings = config.ContextSettings  # one definition, in agent/config.py


BUDGET_FIELDS = ("budget_tokens", "output_reserve", "high_water", "low_water", "encoding", "summary_max_tokens",
                 "knowledge_max_tokens", "pinned_max_tokens", "tool_output_max_tokens", "calibration_margin")


def budget_fields(settings: Any) -> dict[str, Any]:
    return {k: getattr(settings, k) for k in BUDGET_FIELDS}


def tokenizer_for(settings: Any) -> Tokenizer:
    return get_tokenizer(settings.encoding, settings.encoding_file, settings.encoding_sha256)


# ------------------------------------------------------------------ hashing


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def request_hash(model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
    """sha256 of the canonical JSON of exactly what is sent: model, messages, tools."""
    return sha256_text(canonical({"model": model, "messages": messages, "tools": tools}))


def tools_hash(tools: list[dict[str, Any]]) -> str:
    return sha256_text(canonical(tools))


# ------------------------------------------------------------------ calibration


@dataclass(frozen=True)
class Calibration:
    """Provider-reported / estimated prompt tokens, as last recorded in the log."""

    ratio: float = 1.0
    margin: float = 0.05
    seq: int | None = None

    @classmethod
    def load(cls, log: EventLog, until_seq: int | None, margin: float) -> Calibration:
        for e in log.read(0, until_seq=until_seq, kinds=["context.calibrated"], newest_first=True, limit=1):
            return cls(float(e.payload["ratio"]), margin, e.seq)
        return cls(1.0, margin, None)

    @property
    def factor(self) -> float:
        return max(1.0, self.ratio) * (1.0 + self.margin)

    def calibrated(self, tokens: int) -> int:
        return math.ceil(tokens * self.factor)

    def raw_limit(self, calibrated_limit: float) -> int:
        """The largest raw estimate whose calibrated value stays <= ``calibrated_limit``."""
        n = max(0, math.floor(calibrated_limit / self.factor))
        while n > 0 and self.calibrated(n) > calibrated_limit:
            n -= 1
        return n


def update_calibration(log: EventLog, estimated: int, reported: int, *, tick: int | None = None) -> Event | None:
    """Fold one provider report into the smoothed ratio; append ``context.calibrated``
    only when the ratio moves by more than 2%. Returns the appended event, if any."""
    if estimated <= 0 or reported <= 0:
        return None
    current = Calibration.load(log, None, 0.0)
    observed = reported / estimated
    new = observed if current.seq is None else (1 - CALIBRATION_ALPHA) * current.ratio + CALIBRATION_ALPHA * observed
    if abs(new - current.ratio) <= CALIBRATION_STEP * current.ratio:
        return None
    new = round(new, 4)
    logger.info("context.calibrated", ratio=new, previous=current.ratio, estimated=estimated, reported=reported)
    return log_append_calibrated(log, new, tick)


def log_append_calibrated(log: EventLog, ratio: float, tick: int | None) -> Event:
    return log.append("context.calibrated", {"ratio": float(ratio)}, "system", tick)


# ------------------------------------------------------------------ cached counting


@lru_cache(maxsize=256)
def _count(tok_name: str, text: str) -> int:
    return get_tokenizer_cached(tok_name).count(text)


_TOKENIZERS: dict[str, Tokenizer] = {}


def get_tokenizer_cached(name: str) -> Tokenizer:
    return _TOKENIZERS[name]


def _register(tok: Tokenizer) -> str:
    key = f"{tok.name}:{id(tok.encoding)}"
    _TOKENIZERS.setdefault(key, tok)
    return key


@lru_cache(maxsize=1024)
def _truncate(tok_key: str, text: str, cap: int) -> tuple[str, int, int]:
    """(prefix of ``text`` within ``cap`` tokens, tokens kept, tokens in full)."""
    tok = _TOKENIZERS[tok_key]
    ids = tok.encoding.encode_ordinary(text)
    if len(ids) <= cap:
        return text, len(ids), len(ids)
    return tok.encoding.decode(ids[: max(0, cap)]), cap, len(ids)


_rendered: OrderedDict[tuple[int, str], tuple[Any, dict[str, Any] | None]] = OrderedDict()
_rendered_lock = threading.Lock()


def _render_cached(ev: Event) -> dict[str, Any] | None:
    """``render(ev)``, remembered per row (seq, hash) so successive projections of the same
    thread do not render it again. A hit also needs the fields a renderer reads to be equal,
    so the result is always exactly ``render(ev)``, even for a row edited behind its hash."""
    if not ev.hash:
        return render(ev)
    key = (ev.seq, ev.hash)
    fields = (ev.kind, ev.tick, ev.ts, ev.payload)
    with _rendered_lock:
        hit = _rendered.get(key)
        if hit is not None and hit[0] == fields:
            _rendered.move_to_end(key)
            msg = hit[1]
            return None if msg is None else dict(msg)
    msg = render(ev)
    with _rendered_lock:
        _rendered[key] = (fields, msg)
        while len(_rendered) > RENDER_CACHE_SIZE:
            _rendered.popitem(last=False)
    return None if msg is None else dict(msg)


def clear_render_cache() -> None:
    with _rendered_lock:
        _rendered.clear()


def _msg_tokens(tok_key: str, msg: dict[str, Any]) -> int:
    n = 4 + _count(tok_key, msg.get("content") or "")
    for call in msg.get("tool_calls") or ():
        fn = call.get("function", {})
        n += 3 + _count(tok_key, fn.get("name", "")) + _count(tok_key, fn.get("arguments", ""))
    if msg.get("tool_call_id"):
        n += 2
    return n


# ------------------------------------------------------------------ pinned snapshot


def empty_pinned() -> dict[str, Any]:
    return {"knowledge": {}, "directives": [], "memory": {}}


def fold_pinned(pinned: dict[str, Any], events: list[Event] | Any) -> dict[str, Any]:
    """Apply knowledge, directive and memory events to a pinned snapshot (a new dict)."""
    knowledge = dict(pinned.get("knowledge") or {})
    directives = [dict(d) for d in pinned.get("directives") or []]
    memory = dict(pinned.get("memory") or {})
    changed = int(pinned.get("changed_seq") or 0)
    for e in events:
        p = e.payload
        if e.kind in PINNED_KINDS and (e.kind != "operator.note" or p.get("pin")):
            changed = max(changed, e.seq)
        if e.kind == "knowledge.changed":
            if p["change"] == "removed":
                knowledge.pop(p["name"], None)
            elif p.get("text") is not None:
                knowledge[p["name"]] = p["text"]
            else:
                prev = knowledge.get(p["name"], "")
                knowledge[p["name"]] = (prev + f"\n[changed at #{e.seq}; read_knowledge('{p['name']}') "
                                        "has the current text]").lstrip("\n")
        elif e.kind == "operator.note" and p.get("pin"):
            directives.append({"id": e.seq, "by": p["by"], "text": p["text"]})
        elif e.kind == "directive.unpinned":
            directives = [d for d in directives if d["id"] != p["directive_id"]]
        elif e.kind == "memory.written":
            memory[p["key"]] = p["text"]
        elif e.kind == "memory.deleted":
            memory.pop(p["key"], None)
    return {"knowledge": dict(sorted(knowledge.items())), "directives": directives,
            "memory": dict(sorted(memory.items())), "changed_seq": changed}


PINNED_KINDS = ("knowledge.changed", "operator.note", "directive.unpinned", "memory.written", "memory.deleted")


def pinned_as_of(log: EventLog, seq: int) -> dict[str, Any]:
    """The pinned snapshot as of ``seq``: the latest compaction's (if it covers no more than seq)
    plus the pinned-kind events after it."""
    base, since = empty_pinned(), 0
    for c in log.read(0, until_seq=seq, kinds=["context.compacted"], newest_first=True, limit=8):
        if c.payload["covered_to"] <= seq and isinstance(c.payload.get("pinned"), dict):
            base, since = c.payload["pinned"], c.payload["covered_to"]
            break
    return fold_pinned(base, log.read(since, until_seq=seq, kinds=PINNED_KINDS))


def render_pinned(pinned: dict[str, Any], as_of: int, settings: Any, tok_key: str) -> str | None:
    """The pinned block's text, or None when it has nothing in it. Directives and memory
    come first; knowledge files share what is left of ``pinned_max_tokens``."""
    directives = pinned.get("directives") or []
    memory = pinned.get("memory") or {}
    knowledge = pinned.get("knowledge") or {}
    if not (directives or memory or knowledge):
        return None
    # Cite the last event that changed the block, not the compaction: the block's bytes then stay
    # the same across compactions that change nothing pinned, and the prompt cache keeps it.
    head = f"[pinned · knowledge, directives, memory as of #{pinned.get('changed_seq') or as_of}]"
    parts = [head]
    if directives:
        parts.append("## Operator directives (standing orders until withdrawn)")
        parts.extend(f"- [operator directive #{d['id']} · {d['by']}] {d['text']}" for d in directives)
    if memory:
        parts.append("## Your memory (remember / forget)")
        parts.extend(f"- {k}: {v}" for k, v in memory.items())
    text = "\n".join(parts)
    cap = settings.pinned_max_tokens
    if _count(tok_key, text) > cap:
        kept, _, full = _truncate(tok_key, text, max(0, cap - MARKER_COST))
        text = kept + (f"\n[... pinned block truncated at {cap} of {full} tokens; search_history finds every "
                       "directive and memory]")
    if knowledge:
        text += "\n## Knowledge files"
        for name, body in knowledge.items():
            room = min(settings.knowledge_max_tokens, cap - _count(tok_key, text) - MARKER_COST)
            if room < SHRINK_FLOOR:
                text += f"\n### {name}\n[not shown for space; read_knowledge('{name}') has the full text]"
                continue
            kept, n, full = _truncate(tok_key, body, room)
            text += f"\n### {name}\n{fence(kept, 'text')}"
            if n < full:
                text += f"\n[... truncated at {n} of {full} tokens; read_knowledge('{name}') has the full text]"
    return text


def render_summary(payload: dict[str, Any], settings: Any, tok_key: str) -> str:
    a = payload.get("covered_from") or 1
    b = payload["covered_to"]
    kept, n, full = _truncate(tok_key, payload["summary"], settings.summary_max_tokens)
    text = f"[summary of #{a}–#{b}]\n{kept}"
    if n < full:
        text += f"\n[... summary truncated at {n} of {full} tokens; search_history finds the events it covers]"
    return text


# ------------------------------------------------------------------ the thread


@dataclass
class Entry:
    """One message of the thread and the event it came from."""

    seq: int
    kind: str
    tick: int | None
    message: dict[str, Any]
    tokens: int
    text: str | None = None       # the text a shrink may truncate (tool output or user content)
    tool: tuple[str, bool, bool] | None = None   # (name, ok, recovered) for tool messages
    late: str | None = None       # call id of a tool result whose call is not in view
    pinned_directive: bool = False
    cap: int | None = None        # tokens of ``text`` shown, when it is cut

    def shown(self, tok_key: str) -> int:
        n = _count(tok_key, self.text or "")
        return n if self.cap is None else min(n, self.cap)


def _tool_output(p: dict[str, Any]) -> str:
    out = p.get("output") if p["ok"] else (p.get("error") or p.get("output") or "")
    return out or ""


def _tool_message(e: Entry, out: str, marker: str) -> dict[str, Any]:
    name, ok, recovered = e.tool or ("?", False, False)
    content = render_tool_content(name, ok, out, recovered) + marker
    if e.late is not None:
        return {"role": "user", "content": f"[late tool result · call {e.late}]\n{content}"}
    return {"role": "tool", "tool_call_id": e.message["tool_call_id"], "content": content}


def _cut_text(tok_key: str, text: str, cap: int, seq: int, what: str) -> tuple[str, str]:
    """(kept text, marker) for ``text`` cut at ``cap`` tokens; marker is '' when nothing was cut."""
    kept, n, full = _truncate(tok_key, text, cap)
    if n >= full:
        return text, ""
    return kept, (f"\n[... {what} truncated: first {n} of {full} tokens shown; the full text is event #{seq} "
                  "(search_history finds it)]")


def _shrink_entry(e: Entry, cap: int, tok_key: str) -> None:
    assert e.text is not None
    if e.tool is not None:
        kept, marker = _cut_text(tok_key, e.text, cap, e.seq, "output")
        e.message = _tool_message(e, kept, marker)
    else:
        kept, marker = _cut_text(tok_key, e.text, cap, e.seq, "message")
        e.message = {"role": "user", "content": kept + marker}
    e.cap = cap
    e.tokens = _msg_tokens(tok_key, e.message)


def build_thread(events: list[Event], settings: Any, tok_key: str) -> list[Entry]:
    """The thread's messages for ``events`` (seq order), keeping every tool call next to its results."""
    out: list[Entry] = []
    buffer: list[Entry] = []
    pending: dict[str, str] = {}   # call id -> tool name, in call order
    pending_seq = 0
    cap = settings.tool_output_max_tokens

    def close() -> None:
        nonlocal pending
        for cid, name in pending.items():
            e = Entry(pending_seq, "placeholder", None,
                      {"role": "tool", "tool_call_id": cid, "content": render_tool_content(name, False, PLACEHOLDER)},
                      0, tool=(name, False, False))
            e.tokens = _msg_tokens(tok_key, e.message)
            out.append(e)
        pending = {}
        out.extend(buffer)
        buffer.clear()

    for ev in events:
        if ev.tokens is None:
            continue
        p = ev.payload
        if ev.kind == "tool.result":
            cid = p["call_id"]
            outp = _tool_output(p)
            e = Entry(ev.seq, ev.kind, ev.tick, {"role": "tool", "tool_call_id": cid}, ev.tokens,
                      text=outp, tool=(p["name"], bool(p["ok"]), bool(p.get("recovered"))))
            is_late = cid not in pending
            if is_late:
                e.late = cid
            if ev.tokens > cap or is_late:
                _shrink_entry(e, cap, tok_key)
            else:
                msg = _render_cached(ev)
                assert msg is not None
                e.message = msg
            if is_late:
                (buffer if pending else out).append(e)
                continue
            out.append(e)
            del pending[cid]
            if not pending:
                close()
            continue
        if pending and ev.kind in ("model.response", "tick.started"):
            close()
        msg = _render_cached(ev)
        if msg is None:
            continue
        entry = Entry(ev.seq, ev.kind, ev.tick, msg, ev.tokens,
                      text=msg.get("content") if msg["role"] == "user" else None,
                      pinned_directive=ev.kind == "operator.note" and bool(p.get("pin")))
        if ev.kind == "model.response":
            out.append(entry)
            pending = {c["id"]: c["name"] for c in p.get("tool_calls") or []}
            pending_seq = ev.seq
        elif pending:
            buffer.append(entry)
        else:
            out.append(entry)
    close()
    return out


# ------------------------------------------------------------------ the projection


@dataclass
class Projection:
    messages: list[dict[str, Any]]
    manifest: dict[str, Any]
    tokens: int
    sections: dict[str, int] = field(default_factory=dict)

    @property
    def calibrated_tokens(self) -> int:
        return int(self.manifest["calibrated_tokens"])

    @property
    def request_hash(self) -> str:
        return str(self.manifest["request_hash"])


@dataclass
class View:
    """Everything a projection is made of, before the budget check (compaction reads it too)."""

    end: int
    compaction: Event | None
    covered_to: int
    system: str
    pinned_text: str | None
    summary_text: str | None
    events: list[Event]
    thread: list[Entry]
    tools_tokens: int
    calibration: Calibration
    tok_key: str

    def fixed_tokens(self) -> int:
        """Request overhead + system + pinned + summary + tools."""
        n = REQUEST_OVERHEAD + 4 + _count(self.tok_key, self.system) + self.tools_tokens
        if self.pinned_text is not None:
            n += 4 + _count(self.tok_key, self.pinned_text)
        if self.summary_text is not None:
            n += 4 + _count(self.tok_key, self.summary_text)
        return n

    def thread_tokens(self) -> int:
        return sum(e.tokens for e in self.thread)


@lru_cache(maxsize=64)
def _tools_tokens(tok_key: str, tools_json: str) -> int:
    return _count(tok_key, tools_json) if tools_json != "[]" else 0


def view(log: EventLog, prompts: Prompts, settings: Any, *, policy: dict[str, Any], tools: list[dict[str, Any]],
         until_seq: int | None = None) -> View:
    tok = tokenizer_for(settings)
    tok_key = _register(tok)
    end = log.last_seq() if until_seq is None else until_seq
    comp = next(iter(log.read(0, until_seq=end, kinds=["context.compacted"], newest_first=True, limit=1)), None)
    covered_to = comp.payload["covered_to"] if comp else 0
    pinned_text = summary_text = None
    if comp is not None:
        pinned_text = render_pinned(comp.payload.get("pinned") or empty_pinned(), covered_to, settings, tok_key)
        summary_text = render_summary(comp.payload, settings, tok_key)
    events = list(log.read(covered_to, until_seq=end))
    thread = build_thread(events, settings, tok_key)
    tools_json = json.dumps(tools, sort_keys=True, separators=(",", ":"))
    return View(end=end, compaction=comp, covered_to=covered_to, system=render_system(prompts, policy),
                pinned_text=pinned_text, summary_text=summary_text, events=events, thread=thread,
                tools_tokens=_tools_tokens(tok_key, tools_json),
                calibration=Calibration.load(log, end, settings.calibration_margin), tok_key=tok_key)


def _water_fill(sizes: list[int], excess: int) -> int | None:
    """The largest cap T >= SHRINK_FLOOR with sum(size - T - MARKER_COST for size > T) >= excess."""
    def saved(t: int) -> int:
        return sum(s - t - MARKER_COST for s in sizes if s > t + MARKER_COST)

    if not sizes or saved(SHRINK_FLOOR) < excess:
        return None
    lo, hi = SHRINK_FLOOR, max(sizes)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if saved(mid) >= excess:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _shrink(v: View, limit_raw: int) -> list[str]:
    """Truncate the thread's largest texts (tool outputs first) until it fits ``limit_raw``.
    Deterministic: the result depends only on the view and the limit. Returns notes."""
    notes: list[str] = []
    phases = (lambda e: e.tool is not None and e.text is not None,
              lambda e: e.tool is None and e.text is not None and not e.pinned_directive)
    for phase, pick in enumerate(phases):
        for _ in range(6):
            excess = v.fixed_tokens() + v.thread_tokens() - limit_raw
            if excess <= 0:
                return notes
            items = [e for e in v.thread if pick(e)]
            sizes = [e.shown(v.tok_key) for e in items]
            cap = _water_fill(sizes, excess)
            final = cap is None
            cap = SHRINK_FLOOR if cap is None else cap
            for e, n in zip(items, sizes, strict=True):
                if n > cap:
                    _shrink_entry(e, cap, v.tok_key)
            notes.append(f"phase {phase} cap {cap}")
            if final:
                break
    return notes


def finish(v: View, settings: Any, *, model: str, tools: list[dict[str, Any]], prompts: Prompts,
           policy: dict[str, Any]) -> Projection:
    """Assemble the messages, enforce the budget, write the manifest."""
    limit_raw = v.calibration.raw_limit(settings.budget_tokens - settings.output_reserve)
    shrink_notes = _shrink(v, limit_raw) if v.fixed_tokens() + v.thread_tokens() > limit_raw else []
    messages: list[dict[str, Any]] = [{"role": "system", "content": v.system}]
    sections = {"system": 4 + _count(v.tok_key, v.system), "pinned": 0, "summary": 0}
    if v.pinned_text is not None:
        messages.append({"role": "user", "content": v.pinned_text})
        sections["pinned"] = 4 + _count(v.tok_key, v.pinned_text)
    if v.summary_text is not None:
        messages.append({"role": "user", "content": v.summary_text})
        sections["summary"] = 4 + _count(v.tok_key, v.summary_text)
    messages.extend(e.message for e in v.thread)
    sections["thread"] = v.thread_tokens()
    sections["tools"] = v.tools_tokens
    tokens = REQUEST_OVERHEAD + sum(sections.values())
    calibrated = v.calibration.calibrated(tokens)
    rhash = request_hash(model, messages, tools)
    comp = v.compaction
    manifest = {
        "model": model,
        "covered_to": v.covered_to,
        "compaction_seq": comp.seq if comp else None,
        "thread_from": v.covered_to + 1,
        "thread_to": v.end,
        "thread_events": len(v.thread),
        "prompt_hashes": dict(prompts.hashes),
        "policy_hash": sha256_text(canonical(policy)),
        "tools_hash": tools_hash(tools),
        "settings": budget_fields(settings),
        "calibration": v.calibration.ratio,
        "calibration_seq": v.calibration.seq,
        "sections": dict(sections),
        "estimated_tokens": tokens,
        "calibrated_tokens": calibrated,
        "shrunk": bool(shrink_notes),
        "request_hash": rhash,
    }
    if shrink_notes:
        logger.warning("context.shrunk", thread_to=v.end, notes=shrink_notes, tokens=tokens, calibrated=calibrated)
    return Projection(messages=messages, manifest=manifest, tokens=tokens, sections=sections)


def project(log: EventLog, prompts: Prompts, settings: Any, *, policy: dict[str, Any], tools: list[dict[str, Any]],
            until_seq: int | None = None, model: str = "") -> Projection:
    """The request the model sees at ``until_seq`` (None = now), within the budget."""
    v = view(log, prompts, settings, policy=policy, tools=tools, until_seq=until_seq)
    return finish(v, settings, model=model, tools=tools, prompts=prompts, policy=policy)


def limit_tokens(settings: Any) -> int:
    return settings.budget_tokens - settings.output_reserve


def fits(projection: Projection, settings: Any) -> bool:
    """Calibrated tokens of messages and tool specs within budget minus output reserve."""
    return projection.calibrated_tokens <= limit_tokens(settings)


def needs_compaction(projection: Projection, settings: Any) -> bool:
    return projection.calibrated_tokens > settings.high_water * settings.budget_tokens


def request_payload(projection: Projection) -> dict[str, Any]:
    """The payload of the ``model.request`` event recording this projection."""
    return {"request_hash": projection.request_hash, "manifest": projection.manifest}


# ------------------------------------------------------------------ time travel


def parse_time(text: str) -> str:
    """An operator's time ('2026-11-29 10:05', ISO 8601, 'Z' or offset; naive = UTC) -> log ts."""
    from datetime import UTC, datetime

    t = text.strip().replace(" ", "T", 1)
    if t.endswith("Z"):
        t = t[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(t)
    except ValueError as e:
        raise UsageError(f"{text!r} is not a time; use ISO 8601 such as 2026-11-29T10:05:00Z") from e
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return utc_ts(dt)


def seq_at(log: EventLog, at_ts: str) -> int:
    """The last seq with ts <= at_ts (0 when the log had nothing then)."""
    e = next(iter(log.read(0, until_ts=at_ts, newest_first=True, limit=1)), None)
    return e.seq if e else 0


def request_of_tick(log: EventLog, tick: int) -> Event:
    e = next(iter(log.read(0, kinds=["model.request"], tick=tick, newest_first=True, limit=1)), None)
    if e is None:
        raise UsageError(f"tick {tick} sent no model request; try --seq or --at, or `fleet-agent log --tick {tick}`")
    return e


def project_at(log: EventLog, prompts: Prompts, settings: Any, *, policy: dict[str, Any],
               tools: list[dict[str, Any]], model: str = "", at_ts: str | None = None, tick: int | None = None,
               seq: int | None = None) -> Projection:
    """Time travel: the request as of a time, a tick's last request, or a seq."""
    if sum(x is not None for x in (at_ts, tick, seq)) > 1:
        raise UsageError("give at most one of --at, --tick, --seq")
    until: int | None = None
    if at_ts is not None:
        until = seq_at(log, at_ts)
    elif tick is not None:
        req = request_of_tick(log, tick)
        until = int(req.payload["manifest"]["thread_to"])
        model = req.payload["manifest"].get("model", model)
        settings = settings_from_manifest(settings, req.payload["manifest"])
    elif seq is not None:
        until = seq
    return project(log, prompts, settings, policy=policy, tools=tools, until_seq=until, model=model)


def settings_from_manifest(settings: Any, manifest: dict[str, Any]) -> Any:
    """``settings`` with the budget fields a past request recorded (for faithful replay)."""
    recorded = {k: v for k, v in (manifest.get("settings") or {}).items() if k in BUDGET_FIELDS}
    try:
        return replace(settings, **recorded)
    except TypeError:
        return ContextSettings(**{**asdict(ContextSettings()), **recorded})
