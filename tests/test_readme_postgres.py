"""The README's PostgreSQL setup runs as written, against a fresh cluster set up as Debian sets one up.

The block under ``<!-- postgresql-setup -->`` in README.md is run with bash, unchanged but for the
database server's address (``db.internal:5432``, a name only the operator's network resolves, becomes the
test server's 127.0.0.1 port; ``PGHOST``/``PGPORT`` point psql at the test server's socket, as Debian's
default socket is another server's). The cluster is initialised as Debian's ``postgresql`` package does it:
superuser ``postgres``, peer authentication on the Unix socket, passwords (scram-sha-256) over TCP; it runs
as the OS user ``postgres``, so the README's ``sudo -u postgres psql`` logs in by peer authentication for
real. Where the machine has no ``sudo`` (this one: Debian's minimal images lack it), a two-line stand-in
that runs the command as that user with ``runuser`` takes its place on PATH. Then a fleet's config as the
README describes it (the agent's role, its password from ``$FLEET_AGENT_PG_PASSWORD``) writes and verifies.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pgserver import PgServer, _free_port, _pg_ctl_start, pg_bin_dir

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
SUDO_STAND_IN = '#!/bin/sh\n[ "$1" = "-u" ] || exit 2\nu=$2; shift 2; exec runuser -u "$u" -- "$@"\n'


def setup_block() -> str:
    m = re.search(r"<!-- postgresql-setup -->\n```sh\n(.*?)```", README, re.S)
    assert m, "README.md lost its PostgreSQL setup block (<!-- postgresql-setup --> then ```sh)"
    return m.group(1)


@pytest.fixture
def debian_cluster() -> Iterator[PgServer]:
    """A fresh cluster with Debian's authentication defaults, run by the OS user postgres."""
    bindir = pg_bin_dir()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries not found; install Debian's 'postgresql' package")
    if os.geteuid() != 0:
        pytest.skip("peer authentication as the OS user postgres needs to start the server as that user (root)")
    try:
        pw = pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("no OS user 'postgres' (Debian's postgresql package creates it)")
    root = Path(tempfile.mkdtemp(prefix="fleet-agent-debian-pg-"))
    os.chown(root, pw.pw_uid, pw.pw_gid)
    srv = PgServer(root=root, bin=bindir, port=_free_port(), user="postgres", password="", run_as="postgres")
    subprocess.run(srv._cmd(str(bindir / "initdb"), "-D", str(root / "data"), "-U", "postgres", "--no-sync",
                            "--auth-local=peer", "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C"),
                   check=True, capture_output=True, text=True)
    for attempt in range(5):
        srv.port = srv.port if attempt == 0 else _free_port()
        started, log = _pg_ctl_start(srv)
        if started.returncode == 0:
            break
    else:
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"pg_ctl start failed: {started.stderr.strip()}\n{log[-2000:]}")
    try:
        yield srv
    finally:
        srv.stop()


def test_the_readme_postgresql_steps_run_as_written(debian_cluster: PgServer, tmp_path: Path):
    srv = debian_cluster
    work = tmp_path / "operator"
    work.mkdir()
    os.chmod(tmp_path, 0o755)  # psql runs as postgres in this directory
    os.chmod(work, 0o755)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if shutil.which("sudo") is None:
        (bin_dir / "sudo").write_text(SUDO_STAND_IN, encoding="utf-8")
        os.chmod(bin_dir / "sudo", 0o755)
    fleet_agent = Path(sys.executable).parent / "fleet-agent"
    assert fleet_agent.exists(), "the fleet-agent command is not installed beside this Python (pip install -e .)"
    env = {**os.environ, "PGHOST": srv.socket_dir, "PGPORT": str(srv.port),
           "PATH": f"{bin_dir}:{fleet_agent.parent}:{os.environ.get('PATH', '')}"}
    env.pop("FLEET_AGENT_PG_PASSWORD", None)

    # The step the README used to give: root's psql -U postgres meets peer authentication.
    old = subprocess.run(["psql", "-U", "postgres", "-c", "SELECT 1"], env=env, capture_output=True, text=True)
    assert old.returncode != 0 and "Peer authentication failed" in old.stderr

    block = setup_block()
    assert "db.internal:5432" in block and "owner.yaml" in block
    script = block.replace("db.internal:5432", f"127.0.0.1:{srv.port}")
    run = subprocess.run(["bash", "-e", "-c", script], cwd=work, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert 'GRANT SELECT, INSERT ON events TO "fleet_agent";' in run.stdout
    assert (work / "owner.yaml").exists()

    # A fleet's config as the README goes on to describe it: the agent's role, the password from the env.
    password = re.search(r"CREATE ROLE fleet_agent LOGIN PASSWORD '([^']+)'", block)
    assert password
    (work / "fleet.yaml").write_text(f"agent_id: fleet-1\nstorage:\n  url: postgresql://fleet_agent@127.0.0.1:"
                                     f"{srv.port}/fleets\n", encoding="utf-8")
    fleet_env = {**env, "FLEET_AGENT_PG_PASSWORD": password.group(1)}
    for argv in (["say", "the README's setup works"], ["log", "verify"]):
        r = subprocess.run([str(fleet_agent), "--config", "fleet.yaml", *argv], cwd=work, env=fleet_env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
    assert "chain verifies up to seq 1" in r.stdout
