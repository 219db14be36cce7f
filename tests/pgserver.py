"""A throwaway PostgreSQL server for tests: initdb in a temp dir, pg_ctl start, a clean database per test.

The server runs from Debian's ``postgresql`` package binaries (found on PATH or under
``/usr/lib/postgresql/*/bin``). PostgreSQL refuses to run as root, so when the tests run as
root the server runs as the ``postgres`` user (``runuser``). It listens on a Unix socket in
its temp dir and on 127.0.0.1 at a free port; local socket connections are trusted, TCP
connections need the superuser's password (``PgServer.password``), so a test can exercise
password handling for real.

Creating a database copies template1 (some 300 files, about 100 ms) and 150 of them filled the disk
with 1.7 GB, so each server keeps a pool: a test leases a database and gives it back at teardown,
where ``reset_database`` empties it (every schema dropped as the superuser, public recreated as
initdb makes it, the database's owner, grants and settings put back) in a few milliseconds. The
append-only triggers refuse DELETE and TRUNCATE even to the superuser, so the tables are dropped,
never emptied. A test still sees an empty database owned by a role of its own.

Without the binaries the fixture skips, saying what to install — except under CI
(``CI`` set), where a missing server is a failure: CI must run every PostgreSQL test.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

SKIP_HINT = ("PostgreSQL server binaries (initdb, pg_ctl) not found; install Debian's 'postgresql' package "
             "(.ci/run does) to run the PostgreSQL tests")


def pg_bin_dir() -> Path | None:
    """The directory holding initdb and pg_ctl, or None when PostgreSQL is not installed."""
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(os.path.realpath(found)).parent
    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if Path(d, "pg_ctl").exists() and Path(d, "initdb").exists():
            return Path(d)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PgServer:
    """A running server. ``dsn()`` is a socket connection string (trusted, no password)."""

    root: Path
    bin: Path
    port: int
    user: str
    password: str
    run_as: str | None
    free: list[str] = field(default_factory=list)  # databases reset and ready for the next lease
    _admin: psycopg.Connection[tuple[object, ...]] | None = None

    @property
    def socket_dir(self) -> str:
        return str(self.root)

    def dsn(self, dbname: str = "postgres") -> str:
        return f"postgresql://{self.user}@/{dbname}?host={self.socket_dir}&port={self.port}"

    def tcp_dsn(self, dbname: str = "postgres", *, with_password: bool = False) -> str:
        auth = f"{self.user}:{self.password}" if with_password else self.user
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{dbname}"

    def _cmd(self, *args: str) -> list[str]:
        return (["runuser", "-u", self.run_as, "--"] if self.run_as else []) + list(args)

    def psql(self, sql: str, dbname: str = "postgres") -> str:
        """Run SQL through psql over the socket (setup only; the code under test uses psycopg)."""
        psql = self.bin / "psql"
        exe = str(psql) if psql.exists() else "psql"
        out = subprocess.run(self._cmd(exe, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", self.socket_dir,
                                       "-p", str(self.port), "-U", self.user, "-d", dbname, "-c", sql),
                             check=True, capture_output=True, text=True)
        return out.stdout.strip()

    def admin(self) -> psycopg.Connection[tuple[object, ...]]:
        """The superuser's autocommit connection to the postgres database (setup and teardown only)."""
        if self._admin is None or self._admin.closed:
            self._admin = psycopg.connect(self.dsn(), autocommit=True)
        return self._admin

    def create_database(self, name: str | None = None) -> str:
        """A new empty database; returns its socket DSN."""
        name = name or "t_" + uuid.uuid4().hex[:12]
        self.admin().execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.dsn(name)

    def lease(self, owner: str | None = None) -> str:
        """An empty database from the pool (a new one when none is free), owned by ``owner`` when
        given (else the superuser); returns its name. Give it back with ``release``."""
        if self.free:
            name = self.free.pop()
        else:
            name = "t_" + uuid.uuid4().hex[:12]
            self.create_database(name)
        if owner is not None:
            self.admin().execute(sql.SQL("ALTER DATABASE {} OWNER TO {}").format(sql.Identifier(name),
                                                                                sql.Identifier(owner)))
        return name

    def release(self, name: str, role: str | None = None) -> None:
        """Empty a leased database and put it back in the pool; drop ``role`` (the test's own), which
        then owns nothing. A database that cannot be reset is dropped instead."""
        try:
            reset_database(self, name, role)
        except psycopg.Error:
            self.admin().execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        else:
            self.free.append(name)
        if role is not None:
            try:
                self.admin().execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
            except psycopg.Error:
                pass  # it still owns something elsewhere (a database the test made itself): left as before

    def stop(self) -> None:
        if self._admin is not None:
            self._admin.close()
        subprocess.run(self._cmd(str(self.bin / "pg_ctl"), "-D", str(self.root / "data"), "-m", "immediate",
                                 "-w", "stop"), capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)


def start_server() -> PgServer:
    """initdb + pg_ctl start in a fresh temp dir; raises RuntimeError with the server's log on failure."""
    bindir = pg_bin_dir()
    if bindir is None:
        raise FileNotFoundError(SKIP_HINT)
    run_as = "postgres" if os.geteuid() == 0 else None
    root = Path(tempfile.mkdtemp(prefix="fleet-agent-pg-"))
    password = secrets.token_hex(12)
    pwfile = root / "pw"
    pwfile.write_text(password + "\n")
    if run_as:
        pw = pwd.getpwnam(run_as)
        for p in (root, pwfile):
            os.chown(p, pw.pw_uid, pw.pw_gid)
    user = "postgres"
    srv = PgServer(root=root, bin=bindir, port=_free_port(), user=user, password=password, run_as=run_as)
    try:
        subprocess.run(srv._cmd(str(bindir / "initdb"), "-D", str(root / "data"), "-U", user, "--no-sync",
                                "--auth-local=trust", "--auth-host=scram-sha-256", f"--pwfile={pwfile}",
                                "-E", "UTF8", "--locale=C"),
                       check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as e:
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"initdb failed: {e.stderr.strip()}") from None
    pwfile.unlink()
    for attempt in range(PORT_ATTEMPTS):
        # The free port was only free when it was chosen: on a shared machine another process may bind it
        # before the server does. That start fails naming the address; try again on another port.
        srv.port = srv.port if attempt == 0 else _free_port()
        started, log = _pg_ctl_start(srv)
        if started.returncode == 0:
            return srv
        if "could not bind" not in log and "could not create any TCP/IP sockets" not in log:
            break
    shutil.rmtree(root, ignore_errors=True)
    raise RuntimeError(f"pg_ctl start failed: {started.stderr.strip()}\n{log[-2000:]}")


PORT_ATTEMPTS = 5


def _pg_ctl_start(srv: PgServer) -> tuple[subprocess.CompletedProcess[str], str]:
    """pg_ctl start on ``srv.port``; the result and this start's part of the server log."""
    logfile = srv.root / "server.log"
    before = logfile.stat().st_size if logfile.exists() else 0
    opts = (f"-k {srv.root} -p {srv.port} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off "
            "-c full_page_writes=off -c max_connections=100 -c shared_buffers=32MB")
    started = subprocess.run(srv._cmd(str(srv.bin / "pg_ctl"), "-D", str(srv.root / "data"), "-o", opts,
                                      "-l", str(logfile), "-w", "-t", "60", "start"),
                             capture_output=True, text=True)
    log = logfile.read_bytes()[before:].decode(errors="replace") if logfile.exists() else ""
    return started, log


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One PostgreSQL server per test process (each xdist worker has its own)."""
    try:
        srv = start_server()
    except FileNotFoundError:
        if os.environ.get("CI"):
            pytest.fail(SKIP_HINT + " — under CI every PostgreSQL test must run")
        pytest.skip(SKIP_HINT)
    try:
        yield srv
    finally:
        srv.stop()


# The schemas initdb makes; every other one a test or fleet-agent made goes at reset.
_SYSTEM_SCHEMAS = "nspname NOT LIKE 'pg\\_%' AND nspname <> 'information_schema'"


def reset_database(srv: PgServer, name: str, role: str | None = None) -> None:
    """Put database ``name`` back as CREATE DATABASE made it: its sessions ended, every schema but the
    system ones dropped (the tables with their append-only triggers, functions and policies go with
    them) and public recreated as in template1, the superuser its owner again, no grants but PUBLIC's
    defaults, no per-database settings; ``role`` (the test's) left owning and holding nothing in it."""
    db = sql.Identifier(name)
    srv.admin().execute("SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
                        "WHERE datname = %s AND pid <> pg_backend_pid()", (name,))
    with psycopg.connect(srv.dsn(name), autocommit=True) as c:
        for (schema,) in c.execute(f"SELECT nspname FROM pg_namespace WHERE {_SYSTEM_SCHEMAS}").fetchall():
            c.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(str(schema))))
        c.execute("CREATE SCHEMA public AUTHORIZATION pg_database_owner")
        c.execute("GRANT USAGE ON SCHEMA public TO PUBLIC")
        if role is not None:
            c.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))  # its grants, here and on the db
        grantees = c.execute("SELECT DISTINCT a.grantee::regrole::text FROM pg_database d, aclexplode(d.datacl) a "
                             "WHERE d.datname = %s AND a.grantee <> 0 AND a.grantee <> d.datdba", (name,)).fetchall()
    admin = srv.admin()
    for (grantee,) in grantees:
        admin.execute(sql.SQL("REVOKE ALL ON DATABASE {} FROM {}").format(db, sql.Identifier(str(grantee))))
    admin.execute(sql.SQL("ALTER DATABASE {} OWNER TO {}").format(db, sql.Identifier(srv.user)))
    admin.execute(sql.SQL("GRANT CONNECT, TEMPORARY ON DATABASE {} TO PUBLIC").format(db))
    admin.execute(sql.SQL("ALTER DATABASE {} RESET ALL").format(db))


@pytest.fixture
def pg_dsn(pg_server: PgServer) -> Iterator[str]:
    """An empty database on the session's server (socket DSN, trusted, the superuser)."""
    name = pg_server.lease()
    yield pg_server.dsn(name)
    pg_server.release(name)


def create_fleet_database(srv: PgServer, role: str | None = None) -> str:
    """A new database owned by a new ordinary role (no superuser, no BYPASSRLS: what fleet-agent accepts);
    returns its socket URL naming that role (trusted on the socket, no password). Outside the pool: for
    scripts (bench/) that keep what they make."""
    role = role or "r_" + uuid.uuid4().hex[:12]
    name = "f_" + uuid.uuid4().hex[:12]
    srv.psql(f'CREATE ROLE "{role}" LOGIN')
    srv.psql(f'CREATE DATABASE "{name}" OWNER "{role}"')
    return f"postgresql://{role}@/{name}?host={srv.socket_dir}&port={srv.port}"


@contextlib.contextmanager
def fleet_database(srv: PgServer) -> Iterator[str]:
    """An empty database from the pool, owned by a new ordinary role (no superuser, no BYPASSRLS: what
    fleet-agent accepts), for the block; yields its socket URL naming that role (trusted on the socket,
    no password). Afterwards the database is reset for the next test and the role dropped."""
    role = "r_" + uuid.uuid4().hex[:12]
    srv.admin().execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    name = srv.lease(owner=role)
    try:
        yield f"postgresql://{role}@/{name}?host={srv.socket_dir}&port={srv.port}"
    finally:
        srv.release(name, role)


@pytest.fixture
def pg_url(pg_server: PgServer) -> Iterator[str]:
    """An empty database owned by a fresh ordinary role; the URL fleet-agent's storage.url takes."""
    with fleet_database(pg_server) as url:
        yield url
