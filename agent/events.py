"""The event vocabulary: every kind, its payload shape, and how it renders.

Events are past-tense facts. Each kind declares the payload fields it requires
(with their JSON types), a version, and a renderer. A renderer turns an event
into the chat message the model sees (``None`` = not model-visible) and into
the text the full-text index holds. Renderings are deterministic: the same
event always renders to the same bytes, which is what lets ``replay --verify``
re-derive past requests and lets providers' prompt caches hit.

Source tags make provenance unmistakable: ``[tick 42 · 2026-11-29 10:05 UTC]``,
``[operator note · alice]``, ``[alert #12 acked · bob]``,
``[knowledge edit · gpu-policy.md]``. Tool output is fenced as data.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from agent.errors import PayloadError

SOURCES = ("scheduler", "model", "tool", "operator", "system")
KNOWLEDGE_DIFF_CHARS = 6000


@dataclass(frozen=True)
class Event:
    """One row of the log."""

    seq: int
    id: str
    ts: str
    kind: str
    source: str
    tick: int | None
    payload: dict[str, Any]
    tokens: int | None = None
    version: int = 1
    prev_hash: str = ""
    hash: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "id": self.id,
            "ts": self.ts,
            "kind": self.kind,
            "version": self.version,
            "source": self.source,
            "tick": self.tick,
            "payload": self.payload,
            "tokens": self.tokens,
            "prev_hash": self.prev_hash,
            "hash": self.hash,
        }


Renderer = Callable[[Event], "dict[str, Any] | None"]

_T = {"str": str, "int": int, "float": (int, float), "bool": bool, "dict": dict, "list": list, "any": object}


@dataclass(frozen=True)
class Kind:
    name: str
    doc: str
    required: dict[str, str] = field(default_factory=dict)
    optional: dict[str, str] = field(default_factory=dict)
    version: int = 1
    render: Renderer | None = None

    def validate(self, payload: Any) -> None:
        if not isinstance(payload, dict):
            raise PayloadError(f"{self.name}: payload must be a JSON object, got {type(payload).__name__}")
        for name, typ in self.required.items():
            if name not in payload:
                raise PayloadError(
                    f"{self.name}: payload is missing required field {name!r} "
                    f"(required: {', '.join(sorted(self.required))})"
                )
            _check_type(self.name, name, payload[name], typ)
        for name, typ in self.optional.items():
            if name in payload and payload[name] is not None:
                _check_type(self.name, name, payload[name], typ)


def _check_type(kind: str, name: str, value: Any, typ: str) -> None:
    nullable = typ.endswith("?")
    base = typ.rstrip("?")
    if value is None:
        if nullable:
            return
        raise PayloadError(f"{kind}: field {name!r} must be {base}, got null")
    expected = _T[base]
    if (base in ("int", "float") and isinstance(value, bool)) or not isinstance(value, expected):
        raise PayloadError(f"{kind}: field {name!r} must be {base}, got {type(value).__name__}")


# ---------------------------------------------------------------- rendering helpers


def ts_minute(ts: str) -> str:
    """'2026-11-29T10:05:12.123456Z' -> '2026-11-29 10:05 UTC'."""
    return f"{ts[:10]} {ts[11:16]} UTC"


def epoch_minute(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M UTC")


def fence(text: str, info: str = "data") -> str:
    """Fence ``text`` so nothing inside can close the fence (CommonMark rule:
    the fence is longer than any backtick run in the text)."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{info}\n{text}\n{ticks}"


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _money(x: Any) -> str:
    return f"${x:,.2f}" if isinstance(x, int | float) else "?"


def _age(seconds: Any) -> str:
    if not isinstance(seconds, int | float):
        return "?"
    s = int(seconds)
    if s < 3600:
        return f"{s // 60}m"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def render_observation(tick: int | None, ts: str, obs: dict[str, Any]) -> str:
    """The compact, deterministic text of one tick's observation."""
    when = epoch_minute(obs["time"]) if isinstance(obs.get("time"), int | float) else ts_minute(ts)
    lines = [f"[tick {tick} · {when}] observation"]
    insts = obs.get("instances") or []
    states: dict[str, int] = {}
    for i in insts:
        states[i.get("status") or "provisioning"] = states.get(i.get("status") or "provisioning", 0) + 1
    state_txt = ", ".join(f"{n} {s}" for s, n in sorted(states.items())) or "none"
    lines.append(
        f"balance {_money(obs.get('balance'))} · fleet {len(insts)} instances ({state_txt}) · "
        f"{_money(obs.get('fleet_dph', 0.0))}/h"
    )
    d = obs.get("demand")
    if isinstance(d, dict):
        rate = d.get("arrival_rate_per_h")
        rate_txt = f", arriving ~{rate:.0f}/h" if isinstance(rate, int | float) else ""
        delta = d.get("pending_delta")
        delta_txt = f" ({delta:+d} since last tick)" if isinstance(delta, int) else ""
        lines.append(
            f"demand: {d.get('pending', '?')} pending{delta_txt}, {d.get('running', 0)} running, "
            f"{d.get('completed', '?')} completed{rate_txt}"
        )
    elif d is None and "demand_error" in obs:
        lines.append(f"demand: unavailable ({obs['demand_error']})")
    if insts:
        lines.append("instances:")
        for i in insts:
            flag = "" if i.get("ours", True) else " NOT-OURS"
            msg = f" — {i['status_msg']}" if i.get("status_msg") else ""
            lines.append(
                f"  #{i.get('id')} {i.get('gpu_name')} x{i.get('num_gpus', 1)} {i.get('status') or 'provisioning'} "
                f"{_age(i.get('age_s'))} {_money(i.get('dph'))}/h host {i.get('host_id')}{flag}{msg}"
            )
    for key, title in (("changes", "changes since last tick"), ("open_alerts", "open alerts"), ("errors", "errors")):
        items = obs.get(key) or []
        if items:
            lines.append(f"{title}:")
            lines.extend(f"  {x}" for x in items)
    return "\n".join(lines)


def _r_tick_started(e: Event) -> dict[str, Any]:
    return _user(render_observation(e.tick, e.ts, e.payload["observation"]))


def _r_note(e: Event) -> dict[str, Any]:
    by = e.payload["by"]
    if e.payload.get("pin"):
        return _user(f"[operator directive #{e.seq} · {by}] {e.payload['text']}")
    return _user(f"[operator note · {by}] {e.payload['text']}")


def _r_unpinned(e: Event) -> dict[str, Any]:
    return _user(f"[operator · {e.payload['by']}] directive #{e.payload['directive_id']} withdrawn")


def _r_alert_raised(e: Event) -> dict[str, Any] | None:
    p = e.payload
    if p.get("raised_by") == "model":
        return None  # the model raised it; its own tool call and result already say so
    detail = f" — {p['detail']}" if p.get("detail") else ""
    return _user(f"[alert #{p['alert_id']} raised · system] {p['severity']}: {p['title']}{detail}")


def _r_alert_acked(e: Event) -> dict[str, Any]:
    p = e.payload
    note = f" — note: {p['note']}" if p.get("note") else ""
    return _user(f"[alert #{p['alert_id']} acked · {p['by']}] {p['title']}{note}")


def _r_alert_resolved(e: Event) -> dict[str, Any]:
    p = e.payload
    return _user(f"[alert #{p['alert_id']} resolved · system] {p['title']} — {p.get('reason', '')}".rstrip(" —"))


def _r_knowledge(e: Event) -> dict[str, Any]:
    p = e.payload
    head = f"[knowledge edit · {p['name']}] {p['change']}"
    if p["change"] == "removed":
        return _user(f"{head}: the file was deleted")
    diff = p.get("diff") or ""
    if len(diff) > KNOWLEDGE_DIFF_CHARS:
        diff = diff[:KNOWLEDGE_DIFF_CHARS] + f"\n[... diff truncated; read_knowledge('{p['name']}') has the full text]"
    if p["change"] == "added":
        text = p.get("text") or ""
        if len(text) > KNOWLEDGE_DIFF_CHARS:
            text = text[:KNOWLEDGE_DIFF_CHARS] + f"\n[... truncated; read_knowledge('{p['name']}') has the full text]"
        return _user(f"{head}\n{fence(text, 'text')}")
    return _user(f"{head}\n{fence(diff, 'diff')}")


def _r_response(e: Event) -> dict[str, Any]:
    p = e.payload
    calls = p.get("tool_calls") or []
    msg: dict[str, Any] = {"role": "assistant", "content": p.get("text") or None}
    if calls:
        msg["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in calls
        ]
    elif msg["content"] is None:
        msg["content"] = ""
    return msg


def render_tool_content(name: str, ok: bool, output: str, recovered: bool = False) -> str:
    status = "ok" if ok else "error"
    if recovered:
        status += " · recovered after restart"
    return f"[tool result · {name} · {status}]\n{fence(output)}"


def _r_tool_result(e: Event) -> dict[str, Any]:
    p = e.payload
    out = p.get("output") if p["ok"] else (p.get("error") or p.get("output") or "")
    return {
        "role": "tool",
        "tool_call_id": p["call_id"],
        "content": render_tool_content(p["name"], p["ok"], out or "", bool(p.get("recovered"))),
    }


def _r_tick_failed(e: Event) -> dict[str, Any]:
    return _user(f"[system · tick {e.tick} failed] {e.payload['reason']}")


KINDS: dict[str, Kind] = {}


def _k(name: str, doc: str, required: dict[str, str] | None = None, optional: dict[str, str] | None = None,
       render: Renderer | None = None, version: int = 1) -> None:
    KINDS[name] = Kind(name, doc, required or {}, optional or {}, version, render)


_k("daemon.started", "The daemon started.", {"version": "str", "config_hash": "str", "prompt_hashes": "dict"},
   {"pid": "int"})
_k("daemon.stopped", "The daemon stopped.", {"reason": "str"})
_k("config.loaded", "A configuration was loaded (start or SIGHUP).", {"config_hash": "str"},
   {"changed": "list", "path": "str?"})
_k("tick.started", "A tick began; its observation of fleet, balance and demand.", {"observation": "dict"},
   render=_r_tick_started)
_k("tick.completed", "A tick ended normally.", {"steps": "int"},
   {"usage": "dict", "actions": "list", "duration_ms": "float"})
_k("tick.failed", "A tick ended with an error; the schedule continues.", {"reason": "str"},
   {"error_kind": "str", "steps": "int"}, render=_r_tick_failed)
_k("operator.note", "An operator note; pin=true makes it a standing directive.", {"text": "str", "by": "str"},
   {"pin": "bool"}, render=_r_note)
_k("directive.unpinned", "An operator withdrew a pinned directive.", {"directive_id": "int", "by": "str"},
   render=_r_unpinned)
_k("alert.raised", "An alert opened.",
   {"alert_id": "int", "severity": "str", "title": "str", "dedup_key": "str", "raised_by": "str"},
   {"detail": "str"}, render=_r_alert_raised)
_k("alert.repeated", "An open alert's condition was seen again (dedup: count, last seen).",
   {"alert_id": "int", "count": "int"})
_k("alert.acked", "An operator acknowledged an alert.", {"alert_id": "int", "by": "str", "title": "str"},
   {"note": "str?"}, render=_r_alert_acked)
_k("alert.resolved", "An alert's condition cleared.", {"alert_id": "int", "title": "str"}, {"reason": "str"},
   render=_r_alert_resolved)
_k("knowledge.changed", "A knowledge file was added, changed or removed.",
   {"name": "str", "change": "str", "hash": "str?", "size": "int"},
   {"diff": "str", "text": "str?", "prev_hash": "str?"}, render=_r_knowledge)
_k("model.request", "A request about to be sent to the model: its manifest and hash.",
   {"request_hash": "str", "manifest": "dict"})
_k("model.response", "The model's answer: text, tool calls, usage.", {"text": "str", "tool_calls": "list"},
   {"usage": "dict", "latency_ms": "float", "finish_reason": "str?", "model": "str", "provider": "str",
    "request_seq": "int"}, render=_r_response)
_k("model.failed", "A model call failed (classified).", {"error_kind": "str", "message": "str"},
   {"request_seq": "int"})
_k("tool.called", "A tool call is about to run: the intent, with its idempotency key.",
   {"call_id": "str", "name": "str", "arguments": "str"}, {"idempotency_key": "str?", "side_effect": "bool"})
_k("tool.result", "A tool call's outcome.", {"call_id": "str", "name": "str", "ok": "bool"},
   {"output": "str", "error": "str?", "recovered": "bool", "effect": "dict?"}, render=_r_tool_result)
_k("policy.blocked", "A tool call refused by policy.", {"call_id": "str", "name": "str", "rule": "str"},
   {"detail": "str"})
_k("memory.written", "The agent remembered a fact.", {"key": "str", "text": "str"})
_k("memory.deleted", "The agent forgot a fact.", {"key": "str"})
_k("context.compacted", "The oldest thread span was summarised (nothing deleted).",
   {"summary": "str", "covered_to": "int", "method": "str"},
   {"covered_from": "int", "first_kept_seq": "int", "tokens_before": "int", "tokens_after": "int",
    "model": "str?", "prompt_hash": "str", "pinned": "dict", "attempts": "list"})
_k("context.calibrated", "The ratio of provider-reported to estimated prompt tokens changed.", {"ratio": "float"})
_k("instance.adopted", "An instance carrying one of our idempotency keys was found and recorded as ours.",
   {"instance_id": "int", "label": "str"}, {"idem_key": "str?", "gpu_name": "str?", "dph": "float?"})
_k("instance.gone", "An instance we owned is no longer listed by vast.ai.", {"instance_id": "int"},
   {"last_status": "str?"})
_k("log.head", "A checkpoint of the log head, written outside the database too.", {"seq": "int", "hash": "str"})


def kind(name: str) -> Kind:
    try:
        return KINDS[name]
    except KeyError:
        import difflib

        near = difflib.get_close_matches(name, KINDS, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise PayloadError(f"unknown event kind {name!r}{hint}") from None


def render(event: Event) -> dict[str, Any] | None:
    """The chat message the model sees for ``event``, or None if it is not model-visible."""
    k = KINDS.get(event.kind)
    if k is None or k.render is None:
        return None
    return k.render(event)


_UNSET: Any = object()


def search_text(event: Event, msg: dict[str, Any] | None = _UNSET) -> str:
    """What the full-text index holds for ``event``: its rendering, else its payload's strings.
    ``msg``: the rendering when the caller already has it."""
    if msg is _UNSET:
        msg = render(event)
    if msg is not None:
        parts = [msg.get("content") or ""]
        for c in msg.get("tool_calls") or ():
            parts.append(f"{c['function']['name']} {c['function']['arguments']}")
        return "\n".join(parts)
    return f"{event.kind} " + json.dumps(event.payload, ensure_ascii=False, sort_keys=True)
