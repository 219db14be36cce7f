"""Copy one log into another database, chain and all: SQLite -> PostgreSQL and back (``log migrate``).

The source must verify; the target must hold no events of this fleet. Every event is copied row for row
(same seq, id, ts, payload text and hash) in one transaction, so a failure leaves the target as it was;
the read models and the search index are built as the events go in. Then the target's chain is
verified, its head must equal the source's, and its read models must equal a rebuild from the log.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

from agent.config import LogLocation
from agent.errors import ChainBroken, LogError
from agent.store.log import EventLog


@dataclass(frozen=True)
class MigrateResult:
    source: str
    target: str
    events: int
    head_seq: int
    head_hash: str


def migrate(source: LogLocation, target: LogLocation) -> MigrateResult:
    """Copy ``source``'s log into ``target`` (new or empty) and check both ends; LogError / ChainBroken
    name what is wrong, and a SQLite target this call created is removed again on failure."""
    if str(source) == str(target):
        raise LogError(f"log migrate: the source and the target are the same log ({source})")
    created = isinstance(target, Path) and not target.exists()
    if isinstance(target, Path) and target.exists() and target.stat().st_size > 0:
        raise LogError(f"log migrate: {target} already exists; migrate into a new file (or an empty database)")
    with EventLog(source, readonly=True, create=False) as src:
        r = src.verify()
        if not r.ok:
            raise ChainBroken(f"log migrate: the source {source} fails verification at seq {r.first_bad_seq}: "
                              f"{r.reason}; nothing was copied")
        try:
            return _copy(src, target, r.head_seq, r.head_hash)
        except BaseException:
            if created and isinstance(target, Path):
                for suffix in ("", "-wal", "-shm", ".head", ".verified"):
                    with contextlib.suppress(OSError):
                        target.with_name(target.name + suffix).unlink()
            raise


def _copy(src: EventLog, target: LogLocation, head_seq: int, head_hash: str) -> MigrateResult:
    with EventLog(target, create=True) as dst:
        if dst.last_seq() != 0:
            raise LogError(f"log migrate: {target} already holds {dst.count()} events of this fleet; migrate into "
                           "an empty log")
        n = dst.adopt(src.read(0, until_seq=head_seq))
        got = dst.verify()
        if not got.ok or (got.head_seq, got.head_hash) != (head_seq, head_hash):
            raise ChainBroken(f"log migrate: the copy in {target} does not verify to the source's head "
                              f"{head_seq}:{head_hash} ({got.reason or f'it ends at {got.head_seq}'})")
        drift = dst.rebuild_check()
        if drift:
            raise LogError(f"log migrate: the read models in {target} differ from a rebuild: {drift[0]}")
    return MigrateResult(str(src.path), str(target), n, head_seq, head_hash)
