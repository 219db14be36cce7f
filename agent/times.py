"""Times and durations: the log's timestamps, the durations operators and the config write, and the
times operators give commands (``context --at``, ``thread show --since``, ``pause --until``, fork, the
console's time travel).

Everything here is UTC, as the log is: a naive time is read as UTC, and ``today`` / ``yesterday`` /
``14:00`` are UTC days and clock times, not the machine's local ones.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from agent.errors import UsageError

# ------------------------------------------------------------------ the log's timestamps


def utc_ts(dt: datetime | None = None) -> str:
    """'2026-11-29T10:05:12.123456Z': UTC, microseconds, fixed width (sorts as text); now when not given."""
    dt = (dt or datetime.now(UTC)).astimezone(UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_ts(text: str) -> datetime:
    """A log timestamp ('2026-11-29T10:05:12.123456Z'; any ISO 8601 time, naive meaning UTC) -> an aware
    UTC datetime."""
    dt = datetime.fromisoformat(text)
    if dt.tzinfo is UTC:  # the log's own form ('...Z'): already what is asked for
        return dt
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


# ------------------------------------------------------------------ durations

_UNITS = {
    "ms": 0.001,
    "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400,
    "w": 7 * 86400, "wk": 7 * 86400, "week": 7 * 86400, "weeks": 7 * 86400,
}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]+)")
# Longer than any pause or silence an operator means, and short enough that now + it is still a date.
MAX_DURATION_S = 100 * 365 * 86400
DURATION_FORMS = "a number and a unit (ms, s, m, h, d or w), e.g. 30s, 10m, 1.5h, 7d, 2w"


def parse_duration(text: str, *, allow_zero: bool = False) -> timedelta:
    """'30s', '10m', '1.5h', '7d', '2w' (also 'ms' and the words: '90 seconds', '2 hours', '1 week') -> a
    timedelta. A unit is required: a bare number is no duration. Zero is refused unless ``allow_zero``.
    Anything else is a ``UsageError`` that says what to write."""
    m = _DURATION.fullmatch(text.strip().lower())
    if not m or m.group(2) not in _UNITS:
        raise UsageError(f"{text!r} is not a duration; write {DURATION_FORMS}")
    seconds = float(m.group(1)) * _UNITS[m.group(2)]
    if seconds == 0 and not allow_zero:
        raise UsageError(f"{text!r}: a duration here must be more than 0; write {DURATION_FORMS}")
    if seconds > MAX_DURATION_S:
        raise UsageError(f"{text[:40]!r} is longer than 100 years; write a shorter duration, e.g. 7d or 52w")
    return timedelta(seconds=seconds)


# ------------------------------------------------------------------ operators' times

TIME_FORMS = ("an ISO 8601 time (2026-11-29T10:05Z, 2026-11-29 12:05+02:00), 'now', a time ago (10m, -2h, "
              "2h ago, 3d), a clock time today (14:00, 3:45 PM) or 'today 09:00' / 'yesterday 15:45' / "
              "'3:45 PM yesterday' (UTC)")
_AGO = re.compile(r"-\s*(.+)|(.+?)(?:\s+ago)?")
_DAY = re.compile(r"(?:(today|yesterday)\s*(?:at\s+)?)?(.*?)(?:\s*(today|yesterday))?")
_CLOCK = re.compile(r"(\d{1,2})(?::(\d{2}))?(?::(\d{2}))?\s*(am|pm|a\.m\.|p\.m\.)?")


def parse_operator_time(text: str, now: datetime) -> datetime:
    """An operator's time -> an aware UTC datetime; relative forms count back from ``now``.

    Accepted (case and spacing do not matter):

    - ISO 8601 dates and times, with or without ``Z`` or an offset (``2026-11-29``, ``2026-11-29T10:05Z``,
      ``2026-11-29 12:05+02:00``); a time without an offset is UTC;
    - ``now``;
    - a time ago: a duration (``30m``, ``2h``, ``3d``, see ``parse_duration``) alone, after ``-`` or
      before ``ago`` (``-2h``, ``2h ago``);
    - ``today`` / ``yesterday`` (00:00 UTC), with a clock time before or after (``today 14:00``,
      ``yesterday 3:45pm``, ``3:45 PM yesterday``);
    - a clock time alone, today (UTC), as journalctl reads it: ``14:00``, ``3:45 PM``, ``3pm``.

    Everything is UTC, as the log and every earlier version of these commands are: ``today 14:00`` is
    14:00 UTC, not the machine's local time. The grammar is written out here rather than handed to
    dateutil's parser, which reads '10' as the 10th of the month and 'Mon' as next Monday. Anything
    else is a ``UsageError`` naming the forms."""
    written = " ".join(text.split())
    t = written.lower()
    now = now.astimezone(UTC)
    if t == "now":
        return now
    if t and (t[0].isdigit() or t[0] == "-"):
        ago = _ago(t)
        if ago is not None:
            return now - ago
        try:
            return parse_ts(written)
        except ValueError:
            pass
    day = _DAY.fullmatch(t)
    if day and t and not (day.group(1) and day.group(3)):
        word = day.group(1) or day.group(3)
        clock = day.group(2)
        if word or _CLOCK.fullmatch(clock):
            start = now.replace(hour=0, minute=0, second=0, microsecond=0)
            if word == "yesterday":
                start -= timedelta(days=1)
            return start + _clock(clock, text) if clock else start
    raise UsageError(f"{text!r} is not a time; use {TIME_FORMS}")


def _ago(t: str) -> timedelta | None:
    m = _AGO.fullmatch(t)
    span = (m.group(1) or m.group(2)) if m else None
    try:
        return parse_duration(span, allow_zero=True) if span else None
    except UsageError:
        return None


def _clock(clock: str, text: str) -> timedelta:
    """'14:00', '3:45 PM', '3pm', '09:05:30' -> the time since midnight."""
    m = _CLOCK.fullmatch(clock)
    if not m or (m.group(2) is None and m.group(4) is None):
        raise UsageError(f"{text!r} is not a time; use {TIME_FORMS}")
    hh, mm, ss, half = int(m.group(1)), int(m.group(2) or 0), int(m.group(3) or 0), m.group(4)
    if half and not 1 <= hh <= 12:
        raise UsageError(f"{text!r}: {hh} is not an hour on a 12-hour clock; use 1 to 12 with AM/PM")
    if hh > 23 or mm > 59 or ss > 59:
        raise UsageError(f"{text!r}: {hh:02d}:{mm:02d} is not a time of day; use HH:MM from 00:00 to 23:59")
    if half:
        hh = hh % 12 + (12 if half.startswith("p") else 0)
    return timedelta(hours=hh, minutes=mm, seconds=ss)


__all__ = ["DURATION_FORMS", "TIME_FORMS", "parse_duration", "parse_operator_time", "parse_ts", "utc_ts"]
