"""Opening the SQLite database: one driver, pragmas, file modes, migrations.

Every connection fleet-agent opens comes from here, through ``pysqlite3``: its
wheel bundles a SQLite newer than 3.51.3, free of the WAL-reset bug that can
corrupt a database written by two processes (the daemon and the operator CLI).
sqlite-utils prefers the same module when it is installed; ``database(conn)`` puts it
over one of these connections (the queries in agent/store/queries.py read through it).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import pysqlite3.dbapi2 as sqlite3

from agent.errors import LogError

if TYPE_CHECKING:
    import sqlite_utils

MIN_SQLITE = (3, 51, 3)
BUSY_TIMEOUT_MS = 30_000

__all__ = ["sqlite3", "connect", "database", "migrations", "applied_migrations", "immediate", "sqlite_version"]


def sqlite_version() -> tuple[int, int, int]:
    major, minor, patch = (int(x) for x in sqlite3.sqlite_version.split(".")[:3])
    return (major, minor, patch)


def _schema_text() -> str:
    return resources.files("agent").joinpath("schema.sql").read_text(encoding="utf-8")


def migrations() -> list[tuple[str, str]]:
    """The ordered (name, sql) migrations declared in schema.sql."""
    parts = re.split(r"^-- migration: (\S+)\s*$", _schema_text(), flags=re.M)
    return [(parts[i], parts[i + 1]) for i in range(1, len(parts), 2)]


def _ensure_private(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not path.exists():
        fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
        os.close(fd)
    if os.stat(path).st_mode & 0o777 != 0o600:
        os.chmod(path, 0o600)


def connect(path: str | os.PathLike[str], *, readonly: bool = False) -> sqlite3.Connection:
    """A connection in autocommit mode with WAL, synchronous=FULL and a long busy timeout.

    Pending migrations are applied (each in its own transaction) unless ``readonly``.
    """
    if sqlite_version() < MIN_SQLITE:
        raise LogError(
            f"SQLite {sqlite3.sqlite_version} has the WAL-reset corruption bug; "
            "install pysqlite3>=0.6.1 (bundles SQLite >= 3.51.3)"
        )
    p = Path(path)
    if readonly and not p.exists():
        raise LogError(f"no database at {p}; run 'fleet-agent init' first")
    try:
        if readonly:
            conn = sqlite3.connect(f"file:{p}?mode=ro", uri=True, isolation_level=None, check_same_thread=False)
        else:
            old = os.umask(0o077)
            try:
                _ensure_private(p)
                conn = sqlite3.connect(str(p), isolation_level=None, check_same_thread=False)
            finally:
                os.umask(old)
    except (OSError, sqlite3.Error) as e:
        reason = e.strerror if isinstance(e, OSError) else str(e)
        raise LogError(f"cannot open the database {p}: {reason}; check the data directory exists and "
                       "belongs to the user running fleet-agent") from e
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if not readonly:
            conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        if not readonly:
            apply_migrations(conn)
    except sqlite3.Error as e:
        conn.close()
        raise LogError(f"cannot open the database {p}: {e}") from e
    except BaseException:
        conn.close()
        raise
    return conn


def database(conn: sqlite3.Connection) -> sqlite_utils.Database:
    """sqlite-utils over an open connection, changing nothing on it (no pragma, no plugin hooks).

    Imported on first use: a command that only appends (``say``) does not pay for it."""
    import sqlite_utils

    return sqlite_utils.Database(conn, recursive_triggers=False, execute_plugins=False)


@contextmanager
def immediate(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """BEGIN IMMEDIATE ... COMMIT; ROLLBACK on any error. Takes the write lock up front,
    so no SQLITE_BUSY can surface between the first read and the commit."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        # SQLite may already have rolled back (some I/O errors, a failed COMMIT); rolling back
        # again would raise and hide the original error. Never leave the transaction open.
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def apply_migrations(conn: sqlite3.Connection) -> list[str]:
    """Apply every migration not yet recorded; returns the names applied."""
    conn.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
    done = {r[0] for r in conn.execute("SELECT name FROM _migrations")}
    applied = []
    for name, sql in migrations():
        if name in done:
            continue
        with immediate(conn):
            # Re-check inside the write lock: another process may have just applied it.
            if conn.execute("SELECT 1 FROM _migrations WHERE name = ?", (name,)).fetchone():
                continue
            for stmt in _statements(sql):
                conn.execute(stmt)
            conn.execute(
                "INSERT INTO _migrations (name, applied_at) VALUES (?, strftime('%Y-%m-%dT%H:%M:%fZ','now'))",
                (name,),
            )
        applied.append(name)
    known = {n for n, _ in migrations()}
    newer = sorted({r[0] for r in conn.execute("SELECT name FROM _migrations")} - known)
    if newer:
        raise LogError(
            f"the database has migrations this version does not know ({', '.join(newer)}); "
            "it was written by a newer fleet-agent: upgrade fleet-agent"
        )
    return applied


def applied_migrations(conn: sqlite3.Connection) -> list[str]:
    """The names of the migrations recorded in this database, sorted."""
    return sorted(r["name"] for r in database(conn).table("_migrations").rows_where(select="name"))


def _statements(sql: str) -> list[str]:
    """Split a migration into complete statements (triggers contain ';')."""
    out: list[str] = []
    buf: list[str] = []
    for line in sql.splitlines():
        if line.strip().startswith("--") and not buf:
            continue
        buf.append(line)
        text = "\n".join(buf)
        if sqlite3.complete_statement(text):
            if text.strip():
                out.append(text.strip())
            buf = []
    rest = "\n".join(buf).strip()
    if rest and not all(ln.strip().startswith("--") or not ln.strip() for ln in buf):
        raise LogError(f"schema.sql: incomplete statement at the end of a migration: {rest[:60]!r}")
    return out
