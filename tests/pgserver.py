"""A throwaway PostgreSQL server for tests: initdb in a temp dir, pg_ctl start, a database per test.

The server runs from Debian's ``postgresql`` package binaries (found on PATH or under
``/usr/lib/postgresql/*/bin``). PostgreSQL refuses to run as root, so when the tests run as
root the server runs as the ``postgres`` user (``runuser``). It listens on a Unix socket in
its temp dir and on 127.0.0.1 at a free port; local socket connections are trusted, TCP
connections need the superuser's password (``PgServer.password``), so a test can exercise
password handling for real.

Without the binaries the fixture skips, saying what to install — except under CI
(``CI`` set), where a missing server is a failure: CI must run every PostgreSQL test.
"""

from __future__ import annotations

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
from dataclasses import dataclass
from pathlib import Path

import pytest

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

    def create_database(self, name: str | None = None) -> str:
        """A new empty database; returns its socket DSN."""
        name = name or "t_" + uuid.uuid4().hex[:12]
        self.psql(f'CREATE DATABASE "{name}"')
        return self.dsn(name)

    def stop(self) -> None:
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


@pytest.fixture
def pg_dsn(pg_server: PgServer) -> str:
    """A fresh, empty database on the session's server (socket DSN, trusted)."""
    return pg_server.create_database()


def create_fleet_database(srv: PgServer, role: str | None = None) -> str:
    """A new database owned by a new ordinary role (no superuser, no BYPASSRLS: what fleet-agent accepts);
    returns its socket URL naming that role (trusted on the socket, no password)."""
    role = role or "r_" + uuid.uuid4().hex[:12]
    name = "f_" + uuid.uuid4().hex[:12]
    srv.psql(f'CREATE ROLE "{role}" LOGIN')
    srv.psql(f'CREATE DATABASE "{name}" OWNER "{role}"')
    return f"postgresql://{role}@/{name}?host={srv.socket_dir}&port={srv.port}"


@pytest.fixture
def pg_url(pg_server: PgServer) -> str:
    """A fresh database owned by a fresh ordinary role; the URL fleet-agent's storage.url takes."""
    return create_fleet_database(pg_server)
