"""Tamper evidence through the operator's own command: `fleet-agent log verify`.

Edits, deletions, reordering, truncation and a fully re-chained rewrite, made with a
plain SQLite connection (triggers dropped, as an attacker holding the file would): each
exits 1 naming the first bad seq. The head file beside the database is what catches
truncation and re-chaining.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.runtime.tick import run_tick
from tests.reliability.harness import SIM_KEY, check_db, db_path, make_app, running_sim
from tests.reliability.test_operator_input import run_cli
from tests.tamper import Tamper


def edit_payload(t: Tamper) -> None:
    """Change seq 12's payload, whatever kind of event it is (every payload is a JSON object)."""
    t.replace_in_payload(12, "{", "{ ")


def delete_middle(t: Tamper) -> None:
    t.delete(10)


def reorder(t: Tamper) -> None:
    t.swap_seqs(8, 9)


def truncate(t: Tamper) -> None:
    t.truncate(t.last_seq() - 3)


def rechain(t: Tamper) -> None:
    """Rewrite seq 5's payload and recompute every later hash: internally consistent."""
    t.rechain(5, lambda payload: payload.replace("}", ',"x":1}', 1) if payload.endswith("}") else payload)


TAMPERS: dict[str, Callable[[Tamper], None]] = {
    "edit": edit_payload, "delete": delete_middle, "reorder": reorder, "truncate": truncate, "rechain": rechain,
}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pristine")
    with running_sim(seed=3) as (sim, server):
        app = make_app(root, sim, server)
        sim.pending = 400.0
        for _ in range(3):
            assert run_tick(app).ok
            sim.advance(600.0)
        app.close()
    assert check_db(db_path(root)) == []
    return root


@pytest.mark.parametrize("tamper", sorted(TAMPERS))
def test_log_verify_exits_1_naming_the_first_bad_seq(pristine, tmp_path, tamper, monkeypatch):
    """Each tampering of a copy of a real log makes `fleet-agent log verify` exit 1 with
    'FAILED at seq N'; the untouched original verifies."""
    monkeypatch.setenv("VAST_API_KEY", SIM_KEY)
    root = tmp_path / "copy"
    shutil.copytree(pristine, root)
    before = hashlib.sha256(db_path(root).read_bytes()).hexdigest()
    with Tamper(db_path(root)) as t:
        TAMPERS[tamper](t)
    assert hashlib.sha256(db_path(root).read_bytes()).hexdigest() != before
    rc, out, _err = run_cli(["--config", str(root / "config.yaml"), "log", "verify"])
    assert rc == 1, out
    assert out.startswith("FAILED at seq "), out
    rc, out, _err = run_cli(["--config", str(pristine / "config.yaml"), "log", "verify"])
    assert rc == 0, out


@pytest.mark.parametrize("tamper", sorted(TAMPERS))
def test_operator_writes_refuse_a_log_the_daemon_would_refuse(pristine, tmp_path, tamper, monkeypatch):
    """Whatever `tick` (and `run`, which checks the same) refuses to append to, `say` and `alerts silence`
    refuse too: exit 1 naming the bad seq, nothing appended; on the untouched log they write."""
    monkeypatch.setenv("VAST_API_KEY", SIM_KEY)
    root = tmp_path / "copy"
    shutil.copytree(pristine, root)
    with Tamper(db_path(root)) as t:
        TAMPERS[tamper](t)
        head = t.last_seq()
    cfg = str(root / "config.yaml")
    rc, out, err = run_cli(["--config", cfg, "tick"])
    refused = rc == 1 and "seq" in err
    assert refused or tamper not in ("truncate", "rechain"), err  # the head file catches these at once
    for argv in (["say", "demand spike at 18:00"], ["alerts", "silence", "--key", "stuck:*", "--for", "1h",
                                                     "--reason", "maintenance"]):
        rc, out, err = run_cli(["--config", cfg, *argv])
        assert "Traceback" not in err
        if refused:
            assert rc == 1 and "seq" in err, (tamper, argv, rc, out, err)
    if refused:
        with Tamper(db_path(root)) as t:
            assert t.last_seq() == head
    root = tmp_path / "untouched"
    shutil.copytree(pristine, root)
    rc, out, err = run_cli(["--config", str(root / "config.yaml"), "say", "demand spike at 18:00"])
    assert rc == 0, err
