"""Tampering with the log file by hand is caught by 'fleet-agent log verify', naming the first bad seq."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.store.log import EventLog
from tests.tamper import Tamper

REPO = Path(__file__).resolve().parents[2]
N = 10


def cli(config: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("FLEET_AGENT_CONFIG", "CREDENTIALS_DIRECTORY")}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run([sys.executable, "-m", "agent.cli", "--config", str(config), *args], env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def setup(tmp_path):
    """A config in tmp_path and a log of N events; yields (config, db path, a Tamper on the file)."""
    cfg = tmp_path / "config.yaml"
    cfg.write_text("data_dir: ./data\nknowledge_dir: ./knowledge\n")
    db = tmp_path / "data" / "fleet-agent.db"
    with EventLog(db) as log:
        for i in range(1, N + 1):
            log.append("operator.note", {"text": f"note {i}", "by": "alice"}, "operator", tick=i)
    raw = Tamper(db)
    yield cfg, db, raw
    raw.close()


def assert_fails_at(cfg: Path, seq: int, reason: str) -> None:
    r = cli(cfg, "log", "verify")
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"FAILED at seq {seq}:" in r.stdout
    assert reason in r.stdout


def test_untouched_log_verifies(setup):
    """An untouched log verifies: exit 0 and the event count."""
    cfg, _db, _raw = setup
    r = cli(cfg, "log", "verify")
    assert r.returncode == 0, r.stderr
    assert f"ok: {N} events" in r.stdout


def test_edited_payload_is_caught(setup):
    """Editing one row's payload fails verification at that row (also as a --json report)."""
    cfg, _db, raw = setup
    raw.set(4, payload='{"by":"alice","text":"note 4, edited"}')
    assert_fails_at(cfg, 4, "content does not match its hash")
    rj = cli(cfg, "log", "verify", "--json")
    assert rj.returncode == 1
    report = json.loads(rj.stdout)
    assert report["ok"] is False and report["first_bad_seq"] == 4 and report["checked"] == 3


def test_edited_metadata_is_caught(setup):
    """Editing a row's tick (not its payload) fails verification at that row too."""
    cfg, _db, raw = setup
    raw.set(6, tick=99)
    assert_fails_at(cfg, 6, "content does not match its hash")


def test_deleted_middle_row_is_caught(setup):
    """Deleting one middle row fails verification at the missing seq."""
    cfg, _db, raw = setup
    raw.delete(5)
    assert_fails_at(cfg, 5, "missing")


def test_swapped_rows_are_caught(setup):
    """Swapping the whole contents of two rows (seq kept) fails verification at the first of them."""
    cfg, _db, raw = setup
    raw.swap_contents(3, 7)
    assert_fails_at(cfg, 3, "prev_hash does not match")


def test_truncated_newest_rows_are_caught_by_the_head_file(setup):
    """Deleting the newest rows leaves a chain that links, but the head file names the missing seq."""
    cfg, _db, raw = setup
    raw.truncate(N - 3)
    assert_fails_at(cfg, N - 2, "truncated")


def test_rewritten_chain_is_caught_by_the_head_file(setup):
    """Rewriting history from seq 5 with every hash recomputed links up, but differs from the head file."""
    cfg, _db, raw = setup
    raw.rechain(5, lambda _payload: '{"by":"mallory","text":"note 5"}')
    assert_fails_at(cfg, N, "head file")


@pytest.mark.parametrize(("column", "value"), [("tick", float("inf")), ("payload", b'{"by":"alice"}'),
                                               ("version", 1.5), ("tokens", "x13")])
def test_values_no_append_could_write_are_reported_not_crashed_on(setup, column, value):
    """A row edited to hold a value of another type (Infinity, a blob, a fraction, text) is reported as edited,
    at that seq, instead of crashing verify()."""
    _cfg, db, raw = setup
    raw.set(2, **{column: value})
    with EventLog(db, readonly=True) as log:
        report = log.verify()
    assert not report.ok
    assert report.first_bad_seq == 2 and "edited" in report.reason
