"""How the database file is laid out: a new database's page size, and the events table's indexes.

A new database gets ``PAGE_SIZE`` (8 KiB) pages, set before its first table; a database created with
another page size keeps it and works as before. Migration 010 replaces ``events_kind_tick`` (every event
of every tick) with ``events_tick_marks`` (only the tick.started and tick.failed rows), and every query that
used the old index still goes through an index. bench/storage.py prints what each costs per event.
"""

from __future__ import annotations

from pathlib import Path

from agent.store import plans
from agent.store.db import PAGE_SIZE, connect
from agent.store.log import EventLog
from tests.tamper import event_indexes, indexes_as_before_010


def _ticks(log: EventLog, n: int) -> None:
    for t in range(1, n + 1):
        log.append("tick.started", {"observation": {}}, "scheduler", t)
        log.append("model.response", {"text": "steady", "tool_calls": []}, "model", t)
        log.append("tick.completed", {"steps": 1}, "system", t)


def test_a_new_database_has_larger_pages_and_an_old_one_keeps_its_own(tmp_path: Path) -> None:
    """``init`` (create=True) makes a database of PAGE_SIZE-byte pages (8 KiB, not SQLite's 4 KiB
    default); a database made with 4 KiB pages keeps them when a later fleet-agent opens and migrates it,
    and appends and verifies as before."""
    assert PAGE_SIZE == 8192
    with EventLog(tmp_path / "new.db") as log:
        _ticks(log, 2)
        assert log.store.page_size() == PAGE_SIZE
    old = tmp_path / "old.db"
    connect(old, create=True, page_size=4096).close()
    with EventLog(old, create=False) as log:
        assert log.store.page_size() == 4096
        _ticks(log, 3)
        assert log.store.next_tick_number() == 4
        assert log.verify().ok
    with EventLog(old, create=False) as log:
        assert log.store.page_size() == 4096 and log.count() == 9


def _plan_lines(log: EventLog, work: object) -> list[str]:
    with plans.record(log) as statements:
        work()  # type: ignore[operator]
    return [line for s in dict.fromkeys(statements) if s.startswith("SELECT")
            for line in plans.plan(log, s)]


def test_the_next_tick_number_reads_the_tick_marks_index_after_010(tmp_path: Path) -> None:
    """A log from before 010 loses events_kind_tick and gains events_tick_marks when opened; the highest
    tick.started / tick.failed tick is then read from events_tick_marks (one entry per kind, not one per
    event of the kind), the end of the open tick from events_tick, and both answers stay right."""
    path = tmp_path / "events.db"
    with EventLog(path) as log:
        _ticks(log, 3)
        log.append("tick.failed", {"reason": "vast.ai unavailable"}, "system", 7)
    indexes_as_before_010(path)
    assert "events_kind_tick" in event_indexes(path) and "events_tick_marks" not in event_indexes(path)
    with EventLog(path, create=False) as log:
        assert "events_kind_tick" not in event_indexes(path) and "events_tick_marks" in event_indexes(path)
        assert log.store.next_tick_number() == 8
        lines = _plan_lines(log, log.store.next_tick_number)
        assert len(lines) == 2 and all("INDEX events_tick_marks (kind=? AND tick>?)" in x for x in lines), lines
        log.append("tick.started", {"observation": {}}, "scheduler", 8)
        assert log.store.open_tick() is not None
        assert any("INDEX events_tick " in x for x in _plan_lines(log, log.store.open_tick))
        log.append("tick.completed", {"steps": 1}, "system", 8)
        assert log.store.open_tick() is None and log.store.next_tick_number() == 9
