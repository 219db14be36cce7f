"""Money from the log: what the fleet spent, and the budgets enforced before every rent.

Spend is computed from the log's own rental history: each instance of ours costs its $/h (the
offer's ``dph_total``, which vast.ai prices with the storage rented) from the moment its rent
(or adoption) was logged until its destroy result or ``instance.gone`` was logged, or until now
while it lives. That is what vast.ai bills at most: it charges only storage while an instance
boots, so the log's figure is an upper bound within a boot's minutes.

Periods are UTC: the day from 00:00, the week from Monday 00:00, the month from the 1st.
``policy.max_daily_spend`` / ``policy.max_monthly_spend`` refuse a rent when the spend so far, plus
what the live fleet and the new instance would cost by the period's end, exceeds the budget; an
alert opens when the spend so far reaches 80 %.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from agent.config import PolicySettings, Settings
from agent.policy import Block
from agent.store.log import EventLog, utc_ts
from agent.store.queries import Rental

ALERT_SHARE = 0.8


@dataclass(frozen=True)
class Period:
    name: str  # today | week | month
    start: datetime
    end: datetime


def _dt(ts: str) -> datetime:
    return datetime.fromisoformat(ts[:-1] if ts.endswith("Z") else ts).replace(tzinfo=UTC)


def periods(now: datetime) -> dict[str, Period]:
    """The UTC day, week (from Monday) and calendar month that hold ``now``."""
    day = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    week = day - timedelta(days=day.weekday())
    month = day.replace(day=1)
    next_month = (month + timedelta(days=32)).replace(day=1)
    return {"today": Period("today", day, day + timedelta(days=1)),
            "week": Period("week", week, week + timedelta(days=7)),
            "month": Period("month", month, next_month)}


def cost(r: Rental, t0: datetime, t1: datetime, now: datetime) -> float:
    """What rental ``r`` cost between ``t0`` and ``t1`` (nothing after ``now``)."""
    start = max(_dt(r.start_ts), t0)
    end = min(_dt(r.end_ts) if r.end_ts else now, t1, now)
    secs = (end - start).total_seconds()
    return max(0.0, secs) * float(r.dph or 0.0) / 3600.0


def spent(rentals: list[Rental], p: Period, now: datetime) -> float:
    return sum(cost(r, p.start, p.end, now) for r in rentals)


def report(log: EventLog) -> dict[str, Any]:
    """Spend today, this week, this month, per instance and per GPU model, and the live run rate."""
    now = log.clock()
    rentals = log.store.rentals()
    ps = periods(now)
    per: dict[str, Any] = {name: {"start": utc_ts(p.start), "end": utc_ts(p.end),
                                  "spent": round(spent(rentals, p, now), 4)} for name, p in ps.items()}
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    instances = []
    by_gpu: dict[str, dict[str, Any]] = {}
    grand = 0.0
    for r in rentals:
        total = cost(r, epoch, now, now)
        grand += total
        end = _dt(r.end_ts) if r.end_ts else now
        instances.append({"instance_id": r.instance_id, "gpu_name": r.gpu_name, "dph": r.dph, "label": r.label,
                          "start": r.start_ts, "end": r.end_ts, "live": r.end_ts is None,
                          "hours": round(max(0.0, (end - _dt(r.start_ts)).total_seconds()) / 3600, 4),
                          "spent": round(total, 4), "month": round(cost(r, ps["month"].start, ps["month"].end, now), 4)})
        g = by_gpu.setdefault(r.gpu_name or "?", {"instances": 0, "spent": 0.0, "month": 0.0})
        g["instances"] += 1
        g["spent"] = round(g["spent"] + total, 4)
        g["month"] = round(g["month"] + cost(r, ps["month"].start, ps["month"].end, now), 4)
    return {"as_of": utc_ts(now), "periods": per, "total": round(grand, 4),
            "run_rate_dph": round(sum(float(r.dph or 0) for r in rentals if r.end_ts is None), 4),
            "instances": instances, "by_gpu": dict(sorted(by_gpu.items()))}


_BUDGETS = (("max_daily_spend", "today", "today"), ("max_monthly_spend", "month", "this month"))


def budget_block(log: EventLog, policy: PolicySettings, new_dph: float) -> Block | None:
    """A Block when renting at ``new_dph`` would take a period's spend past its budget: the spend so
    far, plus what the live fleet costs by the period's end, plus what the new instance would add."""
    budgets = [(k, name, what, getattr(policy, k)) for k, name, what in _BUDGETS if getattr(policy, k) is not None]
    if not budgets:
        return None
    now = log.clock()
    rentals = log.store.rentals()
    live_dph = sum(float(r.dph or 0.0) for r in rentals if r.end_ts is None)
    ps = periods(now)
    for key, name, what, budget in budgets:
        p = ps[name]
        so_far = spent(rentals, p, now)
        hours = (p.end - now).total_seconds() / 3600
        fleet, add = live_dph * hours, new_dph * hours
        if so_far + fleet + add > budget + 1e-9:
            end = utc_ts(p.end)[:16].replace("T", " ")
            return Block(key, f"${so_far:.2f} spent {what} + ${fleet:.2f} the live fleet costs by {end} UTC + "
                         f"${add:.2f} this instance would add (${new_dph:.3f}/h x {hours:.1f} h) = "
                         f"${so_far + fleet + add:.2f} > budget ${budget:.2f}")
    return None


def check_budgets(log: EventLog, settings: Settings, policy: PolicySettings, tick: int | None) -> None:
    """Open an alert when a period's spend reaches 80 % of its budget; resolve it when it is below."""
    from agent import feedback

    now = log.clock()
    rentals = log.store.rentals()
    ps = periods(now)
    for key, name, what in _BUDGETS:
        budget = getattr(policy, key)
        akey = f"spend:{name}"
        so_far = spent(rentals, ps[name], now)
        if budget is not None and so_far >= ALERT_SHARE * budget:
            share = so_far / budget if budget > 0 else 1.0
            feedback.raise_alert(log, key=akey, severity="warning" if share < 1 else "critical",
                                 title=f"spend {what} at {share:.0%} of the {key} budget",
                                 detail=f"${so_far:.2f} of ${budget:.2f}; rents that would pass it are refused",
                                 tick=tick, settings=settings)
        else:
            feedback.resolve_alert(log, akey, "spend is below 80 % of the budget", tick)
