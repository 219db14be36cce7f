"""Two OS processes appending to one log at once: no lost, duplicated or reordered events."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.store.log import EventLog

REPO = Path(__file__).resolve().parents[2]

WORKER = r"""
import sys
from pathlib import Path
from agent.store.log import EventLog

path, name, n, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
log = EventLog(path)
log.append("operator.note", {"text": "warm-up", "by": name}, "operator")  # loads the tokenizer before the race
print("ready", flush=True)
while not go.exists():
    pass
for i in range(n):
    log.append("operator.note", {"text": f"{name} {i}", "by": name, "i": i}, "operator")
log.close()
"""


@pytest.mark.slow
def test_two_processes_append_concurrently(tmp_path):
    """Two processes each appending 2,000 single-event commits at the same time produce 4,000 (+2 warm-up)
    rows with seqs 1..n, each writer's events in its own order, a chain that verifies, and no error (such as
    'database is locked') reaching either caller."""
    db = tmp_path / "shared.db"
    EventLog(db).close()  # schema in place before the race
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    n = 2000
    procs = [subprocess.Popen([sys.executable, str(script), str(db), name, str(n), str(go)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for name in ("a", "b")]
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    go.touch()
    results = [p.communicate(timeout=300) for p in procs]
    for p, (_out, err) in zip(procs, results, strict=True):
        assert err == ""
        assert p.returncode == 0

    with EventLog(db) as log:
        events = list(log.read())
        assert len(events) == 2 * n + 2
        assert [e.seq for e in events] == list(range(1, 2 * n + 3))
        assert len({e.id for e in events}) == len(events)
        for name in ("a", "b"):
            mine = [e.payload["i"] for e in events if e.payload["by"] == name and "i" in e.payload]
            assert mine == list(range(n))
        report = log.verify()
        assert report.ok, report
        assert report.checked == 2 * n + 2
        assert log.index_search() == 2 * n + 2 and log.store.search_index_size() == 2 * n + 2


APPEND_ONCE = r"""
import sys
from agent.store.log import EventLog

with EventLog(sys.argv[1]) as log:
    log.append("operator.note", {"text": sys.argv[2] + " single", "by": "other"}, "operator")
    log.append_many([("operator.note", {"text": f"{sys.argv[2]} batch {i}", "by": "other"}, "operator", None)
                     for i in range(2)])
"""


def test_a_log_chains_onto_what_another_process_appended_between_its_own_appends(tmp_path):
    """A log remembers the head it committed and reuses it while no other connection committed; when another
    process appends in between (a single event and a batch), each way of appending next (a single append, a
    batch, a transaction's append) chains onto that process's last event: seqs run on without a gap, every
    prev_hash is the hash before it, the chain and the head file verify."""
    db = tmp_path / "shared.db"
    script = tmp_path / "other.py"
    script.write_text(APPEND_ONCE)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    mine = [lambda log, i: log.append("operator.note", {"text": f"mine {i}", "by": "me"}, "operator"),
            lambda log, i: log.append_many([("operator.note", {"text": f"mine {i}", "by": "me"}, "operator", None)]),
            lambda log, i: _in_transaction(log, f"mine {i}")]
    with EventLog(db) as log:
        log.append("operator.note", {"text": "first", "by": "me"}, "operator")
        for i, step in enumerate(mine * 2):
            subprocess.run([sys.executable, str(script), str(db), f"other {i}"], env=env, check=True, timeout=120)
            step(log, i)
        events = list(log.read())
        assert [e.payload["text"] for e in events] == ["first"] + [
            t for i in range(6) for t in (f"other {i} single", f"other {i} batch 0", f"other {i} batch 1", f"mine {i}")]
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert all(b.prev_hash == a.hash for a, b in zip(events, events[1:], strict=False))
        report = log.verify()
        assert report.ok and report.warnings == () and report.head_seq == events[-1].seq, report
        assert log.head_file.read_text() == f"{events[-1].seq} {events[-1].hash}\n"


def _in_transaction(log: EventLog, text: str) -> None:
    with log.transaction() as tx:
        tx.append("operator.note", {"text": text, "by": "me"}, "operator")
