"""Concurrency: ticks run while four operator processes note, ack and read.

No "database is locked" may reach a user, and every write is in the log exactly once.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from agent import feedback
from tests.reliability.harness import LOAD_ALERTS, MIN_ROUNDS, check_db, db_path, make_app, running_sim

SECONDS = float(os.environ.get("RELIABILITY_CONCURRENCY_SECONDS", "12"))
WORKERS = 4
MIN_TICKS = 3  # ticks run however long they take, so a slow machine still overlaps them with the workers


def run_concurrency(root, zygote, seconds: float) -> dict[str, int]:
    with running_sim(seed=9) as (sim, server):
        app = make_app(root, sim, server)
        for n in range(LOAD_ALERTS):
            feedback.raise_alert(app.log, key=f"load:{n}", severity="info", title=f"load alert {n}")
        app.close()
        cfg = str(root / "config.yaml")
        env = {"VAST_API_KEY": sim.api_key}
        workers = [zygote.spawn([cfg, str(root / f"w{i}.jsonl"), str(i), str(seconds), str(WORKERS)],
                                root / f"w{i}.out", root / f"w{i}.err", env=env,
                                call="tests.reliability.harness:worker_main") for i in range(WORKERS)]
        ticks, tick_errors = 0, []
        sim.pending = 300.0
        end = time.monotonic() + seconds
        while ticks < MIN_TICKS or time.monotonic() < end:
            pid = zygote.spawn(["--config", cfg, "tick"], root / "t.out", root / "t.err", env=env)
            rc = zygote.wait(pid)
            ticks += 1
            err = (root / "t.err").read_text()
            if rc not in (0, 1) or "database is locked" in err:
                tick_errors.append(f"rc {rc}: {err[-300:]}")
            sim.advance(300.0)
        codes = [zygote.wait(pid) for pid in workers]
        records = [json.loads(line) for i in range(WORKERS) for line in (root / f"w{i}.jsonl").read_text().splitlines()]
        stderr = "".join((root / f"w{i}.err").read_text() for i in range(WORKERS))
        from agent.store.log import EventLog

        with EventLog(db_path(root)) as log:
            notes = [e.payload["text"] for e in log.read(0, kinds=["operator.note"])]
            acks = [e.payload["alert_id"] for e in log.read(0, kinds=["alert.acked"])]
        return {"ticks": ticks, "tick_errors": tick_errors, "worker_codes": codes, "records": records,
                "stderr": stderr, "notes": notes, "acks": acks, "problems": check_db(db_path(root))}


@pytest.mark.slow
def test_ticks_and_four_operator_processes_share_the_log_without_lock_errors_or_lost_writes(fast_root, zygote):
    """For SECONDS seconds, CLI ticks run back to back while 4 processes each loop `say`,
    `alerts ack`, `thread show`, `alerts list` and `status`: every command exits 0, no
    stderr mentions a locked database, each note and each ack is in the log exactly once,
    and the log verifies with read models equal to a rebuild."""
    r = run_concurrency(fast_root, zygote, SECONDS)
    assert r["tick_errors"] == []
    assert r["worker_codes"] == [0] * WORKERS
    assert "database is locked" not in r["stderr"]
    assert [line for line in r["stderr"].splitlines() if not line.startswith("{")] == []  # only structlog lines
    assert [x for x in r["records"] if x["rc"] != 0] == []
    wrote_notes = [x["text"] for x in r["records"] if x["op"] == "note"]
    wrote_acks = [x["alert"] for x in r["records"] if x["op"] == "ack"]
    assert len(wrote_notes) >= WORKERS * MIN_ROUNDS  # every worker ran its rounds to the end
    assert sorted(r["notes"]) == sorted(wrote_notes)
    assert sorted(r["acks"]) == sorted(wrote_acks)
    assert r["problems"] == []
