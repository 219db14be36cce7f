"""Operator notes and pinned directives: ``fleet-agent say [--pin]``, ``unpin``, ``directives``."""

from __future__ import annotations

from typing import Any

from agent.errors import FleetAgentError
from agent.events import Event
from agent.store.log import EventLog

MAX_NOTE_CHARS = 4000

def operator_name(by: str) -> str:
    by = (by or "").strip()
    if not by:
        raise FleetAgentError("say who you are: --by NAME must not be empty")
    return by


def say(log: EventLog, text: str, by: str, pin: bool = False) -> Event:
    """Append an operator note (``pin``: a standing directive, id = its seq)."""
    text = (text or "").strip()
    if not text:
        raise FleetAgentError("the note is empty; say what the agent should know")
    if len(text) > MAX_NOTE_CHARS:
        raise FleetAgentError(f"the note is {len(text)} characters; the limit is {MAX_NOTE_CHARS} "
                              "(put long material in a knowledge file)")
    payload: dict[str, Any] = {"text": text, "by": operator_name(by)}
    if pin:
        payload["pin"] = True
    return log.append("operator.note", payload, "operator")


def unpin(log: EventLog, directive_id: int, by: str) -> Event:
    """Withdraw active directive ``directive_id``; refuses (writing nothing) otherwise."""
    by = operator_name(by)
    with log.transaction() as tx:
        d = tx.store.directive(directive_id)
        if d is None:
            raise FleetAgentError(f"no directive #{directive_id}; 'fleet-agent directives' lists the active ones")
        if not d.active:
            raise FleetAgentError(f"directive #{directive_id} was already withdrawn")
        return tx.append("directive.unpinned", {"directive_id": directive_id, "by": by}, "operator")


def directives(log: EventLog) -> list[dict[str, Any]]:
    """The active directives, oldest first."""
    return [{"id": d.id, "text": d.text, "by": d.by, "ts": d.ts} for d in log.store.active_directives()]
