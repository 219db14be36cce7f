"""The log's timestamps as text: UTC, microseconds, fixed width (so they sort as text)."""

from __future__ import annotations

from datetime import UTC, datetime


def utc_ts(dt: datetime | None = None) -> str:
    """'2026-11-29T10:05:12.123456Z': UTC, microseconds, fixed width (sorts as text)."""
    dt = dt or datetime.now(UTC)
    if dt.tzinfo is not UTC:
        dt = dt.astimezone(UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
