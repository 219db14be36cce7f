"""The event vocabulary: every kind, its payload shape per version, and how it renders.

Events are past-tense facts. Each kind (``kinds/``, by subject) has versions 1..N; each
version has a typed payload class (``payload.py``) and a renderer. A renderer
turns an event into the chat message the model sees (``None`` = not
model-visible) and into the text the full-text index holds. Renderings are
deterministic and frozen per version: the same stored event always renders to
the same bytes, which is what lets ``replay --verify`` re-derive past requests
and lets providers' prompt caches hit. Old versions are read through upcasters
and rendered as they were (``vocabulary.py``); golden files in tests/golden/ pin
every version's rendering.

Source tags make provenance unmistakable: ``[tick 42 · 2026-11-29 10:05 UTC]``,
``[operator note · alice]``, ``[alert #12 acked · bob]``,
``[knowledge edit · gpu-policy.md]``. Tool output is fenced as data.
"""

from __future__ import annotations

import json

from agent.events.event import SOURCES, Event, JsonArray, JsonObject, Message
from agent.events.kinds import VOCABULARY
from agent.events.payload import FieldSpec, Payload
from agent.events.rendering import (
    KNOWLEDGE_DIFF_CHARS,
    data,
    epoch_minute,
    fence,
    inline,
    render_observation,
    render_tool_content,
    ts_minute,
)
from agent.events.vocabulary import AS_NEXT, Kind, Kinds, Renderer, Upcaster, Version, Vocabulary

__all__ = [
    "AS_NEXT", "KINDS", "KNOWLEDGE_DIFF_CHARS", "SOURCES", "VOCABULARY", "Event", "FieldSpec", "JsonArray",
    "JsonObject", "Kind", "Kinds", "Message", "Payload", "Renderer", "Upcaster", "Version", "Vocabulary", "data",
    "decode", "describe", "epoch_minute", "fence", "inline", "kind", "payload_of", "render", "render_observation", "render_tool_content",
    "search_text", "stored_payload", "ts_minute", "upcast",
]

KINDS: Kinds = VOCABULARY.kinds
"""Every kind by name (a kind's module is imported when it is first asked for)."""


def kind(name: str) -> Kind:
    """The kind called ``name``; PayloadError (with the nearest name) when there is none."""
    return VOCABULARY.kind(name)


def render(event: Event) -> Message | None:
    """The chat message the model sees for ``event`` as its stored version renders it, or None if it is
    not model-visible."""
    return VOCABULARY.render(event)


def decode(kind: str, version: int, stored: JsonObject) -> JsonObject:
    """The payload readers see for a row holding ``stored`` (itself unless its version stores a smaller
    form; ``Version.stored``). The log reads every row through this."""
    return VOCABULARY.decode(kind, version, stored)


def stored_payload(event: Event) -> JsonObject:
    """What the row of ``event`` holds, the form its hash covers (``decode`` reversed)."""
    return VOCABULARY.encode(event.kind, event.version, event.payload)


def upcast(event: Event) -> Event:
    """``event`` with its payload upgraded to the current version of its kind (the stored row is untouched)."""
    return VOCABULARY.upcast(event)


def payload_of(event: Event) -> Payload:
    """The typed payload of ``event`` at the current version of its kind."""
    return VOCABULARY.payload_of(event)


_UNSET: Message = {}


def search_text(event: Event, msg: Message | None = _UNSET) -> str:
    """What the full-text index holds for ``event``: its rendering, else what its version indexes
    (``Version.search``), else its kind and payload JSON. ``msg``: the rendering when the caller already
    has it."""
    if msg is _UNSET:
        msg = render(event)
    if msg is not None:
        parts = [msg.get("content") or ""]
        for c in msg.get("tool_calls") or ():
            parts.append(f"{c['function']['name']} {c['function']['arguments']}")
        return "\n".join(parts)
    text = VOCABULARY.search(event)
    if text is not None:
        return text
    return f"{event.kind} " + json.dumps(event.payload, ensure_ascii=False, sort_keys=True)


def describe(e: Event) -> str:
    """One readable line (or block) for an event: its rendering as the model saw it, a short form of the
    kinds without one, else its payload (what ``thread show`` and the console's thread print)."""
    msg = render(e)
    p = e.payload
    if msg is not None:
        body = msg.get("content") or ""
        for c in msg.get("tool_calls") or ():
            body += f"\n  -> {c['function']['name']}({c['function']['arguments']})"
        return body.strip()
    if e.kind == "tool.called":
        key = f" key={p['idempotency_key']}" if p.get("idempotency_key") else ""
        return f"{p['name']}({p['arguments']}){key}"
    if e.kind == "policy.blocked":
        return f"BLOCKED {p['name']}: {p['rule']} {p.get('detail', '')}".strip()
    if e.kind == "model.request":
        m = p["manifest"]
        return f"request {p['request_hash'][:12]} ~{m.get('estimated_tokens', '?')} tokens"
    if e.kind == "context.compacted":
        return (f"compacted #{p.get('covered_from')}–#{p['covered_to']} ({p['method']}): "
                f"{p.get('tokens_before')} -> {p.get('tokens_after')} tokens")
    if e.kind == "tick.completed":
        return f"steps={p['steps']} usage={json.dumps(p.get('usage', {}), sort_keys=True)}"
    return json.dumps(p, sort_keys=True, ensure_ascii=False)[:400]
