"""Log lines carry syslog priority prefixes on the journal stream, and only there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from agent import logsetup

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    yield
    logsetup.configure("info", "json")


def _journal_env(path: Path) -> dict[str, str]:
    st = os.stat(path)
    return {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}


@pytest.mark.parametrize("fmt", ["json", "console"])
def test_priorities_on_the_journal_stream(tmp_path: Path, fmt: str) -> None:
    """When the stream is the one JOURNAL_STREAM names, each line starts with <7> debug, <6> info,
    <4> warning, <3> error, <2> critical, which journald turns into the entry's priority."""
    out = tmp_path / "journal"
    with out.open("w", encoding="utf-8") as stream:
        logsetup.configure("debug", fmt, stream=stream, env=_journal_env(out))
        log = structlog.get_logger("t")
        log.debug("d.e")
        log.info("i.e")
        log.warning("w.e")
        log.error("e.e")
        log.critical("c.e")
    lines = out.read_text(encoding="utf-8").splitlines()
    assert [line[:3] for line in lines] == ["<7>", "<6>", "<4>", "<3>", "<2>"]
    assert all(name in line for name, line in zip(("d.e", "i.e", "w.e", "e.e", "c.e"), lines, strict=True))


def test_no_prefix_when_the_stream_is_elsewhere(tmp_path: Path) -> None:
    """JOURNAL_STREAM naming another file (stderr redirected, or inherited by a child) adds no prefix,
    so JSON lines stay parseable."""
    other = tmp_path / "other"
    other.write_text("")
    out = tmp_path / "plain"
    with out.open("w", encoding="utf-8") as stream:
        logsetup.configure("info", "json", stream=stream, env=_journal_env(other))
        structlog.get_logger("t").warning("w.e")
    assert out.read_text(encoding="utf-8").startswith('{"')


def test_a_process_under_systemd_prefixes_its_stderr(tmp_path: Path) -> None:
    """In a real process whose stderr is the stream JOURNAL_STREAM names (as systemd starts the
    service), configure() with its default stream reads the environment: a warning starts with <4>."""
    err = tmp_path / "stderr"
    err.write_text("")
    code = ("import structlog; from agent import logsetup; logsetup.configure('info', 'json'); "
            "structlog.get_logger('x').warning('probe.warning')")
    with err.open("w", encoding="utf-8") as stream:
        env = {**os.environ, "PYTHONPATH": str(ROOT), **_journal_env(err)}
        subprocess.run([sys.executable, "-c", code], stderr=stream, env=env, check=True, timeout=60)
    text = err.read_text(encoding="utf-8")
    assert text.startswith("<4>{") and "probe.warning" in text


def test_structlog_loads_at_the_first_line_kept_and_the_configuration_applies_then() -> None:
    """A process that configures logging before structlog is loaded (every command) loads it only for a line
    at or above the level, and that line is rendered as configured, secrets redacted."""
    code = ("import sys; from agent import logsetup; log = logsetup.get_logger('x'); "
            "logsetup.configure('warning', 'json'); log.info('probe.info'); log.debug('probe.debug'); "
            "print('structlog' in sys.modules); log.warning('probe.warning', api_key='k-123'); "
            "print('structlog' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "JOURNAL_STREAM"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**env, "PYTHONPATH": str(ROOT)},
                       check=True, timeout=60)
    assert r.stdout.split() == ["False", "True"]
    assert "probe.info" not in r.stderr and "probe.debug" not in r.stderr
    line = json.loads(r.stderr.strip())
    assert line["event"] == "probe.warning" and line["level"] == "warning" and line["api_key"] != "k-123"
