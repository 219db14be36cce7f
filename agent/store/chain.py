"""The hash chain: canonical bytes, a row's hash, the head file and the checks verification makes.

Pure: no database here. The store (agent/store/log.py) and the context build (which hashes requests over
the same canonical JSON) both import it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent import events as ev
from agent.errors import PayloadError
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
