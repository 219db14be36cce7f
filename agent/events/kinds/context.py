"""Kinds of the context's memory management: the agent's memory, compactions, recorded inputs, the
summariser's requests, the calibration, and the memory-pressure warning."""

from __future__ import annotations

from dataclasses import dataclass

from agent.events.event import Event, JsonArray, JsonObject, Message
from agent.events.kinds.base import VOCABULARY, same_shape
from agent.events.payload import Payload
from agent.events.rendering import (
    user,
)
from agent.events.vocabulary import Version

_define = VOCABULARY.define


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
        "recently changed first, and old tool outputs up to masked_to render as one-line stubs. From v4 the pinned "
        "block restates the steering in force (overrides, pause, host and machine exclusions). From v5 it carries "
        "the operator's notes, acks and withdrawals of the folded span verbatim until they expire or are superseded.",
        Version(1, ContextCompactedV1), Version(2, ContextCompactedV1, upcast=same_shape),
        Version(3, ContextCompactedV3, upcast=same_shape), Version(4, ContextCompactedV3, upcast=same_shape),
        Version(5, ContextCompactedV3, upcast=same_shape))
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


@dataclass(frozen=True, kw_only=True)
class SummaryResponseV2(SummaryResponseV1):
    # What the server reported the call used, shaped like model.response's: prompt_tokens, completion_tokens,
    # cached_tokens (its prompt_tokens_details.cached_tokens); absent on a failed call.
    usage: JsonObject | None = None


_define("summary.request", "A request about to be sent to the summariser: its hash and what re-plans it. From v2 "
        "the request names the overrides and exclusions in force and the check holds the summary to the log's "
        "facts (agent.context.compaction.SUMMARY_VERSION); a v1 request re-plans as it was. From v3 it also names "
        "the operator inputs the summary cited before, which the check holds it to.",
        Version(1, SummaryRequestV1), Version(2, SummaryRequestV1, upcast=same_shape),
        Version(3, SummaryRequestV1, upcast=same_shape))
_define("summary.response", "The summariser's answer (or the error it failed with). From v2 an answer carries "
        "the usage the server reported for the call, so the model's cost counts the summariser's calls.",
        Version(1, SummaryResponseV1), Version(2, SummaryResponseV2, upcast=same_shape))
_define("context.calibrated", "The ratio of provider-reported to estimated prompt tokens changed.",
        Version(1, ContextCalibratedV1))



# ---------------------------------------------------------------- memory pressure


@dataclass(frozen=True, kw_only=True)
class ContextPressureV1(Payload):
    ticks: int            # how many of the oldest ticks the coming compaction will summarise
    covered_to: int       # the last event it will fold into the summary
    tokens: int           # the request's calibrated size when the warning was given


def _r_context_pressure_v1(e: Event, p: ContextPressureV1) -> Message:
    """``[memory pressure · system]`` and what to do about it; every value is a number."""
    ticks = f"{p.ticks} tick" + ("" if p.ticks == 1 else "s")
    return user(f"[memory pressure · system] The next compaction will summarise the oldest {ticks} "
                f"(events up to #{p.covered_to}); after it their details are no longer in this conversation. "
                "Save anything you will need later with `remember` now (one step), then carry on.")


VOCABULARY.define("context.pressure", "The request passed high water: before compacting, the model is told which "
                  "ticks will be summarised and gets one step to save what it needs with remember.",
                  Version(1, ContextPressureV1, _r_context_pressure_v1))
