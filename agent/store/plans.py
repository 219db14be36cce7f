"""What a statement costs, without a clock: its query plan and the virtual-machine instructions it takes.

``record(log)`` collects every statement the log's connection runs (SQLite's trace hook;
``commits_that_wrote`` counts the commits among them);
``problems(log, statements, max_vm_steps)`` names each one that scans the events table whole
(or the full-text index without a MATCH), or that, as a read, takes more than ``max_vm_steps``
instructions (SQLite's progress handler counts them). On a big log the second catches any
read whose work grows with the log, whatever index it goes through. tests/store/test_query_plans.py
runs a tick, the operator commands and the projection through both.

On PostgreSQL ``pg_record(log)`` collects (statement, parameters) as the log's connection sends them, and
``pg_problems(log, statements, max_rows)`` runs each read again under ``EXPLAIN (ANALYZE, FORMAT JSON)``
(each write under a plain ``EXPLAIN``) on that connection, so with the fleet's row-level security, and
names each one whose plan scans the events table (or the search index) whole, or that reads more than
``max_rows`` rows of them, counting the rows its filters threw away: the server's own count, so a plan
that sorts every row of a fleet fails however fast the machine is.
tests/store/test_pg_query_plans.py runs them over ten fleets in one database, the newest never analyzed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

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


# ------------------------------------------------------------------ PostgreSQL

_PG_TABLES = ("events", "events_fts")
_PG_SKIP = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "SET", "SHOW", "CALL")


@contextmanager
def pg_record(log: EventLog) -> Iterator[list[tuple[str, list[Any]]]]:
    """Every statement (with its parameters; the first row's for a statement run for many) the log's
    PostgreSQL connection sends inside the block."""
    statements: list[tuple[str, list[Any]]] = []
    conn: Any = log.conn
    conn.trace = statements
    try:
        yield statements
    finally:
        conn.trace = None


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _nodes(child)


def pg_plan(log: EventLog, sql: str, params: list[Any], *, analyze: bool) -> dict[str, Any]:
    """The plan of ``sql`` as JSON (``analyze``: run, with the rows each node read; for reads only)."""
    opts = "ANALYZE, TIMING OFF, SUMMARY OFF, FORMAT JSON" if analyze else "FORMAT JSON"
    conn: Any = log.conn
    row = conn.raw.execute(f"EXPLAIN ({opts}) {sql}", params).fetchone()
    doc = row[0] if not isinstance(row[0], str) else json.loads(row[0])
    return dict(doc[0]["Plan"])


def rows_read(plan: dict[str, Any]) -> int:
    """Rows of the events table and the search index the plan's scans produced or threw away."""
    n = 0
    for node in _nodes(plan):
        if node.get("Relation Name") in _PG_TABLES:
            loops = int(node.get("Actual Loops", 1) or 1)
            n += int(node.get("Actual Rows", 0)) * loops
            n += int(node.get("Rows Removed by Filter", 0)) + int(node.get("Rows Removed by Index Recheck", 0))
    return n


def describe(plan: dict[str, Any]) -> str:
    """The plan's nodes in one line, outermost first: "Limit > Sort > Seq Scan on events"."""
    parts = []
    for n in _nodes(plan):
        what = str(n.get("Node Type"))
        if n.get("Index Name"):
            what += f" using {n['Index Name']}"
        if n.get("Relation Name"):
            what += f" on {n['Relation Name']}"
        parts.append(what)
    return " > ".join(parts)


def pg_problems(log: EventLog, statements: Iterable[tuple[str, list[Any]]], max_rows: int) -> list[str]:
    """One line per statement whose plan scans the events table or the search index whole (Seq Scan), or
    that, as a read, reads more than ``max_rows`` of their rows."""
    out: list[str] = []
    seen: set[str] = set()
    for sql, params in statements:
        key = sql + repr(params)
        if key in seen or sql.lstrip().upper().startswith(_PG_SKIP):
            continue
        seen.add(key)
        read = sql.lstrip().upper().startswith(("SELECT", "WITH")) and "FOR UPDATE" not in sql.upper()
        plan = pg_plan(log, sql, params, analyze=read)
        scans = [f"{n['Node Type']} on {n['Relation Name']}" for n in _nodes(plan)
                 if n.get("Node Type") == "Seq Scan" and n.get("Relation Name") in _PG_TABLES]
        if scans and not (read and " LIMIT " in sql.upper()):
            out.append(f"full scan {scans}: {sql[:300]}")
        elif read and (n := rows_read(plan)) > max_rows:
            out.append(f"{n} rows read: {sql[:300]} {params!r:.100} (plan: {describe(plan)})")
    return out
