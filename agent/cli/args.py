"""Argument types for the CLI: numbers are checked where they are parsed, so a bad one is one usage
line (exit 2), never an overflow deep inside SQLite or a server."""

from __future__ import annotations

import argparse
import math
from datetime import UTC, datetime

from agent.errors import UsageError
from agent.times import TIME_FORMS, parse_duration, parse_operator_time, utc_ts

SQLITE_MAX_INT = 2**63 - 1


def _invalid(message: str) -> Exception:
    """argparse's ``ArgumentTypeError``: what a type function raises for argparse to report."""
    return argparse.ArgumentTypeError(message)


def _int(v: str, what: str) -> int:
    try:
        n = int(v)
    except ValueError:
        raise _invalid(f"{v!r} is not {what}") from None
    if n > SQLITE_MAX_INT:
        raise _invalid(f"{v!r} is too large for {what}")
    return n


def number(v: str) -> int:
    """A whole number >= 1 (an alert, directive or event number; a limit)."""
    n = _int(v, "a whole number of 1 or more")
    if n < 1:
        raise _invalid(f"{v!r}: use a whole number of 1 or more")
    return n


def count(v: str) -> int:
    """A whole number >= 0 (a seq, a tick, a seed)."""
    n = _int(v, "a whole number of 0 or more")
    if n < 0:
        raise _invalid(f"{v!r}: use a whole number of 0 or more")
    return n


def port(v: str) -> int:
    """A TCP port, 1-65535."""
    n = _int(v, "a port number (1-65535)")
    if not 1 <= n <= 65535:
        raise _invalid(f"{v!r}: a port is between 1 and 65535")
    return n


def positive(v: str) -> float:
    """A finite number > 0 (a speed, a number of seconds)."""
    try:
        x = float(v)
    except ValueError:
        raise _invalid(f"{v!r} is not a number") from None
    if not math.isfinite(x) or x <= 0:
        raise _invalid(f"{v!r}: use a finite number greater than 0")
    return x


def check_utf8(ns: argparse.Namespace) -> None:
    """Refuse any argument that is not valid UTF-8 (it reaches Python as lone surrogates, which no log,
    database or terminal can hold), and a ``--reason`` holding a control character, naming the argument."""
    for name, value in vars(ns).items():
        for v in value if isinstance(value, list) else [value]:
            if not isinstance(v, str):
                continue
            try:
                v.encode("utf-8")
            except UnicodeEncodeError as e:
                bad = ord(v[e.start])
                byte = f"byte 0x{bad - 0xDC00:02x}" if 0xDC80 <= bad <= 0xDCFF else f"U+{bad:04X}"
                flag = name if name in ("text", "query", "name", "dir") else "--" + name.replace("_", "-")
                raise UsageError(f"{flag}: not valid UTF-8 ({byte} at character {e.start}); write it as UTF-8 "
                                 "(check your terminal's or file's encoding)") from None
            if name == "reason":  # every steering command's; notes and ack notes are checked where they are logged
                from agent.feedback.notes import utf8_text

                utf8_text("--reason", v)


# ------------------------------------------------------------------ times
# The grammar lives in agent.times; these adapt it to the flags (a seq or a time, an argparse type).


def parse_when(text: str, now: datetime | None = None) -> str:
    """An operator's time (``agent.times.parse_operator_time``, relative forms counted from ``now``) ->
    a log timestamp. Anything else is a ``UsageError`` naming the forms."""
    return utc_ts(parse_operator_time(text, now or datetime.now(UTC)))


def seq_or_when(text: str, flag: str, now: datetime | None = None) -> tuple[int, str | None]:
    """A ``--since``-style value: a seq number (0 or more) -> (seq, None), or a time -> (0, ts)."""
    v = text.strip()
    if v.lstrip("-").isdigit():
        n = int(v)
        if n < 0:
            raise UsageError(f"{flag} {text!r}: a seq is 0 or more; use a seq number or {TIME_FORMS}")
        if n > SQLITE_MAX_INT:
            raise UsageError(f"{flag} {text!r} is too large for a seq number")
        return n, None
    try:
        return 0, parse_when(v, now)
    except UsageError:
        raise UsageError(f"{flag} {text!r} is neither a seq number nor a time; use a seq or {TIME_FORMS}") from None


def span(text: str) -> float:
    """A duration for ``--for`` / ``--older-than`` (``agent.times.parse_duration``: 90s, 10m, 2h, 3d, 1w)
    -> seconds; argparse type."""
    try:
        return parse_duration(text).total_seconds()
    except UsageError as e:
        raise _invalid(str(e)) from None


def non_negative(v: str) -> float:
    """A finite number >= 0 (seconds; 0 turns a delay off)."""
    try:
        x = float(v)
    except ValueError:
        raise _invalid(f"{v!r} is not a number") from None
    if not math.isfinite(x) or x < 0:
        raise _invalid(f"{v!r}: use a finite number of 0 or more")
    return x


def fraction(v: str) -> float:
    """A probability, 0 to 1."""
    x = non_negative(v)
    if x > 1:
        raise _invalid(f"{v!r}: use a probability between 0 and 1")
    return x
