"""Operator notes and pinned directives: ``fleet-agent say [--pin]``, ``unpin``, ``directives``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent.errors import FleetAgentError, UsageError

if TYPE_CHECKING:
    from agent.events import Event
    from agent.runtime.app import App
    from agent.store.log import EventLog

MAX_NOTE_CHARS = 4000
MAX_NAME_CHARS = 64

def utf8_text(what: str, text: str) -> str:
    """``text`` unchanged if it is valid Unicode; a UsageError naming ``what`` otherwise.

    Command-line arguments that are not UTF-8 reach Python as lone surrogates, which the log
    cannot store (and no model could read).
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        bad = text[e.start]
        byte = f"byte 0x{ord(bad) - 0xDC00:02x}" if 0xDC80 <= ord(bad) <= 0xDCFF else f"U+{ord(bad):04X}"
        raise UsageError(f"{what} is not valid UTF-8 text ({byte} at character {e.start}); "
                         "write it as UTF-8 (check your terminal's or file's encoding)") from None
    return text


def decode_note(data: bytes) -> str:
    """Note text read from a file or stdin: strict UTF-8, or a UsageError saying where it breaks."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"the note is not valid UTF-8 text (bad byte 0x{data[e.start]:02x} at offset {e.start}); "
                         "save it as UTF-8") from None


def operator_name(by: str) -> str:
    import unicodedata  # its character database loads for the commands that name an operator

    by = utf8_text("--by", (by or "").strip())
    if not by:
        raise UsageError("say who you are: --by NAME must not be empty")
    if len(by) > MAX_NAME_CHARS or any(c in "[]" or unicodedata.category(c)[0] in "CZ" and c != " " for c in by):
        raise UsageError(f"--by {by!r}: a name is up to {MAX_NAME_CHARS} characters without brackets, "
                         "line breaks or control characters (it appears in the agent's '[operator note · NAME]' tags)")
    return by


def say(log: EventLog, text: str, by: str, pin: bool = False) -> Event:
    """Append an operator note (``pin``: a standing directive, id = its seq)."""
    text = utf8_text("the note", (text or "").strip())
    if not text:
        raise UsageError("the note is empty; say what the agent should know")
    if len(text) > MAX_NOTE_CHARS:
        raise UsageError(f"the note is {len(text)} characters; the limit is {MAX_NOTE_CHARS} "
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


def directives(log: EventLog | App) -> list[dict[str, Any]]:
    """The active directives, oldest first."""
    return [{"id": d.id, "text": d.text, "by": d.by, "ts": d.ts} for d in log.store.active_directives()]
