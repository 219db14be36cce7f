"""Kinds of the model as a client: requests, responses, failures, retries, tool calls written as text,
the server's context window, and a step the budget refused.

``model.request`` v2. A v1 manifest carried, at every model step, what stays the same for hundreds of
requests: the model's name, the prompt files' hashes, the policy's, the tool schemas' and the model
parameters' hashes, and the fourteen budget settings. v2 logs those once, as an ``input.recorded``
event named ``request`` whose content is that bundle and whose ``sha256`` is the hash of its canonical
JSON (logged the first time the hash appears, like the prompt texts it names); the manifest keeps what
changes from request to request and names the bundle by hash (``inputs``)::

    {"request_hash": "...", "manifest": {"inputs": "<sha256 of the bundle>", "covered_to": 120,
     "compaction_seq": 121, "thread_to": 188, "thread_events": 41, "calibration": 1.09,
     "calibration_seq": 78, "sections": {...}, "estimated_tokens": 3217, "calibrated_tokens": 3712,
     "shrunk": false}}

The thread the request holds is the seq range ``covered_to + 1 .. thread_to`` (``thread_from`` is not
stored), and the request's hash is stored once, beside the manifest. ``join_manifest`` puts the full
v1-shaped manifest back together from a stored payload and the bundle; readers that need the settings
or the input hashes go through it (agent.context.inputs.manifest_of), readers of the range and the token
counts read the stored manifest as before. Neither version is model-visible; v1 events stay as written
and are read as they were. The full-text index holds a v2 request as its kind and hash (a v1 request's
text was its whole payload JSON: hashes and numbers nobody searches for).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from agent.events.canonical import canonical
from agent.events.event import Event, JsonArray, JsonObject, Message
from agent.events.kinds.base import VOCABULARY, same_shape
from agent.events.payload import Payload
from agent.events.rendering import (
    inline,
    user,
)
from agent.events.vocabulary import Version

_define = VOCABULARY.define


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


REQUEST_INPUT = "request"
"""The ``input.recorded`` name of a request's bundle."""

SHARED = ("model", "prompt_hashes", "policy_hash", "tools_hash", "params_hash", "settings")
"""The manifest fields that move to the bundle: the same for every request until a prompt file, the
policy, the tools, the model, its parameters or the budget settings change."""


def bundle_hash(bundle: dict[str, Any]) -> str:
    """sha256 of the bundle's canonical JSON: the hash the manifest names it by."""
    return hashlib.sha256(canonical(bundle).encode("utf-8")).hexdigest()


def split_manifest(manifest: dict[str, Any], request_hash: str | None = None) -> tuple[dict[str, Any], JsonObject]:
    """A full (v1-shaped) manifest as (its bundle, the v2 manifest naming the bundle by hash). ``thread_from``
    and the manifest's copy of ``request_hash`` are left out when ``join_manifest`` gives them back as
    they were (``covered_to + 1`` and the payload's hash)."""
    bundle = {k: manifest[k] for k in SHARED if k in manifest}
    compact: JsonObject = {k: v for k, v in manifest.items() if k not in SHARED}
    if "covered_to" in compact and compact.get("thread_from") == compact["covered_to"] + 1:
        del compact["thread_from"]
    if request_hash is not None and compact.get("request_hash") == request_hash:
        del compact["request_hash"]
    compact["inputs"] = bundle_hash(bundle)
    return bundle, compact


def join_manifest(payload: dict[str, Any], bundle: dict[str, Any]) -> dict[str, Any]:
    """The full manifest of a v2 payload, given the bundle its ``inputs`` names (``split_manifest``
    reversed; the ``inputs`` hash is kept)."""
    m = dict(payload["manifest"])
    full = {**bundle, **m}
    if "covered_to" in m and "thread_from" not in m:
        full["thread_from"] = int(m["covered_to"]) + 1
    full.setdefault("request_hash", payload["request_hash"])
    return full


def _request_v1_to_v2(p: JsonObject) -> JsonObject:
    """A v1 payload as v2 would have stored it (its bundle is not in a v1 log: read v1 events as they are)."""
    _, compact = split_manifest(dict(p["manifest"]), p.get("request_hash"))
    return {**p, "manifest": compact}


def _search_request_v2(e: Event, p: ModelRequestV1) -> str:
    """The kind and the request's hash: the manifest's numbers and hashes are no words to search for."""
    return f"model.request {p.request_hash}"


_define("model.request", "A request about to be sent to the model: its manifest and hash.",
        Version(1, ModelRequestV1),
        Version(2, ModelRequestV1, upcast=_request_v1_to_v2, search=_search_request_v2))
_define("model.response", "The model's answer: text, tool calls, usage.",
        Version(1, ModelResponseV1, _r_response_v1),
        Version(2, ModelResponseV1, _r_response_v2, upcast=same_shape))
_define("model.failed", "A model call failed (classified).", Version(1, ModelFailedV1))



# ---------------------------------------------------------------- retries, text tool calls, the window


@dataclass(frozen=True, kw_only=True)
class ModelRetryV1(Payload):
    attempt: int          # the attempt that failed (1 = the first send)
    error_kind: str
    message: str
    wait_s: float
    request_seq: int | None = None


@dataclass(frozen=True, kw_only=True)
class TextToolCallsV1(Payload):
    response_seq: int
    calls: JsonArray      # of {"name", "arguments", "shape"}, as written in the reply's text
    accepted: bool        # the one call ran as a real tool call (model.text_tool_calls: accept)


def _r_text_tool_calls_v1(e: Event, p: TextToolCallsV1) -> Message:
    """``[system · tool calls written as text]``: what was written, that it did (or did not) run, and to use
    real tool calls. Names come from the model's text, so they are written ``inline``."""
    names = ", ".join(inline(str(c.get("name") or "?")) for c in p.calls)
    n = len(p.calls)
    what = f"{n} tool call{'s' if n != 1 else ''} ({names})"
    if p.accepted:
        done = "it ran this once as a real call (its result is above)"
    else:
        done = "nothing ran"
    return user(f"[system · tool calls written as text] your reply wrote {what} in its text instead of "
                f"calling the tool; {done}. Call tools only through the tool-calling interface "
                "(tool_calls), never as text in the message.")


# Why a call written as text did not run (``why`` of a v2 call that did not run).
NOT_RUN_REJECT = "reject"    # model.text_tool_calls: reject
NOT_RUN_UNKNOWN = "unknown"  # no tool has that name
NOT_RUN_REPEAT = "repeat"    # the same call (name and arguments) already ran in this tick
NOT_RUN = "not_run"          # a v1 event's calls that did not run (v1 did not say why)


@dataclass(frozen=True, kw_only=True)
class TextToolCallsV2(Payload):
    response_seq: int
    calls: JsonArray      # of {"name", "arguments", "shape", "ran", "why"}: as written; ran as real calls or
    #                       not, and why not (NOT_RUN_*; null when it ran)
    accepted: bool        # any of them ran as a real tool call (model.text_tool_calls: accept)


@dataclass(frozen=True, kw_only=True)
class TextToolCallsV3(Payload):
    response_seq: int
    calls: JsonArray
    accepted: bool
    next_call: JsonObject | None  # {"name", "arguments"}: the call the tick needs next, named when a call did not
    #                               run as a repeat (the rent of the first offer the tick's search named, not rented)


def _text_calls_v1_to_v2(p: JsonObject) -> JsonObject:
    ran = bool(p["accepted"])
    return {**p, "calls": [{**c, "ran": ran, "why": None if ran else NOT_RUN} for c in p["calls"]]}


def _names(calls: list[Any]) -> str:
    return ", ".join(inline(str(c.get("name") or "?")) for c in calls)


def _text_calls_v2_to_v3(p: JsonObject) -> JsonObject:
    return {**p, "next_call": None}


def _r_text_tool_calls_v2(e: Event, p: TextToolCallsV2 | TextToolCallsV3) -> Message:
    """``[system · tool calls written as text]``: what was written and, per call, whether it ran and what to do
    next: a call that ran is not to be written again (the model goes on from its result); a call refused as
    text is to be made through the tool-calling interface; an unknown name or a repeat is said as such.
    Names come from the model's text, so they are written ``inline``."""
    n = len(p.calls)
    parts = [f"[system · tool calls written as text] your reply wrote {n} tool call{'s' if n != 1 else ''} "
             f"({_names(p.calls)}) in its text instead of calling the tool"]
    ran = [c for c in p.calls if c.get("ran")]
    if ran:
        one = len(ran) == 1
        it, its = ("it", "its result") if one else ("them", "their results")
        parts.append(f"{_names(ran)} {'ran' if one else 'each ran'} as a real call ({its} "
                     f"{'is' if one else 'are'} above): do not write {it} again; go on from {its} with the next "
                     "call this tick needs, or answer in one short sentence with no call when nothing is left to do")
    by = {why: [c for c in p.calls if not c.get("ran") and c.get("why") == why]
          for why in (NOT_RUN_UNKNOWN, NOT_RUN_REPEAT)}
    if by[NOT_RUN_UNKNOWN]:
        parts.append(f"{_names(by[NOT_RUN_UNKNOWN])} did not run: no tool has that name; use only the tools "
                     "you were given")
    if by[NOT_RUN_REPEAT]:
        nxt = getattr(p, "next_call", None)
        then = "" if not nxt else (f": the next call this tick needs is {inline(str(nxt.get('name')))} "
                                   f"{inline(json.dumps(nxt.get('arguments') or {}, sort_keys=True))}")
        parts.append(f"{_names(by[NOT_RUN_REPEAT])} did not run again: the same call already ran in this "
                     f"tick (its result is above); go on to the next step instead{then}")
    refused = [c for c in p.calls if not c.get("ran") and c.get("why") not in by]
    if refused:
        head = "nothing ran" if len(refused) == n else f"{_names(refused)} did not run"
        them = "it" if len(refused) == 1 else "them"
        parts.append(f"{head}: to run {them}, call {them} through the tool-calling interface (tool_calls), never as "
                     "text in the message")
    return user("; ".join(parts) + ".")


@dataclass(frozen=True, kw_only=True)
class ModelWindowV1(Payload):
    window: int           # tokens the server says it holds
    budget_tokens: int    # context.budget_tokens, for comparison
    effective_budget: int  # the budget in force from now on
    source: str           # where the window was read: the server's error, /v1/models, /props, /api/show


@dataclass(frozen=True, kw_only=True)
class StepRefusedV1(Payload):
    step: int
    tokens: int           # calibrated tokens the next request would have had
    limit: int            # the budget minus the output reserve


def _r_step_refused_v1(e: Event, p: StepRefusedV1) -> Message:
    """``[system · tick N ended early]``: the next request would not have fitted the budget."""
    return user(f"[system · tick {e.tick} ended early] step {p.step} would have sent {p.tokens:,} tokens, over "
                f"the limit of {p.limit:,}; nothing more ran in that tick. Keep replies short and ask for "
                "less output at once.")


_define("model.retry", "A model request failed and is sent again (fleet-agent's own retry).",
        Version(1, ModelRetryV1))
_define("model.text_tool_calls", "The model wrote tool calls as text; it is told whether they ran and what to do "
        "next.", Version(1, TextToolCallsV1, _r_text_tool_calls_v1),
        Version(2, TextToolCallsV2, _r_text_tool_calls_v2, upcast=_text_calls_v1_to_v2),
        Version(3, TextToolCallsV3, _r_text_tool_calls_v2, upcast=_text_calls_v2_to_v3))
@dataclass(frozen=True, kw_only=True)
class EmptyReplyV1(Payload):
    response_seq: int
    todo: str  # the ``to do:`` line of the tick's observation (agent/events/rendering.py), as the model read it


def _r_empty_reply_v1(e: Event, p: EmptyReplyV1) -> Message:
    """``[system · empty reply]``: the reply had no call and no text while the observation's ``to do:`` line asks
    for calls; it is quoted (``inline``) and the model asked to make them or say why not."""
    return user(f"[system · empty reply] your reply was empty: no tool call and no text. The observation says: "
                f"{inline(p.todo)}. Make those calls now, or say in one sentence why not.")


_define("model.empty_reply", "The model answered with nothing while the tick's observation asked for calls; it is "
        "asked once more.", Version(1, EmptyReplyV1, _r_empty_reply_v1))
_define("model.window", "The model server's context window is smaller than the budget: the budget in force "
        "is lowered to fit it.", Version(1, ModelWindowV1))
_define("context.step_refused", "The next model request would have passed the budget: the tick ended there.",
        Version(1, StepRefusedV1, _r_step_refused_v1))
