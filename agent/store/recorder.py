"""What the event log asks of its database: the recorder interface, and the filter its reads take.

``EventLog`` (agent/store/log.py) keeps the log's rules (the hash chain, transactions that join, held
appends, the fence) and leaves storage to a recorder: one for a SQLite file (agent/store/sqlite_recorder.py,
with the archived months of agent/store/archive.py) and one for a fleet in a PostgreSQL database
(agent/store/pg_recorder.py). Each writes its own dialect of SQL.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

from agent.events import Event
from agent.store import dialect
from agent.store.chain import ChainRows
from agent.store.segment_types import Segment

if TYPE_CHECKING:
    from agent.store.segments import SegmentFiles

Row = tuple[Any, ...]
Render = Callable[[Event], "dict[str, Any] | None"]


@dataclass(frozen=True)
class Filter:
    """What ``EventLog.read`` asks for, as SQL for the events table and as a test for archived rows."""

    since: int
    until_seq: int | None
    until_ts: str | None
    since_ts: str | None
    kinds: frozenset[str] | None
    tick: int | None

    def where(self, *, after: int, mark: str) -> tuple[str, list[Any]]:
        """The WHERE clause (placeholders written ``mark``: the recorder's dialect) and its parameters."""
        where: list[str] = [f"seq > {mark}"]
        params: list[Any] = [max(self.since, after)]
        for col, op, value in (("seq", "<=", self.until_seq), ("ts", "<=", self.until_ts),
                               ("ts", ">=", self.since_ts), ("tick", "=", self.tick)):
            if value is not None:
                where.append(f"{col} {op} {mark}")
                params.append(value)
        if self.kinds:
            ks = sorted(self.kinds)
            where.append(f"kind IN ({','.join([mark] * len(ks))})")
            params.extend(ks)
        return " AND ".join(where), params

    def may_hold(self, seg: Segment) -> bool:
        return seg.may_hold(since=self.since, until_seq=self.until_seq, since_ts=self.since_ts,
                            until_ts=self.until_ts, kinds=self.kinds, tick=self.tick)

    def matches(self, r: Row) -> bool:
        seq, ts = r[0], r[2]
        return (seq > self.since and (self.until_seq is None or seq <= self.until_seq)
                and (self.until_ts is None or ts <= self.until_ts) and (self.since_ts is None or ts >= self.since_ts)
                and (self.kinds is None or r[3] in self.kinds) and (self.tick is None or r[6] == self.tick))


class Recorder(ABC):
    """The storage operations of one log: its connection, the append transaction's steps, the reads,
    the full-text index. Rows are events rows in ``chain.COLS`` order."""

    dialect: ClassVar[str]
    """``sqlite`` or ``postgresql``."""
    warns_missing_head: ClassVar[bool]
    """Whether verification warns when no head file exists (a PostgreSQL fleet may have no state directory)."""

    conn: Any
    """The connection the read models and ``Store`` use."""
    file: str | None
    """The database file (None: not a file)."""
    beside: str
    """The path the archived months' directory is named after (``<beside>.segments``)."""

    @cached_property
    def segment_files(self) -> SegmentFiles:
        """Archived months (agent/store/archive.py), read through the recorder transparently. Made on first
        use: a command reading only read models does not import agent.store.segments."""
        from pathlib import Path

        from agent.store.segments import SegmentFiles

        return SegmentFiles(Path(self.beside))

    # ------------------------------------------------------------------ transactions

    @abstractmethod
    def begin(self) -> tuple[int, str] | None:
        """Open the append transaction, holding the log's write lock; the (seq, hash) of the newest row
        (None when there is none)."""

    @abstractmethod
    def commit(self) -> None: ...

    def rollback(self) -> None:
        """Roll back the open transaction, if the database has not already (a failed COMMIT, some I/O errors)."""
        if self.conn.in_transaction:
            dialect.run(self.conn, "ROLLBACK")

    def savepoint(self) -> None:
        dialect.run(self.conn, "SAVEPOINT joined")

    def release(self) -> None:
        dialect.run(self.conn, "RELEASE joined")

    def rollback_savepoint(self) -> None:
        """Undo what was done since ``savepoint`` (if the database has not rolled everything back already)."""
        if self.conn.in_transaction:
            dialect.run(self.conn, "ROLLBACK TO joined")
            dialect.run(self.conn, "RELEASE joined")

    @abstractmethod
    def sync(self) -> None:
        """Send what the open transaction has queued and wait for the server."""

    @property
    def in_transaction(self) -> bool:
        return bool(self.conn.in_transaction)

    @abstractmethod
    def insert(self, rows: Iterable[Row]) -> None:
        """Insert events rows (inside the open transaction)."""

    # ------------------------------------------------------------------ reading

    @abstractmethod
    def head(self) -> tuple[int, str] | None:
        """(seq, hash) of the newest row; None when there is none."""

    @abstractmethod
    def row_at(self, seq: int) -> Row | None:
        """The row at ``seq`` (archived ones from their segment)."""

    @abstractmethod
    def read(self, q: Filter, *, limit: int | None, newest_first: bool) -> Iterator[Row]:
        """The rows ``q`` asks for, in seq order (or newest first)."""

    @abstractmethod
    def segments(self) -> list[Segment]:
        """The sealed segments' stubs (none where the log has no tiers)."""

    @abstractmethod
    def count(self) -> int:
        """Every event, archived ones included."""

    def others_version(self) -> int | None:
        """A number that changes whenever another connection commits (None where the database keeps none)."""
        return None

    def file_ident(self) -> tuple[int, int] | None:
        """(device, inode) of the database file now; None when nothing is at its path. A database that cannot
        be moved from under its connection gives (0, 0)."""
        return (0, 0)

    @abstractmethod
    def snapshot(self) -> AbstractContextManager[ChainRows]:
        """A fresh read-only connection reading one snapshot, as verification reads it (others may append)."""

    # ------------------------------------------------------------------ the full-text index

    @abstractmethod
    def index_head(self) -> int:
        """The newest seq the full-text index holds (it holds a prefix of the log)."""

    @abstractmethod
    def index_upto(self, done: int, head: int, render: Render | None) -> int:
        """Index the events after seq ``done`` up to ``head``; how many."""

    @abstractmethod
    def reindex(self, rows: Iterator[Row]) -> None:
        """Within a rebuild: replace the full-text index with one of ``rows`` (where the index can be replaced)."""

    @abstractmethod
    def search(self, terms: list[str], words: list[str], query: str, *, limit: int,
               until_seq: int | None) -> list[tuple[Event, str]]:
        """Events matching every term, newest first, each with its snippet (``agent.store.search``)."""

    def close(self) -> None:
        self.conn.close()

