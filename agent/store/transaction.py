"""An append transaction on the event log: new events made, hashed onto the chain, inserted with their read
models; and how transactions nest (a savepoint), hold appends for the next commit, and run the fence."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any

from agent import events as ev
from agent.errors import LogError, PayloadError
from agent.events import Event
from agent.events.canonical import canonical
from agent.store import readmodels
from agent.store.chain import GENESIS, row_hash
from agent.store.db import db_errors, sqlite3
from agent.store.queries import Store
from agent.times import utc_ts

if TYPE_CHECKING:
    from agent.store.log import EventLog

Item = tuple[str, "dict[str, Any]", str, "int | None"]


def utc_now() -> datetime:
    """The log's clock unless it is given another: now, in UTC."""
    return datetime.now(UTC)


def new_event_id() -> str:
    """A random (version 4) UUID as text (``uuid``, which loads ``platform``, is imported by the first append: a
    command that only reads goes without it)."""
    import uuid

    return str(uuid.uuid4())


def check_item(kind: str, payload: dict[str, Any], source: str) -> None:
    """PayloadError when ``payload`` is not a valid current ``kind`` from ``source``."""
    if source not in ev.SOURCES:
        raise PayloadError(f"{kind}: unknown source {source!r}; one of {', '.join(ev.SOURCES)}")
    ev.kind(kind).validate(payload)


def new_event(kind: str, payload: dict[str, Any], source: str, tick: int | None, seq: int, prev: str,
              now: datetime) -> tuple[Event, str]:
    """The event ``payload`` appended as the current version of ``kind`` at ``seq`` after ``prev`` makes,
    and its row's payload text (PayloadError when it does not fit)."""
    current = ev.kind(kind).versions[-1]
    check_item(kind, payload, source)
    text = canonical(payload)
    body = json.loads(text)  # the event's own copy, equal to what reading its row back gives
    if current.stored is not None:  # the row holds the version's smaller form; readers get ``body``
        text = canonical(current.stored.encode(body))
    eid, ts = new_event_id(), utc_ts(now)
    h = row_hash(seq, eid, ts, kind, current.number, source, tick, text, None, prev)
    return Event(seq=seq, id=eid, ts=ts, kind=kind, version=current.number, source=source, tick=tick,
                 payload=body, tokens=None, prev_hash=prev, hash=h), text


class Transaction:
    """An open append transaction (the log's write lock held): read, then append, atomically."""

    def __init__(self, log: EventLog, conn: Any, head: tuple[int, str]) -> None:
        self.log = log
        self.conn = conn
        self._seq, self._hash = head
        self.appended: list[Event] = []
        self.after: list[Callable[[], object]] = []  # to run once this commits (``EventLog.after_commit``)
        self.gone: str | None = None  # why the database no longer has this transaction open (rolled back)

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
        if self.gone is not None:
            raise LogError(f"the event log at {self.log.path} could not be written: {self.gone}")
        rows: list[tuple[Any, ...]] = []
        events: list[Event] = []
        seq, prev = self._seq, self._hash
        # On the system clock the events of one call share one timestamp (they are appended in one act); a
        # clock the log was given (a simulation's, a test's) is read for each event.
        clock = self.log.clock
        now = clock() if clock is utc_now else None
        for kind, payload, source, tick in items:
            e, text = new_event(kind, payload, source, tick, seq + 1, prev, now or clock())
            rows.append((e.seq, e.id, e.ts, e.kind, e.version, e.source, e.tick, text, None, e.prev_hash, e.hash))
            events.append(e)
            seq, prev = e.seq, e.hash
        if not events:
            return events
        self.log.recorder.insert(rows)
        readmodels.apply_many(self.conn, events)
        self._seq, self._hash = events[-1].seq, events[-1].hash
        self.appended.extend(events)
        if self.log.fence is not None:
            self.log.recorder.sync()  # a daemon's append: nothing left waiting on the client before the commit
        return events

    def index_search(self, render: Callable[[Event], dict[str, Any] | None] | None = None) -> int:
        """Add to the full-text index every event it does not hold yet, in seq order; how many.

        The index holds a prefix of the log (rowid = seq): appends leave it behind and this brings
        it up to the head, rendering each event once (``render``: a renderer that gives exactly
        ``agent.events.render``'s message, such as a projection cache's, which has most of a tick's
        events already). An event that does not render is indexed by its kind and payload, as an
        invisible one is."""
        rec = self.log.recorder
        return rec.index_upto(rec.index_head(), self._seq, render)


class Writer:
    """The log's transactions: the one this thread has open (others join it), the appends held for the
    next commit, and what runs once a commit is made."""

    def __init__(self, log: EventLog) -> None:
        self.log = log
        self.held: list[Item] | None = None  # appends held for the next commit (see ``holding``)
        self.open: tuple[Transaction, int] | None = None  # the transaction in progress and its thread

    def current(self) -> Transaction | None:
        """The transaction this thread has open on the log, if any."""
        outer = self.open
        return outer[0] if outer is not None and outer[1] == threading.get_ident() else None

    def foreign(self) -> bool:
        """True while a transaction that is not this thread's is open on the log's connection."""
        return self.log.recorder.in_transaction and self.current() is None

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """``EventLog.transaction``."""
        if self.log.readonly:
            raise LogError("this log was opened read-only")
        outer = self.current()
        if outer is not None:
            with self._joined(outer) as tx:
                yield tx
            return
        held, self.held = self.held or [], ([] if self.held is not None else None)
        try:
            tx = self._begin()
            try:
                if held:
                    tx.extend(held)
                yield tx
                self._commit(tx)
            except BaseException as e:
                self.open = None
                tx.gone = tx.gone or f"rolled back ({type(e).__name__})"
                self.log.recorder.rollback()
                raise
        except BaseException as e:
            if held and self.held is not None:
                self.held[:0] = held  # not committed: still held, still first
            self._raise_written(e)
            raise
        self._committed(tx)

    def _begin(self) -> Transaction:
        head = self.log.recorder.begin()
        tx = Transaction(self.log, self.log.recorder.conn, head or (0, GENESIS))
        self.open = (tx, threading.get_ident())
        return tx

    def _commit(self, tx: Transaction) -> None:
        """The fence (when ``tx`` appended), then COMMIT (through the log's ``commit_guard`` when it has one)."""
        try:
            if tx.gone is not None:
                raise LogError(f"the event log at {self.log.path} could not be written: {tx.gone}")
            if tx.appended and self.log.fence is not None:
                self.log.fence()
        finally:
            self.open = None
        guard = self.log.commit_guard
        if guard is None:
            self.log.recorder.commit()
        else:
            guard(self.log.recorder.commit)

    def _raise_written(self, e: BaseException) -> None:
        """LogError (the driver's message, secrets scrubbed) for a database error ``e``; nothing for others."""
        if isinstance(e, db_errors()):
            from agent.secrets import scrub

            raise LogError(f"the event log at {self.log.path} could not be written: {scrub(str(e))}") from e

    def _committed(self, tx: Transaction) -> None:
        """After ``tx`` committed: the head file, then what was to run once it did."""
        if tx.appended:
            self.log.heads.write(tx.appended[-1].seq, tx.appended[-1].hash)
        for fn in tx.after:
            fn()

    @contextmanager
    def _joined(self, tx: Transaction) -> Iterator[Transaction]:
        """A transaction inside ``tx``: a savepoint; on an exception the block's appends (and the
        held events it took) are undone and ``tx`` goes on as it was."""
        if tx.gone is not None:
            raise LogError(f"the event log at {self.log.path} could not be written: {tx.gone}")
        seq, h, n, m = tx._seq, tx._hash, len(tx.appended), len(tx.after)
        held, self.held = self.held or [], ([] if self.held is not None else None)
        rec = self.log.recorder
        rec.savepoint()
        try:
            if held:
                tx.extend(held)
            yield tx
            rec.release()
        except BaseException as e:
            rec.rollback_savepoint()  # unless the database rolled the whole transaction back already
            tx._seq, tx._hash = seq, h
            del tx.appended[n:], tx.after[m:]
            if held and self.held is not None:
                self.held[:0] = held
            if not rec.in_transaction:
                # The database rolled back the enclosing transaction too: it is gone, and whoever goes on
                # with it (having caught this) must not append outside any transaction, where each row would
                # commit alone, unfenced, onto a head that no longer exists: its appends, joins and commit
                # raise from now on.
                tx.gone = f"its transaction was rolled back ({type(e).__name__}: {e})"[:300]
            if isinstance(e, sqlite3.Error):
                raise LogError(f"the event log at {self.log.path} could not be written: {e}") from e
            raise

    def after_commit(self, fn: Callable[[], object]) -> None:
        """``EventLog.after_commit``."""
        tx = self.current()
        if tx is not None:
            tx.after.append(fn)
        else:
            fn()

    @contextmanager
    def holding(self) -> Iterator[None]:
        """``EventLog.holding``."""
        if self.held is not None:
            yield
            return
        self.held = []
        try:
            yield
        finally:
            if self.held:
                with self.transaction():
                    pass
            self.held = None

    def append_held(self, items: Iterable[Item]) -> None:
        """``EventLog.append_held``."""
        if self.held is None:
            self.log.append_many(items)
            return
        for kind, payload, source, _ in (batch := list(items)):
            check_item(kind, payload, source)
        self.held.extend(batch)
