"""What the model has seen: the newest event that was part of a request it answered.

Compaction never cuts past that event, so operator feedback (an ack and its
note, a knowledge edit, a note, a directive, an unpin) always reaches the model
verbatim, in the thread, before any summary covers it.
"""

from __future__ import annotations

from collections.abc import Iterable

from agent.events import Event

OPERATOR_KINDS = ("alert.acked", "knowledge.changed", "operator.note", "directive.unpinned",
                  # steering: overrides, pause, host inclusion, manual destroys (agent.fleet.steering, agent.runtime.manual)
                  "policy.overridden", "policy.override_ended", "fleet.paused", "fleet.resumed", "host.included",
                  "operator.destroy", "operator.drain")


def seen_to(events: Iterable[Event], floor: int = 0) -> int:
    """The ``thread_to`` of the newest model request in ``events`` that got a ``model.response``
    (``floor`` when none did: nothing after it has been seen)."""
    thread_to: dict[int, int] = {}
    best = floor
    for e in events:
        if e.kind == "model.request":
            thread_to[e.seq] = int(e.payload["manifest"]["thread_to"])
        elif e.kind == "model.response":
            rs = e.payload.get("request_seq")
            if isinstance(rs, int) and rs in thread_to:
                best = max(best, thread_to[rs])
    return best


def is_operator_input(e: Event) -> bool:
    """An event the operator wrote that the model must see verbatim before it is summarised."""
    return e.kind in OPERATOR_KINDS
