"""What a statement costs, without a clock: its query plan and the virtual-machine instructions it takes.

``record(log)`` collects every statement the log's connection runs (SQLite's trace hook;
``commits_that_wrote`` counts the commits among them);
``problems(log, statements, max_vm_steps)`` names each one that scans the events table whole
(or the full-text index without a MATCH), or that, as a read, takes more than ``max_vm_steps``
instructions (SQLite's progress handler counts them). On a big log the second catches any
read whose work grows with the log, whatever index it goes through. tests/store/test_query_plans.py
runs a tick, the operator commands and the projection through both.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from agent.store.log import EventLog

# "SCAN events", "SCAN e" (the alias the store gives events), the full-text index read without MATCH
_FULL_SCAN = re.compile(r"^SCAN (events|e)\b(?! VIRTUAL)|^SCAN events_fts VIRTUAL TABLE INDEX 0:$")
_SKIP = ("BEGIN", "COMMIT", "ROLLBACK", "PRAGMA", "SAVEPOINT", "RELEASE")
_STEP = 100


@contextmanager
def record(log: EventLog) -> Iterator[list[str]]:
    """Every statement ``log``'s connection runs inside the block, parameters expanded; nested ones
    (FTS5's own, a trigger's) start with ``-- ``."""
    statements: list[str] = []
    log.conn.set_trace_callback(statements.append)
    try:
        yield statements
    finally:
        log.conn.set_trace_callback(None)


def commits_that_wrote(statements: Iterable[str]) -> int:
    """Transactions among ``statements`` (from ``record``) that wrote something: each one commit, so one
    fsync with synchronous=FULL (one that wrote nothing writes no WAL frame)."""
    n, wrote = 0, False
    for s in statements:
        if s.startswith("BEGIN"):
            wrote = False
        elif s.startswith(("INSERT", "UPDATE", "DELETE", "REPLACE")):
            wrote = True
        elif s.startswith("COMMIT") and wrote:
            n += 1
    return n


def plan(log: EventLog, sql: str) -> list[str]:
    """The lines of ``EXPLAIN QUERY PLAN sql`` (unexpanded parameters bound to NULL)."""
    nulls = [None] * len(re.findall(r"\?\d*", sql))
    return [str(r[3]) for r in log.conn.execute("EXPLAIN QUERY PLAN " + sql, nulls).fetchall()]


def vm_steps(log: EventLog, sql: str) -> int:
    """Virtual-machine instructions the read ``sql`` takes to run to its end (to the nearest 100)."""
    n = [0]

    def count() -> int:
        n[0] += _STEP
        return 0

    log.conn.set_progress_handler(count, _STEP)
    try:
        log.conn.execute(sql).fetchall()
    finally:
        log.conn.set_progress_handler(None, _STEP)
    return n[0]


def problems(log: EventLog, statements: Iterable[str], max_vm_steps: int) -> list[str]:
    """One line per statement that scans the events table whole (a read with a LIMIT may: the steps
    decide) or, as a read, takes more than ``max_vm_steps`` instructions."""
    out: list[str] = []
    for traced in dict.fromkeys(statements):
        nested = traced.startswith("-- ")
        sql = traced[3:] if nested else traced
        if sql.lstrip().upper().startswith(_SKIP):
            continue
        read = not nested and sql.lstrip().upper().startswith(("SELECT", "WITH"))
        scans = [d for d in plan(log, sql) if _FULL_SCAN.search(d)]
        if scans and not (read and " LIMIT " in sql.upper()):
            out.append(f"full scan {scans}: {sql[:300]}")
        elif read and (steps := vm_steps(log, sql)) > max_vm_steps:
            out.append(f"{steps} VM steps: {sql[:300]}")
    return out
