"""Backups and restores of the event log.

``backup`` takes a consistent copy while the daemon runs, through SQLite's online backup API (the
copy is one snapshot of the database, whatever is appended meanwhile), writes it beside its own head
file (``<copy>.head``, the newest seq and hash it holds) and verifies the copy's whole chain before
saying so. ``restore`` verifies a copy first, then puts it in place of the database, keeping the
replaced files aside (``<name>.replaced-<time>.db``); the caller holds the single-writer lock, so no
daemon or tick writes meanwhile.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from agent.errors import FleetAgentError, UsageError
from agent.store.db import sqlite3
from agent.store.log import EventLog, VerifyReport
from agent.store.segments import SUFFIX, Remote, write_durably

# What lives beside a database and belongs to it.
_COMPANIONS = ("-wal", "-shm", ".head", ".verified")


@dataclass(frozen=True)
class BackupResult:
    path: str
    events: int
    head_seq: int
    head_hash: str
    bytes: int


@dataclass(frozen=True)
class RestoreResult:
    path: str
    events: int
    head_seq: int
    head_hash: str
    kept_aside: list[str]


def _stamp(now: datetime | None = None) -> str:
    return (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")


def backup_target(path: Path, agent_id: str, now: datetime | None = None) -> Path:
    """Where ``backup PATH`` writes: PATH itself, or a dated file inside PATH when it is a directory."""
    return path / f"fleet-agent-{agent_id}-{_stamp(now)}.db" if path.is_dir() else path


def _copy(src: sqlite3.Connection, dest: Path) -> None:
    """The online backup of ``src`` into a new file ``dest`` (0600), written to a temporary name first."""
    tmp = dest.with_name(dest.name + ".partial")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    os.close(fd)
    try:
        out = sqlite3.connect(str(tmp), isolation_level=None)
        try:
            src.backup(out)
            out.execute("PRAGMA journal_mode = DELETE")  # one self-contained file, no -wal beside it
        finally:
            out.close()
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def verify_copy(path: Path, open_remote: Callable[[], Remote] | None = None) -> VerifyReport:
    """Walk a copy's whole chain (read-only), its archived segments included (``open_remote`` reads the ones
    pruned from it), and check it against its head file when it has one."""
    if not path.is_file():
        raise FleetAgentError(f"no backup at {path}; name a file written by 'fleet-agent backup'")
    head = path.with_name(path.name + ".head")
    with EventLog(path, readonly=True, create=False, head_file=head) as copy:
        copy.segment_files.open_remote = open_remote
        return copy.verify()


def _copy_segments(src: EventLog, dest: Path) -> None:
    """The segment files ``src``'s stubs name and it holds locally, into ``<dest>.segments/`` (each read back
    by its sha256 when the copy is verified); pruned ones stay where their copy is."""
    out = dest.with_name(dest.name + ".segments")
    for seg in src.store.segments():
        if seg.pruned_ts is None:
            write_durably(out / seg.name, src.segment_files.load(seg))


def _restore_segments(src: Path, db_path: Path, stamp: str) -> None:
    """The backup's segment files into the database's segment directory; a different file of the same
    name is kept aside, never overwritten."""
    have = src.with_name(src.name + ".segments")
    if not have.is_dir():
        return
    into = db_path.with_name(db_path.name + ".segments")
    for f in sorted(have.glob("*" + SUFFIX)):
        target = into / f.name
        data = f.read_bytes()
        if target.exists():
            if target.read_bytes() == data:
                continue
            os.replace(target, target.with_name(f"{target.name}.replaced-{stamp}"))
        write_durably(target, data)


def _refuse_bad(path: Path, r: VerifyReport) -> None:
    if not r.ok:
        raise FleetAgentError(f"the copy {path} does not verify (seq {r.first_bad_seq}: {r.reason}); "
                              "nothing was changed: pick another backup")


def backup(log: EventLog, dest: Path) -> BackupResult:
    """Copy the open ``log`` to ``dest`` (refusing to overwrite), write its head file, verify the copy."""
    if dest.exists():
        raise FleetAgentError(f"{dest} already exists; backup never overwrites: name a new file or a directory")
    if not dest.parent.is_dir():
        raise FleetAgentError(f"{dest.parent} is not a directory; create it or name another place for the copy")
    try:
        _copy(log.conn, dest)
        _copy_segments(log, dest)
        head_file = dest.with_name(dest.name + ".head")
        with EventLog(dest, readonly=True, create=False, head_file=head_file) as copy:
            seq, h = copy.head()
        head_file.write_text(f"{seq} {h}\n", encoding="ascii")
        os.chmod(head_file, 0o600)
        r = verify_copy(dest, log.segment_files.open_remote)
        _refuse_bad(dest, r)
    except BaseException as e:
        dest.unlink(missing_ok=True)
        dest.with_name(dest.name + ".head").unlink(missing_ok=True)
        shutil.rmtree(dest.with_name(dest.name + ".segments"), ignore_errors=True)
        if isinstance(e, sqlite3.Error | OSError):
            raise _write_failed(dest, e) from None
        raise
    return BackupResult(str(dest), r.checked, r.head_seq, r.head_hash, dest.stat().st_size)


def _write_failed(dest: Path, e: sqlite3.Error | OSError) -> UsageError:
    """A copy that could not be written (a full disk, a file-size limit, a failing device), as one line: the
    partial files are already gone."""
    text = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
    if (isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)) or "full" in text.lower():
        text += ": the disk is full, or the file too large for it"
    elif "disk i/o" in text.lower():  # what SQLite says of a write refused for a file-size limit, too
        text += ": a full disk, a file-size limit or a failing device"
    return UsageError(f"cannot write {dest} ({text}); nothing was left behind: free space there, or name another "
                      "place")


def restore(src: Path, db_path: Path, now: datetime | None = None) -> RestoreResult:
    """Put the verified copy ``src`` in place of ``db_path``; the replaced files are renamed aside.

    The caller holds the single-writer lock. The copy is verified before anything moves; the new
    database gets its own head file and no checkpoint (the next start walks it once)."""
    r = verify_copy(src)
    _refuse_bad(src, r)
    if r.warnings:
        raise FleetAgentError(f"the copy {src} has no head file beside it ({src.name}.head), so a copy cut "
                              "short cannot be told from a whole one; restore a copy written by "
                              "'fleet-agent backup', which writes one")
    stamp = _stamp(now)
    staged = db_path.with_name(db_path.name + ".restoring")
    staged.unlink(missing_ok=True)
    with EventLog(src, readonly=True, create=False) as copy:
        try:
            _copy(copy.conn, staged)
        except (sqlite3.Error, OSError) as e:  # before anything moved: the database is as it was
            raise _write_failed(staged, e) from None
    kept = []
    base = db_path.with_name(f"{db_path.stem}.replaced-{stamp}{db_path.suffix}")  # opens as a database
    for suffix in ("", *_COMPANIONS):
        old = db_path.with_name(db_path.name + suffix)
        if old.exists():
            aside = base.with_name(base.name + suffix)
            os.replace(old, aside)
            kept.append(str(aside))
    _restore_segments(src, db_path, stamp)
    os.replace(staged, db_path)
    with EventLog(db_path, create=False) as restored:
        seq, h = restored.head()
        assert restored.head_file is not None  # a SQLite log always has one
        restored.head_file.write_text(f"{seq} {h}\n", encoding="ascii")
        os.chmod(restored.head_file, 0o600)
    with contextlib.suppress(OSError):
        fd = os.open(db_path.parent, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    return RestoreResult(str(db_path), r.checked, seq, h, kept)
