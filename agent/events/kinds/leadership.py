"""Leadership: which daemon is the fleet's active one (agent.runtime.leader, agent.service.daemon).

``leader.acquired`` is appended by a daemon that took the fleet's lock, before its ``daemon.started`` and
its start-up reconcile; ``leader.lost`` is appended by the daemon that took the lock over from one that did
not stop cleanly (it was killed, cut off or suspended), naming it. A daemon that has lost the lock appends
nothing more, so it never writes its own ``leader.lost``. Neither is shown to the model.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.events.kinds.base import VOCABULARY
from agent.events.payload import Payload
from agent.events.vocabulary import Version

_define = VOCABULARY.define


@dataclass(frozen=True, kw_only=True)
class LeaderAcquiredV1(Payload):
    lock: str  # "file" (SQLite, one host) | "postgresql"
    holder: str  # "fleet-agent <agent_id> <host> <pid>"
    because: str  # "free", "its holder (pid 12) died", "... has not heartbeated for 31.0s"
    waited_s: float  # how long this daemon waited as a standby (0 when it started active)
    failover_seconds: float


@dataclass(frozen=True, kw_only=True)
class LeaderLostV1(Payload):
    holder: str  # the previous active, as its leader.acquired named it
    acquired_seq: int  # that leader.acquired event
    why: str


VOCABULARY.define("leader.acquired", "A daemon took the fleet's leadership lock and became the active one.",
                  Version(1, LeaderAcquiredV1))
VOCABULARY.define("leader.lost", "The previous active daemon lost the fleet's lock without stopping cleanly "
                  "(appended by the daemon that took over).", Version(1, LeaderLostV1))
