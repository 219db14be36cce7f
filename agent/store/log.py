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
import dataclasses
import fcntl
import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from json.encoder import encode_basestring as _json_str
from pathlib import Path
from typing import IO, Any

from agent import events as ev
from agent.errors import ChainBroken, LogError, PayloadError
from agent.events import Event
from agent.store import readmodels
from agent.store.db import connect, immediate, sqlite3
from agent.store.queries import Store
from agent.tokens import Tokenizer, get_tokenizer

GENESIS = "0" * 64
_COLS = "seq, id, ts, kind, version, source, tick, payload, tokens, prev_hash, hash"
_INSERT_EVENT = f"INSERT INTO events ({_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)"
_INSERT_FTS = "INSERT INTO events_fts (rowid, text) VALUES (?,?)"
_FTS_TOKENIZE = "porter unicode61"  # as schema.sql creates events_fts
_WORD = re.compile(r"[^\W_]+")  # a run of letters and digits: one word to the index's tokenizer (unicode61)
_FTS_HEAD_SQL = "SELECT rowid FROM events_fts ORDER BY rowid DESC LIMIT 1"
_HEAD_SQL = "SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1"
Item = tuple[str, dict[str, Any], str, "int | None"]
_new = object.__new__


_ENCODE = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


def canonical(obj: Any) -> str:
    """Canonical JSON: sorted keys, no spaces, UTF-8, no NaN/Infinity."""
    try:
        return _ENCODE(obj)
    except ValueError as e:
        raise PayloadError(f"payload is not valid JSON: {e}") from e
    except TypeError as e:
        raise PayloadError(f"payload is not JSON-serialisable: {e}") from e


def row_hash(seq: int, id: str, ts: str, kind: str, version: int, source: str, tick: int | None,
             payload_json: str, tokens: int | None, prev_hash: str) -> str:
    body = _row_header(seq, id, ts, kind, version, source, tick, tokens) + "\n" + payload_json
    return hashlib.sha256((prev_hash + "\n" + body).encode("utf-8")).hexdigest()


def _row_header(seq: Any, id: Any, ts: Any, kind: Any, version: Any, source: Any, tick: Any, tokens: Any) -> str:
    """canonical([seq, id, ts, kind, version, source, tick, tokens]), built directly when every field has
    its usual type (the append hot path); any other value (a tampered row) goes through canonical()."""
    if (type(seq) is int and type(version) is int and type(id) is str and type(ts) is str and type(kind) is str
            and type(source) is str and (tick is None or type(tick) is int)
            and (tokens is None or type(tokens) is int)):
        return (f"[{seq},{_json_str(id)},{_json_str(ts)},{_json_str(kind)},{version},{_json_str(source)},"
                f"{'null' if tick is None else tick},{'null' if tokens is None else tokens}]")
    return canonical([seq, id, ts, kind, version, source, tick, tokens])


def utc_ts(dt: datetime | None = None) -> str:
    """'2026-11-29T10:05:12.123456Z': UTC, microseconds, fixed width (sorts as text)."""
    global _TS_MEMO
    dt = dt or datetime.now(UTC)
    if dt.tzinfo is not UTC:
        dt = dt.astimezone(UTC)
    if not 1000 <= dt.year <= 9999:
        return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    second = dt.timestamp() // 1
    memo = _TS_MEMO
    if memo[0] != second:  # the text up to the second is formatted once a second
        memo = _TS_MEMO = (second, dt.isoformat(timespec="seconds")[:-6])  # drops "+00:00"
    return f"{memo[1]}.{dt.microsecond:06d}Z"


_TS_MEMO: tuple[float, str] = (-1.5, "")  # (a second since the epoch, its text): replaced whole, never edited


_RANDOM = bytearray()  # os.urandom bytes not yet used for an event id
_RANDOM_LOCK = threading.Lock()


def _forget_random() -> None:
    _RANDOM.clear()  # a forked child must not hand out its parent's ids


os.register_at_fork(after_in_child=_forget_random)


def new_event_id() -> str:
    """A random (version 4) UUID as text, as ``str(uuid.uuid4())`` gives, from os.urandom read 4 KiB
    at a time."""
    with _RANDOM_LOCK:
        if not _RANDOM:
            _RANDOM.extend(os.urandom(4096))
        h = _RANDOM[-16:].hex()
        del _RANDOM[-16:]
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{'89ab'[int(h[16], 16) & 3]}{h[17:20]}-{h[20:]}"


def _row_to_event(r: tuple[Any, ...]) -> Event:
    return Event(seq=r[0], id=r[1], ts=r[2], kind=r[3], version=r[4], source=r[5], tick=r[6],
                 payload=ev.decode(r[3], r[4], json.loads(r[7])), tokens=r[8], prev_hash=r[9], hash=r[10])


def _parse_head(data: bytes) -> tuple[int, str] | None:
    try:
        seq, h = data.decode("ascii").split()
        return int(seq), h
    except ValueError:
        return None


@dataclass(frozen=True)
class VerifyReport:
    """What a verification found: ``head_seq``/``head_hash`` is where the chain verified up to
    (from ``since``, 0 for a full walk); ``warnings`` are gaps in what could be checked."""

    ok: bool
    checked: int
    head_seq: int
    first_bad_seq: int | None = None
    reason: str | None = None
    head_hash: str = GENESIS
    since: int = 0
    warnings: tuple[str, ...] = ()


def _bad_row(r: tuple[Any, ...], prev_seq: int, prev_hash: str) -> tuple[int, str] | None:
    """(seq, reason) when row ``r`` does not follow (prev_seq, prev_hash) or does not match its hash."""
    seq = r[0]
    if seq != prev_seq + 1:
        return prev_seq + 1, f"seq {prev_seq + 1} is missing (next row is {seq}): a row was deleted"
    if r[9] != prev_hash:
        return seq, (f"seq {seq}: prev_hash does not match the hash of seq {prev_seq}: "
                     "rows were reordered, replaced or deleted")
    try:
        want = row_hash(seq, r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9])
    except (PayloadError, TypeError):  # a value no append could have written (NaN, a blob)
        want = None
    if want != r[10]:
        return seq, f"seq {seq}: content does not match its hash: the row was edited"
    return None


def _anchor_mismatch(conn: sqlite3.Connection, rec: tuple[int, str], end: int, what: str) -> tuple[int, str] | None:
    """(seq, reason) when the chain ending at ``end`` does not hold ``rec`` = (seq, hash) recorded in ``what``."""
    hseq, hhash = rec
    if hseq > end:
        return end + 1, (f"{what} records seq {hseq} but the log ends at {end}: "
                         "the newest events were truncated")
    row = conn.execute("SELECT hash FROM events WHERE seq = ?", (hseq,)).fetchone()
    if hseq > 0 and (row is None or row[0] != hhash):
        return hseq, f"seq {hseq}: hash differs from {what}'s record: history was rewritten"
    if hseq == 0 and hhash != GENESIS:
        return 0, f"{what} records seq 0 with a hash other than the genesis hash"
    return None


class Transaction:
    """An open BEGIN IMMEDIATE transaction: read, then append, atomically."""

    def __init__(self, log: EventLog, conn: sqlite3.Connection) -> None:
        self.log = log
        self.conn = conn
        row = conn.execute(_HEAD_SQL).fetchone()
        self._seq: int = row[0] if row else 0
        self._hash: str = row[1] if row else GENESIS
        self.appended: list[Event] = []
        self.after: list[Callable[[], object]] = []  # to run once this commits (``EventLog.after_commit``)

    @cached_property
    def store(self) -> Store:
        """The queries, inside this transaction: they see what it appended so far."""
        return Store(self.conn)

    def append(self, kind: str, payload: dict[str, Any], source: str, tick: int | None = None) -> Event:
        """Validate, encode (once), hash, insert and apply to the read models.

        Tokens are not counted here: the projection counts a message the first time it renders it
        (``agent.context.cache``), so ``tokens`` is NULL on every event this version appends; rows
        written by older versions keep the count they were hashed with. Nor is the event rendered
        for the full-text index here: ``index_search`` does that for every event not yet indexed
        (a search first, and the daemon once a tick, in the tick's last transaction)."""
        row, event = self._row(kind, payload, source, tick)
        try:
            self.conn.execute(_INSERT_EVENT, row)
            if kind in readmodels.PROJECTORS:
                readmodels.PROJECTORS[kind](self.conn, event)
        except BaseException:
            self._seq, self._hash = event.seq - 1, event.prev_hash
            raise
        self.appended.append(event)
        return event

    def extend(self, items: Iterable[Item]) -> list[Event]:
        """``append`` each item, the rows inserted in one statement; nothing is inserted unless every
        item is valid."""
        rows: list[tuple[Any, ...]] = []
        events: list[Event] = []
        seq, h = self._seq, self._hash
        projectors = readmodels.PROJECTORS
        try:
            for kind, payload, source, tick in items:
                row, event = self._row(kind, payload, source, tick)
                rows.append(row)
                events.append(event)
            self.conn.executemany(_INSERT_EVENT, rows)
            for event in events:
                if event.kind in projectors:
                    projectors[event.kind](self.conn, event)
        except BaseException:
            self._seq, self._hash = seq, h
            raise
        self.appended.extend(events)
        return events

    def _row(self, kind: str, payload: dict[str, Any], source: str, tick: int | None) -> tuple[tuple[Any, ...], Event]:
        """Validate, encode (once) and hash the next event: its row and the event; moves the head."""
        k = ev.kind(kind)
        if source not in ev.SOURCES:
            raise PayloadError(f"{kind}: unknown source {source!r}; one of {', '.join(ev.SOURCES)}")
        k.validate(payload)
        payload_json = canonical(payload)
        body = _own_copy(payload, payload_json)
        if k.current.stored is not None:  # the row holds the version's smaller form; readers get ``body``
            payload_json = canonical(k.current.stored.encode(body))
        seq, prev, version = self._seq + 1, self._hash, k.version
        eid, ts = new_event_id(), utc_ts(self.log.clock())
        if tick is None or type(tick) is int:  # row_hash's header, built here for the usual types
            header = f'[{seq},"{eid}","{ts}",{_json_str(kind)},{version},"{source}",{"null" if tick is None else tick},null]'
            h = hashlib.sha256(f"{prev}\n{header}\n{payload_json}".encode()).hexdigest()
        else:
            h = row_hash(seq, eid, ts, kind, version, source, tick, payload_json, None, prev)
        # Event's own __init__ (a frozen dataclass's) costs as much as the rest of this line; the fields
        # are set directly, all of them, as it would.
        event = _new(Event)
        event.__dict__.update(seq=seq, id=eid, ts=ts, kind=kind, source=source, tick=tick,
                              payload=body, tokens=None, version=version, prev_hash=prev, hash=h)
        self._seq, self._hash = seq, h
        return (seq, eid, ts, kind, version, source, tick, payload_json, None, prev, h), event

    def index_search(self) -> int:
        """Add to the full-text index every event it does not hold yet, in seq order; how many.

        The index holds a prefix of the log (rowid = seq): appends leave it behind and this brings
        it up to the head, rendering each event once. An event that does not render is indexed by
        its kind and payload, as an invisible one is."""
        row = self.conn.execute(_FTS_HEAD_SQL).fetchone()
        return _index_from(self.conn, row[0] if row else 0, self._seq)


def _index_from(conn: sqlite3.Connection, done: int, head: int) -> int:
    """Index the events after seq ``done`` up to ``head``, 1,000 rows a statement; how many. The index
    keeps no copy of the text (content=''): ``search`` renders the hits it shows again."""
    n = 0
    while done < head:
        rows = conn.execute(f"SELECT {_COLS} FROM events WHERE seq > ? ORDER BY seq LIMIT 1000", (done,)).fetchall()
        if not rows:
            break
        conn.executemany(_INSERT_FTS, [(r[0], _search_text(r)) for r in rows])
        done, n = rows[-1][0], n + len(rows)
    return n


def _snippets(match: str, hits: list[tuple[int, str]]) -> dict[int, str]:
    """seq -> snippet of each of ``hits`` (seq, index text) that matches the FTS5 query ``match``: the same
    FTS5 ``snippet()`` the index gave when it kept the text, run over an in-memory index (detail=full, so
    phrases match in order) of just these texts."""
    mem = sqlite3.connect(":memory:")
    try:
        mem.execute(f"CREATE VIRTUAL TABLE hit USING fts5(text, tokenize = '{_FTS_TOKENIZE}')")
        mem.executemany("INSERT INTO hit (rowid, text) VALUES (?,?)", hits)
        rows = mem.execute("SELECT rowid, snippet(hit, 0, '[', ']', ' … ', 24) FROM hit WHERE hit MATCH ?", (match,))
        return {int(seq): str(snip) for seq, snip in rows}
    finally:
        mem.close()


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _own_copy(payload: dict[str, Any], payload_json: str) -> dict[str, Any]:
    """The event's own copy of ``payload``, equal to what reading its row back gives: a plain copy when
    every key is text and every value a JSON scalar (which encode and decode unchanged), else decoded
    from ``payload_json``."""
    for k, v in payload.items():
        if type(k) is not str or type(v) not in _SCALARS:
            return json.loads(payload_json)  # type: ignore[no-any-return]
    return dict(payload)


def _search_text(r: tuple[Any, ...]) -> str:
    """What the full-text index holds for the events row ``r``."""
    e = _row_to_event(r)
    try:
        msg = ev.render(e)
    except Exception:  # noqa: BLE001 - a rendering bug must not keep the rest of the log out of the index
        msg = None
    if msg is not None:
        return ev.search_text(e, msg)
    try:
        text = ev.VOCABULARY.search(e)  # what a version that is not model-visible indexes, if it says
    except Exception:  # noqa: BLE001 - as for rendering
        text = None
    return text if text is not None else f"{e.kind} {r[7]}"


class EventLog:
    """The append-only log in one SQLite file."""

    def __init__(self, path: str | os.PathLike[str], *, encoding: str = "cl100k_base", encoding_file: str | None = None,
                 encoding_sha256: str | None = None, clock: Callable[[], datetime] | None = None,
                 readonly: bool = False, head_file: str | os.PathLike[str] | None = None,
                 create: bool = True) -> None:
        """Open the log at ``path``. With ``create=False`` (every command but ``init``, and the daemon)
        a missing, empty or foreign database is refused instead of starting a new history."""
        self.path = Path(path)
        self.conn = connect(self.path, readonly=readonly, create=create and not readonly)
        self.clock = clock or (lambda: datetime.now(UTC))
        self._enc = (encoding, encoding_file, encoding_sha256)
        self._tokenizer: Tokenizer | None = None
        self.head_file = Path(head_file) if head_file else self.path.with_name(self.path.name + ".head")
        self.checkpoint_file = self.path.with_name(self.path.name + ".verified")
        self._opened_ident = self._file_ident()  # the file this connection reads (follow notices a move)
        self.readonly = readonly
        self._head_fd: int | None = None
        self._held: list[Item] | None = None  # appends held for the next commit (see ``holding``)
        self._open: tuple[Transaction, int] | None = None  # the transaction in progress and its thread

    @cached_property
    def store(self) -> Store:
        """Every query against the log's read models (and the few against the events themselves)."""
        return Store(self.conn)

    @property
    def in_transaction(self) -> bool:
        """True while a transaction is open on this log's connection."""
        return bool(self.conn.in_transaction)

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            self._tokenizer = get_tokenizer(*self._enc)
        return self._tokenizer

    def close(self) -> None:
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
            with immediate(self.conn):
                tx = Transaction(self, self.conn)
                self._open = (tx, threading.get_ident())
                try:
                    if held:
                        tx.extend(held)
                    yield tx
                finally:
                    self._open = None
        except BaseException as e:
            if held and self._held is not None:
                self._held[:0] = held  # not committed: still held, still first
            if isinstance(e, sqlite3.Error):
                raise LogError(f"the event log at {self.path} could not be written: {e}") from e
            raise
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
                bad = _bad_row(row, prev_seq, prev_hash)
                if bad is not None:
                    raise ChainBroken(f"cannot copy the origin's events: {bad[1]}")
                self.conn.execute(_INSERT_EVENT, row)
                readmodels.apply(self.conn, e)
                prev_seq, prev_hash = e.seq, e.hash
                tx._seq, tx._hash = e.seq, e.hash
                tx.appended.append(e)
        return len(tx.appended)

    def _write_head(self, e: Event) -> None:
        """Record the newest seq and hash outside the database (truncation evidence).

        The file stays open and is rewritten in place under an exclusive flock, so
        writers in several processes never move it backwards. Best effort: a failed
        write is reported by verify, not by the append (which has committed)."""
        try:
            if self._head_fd is None:
                self._head_fd = os.open(self.head_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fd = self._head_fd
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                cur = _parse_head(os.pread(fd, 128, 0))
                if cur is not None and cur[0] >= e.seq:
                    return
                record = f"{e.seq} {e.hash}\n".encode("ascii")
                os.pwrite(fd, record, 0)
                os.ftruncate(fd, len(record))
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError:
            pass  # verify() compares what is there; the append itself has committed

    def _read_head(self) -> tuple[int, str] | None:
        try:
            return _parse_head(self.head_file.read_bytes())
        except OSError:
            return None

    # ------------------------------------------------------------------ reading

    def head(self) -> tuple[int, str]:
        row = self.conn.execute(_HEAD_SQL).fetchone()
        return (row[0], row[1]) if row else (0, GENESIS)

    def last_seq(self) -> int:
        return self.head()[0]

    def get(self, seq: int) -> Event | None:
        r = self.conn.execute(f"SELECT {_COLS} FROM events WHERE seq = ?", (seq,)).fetchone()
        return _row_to_event(r) if r else None

    def read(self, since: int = 0, *, until_seq: int | None = None, until_ts: str | None = None,
             since_ts: str | None = None, kinds: Iterable[str] | None = None, tick: int | None = None,
             limit: int | None = None, newest_first: bool = False) -> Iterator[Event]:
        """Events with seq > ``since`` (and <= until_seq, ts <= until_ts), in seq order."""
        where: list[str] = ["seq > ?"]
        params: list[Any] = [since]
        if until_seq is not None:
            where.append("seq <= ?")
            params.append(until_seq)
        if until_ts is not None:
            where.append("ts <= ?")
            params.append(until_ts)
        if since_ts is not None:
            where.append("ts >= ?")
            params.append(since_ts)
        if kinds:
            ks = list(kinds)
            where.append(f"kind IN ({','.join('?' * len(ks))})")
            params.extend(ks)
        if tick is not None:
            where.append("tick = ?")
            params.append(tick)
        sql = f"SELECT {_COLS} FROM events WHERE {' AND '.join(where)} ORDER BY seq {'DESC' if newest_first else 'ASC'}"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        cur = self.conn.execute(sql, params)
        while True:
            rows = cur.fetchmany(500)
            if not rows:
                return
            for r in rows:
                yield _row_to_event(r)

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
        try:
            st = os.stat(self.path)
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
        row = self.conn.execute(_FTS_HEAD_SQL).fetchone()
        if (row[0] if row else 0) >= self.last_seq():
            return 0
        with self.transaction() as tx:
            return tx.index_search()

    def search(self, query: str, *, limit: int = 20, until_seq: int | None = None) -> list[tuple[Event, str]]:
        """Full-text search over every event's rendered text, newest first (the index is brought up to
        the head first; a read-only log searches what was indexed)."""
        terms = [t for t in query.replace('"', " ").split() if t]
        words = [w for t in terms for w in _WORD.findall(t)]
        if not words:
            return []
        self.index_search()
        match = " ".join(f'"{t}"' for t in terms)  # each term a phrase: "destroy_instance" is two words in a row
        loose = " ".join(f'"{w}"' for w in words)  # the index (detail=none) knows words, not their order
        out: list[tuple[Event, str]] = []
        below = until_seq
        while len(out) < limit:
            batch = self._candidates(query, loose, below, max(limit, 50))
            texts = [(r[0], _search_text(r)) for r in batch]
            snips = _snippets(match, texts)  # the events that match the query itself, with their snippets
            out += [(_row_to_event(r), snips[r[0]]) for r in batch if r[0] in snips]
            if len(batch) < max(limit, 50):
                break
            below = batch[-1][0] - 1
        return out[:limit]

    def _candidates(self, query: str, loose: str, below: int | None, n: int) -> list[tuple[Any, ...]]:
        """The newest ``n`` events (seq <= ``below``) holding every word of the query, newest first."""
        sql = ("SELECT rowid FROM events_fts WHERE events_fts MATCH ?"
               + (" AND rowid <= ?" if below is not None else "") + " ORDER BY rowid DESC LIMIT ?")
        params: list[Any] = [loose] + ([below] if below is not None else []) + [n]
        try:
            seqs = [r[0] for r in self.conn.execute(sql, params).fetchall()]
        except sqlite3.OperationalError as e:
            raise LogError(f"search query {query!r} could not run: {e}") from e
        rows = [self.conn.execute(f"SELECT {_COLS} FROM events WHERE seq = ?", (seq,)).fetchone() for seq in seqs]
        return [r for r in rows if r is not None]

    def count(self) -> int:
        return int(self.conn.execute("SELECT COUNT(*) FROM events").fetchone()[0])

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
        conn = connect(self.path, readonly=True)
        try:
            r = self._walk(conn, 0, GENESIS)
            r = self._check_anchors(conn, r, head, anchor)
        finally:
            conn.close()
        return r

    def verify_since_checkpoint(self) -> VerifyReport:
        """Verify only what the last verification did not cover (fast at start-up, whatever the size).

        The checkpoint file beside the database records the (seq, hash) a previous verification
        reached; the row at that seq must still carry that hash, then the events after it are
        walked. A clean result moves the checkpoint to the head (best effort)."""
        head, cp = self._read_head(), self._read_checkpoint()
        conn = connect(self.path, readonly=True)
        try:
            r = self._from_checkpoint(conn, cp)
            r = self._check_anchors(conn, r, head, None)
        finally:
            conn.close()
        if r.ok and (cp is None or r.head_seq > cp[0]):
            self._write_checkpoint(r.head_seq, r.head_hash)
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
        row = conn.execute(f"SELECT {_COLS} FROM events WHERE seq = ?", (seq,)).fetchone()
        if row is None:
            last = conn.execute(_HEAD_SQL).fetchone()
            end = last[0] if last else 0
            return VerifyReport(False, 0, end, min(seq, end + 1),
                                f"the verified checkpoint records seq {seq} but the log ends at {end}: "
                                "events were truncated or deleted")
        if row[10] != h:
            return VerifyReport(False, 0, seq, seq,
                                f"seq {seq}: hash differs from the verified checkpoint: history was rewritten")
        bad = _bad_row(row, seq - 1, row[9])  # the checkpoint row's own content still matches its hash
        if bad is not None:
            return VerifyReport(False, 0, seq - 1, bad[0], bad[1])
        return self._walk(conn, seq, h, since=seq)

    def _walk(self, conn: sqlite3.Connection, prev_seq: int, prev_hash: str, *, since: int = 0) -> VerifyReport:
        checked = 0
        cur = conn.execute(f"SELECT {_COLS} FROM events WHERE seq > ? ORDER BY seq", (since,))
        while True:
            rows = cur.fetchmany(2000)
            if not rows:
                break
            for r in rows:
                bad = _bad_row(r, prev_seq, prev_hash)
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
            bad = _anchor_mismatch(conn, rec, r.head_seq, what)
            if bad is not None:
                return dataclasses.replace(r, ok=False, first_bad_seq=bad[0], reason=bad[1])
        if head is None and r.head_seq > 0:
            return dataclasses.replace(r, warnings=(f"no head file at {self.head_file}: deleting the newest events "
                                                    "cannot be detected without one",))
        return r

    def _read_checkpoint(self) -> tuple[int, str] | None:
        try:
            return _parse_head(self.checkpoint_file.read_bytes())
        except OSError:
            return None

    def _write_checkpoint(self, seq: int, h: str) -> bool:
        """Record a verified (seq, hash) beside the database, atomically; False when it cannot be written."""
        tmp = self.checkpoint_file.with_name(self.checkpoint_file.name + f".{os.getpid()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, f"{seq} {h}\n".encode("ascii"))
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.checkpoint_file)
            return True
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink()
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
            self.conn.execute("INSERT INTO events_fts (events_fts) VALUES ('delete-all')")
            _index_from(self.conn, 0, self.last_seq())
