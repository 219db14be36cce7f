"""A tick's start (``tick.started`` and what its transaction appends) commits with the tick's first request,
not alone, and still before anything depends on it: every request that reaches vast.ai (the simulator), the
demand queue or the model server finds the log's write lock free (another process's writer never waits on it
across network I/O); a destroy of a stopped instance reaches vast.ai after the start and its intent are
committed; a process killed between the start and the first request leaves a log that verifies and the next
tick runs. Real ticks against the simulator and the scripted model server, on a SQLite file."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent.feedback.knowledge import MEMO_NAME
from agent.runtime.tick import run_tick
from agent.sim import ManualClock, Reply, SimServer, Simulator
from agent.store.log import EventLog
from tests import tamper
from tests.conftest import events_of, good_offer, plant_ours
from tests.conftest_sim import SIM_SEED
from tests.fakes.openai_server import Step, reply

REPO = Path(__file__).resolve().parent.parent
WAIT_S = 30.0


def _lock_free(db: Any) -> bool:
    return tamper.sqlite_write_lock_free(db if isinstance(db, Path) else db.path)


def _committed(db: Path, tick: int) -> list[str]:
    """The kinds of tick ``tick``'s events another connection sees committed, in order."""
    with EventLog(db, readonly=True, create=False) as other:
        return [e.kind for e in other.read(0, tick=tick)]


class WatchingSimulator(Simulator):
    """The simulator, noting at each request's arrival whether the log's write lock is free and what of the
    current tick is committed (``db`` and ``tick`` are set by the test once the log exists)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.db: Path | None = None
        self.watch_tick = 0
        self.seen: list[tuple[str, str, bool, list[str]]] = []

    def handle(self, method: str, target: str, headers: dict[str, str], body: bytes, base_url: str) -> Reply:
        if self.db is not None and not target.startswith("/_sim"):
            self.seen.append((method, target.split("?", 1)[0], _lock_free(self.db), _committed(self.db, self.watch_tick)))
        return super().handle(method, target, headers, body, base_url)


@pytest.fixture
def sim(sim_clock: ManualClock) -> WatchingSimulator:
    return WatchingSimulator(seed=SIM_SEED, clock=sim_clock)


def _checking(db: Path, tick: int, seen: list[tuple[bool, list[str]]], then: Step) -> Step:
    """A scripted model step that first notes, as the request arrives, the lock and the tick's committed kinds."""
    def step(body: dict[str, Any]) -> Step:
        seen.append((_lock_free(db), _committed(db, tick)))
        return then
    return step


def test_an_idle_tick_commits_its_start_with_its_first_request_and_no_request_waits_on_the_lock(
        sim: WatchingSimulator, make_app, fake_model):
    """An idle tick (one step, nothing to do): when the model is asked, its start and its request are both
    committed (one commit carried them: the tick commits twice in all, start-with-request and end; a daily
    budget far from spent is checked in between without a commit of its own); at every request to the
    simulator and the demand queue, and at the model's, another connection takes the write lock at once."""
    from agent.store import plans

    app = make_app(policy={"max_daily_spend": 1000.0})
    app.provider()  # built, as a daemon's is after its first tick (a first tick commits its start before)
    db = Path(app.log.path)
    sim.db, sim.watch_tick = db, 1
    model_seen: list[tuple[bool, list[str]]] = []
    fake_model.enqueue(_checking(db, 1, model_seen, reply("nothing to do")))
    with plans.record(app.log) as statements:
        r = run_tick(app)
    assert r.ok and r.steps == 1, r.reason
    assert plans.commits_that_wrote(statements) == 2
    [(free, kinds)] = model_seen
    assert free and kinds[0] == "tick.started" and kinds[-1] == "model.request"
    assert sim.seen and all(free for _, _, free, _ in sim.seen), sim.seen
    assert app.log.verify().ok


def _stop(server: SimServer, iid: int) -> None:
    r = httpx.post(f"{server.url}/_sim/set_status", json={"instance_id": iid, "status": "stopped",
                                                            "status_msg": "Unable to schedule"})
    assert r.status_code == 200, r.text


def test_a_stopped_instance_is_destroyed_only_after_the_start_and_its_intent_are_committed(
        sim: WatchingSimulator, sim_server: SimServer, make_app, fake_model):
    """The tick destroys one of ours that shows stopped before the model is asked: when the DELETE reaches
    vast.ai, another connection already sees the tick's start, the reason and the destroy's intent committed
    (the intent's commit carried the start), and the write lock is free."""
    app = make_app()
    iid = plant_ours(app, sim, good_offer(sim, app.settings)["id"])
    sim.advance(600)
    _stop(sim_server, iid)
    sim.db, sim.watch_tick = Path(app.log.path), 1
    fake_model.enqueue(reply("nothing to do"))
    r = run_tick(app)
    assert r.ok, r.reason
    [(_, _, free, kinds)] = [s for s in sim.seen if s[0] == "DELETE"]
    assert free
    assert kinds[0] == "tick.started" and kinds[-2:] == ["system.destroy", "tool.called"]
    called = events_of(app, "tool.called", 1)[-1]
    assert called.payload["name"] == "destroy_instance" and called.payload["side_effect"]
    assert all(free for _, _, free, _ in sim.seen)
    assert app.log.verify().ok


TICK_SCRIPT = """
import json, sys
from pathlib import Path
from agent.runtime.app import App
from agent.runtime.tick import run_tick
from tests import tamper
from tests.conftest import settings_for
from agent.sim import ManualClock
a = json.loads(sys.argv[1])
s = settings_for(Path(a["tmp"]), a["sim_url"], model_url=a["model_url"])
app = App(s, env={"VAST_API_KEY": a["key"]}, clock=ManualClock(a["now"]))
run_tick(app)
"""


def _reader_waiting(fifo: Path) -> bool:
    """Whether a process has the FIFO open for reading (opening it to write without blocking succeeds)."""
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as e:
        if e.errno == errno.ENXIO:
            return False
        raise
    os.close(fd)
    return True


@pytest.mark.slow
def test_killed_between_the_start_and_the_first_request_the_log_verifies_and_the_next_tick_runs(
        tmp_path, sim: WatchingSimulator, sim_server: SimServer, make_app, fake_model):
    """A tick process is held inside the window between its start and its first request (the knowledge
    scanner's memo file is a FIFO: reading it blocks) and killed with SIGKILL there. Meanwhile nothing of
    the tick is committed; afterwards the log verifies, holds no trace of that tick, the write lock is free,
    and the next tick runs as tick 1 and completes."""
    app = make_app()
    db = Path(app.log.path)
    app.close()
    fifo = Path(app.settings.data_path) / MEMO_NAME
    os.mkfifo(fifo)
    args = {"tmp": str(tmp_path), "sim_url": sim_server.url, "model_url": fake_model.base_url, "key": sim.api_key,
            "now": sim.now()}
    out = tmp_path / "tick-subprocess.log"
    with out.open("wb") as sink:
        proc = subprocess.Popen([sys.executable, "-c", TICK_SCRIPT, json.dumps(args)], cwd=str(tmp_path),
                                env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=sink, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + WAIT_S
            while not _reader_waiting(fifo):
                assert proc.poll() is None, out.read_text(errors="replace")[-3000:]
                assert time.monotonic() < deadline, "the tick never reached the memo file"
                time.sleep(0.02)
            assert _committed(db, 1) == [] and not _lock_free(db)  # in the window: started, not committed
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(WAIT_S)
    assert proc.returncode == -signal.SIGKILL
    fifo.unlink()
    assert _lock_free(db)
    with EventLog(db, create=False) as log:
        assert log.verify().ok and list(log.read(0, kinds=["tick.started"])) == []
    fake_model.enqueue(reply("nothing to do"))
    app2 = make_app()
    r = run_tick(app2)
    assert r.ok and r.tick == 1, r.reason
    assert app2.log.verify().ok and len(events_of(app2, "tick.started")) == 1


def test_a_failure_between_the_start_and_the_first_request_ends_the_tick_with_its_start_committed(
        tmp_path, sim: WatchingSimulator, make_app, fake_model):
    """The model's key file is unreadable when the tick builds its model client, after its start: the tick
    ends as ``tick.failed`` with the reason, its start committed with it in one commit, and the model is never
    asked."""
    from agent.store import plans

    app = make_app(model={"api_key_file": str(tmp_path / "missing.key")})
    with plans.record(app.log) as statements:
        r = run_tick(app)
    assert not r.ok and "cannot read the key file" in (r.reason or ""), r.reason
    assert plans.commits_that_wrote(statements) == 1
    kinds = _committed(Path(app.log.path), 1)
    assert kinds[0] == "tick.started" and kinds[-1] == "tick.failed"
    assert fake_model.requests == [] and not app.log.deferred
    assert app.log.verify().ok
