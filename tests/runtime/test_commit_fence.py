"""A holder of the fleet's file lock suspended after its fence passed and before its COMMIT, while another
daemon takes the fleet over: resumed, its COMMIT is refused (``FileLeader.hold``), where without the guard
it lands (tests/runtime/commit_driver.py, a real process stopped with SIGSTOP, a real SQLite log)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.runtime.leader import FileLeader
from agent.store.log import EventLog
from tests.reliability.failover import suspended
from tests.service.test_daemon import wait_for

ROOT = Path(__file__).resolve().parents[2]


def reasons(db: Path) -> list[str]:
    with EventLog(db, create=False) as lg:
        return [e.payload["reason"] for e in lg.read(0)]


@pytest.mark.parametrize("mode", ["guarded", "unguarded"])
def test_a_holder_suspended_before_its_commit_commits_nothing_once_the_fleet_was_taken_over(tmp_path: Path,
                                                                                             mode: str):
    """The driver stops itself between its fence and its COMMIT, holding SQLite's write lock; a standby
    takes the lease (its holder's heartbeat looks older than failover_seconds). Continued, the guarded
    driver finds the lease not its own under the lease file's flock: the COMMIT does not run, it exits 3,
    and the log holds nothing of it. Unguarded, the same moment commits the event: the gap the guard closes."""
    db, data = tmp_path / "log.db", tmp_path / "data"
    with EventLog(db) as lg:
        lg.append("daemon.stopped", {"reason": "before"}, "system")
    out = tmp_path / "driver.out"
    proc = subprocess.Popen([sys.executable, "-m", "tests.runtime.commit_driver", str(data), str(db), mode],
                            cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=out.open("w"), stderr=subprocess.STDOUT)
    standby = FileLeader(data, "fleet-1", failover_seconds=30.0, clock=lambda: time.time() + 31)
    try:
        wait_for(lambda: proc.poll() is not None or suspended(proc.pid), "the driver to stop before its commit",
                 timeout=60)
        assert proc.poll() is None, out.read_text()
        assert standby.try_acquire(), standby.holder()
        proc.send_signal(signal.SIGCONT)
        code = proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait(10)
        standby.release()
    text = out.read_text()
    if mode == "guarded":
        assert (code, "refused: " in text) == (3, True), text
        assert "now held by" in text
        assert reasons(db) == ["before"]
    else:
        assert (code, "committed" in text) == (0, True), text
        assert reasons(db) == ["before", "resumed"]
    with EventLog(db, create=False) as lg:
        assert lg.verify().ok
