"""Storage tiers: old months of the log move into sealed segment files, and nothing is lost.

``archive`` moves every calendar month whose events are all older than ``storage.archive_after`` and
covered by a summary (seq <= the newest ``context.compacted``'s ``covered_to``) into one segment
(agent/store/segments.py). Each move is crash-safe: the segment is written to a temporary name,
fsynced, renamed and read back (sha256, and every row re-hashed along the chain); with an
``archive_url`` it is also copied there and read back; only then one transaction records the stub
row and deletes the month's rows. A kill before the commit leaves the old state (the file is an
orphan the next run overwrites); after it, the new one.

The database lets exactly this DELETE through (migration 008_segments): a row may go only when a
segment row covers its seq, and a segment row can only be inserted when it continues the previous
segment, ends before the newest event and carries the prev_hash and hash of rows the table holds.
Stubs are sealed (no UPDATE of what they cover, no DELETE). ``log verify`` then checks each file
against its stub's sha256 and walks its rows as part of the one chain.

A few rows stay in the table although a segment holds them too ("kept" rows): each knowledge
file's newest text and every recorded request input, which live queries read by seq. ``log verify``
checks that each kept row equals its archived copy. The full-text index keeps its rows, so
``log search`` and the model's ``search_history`` find archived events as before (a hit is read
back from its segment).

``prune`` deletes local segment files, and only those whose copy elsewhere (object storage, or a
backup written by ``fleet-agent backup``) was read back and matched just now.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from agent.errors import LogError
from agent.store.chain import COLS as _COLS
from agent.store.chain import bad_row
from agent.store.db import immediate, sqlite3
from agent.store.log import EventLog
from agent.store.segments import (
    SUFFIX,
    Remote,
    Segment,
    compress,
    decode,
    decompress,
    encode,
    sha256,
    write_durably,
)
from agent.times import utc_ts


@dataclass(frozen=True)
class Month:
    """One calendar month of events due to move: seq range and count."""

    month: str
    first_seq: int
    last_seq: int
    events: int


@dataclass(frozen=True)
class Plan:
    """What ``archive`` would move now, and why it stops where it does."""

    before_ts: str        # events older than this are old enough
    covered_to: int       # the newest summary covers events up to here
    cut_seq: int          # nothing after this seq moves
    months: list[Month] = field(default_factory=list)

    @property
    def events(self) -> int:
        return sum(m.events for m in self.months)


@dataclass(frozen=True)
class ArchiveResult:
    plan: Plan
    sealed: list[Segment]

    @property
    def raw_bytes(self) -> int:
        return sum(s.raw_bytes for s in self.sealed)

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.sealed)


def plan(log: EventLog, *, older_than: float, now: datetime) -> Plan:
    """The whole months that may move now (oldest first), each entirely before the cut."""
    store = log.store
    segs = store.segments()
    after = segs[-1].last_seq if segs else 0
    comp = next(iter(log.read(0, kinds=["context.compacted"], newest_first=True, limit=1)), None)
    covered = int(comp.payload["covered_to"]) if comp is not None else 0
    before_ts = utc_ts(now - timedelta(seconds=older_than))
    cut = min(covered, store.last_seq_before(before_ts))
    months: list[Month] = []
    expect = after + 1
    for m, a, b, n in store.month_spans(after):
        # A month moves whole; one whose rows interleave with another's (a clock set back) stops the plan.
        if b > cut or a != expect or n != b - a + 1:
            break
        months.append(Month(m, a, b, n))
        expect = b + 1
    return Plan(before_ts, covered, cut, months)


def archive(log: EventLog, *, older_than: float, now: datetime, remote: Remote | None = None,
            dry_run: bool = False) -> ArchiveResult:
    """Move every month ``plan`` names into its segment (see the module's docstring for the steps)."""
    if log.readonly:
        raise LogError("this log was opened read-only")
    _refuse_pg(log)
    p = plan(log, older_than=older_than, now=now)
    if dry_run:
        return ArchiveResult(p, [])
    _clean_temporaries(log)
    # The full-text index keeps archived events' rows; it lags the log (appends leave it behind), so it
    # is brought up to the head before any row leaves the table.
    log.index_search()
    sealed = [_seal(log, m, remote, now) for m in p.months]
    return ArchiveResult(p, sealed)


def _refuse_pg(log: EventLog) -> None:
    if log.is_pg:
        raise LogError("the storage tiers are for a log in SQLite; a PostgreSQL log keeps every event in its "
                       "table (size it with the server's own tools); set storage.archive_after to null")


def _clean_temporaries(log: EventLog) -> None:
    """Remove temporary files an interrupted archive left behind."""
    d = log.segment_files.dir
    if d.is_dir():
        for tmp in d.glob("*.tmp"):
            with contextlib.suppress(OSError):
                tmp.unlink()


def _segment_name(log: EventLog, m: Month) -> str:
    taken = {s.name for s in log.store.segments()}
    name = f"{m.month}{SUFFIX}"
    return name if name not in taken else f"{m.month}-{m.first_seq}{SUFFIX}"


def _seal(log: EventLog, m: Month, remote: Remote | None, now: datetime) -> Segment:
    rows = [tuple(r) for r in log.conn.execute(f"SELECT {_COLS} FROM events WHERE seq BETWEEN ? AND ? ORDER BY seq",
                                               (m.first_seq, m.last_seq))]
    if len(rows) != m.events:
        raise LogError(f"the events of {m.month} changed while archiving them; run 'fleet-agent log archive' again")
    raw = encode(rows)
    data = compress(raw)
    name = _segment_name(log, m)
    path = log.segment_files.dir / name
    write_durably(path, data)
    _read_back(path.read_bytes(), name, sha256(data), rows)
    copy_url = copy_ts = None
    if remote is not None:
        remote.put(name, data)
        _read_back(remote.get(name), name, sha256(data), rows)
        copy_url, copy_ts = remote.location(name), utc_ts(now)
    ticks = [r[6] for r in rows if r[6] is not None]
    seg = Segment(first_seq=m.first_seq, last_seq=m.last_seq, name=name, month=m.month, prev_hash=rows[0][9],
                  last_hash=rows[-1][10], first_ts=rows[0][2], last_ts=rows[-1][2], events=len(rows),
                  kinds=json.dumps(sorted({r[3] for r in rows})), min_tick=min(ticks, default=None),
                  max_tick=max(ticks, default=None), bytes=len(data), raw_bytes=len(raw), sha256=sha256(data),
                  sealed_ts=utc_ts(now), copy_url=copy_url, copy_ts=copy_ts)
    _commit(log, seg)
    return seg


def _read_back(data: bytes, name: str, digest: str, rows: list[tuple[Any, ...]]) -> None:
    """The written bytes are the sealed ones, and every row in them follows the chain and matches its hash."""
    if sha256(data) != digest:
        raise LogError(f"segment {name} read back with a different sha256 than was written; nothing was archived")
    back = decode(decompress(data, name), name)
    prev_seq, prev_hash = rows[0][0] - 1, rows[0][9]
    for r in back:
        bad = bad_row(r, prev_seq, prev_hash)
        if bad is not None:
            raise LogError(f"segment {name} read back wrong ({bad[1]}); nothing was archived")
        prev_seq, prev_hash = r[0], r[10]
    if back != rows:
        raise LogError(f"segment {name} read back differs from the rows it holds; nothing was archived")


_INSERT_SEGMENT = ("INSERT INTO segments (first_seq, last_seq, name, month, prev_hash, last_hash, first_ts, last_ts,"
                   " events, kinds, min_tick, max_tick, bytes, raw_bytes, sha256, sealed_ts, copy_url, copy_ts)"
                   " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)")


def _commit(log: EventLog, s: Segment) -> None:
    """One transaction: the stub, then the rows it now holds out of the table (kept rows excepted)."""
    try:
        with immediate(log.conn):
            log.conn.execute(_INSERT_SEGMENT, (s.first_seq, s.last_seq, s.name, s.month, s.prev_hash, s.last_hash,
                                               s.first_ts, s.last_ts, s.events, s.kinds, s.min_tick, s.max_tick,
                                               s.bytes, s.raw_bytes, s.sha256, s.sealed_ts, s.copy_url, s.copy_ts))
            keep = sorted(log.store.retained_seqs(s.first_seq, s.last_seq))
            log.conn.execute("DELETE FROM events WHERE seq BETWEEN ? AND ? AND seq NOT IN (SELECT value FROM"
                             " json_each(?))", (s.first_seq, s.last_seq, json.dumps(keep)))
    except sqlite3.Error as e:
        raise LogError(f"segment {s.name} could not be recorded ({e}); nothing was archived: run "
                       "'fleet-agent log archive' again (another archive may have run meanwhile)") from e


# ------------------------------------------------------------------ copies and pruning


@dataclass(frozen=True)
class PruneResult:
    pruned: list[Segment]
    bytes: int
    dry_run: bool


def _month_before(seg: Segment, before_ts: str) -> bool:
    return seg.last_ts < before_ts


def prune(log: EventLog, *, before_ts: str, now: datetime, remote: Remote | None = None,
          backup: Path | None = None, yes: bool = False) -> PruneResult:
    """Delete the local files of the segments whose events are all before ``before_ts``, each only after
    its copy elsewhere was read back and matched its sha256 now: on ``remote`` (written there first when
    it is missing), or beside ``backup`` (a database written by ``fleet-agent backup``). Without ``yes``
    nothing is deleted: the result names what would be."""
    _refuse_pg(log)
    due = [s for s in log.store.segments() if s.pruned_ts is None and _month_before(s, before_ts)]
    if not yes:
        return PruneResult(due, sum(s.bytes for s in due), True)
    done: list[Segment] = []
    for seg in due:
        url = _verified_copy(log, seg, remote, backup)
        with immediate(log.conn):
            log.conn.execute("UPDATE segments SET copy_url = ?, copy_ts = ? WHERE first_seq = ?",
                             (url, utc_ts(now), seg.first_seq))
            log.conn.execute("UPDATE segments SET pruned_ts = ? WHERE first_seq = ?", (utc_ts(now), seg.first_seq))
        with contextlib.suppress(FileNotFoundError):
            log.segment_files.path(seg).unlink()
        done.append(seg)
    return PruneResult(done, sum(s.bytes for s in done), False)


def _verified_copy(log: EventLog, seg: Segment, remote: Remote | None, backup: Path | None) -> str:
    """Where a copy of ``seg`` matching its sha256 is now (written to ``remote`` first when missing)."""
    if backup is not None:
        p = backup.with_name(backup.name + ".segments") / seg.name
        if p.is_file() and sha256(p.read_bytes()) == seg.sha256:
            return f"file://{p.resolve()}"
        raise LogError(f"segment {seg.name}: no copy with its sha256 at {p}; nothing was pruned from there on. "
                       "Write a new backup ('fleet-agent backup PATH' copies the segments) and name it")
    if remote is None:
        raise LogError(f"segment {seg.name} has no copy elsewhere; nothing was pruned from there on. Set "
                       "storage.archive_url, or name a backup with --backup PATH")
    data = log.segment_files.load(seg)
    with contextlib.suppress(LogError):
        if sha256(remote.get(seg.name)) == seg.sha256:
            return remote.location(seg.name)
    remote.put(seg.name, data)
    if sha256(remote.get(seg.name)) != seg.sha256:
        raise LogError(f"segment {seg.name}: the copy at {remote.location(seg.name)} reads back different; "
                       "nothing was pruned from there on")
    return remote.location(seg.name)
