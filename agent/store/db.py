"""Opening the SQLite database: one driver, pragmas, file modes, migrations.

Every connection fleet-agent opens comes from here, through ``pysqlite3``: its
wheel bundles a SQLite newer than 3.51.3, free of the WAL-reset bug that can
corrupt a database written by two processes (the daemon and the operator CLI).
sqlite-utils prefers the same module when it is installed; ``database(conn)`` puts it
over one of these connections where its table helpers earn their keep (rebuilding and comparing the read
models); it is imported there, so the read path, plain queries on the connection, never loads it (nor
click and dateutil under it).
"""

from __future__ import annotations

import os
import re
import stat
from types import TracebackType
from typing import TYPE_CHECKING

import pysqlite3.dbapi2 as sqlite3

from agent.config import path_text
from agent.errors import LogError

if TYPE_CHECKING:
    import sqlite_utils

MIN_SQLITE = (3, 51, 3)
BUSY_TIMEOUT_MS = 30_000
PAGE_SIZE = 8192
"""Bytes per page of a new database. Events are rows of 150 to 2,000 bytes and a 4 KiB page (SQLite's
default) holds about four, leaving a quarter of each leaf page unused once the next row does not fit; 8 KiB
pages hold twice as many and leave half that gap (bench/storage.py prints the file's bytes per event). A
database keeps the page size it was created with (``fleet-agent init``); VACUUM outside WAL mode converts one."""
# Each connection's page cache, in KiB (``PRAGMA cache_size`` takes it negated). SQLite's default is
# 2,000 KiB; every connection's cache is resident memory of the process that holds it, and the daemon holds
# two for its whole life. A tick reads a few hundred pages through the indexes; the kernel's page cache
# keeps the rest of the file close (bench/rss.py, bench/tick_cost.py).
PAGE_CACHE_KIB = 512

__all__ = ["sqlite3", "connect", "check_database_file", "database", "migrations", "applied_migrations", "immediate", "sqlite_version"]


def sqlite_version() -> tuple[int, int, int]:
    major, minor, patch = (int(x) for x in sqlite3.sqlite_version.split(".")[:3])
    return (major, minor, patch)


def _schema_text() -> str:
    """schema.sql beside the package's modules (read as a file: importlib.resources costs an operator
    command more to import than the read itself)."""
    here = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    with open(os.path.join(here, "schema.sql"), encoding="utf-8") as f:
        return f.read()


def migrations() -> list[tuple[str, str]]:
    """The ordered (name, sql) migrations declared in schema.sql."""
    parts = re.split(r"^-- migration: (\S+)\s*$", _schema_text(), flags=re.M)
    return [(parts[i], parts[i + 1]) for i in range(1, len(parts), 2)]


_MARK = "-- migration: "


def migration_names() -> list[str]:
    """The names ``migrations()`` declares, in order, found without a regular expression or splitting out
    their SQL: all a database with no migration pending needs (every command's open). The text is searched
    for the marker rather than cut into its some 400 lines: a line that starts with it names a migration."""
    text = _schema_text()
    names = []
    at = text.find(_MARK)
    while at != -1:
        end = text.find("\n", at)
        end = len(text) if end == -1 else end
        if at == 0 or text[at - 1] == "\n":
            name = text[at + len(_MARK):end].rstrip()
            if name and not any(c.isspace() for c in name):
                names.append(name)
        at = text.find(_MARK, end)
    return names


def _ensure_private(path: str, *, create: bool) -> None:
    if create:
        os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    if create and not os.path.exists(path):
        fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
        os.close(fd)
    if os.stat(path).st_mode & 0o777 != 0o600:
        os.chmod(path, 0o600)


SQLITE_HEADER = b"SQLite format 3\x00"
_INIT_HINT = "run 'fleet-agent init' to create one, or point data_dir at the existing data directory"


def check_database_file(path: str | os.PathLike[str]) -> None:
    """Refuse a database file that is missing, empty (0 bytes) or not SQLite, before anything opens it.

    Opening a missing or empty file with SQLite would silently start a new history; only
    ``fleet-agent init`` creates a database (``connect(create=True)``)."""
    p = path_text(os.fspath(path))
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise LogError(f"no database at {p}; {_INIT_HINT}") from None
    except OSError as e:
        raise LogError(f"cannot read the database {p}: {e.strerror}; check the data directory belongs to "
                       "the user running fleet-agent") from None
    if not stat.S_ISREG(st.st_mode):
        raise LogError(f"{p} is not a regular file; point data_dir at fleet-agent's data directory")
    if st.st_size == 0:
        wal = p + "-wal"
        if os.path.exists(wal) and os.stat(wal).st_size > 0:
            return  # a live database whose pages are all still in the write-ahead log
        raise LogError(f"the database {p} is empty (0 bytes): its history is gone; restore it from a backup with 'fleet-agent restore BACKUP' (a copy 'fleet-agent backup PATH' wrote), "
                       "or remove it and run 'fleet-agent init' to start a new log")
    _check_header(p)


def _check_header(p: str) -> None:
    try:
        with open(p, "rb") as f:
            magic = f.read(len(SQLITE_HEADER))
    except OSError as e:
        raise LogError(f"cannot read the database {p}: {e.strerror}; check the data directory belongs to "
                       "the user running fleet-agent") from None
    if magic != SQLITE_HEADER:
        raise LogError(f"{p} is not a SQLite database; point data_dir at fleet-agent's data directory, "
                       "or restore the database from a backup with 'fleet-agent restore BACKUP' (a copy 'fleet-agent backup PATH' wrote)")


def _check_schema(conn: sqlite3.Connection, p: str, *, create: bool) -> None:
    """Refuse a SQLite file that is not fleet-agent's, or whose event log is gone."""
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        done = {r[0] for r in conn.execute("SELECT name FROM _migrations")} if "_migrations" in tables else set()
    except sqlite3.DatabaseError:
        return  # a damaged file: the first real query says so, and quick_check (doctor) reports it
    if not tables and create:
        return  # a new database: the migrations create everything
    if "_migrations" not in tables:
        what = "holds no tables" if not tables else "is not a fleet-agent database (it has no _migrations table)"
        raise LogError(f"{p} {what}; point data_dir at fleet-agent's data directory, or run "
                       "'fleet-agent init' in a new one")
    if "events" not in tables and migrations()[0][0] in done:
        raise LogError(f"{p} has no events table: the event log was dropped; restore the database from a backup with 'fleet-agent restore BACKUP' (a copy 'fleet-agent backup PATH' wrote)")


def _set_page_size(conn: sqlite3.Connection, page_size: int) -> None:
    """``page_size`` for a database with no page written yet (before its first table, and before WAL mode
    fixes it); an existing database keeps its own."""
    if int(conn.execute("PRAGMA page_count").fetchone()[0]) == 0:
        conn.execute(f"PRAGMA page_size = {int(page_size)}")


def connect(path: str | os.PathLike[str], *, readonly: bool = False, create: bool = False,
            page_size: int | None = None) -> sqlite3.Connection:
    """A connection in autocommit mode with WAL, synchronous=FULL and a long busy timeout.

    Only ``create=True`` (``fleet-agent init``) may make a new database file; otherwise a
    missing, empty or foreign file is refused with ``LogError``; a new one gets ``page_size``-byte
    pages (default ``PAGE_SIZE``). Pending migrations are applied (each in its own transaction) unless
    ``readonly``.
    """
    if sqlite_version() < MIN_SQLITE:
        raise LogError(
            f"SQLite {sqlite3.sqlite_version} has the WAL-reset corruption bug; "
            "install pysqlite3>=0.6.1 (bundles SQLite >= 3.51.3)"
        )
    p = path_text(os.fspath(path))
    if create and not readonly:
        if os.path.exists(p) and os.stat(p).st_size > 0:
            _check_header(p)
    else:
        check_database_file(p)
    try:
        if readonly:
            conn = sqlite3.connect(f"file:{p}?mode=ro", uri=True, isolation_level=None, check_same_thread=False)
        else:
            old = os.umask(0o077)
            try:
                _ensure_private(p, create=create)
                conn = sqlite3.connect(p, isolation_level=None, check_same_thread=False)
            finally:
                os.umask(old)
    except (OSError, sqlite3.Error) as e:
        reason = e.strerror if isinstance(e, OSError) else str(e)
        raise LogError(f"cannot open the database {p}: {reason}; check the data directory exists and "
                       "belongs to the user running fleet-agent") from e
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute(f"PRAGMA cache_size = -{PAGE_CACHE_KIB}")
        _check_schema(conn, p, create=create and not readonly)
        if create and not readonly:
            _set_page_size(conn, PAGE_SIZE if page_size is None else page_size)
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
    """sqlite-utils over an open connection, changing nothing on it (no pragma, no plugin hooks)."""
    import sqlite_utils

    return sqlite_utils.Database(conn, recursive_triggers=False, execute_plugins=False)


class immediate:  # noqa: N801  (used as a function: ``with immediate(conn):``)
    """BEGIN IMMEDIATE ... COMMIT; ROLLBACK on any error. Takes the write lock up front,
    so no SQLITE_BUSY can surface between the first read and the commit.

    A class rather than a ``contextlib.contextmanager`` generator: opening the database (every command)
    then does not import contextlib."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> sqlite3.Connection:
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        if kind is None:
            try:
                self.conn.execute("COMMIT")
            except BaseException:
                self._rollback()
                raise
        else:
            self._rollback()

    def _rollback(self) -> None:
        # SQLite may already have rolled back (some I/O errors, a failed COMMIT); rolling back
        # again would raise and hide the original error. Never leave the transaction open.
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")


def apply_migrations(conn: sqlite3.Connection) -> list[str]:
    """Apply every migration not yet recorded; returns the names applied."""
    conn.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
    done = {r[0] for r in conn.execute("SELECT name FROM _migrations")}
    applied = []
    names = migration_names()
    declared = [] if done.issuperset(names) else migrations()  # the SQL split out only when one is pending
    for name, sql in declared:
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
    known = set(names)
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


def db_errors() -> tuple[type[BaseException], ...]:
    """The database drivers' error classes loaded in this process (psycopg's only once a PostgreSQL log opened)."""
    import sys

    pg = sys.modules.get("psycopg")
    return (sqlite3.Error,) if pg is None else (sqlite3.Error, pg.Error)
