"""Event kinds of constraints drawn from operators' words: proposed, accepted, rejected.

A proposal is what code extracted from a note, a directive or a knowledge edit; it binds nothing until an
operator accepts it. The model sees an accepted constraint as a tagged operator message (the overrides,
exclusions or pause that enforce it follow as their own events); proposals and rejections it does not see:
the operator's words themselves reached it as the note or edit.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.events.event import Event, JsonArray, Message
from agent.events.kinds.base import VOCABULARY
from agent.events.payload import Payload
from agent.events.rendering import inline, ts_minute, user
from agent.events.vocabulary import Version

_define = VOCABULARY.define


def _value(v: object) -> str:
    if isinstance(v, list):
        return ", ".join(inline(x) for x in v)
    if isinstance(v, float):
        return f"{v:g}"
    return inline(v)


@dataclass(frozen=True, kw_only=True)
class ConstraintProposedV1(Payload):
    constraint: str  # exclude_host | exclude_machine | allow_gpus | ban_gpus | max_* | min_reliability | pause
    value: object
    source: str  # note | directive | knowledge
    by: str
    text: str  # the operator's words it came from
    source_seq: int | None = None
    until: str | None = None


def _search_proposed_v1(e: Event, p: ConstraintProposedV1) -> str:
    return f"constraint proposed {p.constraint} {_value(p.value)} from {p.source}: {p.text}"


@dataclass(frozen=True, kw_only=True)
class ConstraintAcceptedV1(Payload):
    proposal_id: int
    by: str
    constraint: str
    value: object
    effect: str  # what enforcing it did, e.g. "host 67568 excluded", "allowed_gpus RTX 4090"
    until: str | None = None
    applied: JsonArray | None = None  # seqs of the events that enforce it


def _r_accepted_v1(e: Event, p: ConstraintAcceptedV1) -> Message:
    """``[constraint #N accepted · by] kind value until TIME UTC|until ended: enforced in code (effect)``."""
    end = f"until {ts_minute(p.until)}" if p.until else "until an operator ends it"
    return user(f"[constraint #{p.proposal_id} accepted · {inline(p.by)}] {inline(p.constraint)} {_value(p.value)} "
                f"{end}: enforced in code, calls that break it are refused ({inline(p.effect)})")


@dataclass(frozen=True, kw_only=True)
class ConstraintRejectedV1(Payload):
    proposal_id: int
    by: str
    reason: str | None = None


_define("constraint.proposed", "Code extracted an enforceable constraint from an operator's words; it binds "
        "once an operator accepts it.", Version(1, ConstraintProposedV1, None, search=_search_proposed_v1))
_define("constraint.accepted", "An operator accepted a proposed constraint: it is enforced in code from now on.",
        Version(1, ConstraintAcceptedV1, _r_accepted_v1))
_define("constraint.rejected", "An operator rejected a proposed constraint: the words stay advice.",
        Version(1, ConstraintRejectedV1))
