"""The hash chain: canonical bytes, a row's hash, the head file and the checks verification makes.

Pure: no database here. The store (agent/store/log.py) and the context build (which hashes requests over
the same canonical JSON) both import it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Protocol

from agent import events as ev
from agent.errors import LogError, PayloadError
from agent.events import Event
from agent.events.canonical import canonical
from agent.store.segment_types import Segment

GENESIS = "0" * 64
COLS = "seq, id, ts, kind, version, source, tick, payload, tokens, prev_hash, hash"
"""An events row's columns, in the order every reader takes them."""


def row_to_event(r: tuple[Any, ...]) -> Event:
    return Event(seq=r[0], id=r[1], ts=r[2], kind=r[3], version=r[4], source=r[5], tick=r[6],
                 payload=ev.decode(r[3], r[4], json.loads(r[7])), tokens=r[8], prev_hash=r[9], hash=r[10])


def row_hash(seq: int, id: str, ts: str, kind: str, version: int, source: str, tick: int | None,
             payload_json: str, tokens: int | None, prev_hash: str) -> str:
    body = canonical([seq, id, ts, kind, version, source, tick, tokens]) + "\n" + payload_json
    return hashlib.sha256((prev_hash + "\n" + body).encode("utf-8")).hexdigest()


def parse_head(data: bytes) -> tuple[int, str] | None:
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


def bad_row(r: tuple[Any, ...], prev_seq: int, prev_hash: str) -> tuple[int, str] | None:
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


def anchor_mismatch(row_at: Callable[[int], tuple[Any, ...] | None], rec: tuple[int, str], end: int,
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


def stub_mismatch(seg: Segment, rows: list[tuple[Any, ...]], kept: dict[int, tuple[Any, ...]]) -> tuple[int, str] | None:
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


def read_head(path: str | None) -> tuple[int, str] | None:
    """The (seq, hash) a head (or checkpoint) file records; None when it is missing or unreadable."""
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            return parse_head(f.read())
    except OSError:
        return None


def write_head(fd: int, seq: int, h: str) -> None:
    """Record (seq, hash) in the open head file ``fd``, under an exclusive flock, unless it already records a
    seq as new: writers in several processes never move it backwards."""
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        data = os.pread(fd, 128, 0)
        old = parse_head(data)
        if old is not None and old[0] >= seq:
            return
        record = f"{seq} {h}\n".encode("ascii")
        os.pwrite(fd, record, 0)
        if len(data) > len(record):
            os.ftruncate(fd, len(record))
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


class HeadFile:
    """The file beside the database that records the newest (seq, hash): truncation evidence.

    The file stays open and is rewritten in place under an exclusive flock, so writers in several
    processes never move it backwards. Best effort: a failed write is reported by verify, not by the
    append (which has committed)."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._fd: int | None = None

    def read(self) -> tuple[int, str] | None:
        return read_head(self.path)

    def write(self, seq: int, h: str) -> None:
        if self.path is None:
            return
        try:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            write_head(self._fd, seq, h)
        except OSError:
            pass  # verify() compares what is there; the append itself has committed

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


# The checkpoint file is rewritten (fsync'd) once verification has moved this many events past what it records;
# in between, the process remembers how far it verified. A start after a crash walks at most this many more.
CHECKPOINT_EVERY = 2000


class Checkpoint:
    """How far verification reached: this process's own last verification (``verified``), and the
    (seq, hash) recorded in the checkpoint file beside the database (``filed``: its seq, as last read or
    written here)."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.verified: tuple[int, str] | None = None
        self.filed: int | None = None

    def start(self) -> tuple[int, str] | None:
        """Where the next verification may start: this process's last one, else the file's record."""
        if self.verified is not None:
            return self.verified
        cp = read_head(self.path)
        self.filed = cp[0] if cp is not None else None
        return cp

    def reached(self, seq: int, h: str) -> None:
        """A clean verification reached (seq, h): remembered, and filed (best effort) when the file records
        nothing yet or is ``CHECKPOINT_EVERY`` events behind."""
        self.verified = (seq, h)
        if (self.filed is None or seq - self.filed >= CHECKPOINT_EVERY) and self.write(seq, h):
            self.filed = seq

    def close(self) -> None:
        if self.verified is not None and self.verified[0] > (self.filed or 0):
            self.write(*self.verified)  # how far this process verified, for the next start

    def write(self, seq: int, h: str) -> bool:
        """Record a verified (seq, hash) beside the database, atomically; False when it cannot be written."""
        if self.path is None:
            return False
        tmp = f"{self.path}.{os.getpid()}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, f"{seq} {h}\n".encode("ascii"))
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
            return True
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            return False


class ChainRows(Protocol):
    """One snapshot of a log's rows, as verification reads them (a recorder's reader on a fresh connection)."""

    def segments(self) -> list[Segment]:
        """The sealed segments' stubs, oldest first (none where the log has no tiers)."""
        ...

    def segment_rows(self, seg: Segment) -> list[tuple[Any, ...]]:
        """The rows of ``seg``, re-read and checked against its sha256 (LogError when they cannot be)."""
        ...

    def kept(self, upto: int) -> dict[int, tuple[Any, ...]]:
        """seq -> the events table's rows with seq <= ``upto`` (rows an archive kept)."""
        ...

    def pages(self, since: int) -> Iterator[list[tuple[Any, ...]]]:
        """The events table's rows with seq > ``since`` in seq order, some at a time."""
        ...

    def row_at(self, seq: int, *, fresh: bool = False) -> tuple[Any, ...] | None:
        """The row at ``seq``: the events table's, else its segment's (``fresh``: the segment re-read)."""
        ...

    def last_seq(self) -> int:
        """The events table's newest seq (0 when empty)."""
        ...


class Verifier:
    """The checks of one log's chain over one snapshot of its rows: a walk from the start or from a
    checkpoint, then the recorded heads (the head file, an operator's anchor)."""

    def __init__(self, rows: ChainRows, *, head_file: str | None = None, warn_missing_head: bool = True) -> None:
        self.rows = rows
        self.head_file = head_file
        self.warn_missing_head = warn_missing_head

    def verify(self, head: tuple[int, str] | None, anchor: tuple[int, str] | None = None) -> VerifyReport:
        """Walk the whole chain, then check ``head`` (the head file's record) and ``anchor``."""
        return self.check_anchors(self.walk(0, GENESIS), head, anchor)

    def verify_from(self, cp: tuple[int, str] | None, head: tuple[int, str] | None) -> VerifyReport:
        """Walk from the checkpoint ``cp`` (its row must still carry its hash), then check ``head``."""
        return self.check_anchors(self.from_checkpoint(cp), head, None)

    def from_checkpoint(self, cp: tuple[int, str] | None) -> VerifyReport:
        if cp is None or cp[0] == 0:
            return self.walk(0, GENESIS)
        seq, h = cp
        try:
            row = self.rows.row_at(seq, fresh=True)
        except LogError as e:
            return VerifyReport(False, 0, seq - 1, seq, str(e))
        if row is None:
            end = self.rows.last_seq()
            return VerifyReport(False, 0, end, min(seq, end + 1),
                                f"the verified checkpoint records seq {seq} but the log ends at {end}: "
                                "events were truncated or deleted")
        if row[10] != h:
            return VerifyReport(False, 0, seq, seq,
                                f"seq {seq}: hash differs from the verified checkpoint: history was rewritten")
        bad = bad_row(row, seq - 1, row[9])  # the checkpoint row's own content still matches its hash
        if bad is not None:
            return VerifyReport(False, 0, seq - 1, bad[0], bad[1])
        return self.walk(seq, h, since=seq)

    def walk(self, prev_seq: int, prev_hash: str, *, since: int = 0) -> VerifyReport:
        """Walk the chain after ``since``: every sealed segment (re-read, sha256-checked), then the events table."""
        checked = 0
        segs = self.rows.segments()
        hot_from = segs[-1].last_seq if segs else 0
        kept = self.rows.kept(hot_from)
        for seg in segs:
            if seg.last_seq <= since:
                continue
            try:
                rows = self.rows.segment_rows(seg)
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
        for page in self.rows.pages(max(since, hot_from)):
            for r in page:
                bad = bad_row(r, prev_seq, prev_hash)
                if bad is not None:
                    return VerifyReport(False, checked, prev_seq, bad[0], bad[1], head_hash=prev_hash, since=since)
                prev_seq, prev_hash = r[0], r[10]
                checked += 1
        return VerifyReport(True, checked, prev_seq, head_hash=prev_hash, since=since)

    def check_anchors(self, r: VerifyReport, head: tuple[int, str] | None,
                      anchor: tuple[int, str] | None) -> VerifyReport:
        """The walked chain against the head file and an operator's recorded head."""
        if not r.ok:
            return r
        for rec, what in ((head, "the head file"), (anchor, "the recorded head")):
            if rec is None:
                continue
            bad = anchor_mismatch(lambda s: self.rows.row_at(s), rec, r.head_seq, what)
            if bad is not None:
                return replace(r, ok=False, first_bad_seq=bad[0], reason=bad[1])
        if head is None and r.head_seq > 0 and self.warn_missing_head:
            return replace(r, warnings=(f"no head file at {self.head_file}: deleting the newest events "
                                        "cannot be detected without one",))
        return r
