"""The spend-rate series the overview charts: each tick's observed fleet $/h (``fleet_dph``), oldest first.

The spend figures (today, this month) are not estimated here: they come from ``agent.fleet.spend``, the one
estimator that ``spend``, ``status``, the overview and ``/metrics`` share.
"""

from __future__ import annotations

from datetime import UTC, datetime

from agent.store.queries import Store
from agent.times import parse_ts, utc_ts

Point = tuple[float, float]  # (unix time, fleet $/h)

LEAD_S = 3600.0  # how far before a window the rate in force at its start is looked for


def window_start(now: float, hours: float) -> float:
    return now - hours * 3600


def in_window(points: list[Point], start: float) -> list[Point]:
    """The points at or after ``start``, led by the one in force at ``start`` (drawn from ``start``)."""
    before = [p for p in points if p[0] < start][-1:]
    return before + [p for p in points if p[0] >= start]


def rate_series(store: Store, start: float) -> list[Point]:
    """Every observed (unix time, $/h) from the one in force at ``start`` (up to ``LEAD_S`` before) on."""
    since = utc_ts(datetime.fromtimestamp(start - LEAD_S, UTC))
    points = [(parse_ts(ts).timestamp(), dph) for _seq, ts, dph in store.fleet_rates(after_seq=0, since_ts=since)
              if dph is not None]
    return in_window(points, start)


def day_and_week(store: Store, now: float) -> tuple[list[Point], list[Point]]:
    """The series of the last 24 hours and of the last 7 days."""
    week = rate_series(store, window_start(now, 24 * 7))
    return in_window(week, window_start(now, 24)), week
