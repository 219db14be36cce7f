"""The spend read model (``observed_runs``): the runs of tick observations of our instances in one state.

Kept as each tick starts, filled by migration 007 from a log written before it alike, rebuilt from the
log by ``log rebuild``; spend reads a period's runs from it instead of every observation in the period.
"""

from __future__ import annotations

from pathlib import Path

from agent.events import Event
from agent.events.canonical import canonical
from agent.store.log import GENESIS, EventLog, row_hash
from tests import tamper

# Per tick: instance id (or a bad one) -> (ours, status). Instance 7 is not ours; "x" has no integer id.
TICKS: list[list[tuple[object, int, str | None]]] = [
    [(1, 1, "running"), (7, 0, "running"), ("x", 1, "running")],
    [(1, 1, "running"), (3, 1, "running")],
    [(1, 1, "exited"), (7, 0, "running")],
    [(1, 1, "running"), (3, 1, "running"), (4, 1, None)],
]


def _log(path: Path) -> tuple[EventLog, list[str]]:
    log = EventLog(path)
    for n, seen in enumerate(TICKS, 1):
        instances = [{"id": iid, "ours": ours, "status": status} for iid, ours, status in seen]
        log.append("tick.started", {"observation": {"instances": instances, "balance": 5.0}}, "scheduler", n)
    ts = [e.ts for e in log.read(0, kinds=["tick.started"])]
    return log, ts


def _v2_log(path: Path) -> tuple[EventLog, list[str]]:
    """The same ticks as the release before this read model logged them: tick.started version 2, whose
    rows hold the instance records as a list (version 3 came later)."""
    events, prev = [], GENESIS
    for n, seen in enumerate(TICKS, 1):
        instances = [{"id": iid, "ours": ours, "status": status} for iid, ours, status in seen]
        payload = {"observation": {"instances": instances, "balance": 5.0}}
        eid, ts = f"00000000-0000-4000-8000-{n:012d}", f"2026-11-29T10:0{n}:00.000000Z"
        h = row_hash(n, eid, ts, "tick.started", 2, "scheduler", n, canonical(payload), None, prev)
        events.append(Event(seq=n, id=eid, ts=ts, kind="tick.started", source="scheduler", tick=n, payload=payload,
                            version=2, prev_hash=prev, hash=h))
        prev = h
    log = EventLog(path)
    log.adopt(events)
    return log, [e.ts for e in events]


def _expected(ts: list[str]) -> dict[int, list[tuple[str, str, bool]]]:
    return {1: [(ts[0], ts[1], True), (ts[2], ts[2], False), (ts[3], ts[3], True)],
            3: [(ts[1], ts[3], True)], 4: [(ts[3], ts[3], False)]}


def test_each_tick_extends_or_starts_a_run_of_each_instance_of_ours(tmp_path: Path) -> None:
    """An instance seen in the same state (running or not) as last time extends its run, even across a
    tick that did not list it; a change starts a new run; instances not ours or without an integer id have
    none; a period's read keeps only the runs that lasted into it; a rebuild from the log agrees."""
    log, ts = _log(tmp_path / "a.db")
    with log:
        assert log.store.observed_runs("") == _expected(ts)
        assert log.store.observed_runs(ts[3]) == {1: [(ts[3], ts[3], True)], 3: [(ts[1], ts[3], True)],
                                                 4: [(ts[3], ts[3], False)]}
        assert log.rebuild_check() == []


def test_migration_007_fills_the_runs_from_a_log_written_before_it(tmp_path: Path) -> None:
    """A database from before the spend read model gets its runs from the tick observations already
    logged when it is next opened: the same runs the ticks would have kept, and rebuild --check agrees."""
    path = tmp_path / "old.db"
    log, ts = _v2_log(path)
    log.close()
    tamper.unapply_migration(path, "007_observed_runs", "observed_runs")
    with EventLog(path) as log:
        assert log.store.observed_runs("") == _expected(ts)
        assert log.rebuild_check() == []


def test_a_periods_read_goes_through_the_last_ts_index_not_every_run_ever(tmp_path: Path) -> None:
    """`status` and `spend` read this month's runs: SQLite finds them through the index on last_ts, instead of
    walking every run the table has kept since the first tick (it did, to give them in key order)."""
    from agent.store import plans

    log, ts = _log(tmp_path / "a.db")
    with log:
        with plans.record(log) as statements:
            log.store.observed_runs(ts[3])
        read = [s for s in statements if "observed_runs" in s]
        assert len(read) == 1
        steps = plans.plan(log, read[0])
        assert any("USING INDEX observed_runs_last" in s for s in steps), steps
        assert not any(s.startswith("SCAN") for s in steps), steps


def test_a_tick_finds_each_instances_last_run_by_its_key_however_many_runs_it_has(tmp_path: Path) -> None:
    """An instance that went up and down every tick for 600 ticks has 600 runs: the next tick still reads its
    last run with two key lookups (it walked all 600, with a MAX subquery for each), and what it writes is what
    a rebuild from the log gives."""
    from agent.store import plans

    def tick(n: int) -> tuple[str, dict[str, object], str, int]:
        instances = [{"id": 1, "ours": 1, "status": "running" if n % 2 else "exited"},
                     {"id": 3, "ours": 1, "status": "running"}, {"id": 7, "ours": 0, "status": "running"}]
        return "tick.started", {"observation": {"instances": instances, "balance": 5.0}}, "scheduler", n

    with EventLog(tmp_path / "a.db") as log:
        log.append_many([tick(n) for n in range(1, 601)])
        with plans.record(log) as statements:
            log.append(*tick(601))
        read = [s for s in statements if s.startswith("SELECT") and "observed_runs" in s]
        assert len(read) == 1, statements
        assert plans.vm_steps(log, read[0]) <= 1000, plans.plan(log, read[0])
        ts = [e.ts for e in log.read(0, kinds=["tick.started"])]
        runs = log.store.observed_runs("")
        assert runs[1] == [(t, t, n % 2 == 1) for n, t in enumerate(ts, 1)]  # one run a tick, up and down
        assert runs[3] == [(ts[0], ts[-1], True)] and 7 not in runs
        assert log.rebuild_check() == []
