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

import hashlib
import json
import os
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from agent import events as ev
from agent import readmodels
from agent.db import connect, immediate, sqlite3
from agent.errors import LogError, PayloadError
from agent.events import Event
from agent.tokens import Tokenizer, get_tokenizer

GENESIS = "0" * 64
_COLS = "seq, id, ts, kind, version, source, tick, payload, tokens, prev_hash, hash"


def canonical(obj: Any) -> str:
    """Canonical JSON: sorted keys, no spaces, UTF-8, no NaN/Infinity."""
    try:
        return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except ValueError as e:
        raise PayloadError(f"payload is not valid JSON: {e}") from e
    except TypeError as e:
        raise PayloadError(f"payload is not JSON-serialisable: {e}") from e


def row_hash(seq: int, id: str, ts: str, kind: str, version: int, source: str, tick: int | None,
             payload_json: str, tokens: int | None, prev_hash: str) -> str:
    body = canonical([seq, id, ts, kind, version, source, tick, tokens]) + "\n" + payload_json
    return hashlib.sha256((prev_hash + "\n" + body).encode("utf-8")).hexdigest()


def utc_ts(dt: datetime | None = None) -> str:
    dt = dt or datetime.now(UTC)
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _row_to_event(r: tuple) -> Event:
    return Event(seq=r[0], id=r[1], ts=r[2], kind=r[3], version=r[4], source=r[5], tick=r[6],
                 payload=json.loads(r[7]), tokens=r[8], prev_hash=r[9], hash=r[10])


@dataclass(frozen=True)
class VerifyReport:
    ok: bool
    checked: int
    head_seq: int
    first_bad_seq: int | None = None
    reason: str | None = None


class Transaction:
    """An open BEGIN IMMEDIATE transaction: read, then append, atomically."""

    def __init__(self, log: EventLog, conn: sqlite3.Connection) -> None:
        self.log = log
        self.conn = conn
        row = conn.execute("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1").fetchone()
        self._seq, self._hash = (row[0], row[1]) if row else (0, GENESIS)
        self.appended: list[Event] = []

    def query(self, sql: str, params: Iterable[Any] = ()) -> list[tuple]:
        return self.conn.execute(sql, tuple(params)).fetchall()

    def append(self, kind: str, payload: dict[str, Any], source: str, tick: int | None = None) -> Event:
        k = ev.kind(kind)
        if source not in ev.SOURCES:
            raise PayloadError(f"{kind}: unknown source {source!r}; one of {', '.join(ev.SOURCES)}")
        k.validate(payload)
        payload_json = canonical(payload)
        seq = self._seq + 1
        event = Event(seq=seq, id=str(uuid.uuid4()), ts=utc_ts(self.log.clock()), kind=kind,
                      version=k.version, source=source, tick=tick, payload=json.loads(payload_json))
        msg = ev.render(event)
        tokens = self.log.tokenizer.count_message(msg) if msg is not None else None
        h = row_hash(seq, event.id, event.ts, kind, k.version, source, tick, payload_json, tokens, self._hash)
        event = Event(**{**event.__dict__, "tokens": tokens, "prev_hash": self._hash, "hash": h})
        self.conn.execute(
            f"INSERT INTO events ({_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (seq, event.id, event.ts, kind, k.version, source, tick, payload_json, tokens, self._hash, h),
        )
        self.conn.execute("INSERT INTO events_fts (rowid, text, kind) VALUES (?,?,?)",
                          (seq, ev.search_text(event), kind))
        readmodels.apply(self.conn, event)
        self._seq, self._hash = seq, h
        self.appended.append(event)
        return event


class EventLog:
    """The append-only log in one SQLite file."""

    def __init__(self, path: str | os.PathLike, *, encoding: str = "cl100k_base", encoding_file: str | None = None,
                 encoding_sha256: str | None = None, clock: Callable[[], datetime] | None = None,
                 readonly: bool = False, head_file: str | os.PathLike | None = None) -> None:
        self.path = Path(path)
        self.conn = connect(self.path, readonly=readonly)
        self.clock = clock or (lambda: datetime.now(UTC))
        self._enc = (encoding, encoding_file, encoding_sha256)
        self._tokenizer: Tokenizer | None = None
        self.head_file = Path(head_file) if head_file else self.path.with_name(self.path.name + ".head")
        self.readonly = readonly

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            self._tokenizer = get_tokenizer(*self._enc)
        return self._tokenizer

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ writing

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """Read and append atomically; every event appended commits together or not at all."""
        if self.readonly:
            raise LogError("this log was opened read-only")
        try:
            with immediate(self.conn):
                tx = Transaction(self, self.conn)
                yield tx
        except sqlite3.OperationalError as e:
            raise LogError(f"the event log at {self.path} could not be written: {e}") from e
        if tx.appended:
            self._write_head(tx.appended[-1])

    def append(self, kind: str, payload: dict[str, Any], source: str, tick: int | None = None) -> Event:
        with self.transaction() as tx:
            return tx.append(kind, payload, source, tick)

    def append_many(self, items: Iterable[tuple[str, dict[str, Any], str, int | None]]) -> list[Event]:
        with self.transaction() as tx:
            return [tx.append(k, p, s, t) for k, p, s, t in items]

    def _write_head(self, e: Event) -> None:
        """Record the newest seq and hash outside the database (truncation evidence).
        Best effort: a failed write is reported by verify, not by the append."""
        tmp = self.head_file.with_name(f"{self.head_file.name}.{os.getpid()}.tmp")
        try:
            cur = self._read_head()
            if cur is not None and cur[0] >= e.seq:
                return
            old = os.umask(0o077)
            try:
                tmp.write_text(f"{e.seq} {e.hash}\n", encoding="ascii")
            finally:
                os.umask(old)
            os.replace(tmp, self.head_file)
        except OSError:
            pass  # verify() compares what is there; the append itself has committed

    def _read_head(self) -> tuple[int, str] | None:
        try:
            seq, h = self.head_file.read_text(encoding="ascii").split()
            return int(seq), h
        except (OSError, ValueError):
            return None

    # ------------------------------------------------------------------ reading

    def head(self) -> tuple[int, str]:
        row = self.conn.execute("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1").fetchone()
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
        where, params = ["seq > ?"], [since]
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
        while not stop():
            got = False
            for e in self.read(last, kinds=None):
                last = e.seq
                got = True
                if ks is None or e.kind in ks:
                    yield e
            if not got:
                time.sleep(poll)

    def search(self, query: str, *, limit: int = 20, until_seq: int | None = None) -> list[tuple[Event, str]]:
        """Full-text search over every event's rendered text, newest first."""
        terms = [t for t in query.replace('"', " ").split() if t]
        if not terms:
            return []
        match = " ".join(f'"{t}"' for t in terms)
        sql = ("SELECT rowid, snippet(events_fts, 0, '[', ']', ' … ', 24) FROM events_fts WHERE events_fts MATCH ?"
               + (" AND rowid <= ?" if until_seq is not None else "") + " ORDER BY rowid DESC LIMIT ?")
        params: list[Any] = [match] + ([until_seq] if until_seq is not None else []) + [limit]
        try:
            rows = self.conn.execute(sql, params).fetchall()
        except sqlite3.OperationalError as e:
            raise LogError(f"search query {query!r} could not run: {e}") from e
        out = []
        for seq, snip in rows:
            e = self.get(seq)
            if e is not None:
                out.append((e, snip))
        return out

    def count(self) -> int:
        return self.conn.execute("SELECT COUNT(*) FROM events").fetchone()[0]

    # ------------------------------------------------------------------ checking

    def verify(self) -> VerifyReport:
        """Walk the chain from the start; report the first row whose link or hash is wrong."""
        prev_seq, prev_hash, checked = 0, GENESIS, 0
        cur = self.conn.execute(f"SELECT {_COLS} FROM events ORDER BY seq")
        while True:
            rows = cur.fetchmany(2000)
            if not rows:
                break
            for r in rows:
                seq = r[0]
                if seq != prev_seq + 1:
                    return VerifyReport(False, checked, prev_seq, prev_seq + 1,
                                        f"seq {prev_seq + 1} is missing (next row is {seq}): a row was deleted")
                if r[9] != prev_hash:
                    return VerifyReport(False, checked, prev_seq, seq,
                                        f"seq {seq}: prev_hash does not match the hash of seq {prev_seq}: "
                                        "rows were reordered, replaced or deleted")
                want = row_hash(seq, r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9])
                if want != r[10]:
                    return VerifyReport(False, checked, prev_seq, seq,
                                        f"seq {seq}: content does not match its hash: the row was edited")
                prev_seq, prev_hash = seq, r[10]
                checked += 1
        head = self._read_head()
        if head is not None:
            hseq, hhash = head
            if hseq > prev_seq:
                return VerifyReport(False, checked, prev_seq, prev_seq + 1,
                                    f"the head file records seq {hseq} but the log ends at {prev_seq}: "
                                    "the newest events were truncated")
            row = self.conn.execute("SELECT hash FROM events WHERE seq = ?", (hseq,)).fetchone()
            if row and row[0] != hhash:
                return VerifyReport(False, checked, prev_seq, hseq,
                                    f"seq {hseq}: hash differs from the head file's record: history was rewritten")
        return VerifyReport(True, checked, prev_seq)

    def export(self, out: IO[str], since: int = 0) -> int:
        """Write every event with seq > since as JSON lines, every field included."""
        n = 0
        for e in self.read(since):
            out.write(json.dumps(e.to_dict(), ensure_ascii=False, sort_keys=True) + "\n")
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
        """Replace the read models with a rebuild from the log (one transaction)."""
        with immediate(self.conn):
            for t in readmodels.TABLES:
                self.conn.execute(f"DELETE FROM {t}")  # noqa: S608 - fixed names; read models, not events
            for e in self.read(0):
                readmodels.apply(self.conn, e)
