"""SIGTERM is honoured during a config reload: the files are read off the main thread, so a reload
stuck on a file that never finishes reading (here a FIFO nobody writes) cannot hold the daemon."""

from __future__ import annotations

import errno
import os
import shutil
import signal
from pathlib import Path

import pytest

from agent.store.log import EventLog
from tests.service.test_daemon import WAIT_S, daemons, sim_server, start_daemon, wait_for, write_config  # noqa: F401

PROMPTS = Path(__file__).resolve().parents[2] / "agent" / "prompts"


def _writer(fifo: Path) -> int | None:
    """A write end of ``fifo`` once someone has it open for reading, else None."""
    try:
        return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as e:
        if e.errno == errno.ENXIO:
            return None
        raise


@pytest.mark.slow
def test_sigterm_during_a_stuck_reload_stops_the_daemon(tmp_path, sim_server, daemons):  # noqa: F811
    """SIGHUP while a prompt file is a FIFO nobody writes: the reload blocks reading it, yet SIGTERM
    still stops the daemon (exit 0, daemon.stopped 'SIGTERM', a log that verifies), and the refused
    reload is logged."""
    prompts = tmp_path / "prompts"
    shutil.copytree(PROMPTS, prompts)
    cfg = write_config(tmp_path, sim_server.url, interval="1h")
    cfg.write_text(cfg.read_text(encoding="utf-8") + f"prompts_dir: {prompts}\n", encoding="utf-8")
    d = start_daemon(tmp_path, cfg)
    daemons.append(d)
    wait_for(lambda: d.kinds("tick.completed"), "the first tick")

    (prompts / "system.md").unlink()
    os.mkfifo(prompts / "system.md")
    d.popen.send_signal(signal.SIGHUP)
    fd = wait_for(lambda: _writer(prompts / "system.md"), "the reload to open the FIFO")
    try:
        d.popen.send_signal(signal.SIGTERM)
        assert d.popen.wait(timeout=WAIT_S) == 0, d.stderr()
    finally:
        os.close(fd)
    assert "config.reload_refused" in d.stderr() and "stop signal" in d.stderr()
    lg = EventLog(d.db)
    try:
        assert [e.payload["reason"] for e in lg.read(0, kinds=["daemon.stopped"])] == ["SIGTERM"]
        assert lg.verify().ok
    finally:
        lg.close()
