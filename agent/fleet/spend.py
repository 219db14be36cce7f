"""Money from the log: what the fleet spent, and the budgets enforced before every rent.

Spend is computed from the log's own rental history: each instance of ours costs its $/h (the
offer's ``dph_total``, which vast.ai prices with the storage rented) between its rent (or
adoption) and its destroy result or ``instance.gone`` (or now, while it lives), for the time the
ticks' observations saw it running, and the storage of its disk (``storage_dph``, noted at the rent)
the rest of that time: vast.ai bills the $/h only while an instance runs and its storage otherwise, so an
instance stuck loading, whose container never started, or outbid and kept stopped costs its storage. ``segments`` says how the time between two observations is counted. Traffic is billed per GB on
top of that: each instance's cumulative billed traffic, as the ticks note it (``instance.traffic``), counts in
the spend, after its last note at the $ per hour it ran that the notes measured, for the time it ran since; that
rate is in the live fleet's run rate that budgets project.

Periods are UTC: the day from 00:00, the week from Monday 00:00, the month from the 1st.
``policy.max_daily_spend`` / ``policy.max_monthly_spend`` refuse a rent when the spend so far, plus
what the live fleet and the new instance would cost by the period's end, exceeds the budget; an
alert opens when the spend so far reaches 80 %.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from agent.config import PolicySettings, Settings
from agent.fleet.block import Block
from agent.store.log import EventLog
from agent.store.queries import Rental
from agent.times import parse_ts, utc_ts

ALERT_SHARE = 0.8


@dataclass(frozen=True)
class Period:
    name: str  # today | week | month
    start: datetime
    end: datetime


def periods(now: datetime) -> dict[str, Period]:
    """The UTC day, week (from Monday) and calendar month that hold ``now``."""
    day = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    week = day - timedelta(days=day.weekday())
    month = day.replace(day=1)
    next_month = (month + timedelta(days=32)).replace(day=1)
    return {"today": Period("today", day, day + timedelta(days=1)),
            "week": Period("week", week, week + timedelta(days=7)),
            "month": Period("month", month, next_month)}


Segment = tuple[datetime, datetime, float]  # (from, to, share of the $/h billed)
# Consecutive observations in one state: (first, last, running, since when it ran as vast.ai reported it or None).
Run = tuple[datetime, datetime, bool, datetime | None]


def segments(r: Rental, runs: list[Run], now: datetime) -> list[Segment]:
    """When rental ``r`` billed its $/h, from the ticks' observations of it (``runs``).

    vast.ai bills an instance's $/h while it runs and only its storage otherwise. Between two
    observations that both saw it running it billed throughout; between two that did not, nothing
    (storage aside). A run of running observations that knows when the instance started (its uptime at the
    first of them, ``uptime_mins``) bills from then on, and nothing before since the observation (or the rent)
    before; without it, half the interval before (the change happened in between), as does a stop: vast.ai
    reports no time for it. From the last observation to its end, all if it was running. An instance no
    tick observed bills from its rent to its end (an upper bound)."""
    start = parse_ts(r.start_ts)
    end = parse_ts(r.end_ts) if r.end_ts else now
    rs = [(max(a, start), min(b, end), run, since) for a, b, run, since in runs if b >= start and a <= end]
    if not rs:
        return [(start, end, 1.0)]
    out: list[Segment] = []
    prev = start
    for i, (a, b, run, since) in enumerate(rs):
        if i:
            prev = rs[i - 1][1]
        if run and since is not None:  # it started at `since`, within the interval before (clamped there)
            at = min(max(since, prev), a)
            out += [(prev, at, 0.0), (at, a, 1.0)]
        else:  # the state changed in between; from the rent, half if the first observation saw it running
            out.append((prev, a, 0.5 if (i or run) else 0.0))
        out.append((a, b, 1.0 if run else 0.0))
    out.append((rs[-1][1], end, 1.0 if rs[-1][2] else 0.0))
    return out


StoredRuns = dict[int, list[tuple[int, str, str, bool, float | None]]]
"""instance id -> (first seq, first ts, last ts, running, up_s at the first observation)"""


def _observations(runs: StoredRuns) -> dict[int, list[Run]]:
    """The runs of the ticks' observations of our rentals (``observed_runs``: consecutive observations in one
    state, kept as each tick starts), read by ``rental_runs``: those that lasted until a period's start or
    later, and the run before them, so that ``segments`` of them bill every moment from then on as all the
    runs would. A running run's start is its first observation less the uptime vast.ai reported then."""
    out: dict[int, list[Run]] = {}
    for iid, rs in runs.items():
        out[iid] = [(parse_ts(a), parse_ts(b), run, parse_ts(a) - timedelta(seconds=up) if run and up is not None
                     else None) for _, a, b, run, up in rs]
    return out


def month_to_date(log: EventLog) -> dict[str, float]:
    """Spend today and this month as of the log's clock, from a month's observations: the one figure
    ``status``, the console's overview and ``/metrics`` show (``spend`` reports the same ``Ledger``)."""
    ps = periods(log.clock())
    led = Ledger.of(log, since=_window(ps))
    return {"today": round(led.spent(ps["today"]), 4), "month": round(led.spent(ps["month"]), 4)}


@dataclass(frozen=True)
class Ledger:
    """The rentals of ours and when each billed, as of ``now``."""

    now: datetime
    rentals: list[Rental]
    billed: dict[int, list[Segment]]
    # Traffic vast.ai billed per instance, cumulative dollars as noted (agent/fleet/market.py), in time order.
    traffic: dict[int, list[tuple[datetime, float]]] = field(default_factory=dict)
    # Changes of an instance's $/h after its rent, in time order: (from when, "set" | "add", $/h): a raised bid
    # sets it, an accepted price increase adds its GPU difference from the contract's end date.
    prices: dict[int, list[PriceChange]] = field(default_factory=dict)

    @classmethod
    def of(cls, log: EventLog, since: datetime | None = None, runs: StoredRuns | None = None) -> Ledger:
        """From the log; observations from ``since`` on (None: all) and the run before: what costs from
        ``since`` on are exactly as from every observation. ``runs``: those, when already read."""
        now = log.clock()
        rentals = log.store.rentals()
        seen = _observations(runs if runs is not None else log.store.rental_runs(utc_ts(since) if since else ""))
        return cls(now, rentals, {r.instance_id: segments(r, seen.get(r.instance_id, []), now) for r in rentals},
                   _traffic(log), _prices(log))

    def cost(self, r: Rental, t0: datetime, t1: datetime) -> float:
        """What rental ``r`` cost between ``t0`` and ``t1`` (nothing after now): its $/h while it ran, its storage
        the rest of the time, plus the traffic billed in between."""
        total, storage = 0.0, float(r.storage_dph or 0.0)
        for a, b, share in self.billed[r.instance_id]:
            lo, hi = max(a, t0), min(b, t1, self.now)
            if hi > lo:
                if share:
                    total += self._dph_seconds(r, lo, hi) * share
                if share < 1.0:
                    total += storage * (hi - lo).total_seconds() * (1.0 - share)
        return total / 3600.0 + self.traffic_cost(r, t0, t1)

    def dph_at(self, r: Rental, t: datetime) -> float:
        """Rental ``r``'s $/h at ``t``: as rented, then as its price changes say."""
        dph = float(r.dph or 0.0)
        for at, how, v in self.prices.get(r.instance_id, []):
            if at > t:
                break
            dph = v if how == "set" else dph + v
        return dph

    def _dph_seconds(self, r: Rental, lo: datetime, hi: datetime) -> float:
        """$/h x seconds over [lo, hi], split where its price changed."""
        changes = [c for c in self.prices.get(r.instance_id, []) if lo < c[0] < hi]
        total, t, dph = 0.0, lo, self.dph_at(r, lo)
        for at, how, v in changes:
            total += (at - t).total_seconds() * dph
            t, dph = at, (v if how == "set" else dph + v)
        return total + (hi - t).total_seconds() * dph

    def traffic_cost(self, r: Rental, t0: datetime, t1: datetime) -> float:
        """Traffic billed to rental ``r`` between ``t0`` and ``t1``, from its cumulative notes; after the last
        note, until its end (or now), at the rate its notes measured per hour it ran (``traffic_rate``), for the
        time it ran: a stopped instance moves no data (the notes come only every ``TRAFFIC_STEP`` dollars, so the
        last one may be long before a stop)."""
        points = self.traffic.get(r.instance_id)
        if not points:
            return 0.0
        end = min(parse_ts(r.end_ts) if r.end_ts else self.now, self.now)
        rate = self.traffic_rate(r)
        last_at, last = points[-1]

        def upto(t: datetime) -> float:
            if t > last_at:
                return last + rate * self.running_hours(r.instance_id, last_at, min(t, end))
            return next((c for at, c in reversed(points) if at <= t), 0.0)

        return max(0.0, upto(min(t1, self.now)) - upto(t0))

    def running_hours(self, iid: int, t0: datetime, t1: datetime) -> float:
        """The hours rental ``iid`` billed its $/h (ran) between ``t0`` and ``t1``, as ``segments`` count them."""
        total = 0.0
        for a, b, share in self.billed.get(iid, []):
            lo, hi = max(a, t0), min(b, t1)
            if hi > lo and share:
                total += (hi - lo).total_seconds() * share
        return total / 3600.0

    def traffic_rate(self, r: Rental) -> float:
        """The traffic $ of ``r`` per hour it ran: between its last two notes, or from its rent to its only note
        (0 when it did not run in between)."""
        points = self.traffic.get(r.instance_id) or []
        if not points:
            return 0.0
        (a, ca), (b, cb) = points[-2] if len(points) > 1 else (parse_ts(r.start_ts), 0.0), points[-1]
        hours = self.running_hours(r.instance_id, a, b)
        return max(0.0, cb - ca) / hours if hours > 0 else 0.0

    def spent(self, p: Period) -> float:
        return sum(self.cost(r, p.start, p.end) for r in self.rentals)

    def live_dph(self) -> float:
        """What the live fleet costs an hour: dph_total plus each instance's measured traffic $/h."""
        return sum(self.dph_at(r, self.now) + self.traffic_rate(r) for r in self.rentals if r.end_ts is None)


PriceChange = tuple[datetime, str, float]


def storage_dph(disk_gb: Any, storage_cost: Any) -> float | None:
    """The $/h vast.ai bills for ``disk_gb`` GB at ``storage_cost`` $/GB/month (730 h), while the instance runs
    (within its ``dph_total``) or not; None when either is unknown."""
    ok = all(isinstance(x, int | float) and not isinstance(x, bool) and x >= 0 for x in (disk_gb, storage_cost))
    return round(float(disk_gb) * float(storage_cost) / 730.0, 6) if ok else None


def _prices(log: EventLog) -> dict[int, list[PriceChange]]:
    """Each instance's $/h changes after its rent: a new bid (``instance.bid``, raised after an outbid or lowered
    when the market fell; older logs: ``instance.outbid`` rebid) from then on, an accepted price increase
    (``price.increase``) from its contract's end date."""
    out: dict[int, list[PriceChange]] = {}
    for e in log.read(0, kinds=["instance.bid", "instance.outbid", "price.increase"]):
        p = e.payload
        iid = int(p["instance_id"])
        if e.kind == "instance.bid":
            out.setdefault(iid, []).append((parse_ts(e.ts), "set", float(p["bid"])))
        elif e.kind == "instance.outbid" and p.get("action") == "rebid" and p.get("new_bid") is not None:
            out.setdefault(iid, []).append((parse_ts(e.ts), "set", float(p["new_bid"])))
        elif (e.kind == "price.increase" and p.get("decision") == "accepted" and p.get("ok")
              and p.get("new_dph") is not None and p.get("old_dph") is not None):
            at = parse_ts(p["effective"]) if p.get("effective") else parse_ts(e.ts)
            out.setdefault(iid, []).append((at, "add", float(p["new_dph"]) - float(p["old_dph"])))
    for changes in out.values():
        changes.sort(key=lambda c: c[0])
    return out


def _traffic(log: EventLog) -> dict[int, list[tuple[datetime, float]]]:
    """Each instance's cumulative traffic dollars from its ``instance.traffic`` notes."""
    out: dict[int, list[tuple[datetime, float]]] = {}
    for e in log.read(0, kinds=["instance.traffic"]):
        p = e.payload
        cost = float(p["up_gb"]) * float(p["up_cost"]) + float(p["down_gb"]) * float(p["down_cost"])
        out.setdefault(int(p["instance_id"]), []).append((parse_ts(e.ts), cost))
    return out


def report(log: EventLog, cache: Path | None = None) -> dict[str, Any]:
    """Spend today, this week, this month, per instance and per GPU model, and the live run rate.

    The periods read the observations from the earliest period's start on (``Ledger.of(since=...)``: exact from
    there); each instance's all-time figure adds what it cost before then (``_before``, kept in the file
    ``cache`` when given)."""
    ps = periods(log.clock())
    since = min(p.start for p in ps.values())
    runs = log.store.rental_runs(utc_ts(since))
    led = Ledger.of(log, since=since, runs=runs)
    now = led.now
    ps = periods(now)
    before = _before(log, led, since, runs, cache)
    per: dict[str, Any] = {name: {"start": utc_ts(p.start), "end": utc_ts(p.end),
                                  "spent": round(led.spent(p), 4)} for name, p in ps.items()}
    month = ps["month"]
    instances = []
    by_gpu: dict[str, dict[str, Any]] = {}
    grand = 0.0
    for r in led.rentals:
        total = before.get(r.instance_id, 0.0) + led.cost(r, since, now)
        in_month = led.cost(r, month.start, month.end)
        grand += total
        end = parse_ts(r.end_ts) if r.end_ts else now
        instances.append({"instance_id": r.instance_id, "gpu_name": r.gpu_name, "dph": r.dph, "label": r.label,
                          "start": r.start_ts, "end": r.end_ts, "live": r.end_ts is None,
                          "hours": round(max(0.0, (end - parse_ts(r.start_ts)).total_seconds()) / 3600, 4),
                          "spent": round(total, 4), "month": round(in_month, 4)})
        g = by_gpu.setdefault(r.gpu_name or "?", {"instances": 0, "spent": 0.0, "month": 0.0})
        g["instances"] += 1
        g["spent"] = round(g["spent"] + total, 4)
        g["month"] = round(g["month"] + in_month, 4)
    return {"as_of": utc_ts(now), "periods": per, "total": round(grand, 4),
            "run_rate_dph": round(led.live_dph(), 4), "instances": instances, "by_gpu": dict(sorted(by_gpu.items()))}


BEFORE_FILE = "spend-before.json"
"""Where ``spend`` keeps each rental's cost before the week or month it reports (in the data directory)."""


def _before(log: EventLog, led: Ledger, since: datetime, runs: StoredRuns, cache: Path | None) -> dict[int, float]:
    """What each rental that started before ``since`` cost until then: ``Ledger.cost`` over every observation
    (``Ledger.of(log)``), or that figure as ``cache`` kept it while nothing it depends on changed (``_inputs``).
    """
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    old = [r for r in led.rentals if parse_ts(r.start_ts) < since]
    if not old:
        return {}
    firsts = [runs[r.instance_id][0][0] for r in old if runs.get(r.instance_id)]
    hashes = log.store.hashes_of(firsts)
    for seq in set(firsts) - set(hashes):  # archived: read from its segment
        hashes.update((e.seq, e.hash) for e in log.read(seq - 1, limit=1))
    keys = {r.instance_id: _inputs(hashes, led, r, since, runs.get(r.instance_id, [])) for r in old}
    kept = _read_cache(cache)
    out = {iid: float(kept[str(iid)][1]) for iid, k in keys.items() if kept.get(str(iid), [None])[0] == k}
    missing = [r for r in old if r.instance_id not in out]
    if missing:
        full = Ledger.of(log)
        out.update((r.instance_id, full.cost(r, epoch, since)) for r in missing)
        if cache is not None:
            _write_cache(cache, {str(iid): [keys[iid], out[iid]] for iid in keys})
    return out


def _inputs(hashes: dict[int, str], led: Ledger, r: Rental, since: datetime,
            runs: list[tuple[int, str, str, bool, float | None]]) -> str:
    """A digest of everything ``Ledger.cost(r, epoch, since)`` depends on, as far as ``led`` (read from
    ``since`` on) and the log can tell without reading all of ``r``'s runs: this module's code and the rental's
    row; the runs before the first read (fixed once a later run started: the hash of the event that began it
    covers the whole log up to it); of those read, how the ones begun before ``since`` went until then and
    whether another began after them (it settles the time between); the price changes; the traffic notes until
    ``since`` and whether one came after (until one does, the rate of the last two is extrapolated)."""
    import dataclasses
    import hashlib
    import json

    iso = utc_ts(since)
    before = [(a, min(b, iso), run, up) for _, a, b, run, up in runs if a < iso]
    notes = led.traffic.get(r.instance_id, [])
    basis = {"code": _code_digest(), "since": iso, "rental": [str(v) for v in dataclasses.astuple(r)],
             "anchor": [runs[0][0], hashes.get(runs[0][0])] if runs else None, "runs": before,
             "runs_after": len(runs) > len(before),
             "prices": [(utc_ts(at), how, v) for at, how, v in led.prices.get(r.instance_id, [])],
             "traffic": [(utc_ts(at), c) for at, c in notes if at <= since],
             "traffic_after": any(at > since for at, _ in notes)}
    return hashlib.sha256(json.dumps(basis, sort_keys=True).encode()).hexdigest()


def _code_digest() -> str:
    """This module's source: an accounting change makes every kept figure stale."""
    import hashlib

    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()


def _read_cache(cache: Path | None) -> dict[str, Any]:
    import json

    if cache is None:
        return {}
    try:
        kept = json.loads(cache.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return kept if isinstance(kept, dict) else {}


def _write_cache(cache: Path, kept: dict[str, Any]) -> None:
    """Best effort, whole or not at all: a read-only data directory only costs the next run the full read."""
    import json
    import os

    tmp = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(kept, sort_keys=True), encoding="utf-8")
        os.replace(tmp, cache)
    except OSError:
        tmp.unlink(missing_ok=True)


def _window(ps: dict[str, Period]) -> datetime:
    """Where observations must start for the day's and the month's spend (a day of margin)."""
    return min(ps["today"].start, ps["month"].start) - timedelta(days=1)


_BUDGETS = (("max_daily_spend", "today", "today"), ("max_monthly_spend", "month", "this month"))


def budget_block(log: EventLog, policy: PolicySettings, new_dph: float) -> Block | None:
    """A Block when renting at ``new_dph`` would take a period's spend past its budget: the spend so
    far, plus what the live fleet costs by the period's end, plus what the new instance would add."""
    budgets = [(k, name, what, getattr(policy, k)) for k, name, what in _BUDGETS if getattr(policy, k) is not None]
    if not budgets:
        return None
    ps = periods(log.clock())
    led = Ledger.of(log, since=_window(ps))
    now, live_dph = led.now, led.live_dph()
    for key, name, what, budget in budgets:
        p = ps[name]
        so_far = led.spent(p)
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

    if policy.max_daily_spend is None and policy.max_monthly_spend is None and not log.store.live_alerts(
            prefix="spend:"):
        return
    ps = periods(log.clock())
    led = Ledger.of(log, since=_window(ps))
    for key, name, what in _BUDGETS:
        budget = getattr(policy, key)
        akey = f"spend:{name}"
        so_far = led.spent(ps[name])
        if budget is not None and so_far >= ALERT_SHARE * budget:
            share = so_far / budget if budget > 0 else 1.0
            feedback.raise_alert(log, key=akey, severity="warning" if share < 1 else "critical",
                                 title=f"spend {what} at {share:.0%} of the {key} budget",
                                 detail=f"${so_far:.2f} of ${budget:.2f}; rents that would pass it are refused",
                                 tick=tick, settings=settings)
        else:
            feedback.resolve_alert(log, akey, "spend is below 80 % of the budget", tick)


# ------------------------------------------------------------------ what the model costs

MODEL_COST_TICKS = 48
"""The newest ticks the model's cost is averaged over (4 h at the default 5-minute interval): reading them
is bounded whatever the log's size."""


def ticks_per_day(schedule: Any, now: datetime) -> float:
    """Ticks a day on ``schedule``: 86,400 s over the interval, or a cron expression's runs in the next day."""
    from agent.config import cron_trigger

    if not schedule.cron:
        return 86400.0 / max(1.0, float(schedule.interval))
    trig = cron_trigger(schedule.cron)
    end, n, t = now + timedelta(days=1), 0, trig.get_next_fire_time(None, now)
    while t is not None and t < end and n <= 24 * 60:
        n += 1
        t = trig.get_next_fire_time(t, t + timedelta(seconds=1))
    return float(n)


def _completed(obs: Any) -> int | None:
    d = obs.get("demand") if isinstance(obs, dict) else None
    c = d.get("completed") if isinstance(d, dict) else None
    return c if isinstance(c, int) and not isinstance(c, bool) else None


def model_cost(log: EventLog, settings: Settings) -> dict[str, Any]:
    """What the model cost over the newest ``MODEL_COST_TICKS`` ticks, priced from the usage the server
    reported for each call (``model.response``) at ``model.price``: in all, per tick, per day at the
    schedule's pace (the fleet's whole bill for the model), per instance of ours a day, and per job the
    demand source reports completed between the window's first and newest observation (the model cost of
    the ticks in between over the jobs done in between). The summariser's calls count with the agent's
    (``summary.response`` from v2 carries their usage; a v1 answer or a failed call has none and costs 0):
    ``calls`` counts both, ``summary_calls`` and ``summary_cost`` the summariser's share."""
    from agent.price import of_settings

    price = of_settings(settings)
    # The window's ticks by their index entries; only its first and newest observations are read (a big fleet's
    # observation is large). A window reaching into archived months is read from the log.
    heads = log.store.tick_starts(MODEL_COST_TICKS)
    if len(heads) < MODEL_COST_TICKS and log.segments():
        heads = [(e.seq, e.tick, e.ts) for e in log.read(0, kinds=["tick.started"], newest_first=True,
                                                         limit=MODEL_COST_TICKS)][::-1]
    out: dict[str, Any] = {"sheet": price.sheet, "free": price.free,
                           "price": {"input": price.input, "cached_input": price.cached_input, "output": price.output},
                           "ticks": len(heads), "calls": 0, "summary_calls": 0, "cost": 0.0, "summary_cost": 0.0,
                           "per_tick": None, "per_day": None,
                           "last_tick": None, "per_instance_day": None, "jobs": None, "per_job": None}
    if not heads:
        return out
    first, last = (next(log.read(seq - 1, until_seq=seq)) for seq in (heads[0][0], heads[-1][0]))
    usage = {"prompt_tokens": 0, "cached_tokens": 0, "completion_tokens": 0}
    by_tick: dict[int, float] = {}
    summary = 0.0
    for e in log.read(first.seq - 1, kinds=["model.response", "summary.response"]):
        if e.kind == "summary.response" and "usage" not in e.payload:
            continue   # failed, or written before answers carried usage: nothing to price
        u = e.payload.get("usage") or {}
        for k in usage:
            v = u.get(k)
            usage[k] += v if isinstance(v, int) and not isinstance(v, bool) else 0
        cost = price.usage_cost(u)
        if e.tick is not None:
            by_tick[e.tick] = by_tick.get(e.tick, 0.0) + cost
        out["calls"] += 1
        if e.kind == "summary.response":
            out["summary_calls"] += 1
            summary += cost
    total = price.usage_cost(usage)
    per_tick = total / len(heads)
    per_day = per_tick * ticks_per_day(settings.schedule, log.clock())
    newest = last.payload.get("observation") or {}
    ours = sum(1 for i in newest.get("instances") or [] if i.get("ours", True))
    out.update(usage=usage, cost=round(total, 6), summary_cost=round(summary, 6), parts={k: round(v, 6) for k, v in price.parts(
        usage["prompt_tokens"], usage["cached_tokens"], usage["completion_tokens"]).items()},
        since=first.ts, per_tick=round(per_tick, 6), per_day=round(per_day, 4), instances=ours,
        per_instance_day=round(per_day / ours, 4) if ours else None,
        last_tick={"tick": last.tick, "cost": round(by_tick.get(last.tick or 0, 0.0), 6)})
    first_jobs, last_jobs = _completed(first.payload.get("observation")), _completed(newest)
    if len(heads) > 1 and first_jobs is not None and last_jobs is not None and last_jobs >= first_jobs:
        window = {tick for _, tick, _ in heads[:-1]}
        spent = sum(c for t, c in by_tick.items() if t in window)
        out["jobs"] = last_jobs - first_jobs
        out["per_job"] = round(spent / out["jobs"], 6) if out["jobs"] else None
    return out
