"""The event log's recorder for a fleet in a PostgreSQL database (agent/store/pg.py connects and migrates).

Its statements are written for PostgreSQL (``%s`` placeholders) and run as they are. An append locks the
fleet's head row (``fleets``: last seq and hash) for its transaction, sends its statements through a
pipeline and moves the head in the same transaction, so the head is one row read by its key, whatever
the events table's statistics say. The log has no
tiers here (every event stays in its table), and reads go by pages of LIMIT, as a client-side cursor would
hold every row of a statement at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from agent.config import PgTarget
from agent.errors import LogError
from agent.events import Event
from agent.store import search
from agent.store.chain import COLS, row_to_event
from agent.store.pg import PgConnection, connect
from agent.store.recorder import Filter, Recorder, Render, Row
from agent.store.segment_types import Segment

INSERT_EVENT = f"INSERT INTO events ({COLS}) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)"
HEAD = "SELECT head_seq, head_hash FROM fleets WHERE agent_id = %s"
MOVE_HEAD = "UPDATE fleets SET head_seq = %s, head_hash = %s WHERE agent_id = %s"
ROW_AT = f"SELECT {COLS} FROM events WHERE seq = %s"
PAGE_AFTER = f"SELECT {COLS} FROM events WHERE seq > %s ORDER BY seq LIMIT %s"
COUNT = "SELECT COUNT(*) FROM events"
SNAPSHOT = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
FTS_HEAD = "SELECT seq FROM events_fts ORDER BY seq DESC LIMIT 1"
FTS_INSERT = "INSERT INTO events_fts (seq, text, kind) VALUES (%s,%s,%s)"
HEADLINES = ("SELECT seq, ts_headline('english', text, q, 'StartSel=[, StopSel=], MaxWords=24, MinWords=8,"
             " MaxFragments=2, FragmentDelimiter=\" … \"') FROM events_fts, plainto_tsquery('english', %s) q"
             " WHERE tsv @@ q")


class PgRows:
    """The rows of a fleet's log as one connection sees them (no segments: the events table holds them all)."""

    def __init__(self, conn: PgConnection) -> None:
        self.conn = conn

    def segments(self) -> list[Segment]:
        return []

    def segment_rows(self, seg: Segment) -> list[Row]:
        raise LogError(f"segment {seg.name}: a PostgreSQL log keeps no segments")

    def kept(self, upto: int) -> dict[int, Row]:
        return {}

    def pages(self, since: int, size: int = 2000) -> Iterator[list[Row]]:
        last = since
        while rows := self.conn.run(PAGE_AFTER, (last, size)).fetchall():
            yield rows
            last = rows[-1][0]

    def last_seq(self) -> int:
        last = self.conn.run(HEAD, (self.conn.target.agent_id,)).fetchone()
        return int(last[0]) if last else 0

    def row_at(self, seq: int, *, fresh: bool = False) -> Row | None:
        r = self.conn.run(ROW_AT, (seq,)).fetchone()
        return tuple(r) if r is not None else None


class PgRecorder(Recorder):
    """A fleet's log in a PostgreSQL database (row-level security keeps every statement to the fleet)."""

    dialect = "postgresql"
    warns_missing_head = False

    def __init__(self, target: PgTarget, *, readonly: bool, create: bool, beside: str) -> None:
        self.target = target
        self.file = None
        self.beside = beside
        self.conn: PgConnection = connect(target, readonly=readonly, create=create)
        self.rows = PgRows(self.conn)

    def begin(self) -> tuple[int, str] | None:
        seq, hash_ = self.conn.begin_append()
        return (seq, hash_) if seq and hash_ else None

    def commit(self) -> None:
        self.conn.end_pipeline(commit=True)
        self.conn.run("COMMIT")

    def rollback(self) -> None:
        self.conn.end_pipeline(commit=False)
        if self.conn.in_transaction:
            self.conn.run("ROLLBACK")

    def sync(self) -> None:
        # A daemon's append: its pipelined statements go out now, so a daemon suspended before the commit
        # leaves its session idle in the transaction, which the server ends
        # (agent.store.pglock.bound_idle_transactions) instead of keeping the fleet's append lock.
        self.conn.sync()

    def insert(self, rows: Iterable[Row]) -> None:
        rows = list(rows)
        if not rows:
            return
        self.conn.run_many(INSERT_EVENT, rows)
        last = rows[-1]
        self.conn.run(MOVE_HEAD, (last[0], last[-1], self.target.agent_id))

    def head(self) -> tuple[int, str] | None:
        row = self.conn.run(HEAD, (self.target.agent_id,)).fetchone()
        return (int(row[0]), row[1]) if row and row[0] else None

    def row_at(self, seq: int) -> Row | None:
        return self.rows.row_at(seq)

    def segments(self) -> list[Segment]:
        return []

    def count(self) -> int:
        row = self.conn.run(COUNT).fetchone()
        return int(row[0]) if row else 0

    @contextmanager
    def snapshot(self) -> Iterator[PgRows]:
        conn = connect(self.target, readonly=True, create=False)
        try:
            conn.run(SNAPSHOT)
            yield PgRows(conn)
        finally:
            conn.close()

    def read(self, q: Filter, *, limit: int | None = None, newest_first: bool = False) -> Iterator[Row]:
        """Pages of 500 by seq."""
        where, params = q.where(after=0, mark="%s")
        bound: int | None = None
        left = limit
        while left is None or left > 0:
            extra = "" if bound is None else f" AND seq {'<' if newest_first else '>'} %s"
            size = 500 if left is None else min(500, left)
            sql = (f"SELECT {COLS} FROM events WHERE {where}{extra} "
                   f"ORDER BY seq {'DESC' if newest_first else 'ASC'} LIMIT %s")
            rows = self.conn.run(sql, [*params, *([] if bound is None else [bound]), size]).fetchall()
            yield from rows
            if len(rows) < size:
                return
            bound = rows[-1][0]
            left = None if left is None else left - len(rows)

    # ------------------------------------------------------------------ the full-text index (tsvector)

    def index_head(self) -> int:
        row = self.conn.run(FTS_HEAD).fetchone()
        return row[0] if row else 0

    def index_upto(self, done: int, head: int, render: Render | None) -> int:
        """1,000 rows a statement. The index keeps the text, for ``ts_headline``."""
        n = 0
        while done < head:
            rows = self.conn.run(PAGE_AFTER, (done, 1000)).fetchall()
            if not rows:
                break
            self.conn.run_many(FTS_INSERT, [(r[0], search.fts_text(search.search_text(r, render), True), r[3])
                                            for r in rows])
            done, n = rows[-1][0], n + len(rows)
        return n

    def reindex(self, rows: Iterator[Row]) -> None:
        """Nothing: the index is append-only like the log; ``log migrate`` builds it again."""

    def search(self, terms: list[str], words: list[str], query: str, *, limit: int,
               until_seq: int | None) -> list[tuple[Event, str]]:
        """Every term must match (tsvector, GIN index), with the same snippet marks as SQLite's."""
        import psycopg

        text = " ".join(terms)
        sql = HEADLINES + (" AND seq <= %s" if until_seq is not None else "") + " ORDER BY seq DESC LIMIT %s"
        params: list[Any] = [text] + ([until_seq] if until_seq is not None else []) + [limit]
        try:
            rows = self.conn.run(sql, params).fetchall()
        except psycopg.Error as e:
            raise LogError(f"search query {text!r} could not run: {e}") from e
        return [(row_to_event(hit), snip) for seq, snip in rows if (hit := self.row_at(seq)) is not None]
