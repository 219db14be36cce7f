"""The system's own destroy of an instance of ours that vast.ai shows stopped (agent.runtime.tick).

fleet-agent never stops an instance, so one of ours that shows ``stopped`` is a failure that still bills
storage: the tick destroys it through the tool pipeline whatever the model does. ``system.destroy`` (why)
is logged first, then the intent (``tool.called`` with its idempotency key), the call and the result, as
for an operator's destroy (``operator.destroy``).
"""

from __future__ import annotations

from agent.events.event import Event, Message
from agent.events.kinds import VOCABULARY
from agent.events.payload import Payload
from agent.events.rendering import inline, user
from agent.events.vocabulary import Version
from agent.record import record as dataclass  # a dataclass, defined without importing dataclasses


@dataclass(frozen=True, kw_only=True)
class SystemDestroyV1(Payload):
    instance_id: int
    status: str
    reason: str


def _r_system_destroy_v1(e: Event, p: SystemDestroyV1) -> Message:
    """``[system destroy] instance N (status) — reason``; the call's result follows."""
    return user(f"[system destroy] instance {p.instance_id} ({inline(p.status)}) — {inline(p.reason)}")


VOCABULARY.define("system.destroy", "The tick destroyed an instance of ours that vast.ai shows stopped (the tool "
                  "call and result follow).", Version(1, SystemDestroyV1, _r_system_destroy_v1))
