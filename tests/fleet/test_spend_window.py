"""``spend`` and ``status`` read a period's observations, not every run ever kept: their figures are the ones
every observation gives (``Ledger.of(log)``), on a log with what makes a past figure move: runs across
midnight and across the period's start, an instance no tick saw for days, a price increase effective from a
past date, a raised bid, traffic extrapolated after its last note, an instance gone before the month."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agent.fleet import spend
from agent.store.log import EventLog

pytestmark = pytest.mark.usefixtures("backend")

NOW = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)  # a Wednesday: the week began on Monday, in November
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _at(day: int, hour: int, minute: int = 0, month: int = 11) -> datetime:
    return datetime(2026, month, day, hour, minute, tzinfo=UTC)


def _tricky(log: EventLog) -> None:
    """Rentals 1-5 (rented in November), ticks every 20 minutes from Nov 20 to now, each seeing:
    1 running throughout (traffic noted, last note on Dec 1, then extrapolated; a price increase accepted on
      Dec 1, effective from Nov 25);
    2 running, then not, flipping every other hour (runs across every midnight, the month's and the week's start);
    3 gone on Nov 26 (all its spend before the month);
    4 last seen on Nov 27, still ours: billed from its last observation on, by its state then;
    5 rented on Nov 29 23:41, first seen on Nov 30 00:10 (across the week's start), its bid raised on Dec 1."""
    clock = {"t": _at(20, 0)}
    log.clock = lambda: clock["t"]

    def at(t: datetime, kind: str, payload: dict[str, Any], tick: int | None = None) -> None:
        clock["t"] = t
        log.append(kind, payload, "scheduler" if kind == "tick.started" else "system", tick)

    for iid, dph, gpu in ((1, 0.40, "RTX_4090"), (2, 0.25, "RTX_3090"), (3, 0.50, "RTX_4090"), (4, 0.30, "A100")):
        at(_at(20, 0, iid), "instance.adopted", {"instance_id": iid, "label": f"fa-{iid}", "idem_key": None,
                                                    "gpu_name": gpu, "dph": dph})
    t, tick, traffic, added5 = _at(20, 0, 1), 0, 0.0, False
    while t < NOW - timedelta(minutes=5):
        if not added5 and t >= _at(29, 23, 41):
            at(t, "instance.adopted", {"instance_id": 5, "label": "fa-5", "idem_key": None,
                                                     "gpu_name": "RTX_3090", "dph": 0.20})
            added5 = True
        tick += 1
        seen = [{"id": 1, "ours": 1, "status": "running"},
                {"id": 2, "ours": 1, "status": "running" if (t.hour // 2) % 2 == 0 else "loading"}]
        if t < _at(26, 12):
            seen.append({"id": 3, "ours": 1, "status": "running"})
        if t < _at(27, 8):
            seen.append({"id": 4, "ours": 1, "status": "running" if t < _at(25, 0) else "exited"})
        if t >= _at(30, 0, 10):
            seen.append({"id": 5, "ours": 1, "status": "running"})
        seen.append({"id": 99, "ours": 0, "status": "running"})  # not ours: never billed
        at(t + timedelta(seconds=1), "tick.started", {"observation": {"instances": seen, "balance": 100.0}}, tick)
        if t.minute == 1 and t < _at(1, 12, month=12):
            traffic += 0.013
            at(t + timedelta(seconds=5), "instance.traffic",
               {"instance_id": 1, "up_gb": traffic, "up_cost": 1.0, "down_gb": traffic / 2, "down_cost": 0.5})
        if t == _at(26, 12, 1):
            at(t + timedelta(seconds=7), "instance.gone", {"instance_id": 3, "last_status": "exited"})
        if t == _at(1, 9, 1, month=12):
            at(t + timedelta(seconds=9), "price.increase",
               {"instance_id": 1, "decision": "accepted", "ok": True, "old_dph": 0.40, "new_dph": 0.44, "cap": 0.15,
                "share": 0.1, "pending_id": 1, "effective": "2026-11-25T06:00:00.000000Z"})
            at(t + timedelta(seconds=11), "instance.bid",
               {"instance_id": 5, "bid": 0.26, "old_bid": 0.20, "min_bid": 0.25, "why": "outbid"})
        t += timedelta(minutes=20)
    clock["t"] = NOW


def _by_iid(rep: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {i["instance_id"]: i for i in rep["instances"]}


def test_spend_from_a_periods_runs_is_what_every_observation_gives(new_log: Callable[..., EventLog]) -> None:
    """The report's periods, each instance's month and all-time figure, the run rate, and the status line's
    today and month are, to the cent's hundredth, the full computation's: the ledger of every observation."""
    log = new_log()
    _tricky(log)
    full = spend.Ledger.of(log)
    ps = spend.periods(NOW)
    assert {r.instance_id for r in full.rentals} == {1, 2, 3, 4, 5}
    rep = spend.report(log)
    assert {k: v["spent"] for k, v in rep["periods"].items()} == {k: round(full.spent(p), 4) for k, p in ps.items()}
    got = _by_iid(rep)
    for r in full.rentals:
        assert got[r.instance_id]["spent"] == round(full.cost(r, EPOCH, NOW), 4), r
        assert got[r.instance_id]["month"] == round(full.cost(r, ps["month"].start, ps["month"].end), 4), r
    assert rep["total"] == round(sum(full.cost(r, EPOCH, NOW) for r in full.rentals), 4)
    assert rep["run_rate_dph"] == round(full.live_dph(), 4)
    assert spend.month_to_date(log) == {"today": round(full.spent(ps["today"]), 4),
                                        "month": round(full.spent(ps["month"]), 4)}
    # The log has what it claims: each instance billed something, the price increase and the traffic count.
    assert all(got[i]["spent"] > 0 for i in (1, 2, 3, 4, 5))
    assert got[3]["month"] == 0.0 and got[3]["spent"] > 0
    assert full.dph_at(full.rentals[0], NOW) == pytest.approx(0.44)
    assert full.traffic_cost(full.rentals[0], ps["today"].start, NOW) > 0


def test_a_periods_read_skips_the_runs_before_it_and_those_of_instances_not_ours(
        new_log: Callable[..., EventLog]) -> None:
    """What spend reads for this week is each rental's runs from the week's start and the one before, not
    the runs of November's first weeks, nor those of an instance that is not a rental."""
    log = new_log()
    _tricky(log)
    since = spend.periods(NOW)["week"].start.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    every = log.store.observed_runs("")
    read = {iid: [run[1:4] for run in runs] for iid, runs in log.store.rental_runs(since).items()}
    assert set(read) == {1, 2, 3, 4, 5}
    for iid, runs in read.items():
        assert runs == every[iid][len(every[iid]) - len(runs):], iid  # the newest runs, in order
        assert all(last >= since for _, last, _ in runs[1:]), iid  # only the first may end before the week
    assert len(read[2]) < len(every[2]) / 4  # run 2 flips every other hour: two weeks of runs are not read
    assert read[3] == every[3][-1:] and read[4] == every[4][-1:]  # no run reaches the week: the last one only


def test_a_periods_read_walks_no_table_of_runs_on_sqlite(tmp_path: Any) -> None:
    """SQLite finds each rental's first run of the period and the one before through the runs' key, then reads
    from there by key: no statement scans the runs, the way joining them to the rentals first did."""
    from agent.store import plans

    log = EventLog(tmp_path / "a.db")
    with log:
        _tricky(log)
        with plans.record(log) as statements:
            log.store.rental_runs("2026-11-30T00:00:00.000000Z")
        read = [s for s in statements if "observed_runs" in s]
        assert len(read) == 1
        steps = plans.plan(log, read[0])
        assert not any(s.startswith("SCAN") and s not in ("SCAN i", "SCAN cut") for s in steps), steps
        assert any(s.startswith("SEARCH o USING") and "(instance_id=? AND first_seq>?)" in s for s in steps), steps


def _agrees(log: EventLog, rep: dict[str, Any]) -> None:
    full = spend.Ledger.of(log)
    ps = spend.periods(full.now)
    assert {k: v["spent"] for k, v in rep["periods"].items()} == {k: round(full.spent(p), 4) for k, p in ps.items()}
    assert {i["instance_id"]: i["spent"] for i in rep["instances"]} == {
        r.instance_id: round(full.cost(r, EPOCH, full.now), 4) for r in full.rentals}
    assert rep["total"] == round(sum(full.cost(r, EPOCH, full.now) for r in full.rentals), 4)


def test_the_kept_cost_before_the_period_is_used_until_what_it_depends_on_changes(
        new_log: Callable[..., EventLog], tmp_path: Any) -> None:
    """``spend`` keeps each rental's cost before the reported weeks in the data directory; the next run uses it
    (a figure written there shows), and after what changes a past figure — a price increase effective from a
    past date, an instance seen again after days (which settles how the days between are billed), a traffic
    note — the report is again the full computation's."""
    import json

    log = new_log()
    _tricky(log)
    cache = tmp_path / spend.BEFORE_FILE
    first = spend.report(log, cache=cache)
    _agrees(log, first)
    kept = json.loads(cache.read_text(encoding="utf-8"))
    assert set(kept) == {"1", "2", "3", "4", "5"}
    real = kept["3"][1]
    kept["3"][1] = real + 1000.0
    cache.write_text(json.dumps(kept), encoding="utf-8")
    assert {i["instance_id"]: i["spent"] for i in spend.report(log, cache=cache)["instances"]}[3] == round(
        first["instances"][2]["spent"] + 1000.0, 4)
    kept["3"][1] = real
    cache.write_text(json.dumps(kept), encoding="utf-8")
    assert spend.report(log, cache=cache) == first

    t = NOW + timedelta(minutes=3)
    log.clock = lambda: t
    log.append("price.increase", {"instance_id": 2, "decision": "accepted", "ok": True, "old_dph": 0.25,
                                  "new_dph": 0.30, "cap": 0.15, "share": 0.2, "pending_id": 2,
                                  "effective": "2026-11-21T00:00:00.000000Z"}, "system", None)
    log.append("tick.started", {"observation": {"instances": [{"id": 1, "ours": 1, "status": "running"},
                                                              {"id": 4, "ours": 1, "status": "running"}],
                                                "balance": 90.0}}, "scheduler", 10_000)
    log.append("instance.traffic", {"instance_id": 1, "up_gb": 50.0, "up_cost": 1.0, "down_gb": 1.0,
                                    "down_cost": 0.5}, "system", 10_000)
    again = spend.report(log, cache=cache)
    _agrees(log, again)
    moved = {i["instance_id"]: i["spent"] for i in again["instances"]}
    before = {i["instance_id"]: i["spent"] for i in first["instances"]}
    assert moved[2] > before[2] and moved[4] > before[4]  # the changes reached the figures before the week
    assert spend.report(log, cache=cache) == again
