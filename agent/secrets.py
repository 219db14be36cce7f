"""Secrets: values that must never reach a log line, an event, an error or a repr.

A ``Secret`` prints as ``***``; the only way to the value is ``reveal()``. Every
secret resolved in this process is registered so the log redaction processor
can scrub it from anything, even text that was never meant to carry it.
"""

from __future__ import annotations

import threading

_known: set[str] = set()
_lock = threading.Lock()
REDACTED = "***"


class Secret:
    __slots__ = ("_value", "origin")

    def __init__(self, value: str, origin: str) -> None:
        self._value = value
        self.origin = origin  # where it came from, e.g. "$VAST_API_KEY"; never the value
        if len(value) >= 4:
            with _lock:
                _known.add(value)

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"Secret({REDACTED} from {self.origin})"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(("Secret", self.origin))


def known() -> frozenset[str]:
    with _lock:
        return frozenset(_known)


def scrub(text: str) -> str:
    """``text`` with every known secret replaced by ***."""
    for s in known():
        if s in text:
            text = text.replace(s, REDACTED)
    return text
