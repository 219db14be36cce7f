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

import pysqlite3.dbapi2 as sqlite3
import pytest

from agent.store.log import row_hash
from agent.tick import run_tick
from tests.reliability.harness import SIM_KEY, check_db, db_path, make_app, running_sim
from tests.reliability.test_operator_input import run_cli


def _raw(path: Path) -> sqlite3.Connection:
    c = sqlite3.connect(str(path), isolation_level=None)
    for (name,) in c.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        c.execute(f'DROP TRIGGER "{name}"')
    return c


def edit_payload(c: sqlite3.Connection) -> None:
    c.execute("UPDATE events SET payload = replace(payload, 'rent', 'RENT') WHERE seq = 12")


def delete_middle(c: sqlite3.Connection) -> None:
    c.execute("DELETE FROM events WHERE seq = 10")


def reorder(c: sqlite3.Connection) -> None:
    c.execute("UPDATE events SET seq = -1 WHERE seq = 8")
    c.execute("UPDATE events SET seq = 8 WHERE seq = 9")
    c.execute("UPDATE events SET seq = 9 WHERE seq = -1")


def truncate(c: sqlite3.Connection) -> None:
    top = c.execute("SELECT MAX(seq) FROM events").fetchone()[0]
    c.execute("DELETE FROM events WHERE seq > ?", (top - 3,))


def rechain(c: sqlite3.Connection) -> None:
    """Rewrite seq 5's payload and recompute every later hash: internally consistent."""
    rows = c.execute("SELECT seq, id, ts, kind, version, source, tick, payload, tokens FROM events "
                     "ORDER BY seq").fetchall()
    prev = "0" * 64
    for seq, eid, ts, kind, version, source, tick, payload, tokens in rows:
        if seq == 5:
            payload = payload.replace("}", ',"x":1}', 1) if payload.endswith("}") else payload
        h = row_hash(seq, eid, ts, kind, version, source, tick, payload, tokens, prev)
        c.execute("UPDATE events SET payload = ?, prev_hash = ?, hash = ? WHERE seq = ?", (payload, prev, h, seq))
        prev = h


TAMPERS: dict[str, Callable[[sqlite3.Connection], None]] = {
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
    c = _raw(db_path(root))
    TAMPERS[tamper](c)
    c.close()
    assert hashlib.sha256(db_path(root).read_bytes()).hexdigest() != before
    rc, out, _err = run_cli(["--config", str(root / "config.yaml"), "log", "verify"])
    assert rc == 1, out
    assert out.startswith("FAILED at seq "), out
    rc, out, _err = run_cli(["--config", str(pristine / "config.yaml"), "log", "verify"])
    assert rc == 0, out
