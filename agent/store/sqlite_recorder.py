"""The event log's recorder for a SQLite file: one ``events`` table, sealed months in segment files.

Every append runs in a ``BEGIN IMMEDIATE`` transaction, so the daemon and operator CLI processes can append to
the same file at once. Reads go through the sealed segments (agent/store/archive.py) and the events table
as one sequence.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from agent.errors import LogError
from agent.events import Event
from agent.store import search
from agent.store.chain import COLS, row_to_event
from agent.store.db import connect, sqlite3
from agent.store.queries import Store
from agent.store.recorder import Filter, Recorder, Render, Row
from agent.store.segment_types import Segment

INSERT_EVENT = f"INSERT INTO events ({COLS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)"
HEAD = "SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1"
ROW_AT = f"SELECT {COLS} FROM events WHERE seq = ?"
ROWS_UPTO = f"SELECT {COLS} FROM events WHERE seq <= ?"
ROWS_AFTER = f"SELECT {COLS} FROM events WHERE seq > ? ORDER BY seq"
INDEX_PAGE = f"SELECT {COLS} FROM events WHERE seq > ? ORDER BY seq LIMIT 1000"
COUNT = "SELECT COUNT(*) FROM events"
FTS_HEAD = "SELECT rowid FROM events_fts ORDER BY rowid DESC LIMIT 1"
FTS_INSERT = "INSERT INTO events_fts (rowid, text) VALUES (?,?)"
FTS_CLEAR = "INSERT INTO events_fts (events_fts) VALUES ('delete-all')"
FTS_MATCH = "SELECT rowid FROM events_fts WHERE events_fts MATCH ?"


def _batches(first: list[Any], cur: Any) -> Iterator[Row]:
    rows = first
    while rows:
        yield from rows
        rows = cur.fetchmany(500)


class SqliteRows:
    """The rows of a SQLite log as one connection sees them: the sealed segments and the events table."""

    def __init__(self, conn: sqlite3.Connection, files: SqliteRecorder) -> None:
        self.conn = conn
        self.files = files

    def segments(self) -> list[Segment]:
        return Store(self.conn).segments()

    def segment_rows(self, seg: Segment) -> list[Row]:
        return self.files.segment_files.rows(seg, fresh=True)

    def kept(self, upto: int) -> dict[int, Row]:
        return {r[0]: tuple(r) for r in self.conn.execute(ROWS_UPTO, (upto,))}

    def pages(self, since: int) -> Iterator[list[Row]]:
        cur = self.conn.execute(ROWS_AFTER, (since,))
        while rows := cur.fetchmany(2000):
            yield rows

    def last_seq(self) -> int:
        last = self.conn.execute(HEAD).fetchone()
        return last[0] if last else 0

    def row_at(self, seq: int, *, fresh: bool = False) -> Row | None:
        """The row at ``seq``: from the events table, else from the segment that archived it."""
        r = self.conn.execute(ROW_AT, (seq,)).fetchone()
        if r is not None:
            return tuple(r)
        seg = next((s for s in self.segments() if s.first_seq <= seq <= s.last_seq), None)
        if seg is None:
            return None
        rows = self.files.segment_files.rows(seg, fresh=fresh)
        i = seq - seg.first_seq
        return rows[i] if 0 <= i < len(rows) and rows[i][0] == seq else None


class SqliteRecorder(Recorder):
    """A log in one SQLite file (``path``), its archived months in segment files beside it."""

    dialect = "sqlite"
    warns_missing_head = True

    def __init__(self, path: str, *, readonly: bool, create: bool) -> None:
        self.file = self.beside = path
        self.conn = connect(path, readonly=readonly, create=create)
        self.rows = SqliteRows(self.conn, self)

    def begin(self) -> tuple[int, str] | None:
        self.conn.execute("BEGIN IMMEDIATE")
        return self.head()

    def commit(self) -> None:
        self.conn.execute("COMMIT")

    def sync(self) -> None:
        """Nothing: every statement has run by the time it returns."""

    def insert(self, rows: Iterable[Row]) -> None:
        self.conn.executemany(INSERT_EVENT, rows)

    def head(self) -> tuple[int, str] | None:
        row = self.conn.execute(HEAD).fetchone()
        return (row[0], row[1]) if row else None

    def row_at(self, seq: int) -> Row | None:
        return self.rows.row_at(seq)

    def segments(self) -> list[Segment]:
        return self.rows.segments()

    def count(self) -> int:
        segs = self.segments()
        if not segs:
            return int(self.conn.execute(COUNT).fetchone()[0])
        return sum(s.events for s in segs) + Store(self.conn).hot_events_after(segs[-1].last_seq)

    def others_version(self) -> int | None:
        """SQLite's ``PRAGMA data_version``."""
        return Store(self.conn).data_version()

    def file_ident(self) -> tuple[int, int] | None:
        assert self.file is not None
        try:
            st = os.stat(self.file)
        except OSError:
            return None
        return st.st_dev, st.st_ino

    @contextmanager
    def snapshot(self) -> Iterator[SqliteRows]:
        conn = connect(self.file or "", readonly=True, create=False)
        try:
            yield SqliteRows(conn, self)
        finally:
            conn.close()

    def read(self, q: Filter, *, limit: int | None = None, newest_first: bool = False) -> Iterator[Row]:
        """The one iteration over the log's rows: the sealed segments and the events table, as one sequence.

        The stubs are read again once the events query has started: an archive that committed in between
        is then read from its segments, and rows the query still saw are not given twice: an archive that
        moved the bound since makes the read start again."""
        before = self.segments()
        bound = before[-1].last_seq if before else 0
        where, params = q.where(after=bound, mark="?")
        sql = f"SELECT {COLS} FROM events WHERE {where} ORDER BY seq {'DESC' if newest_first else 'ASC'}"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        cur = self.conn.execute(sql, params)
        first = cur.fetchmany(500)
        segs = self.segments()
        if (segs[-1].last_seq if segs else 0) != bound:  # an archive committed since the stubs were read
            cur.close()
            yield from self.read(q, limit=limit, newest_first=newest_first)
            return
        if not segs:
            yield from _batches(first, cur)
            return
        hot_from = segs[-1].last_seq
        hot = (r for r in _batches(first, cur) if r[0] > hot_from)
        wanted = [s for s in segs if q.may_hold(s)]
        cold = self._cold(wanted[::-1] if newest_first else wanted, q, newest_first=newest_first)
        both = itertools.chain(hot, cold) if newest_first else itertools.chain(cold, hot)
        yield from (both if limit is None else itertools.islice(both, limit))

    def _cold(self, segs: list[Segment], q: Filter, *, newest_first: bool) -> Iterator[Row]:
        """The rows of ``segs`` that ``q`` matches: the seq bounds pick a slice (a segment's rows are
        consecutive seqs) and the kinds go through the segment's kind index, so a lookup reads what it asks
        for, not the whole month."""
        for seg in segs:
            rows = self.segment_files.rows(seg)
            lo = max(0, q.since + 1 - seg.first_seq)
            hi = len(rows) if q.until_seq is None else max(lo, min(len(rows), q.until_seq - seg.first_seq + 1))
            picks: Iterable[int] = range(lo, hi)
            if q.kinds is not None:
                picks = self.segment_files.positions(seg, q.kinds, lo, hi)
            for i in (reversed(list(picks)) if newest_first else picks):
                r = rows[i]
                if q.matches(r):
                    yield r

    # ------------------------------------------------------------------ the full-text index (FTS5)

    def index_head(self) -> int:
        row = self.conn.execute(FTS_HEAD).fetchone()
        return row[0] if row else 0

    def index_upto(self, done: int, head: int, render: Render | None) -> int:
        """1,000 rows a statement. The index keeps no copy of the text (content=''): ``search`` renders the
        hits it shows again."""
        n = 0
        while done < head:
            rows = self.conn.execute(INDEX_PAGE, (done,)).fetchall()
            if not rows:
                break
            self.conn.executemany(FTS_INSERT, [(r[0], search.search_text(r, render)) for r in rows])
            done, n = rows[-1][0], n + len(rows)
        return n

    def reindex(self, rows: Iterator[Row]) -> None:
        """Every event, archived months included (``rows``: the log's, segments and all)."""
        self.conn.execute(FTS_CLEAR)
        batch: list[tuple[int, str]] = []
        for r in rows:
            batch.append((r[0], search.search_text(r)))
            if len(batch) >= 1000:
                self.conn.executemany(FTS_INSERT, batch)
                batch = []
        if batch:
            self.conn.executemany(FTS_INSERT, batch)

    def search(self, terms: list[str], words: list[str], query: str, *, limit: int,
               until_seq: int | None) -> list[tuple[Event, str]]:
        """FTS5 finds the candidates by their words; the snippets come from the query itself over their texts."""
        match = " ".join(f'"{t}"' for t in terms)  # each term a phrase: "destroy_instance" is two words in a row
        loose = " ".join(f'"{w}"' for w in words)  # the index (detail=none) knows words, not their order
        out: list[tuple[Event, str]] = []
        below = until_seq
        while len(out) < limit:
            batch = self._candidates(query, loose, below, max(limit, 50))
            texts = [(r[0], search.search_text(r)) for r in batch]
            snips = search.snippets(match, texts)  # the events that match the query itself, with their snippets
            out += [(row_to_event(r), snips[r[0]]) for r in batch if r[0] in snips]
            if len(batch) < max(limit, 50):
                break
            below = batch[-1][0] - 1
        return out[:limit]

    def _candidates(self, query: str, loose: str, below: int | None, n: int) -> list[Row]:
        """The newest ``n`` events (seq <= ``below``) holding every word of the query, newest first."""
        sql = FTS_MATCH + (" AND rowid <= ?" if below is not None else "") + " ORDER BY rowid DESC LIMIT ?"
        params: list[Any] = [loose] + ([below] if below is not None else []) + [n]
        try:
            seqs = [r[0] for r in self.conn.execute(sql, params).fetchall()]
        except sqlite3.OperationalError as e:
            raise LogError(f"search query {query!r} could not run: {e}") from e
        rows = [self.row_at(seq) for seq in seqs]  # an archived event from its segment
        return [r for r in rows if r is not None]
