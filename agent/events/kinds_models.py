"""Kinds about how the model behaves as a client: retries, tool calls written as text, the server's
context window, and a step the budget refused."""

from __future__ import annotations

from agent.events.event import Event, JsonArray, Message
from agent.events.kinds import VOCABULARY
from agent.events.payload import Payload
from agent.events.rendering import inline, user
from agent.events.vocabulary import Version
from agent.record import record as dataclass  # a dataclass, defined without importing dataclasses

_define = VOCABULARY.define


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
_define("model.text_tool_calls", "The model wrote tool calls as text; it is told to use real tool calls.",
        Version(1, TextToolCallsV1, _r_text_tool_calls_v1))
_define("model.window", "The model server's context window is smaller than the budget: the budget in force "
        "is lowered to fit it.", Version(1, ModelWindowV1))
_define("context.step_refused", "The next model request would have passed the budget: the tick ended there.",
        Version(1, StepRefusedV1, _r_step_refused_v1))
