"""The event log: append (hash-chained), read, follow, verify, export, search.

One append-only table in SQLite (schema.sql). Every append runs in a
``BEGIN IMMEDIATE`` transaction, so the daemon and operator CLI processes can
append to the same file at once; read models (agent/readmodels.py) change in
the same transaction as the event that changes them. Each row's hash covers its
canonical content and the previous row's hash, so any edit, deletion or
reordering shows up in ``verify()``; a head file kept beside the database lets
``verify()`` notice truncation of the newest rows too.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import IO, Any

from agent import events as ev
from agent.config import PgTarget, path_text
from agent.errors import ChainBroken, LogError, PayloadError, optional_import
from agent.events import Event
from agent.events.canonical import canonical
from agent.store import readmodels, search
from agent.store.chain import COLS as _COLS
from agent.store.chain import GENESIS as GENESIS
from agent.store.chain import VerifyReport as VerifyReport
from agent.store.chain import anchor_mismatch, bad_row, read_head, stub_mismatch, write_head
from agent.store.chain import row_hash as row_hash
from agent.store.chain import row_to_event as _row_to_event
from agent.store.db import connect, immediate, sqlite3
from agent.store.db import db_errors as db_errors
from agent.store.queries import Store
from agent.store.rows import Instance, InstanceState
from agent.store.segment_types import Segment
from agent.store.segments import SegmentFiles
from agent.times import utc_ts
from agent.tokens import Tokenizer

_INSERT_EVENT = f"INSERT INTO events ({_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)"
_HEAD_SQL = "SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1"
# The checkpoint file is rewritten (fsync'd) once verification has moved this many events past what it records;
# in between, the process remembers how far it verified. A start after a crash walks at most this many more.
CHECKPOINT_EVERY = 2000
Item = tuple[str, "dict[str, Any]", str, "int | None"]


def _utc_now() -> datetime:
    """The log's clock unless it is given another: now, in UTC."""
    return datetime.now(UTC)


def new_event_id() -> str:
    """A random (version 4) UUID as text."""
    return str(uuid.uuid4())


def _batches(first: list[Any], cur: Any) -> Iterator[tuple[Any, ...]]:
    rows = first
    while rows:
        yield from rows
        rows = cur.fetchmany(500)


@dataclass(frozen=True)
class _Filter:
    """What ``EventLog.read`` asks for, as SQL for the events table and as a test for archived rows."""

    since: int
    until_seq: int | None
    until_ts: str | None
    since_ts: str | None
    kinds: frozenset[str] | None
    tick: int | None

    def where(self, *, after: int) -> tuple[str, list[Any]]:
        where: list[str] = ["seq > ?"]
        params: list[Any] = [max(self.since, after)]
        for cond, value in (("seq <= ?", self.until_seq), ("ts <= ?", self.until_ts), ("ts >= ?", self.since_ts),
                            ("tick = ?", self.tick)):
            if value is not None:
                where.append(cond)
                params.append(value)
        if self.kinds:
            ks = sorted(self.kinds)
            where.append(f"kind IN ({','.join('?' * len(ks))})")
            params.extend(ks)
        return " AND ".join(where), params

    def may_hold(self, seg: Segment) -> bool:
        return seg.may_hold(since=self.since, until_seq=self.until_seq, since_ts=self.since_ts,
                            until_ts=self.until_ts, kinds=self.kinds, tick=self.tick)

    def matches(self, r: tuple[Any, ...]) -> bool:
        seq, ts = r[0], r[2]
        return (seq > self.since and (self.until_seq is None or seq <= self.until_seq)
                and (self.until_ts is None or ts <= self.until_ts) and (self.since_ts is None or ts >= self.since_ts)
                and (self.kinds is None or r[3] in self.kinds) and (self.tick is None or r[6] == self.tick))


def _pages(conn: Any, sql: str, since: int, size: int, *, paged: bool) -> Iterator[list[Any]]:
    """Rows of ``sql`` (which ends in "seq > ?") in seq order, ``size`` at a time: one statement fetched
    in chunks, or (``paged``: PostgreSQL, whose client-side cursor holds every row) one LIMIT per page."""
    if not paged:
        cur = conn.execute(sql + " ORDER BY seq", (since,))
        while rows := cur.fetchmany(size):
            yield rows
        return
    last = since
    while rows := conn.execute(sql + " ORDER BY seq LIMIT ?", (last, size)).fetchall():
        yield rows
        last = rows[-1][0]


class Transaction:
    """An open BEGIN IMMEDIATE transaction: read, then append, atomically."""

    def __init__(self, log: EventLog, conn: sqlite3.Connection, head: tuple[int, str]) -> None:
        self.log = log
        self.conn = conn
        self._seq, self._hash = head
        self.appended: list[Event] = []
        self.after: list[Callable[[], object]] = []  # to run once this commits (``EventLog.after_commit``)

    @cached_property
    def store(self) -> Store:
        """The queries, inside this transaction: they see what it appended so far."""
        return Store(self.conn)

    def append(self, kind: str, payload: dict[str, Any], source: str, tick: int | None = None) -> Event:
        """Validate, encode, hash, insert and apply to the read models.

        Tokens are not counted here: the projection counts a message the first time it renders it
        (``agent.context.cache``), so ``tokens`` is NULL on every event this version appends; rows
        written by older versions keep the count they were hashed with. Nor is the event rendered
        for the full-text index here: ``index_search`` does that for every event not yet indexed
        (a search first, and the daemon once a tick, in the tick's last transaction)."""
        return self.extend([(kind, payload, source, tick)])[0]

    def extend(self, items: Iterable[Item]) -> list[Event]:
        """``append`` each item; nothing is inserted unless every item is valid."""
        rows: list[tuple[Any, ...]] = []
        events: list[Event] = []
        seq, prev = self._seq, self._hash
        # On the system clock the events of one call share one timestamp (they are appended in one act); a
        # clock the log was given (a simulation's, a test's) is read for each event.
        clock = self.log.clock
        now = clock() if clock is _utc_now else None
        for kind, payload, source, tick in items:
            e, text = _new_event(kind, payload, source, tick, seq + 1, prev, now or clock())
            rows.append((e.seq, e.id, e.ts, e.kind, e.version, e.source, e.tick, text, None, e.prev_hash, e.hash))
            events.append(e)
            seq, prev = e.seq, e.hash
        if not events:
            return events
        self.conn.executemany(_INSERT_EVENT, rows)
        readmodels.apply_many(self.conn, events)
        self._seq, self._hash = events[-1].seq, events[-1].hash
        self.appended.extend(events)
        self._sync_if_fenced()
        return events

    def _sync_if_fenced(self) -> None:
        if self.log.fence is not None and (sync := getattr(self.conn, "sync", None)) is not None:
            # A daemon's append on PostgreSQL: its pipelined statements go out now, so a daemon suspended
            # before the commit leaves its session idle in the transaction, which the server ends
            # (agent.store.pglock.bound_idle_transactions) instead of keeping the fleet's append lock.
            sync()

    def index_search(self, render: Callable[[Event], dict[str, Any] | None] | None = None) -> int:
        """Add to the full-text index every event it does not hold yet, in seq order; how many.

        The index holds a prefix of the log (rowid = seq): appends leave it behind and this brings
        it up to the head, rendering each event once (``render``: a renderer that gives exactly
        ``agent.events.render``'s message, such as a projection cache's, which has most of a tick's
        events already). An event that does not render is indexed by its kind and payload, as an
        invisible one is."""
        pg = self.log.is_pg
        row = self.conn.execute(search.FTS_HEAD_SQL_PG if pg else search.FTS_HEAD_SQL).fetchone()
        return search.index_from(self.conn, row[0] if row else 0, self._seq, pg=pg, render=render)


def _new_event(kind: str, payload: dict[str, Any], source: str, tick: int | None, seq: int, prev: str,
               now: datetime) -> tuple[Event, str]:
    """The event ``payload`` appended as the current version of ``kind`` at ``seq`` after ``prev`` makes,
    and its row's payload text (PayloadError when it does not fit)."""
    k = ev.kind(kind)
    current = k.versions[-1]
    if source not in ev.SOURCES:
        raise PayloadError(f"{kind}: unknown source {source!r}; one of {', '.join(ev.SOURCES)}")
    k.validate(payload)
    text = canonical(payload)
    body = json.loads(text)  # the event's own copy, equal to what reading its row back gives
    if current.stored is not None:  # the row holds the version's smaller form; readers get ``body``
        text = canonical(current.stored.encode(body))
    eid, ts = new_event_id(), utc_ts(now)
    h = row_hash(seq, eid, ts, kind, current.number, source, tick, text, None, prev)
    return Event(seq=seq, id=eid, ts=ts, kind=kind, version=current.number, source=source, tick=tick,
                 payload=body, tokens=None, prev_hash=prev, hash=h), text


class EventLog:
    """The append-only log in one SQLite file."""

    def __init__(self, path: str | os.PathLike[str] | PgTarget, *, encoding: str = "cl100k_base", encoding_file: str | None = None,
                 encoding_sha256: str | None = None, clock: Callable[[], datetime] | None = None,
                 readonly: bool = False, head_file: str | os.PathLike[str] | None = None,
                 create: bool = True) -> None:
        """Open the log at ``path`` (a SQLite file, or a fleet in a PostgreSQL database: ``PgTarget``). With
        ``create=False`` (every command but ``init``, and the daemon) a missing, empty or foreign database is
        refused instead of starting a new history."""
        self.target = path if isinstance(path, PgTarget) else None
        # The file and its companions are kept as text: pathlib loads only when a Path is asked for (below).
        self._file = None if isinstance(path, PgTarget) else path_text(os.fspath(path))
        self._head: str | None
        self._checkpoint: str | None
        if self._file is not None:
            self._head = path_text(os.fspath(head_file)) if head_file else self._file + ".head"
            self._checkpoint = self._file + ".verified"
        else:
            assert self.target is not None
            named = head_file or self.target.head_file
            self._head = path_text(os.fspath(named)) if named else None
            cp = self.target.checkpoint_file
            self._checkpoint = None if cp is None else os.fspath(cp)
        self.is_pg = self.target is not None
        self.conn: Any = self._connect(readonly=readonly, create=create and not readonly)
        self.clock = clock or _utc_now
        self._enc = (encoding, encoding_file, encoding_sha256)
        self._tokenizer: Tokenizer | None = None
        self._opened_ident = self._file_ident()  # the file this connection reads (follow notices a move)
        self.readonly = readonly
        self._head_fd: int | None = None
        self._held: list[Item] | None = None  # appends held for the next commit (see ``holding``)
        self._open: tuple[Transaction, int] | None = None  # the transaction in progress and its thread
        self._verified: tuple[int, str] | None = None  # the (seq, hash) this process's last verification reached
        self._filed: int | None = None  # the seq the checkpoint file records, as last read or written here
        # Called inside every transaction that appends, just before it commits; raising rolls it back.
        # The daemon sets it to its leadership check (agent.runtime.leader), so a daemon that lost the lock
        # appends nothing.
        self.fence: Callable[[], None] | None = None

    @cached_property
    def path(self) -> Path | PgTarget:
        """The SQLite file (a ``Path``), or the ``PgTarget``."""
        if self._file is None:
            assert self.target is not None
            return self.target
        from pathlib import Path

        return Path(self._file)

    @cached_property
    def head_file(self) -> Path | None:
        """The file that records the newest seq and hash outside the database (None: a PostgreSQL log
        with no state directory)."""
        from pathlib import Path

        return None if self._head is None else Path(self._head)

    @cached_property
    def checkpoint_file(self) -> Path | None:
        """The file that records how far verification reached (None as for ``head_file``)."""
        from pathlib import Path

        return None if self._checkpoint is None else Path(self._checkpoint)

    def _connect(self, *, readonly: bool, create: bool) -> Any:
        """A connection to the log's database: the SQLite file's, or a PostgreSQL one naming the fleet."""
        if self._file is not None:
            return connect(self._file, readonly=readonly, create=create)
        optional_import("psycopg", "postgres", "storage.url: postgresql://…")
        from agent.store import pg

        assert self.target is not None
        return pg.connect(self.target, readonly=readonly, create=create)

    def _snapshot_conn(self) -> Any:
        """A fresh read-only connection reading one snapshot (verify walks it while others append)."""
        conn = self._connect(readonly=True, create=False)
        if self.is_pg:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        return conn

    @cached_property
    def store(self) -> Store:
        """Every query against the log's read models (and the few against the events themselves)."""
        return Store(self.conn)

    @property
    def in_transaction(self) -> bool:
        """True while a transaction block is open on this log's connection."""
        return bool(self.conn.in_transaction)

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            from agent.tokens import get_tokenizer

            self._tokenizer = get_tokenizer(*self._enc)
        return self._tokenizer

    def close(self) -> None:
        if self._verified is not None and self._verified[0] > (self._filed or 0):
            self._write_checkpoint(*self._verified)  # how far this process verified, for the next start
        if self._head_fd is not None:
            os.close(self._head_fd)
            self._head_fd = None
        self.conn.close()

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ writing

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """Read and append atomically; every event appended commits together or not at all.
        Events held by ``append_held`` are appended first, in the same transaction.

        Inside a transaction this thread opened on this log, a transaction joins it (as a savepoint:
        an exception rolls back the inner block alone) and commits with it, so a caller can group
        what several steps append into one commit (one fsync)."""
        if self.readonly:
            raise LogError("this log was opened read-only")
        outer = self._open
        if outer is not None and outer[1] == threading.get_ident():
            with self._joined(outer[0]) as tx:
                yield tx
            return
        held, self._held = self._held or [], ([] if self._held is not None else None)
        try:
            tx = self._begin()
            try:
                if held:
                    tx.extend(held)
                yield tx
                self._commit(tx)
            except BaseException:
                self._undo()
                raise
        except BaseException as e:
            if held and self._held is not None:
                self._held[:0] = held  # not committed: still held, still first
            self._raise_written(e)
            raise
        self._committed(tx)

    def _begin(self) -> Transaction:
        """BEGIN IMMEDIATE and the transaction, open on this thread."""
        self.conn.execute("BEGIN IMMEDIATE")
        row = self.conn.execute(_HEAD_SQL).fetchone()
        tx = Transaction(self, self.conn, (row[0], row[1]) if row else (0, GENESIS))
        self._open = (tx, threading.get_ident())
        return tx

    def _commit(self, tx: Transaction) -> None:
        """The fence (when ``tx`` appended), then COMMIT."""
        try:
            if tx.appended and self.fence is not None:
                self.fence()
        finally:
            self._open = None
        self.conn.execute("COMMIT")

    def _undo(self) -> None:
        """Roll back the transaction ``_begin`` opened, if SQLite has not already (a failed COMMIT, some
        I/O errors)."""
        self._open = None
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")

    def _raise_written(self, e: BaseException) -> None:
        """LogError (the driver's message, secrets scrubbed) for a database error ``e``; nothing for others."""
        if isinstance(e, db_errors()):
            from agent.secrets import scrub

            raise LogError(f"the event log at {self.path} could not be written: {scrub(str(e))}") from e

    def _committed(self, tx: Transaction) -> None:
        """After ``tx`` committed: the head file, then what was to run once it did."""
        if tx.appended:
            self._write_head(tx.appended[-1])
        for fn in tx.after:
            fn()

    @contextmanager
    def _joined(self, tx: Transaction) -> Iterator[Transaction]:
        """A transaction inside ``tx``: a savepoint; on an exception the block's appends (and the
        held events it took) are undone and ``tx`` goes on as it was."""
        seq, h, n, m = tx._seq, tx._hash, len(tx.appended), len(tx.after)
        held, self._held = self._held or [], ([] if self._held is not None else None)
        self.conn.execute("SAVEPOINT joined")
        try:
            if held:
                tx.extend(held)
            yield tx
            self.conn.execute("RELEASE joined")
        except BaseException as e:
            if self.conn.in_transaction:  # SQLite may have rolled the whole transaction back already
                self.conn.execute("ROLLBACK TO joined")
                self.conn.execute("RELEASE joined")
            tx._seq, tx._hash = seq, h
            del tx.appended[n:], tx.after[m:]
            if held and self._held is not None:
                self._held[:0] = held
            if isinstance(e, sqlite3.Error):
                raise LogError(f"the event log at {self.path} could not be written: {e}") from e
            raise

    def after_commit(self, fn: Callable[[], object]) -> None:
        """Run ``fn`` once the transaction this thread has open on this log commits (not at all if it
        rolls back); at once when none is open."""
        outer = self._open
        if outer is not None and outer[1] == threading.get_ident():
            outer[0].after.append(fn)
        else:
            fn()

    def check_fence(self) -> None:
        """Raise what ``fence`` raises (a lost leadership) before a side effect; nothing when unset."""
        if self.fence is not None:
            self.fence()

    @contextmanager
    def holding(self) -> Iterator[None]:
        """Inside the block, ``append_held`` keeps its events for the next commit instead of committing
        them alone: the next transaction on this log appends them first, and the block's end commits
        what is left. For events nothing reads or acts on before the block ends (a read-only tool call's
        intent and result); everything else commits as it is appended."""
        if self._held is not None:
            yield
            return
        self._held = []
        try:
            yield
        finally:
            if self._held:
                with self.transaction():
                    pass
            self._held = None

    def append_held(self, items: Iterable[Item]) -> None:
        """Append ``items`` in one transaction, or, inside ``holding``, keep them (checked now) for the
        next commit."""
        if self._held is None:
            self.append_many(items)
            return
        for kind, payload, source, _ in (batch := list(items)):
            if source not in ev.SOURCES:
                raise PayloadError(f"{kind}: unknown source {source!r}; one of {', '.join(ev.SOURCES)}")
            ev.kind(kind).validate(payload)
        self._held.extend(batch)

    def append(self, kind: str, payload: dict[str, Any], source: str, tick: int | None = None) -> Event:
        """One event in a transaction of its own (``transaction``; inside one this thread has open, in that)."""
        with self.transaction() as tx:
            return tx.append(kind, payload, source, tick)

    def append_many(self, items: Iterable[Item]) -> list[Event]:
        with self.transaction() as tx:
            return tx.extend(items)

    def adopt(self, events: Iterable[Event]) -> int:
        """Copy another log's events into this empty log row for row: same seq, id, ts, payload and
        hash, so this log's chain is that log's prefix (``fork``). Each row must link to the one
        before and match its hash, or nothing is written (``ChainBroken``). Read models are built as for
        appended events, and the search index catches up as it does after them (``index_search``).
        Returns how many were copied."""
        with self.transaction() as tx:
            if tx._seq != 0:
                raise LogError(f"{self.path} already holds events; a prefix can only be copied into a new log")
            prev_seq, prev_hash = 0, GENESIS
            for e in events:
                payload_json = canonical(ev.stored_payload(e))
                row = (e.seq, e.id, e.ts, e.kind, e.version, e.source, e.tick, payload_json, e.tokens,
                       e.prev_hash, e.hash)
                bad = bad_row(row, prev_seq, prev_hash)
                if bad is not None:
                    raise ChainBroken(f"cannot copy the origin's events: {bad[1]}")
                self.conn.execute(_INSERT_EVENT, row)
                readmodels.apply(self.conn, e)
                prev_seq, prev_hash = e.seq, e.hash
                tx._seq, tx._hash = e.seq, e.hash
                tx.appended.append(e)
        return len(tx.appended)

    @cached_property
    def segment_files(self) -> SegmentFiles:
        """Archived months (agent/store/archive.py): read through here, transparently. Made on first use: a
        command reading only read models does not import agent.store.segments."""
        from pathlib import Path

        from agent.store.segments import SegmentFiles

        return SegmentFiles(Path(self._file if self._file is not None else str(self.head_file)))

    def _write_head(self, e: Event) -> None:
        """Record the newest seq and hash outside the database (truncation evidence).

        The file stays open and is rewritten in place under an exclusive flock, so
        writers in several processes never move it backwards. Best effort: a failed
        write is reported by verify, not by the append (which has committed)."""
        if self._head is None:
            return
        try:
            if self._head_fd is None:
                self._head_fd = os.open(self._head, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            write_head(self._head_fd, e.seq, e.hash)
        except OSError:
            pass  # verify() compares what is there; the append itself has committed

    def _read_head(self) -> tuple[int, str] | None:
        return read_head(self._head)

    # ------------------------------------------------------------------ reading

    def head(self) -> tuple[int, str]:
        """(seq, hash) of the newest event: inside a write transaction this thread has open, the one it keeps."""
        outer = self._open
        if outer is not None and outer[1] == threading.get_ident():
            return outer[0]._seq, outer[0]._hash
        row = self.conn.execute(_HEAD_SQL).fetchone()
        return (row[0], row[1]) if row else (0, GENESIS)

    def last_seq(self) -> int:
        return self.head()[0]

    def get(self, seq: int) -> Event | None:
        r = self._row_at(self.conn, seq)
        return _row_to_event(r) if r else None

    def _row_at(self, conn: sqlite3.Connection, seq: int, *, fresh: bool = False) -> tuple[Any, ...] | None:
        """The row at ``seq``: from the events table, else from the segment that archived it."""
        r = conn.execute(f"SELECT {_COLS} FROM events WHERE seq = ?", (seq,)).fetchone()
        if r is not None:
            return tuple(r)
        if self.is_pg:
            return None  # no segments on PostgreSQL
        seg = next((s for s in Store(conn).segments() if s.first_seq <= seq <= s.last_seq), None)
        if seg is None:
            return None
        rows = self.segment_files.rows(seg, fresh=fresh)
        i = seq - seg.first_seq
        return rows[i] if 0 <= i < len(rows) and rows[i][0] == seq else None

    def read(self, since: int = 0, *, until_seq: int | None = None, until_ts: str | None = None,
             since_ts: str | None = None, kinds: Iterable[str] | None = None, tick: int | None = None,
             limit: int | None = None, newest_first: bool = False) -> Iterator[Event]:
        """Events with seq > ``since`` (and <= until_seq, ts <= until_ts), in seq order; archived months
        are read from their segments."""
        q = _Filter(since, until_seq, until_ts, since_ts, frozenset(kinds) if kinds else None, tick)
        if self.is_pg:  # no segments there (the tiers are SQLite's); pages, as a client-side cursor holds every row
            where, params = q.where(after=0)
            yield from self._read_pages([where], params, limit=limit, newest_first=newest_first)
            return
        for r in self._rows(q, limit=limit, newest_first=newest_first):
            yield _row_to_event(r)

    def _rows(self, q: _Filter, *, limit: int | None = None, newest_first: bool = False) -> Iterator[tuple[Any, ...]]:
        """The one iteration over the log's rows: the sealed segments and the events table, as one sequence.

        The stubs are read again once the events query has started: an archive that committed in between
        is then read from its segments, and rows the query still saw are not given twice: an archive that
        moved the bound since makes the read start again."""
        before = self.segments()
        bound = before[-1].last_seq if before else 0
        where, params = q.where(after=bound)
        sql = f"SELECT {_COLS} FROM events WHERE {where} ORDER BY seq {'DESC' if newest_first else 'ASC'}"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        cur = self.conn.execute(sql, params)
        first = cur.fetchmany(500)
        segs = self.segments()
        if (segs[-1].last_seq if segs else 0) != bound:  # an archive committed since the stubs were read
            cur.close()
            yield from self._rows(q, limit=limit, newest_first=newest_first)
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

    def segments(self) -> list[Segment]:
        """The sealed segments' stubs (none on PostgreSQL: the tiers are SQLite's)."""
        return [] if self.is_pg else self.store.segments()

    def others_version(self) -> int | None:
        """A number that changes whenever another connection commits to the database (SQLite's
        ``PRAGMA data_version``); None on PostgreSQL, which keeps no such number."""
        return None if self.is_pg else self.store.data_version()

    def owned_instances(self) -> list[Instance]:
        return self.store.owned_instances()

    def owned_instance_ids(self) -> list[int]:
        return [i.instance_id for i in self.owned_instances()]

    def instance_states(self) -> dict[int, InstanceState]:
        return self.store.instance_states()

    def _cold(self, segs: list[Segment], q: _Filter, *, newest_first: bool) -> Iterator[tuple[Any, ...]]:
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

    def _read_pages(self, where: list[str], params: list[Any], *, limit: int | None,
                    newest_first: bool) -> Iterator[Event]:
        """``read`` on PostgreSQL: pages of 500 by seq (a client-side cursor would hold every row at once)."""
        bound: int | None = None
        left = limit
        while left is None or left > 0:
            extra = [] if bound is None else [f"seq {'<' if newest_first else '>'} ?"]
            size = 500 if left is None else min(500, left)
            sql = (f"SELECT {_COLS} FROM events WHERE {' AND '.join(where + extra)} "
                   f"ORDER BY seq {'DESC' if newest_first else 'ASC'} LIMIT ?")
            rows = self.conn.execute(sql, [*params, *([] if bound is None else [bound]), size]).fetchall()
            for r in rows:
                yield _row_to_event(r)
            if len(rows) < size:
                return
            bound = rows[-1][0]
            left = None if left is None else left - len(rows)

    def follow(self, since: int = 0, *, poll: float = 0.25, stop: Callable[[], bool] = lambda: False,
               kinds: Iterable[str] | None = None) -> Iterator[Event]:
        """Yield events as they are appended (by this or any other process) until ``stop()``."""
        last = since
        ks = list(kinds) if kinds else None
        ident = self._opened_ident
        while not stop():
            got = False
            for e in self.read(last, kinds=None):
                last = e.seq
                got = True
                if ks is None or e.kind in ks:
                    yield e
            if not got:
                if self._file_ident() != ident:
                    raise LogError(f"the database {self.path} was moved or replaced while following it; "
                                   "put it back (or run again against the new one)")
                time.sleep(poll)

    def _file_ident(self) -> tuple[int, int] | None:
        """(device, inode) of the database file now; None when nothing is at its path."""
        if self._file is None:
            return (0, 0)  # a PostgreSQL database cannot be moved from under the connection
        try:
            st = os.stat(self._file)
        except OSError:
            return None
        return st.st_dev, st.st_ino

    def index_search(self) -> int:
        """Bring the full-text index up to the head (``Transaction.index_search``) in one transaction,
        when it is behind (joining the transaction this thread has open); how many events it added.
        A read-only log is left as it is."""
        outer = self._open
        if self.readonly or (self.conn.in_transaction and (outer is None or outer[1] != threading.get_ident())):
            return 0
        row = self.conn.execute(search.FTS_HEAD_SQL_PG if self.is_pg else search.FTS_HEAD_SQL).fetchone()
        if (row[0] if row else 0) >= self.last_seq():
            return 0
        with self.transaction() as tx:
            return tx.index_search()

    def search(self, query: str, *, limit: int = 20, until_seq: int | None = None) -> list[tuple[Event, str]]:
        """Full-text search over every event's rendered text, newest first (``agent.store.search``)."""
        return search.search(self, query, limit=limit, until_seq=until_seq)

    def count(self) -> int:
        """Every event, archived ones included."""
        segs = self.segments()
        if not segs:
            return int(self.conn.execute("SELECT COUNT(*) FROM events").fetchone()[0])
        return sum(s.events for s in segs) + self.store.hot_events_after(segs[-1].last_seq)

    # ------------------------------------------------------------------ checking

    def verify(self, *, anchor: tuple[int, str] | None = None) -> VerifyReport:
        """Walk the chain from the start; report the first row whose link or hash is wrong.

        The head file (and ``anchor``, a (seq, hash) recorded elsewhere, when given) must name a
        row of the chain with that hash: otherwise the newest events were truncated or history
        was rewritten. A missing head file is reported in ``warnings``."""
        # Read the head file first, then walk on a fresh connection: the head file is written
        # after each commit, so every seq it names is in the snapshot the walk reads, even while
        # another process appends (and whatever statement this log's own connection has open).
        head = self._read_head()
        conn = self._snapshot_conn()
        try:
            r = self._walk(conn, 0, GENESIS)
            r = self._check_anchors(conn, r, head, anchor)
        finally:
            conn.close()
        return r

    def verify_since_checkpoint(self) -> VerifyReport:
        """Verify only what the last verification did not cover (fast at start-up, whatever the size).

        The checkpoint is the (seq, hash) a previous verification reached: this process's own last one, else
        the one recorded in the checkpoint file beside the database. The row at that seq must still carry
        that hash, then the events after it are walked. A clean result moves the checkpoint to the head;
        the file is rewritten (best effort) when it records nothing yet, once it is ``CHECKPOINT_EVERY``
        events behind, and when the log closes."""
        head = self._read_head()
        cp = self._verified
        if cp is None:
            cp = self._read_checkpoint()
            self._filed = cp[0] if cp is not None else None
        conn = self._snapshot_conn()
        try:
            r = self._from_checkpoint(conn, cp)
            r = self._check_anchors(conn, r, head, None)
        finally:
            conn.close()
        if r.ok:
            self._verified = (r.head_seq, r.head_hash)
            if self._filed is None or r.head_seq - self._filed >= CHECKPOINT_EVERY:
                if self._write_checkpoint(r.head_seq, r.head_hash):
                    self._filed = r.head_seq
        return r

    def check_before_append(self) -> VerifyReport:
        """``verify_since_checkpoint``, raising ``ChainBroken`` (one line: the seq and the fix) on failure.

        ``run`` and ``tick`` call this before their first append: nothing is added to a log
        that does not verify."""
        r = self.verify_since_checkpoint()
        if not r.ok:
            raise ChainBroken(f"the event log {self.path} fails verification at seq {r.first_bad_seq}: {r.reason}; "
                              "nothing was appended. Run 'fleet-agent log verify' for the report, then restore the "
                              "database from a backup with 'fleet-agent restore BACKUP' (a copy 'fleet-agent backup PATH' wrote)")
        return r

    def _from_checkpoint(self, conn: sqlite3.Connection, cp: tuple[int, str] | None) -> VerifyReport:
        if cp is None or cp[0] == 0:
            return self._walk(conn, 0, GENESIS)
        seq, h = cp
        try:
            row = self._row_at(conn, seq, fresh=True)
        except LogError as e:
            return VerifyReport(False, 0, seq - 1, seq, str(e))
        if row is None:
            last = conn.execute(_HEAD_SQL).fetchone()
            end = last[0] if last else 0
            return VerifyReport(False, 0, end, min(seq, end + 1),
                                f"the verified checkpoint records seq {seq} but the log ends at {end}: "
                                "events were truncated or deleted")
        if row[10] != h:
            return VerifyReport(False, 0, seq, seq,
                                f"seq {seq}: hash differs from the verified checkpoint: history was rewritten")
        bad = bad_row(row, seq - 1, row[9])  # the checkpoint row's own content still matches its hash
        if bad is not None:
            return VerifyReport(False, 0, seq - 1, bad[0], bad[1])
        return self._walk(conn, seq, h, since=seq)

    def _walk(self, conn: sqlite3.Connection, prev_seq: int, prev_hash: str, *, since: int = 0) -> VerifyReport:
        """Walk the chain after ``since``: every sealed segment (re-read, sha256-checked), then the events table."""
        checked = 0
        segs = [] if self.is_pg else Store(conn).segments()
        hot_from = segs[-1].last_seq if segs else 0
        kept = {r[0]: tuple(r) for r in conn.execute(f"SELECT {_COLS} FROM events WHERE seq <= ?", (hot_from,))}
        for seg in segs:
            if seg.last_seq <= since:
                continue
            try:
                rows = self.segment_files.rows(seg, fresh=True)
            except LogError as e:
                return VerifyReport(False, checked, prev_seq, max(seg.first_seq, since + 1), str(e),
                                    head_hash=prev_hash, since=since)
            bad = stub_mismatch(seg, rows, kept)
            for r in rows if bad is None else ():
                if r[0] <= since:
                    continue
                bad = bad_row(r, prev_seq, prev_hash)
                if bad is not None:
                    break
                prev_seq, prev_hash = r[0], r[10]
                checked += 1
            if bad is not None:
                return VerifyReport(False, checked, prev_seq, bad[0], bad[1], head_hash=prev_hash, since=since)
        for rows in _pages(conn, f"SELECT {_COLS} FROM events WHERE seq > ?", max(since, hot_from), 2000,
                           paged=self.is_pg):
            for r in rows:
                bad = bad_row(r, prev_seq, prev_hash)
                if bad is not None:
                    return VerifyReport(False, checked, prev_seq, bad[0], bad[1], head_hash=prev_hash, since=since)
                prev_seq, prev_hash = r[0], r[10]
                checked += 1
        return VerifyReport(True, checked, prev_seq, head_hash=prev_hash, since=since)

    def _check_anchors(self, conn: sqlite3.Connection, r: VerifyReport, head: tuple[int, str] | None,
                       anchor: tuple[int, str] | None) -> VerifyReport:
        """The walked chain against the head file and an operator's recorded head."""
        if not r.ok:
            return r
        for rec, what in ((head, "the head file"), (anchor, "the recorded head")):
            if rec is None:
                continue
            bad = anchor_mismatch(lambda s: self._row_at(conn, s), rec, r.head_seq, what)
            if bad is not None:
                return replace(r, ok=False, first_bad_seq=bad[0], reason=bad[1])
        if head is None and r.head_seq > 0 and not self.is_pg:
            return replace(r, warnings=(f"no head file at {self.head_file}: deleting the newest events "
                                                    "cannot be detected without one",))
        return r

    def _read_checkpoint(self) -> tuple[int, str] | None:
        return read_head(self._checkpoint)

    def _write_checkpoint(self, seq: int, h: str) -> bool:
        """Record a verified (seq, hash) beside the database, atomically; False when it cannot be written."""
        if self._checkpoint is None:
            return False
        tmp = f"{self._checkpoint}.{os.getpid()}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, f"{seq} {h}\n".encode("ascii"))
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self._checkpoint)
            return True
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            return False

    def export(self, out: IO[str], since: int = 0, since_ts: str | None = None) -> int:
        """Write every event with seq > since (and ts >= since_ts) as JSON lines, every field included (the
        payload as the row holds it: the form the hash covers)."""
        n = 0
        for e in self.read(since, since_ts=since_ts):
            out.write(json.dumps({**e.to_dict(), "payload": ev.stored_payload(e)}, ensure_ascii=False, sort_keys=True)
                      + "\n")
            n += 1
        return n

    def rebuild_check(self) -> list[str]:
        """Differences between the live read models and a rebuild from the log alone."""
        rebuilt = readmodels.rebuild(self.read(0))
        try:
            return readmodels.diff(self.conn, rebuilt)
        finally:
            rebuilt.close()

    def rebuild(self) -> None:
        """Replace the read models and the full-text index with a rebuild from the log (one transaction)."""
        with immediate(self.conn):
            readmodels.clear(self.conn)
            for e in self.read(0):
                readmodels.apply(self.conn, e)
            if not self.is_pg:  # PostgreSQL's index is append-only like its log; it is rebuilt by log migrate
                self.conn.execute("INSERT INTO events_fts (events_fts) VALUES ('delete-all')")
                self._index_all()

    def _index_all(self) -> None:
        """Index every event, archived months included (their rows come from the segments)."""
        batch: list[tuple[int, str]] = []
        for r in self._rows(_Filter(0, None, None, None, None, None)):
            batch.append((r[0], search.search_text(r)))
            if len(batch) >= 1000:
                self.conn.executemany(search.INSERT_FTS, batch)
                batch = []
        if batch:
            self.conn.executemany(search.INSERT_FTS, batch)
