"""Spend today and this month, and the spend-rate series the overview charts, from the log alone.

Each tick's observation records what our fleet costs per hour (``fleet_dph``). Between two observations
the fleet is taken to have cost the earlier one's rate; the newest rate runs until ``now``, capped at
``MAX_GAP_S`` after its observation (a stopped daemon observes nothing, and a guess must not grow forever).
This is an estimate from what the agent saw, not vast.ai's invoice.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from agent.store.log import utc_ts
from agent.store.queries import Store

MAX_GAP_S = 3600.0


@dataclass(frozen=True)
class Spend:
    today: float
    month: float


def _t(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def _iso(t: float) -> str:
    return utc_ts(datetime.fromtimestamp(t, UTC))


def integrate(points: list[tuple[float, float]], start: float, end: float) -> float:
    """Dollars spent in [start, end] given (time, $/h) observations, oldest first (see the module doc)."""
    total = 0.0
    for i, (t, rate) in enumerate(points):
        nxt = points[i + 1][0] if i + 1 < len(points) else min(end, t + MAX_GAP_S)
        nxt = min(nxt, t + MAX_GAP_S)
        a, b = max(t, start), min(nxt, end)
        if b > a:
            total += rate * (b - a) / 3600
    return total


def month_start(now: float) -> float:
    d = datetime.fromtimestamp(now, UTC)
    return datetime(d.year, d.month, 1, tzinfo=UTC).timestamp()


def day_start(now: float) -> float:
    d = datetime.fromtimestamp(now, UTC)
    return datetime(d.year, d.month, d.day, tzinfo=UTC).timestamp()


class Rates:
    """The observed (unix time, $/h) points a console keeps: each call reads only the observations logged
    since the previous one, and drops those older than any window still needs."""

    def __init__(self) -> None:
        self.points: list[tuple[float, float]] = []
        self.seq = 0

    def since(self, store: Store, start: float) -> list[tuple[float, float]]:
        """Every point from the one in force at ``start`` on (``start`` must not move backwards)."""
        lead = start - MAX_GAP_S
        for seq, ts, dph in store.fleet_rates(after_seq=self.seq, since_ts=_iso(lead)):
            self.seq = seq
            if dph is not None:
                self.points.append((_t(ts), dph))
        keep = next((i for i, p in enumerate(self.points) if p[0] >= lead), len(self.points))
        del self.points[:keep]
        return list(self.points)


def in_window(points: list[tuple[float, float]], start: float) -> list[tuple[float, float]]:
    """The points at or after ``start``, led by the one in force at ``start`` (drawn from ``start``)."""
    before = [p for p in points if p[0] < start][-1:]
    return before + [p for p in points if p[0] >= start]


def spend(points: list[tuple[float, float]], now: float) -> Spend:
    """Spend today and this month from points reaching back to the month's start."""
    m, d = month_start(now), day_start(now)
    return Spend(today=round(integrate(points, d, now), 4), month=round(integrate(points, m, now), 4))


def overview(rates: Rates, store: Store, now: float) -> tuple[Spend, list[tuple[float, float]],
                                                             list[tuple[float, float]]]:
    """Spend, and the 24 h and 7 d series, from the observations."""
    week = window_start(now, 24 * 7)
    points = rates.since(store, min(month_start(now), week))
    return spend(points, now), in_window(points, window_start(now, 24)), in_window(points, week)


def window_start(now: float, hours: float) -> float:
    return (datetime.fromtimestamp(now, UTC) - timedelta(hours=hours)).timestamp()
