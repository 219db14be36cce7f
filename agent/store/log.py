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

import _thread
import contextlib
import itertools
import json
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import cached_property
from json.encoder import encode_basestring as _json_str

from agent import events as ev
from agent import lazy
from agent.config import path_text
from agent.errors import ChainBroken, LogError, PayloadError
from agent.events import Event
from agent.record import record as dataclass  # a dataclass, defined without importing dataclasses
from agent.record import replace
from agent.store import readmodels
from agent.store.db import connect, immediate, sqlite3
from agent.store.queries import Store
from agent.store.target import PgTarget
from agent.store.times import utc_ts as utc_ts  # (re-exported: callers import it from here)

TYPE_CHECKING = False
if TYPE_CHECKING:  # the tokenizer loads when an event's tokens are first counted, not with every command
    import fcntl
    import hashlib
    from pathlib import Path
    from typing import IO, Any, TypeVar

    from agent.store.rows import Instance, InstanceState
    from agent.store.segment_types import Segment
    from agent.store.segments import SegmentFiles
    from agent.tokens import Tokenizer

    T = TypeVar("T")
else:  # OpenSSL loads at the first hash (an append, a verify), fcntl at the first head write
    hashlib = lazy.module("hashlib", globals())
    fcntl = lazy.module("fcntl", globals())

GENESIS = "0" * 64
_COLS = "seq, id, ts, kind, version, source, tick, payload, tokens, prev_hash, hash"
_INSERT_EVENT = f"INSERT INTO events ({_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)"
# An append's rows go in as few statements as their count has binary digits: one statement per 64, 32, ... rows
# (SQLite parses each shape once; executemany costs a step and a reset per row, a fifth more). Its values come
# as [the first row's prev_hash, then 9 a row: seq, id, ts, kind, version, source, tick, payload, hash]: each
# row's prev_hash is the previous row's hash parameter, bound once; tokens is NULL, written in the statement.
# The driver binds None through its adaptation lookup, which costs as much as several other values: a NULL
# tick is bound as a NaN, which SQLite stores as NULL.
_CHUNKS = (64, 32, 16, 8, 4, 2, 1)
_PER_ROW = 9
_NULL_TICK = float("nan")


def _insert_rows_sql(n: int) -> str:
    rows = [f"(?{b + 1},?{b + 2},?{b + 3},?{b + 4},?{b + 5},?{b + 6},?{b + 7},?{b + 8},NULL,?{b},?{b + 9})"
            for b in range(1, 1 + _PER_ROW * n, _PER_ROW)]
    return f"INSERT INTO events ({_COLS}) VALUES " + ",".join(rows)


_INSERT_N = {n: _insert_rows_sql(n) for n in _CHUNKS}
_INSERT_ONE = _INSERT_N[1]  # one row: [its prev_hash, then its 9 values]
_INSERT_FTS = "INSERT INTO events_fts (rowid, text) VALUES (?,?)"
_FTS_TOKENIZE = "porter unicode61"  # as schema.sql creates events_fts
_WORD = re.compile(r"[^\W_]+")  # a run of letters and digits: one word to the index's tokenizer (unicode61)
_FTS_HEAD_SQL = "SELECT rowid FROM events_fts ORDER BY rowid DESC LIMIT 1"
_FTS_HEAD_SQL_PG = "SELECT seq FROM events_fts ORDER BY seq DESC LIMIT 1"
_INSERT_FTS_PG = "INSERT INTO events_fts (seq, text, kind) VALUES (?,?,?)"
_HEAD_SQL = "SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1"
# The checkpoint file is rewritten (fsync'd) once verification has moved this many events past what it records;
# in between, the process remembers how far it verified. A start after a crash walks at most this many more.
CHECKPOINT_EVERY = 2000
Item = tuple[str, "dict[str, Any]", str, "int | None"]
_new = object.__new__


_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _one_shot_encoder() -> Callable[[Any], str]:
    """``_ENCODER.encode``, or the C encoder it builds on every call built once (the same bytes, a few
    microseconds less an event) when this Python's json module has the one it expects. Without the
    circular-reference check: a payload that contains itself fails with RecursionError instead."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return _ENCODER.encode
    try:
        c = make(None, _ENCODER.default, _json_str, None, ":", ",", True, False, False)
        sample = {"b": [1, 2.5, -0.0, None, True], "a": {"z": "é\n\"", "y": 10**20}}
        if "".join(c(sample, 0)) != _ENCODER.encode(sample):
            return _ENCODER.encode
    except (TypeError, ValueError):  # another signature (another Python)
        return _ENCODER.encode

    def encode(obj: Any) -> str:
        return "".join(c(obj, 0))
    return encode


_ENCODE = _one_shot_encoder()


def canonical(obj: Any) -> str:
    """Canonical JSON: sorted keys, no spaces, UTF-8, no NaN/Infinity."""
    try:
        return _ENCODE(obj)
    except ValueError as e:
        raise PayloadError(f"payload is not valid JSON: {e}") from e
    except TypeError as e:
        raise PayloadError(f"payload is not JSON-serialisable: {e}") from e
    except RecursionError as e:
        raise PayloadError(f"payload is not valid JSON: it contains itself, or nests too deep ({e})") from e


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


_TS_MEMO: tuple[float, str] = (-1.5, "")  # (a second since the epoch, its text): replaced whole, never edited


def _utc_now() -> datetime:
    """The log's clock unless it is given another: now, in UTC."""
    return datetime.now(UTC)


def _now_ts() -> str:
    """``utc_ts()`` (now) from the system clock's nanoseconds, without a datetime: what an append stamps
    its event with when the log keeps the default clock. The text up to the second is formatted once a
    second (``_NOW_MEMO``)."""
    global _NOW_MEMO
    us = _time_ns() // 1000
    memo = _NOW_MEMO
    micro = us - memo[0]
    if not 0 <= micro < 1_000_000:
        second = us // 1_000_000
        memo = _NOW_MEMO = (second * 1_000_000,
                            datetime.fromtimestamp(second, UTC).isoformat(timespec="seconds")[:-6] + ".")
        micro = us - memo[0]
    return f"{memo[1]}{str(micro + 1_000_000)[1:]}Z"  # six digits, zero-padded, without a format spec to parse


# (the microsecond a second starts at, its text up to the decimal point): replaced whole, never edited
_NOW_MEMO: tuple[int, str] = (1, "")
_time_ns = time.time_ns


_IDS: list[str] = []  # event ids made from os.urandom and not handed out yet
# str(uuid.uuid4()) is 36 characters, 8-4-4-4-12 hex digits; the third group starts with the version (4) and
# the fourth with the variant (8, 9, a or b). Ids are written side by side into copies of a template, each
# followed by a space, position by position across all of them at once (one extended-slice assignment per
# position), then split apart: a few C calls for 256 ids instead of a formatted string each.
_ID_TEMPLATE = b"-" * 14 + b"4" + b"-" * 21 + b" "
_ID_HEX = tuple((dst + k, src + k) for dst, src, width in ((0, 0, 8), (9, 8, 4), (15, 13, 3), (20, 17, 3), (24, 20, 12))
                for k in range(width))  # (position in the id, position in its 32 random hex digits)
_VARIANT = bytes.maketrans(b"0123456789abcdef", b"89ab89ab89ab89ab")  # a hex digit's two low bits -> variant digit


def _forget_ids() -> None:
    _IDS.clear()  # a forked child must not hand out its parent's ids


os.register_at_fork(after_in_child=_forget_ids)


def _make_ids(n: int) -> list[str]:
    h = os.urandom(16 * n).hex().encode("ascii")  # 32 hex digits an id
    out = bytearray(_ID_TEMPLATE * n)
    for dst, src in _ID_HEX:
        out[dst::37] = h[src::32]
    out[19::37] = h[16::32].translate(_VARIANT)
    return out.decode("ascii").split()


def new_event_id() -> str:
    """A random (version 4) UUID as text, as ``str(uuid.uuid4())`` gives, from os.urandom read 4 KiB
    at a time (256 ids formatted at once; ``list.pop`` hands each out to one thread only)."""
    while True:
        try:
            return _IDS.pop()
        except IndexError:
            _IDS.extend(_make_ids(256))


def db_errors() -> tuple[type[BaseException], ...]:
    """The database drivers' error classes loaded in this process (psycopg's only once a PostgreSQL log opened)."""
    import sys

    pg = sys.modules.get("psycopg")
    return (sqlite3.Error,) if pg is None else (sqlite3.Error, pg.Error)


def _row_to_event(r: tuple[Any, ...]) -> Event:
    return Event(seq=r[0], id=r[1], ts=r[2], kind=r[3], version=r[4], source=r[5], tick=r[6],
                 payload=ev.decode(r[3], r[4], json.loads(r[7])), tokens=r[8], prev_hash=r[9], hash=r[10])


class _Decoded:
    """Events decoded from their rows, by seq: a row read again, identical field for field, gives back
    the Event decoded the first time instead of its JSON decoded again (every projection reads every
    event since the last compaction). An LRU bounded by entries and by payload text (``KEEP_BYTES``;
    a row longer than ``ROW_BYTES`` is not kept). Readers never change an event's payload (upcasters
    work on copies), so one Event can be shared."""

    ENTRIES = 2048
    KEEP_BYTES = 2 << 20
    ROW_BYTES = 64 << 10

    def __init__(self) -> None:
        self._items: dict[int, tuple[tuple[Any, ...], Event, int]] = {}  # in use order, oldest first
        self._lock = _thread.allocate_lock()
        self.bytes = 0

    def event(self, r: tuple[Any, ...]) -> Event:
        seq = r[0]
        with self._lock:
            hit = self._items.pop(seq, None)
            if hit is not None:
                if hit[0] == r:
                    self._items[seq] = hit
                    return hit[1]
                self.bytes -= hit[2]
        e = _row_to_event(r)
        n = len(r[7]) + 256 if type(r[7]) is str else self.ROW_BYTES
        if n < self.ROW_BYTES and type(r) is tuple:
            with self._lock:
                old = self._items.pop(seq, None)
                self.bytes += n - (old[2] if old is not None else 0)
                self._items[seq] = (r, e, n)
                while len(self._items) > self.ENTRIES or self.bytes > self.KEEP_BYTES:
                    self.bytes -= self._items.pop(next(iter(self._items)))[2]
        return e


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


def _anchor_mismatch(row_at: Callable[[int], tuple[Any, ...] | None], rec: tuple[int, str], end: int,
                     what: str) -> tuple[int, str] | None:
    """(seq, reason) when the chain ending at ``end`` does not hold ``rec`` = (seq, hash) recorded in ``what``."""
    hseq, hhash = rec
    if hseq > end:
        return end + 1, (f"{what} records seq {hseq} but the log ends at {end}: "
                         "the newest events were truncated")
    row = row_at(hseq) if hseq > 0 else None
    if hseq > 0 and (row is None or row[10] != hhash):
        return hseq, f"seq {hseq}: hash differs from {what}'s record: history was rewritten"
    if hseq == 0 and hhash != GENESIS:
        return 0, f"{what} records seq 0 with a hash other than the genesis hash"
    return None


def _stub_mismatch(seg: Segment, rows: list[tuple[Any, ...]], kept: dict[int, tuple[Any, ...]]) -> tuple[int, str] | None:
    """(seq, reason) when a segment's rows differ from its stub, or from a row the events table kept."""
    ends = (rows[0][0], rows[-1][0], rows[0][9], rows[-1][10]) if rows else None
    if ends != (seg.first_seq, seg.last_seq, seg.prev_hash, seg.last_hash) or len(rows) != seg.events:
        return seg.first_seq, (f"segment {seg.name} does not hold seq {seg.first_seq}..{seg.last_seq} as its stub "
                               "records: restore it from its copy or a backup")
    for r in rows:
        other = kept.get(r[0])
        if other is not None and other != r:
            return r[0], f"seq {r[0]}: the row kept in the database differs from its archived copy in {seg.name}"
    return None


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


def _fts_text(text: str, pg: bool) -> str:
    """PostgreSQL text cannot hold NUL; the search text drops it (the payload keeps it, escaped)."""
    return text.replace("\x00", "") if pg and "\x00" in text else text


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
        """Validate, encode (once), hash, insert and apply to the read models.

        Tokens are not counted here: the projection counts a message the first time it renders it
        (``agent.context.cache``), so ``tokens`` is NULL on every event this version appends; rows
        written by older versions keep the count they were hashed with. Nor is the event rendered
        for the full-text index here: ``index_search`` does that for every event not yet indexed
        (a search first, and the daemon once a tick, in the tick's last transaction)."""
        values, event = self._row(kind, payload, source, tick)
        if self.log.is_pg:
            _insert(self.conn, values[0], values[1:], pg=True)
        else:
            self.log._cursor.execute(_INSERT_ONE, values)
        project = readmodels.PROJECTORS.get(kind)
        if project is not None:
            project(self.conn, event)
        self._seq, self._hash = event.seq, event.hash
        self.appended.append(event)
        if self.log.fence is not None:
            self._sync_if_fenced()
        return event

    def _sync_if_fenced(self) -> None:
        if self.log.fence is not None and (sync := getattr(self.conn, "sync", None)) is not None:
            # A daemon's append on PostgreSQL: its pipelined statements go out now, so a daemon suspended
            # before the commit leaves its session idle in the transaction, which the server ends
            # (agent.store.pglock.bound_idle_transactions) instead of keeping the fleet's append lock.
            sync()

    def extend(self, items: Iterable[Item]) -> list[Event]:
        """``append`` each item, the rows inserted in a few statements; nothing is inserted unless every
        item is valid. A batch loads orjson, which a single append then uses too: importing it (with
        ``dataclasses``, ``uuid``, ...) costs a command that appends one event more than it saves."""
        params, events = self._rows(items if isinstance(items, list) else list(items), _flat_text())
        if not events:
            return events
        _insert(self.conn, events[0].prev_hash, params, pg=self.log.is_pg)
        readmodels.apply_many(self.conn, events)
        self._seq, self._hash = events[-1].seq, events[-1].hash
        self.appended.extend(events)
        self._sync_if_fenced()
        return events

    def _rows(self, items: list[Item], flat_text: Callable[[dict[str, Any]], str]) -> tuple[list[Any], list[Event]]:
        """Validate, encode (once: ``flat_text`` for a flat payload) and hash each item, chained on from the
        head: their rows' values one after the other (9 a row, as ``_insert`` takes them) and their events.
        The head does not move (the caller moves it once the rows are in).

        On the system clock every event of the call gets one timestamp, read once: they are appended in one
        act (one statement or a few, in one transaction), nothing can come between them, and none is
        visible before the others; reading the clock again for each would only tell how long this loop
        took. A clock the log was given is read for every event, as it always was: its readings are what
        it was given to say (a simulation's time, a test's script)."""
        clock = self.log.clock
        given = None if clock is _utc_now else clock
        ts = _now_ts() if given is None else ""
        seq, prev, n = self._seq, self._hash, len(items)
        params: list[Any] = []
        events: list[Event] = []
        specs: dict[str, tuple[Any, str, Callable[[str, object], bool]]] = {}
        sources, sha256, take_id, add = ev.SOURCES, hashlib.sha256, _IDS.pop, events.append
        null_tick = None if self.log.is_pg else _NULL_TICK
        for kind, payload, source, tick in items:
            spec = specs.get(kind) or specs.setdefault(kind, _spec(kind, n))
            current, kind_json, check = spec
            if source not in sources:
                raise PayloadError(f"{kind}: unknown source {source!r}; one of {', '.join(ev.SOURCES)}")
            flat = check(kind, payload)  # Kind.validate, written out for the kind's fields; True when flat
            if flat and current.stored is None:  # _encoded's usual case, written out
                try:
                    text = flat_text(payload)
                except TypeError:
                    text = canonical(payload)
                body = dict(payload)
            else:
                text, body = _encoded(current, flat, payload, flat_text)
            seq, version = seq + 1, current.number
            if given is not None:
                ts = utc_ts(given())
            try:
                eid = take_id()
            except IndexError:
                eid = new_event_id()
            if tick is None or type(tick) is int:  # row_hash, written out for the usual types
                h = sha256(f'{prev}\n[{seq},"{eid}","{ts}",{kind_json},{version},"{source}",'
                           f'{"null" if tick is None else tick},null]\n{text}'.encode()).hexdigest()
            else:
                h = row_hash(seq, eid, ts, kind, version, source, tick, text, None, prev)
            params += (seq, eid, ts, kind, version, source, null_tick if tick is None else tick, text, h)
            # Event's own __init__ (a frozen dataclass's) costs as much as the rest of this loop; the fields
            # are set directly, all of them, as it would.
            e = _new(Event)
            d = e.__dict__
            d["seq"], d["id"], d["ts"], d["kind"], d["source"], d["tick"] = seq, eid, ts, kind, source, tick
            d["payload"], d["tokens"], d["version"], d["prev_hash"], d["hash"] = body, None, version, prev, h
            add(e)
            prev = h
        return params, events

    def _row(self, kind: str, payload: dict[str, Any], source: str, tick: int | None) -> tuple[list[Any], Event]:
        """``_rows`` for one item, without the loop: its row's values as ``_INSERT_ONE`` takes them (the
        previous hash first, then the 9 of ``_insert``) and its event, chained on from the head."""
        spec = _APPENDING.get(kind)
        if spec is None or ev.KINDS.get(kind) is not spec[0]:  # unknown, or given a new version since
            spec = _appending(kind)
        current = spec[1]
        if source not in ev.SOURCES:
            raise PayloadError(f"{kind}: unknown source {source!r}; one of {', '.join(ev.SOURCES)}")
        check = current.payload.checker()
        encode = _FLAT_TEXT[0] if _FLAT_TEXT else canonical
        flat = check(kind, payload)  # Kind.validate, written out for the kind's fields; True when flat
        if flat and current.stored is None:  # _encoded's usual case, written out
            try:
                text = encode(payload)
            except TypeError:
                text = canonical(payload)
            body = dict(payload)
        else:
            text, body = _encoded(current, flat, payload, encode)
        seq, prev, version = self._seq + 1, self._hash, current.number
        log = self.log
        ts = _now_ts() if log.clock is _utc_now else utc_ts(log.clock())
        try:
            eid = _IDS.pop()
        except IndexError:
            eid = new_event_id()
        if tick is None or type(tick) is int:  # row_hash, written out for the usual types
            h = hashlib.sha256(f'{prev}\n[{seq},"{eid}","{ts}",{spec[2]},{version},"{source}",'
                               f'{"null" if tick is None else tick},null]\n{text}'.encode()).hexdigest()
        else:
            h = row_hash(seq, eid, ts, kind, version, source, tick, text, None, prev)
        e = _new(Event)  # as in _rows
        d = e.__dict__
        d["seq"] = seq
        d["id"] = eid
        d["ts"] = ts
        d["kind"] = kind
        d["source"] = source
        d["tick"] = tick
        d["payload"] = body
        d["tokens"] = None
        d["version"] = version
        d["prev_hash"] = prev
        d["hash"] = h
        null = _NULL_TICK if tick is None and not log.is_pg else tick
        return [prev, seq, eid, ts, kind, version, source, null, text, h], e

    def index_search(self, render: Callable[[Event], dict[str, Any] | None] | None = None) -> int:
        """Add to the full-text index every event it does not hold yet, in seq order; how many.

        The index holds a prefix of the log (rowid = seq): appends leave it behind and this brings
        it up to the head, rendering each event once (``render``: a renderer that gives exactly
        ``agent.events.render``'s message, such as a projection cache's, which has most of a tick's
        events already). An event that does not render is indexed by its kind and payload, as an
        invisible one is."""
        pg = self.log.is_pg
        row = self.conn.execute(_FTS_HEAD_SQL_PG if pg else _FTS_HEAD_SQL).fetchone()
        return _index_from(self.conn, row[0] if row else 0, self._seq, pg=pg, decode=self.log._decoded.event,
                           render=render)


def _encoded(current: Any, flat: bool, payload: dict[str, Any],
             flat_text: Callable[[dict[str, Any]], str]) -> tuple[str, dict[str, Any]]:
    """(the row's payload text, the event's payload) of a checked ``payload`` appended as version
    ``current`` of its kind, encoded once: ``flat_text`` when its check found it ``flat``, else canonical
    JSON."""
    if flat:
        try:
            text = flat_text(payload)
        except TypeError:  # orjson refuses an integer beyond 64 bits, a lone surrogate: canonical decides
            text = canonical(payload)
        body = dict(payload)  # the event's own copy, equal to what reading its row back gives
    else:
        text = canonical(payload)
        body = json.loads(text)
    if current.stored is not None:  # the row holds the version's smaller form; readers get ``body``
        text = canonical(current.stored.encode(body))
    return text, body


def _insert(conn: Any, prev: str, params: list[Any], *, pg: bool) -> None:
    """Insert, in order, the rows ``params`` holds (9 values a row, see ``_INSERT_N``), the first chained on
    ``prev``: on SQLite in statements of 64, 32, ... rows each; on PostgreSQL as whole rows in one pipelined
    ``executemany``."""
    if pg:
        rows = []
        for i in range(0, len(params), _PER_ROW):
            seq, eid, ts, kind, version, source, tick, text, h = params[i:i + _PER_ROW]
            rows.append((seq, eid, ts, kind, version, source, tick, text, None, prev, h))
            prev = h
        conn.executemany(_INSERT_EVENT, rows)
        return
    i, n_rows = 0, len(params) // _PER_ROW
    for n in _CHUNKS:
        while n_rows - i >= n:
            conn.execute(_INSERT_N[n], [prev, *params[i * _PER_ROW:(i + n) * _PER_ROW]])
            i += n
            prev = params[i * _PER_ROW - 1]


_APPENDING: dict[str, tuple[Any, Any, str]] = {}  # kind -> (its Kind, current version, name as JSON text)


def _appending(kind: str) -> tuple[Any, Any, str]:
    """What an append of ``kind`` needs, looked up once (PayloadError naming the nearest kind when unknown)."""
    k = ev.kind(kind)
    spec = _APPENDING[kind] = (k, k.versions[-1], _json_str(kind))
    return spec


def _spec(kind: str, n: int) -> tuple[Any, str, Callable[[str, object], bool]]:
    """(current version, the name as JSON text, the check) of ``kind`` for ``n`` payloads about to be appended."""
    spec = _APPENDING.get(kind)
    if spec is None or ev.KINDS.get(kind) is not spec[0]:  # a kind given a new version since: look again
        spec = _appending(kind)
    return spec[1], spec[2], spec[1].payload.checker(n)


def _index_from(conn: Any, done: int, head: int, *, pg: bool = False,
                decode: Callable[[tuple[Any, ...]], Event] | None = None,
                render: Callable[[Event], dict[str, Any] | None] | None = None) -> int:
    """Index the events after seq ``done`` up to ``head``, 1,000 rows a statement; how many. SQLite's
    index keeps no copy of the text (content=''): ``search`` renders the hits it shows again. PostgreSQL's
    keeps the text, for ``ts_headline``."""
    n = 0
    while done < head:
        rows = conn.execute(f"SELECT {_COLS} FROM events WHERE seq > ? ORDER BY seq LIMIT 1000", (done,)).fetchall()
        if not rows:
            break
        if pg:
            conn.executemany(_INSERT_FTS_PG, [(r[0], _fts_text(_search_text(r, decode, render), True), r[3])
                                              for r in rows])
        else:
            conn.executemany(_INSERT_FTS, [(r[0], _search_text(r, decode, render)) for r in rows])
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


def _orjson_text() -> Callable[[dict[str, Any]], str]:
    """``canonical(payload)`` for a payload ``flat`` accepts: orjson's text, about a tenth of the json
    module's time (the same bytes: keys sorted by code point, the same escapes, the same float digits in
    that range); it refuses (TypeError) an integer beyond 64 bits or a lone surrogate, which ``canonical``
    then decides. The json module's own text when orjson is not installed."""
    try:
        import orjson
    except ImportError:
        return canonical
    dumps, option = orjson.dumps, orjson.OPT_SORT_KEYS

    def encode(payload: dict[str, Any]) -> str:
        return dumps(payload, option=option).decode()
    return encode


_FLAT_TEXT: list[Callable[[dict[str, Any]], str]] = []  # the flat encoder, once made


def _flat_text() -> Callable[[dict[str, Any]], str]:
    if not _FLAT_TEXT:
        _FLAT_TEXT.append(_orjson_text())
    return _FLAT_TEXT[0]


def _canonical_flat(payload: dict[str, Any]) -> str:
    """What an append writes for a payload ``flat`` accepts: the flat encoder's text, or canonical's."""
    try:
        return _flat_text()(payload)
    except TypeError:
        return canonical(payload)


def _search_text(r: tuple[Any, ...], decode: Callable[[tuple[Any, ...]], Event] | None = None,
                 render: Callable[[Event], dict[str, Any] | None] | None = None) -> str:
    """What the full-text index holds for the events row ``r`` (``decode``: how the row becomes its Event,
    a log's cache of rows it decoded before; by default decoded afresh; ``render``: how an Event becomes
    its message, by default ``agent.events.render``)."""
    e = (decode or _row_to_event)(r)
    try:
        msg = (render or ev.render)(e)
    except Exception:  # noqa: BLE001 - a rendering bug must not keep the rest of the log out of the index
        msg = None
    if msg is not None:
        return ev.search_text(e, msg)
    try:
        text = ev.VOCABULARY.search(e)  # what a version that is not model-visible indexes, if it says
    except Exception:  # noqa: BLE001 - as for rendering
        text = None
    return text if text is not None else f"{e.kind} {r[7]}"


def _read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


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
        # (data_version, seq, hash) after this connection's last commit; _version: data_version at BEGIN
        self._head_at_begin: tuple[int, int, str] | None = None
        self._version: int | None = None
        self._held: list[Item] | None = None  # appends held for the next commit (see ``holding``)
        self._open: tuple[Transaction, int] | None = None  # the transaction in progress and its thread
        self._deferred: Transaction | None = None  # ``_open``'s transaction, when its commit is deferred
        self._carried: Transaction | None = None  # the deferred one, while a transaction block carries it
        self._segments: tuple[int, list[Segment]] | None = None
        self._decoded = _Decoded()  # rows read before, decoded once
        self._serial = 0  # moves at every rollback on this connection (``read_token``)
        self._commits = 0  # this connection's commits that appended
        self._kind_commit: dict[str, int] = {}  # kind -> the number of the last of them that appended one
        self._memo: dict[str, tuple[tuple[Any, ...], Any]] = {}  # name -> (read_token then, value): ``memo``
        self._verified: tuple[int, str] | None = None  # the (seq, hash) this process's last verification reached
        self._filed: int | None = None  # the seq the checkpoint file records, as last read or written here
        self._verify_conn: Any = None  # the read-only connection verification reads its snapshots through
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
        """True while a transaction block is open on this log's connection; not while a deferred commit only
        waits for the next one (``transaction(defer=True)``): reads on this connection see its events, and a
        caller that would open a transaction only to write need not open one to read."""
        return bool(self.conn.in_transaction) and self._deferred is None

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            from agent.tokens import get_tokenizer

            self._tokenizer = get_tokenizer(*self._enc)
        return self._tokenizer

    def close(self) -> None:
        if self._verified is not None and self._verified[0] > (self._filed or 0):
            self._write_checkpoint(*self._verified)  # how far this process verified, for the next start
        if self._verify_conn is not None:
            self._verify_conn.close()
            self._verify_conn = None
        if self._head_fd is not None:
            os.close(self._head_fd)
            self._head_fd = None
        if self._deferred is not None:  # never committed: closing rolls it back
            self._open = None
            self._forget_deferred()
        self.conn.close()

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ writing

    @contextmanager
    def transaction(self, *, defer: bool = False) -> Iterator[Transaction]:
        """Read and append atomically; every event appended commits together or not at all.
        Events held by ``append_held`` are appended first, in the same transaction.

        Inside a transaction this thread opened on this log, a transaction joins it (as a savepoint:
        an exception rolls back the inner block alone) and commits with it, so a caller can group
        what several steps append into one commit (one fsync).

        ``defer=True``: the block's end does not commit; the transaction stays open (and holds the write
        lock) and the next ``transaction`` or ``append`` of this thread on this log carries it and commits
        it with its own events, in one fsync. Until then nothing may reach another system:
        ``agent.store.deferred.settle`` (the clients' send paths, the tool pipeline) commits it first, and
        ``flush`` does so explicitly."""
        if self.readonly:
            raise LogError("this log was opened read-only")
        outer = self._open
        if outer is not None and outer[1] == _thread.get_ident():
            ctx = self._carrying(outer[0], defer) if outer[0] is self._deferred else self._joined(outer[0])
            with ctx as tx:
                yield tx
            return
        held, self._held = self._held or [], ([] if self._held is not None else None)
        try:
            tx = self._begin()
            try:
                if held:
                    tx.extend(held)
                yield tx
                if defer:
                    self._defer(tx)
                    return
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

    def _defer(self, tx: Transaction) -> None:
        """Leave ``tx`` open, its COMMIT due at this thread's next commit on this log (or ``flush``)."""
        from agent.store import deferred

        self._deferred = tx
        deferred.deferring(self)

    @contextmanager
    def _carrying(self, tx: Transaction, defer: bool) -> Iterator[Transaction]:
        """A transaction on top of the deferred ``tx``: its block runs in a savepoint and its end commits
        both (or defers both again). When the block fails, what was deferred commits alone, as it would have
        without deferring, and the block's exception goes on."""
        self._deferred, self._carried = None, tx  # carried by this block: its end commits it
        try:
            with self._joined(tx) as t:
                yield t
        except BaseException:
            self._carried = None
            self._settle(tx, swallow=True)
            raise
        self._carried = None
        if defer:
            self._deferred = tx
            return
        self._settle(tx, swallow=False)

    def _settle(self, tx: Transaction, *, swallow: bool) -> None:
        """Commit the deferred ``tx`` now (its fence first); on failure roll it back and raise LogError
        (a database error) or what the fence raised, unless ``swallow`` (an exception is already on
        its way: it goes on, and what was deferred is lost as a failed commit's events are)."""
        self._forget_deferred()
        try:
            try:
                if not self.conn.in_transaction:  # SQLite rolled it back already (some I/O errors)
                    raise LogError(f"the event log at {self.path} could not be written: the transaction was "
                                   "rolled back")
                self._commit(tx)
            except BaseException:
                self._undo()
                raise
        except BaseException as e:
            if swallow:
                return
            self._raise_written(e)
            raise
        self._committed(tx)

    def _forget_deferred(self) -> None:
        from agent.store import deferred

        self._deferred = None
        deferred.settled(self)

    def flush(self) -> None:
        """Commit what this thread deferred on this log (``transaction(defer=True)``); nothing when nothing
        is. Refused inside a transaction block that carries it (its end commits it) and from another
        thread than the one that deferred it."""
        tx = self._deferred
        if tx is None:
            if self._carried is not None:
                raise LogError("nothing goes over the network inside a transaction: its events are not committed "
                               "and it holds the log's write lock")
            return
        opened = self._open
        if opened is None or opened[0] is not tx or opened[1] != _thread.get_ident():
            raise LogError("a deferred commit is flushed by the thread that deferred it, outside a transaction")
        self._settle(tx, swallow=False)

    @property
    def deferred(self) -> bool:
        """True while a commit is deferred on this log (``transaction(defer=True)``)."""
        return self._deferred is not None

    @cached_property
    def _cursor(self) -> Any:
        """The cursor a write transaction's own statements (begin, head, insert, commit) go through: one
        kept, not one made for each statement (``connection.execute``)."""
        return self.conn.cursor() if not self.is_pg else self.conn

    def _begin(self) -> Transaction:
        """BEGIN IMMEDIATE (``agent.store.db.immediate``, written out) and the transaction, open on this thread."""
        self._cursor.execute("BEGIN IMMEDIATE")
        tx = Transaction(self, self.conn, self._begun_head())
        self._head_at_begin = None  # known again once this commits
        self._open = (tx, _thread.get_ident())
        return tx

    def _commit(self, tx: Transaction) -> None:
        """The fence (when ``tx`` appended), then COMMIT; the head is remembered as of this commit."""
        try:
            if tx.appended and self.fence is not None:
                self.fence()
        finally:
            self._open = None
        self._cursor.execute("COMMIT")
        if self._version is not None:
            self._head_at_begin = (self._version, tx._seq, tx._hash)
        if tx.appended:  # what ``memo`` kept of these kinds is read again
            self._commits += 1
            for e in tx.appended:
                self._kind_commit[e.kind] = self._commits

    def _undo(self) -> None:
        """Roll back the transaction ``_begin`` opened, if SQLite has not already (a failed COMMIT, some
        I/O errors)."""
        self._open = None
        self._serial += 1  # what ``memo`` kept from inside it is read again
        if self._deferred is not None:
            self._forget_deferred()
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

    def _begun_head(self) -> tuple[int, str]:
        """(seq, hash) of the newest event, read in a transaction that holds the write lock. On SQLite it is
        remembered from this connection's last commit while ``PRAGMA data_version`` says no other connection
        committed since (one pragma instead of a search of the events table); a failed or rolled-back
        transaction forgets it, and PostgreSQL always reads it."""
        self._version = None
        if not self.is_pg:
            self._version = version = self._cursor.execute("PRAGMA data_version").fetchone()[0]
            known = self._head_at_begin
            if known is not None and known[0] == version:
                return known[1], known[2]
        row = self.conn.execute(_HEAD_SQL).fetchone()
        return (row[0], row[1]) if row else (0, GENESIS)

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
            self._serial += 1  # the block's writes are undone: what was read since is not what holds
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
        if outer is not None and outer[1] == _thread.get_ident():
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
        """One event in a transaction of its own (``transaction``; inside one this thread has open, in that).
        The usual case, nothing held and no transaction open, runs ``transaction``'s steps without its
        generator."""
        if self._open is not None or self._held is not None or self.readonly:
            with self.transaction() as tx:
                return tx.append(kind, payload, source, tick)
        try:
            tx = self._begin()
            try:
                e = tx.append(kind, payload, source, tick)
                self._commit(tx)
            except BaseException:
                self._undo()
                raise
        except BaseException as err:
            self._raise_written(err)
            raise
        self._committed(tx)
        return e

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
            fd = self._head_fd
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                data = os.pread(fd, 128, 0)
                seq = e.seq
                words = data.split()  # _parse_head's test, on the bytes: ASCII, two words, the first a number
                if len(words) == 2 and data.isascii():
                    try:
                        if int(words[0]) >= seq:
                            return
                    except ValueError:  # not a record: this one replaces it
                        pass
                record = f"{seq} {e.hash}\n".encode("ascii")
                os.pwrite(fd, record, 0)
                if len(data) > len(record):  # seqs only grow longer: truncate only what was there before
                    os.ftruncate(fd, len(record))
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError:
            pass  # verify() compares what is there; the append itself has committed

    def _read_head(self) -> tuple[int, str] | None:
        if self._head is None:
            return None
        try:
            return _parse_head(_read_bytes(self._head))
        except OSError:
            return None

    # ------------------------------------------------------------------ reading

    def head(self) -> tuple[int, str]:
        """(seq, hash) of the newest event: inside a write transaction this thread has open, the one it keeps."""
        outer = self._open
        if outer is not None and outer[1] == _thread.get_ident():
            return outer[0]._seq, outer[0]._hash
        row = self.conn.execute(_HEAD_SQL).fetchone()
        return (row[0], row[1]) if row else (0, GENESIS)

    def last_seq(self) -> int:
        return self.head()[0]

    def get(self, seq: int) -> Event | None:
        r = self._row_at(self.conn, seq)
        return self._decoded.event(r) if r else None

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
        event = self._decoded.event
        for r in self._rows(q, limit=limit, newest_first=newest_first):
            yield event(r)

    def _rows(self, q: _Filter, *, limit: int | None = None, newest_first: bool = False) -> Iterator[tuple[Any, ...]]:
        """The one iteration over the log's rows: the sealed segments and the events table, as one sequence.

        The stubs are read again once the events query has started: an archive that committed in between
        is then read from its segments, and rows the query still saw are not given twice. The stubs read
        before (``segments``) bound the query without a check of their own: the one check comes once the query
        has its snapshot, and an archive that moved the bound since makes the read start again."""
        cached = self._segments
        before = cached[1] if cached is not None else self.segments()
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
        """The sealed segments' stubs, re-read only when another connection committed since the last read
        (``PRAGMA data_version``) or this one archived (``agent.store.archive`` drops the copy)."""
        if self.is_pg:
            return []  # the tiers are SQLite's: a PostgreSQL log keeps every event in its table
        version = self._own_version()
        if version is None:
            version = self.store.data_version()
        if self._segments is None or self._segments[0] != version:
            self._segments = (version, self.store.segments())
        return self._segments[1]

    def others_version(self) -> int | None:
        """A number that changes whenever another connection commits to the database (SQLite's
        ``PRAGMA data_version``; a reader that saw it unchanged knows every row it read before is as it was,
        this connection only appending); None on PostgreSQL, which keeps no such number."""
        if self.is_pg:
            return None
        version = self._own_version()
        return self.store.data_version() if version is None else version

    def forget_segments(self) -> None:
        """Drop the stubs read before: this connection changed them (its own commits leave data_version alone)."""
        self._segments = None
        self._serial += 1

    def _own_version(self) -> int | None:
        """``PRAGMA data_version`` as read when the write transaction this thread has open on this log began
        (no other connection can commit while it is open, so it holds until the end); None outside one."""
        outer = self._open
        if outer is not None and outer[1] == _thread.get_ident():
            return self._version
        return None

    def read_token(self, kinds: tuple[str, ...] | None = None) -> tuple[Any, ...] | None:
        """A value that is the same at two moments only when the reads it covers give the same answer at both:
        no other connection committed (``PRAGMA data_version``) and this connection rolled nothing back; and
        with ``kinds`` (reads of those kinds of events only), this connection appended none of them, else it
        changed no row at all (``total_changes``). Inside a write transaction this thread has open it costs no
        statement (nobody else can commit then). None on PostgreSQL: nothing is remembered there."""
        if self.is_pg:
            return None
        outer = self._open
        mine = outer is not None and outer[1] == _thread.get_ident()
        version = self._version if mine else self.store.data_version()
        if kinds is None:
            return (version, self._serial, self.conn.total_changes)
        kc = self._kind_commit
        pending = sum(1 for e in outer[0].appended if e.kind in kinds) if mine and outer is not None else 0
        return (version, self._serial, max(kc.get(k, 0) for k in kinds), pending)

    def memo(self, name: str, compute: Callable[[], T], kinds: tuple[str, ...] | None = None) -> T:
        """``compute()``, or what it gave last time under ``name`` when nothing it reads can have changed since
        (``read_token``): a commit by any other connection, a rollback of ours, and an append of ours (of one
        of ``kinds`` when given: ``compute`` reads only events of those kinds) make the next call compute
        again. For reads a tick repeats (the overrides, the pause, the exclusions, the fleet we own); the value
        is shared, so callers must not change it."""
        token = self.read_token(kinds)  # before the read: a commit after this is seen by the next call
        if token is None:
            return compute()
        hit = self._memo.get(name)
        if hit is not None and hit[0] == token:
            kept: T = hit[1]
            return kept
        value = compute()
        self._memo[name] = (token, value)
        return value

    def owned_instances(self) -> list[Instance]:
        """``store.owned_instances()``, read again only after a write (``memo``); shared: not to be changed."""
        return self.memo("store.owned_instances", self.store.owned_instances, readmodels.WRITTEN_BY["instances"])

    def owned_instance_ids(self) -> list[int]:
        return [i.instance_id for i in self.owned_instances()]

    def instance_states(self) -> dict[int, InstanceState]:
        """``store.instance_states()``, read again only after a write (``memo``); shared: not to be changed."""
        return self.memo("store.instance_states", self.store.instance_states,
                         readmodels.WRITTEN_BY["instance_states"])

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
                yield self._decoded.event(r)
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
        if self.readonly or (self.conn.in_transaction and (outer is None or outer[1] != _thread.get_ident())):
            return 0
        row = self.conn.execute(_FTS_HEAD_SQL_PG if self.is_pg else _FTS_HEAD_SQL).fetchone()
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
        if self.is_pg:
            return self._search_pg(" ".join(terms), limit, until_seq)
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
        rows = [self._row_at(self.conn, seq) for seq in seqs]  # an archived event from its segment
        return [r for r in rows if r is not None]

    def _search_pg(self, text: str, limit: int, until_seq: int | None) -> list[tuple[Event, str]]:
        """``search`` on PostgreSQL: every term must match (tsvector, GIN index), with the same snippet marks."""
        sql = ("SELECT seq, ts_headline('english', text, q, 'StartSel=[, StopSel=], MaxWords=24, MinWords=8,"
               " MaxFragments=2, FragmentDelimiter=\" … \"') FROM events_fts, plainto_tsquery('english', ?) q"
               " WHERE tsv @@ q" + (" AND seq <= ?" if until_seq is not None else "") + " ORDER BY seq DESC LIMIT ?")
        params: list[Any] = [text] + ([until_seq] if until_seq is not None else []) + [limit]
        try:
            rows = self.conn.execute(sql, params).fetchall()
        except db_errors() as e:
            raise LogError(f"search query {text!r} could not run: {e}") from e
        return [(hit, snip) for seq, snip in rows if (hit := self.get(seq)) is not None]

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
        conn, shared = self._verify_snapshot()
        try:
            r = self._from_checkpoint(conn, cp)
            r = self._check_anchors(conn, r, head, None)
        finally:
            if not shared:
                conn.close()
            elif conn.in_transaction:
                conn.execute("ROLLBACK")  # the snapshot ends: the next verification reads a new one
        if r.ok:
            self._verified = (r.head_seq, r.head_hash)
            if self._filed is None or r.head_seq - self._filed >= CHECKPOINT_EVERY:
                if self._write_checkpoint(r.head_seq, r.head_hash):
                    self._filed = r.head_seq
        return r

    def _verify_snapshot(self) -> tuple[Any, bool]:
        """(a connection reading one snapshot, whether it is kept for the next verification): on SQLite one
        read-only connection kept open, a read transaction begun on it (nothing else runs statements on it, so
        its first read takes a snapshot as of now); on PostgreSQL a fresh one."""
        if self.is_pg:
            return self._snapshot_conn(), False
        if self._verify_conn is None:
            self._verify_conn = self._connect(readonly=True, create=False)
        self._verify_conn.execute("BEGIN")
        return self._verify_conn, True

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
        bad = _bad_row(row, seq - 1, row[9])  # the checkpoint row's own content still matches its hash
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
            bad = _stub_mismatch(seg, rows, kept)
            for r in rows if bad is None else ():
                if r[0] <= since:
                    continue
                bad = _bad_row(r, prev_seq, prev_hash)
                if bad is not None:
                    break
                prev_seq, prev_hash = r[0], r[10]
                checked += 1
            if bad is not None:
                return VerifyReport(False, checked, prev_seq, bad[0], bad[1], head_hash=prev_hash, since=since)
        for rows in _pages(conn, f"SELECT {_COLS} FROM events WHERE seq > ?", max(since, hot_from), 2000,
                           paged=self.is_pg):
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
            bad = _anchor_mismatch(lambda s: self._row_at(conn, s), rec, r.head_seq, what)
            if bad is not None:
                return replace(r, ok=False, first_bad_seq=bad[0], reason=bad[1])
        if head is None and r.head_seq > 0 and not self.is_pg:
            return replace(r, warnings=(f"no head file at {self.head_file}: deleting the newest events "
                                                    "cannot be detected without one",))
        return r

    def _read_checkpoint(self) -> tuple[int, str] | None:
        if self._checkpoint is None:
            return None
        try:
            return _parse_head(_read_bytes(self._checkpoint))
        except OSError:
            return None

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
        self._serial += 1  # what ``memo`` kept was read from the read models replaced here
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
            batch.append((r[0], _search_text(r)))
            if len(batch) >= 1000:
                self.conn.executemany(_INSERT_FTS, batch)
                batch = []
        if batch:
            self.conn.executemany(_INSERT_FTS, batch)
