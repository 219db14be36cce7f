"""The event log: append (hash-chained), read, follow, verify, export, search.

One append-only table (schema.sql, schema_pg.sql), kept by a recorder (agent/store/recorder.py): a SQLite
file or a fleet in a PostgreSQL database. Every append runs in a transaction that holds the log's write
lock, so the daemon and operator CLI processes can append at once; read models (agent/store/readmodels.py)
change in the same transaction as the event that changes them. Each row's hash covers its canonical
content and the previous row's hash (agent/store/chain.py), so any edit, deletion or reordering shows up in
``verify()``; a head file kept beside the database lets ``verify()`` notice truncation of the newest rows too.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from agent import events as ev
from agent.config import PgTarget, path_text
from agent.errors import ChainBroken, LogError, optional_import
from agent.events import Event
from agent.events.canonical import canonical
from agent.store import readmodels, search
from agent.store.chain import CHECKPOINT_EVERY as CHECKPOINT_EVERY
from agent.store.chain import GENESIS as GENESIS
from agent.store.chain import Checkpoint, HeadFile, Verifier, bad_row
from agent.store.chain import VerifyReport as VerifyReport
from agent.store.chain import row_hash as row_hash
from agent.store.chain import row_to_event as _row_to_event
from agent.store.db import db_errors as db_errors
from agent.store.queries import Store
from agent.store.recorder import Filter, Recorder
from agent.store.rows import Instance, InstanceState
from agent.store.segment_types import Segment
from agent.store.segments import SegmentFiles
from agent.store.transaction import Item as Item
from agent.store.transaction import Transaction as Transaction
from agent.store.transaction import Writer, utc_now
from agent.store.transaction import new_event_id as new_event_id

if TYPE_CHECKING:
    from agent.tokens import Tokenizer


def open_recorder(path: str | PgTarget, *, readonly: bool, create: bool, beside: str) -> Recorder:
    """The recorder for ``path``: a SQLite file's, or a PostgreSQL one naming the fleet (``beside``: the path
    its archived months would be kept beside; a SQLite file keeps them beside itself)."""
    if not isinstance(path, PgTarget):
        from agent.store.sqlite_recorder import SqliteRecorder

        return SqliteRecorder(path, readonly=readonly, create=create)
    optional_import("psycopg", "postgres", "storage.url: postgresql://…")
    from agent.store.pg_recorder import PgRecorder

    return PgRecorder(path, readonly=readonly, create=create, beside=beside)


class EventLog:
    """The append-only log, in a SQLite file or a fleet's rows of a PostgreSQL database."""

    def __init__(self, path: str | os.PathLike[str] | PgTarget, *, encoding: str = "cl100k_base", encoding_file: str | None = None,
                 encoding_sha256: str | None = None, clock: Callable[[], datetime] | None = None,
                 readonly: bool = False, head_file: str | os.PathLike[str] | None = None,
                 create: bool = True) -> None:
        """Open the log at ``path`` (a SQLite file, or a fleet in a PostgreSQL database: ``PgTarget``). With
        ``create=False`` (every command but ``init``, and the daemon) a missing, empty or foreign database is
        refused instead of starting a new history."""
        self.target = path if isinstance(path, PgTarget) else None
        # The file and its companions are kept as text: pathlib loads only when a Path is asked for (below).
        where = path if isinstance(path, PgTarget) else path_text(os.fspath(path))
        self._file = None if isinstance(where, PgTarget) else where
        head: str | None
        checkpoint: str | None
        if self._file is not None:
            head = path_text(os.fspath(head_file)) if head_file else self._file + ".head"
            checkpoint = self._file + ".verified"
        else:
            assert self.target is not None
            named = head_file or self.target.head_file
            head = path_text(os.fspath(named)) if named else None
            cp = self.target.checkpoint_file
            checkpoint = None if cp is None else os.fspath(cp)
        self.heads = HeadFile(head)
        self.checkpoint = Checkpoint(checkpoint)
        self.recorder = open_recorder(where, readonly=readonly, create=create and not readonly,
                                      beside=str(self.head_file))
        self.conn: Any = self.recorder.conn
        self.clock = clock or utc_now
        self._enc = (encoding, encoding_file, encoding_sha256)
        self._tokenizer: Tokenizer | None = None
        self._opened_ident = self.recorder.file_ident()  # the file this connection reads (follow notices a move)
        self.readonly = readonly
        self.writer = Writer(self)
        # Called inside every transaction that appends, just before it commits; raising rolls it back.
        # The daemon sets it to its leadership check (agent.runtime.leader), so a daemon that lost the lock
        # appends nothing.
        self.fence: Callable[[], None] | None = None
        # Runs every COMMIT of this log's transactions: ``commit_guard(commit)`` commits only while the
        # daemon's lock is ours (``Leader.hold``: on SQLite, with no takeover possible until it returns);
        # raising rolls the transaction back.
        self.commit_guard: Callable[[Callable[[], None]], None] | None = None

    @property
    def is_pg(self) -> bool:
        """Whether the log is a fleet's in a PostgreSQL database."""
        return self.recorder.dialect == "postgresql"

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

        return None if self.heads.path is None else Path(self.heads.path)

    @cached_property
    def checkpoint_file(self) -> Path | None:
        """The file that records how far verification reached (None as for ``head_file``)."""
        from pathlib import Path

        return None if self.checkpoint.path is None else Path(self.checkpoint.path)

    @cached_property
    def store(self) -> Store:
        """Every query against the log's read models (and the few against the events themselves)."""
        return Store(self.conn)

    @property
    def in_transaction(self) -> bool:
        """True while a transaction block is open on this log's connection."""
        return self.recorder.in_transaction

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            from agent.tokens import get_tokenizer

            self._tokenizer = get_tokenizer(*self._enc)
        return self._tokenizer

    def close(self) -> None:
        self.checkpoint.close()
        self.heads.close()
        self.recorder.close()

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ writing

    def transaction(self) -> AbstractContextManager[Transaction]:
        """Read and append atomically; every event appended commits together or not at all.
        Events held by ``append_held`` are appended first, in the same transaction.

        Inside a transaction this thread opened on this log, a transaction joins it (as a savepoint:
        an exception rolls back the inner block alone) and commits with it, so a caller can group
        what several steps append into one commit (one fsync)."""
        return self.writer.transaction()

    def after_commit(self, fn: Callable[[], object]) -> None:
        """Run ``fn`` once the transaction this thread has open on this log commits (not at all if it
        rolls back); at once when none is open."""
        self.writer.after_commit(fn)

    def check_fence(self) -> None:
        """Raise what ``fence`` raises (a lost leadership) before a side effect; nothing when unset."""
        if self.fence is not None:
            self.fence()

    def holding(self) -> AbstractContextManager[None]:
        """Inside the block, ``append_held`` keeps its events for the next commit instead of committing
        them alone: the next transaction on this log appends them first, and the block's end commits
        what is left. For events nothing reads or acts on before the block ends (a read-only tool call's
        intent and result); everything else commits as it is appended."""
        return self.writer.holding()

    def append_held(self, items: Iterable[Item]) -> None:
        """Append ``items`` in one transaction, or, inside ``holding``, keep them (checked now) for the
        next commit."""
        self.writer.append_held(items)

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
                self.recorder.insert([row])
                readmodels.apply(self.conn, e)
                prev_seq, prev_hash = e.seq, e.hash
                tx._seq, tx._hash = e.seq, e.hash
                tx.appended.append(e)
        return len(tx.appended)

    @property
    def segment_files(self) -> SegmentFiles:
        """Archived months (agent/store/archive.py): read through here, transparently."""
        return self.recorder.segment_files

    def _read_head(self) -> tuple[int, str] | None:
        return self.heads.read()

    # ------------------------------------------------------------------ reading

    def head(self) -> tuple[int, str]:
        """(seq, hash) of the newest event: inside a write transaction this thread has open, the one it keeps."""
        tx = self.writer.current()
        if tx is not None:
            return tx._seq, tx._hash
        return self.recorder.head() or (0, GENESIS)

    def last_seq(self) -> int:
        return self.head()[0]

    def get(self, seq: int) -> Event | None:
        r = self.recorder.row_at(seq)
        return _row_to_event(r) if r else None

    def read(self, since: int = 0, *, until_seq: int | None = None, until_ts: str | None = None,
             since_ts: str | None = None, kinds: Iterable[str] | None = None, tick: int | None = None,
             limit: int | None = None, newest_first: bool = False) -> Iterator[Event]:
        """Events with seq > ``since`` (and <= until_seq, ts <= until_ts), in seq order; archived months
        are read from their segments."""
        q = Filter(since, until_seq, until_ts, since_ts, frozenset(kinds) if kinds else None, tick)
        for r in self.recorder.read(q, limit=limit, newest_first=newest_first):
            yield _row_to_event(r)

    def segments(self) -> list[Segment]:
        """The sealed segments' stubs (none on PostgreSQL: the tiers are SQLite's)."""
        return self.recorder.segments()

    def others_version(self) -> int | None:
        """A number that changes whenever another connection commits to the database (SQLite's
        ``PRAGMA data_version``); None on PostgreSQL, which keeps no such number."""
        return self.recorder.others_version()

    def owned_instances(self) -> list[Instance]:
        return self.store.owned_instances()

    def owned_instance_ids(self) -> list[int]:
        return [i.instance_id for i in self.owned_instances()]

    def instance_states(self) -> dict[int, InstanceState]:
        return self.store.instance_states()

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
                if self.recorder.file_ident() != ident:
                    raise LogError(f"the database {self.path} was moved or replaced while following it; "
                                   "put it back (or run again against the new one)")
                time.sleep(poll)

    def index_search(self) -> int:
        """Bring the full-text index up to the head (``Transaction.index_search``) in one transaction,
        when it is behind (joining the transaction this thread has open); how many events it added.
        A read-only log is left as it is."""
        if self.readonly or self.writer.foreign():
            return 0
        if self.recorder.index_head() >= self.last_seq():
            return 0
        with self.transaction() as tx:
            return tx.index_search()

    def search(self, query: str, *, limit: int = 20, until_seq: int | None = None) -> list[tuple[Event, str]]:
        """Full-text search over every event's rendered text, newest first (``agent.store.search``)."""
        return search.search(self, query, limit=limit, until_seq=until_seq)

    def count(self) -> int:
        """Every event, archived ones included."""
        return self.recorder.count()

    # ------------------------------------------------------------------ checking

    def _verifier(self, rows: Any) -> Verifier:
        return Verifier(rows, head_file=str(self.head_file), warn_missing_head=self.recorder.warns_missing_head)

    def verify(self, *, anchor: tuple[int, str] | None = None) -> VerifyReport:
        """Walk the chain from the start; report the first row whose link or hash is wrong.

        The head file (and ``anchor``, a (seq, hash) recorded elsewhere, when given) must name a
        row of the chain with that hash: otherwise the newest events were truncated or history
        was rewritten. A missing head file is reported in ``warnings``."""
        # Read the head file first, then walk on a fresh connection: the head file is written
        # after each commit, so every seq it names is in the snapshot the walk reads, even while
        # another process appends (and whatever statement this log's own connection has open).
        head = self.heads.read()
        with self.recorder.snapshot() as rows:
            return self._verifier(rows).verify(head, anchor)

    def verify_since_checkpoint(self) -> VerifyReport:
        """Verify only what the last verification did not cover (fast at start-up, whatever the size).

        The checkpoint is the (seq, hash) a previous verification reached: this process's own last one, else
        the one recorded in the checkpoint file beside the database. The row at that seq must still carry
        that hash, then the events after it are walked. A clean result moves the checkpoint to the head;
        the file is rewritten (best effort) when it records nothing yet, once it is ``CHECKPOINT_EVERY``
        events behind, and when the log closes."""
        head = self.heads.read()
        cp = self.checkpoint.start()
        with self.recorder.snapshot() as rows:
            r = self._verifier(rows).verify_from(cp, head)
        if r.ok:
            self.checkpoint.reached(r.head_seq, r.head_hash)
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
        """Replace the read models and the full-text index with a rebuild from the log (one transaction).
        A PostgreSQL index is append-only like its log: ``log migrate`` rebuilds it."""
        rec = self.recorder
        rec.begin()
        try:
            readmodels.clear(self.conn)
            for e in self.read(0):
                readmodels.apply(self.conn, e)
            rec.reindex(rec.read(Filter(0, None, None, None, None, None), limit=None, newest_first=False))
            rec.commit()
        except BaseException:
            rec.rollback()
            raise
