"""The log's timestamps as text: UTC, microseconds, fixed width (so they sort as text).

Apart from the event log (which re-exports ``utc_ts``) so that a command that only reads the read models
formats a time without loading the log's append and verify machinery."""

from __future__ import annotations

from datetime import UTC, datetime


def utc_ts(dt: datetime | None = None) -> str:
    """'2026-11-29T10:05:12.123456Z': UTC, microseconds, fixed width (sorts as text)."""
    global _TS_MEMO
    dt = dt or datetime.now(UTC)
    if dt.tzinfo is not UTC:
        dt = dt.astimezone(UTC)
    if not 1000 <= dt.year <= 9999:
        return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    second = dt.timestamp() // 1
    memo = _TS_MEMO
    if memo[0] != second:  # the text up to the second is formatted once a second
        memo = _TS_MEMO = (second, dt.isoformat(timespec="seconds")[:-6])  # drops "+00:00"
    return f"{memo[1]}.{dt.microsecond:06d}Z"


_TS_MEMO: tuple[float, str] = (-1.5, "")  # (a second since the epoch, its text): replaced whole, never edited
