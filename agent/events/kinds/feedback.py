"""Kinds of operator feedback: notes, directives and knowledge file changes."""

from __future__ import annotations

from dataclasses import dataclass

from agent.events.event import Event, Message
from agent.events.kinds.base import VOCABULARY, same_shape
from agent.events.payload import Payload
from agent.events.rendering import (
    KNOWLEDGE_DIFF_CHARS,
    fence,
    inline,
    user,
)
from agent.events.vocabulary import Version

_define = VOCABULARY.define


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
        Version(2, KnowledgeChangedV1, _r_knowledge_v2, upcast=same_shape))
