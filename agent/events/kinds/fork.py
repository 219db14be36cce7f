"""Event kinds of forks and of the log as data: where a fork came from, and which answers an operator
overrode (excluded from ``log export --training``). Neither is model-visible: a fork's requests are the
origin's up to the fork point, byte for byte."""

from __future__ import annotations

from dataclasses import dataclass

from agent.events.event import JsonArray, JsonObject
from agent.events.kinds.base import VOCABULARY
from agent.events.payload import Payload
from agent.events.vocabulary import Version

_define = VOCABULARY.define


@dataclass(frozen=True, kw_only=True)
class ForkStartedV1(Payload):
    origin_fleet: str          # the origin's agent_id
    origin_db: str             # the origin database's path, opened read-only
    origin_seq: int            # the fork point: events 1..origin_seq are the origin's, copied row for row
    origin_hash: str           # the origin's hash at origin_seq (this log's hash there is the same)
    origin_head_seq: int       # the origin's head when the fork was made
    origin_head_hash: str
    at: str                    # what the operator asked for: "tick 12" or "2026-11-29T10:05:00Z"
    changes: JsonArray         # ["policy.max_instances=4", "prompts from /path"]
    model: str                 # the provider that decides in the fork
    ticks: int
    seeded: JsonObject         # what the simulator was seeded with: instances, offers, balance, time


@dataclass(frozen=True, kw_only=True)
class ResponseOverriddenV1(Payload):
    response_seq: int          # the model.response the operator overrode
    by: str
    note: str | None = None


VOCABULARY.define("fork.started", "This log is a fork: the origin's events up to origin_seq, then a re-run "
                  "with a change (policy, prompts or model) against a simulator seeded from the origin.",
                  Version(1, ForkStartedV1))
VOCABULARY.define("response.overridden", "An operator marked a model answer as overridden: it is left out of "
                  "training exports.", Version(1, ResponseOverriddenV1))
