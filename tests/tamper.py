"""Changing the database behind fleet-agent's back, as someone holding the file would.

The only SQL in the tests lives here: tests that prove tampering is caught (log
verify, doctor, rebuild --check, the append-only triggers) go through these
functions instead of writing statements of their own, so every other test reads
the database through the Store alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.store.db import sqlite3
from agent.store.log import GENESIS, row_hash

_ROW = "seq, id, ts, kind, version, source, tick, payload, tokens, prev_hash, hash"

# Statements the append-only triggers must refuse, whatever they touch.
EVENT_REWRITES = (
    "UPDATE events SET payload = '{}' WHERE seq = 1",
    "DELETE FROM events WHERE seq = 1",
    "UPDATE events SET kind = 'operator.note'",
    "DELETE FROM events",
)



def archive_rewrites(last: int) -> tuple[str, ...]:
    """With segments sealing seq 1..117 of a log whose newest seq is ``last``: statements the triggers must
    refuse (a DELETE of rows no segment covers or of the newest row, any UPDATE of an event, a change to or
    DELETE of a stub, a stub that does not continue the chain, a prune with no verified copy)."""
    return (f"DELETE FROM events WHERE seq = {last}", "DELETE FROM events WHERE seq = 200", "DELETE FROM events",
            "UPDATE events SET payload = '{}' WHERE seq = 200", "UPDATE events SET kind = 'operator.note'",
            "DELETE FROM events WHERE seq > 100", "UPDATE segments SET last_seq = 5", "UPDATE segments SET sha256 = 'x'",
            "DELETE FROM segments", "UPDATE segments SET pruned_ts = 'now'",
            "INSERT INTO segments SELECT 300, 305, 'x', '2026-03', prev_hash, last_hash, first_ts, last_ts,"
            " 6, kinds, NULL, NULL, 1, 1, 'x', 'now', NULL, NULL, NULL FROM segments LIMIT 1")


def _plain(path: str | os.PathLike[str]) -> sqlite3.Connection:
    return sqlite3.connect(str(path), isolation_level=None)


def attempt(path: str | os.PathLike[str], statement: str) -> None:
    """Run ``statement`` on a plain connection with every trigger in place (raises what SQLite raises)."""
    conn = _plain(path)
    try:
        conn.execute(statement)
    finally:
        conn.close()


def record_migration(path: str | os.PathLike[str], name: str) -> None:
    """Mark migration ``name`` applied, as a newer fleet-agent would have."""
    conn = _plain(path)
    try:
        conn.execute("INSERT INTO _migrations VALUES (?, 'now')", (name,))
    finally:
        conn.close()


def unapply_migration(path: str | os.PathLike[str], name: str, table: str, *later: str) -> None:
    """Drop ``table`` and forget migration ``name`` (which made it) and the ``later`` ones that changed it: the
    database as a fleet-agent from before that migration left it."""
    conn = _plain(path)
    try:
        conn.execute(f'DROP TABLE "{table}"')
        for n in (name, *later):
            conn.execute("DELETE FROM _migrations WHERE name = ?", (n,))
    finally:
        conn.close()


def runs_as_before_011(path: str | os.PathLike[str]) -> None:
    """observed_runs as a fleet-agent from before migration 011 left it (no up_s column), with 011 forgotten."""
    conn = _plain(path)
    try:
        conn.execute("ALTER TABLE observed_runs DROP COLUMN up_s")
        conn.execute("DELETE FROM _migrations WHERE name = '011_run_uptime'")
    finally:
        conn.close()


def uptime_forms(path: str | os.PathLike[str]) -> list[tuple[str | None, ...]]:
    """Per tick.started row, how its observation stores the records' up_s: the records' form (an object of
    columns, or the list), the JSON type of up_s when every record shares it, and of its column otherwise."""
    conn = _plain(path)
    try:
        return [tuple(r) for r in conn.execute(
            "SELECT json_type(payload, '$.observation.instances'), json_type(payload, '$.observation.instances.same.up_s'),"
            " json_type(payload, '$.observation.instances.columns.up_s') FROM events WHERE kind = 'tick.started'"
            " ORDER BY seq")]
    finally:
        conn.close()


def event_indexes(path: str | os.PathLike[str]) -> set[str]:
    """The names of the indexes on the events table."""
    conn = _plain(path)
    try:
        return {str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'"
                                                " AND tbl_name = 'events'")}
    finally:
        conn.close()


def indexes_as_before_010(path: str | os.PathLike[str]) -> None:
    """The events table's indexes as a fleet-agent from before migration 010 left them (events_kind_tick over
    every event of a tick, no events_tick_marks), with 010 forgotten."""
    conn = _plain(path)
    try:
        conn.execute("DROP INDEX events_tick_marks")
        conn.execute("CREATE INDEX events_kind_tick ON events(kind, tick) WHERE tick IS NOT NULL")
        conn.execute("DELETE FROM _migrations WHERE name = '010_tick_marks_index'")
    finally:
        conn.close()


class Tamper:
    """A plain connection to the database file with every trigger dropped: events can be edited."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.conn = _plain(path)
        for (name,) in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
            self.conn.execute(f'DROP TRIGGER "{name}"')

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Tamper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def last_seq(self) -> int:
        return int(self.conn.execute("SELECT COALESCE(MAX(seq), 0) FROM events").fetchone()[0])

    def set(self, seq: int, **columns: Any) -> None:
        """Overwrite columns of event ``seq`` (hash left as it was)."""
        sets = ", ".join(f"{c} = ?" for c in columns)
        self.conn.execute(f"UPDATE events SET {sets} WHERE seq = ?", (*columns.values(), seq))

    def replace_in_payload(self, seq: int, old: str, new: str) -> None:
        self.conn.execute("UPDATE events SET payload = replace(payload, ?, ?) WHERE seq = ?", (old, new, seq))

    def delete(self, seq: int) -> None:
        self.conn.execute("DELETE FROM events WHERE seq = ?", (seq,))

    def truncate(self, keep: int) -> None:
        """Delete every event after seq ``keep``."""
        self.conn.execute("DELETE FROM events WHERE seq > ?", (keep,))

    def swap_contents(self, a: int, b: int) -> None:
        """Exchange every column but seq between events ``a`` and ``b``."""
        cols = [c.strip() for c in _ROW.split(",")][1:]
        select = ", ".join(cols)
        row_a = self.conn.execute(f"SELECT {select} FROM events WHERE seq = ?", (a,)).fetchone()
        row_b = self.conn.execute(f"SELECT {select} FROM events WHERE seq = ?", (b,)).fetchone()
        sets = ", ".join(f"{c} = ?" for c in cols)
        self.conn.execute("BEGIN")
        self.conn.execute("UPDATE events SET id = 'tmp-a', hash = 'tmp-a' WHERE seq = ?", (a,))
        self.conn.execute(f"UPDATE events SET {sets} WHERE seq = ?", (*row_a, b))
        self.conn.execute(f"UPDATE events SET {sets} WHERE seq = ?", (*row_b, a))
        self.conn.execute("COMMIT")

    def swap_seqs(self, a: int, b: int) -> None:
        """Exchange the seq numbers of events ``a`` and ``b`` (the rows trade places)."""
        self.conn.execute("UPDATE events SET seq = -1 WHERE seq = ?", (a,))
        self.conn.execute("UPDATE events SET seq = ? WHERE seq = ?", (a, b))
        self.conn.execute("UPDATE events SET seq = ? WHERE seq = -1", (b,))

    def rechain(self, seq: int, edit: Callable[[str], str]) -> None:
        """Rewrite event ``seq``'s payload with ``edit`` and recompute every hash from the start,
        so the chain links up again (only the head file beside the database can tell)."""
        rows = self.conn.execute(f"SELECT {_ROW} FROM events ORDER BY seq").fetchall()
        prev = GENESIS
        self.conn.execute("BEGIN")
        for s, eid, ts, kind, version, source, tick, payload, tokens, _prev, _hash in rows:
            if s == seq:
                payload = edit(payload)
            h = row_hash(s, eid, ts, kind, version, source, tick, payload, tokens, prev)
            self.conn.execute("UPDATE events SET payload = ?, prev_hash = ?, hash = ? WHERE seq = ?",
                              (payload, prev, h, s))
            prev = h
        self.conn.execute("COMMIT")

    def drop_table(self, table: str) -> None:
        """Drop ``table`` (the events themselves, say)."""
        self.conn.execute(f'DROP TABLE "{table}"')

    def create_table(self, table: str) -> None:
        """A table of something else, as another program's database would hold."""
        self.conn.execute(f'CREATE TABLE "{table}" (id INTEGER)')

    def edit_read_model(self, table: str, **columns: Any) -> None:
        """Overwrite columns in every row of read-model ``table`` (the log no longer implies it)."""
        sets = ", ".join(f"{c} = ?" for c in columns)
        self.conn.execute(f"UPDATE {table} SET {sets}", tuple(columns.values()))

    def index_as_before_contentless(self, texts: dict[int, str]) -> None:
        """Put back the full-text index a release before migration 009 kept: a copy of each event's text
        (``texts``: seq -> text) and its kind, with 009 not yet applied."""
        self.conn.execute("BEGIN")
        self.conn.execute("DROP TABLE events_fts")
        self.conn.execute("CREATE VIRTUAL TABLE events_fts USING fts5(text, kind UNINDEXED,"
                          " tokenize = 'porter unicode61')")
        for seq, text in texts.items():
            kind = self.conn.execute("SELECT kind FROM events WHERE seq = ?", (seq,)).fetchone()[0]
            self.conn.execute("INSERT INTO events_fts (rowid, text, kind) VALUES (?,?,?)", (seq, text, kind))
        self.conn.execute("DELETE FROM _migrations WHERE name = '009_contentless_search'")
        self.conn.execute("COMMIT")

    def search_as_before_contentless(self, match: str, limit: int = 20) -> list[tuple[int, str]]:
        """(seq, snippet) newest first as the content-keeping index answered ``match`` (an FTS5 query)."""
        return [(int(s), str(t)) for s, t in self.conn.execute(
            "SELECT rowid, snippet(events_fts, 0, '[', ']', ' … ', 24) FROM events_fts WHERE events_fts MATCH ?"
            " ORDER BY rowid DESC LIMIT ?", (match, limit))]

# ------------------------------------------------------------------ PostgreSQL

PG_TRUNCATE = "TRUNCATE events"


def pg_attempt(url: str, agent_id: str, statement: str) -> None:
    """Run ``statement`` as the URL's role, naming fleet ``agent_id``, with every trigger and grant in place
    (raises what the server raises)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT set_config('fleet_agent.agent_id', %s, false)", [agent_id])
        conn.execute(statement)


def pg_append_lock_free(url: str, agent_id: str) -> bool:
    """Whether another writer could take fleet ``agent_id``'s append lock (its head row) now, without waiting
    (taken and let go at once, on a connection of its own)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT set_config('fleet_agent.agent_id', %s, false)", [agent_id])
        conn.execute("BEGIN")
        try:
            conn.execute("SELECT 1 FROM fleets WHERE agent_id = %s FOR UPDATE NOWAIT", [agent_id])
        except psycopg.errors.LockNotAvailable:
            return False
        finally:
            conn.execute("ROLLBACK")
    return True


def sqlite_write_lock_free(path: str | os.PathLike[str]) -> bool:
    """Whether another writer could take the SQLite log's write lock now, without waiting at all (busy timeout
    0; taken and let go at once, on a connection of its own)."""
    conn = sqlite3.connect(str(path), isolation_level=None, timeout=0)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()


def hold_sqlite_write_lock(path: str | os.PathLike[str]) -> subprocess.Popen[str]:
    """Another process holding the SQLite log's write lock (an open write transaction) until it is killed,
    as a writer suspended mid-transaction does; returns once the lock is held."""
    code = "import sys; from tests.tamper import _hold_write_lock; _hold_write_lock(sys.argv[1])"
    p = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True,
                         cwd=Path(__file__).resolve().parents[1])
    assert p.stdout is not None and p.stdout.readline().strip() == "held", "the lock holder failed"
    return p


def _hold_write_lock(path: str) -> None:
    conn = sqlite3.connect(path, isolation_level=None, timeout=60)
    conn.execute("BEGIN IMMEDIATE")
    print("held", flush=True)
    while True:
        time.sleep(3600)


def edit_read_model(log: Any, table: str, **columns: Any) -> None:
    """Overwrite columns in every row of read-model ``table`` of ``log``'s fleet, on either backend (on
    PostgreSQL as the log's own role, which may write the read models)."""
    if not getattr(log, "is_pg", False):
        with Tamper(log.path) as t:
            t.edit_read_model(table, **columns)
        return
    import psycopg

    with psycopg.connect(log.target.url, autocommit=True) as conn:
        conn.execute("SELECT set_config('fleet_agent.agent_id', %s, false)", [log.target.agent_id])
        conn.execute(f"UPDATE {table} SET " + ", ".join(f"{c} = %s" for c in columns), list(columns.values()))


class PgTamper:
    """The database's superuser, triggers off for the session: one fleet's events can be edited."""

    def __init__(self, superuser_dsn: str, agent_id: str) -> None:
        import psycopg

        self.conn = psycopg.connect(superuser_dsn, autocommit=True)
        self.conn.execute("SET session_replication_role = replica")  # user triggers do not fire
        self.agent_id = agent_id

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> PgTamper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def replace_in_payload(self, seq: int, old: str, new: str) -> None:
        self.conn.execute("UPDATE events SET payload = replace(payload, %s, %s) WHERE agent_id = %s AND seq = %s",
                          [old, new, self.agent_id, seq])

    def delete(self, seq: int) -> None:
        self.conn.execute("DELETE FROM events WHERE agent_id = %s AND seq = %s", [self.agent_id, seq])

    def runs_as_before_005(self) -> None:
        """observed_runs as a fleet-agent from before migration 005 left it (no up_s column), 005 forgotten."""
        self.conn.execute("ALTER TABLE observed_runs DROP COLUMN up_s")
        self.conn.execute("DELETE FROM _migrations WHERE name = '005_run_uptime'")


def roll_back_whole_transaction_on(path: str | os.PathLike[str], marker: str) -> None:
    """A trigger in the SQLite log that makes the database itself roll back the whole open transaction
    (``RAISE(ROLLBACK)``) when an event whose payload holds ``marker`` is inserted, as some I/O and disk-full
    errors do: the savepoint of a joined transaction is gone with it."""
    conn = _plain(path)
    try:
        conn.execute(f"CREATE TRIGGER roll_back_on_marker BEFORE INSERT ON events WHEN instr(NEW.payload, "
                     f"'{marker}') > 0 BEGIN SELECT RAISE(ROLLBACK, 'the whole transaction is rolled back'); END")
    finally:
        conn.close()
