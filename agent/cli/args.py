"""Argument types for the CLI: numbers are checked where they are parsed, so a bad one is one usage
line (exit 2), never an overflow deep inside SQLite or a server."""

from __future__ import annotations

import argparse
import math
import re
from datetime import UTC, datetime, timedelta

from agent.errors import UsageError
from agent.store.log import utc_ts

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
    database or terminal can hold), naming the argument."""
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


# ------------------------------------------------------------------ times

_UNITS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_RELATIVE = r"^(\d+)\s*(s|sec|m|min|h|d|w)(?:\s+ago)?$"
_DAY_TIME = r"^(today|yesterday)(?:\s+(\d{1,2}):(\d{2}))?$"
TIME_FORMS = ("an ISO 8601 time (2026-11-29T10:05Z), 'now', a time ago (10m, 2h ago, 3d) "
              "or 'today 09:00' / 'yesterday 15:45' (UTC)")


def parse_when(text: str, now: datetime | None = None) -> str:
    """An operator's time -> a log timestamp (UTC, the log's fixed-width form).

    Accepts ISO 8601 (naive means UTC), ``now``, a span ago (``10m``, ``2h ago``, ``3d``) and
    ``today HH:MM`` / ``yesterday HH:MM`` in UTC. Anything else is a ``UsageError`` naming the forms."""
    from agent.context import parse_time  # the context builder: only for a command given a time

    now = now or datetime.now(UTC)
    t = " ".join(text.strip().lower().split())
    if t == "now":
        return utc_ts(now)
    m = re.match(_RELATIVE, t)
    if m:
        return utc_ts(now - timedelta(seconds=int(m.group(1)) * _UNITS[m.group(2)]))
    m = re.match(_DAY_TIME, t)
    if m:
        day = now.date() - timedelta(days=1 if m.group(1) == "yesterday" else 0)
        hh, mm = int(m.group(2) or 0), int(m.group(3) or 0)
        if hh > 23 or mm > 59:
            raise UsageError(f"{text!r}: {hh:02d}:{mm:02d} is not a time of day; use HH:MM from 00:00 to 23:59")
        return utc_ts(datetime(day.year, day.month, day.day, hh, mm, tzinfo=UTC))
    try:
        return parse_time(text)
    except UsageError:
        raise UsageError(f"{text!r} is not a time; use {TIME_FORMS}") from None


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
    """A duration for ``--for`` (90s, 10m, 2h, 3d, 1w) -> seconds; argparse type."""
    m = re.match(r"^(\d+)\s*(s|sec|m|min|h|d|w)$", text.strip().lower())
    if not m or int(m.group(1)) == 0:
        raise _invalid(f"{text!r} is not a duration; use a number and a unit, e.g. 90s, 10m, "
                                         "2h, 3d or 1w")
    return float(int(m.group(1)) * _UNITS[m.group(2)])
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
