"""Kinds of tool calls: the intent, the outcome, and a call refused by policy."""

from __future__ import annotations

from dataclasses import dataclass

from agent.events.event import Event, JsonObject, Message
from agent.events.kinds.base import VOCABULARY, same_shape
from agent.events.payload import Payload
from agent.events.rendering import (
    render_tool_content,
)
from agent.events.vocabulary import Version

_define = VOCABULARY.define


# ---------------------------------------------------------------- tools and policy


@dataclass(frozen=True, kw_only=True)
class ToolCalledV1(Payload):
    call_id: str
    name: str
    arguments: str
    idempotency_key: str | None = None
    side_effect: bool | None = None


@dataclass(frozen=True, kw_only=True)
class ToolResultV1(Payload):
    call_id: str
    name: str
    ok: bool
    output: str | None = None
    error: str | None = None
    recovered: bool | None = None
    effect: JsonObject | None = None


def _r_tool_result_v1(e: Event, p: ToolResultV1) -> Message:
    """A tool message: ``[tool result · name · ok|error( · recovered after restart)]`` and the output
    (on error: the error, else the output) fenced as data."""
    out = p.output if p.ok else (p.error or p.output or "")
    return {
        "role": "tool",
        "tool_call_id": p.call_id,
        "content": render_tool_content(p.name, p.ok, out or "", bool(p.recovered)),
    }


@dataclass(frozen=True, kw_only=True)
class PolicyBlockedV1(Payload):
    call_id: str
    name: str
    rule: str
    detail: str | None = None


_define("tool.called", "A tool call is about to run: the intent, with its idempotency key.",
        Version(1, ToolCalledV1))
def _r_tool_result_v2(e: Event, p: ToolResultV1) -> Message:
    """As v1, the name written ``inline`` and the output through ``data`` (brackets, control and separator
    characters escaped) inside the fence: a tool's output cannot spell a source tag."""
    out = p.output if p.ok else (p.error or p.output or "")
    return {
        "role": "tool",
        "tool_call_id": p.call_id,
        "content": render_tool_content(p.name, p.ok, out or "", bool(p.recovered), version=2),
    }


_define("tool.result", "A tool call's outcome.", Version(1, ToolResultV1, _r_tool_result_v1),
        Version(2, ToolResultV1, _r_tool_result_v2, upcast=same_shape))
_define("policy.blocked", "A tool call refused by policy.", Version(1, PolicyBlockedV1))
