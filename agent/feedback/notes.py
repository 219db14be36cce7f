"""Operator notes and pinned directives: ``fleet-agent say [--pin]``, ``unpin``, ``directives``."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from agent.errors import FleetAgentError, UsageError

if TYPE_CHECKING:
    from agent.events import Event
    from agent.runtime.app import App
    from agent.store.log import EventLog

MAX_NOTE_CHARS = 4000
# An unpinned note binds the rules provider this long after it was said, at most (a shorter limit of its own
# wins; agent/fleet/constraints.py's note_words reads it).
NOTE_BINDS_HOURS = 24.0
MAX_NAME_CHARS = 64

# C0 and C1 controls and DEL, but tab, newline and a carriage return before a newline.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x0c\x0e-\x1f\x7f-\x9f]|\r(?!\n)")
# Control characters by name, for the message that refuses one.
_CONTROL_NAMES = {0x00: "NUL", 0x07: "BEL", 0x08: "backspace", 0x0B: "vertical tab", 0x0C: "form feed",
                  0x0D: "carriage return", 0x1B: "ESC", 0x7F: "DEL"}


def utf8_text(what: str, text: str) -> str:
    """``text`` unchanged if it is valid Unicode without control characters; a UsageError naming
    ``what`` otherwise. Every piece of operator text (notes, directives, ack notes, reasons) passes here.

    Command-line arguments that are not UTF-8 reach Python as lone surrogates, which the log
    cannot store (and no model could read). Control characters other than tab and line breaks are
    never meant: NUL is refused by PostgreSQL's text columns, ESC and the C1 controls drive terminals.
    A carriage return is kept only before a newline (a browser's textarea sends CRLF line breaks).
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        bad = text[e.start]
        byte = f"byte 0x{ord(bad) - 0xDC00:02x}" if 0xDC80 <= ord(bad) <= 0xDCFF else f"U+{ord(bad):04X}"
        raise UsageError(f"{what} is not valid UTF-8 text ({byte} at character {e.start}); "
                         "write it as UTF-8 (check your terminal's or file's encoding)") from None
    m = _CONTROL.search(text)
    if m is not None:
        o = ord(m.group())
        raise UsageError(f"{what} holds a control character (U+{o:04X} {_CONTROL_NAMES.get(o, 'control')} at "
                         f"character {m.start()}); remove it: only tabs and line breaks are allowed")
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
