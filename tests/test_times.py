"""agent.times: the one grammar of durations, the one reader and writer of the log's timestamps and the one
reader of operators' times, with a fixed ``now``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from agent.errors import UsageError
from agent.times import parse_duration, parse_operator_time, parse_ts, utc_ts

NOW = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)


@pytest.mark.parametrize(("text", "seconds"), [
    ("30s", 30), ("10m", 600), ("1.5h", 5400), ("7d", 7 * 86400), ("1w", 7 * 86400), ("2w", 14 * 86400),
    ("250ms", 0.25), ("90 seconds", 90), ("2 hours", 7200), (" 3 D ", 3 * 86400), ("5 min", 300),
])
def test_durations(text, seconds):
    """Every unit from milliseconds to weeks, in short or long form (the config's 1w and pause's 30s alike)."""
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["10", "5x", "-5m", "", "m", "1h30m", "1,5h"])
def test_bad_durations_say_what_to_write(text):
    with pytest.raises(UsageError, match=r"is not a duration; write a number and a unit .* 30s, 10m"):
        parse_duration(text)


def test_zero_is_a_duration_only_where_allowed():
    with pytest.raises(UsageError, match="must be more than 0"):
        parse_duration("0s")
    assert parse_duration("0s", allow_zero=True) == timedelta(0)


def test_log_timestamps_round_trip():
    """utc_ts writes the log's fixed-width UTC form; parse_ts reads it (and any ISO 8601 time) back as UTC."""
    dt = datetime(2026, 11, 29, 10, 5, 12, 123456, tzinfo=UTC)
    assert utc_ts(dt) == "2026-11-29T10:05:12.123456Z"
    assert parse_ts("2026-11-29T10:05:12.123456Z") == dt
    assert utc_ts(dt.astimezone(timezone(timedelta(hours=2)))) == "2026-11-29T10:05:12.123456Z"
    assert parse_ts("2026-11-29T12:05:12.123456+02:00") == dt
    assert parse_ts("2026-11-29T10:05:12.123456") == dt  # naive is UTC
    assert parse_ts(utc_ts(dt)).tzinfo is UTC
    assert utc_ts(datetime(2026, 1, 2, tzinfo=UTC)) < utc_ts(datetime(2026, 1, 10, tzinfo=UTC))


@pytest.mark.parametrize(("text", "expected"), [
    ("now", "2026-12-01T03:00:00"),
    ("2026-11-29", "2026-11-29T00:00:00"),
    ("2026-11-29T10:05Z", "2026-11-29T10:05:00"),
    ("2026-11-29 10:05", "2026-11-29T10:05:00"),
    ("2026-11-29T12:05:00+02:00", "2026-11-29T10:05:00"),
    ("30m", "2026-12-01T02:30:00"),
    ("-2h", "2026-12-01T01:00:00"),
    ("2h ago", "2026-12-01T01:00:00"),
    ("1.5h ago", "2026-12-01T01:30:00"),
    ("3 days ago", "2026-11-28T03:00:00"),
    ("today", "2026-12-01T00:00:00"),
    ("yesterday", "2026-11-30T00:00:00"),
    ("today 14:00", "2026-12-01T14:00:00"),
    ("14:00", "2026-12-01T14:00:00"),
    ("3:45 PM", "2026-12-01T15:45:00"),
    ("3pm", "2026-12-01T15:00:00"),
    ("12:30 am", "2026-12-01T00:30:00"),
    ("3:45 PM yesterday", "2026-11-30T15:45:00"),
    ("yesterday 3:45pm", "2026-11-30T15:45:00"),
    ("Yesterday at 09:05", "2026-11-30T09:05:00"),
])
def test_operator_times(text, expected):
    """The forms operators write, in UTC, relative ones counted back from ``now``."""
    got = parse_operator_time(text, NOW)
    assert got.tzinfo is UTC and got == datetime.fromisoformat(expected).replace(tzinfo=UTC)


@pytest.mark.parametrize("text", ["tomorrow", "10", "2026", "Mon", "10 parsecs", "", "today yesterday", "3:45 XM"])
def test_what_is_not_a_time_names_the_forms(text):
    with pytest.raises(UsageError, match="is not a time; use an ISO 8601 time .* '3:45 PM yesterday'"):
        parse_operator_time(text, NOW)


@pytest.mark.parametrize(("text", "why"), [("yesterday 25:00", "from 00:00 to 23:59"), ("13 pm", "12-hour clock"),
                                           ("14:61", "from 00:00 to 23:59")])
def test_impossible_clock_times_say_why(text, why):
    with pytest.raises(UsageError, match=why):
        parse_operator_time(text, NOW)


@pytest.mark.parametrize("text", ["99999999d", "1" * 26 + "s", "5300w", "36501 days"])
def test_durations_beyond_a_century_are_refused_with_a_line_not_an_overflow(text):
    """A duration no date can hold (or no operator means) is a UsageError naming the limit."""
    with pytest.raises(UsageError, match="longer than 100 years"):
        parse_duration(text)
    with pytest.raises(UsageError, match="is not a time"):
        parse_operator_time(text + " ago", datetime(2026, 12, 5, tzinfo=UTC))
