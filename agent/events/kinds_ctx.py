"""Kinds of the context's memory management: the memory-pressure warning before a compaction."""

from __future__ import annotations

from agent.events.event import Event, Message
from agent.events.kinds import VOCABULARY
from agent.events.payload import Payload
from agent.events.rendering import user
from agent.events.vocabulary import Version
from agent.record import record as dataclass  # a dataclass, defined without importing dataclasses


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
