"""The vocabulary: every kind, its payload per version, and how each version renders.

Every kind is at version 1. To change a kind, add a version (never edit a
released one): a new payload class, an upcaster from the previous version, and
either a new renderer (the rendering changes for new events; old ones keep
theirs) or ``render=AS_NEXT`` on the previous version (only the payload shape
changed). Then add a sample for the new version to tests/test_events_golden.py
and write its golden file (``UPDATE_GOLDEN=1``).
"""

from __future__ import annotations

import json

from agent.events.event import Event, JsonArray, JsonObject, Message
from agent.events.payload import Payload
from agent.events.rendering import (
    KNOWLEDGE_DIFF_CHARS,
    fence,
    inline,
    render_observation,
    render_tool_content,
    user,
)
from agent.events.vocabulary import Version, Vocabulary
from agent.record import record as dataclass  # a dataclass, defined without importing dataclasses

VOCABULARY = Vocabulary()
_define = VOCABULARY.define


def _same_shape(p: JsonObject) -> JsonObject:
    """The upcaster of a version that changed only the rendering: the payload is unchanged."""
    return p


# ---------------------------------------------------------------- daemon and configuration


@dataclass(frozen=True, kw_only=True)
class DaemonStartedV1(Payload):
    version: str
    config_hash: str
    prompt_hashes: JsonObject
    pid: int | None = None


@dataclass(frozen=True, kw_only=True)
class DaemonStoppedV1(Payload):
    reason: str


@dataclass(frozen=True, kw_only=True)
class ConfigLoadedV1(Payload):
    config_hash: str
    changed: JsonArray | None = None
    path: str | None = None


@dataclass(frozen=True, kw_only=True)
class ConfigRefusedV1(Payload):
    error: str
    kept_config_hash: str
    path: str | None = None


_define("daemon.started", "The daemon started.", Version(1, DaemonStartedV1))
_define("daemon.stopped", "The daemon stopped.", Version(1, DaemonStoppedV1))
_define("config.loaded", "A configuration was loaded (start or SIGHUP).", Version(1, ConfigLoadedV1))
_define("config.refused", "A reload (SIGHUP) was refused; the previous configuration stays in force.",
        Version(1, ConfigRefusedV1))


# ---------------------------------------------------------------- ticks


@dataclass(frozen=True, kw_only=True)
class TickStartedV1(Payload):
    observation: JsonObject


def _r_tick_started_v1(e: Event, p: TickStartedV1) -> Message:
    """``[tick N · time] observation`` then balance, fleet, demand, instances, changes, alerts, errors."""
    return user(render_observation(e.tick, e.ts, p.observation))


@dataclass(frozen=True, kw_only=True)
class TickCompletedV1(Payload):
    steps: int
    usage: JsonObject | None = None
    actions: JsonArray | None = None
    duration_ms: float | None = None


@dataclass(frozen=True, kw_only=True)
class TickFailedV1(Payload):
    reason: str
    error_kind: str | None = None
    steps: int | None = None


def _r_tick_failed_v1(e: Event, p: TickFailedV1) -> Message:
    """``[system · tick N failed] reason``."""
    return user(f"[system · tick {e.tick} failed] {p.reason}")


def _r_tick_started_v2(e: Event, p: TickStartedV1) -> Message:
    """As v1, but every value from vast.ai, the demand source or an alert title is written ``inline``: one
    line, brackets and control characters escaped, so none can spell a source tag or start a line."""
    return user(render_observation(e.tick, e.ts, p.observation, inline))


_define("tick.started", "A tick began; its observation of fleet, balance and demand.",
        Version(1, TickStartedV1, _r_tick_started_v1),
        Version(2, TickStartedV1, _r_tick_started_v2, upcast=_same_shape))
_define("tick.completed", "A tick ended normally.", Version(1, TickCompletedV1))
def _r_tick_failed_v2(e: Event, p: TickFailedV1) -> Message:
    """``[system · tick N failed] reason``, the reason (which quotes vast.ai and model errors) ``inline``."""
    return user(f"[system · tick {e.tick} failed] {inline(p.reason)}")


_define("tick.failed", "A tick ended with an error; the schedule continues.",
        Version(1, TickFailedV1, _r_tick_failed_v1),
        Version(2, TickFailedV1, _r_tick_failed_v2, upcast=_same_shape))


# ---------------------------------------------------------------- operator feedback


@dataclass(frozen=True, kw_only=True)
class OperatorNoteV1(Payload):
    text: str
    by: str
    pin: bool | None = None


def _r_note_v1(e: Event, p: OperatorNoteV1) -> Message:
    """``[operator note · by] text``; pinned: ``[operator directive #seq · by] text``."""
    if p.pin:
        return user(f"[operator directive #{e.seq} · {p.by}] {p.text}")
    return user(f"[operator note · {p.by}] {p.text}")


@dataclass(frozen=True, kw_only=True)
class DirectiveUnpinnedV1(Payload):
    directive_id: int
    by: str


def _r_unpinned_v1(e: Event, p: DirectiveUnpinnedV1) -> Message:
    """``[operator · by] directive #N withdrawn``."""
    return user(f"[operator · {p.by}] directive #{p.directive_id} withdrawn")


_define("operator.note", "An operator note; pin=true makes it a standing directive.",
        Version(1, OperatorNoteV1, _r_note_v1))
_define("directive.unpinned", "An operator withdrew a pinned directive.",
        Version(1, DirectiveUnpinnedV1, _r_unpinned_v1))


# ---------------------------------------------------------------- alerts


@dataclass(frozen=True, kw_only=True)
class AlertRaisedV1(Payload):
    alert_id: int
    severity: str
    title: str
    dedup_key: str
    raised_by: str
    detail: str | None = None


def _r_alert_raised_v1(e: Event, p: AlertRaisedV1) -> Message | None:
    """``[alert #N raised · system] severity: title — detail``; nothing when the model raised it (its own
    tool call and result already say so)."""
    if p.raised_by == "model":
        return None
    detail = f" — {p.detail}" if p.detail else ""
    return user(f"[alert #{p.alert_id} raised · system] {p.severity}: {p.title}{detail}")


@dataclass(frozen=True, kw_only=True)
class AlertRepeatedV1(Payload):
    alert_id: int
    count: int


@dataclass(frozen=True, kw_only=True)
class AlertAckedV1(Payload):
    alert_id: int
    by: str
    title: str
    note: str | None = None


def _r_alert_acked_v1(e: Event, p: AlertAckedV1) -> Message:
    """``[alert #N acked · by] title — note: note``."""
    note = f" — note: {p.note}" if p.note else ""
    return user(f"[alert #{p.alert_id} acked · {p.by}] {p.title}{note}")


@dataclass(frozen=True, kw_only=True)
class AlertResolvedV1(Payload):
    alert_id: int
    title: str
    reason: str | None = ""  # absent renders as nothing; an explicit null has always rendered as 'None'


def _r_alert_resolved_v1(e: Event, p: AlertResolvedV1) -> Message:
    """``[alert #N resolved · system] title — reason`` (the dash goes when there is no reason)."""
    return user(f"[alert #{p.alert_id} resolved · system] {p.title} — {p.reason}".rstrip(" —"))


def _r_alert_raised_v2(e: Event, p: AlertRaisedV1) -> Message | None:
    """As v1 with severity, title and detail written ``inline``."""
    if p.raised_by == "model":
        return None
    detail = f" — {inline(p.detail)}" if p.detail else ""
    return user(f"[alert #{p.alert_id} raised · system] {inline(p.severity)}: {inline(p.title)}{detail}")


_define("alert.raised", "An alert opened.", Version(1, AlertRaisedV1, _r_alert_raised_v1),
        Version(2, AlertRaisedV1, _r_alert_raised_v2, upcast=_same_shape))
_define("alert.repeated", "An open alert's condition was seen again (dedup: count, last seen).",
        Version(1, AlertRepeatedV1))
def _r_alert_acked_v2(e: Event, p: AlertAckedV1) -> Message:
    """As v1, the title (which the model may have written) ``inline``; the note is the operator's own text."""
    note = f" — note: {p.note}" if p.note else ""
    return user(f"[alert #{p.alert_id} acked · {p.by}] {inline(p.title)}{note}")


def _r_alert_resolved_v2(e: Event, p: AlertResolvedV1) -> Message:
    """As v1 with title and reason written ``inline``."""
    return user(f"[alert #{p.alert_id} resolved · system] {inline(p.title)} — {inline(p.reason)}".rstrip(" —"))


_define("alert.acked", "An operator acknowledged an alert.", Version(1, AlertAckedV1, _r_alert_acked_v1),
        Version(2, AlertAckedV1, _r_alert_acked_v2, upcast=_same_shape))
_define("alert.resolved", "An alert's condition cleared.", Version(1, AlertResolvedV1, _r_alert_resolved_v1),
        Version(2, AlertResolvedV1, _r_alert_resolved_v2, upcast=_same_shape))


# ---------------------------------------------------------------- knowledge files


@dataclass(frozen=True, kw_only=True)
class KnowledgeChangedV1(Payload):
    name: str
    change: str  # added | changed | removed
    hash: str | None
    size: int
    diff: str | None = None
    text: str | None = None
    prev_hash: str | None = None
    # Who changed it: the operator for ``knowledge edit``, "edited on disk" for a change the scan found.
    # Not rendered: the model's view of v1 is unchanged.
    by: str | None = None


def _knowledge(e: Event, p: KnowledgeChangedV1, name: str) -> Message:
    head = f"[knowledge edit · {name}] {p.change}"
    if p.change == "removed":
        return user(f"{head}: the file was deleted")
    diff = p.diff or ""
    if len(diff) > KNOWLEDGE_DIFF_CHARS:
        diff = diff[:KNOWLEDGE_DIFF_CHARS] + f"\n[... diff truncated; read_knowledge('{name}') has the full text]"
    if p.change == "added":
        text = p.text or ""
        if len(text) > KNOWLEDGE_DIFF_CHARS:
            text = text[:KNOWLEDGE_DIFF_CHARS] + f"\n[... truncated; read_knowledge('{name}') has the full text]"
        return user(f"{head}\n{fence(text, 'text')}")
    return user(f"{head}\n{fence(diff, 'diff')}")


def _r_knowledge_v1(e: Event, p: KnowledgeChangedV1) -> Message:
    """``[knowledge edit · name] change`` then the fenced full text (added) or diff (changed), each cut at
    KNOWLEDGE_DIFF_CHARS with a marker naming read_knowledge; removed: ``: the file was deleted``."""
    return _knowledge(e, p, p.name)


def _r_knowledge_v2(e: Event, p: KnowledgeChangedV1) -> Message:
    """As v1 with the file name written ``inline``. The text is the operator's own, fenced as before (the
    fence is longer than any backtick run in it, so the text cannot close it)."""
    return _knowledge(e, p, inline(p.name))


_define("knowledge.changed", "A knowledge file was added, changed or removed.",
        Version(1, KnowledgeChangedV1, _r_knowledge_v1),
        Version(2, KnowledgeChangedV1, _r_knowledge_v2, upcast=_same_shape))


# ---------------------------------------------------------------- the model


@dataclass(frozen=True, kw_only=True)
class ModelRequestV1(Payload):
    request_hash: str
    manifest: JsonObject


@dataclass(frozen=True, kw_only=True)
class ModelResponseV1(Payload):
    text: str
    tool_calls: JsonArray  # of {"id", "name", "arguments"}
    usage: JsonObject | None = None
    latency_ms: float | None = None
    finish_reason: str | None = None
    model: str | None = None
    provider: str | None = None
    request_seq: int | None = None


def _r_response_v1(e: Event, p: ModelResponseV1) -> Message:
    """The assistant message: text (None when there are tool calls and no text, else "") and tool calls."""
    msg: Message = {"role": "assistant", "content": p.text or None}
    if p.tool_calls:
        msg["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in p.tool_calls
        ]
    elif msg["content"] is None:
        msg["content"] = ""
    return msg


def _json_object_or_empty(arguments: str) -> str:
    """``arguments`` when it is a JSON object, else ``{}``: what the model sent stays in the event, but the
    history sent back always parses (vLLM and llama.cpp's server refuse a history whose arguments do not)."""
    try:
        parsed = json.loads(arguments)
    except (ValueError, TypeError):
        return "{}"
    return arguments if isinstance(parsed, dict) else "{}"


def _r_response_v2(e: Event, p: ModelResponseV1) -> Message:
    """As v1, but a tool call's arguments that are not a JSON object render as ``{}`` (the call's tool result
    says why it did not run); arguments that are a JSON object render byte for byte as the model sent them."""
    msg: Message = {"role": "assistant", "content": p.text or None}
    if p.tool_calls:
        msg["tool_calls"] = [
            {"id": c["id"], "type": "function",
             "function": {"name": c["name"], "arguments": _json_object_or_empty(c["arguments"])}}
            for c in p.tool_calls
        ]
    elif msg["content"] is None:
        msg["content"] = ""
    return msg


@dataclass(frozen=True, kw_only=True)
class ModelFailedV1(Payload):
    error_kind: str
    message: str
    request_seq: int | None = None


_define("model.request", "A request about to be sent to the model: its manifest and hash.",
        Version(1, ModelRequestV1))
_define("model.response", "The model's answer: text, tool calls, usage.",
        Version(1, ModelResponseV1, _r_response_v1),
        Version(2, ModelResponseV1, _r_response_v2, upcast=_same_shape))
_define("model.failed", "A model call failed (classified).", Version(1, ModelFailedV1))


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
        Version(2, ToolResultV1, _r_tool_result_v2, upcast=_same_shape))
_define("policy.blocked", "A tool call refused by policy.", Version(1, PolicyBlockedV1))


# ---------------------------------------------------------------- memory and context


@dataclass(frozen=True, kw_only=True)
class MemoryWrittenV1(Payload):
    key: str
    text: str


@dataclass(frozen=True, kw_only=True)
class MemoryDeletedV1(Payload):
    key: str


@dataclass(frozen=True, kw_only=True)
class ContextCompactedV1(Payload):
    summary: str
    covered_to: int
    method: str  # llm | fallback
    covered_from: int | None = None
    first_kept_seq: int | None = None
    tokens_before: int | None = None
    tokens_after: int | None = None
    model: str | None = None
    prompt_hash: str | None = None
    pinned: JsonObject | None = None
    attempts: JsonArray | None = None


@dataclass(frozen=True, kw_only=True)
class ContextCompactedV3(ContextCompactedV1):
    masked_to: int | None = None   # tool outputs with seq <= this render as one-line stubs in the thread
    facts: JsonObject | None = None  # hosts and GPU prices from the covered events (agent.context.facts)
    summarised: bool | None = None  # False: a masking-only compaction (covered_to unchanged, no summary call)


@dataclass(frozen=True, kw_only=True)
class ContextCalibratedV1(Payload):
    ratio: float


_define("memory.written", "The agent remembered a fact.", Version(1, MemoryWrittenV1))
_define("memory.deleted", "The agent forgot a fact.", Version(1, MemoryDeletedV1))
_define("context.compacted", "The oldest thread span was summarised (nothing deleted). From v2 the pinned "
        "block and the summary it carries render with the agent's memory labelled as the agent's and every "
        "string the model wrote escaped (agent.context.pinned). From v3 knowledge files are shown most "
        "recently changed first, and old tool outputs up to masked_to render as one-line stubs.",
        Version(1, ContextCompactedV1), Version(2, ContextCompactedV1, upcast=_same_shape),
        Version(3, ContextCompactedV3, upcast=_same_shape))
@dataclass(frozen=True, kw_only=True)
class InputRecordedV1(Payload):
    name: str       # system.md | summarize.md | policy | tools
    sha256: str     # the hash request manifests name it by
    content: object  # the prompt's text, the policy object or the list of tool schemas


_define("input.recorded", "A model-visible input that is not an event (a prompt file, the policy, the tool "
        "schemas), logged in full the first time its hash appears; replay reads it back by that hash.",
        Version(1, InputRecordedV1))
@dataclass(frozen=True, kw_only=True)
class SummaryRequestV1(Payload):
    request_hash: str
    manifest: JsonObject


@dataclass(frozen=True, kw_only=True)
class SummaryResponseV1(Payload):
    request_seq: int
    text: str | None = None
    error: str | None = None


_define("summary.request", "A request about to be sent to the summariser: its hash and what re-plans it.",
        Version(1, SummaryRequestV1))
_define("summary.response", "The summariser's answer (or the error it failed with).", Version(1, SummaryResponseV1))
_define("context.calibrated", "The ratio of provider-reported to estimated prompt tokens changed.",
        Version(1, ContextCalibratedV1))


# ---------------------------------------------------------------- instances


@dataclass(frozen=True, kw_only=True)
class InstanceAdoptedV1(Payload):
    instance_id: int
    label: str
    idem_key: str | None = None
    gpu_name: str | None = None
    dph: float | None = None


@dataclass(frozen=True, kw_only=True)
class InstanceGoneV1(Payload):
    instance_id: int
    last_status: str | None = None


_define("instance.adopted", "An instance carrying one of our idempotency keys was found and recorded as ours.",
        Version(1, InstanceAdoptedV1))
_define("instance.gone", "An instance we owned is no longer listed by vast.ai.", Version(1, InstanceGoneV1))


@dataclass(frozen=True, kw_only=True)
class RentSettledV1(Payload):
    call_id: str
    label: str
    created: bool
    reason: str
    idem_key: str | None = None
    instance_id: int | None = None


def _r_rent_settled_v1(e: Event, p: RentSettledV1) -> Message:
    """``[system · rent settled] call ID (label L): created as instance N | not created — reason``."""
    what = f"created as instance {p.instance_id}" if p.created else "not created"
    return user(f"[system · rent settled] call {p.call_id} (label {p.label}): {what} — {p.reason}")


_define("rent.settled", "A rent whose outcome was unknown (pending) was settled by looking.",
        Version(1, RentSettledV1, _r_rent_settled_v1))


def _load_kind_modules() -> None:
    """The other modules that define kinds in VOCABULARY (``agent.events.KIND_MODULES``): whoever loads
    this module, from the package or directly, gets the whole vocabulary."""
    import importlib

    from agent.events import KIND_MODULES

    for name in KIND_MODULES:
        importlib.import_module(f"agent.events.{name}")


_load_kind_modules()
