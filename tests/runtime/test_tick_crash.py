"""No side effect happens twice: a tick killed with SIGKILL between a rent's logged intent and
vast.ai's answer is settled by the next tick against the instance listing, without re-sending
the rent; an ambiguous rent answer inside a tick is resolved by the label, never re-sent.

The simulator and the scripted model run in the test process; the killed tick runs in a
subprocess over the same data directory.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from agent.errors import LogError
from agent.runtime.tick import run_tick
from agent.sim import ManualClock, Reply, Simulator
from agent.store.db import sqlite3
from agent.store.log import EventLog
from tests.conftest import events_of, good_offer, rent_puts, settings_for
from tests.conftest_sim import SIM_SEED
from tests.fakes.openai_server import reply

REPO = Path(__file__).resolve().parents[2]
# Each test runs on SQLite and on PostgreSQL (the killed tick and the next one share the database).
pytestmark = pytest.mark.usefixtures("backend")
WAIT_S = 30.0

TICK_SCRIPT = """
import json, sys
from pathlib import Path
from agent.runtime.app import App
from agent.runtime.tick import run_tick
from tests.conftest import settings_for
from agent.sim import ManualClock
a = json.loads(sys.argv[1])
s = settings_for(Path(a["tmp"]), a["sim_url"], model_url=a["model_url"],
                 **({"storage": {"url": a["storage"]}} if a["storage"] else {}))
app = App(s, env={"VAST_API_KEY": a["key"]}, clock=ManualClock(a["now"]))
app.init_database(exist_ok=True)
run_tick(app)
"""


class GatedSimulator(Simulator):
    """The simulator, plus a gate that can hold rent requests before they are processed
    (a request in flight when its client dies); a held request is dropped when released."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hold_rents = False
        self.held = threading.Event()
        self.release = threading.Event()
        self.rents_arrived = 0

    def handle(self, method: str, target: str, headers: dict[str, str], body: bytes, base_url: str) -> Reply:
        if method == "PUT" and urlsplit(target).path.startswith("/api/v0/asks/"):
            self.rents_arrived += 1
            if self.hold_rents:
                self.held.set()
                self.release.wait(WAIT_S)
                return Reply(503, b'{"success": false, "error": "dropped"}')
        return super().handle(method, target, headers, body, base_url)


@pytest.fixture
def sim(sim_clock: ManualClock) -> GatedSimulator:
    return GatedSimulator(seed=SIM_SEED, clock=sim_clock)


def _wait_for(cond: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _rent_intent_logged(db: Any) -> bool:
    if isinstance(db, Path) and not db.exists():
        return False
    try:
        with EventLog(db, readonly=True, create=False) as log:
            return any(e.payload.get("name") == "rent_instance" for e in log.read(0, kinds=["tool.called"]))
    except (LogError, sqlite3.OperationalError):
        return False  # the schema is not there yet


def _kill_tick_mid_rent(tmp_path: Path, sim: GatedSimulator, sim_server: Any, fake_model: Any,
                        offer_id: int, in_flight: Any, storage_url: str | None) -> None:
    """Run a tick in a subprocess that rents ``offer_id``; SIGKILL it once the intent is logged
    and ``in_flight()`` says the rent reached vast.ai, before any answer."""
    fake_model.enqueue(reply("renting", tool_calls=[("rent_instance", {"offer_id": offer_id,
                                                                       "reason": "queue growing"})]))
    args = {"tmp": str(tmp_path), "sim_url": sim_server.url, "model_url": fake_model.base_url, "key": sim.api_key,
            "now": sim.now(), "storage": storage_url}
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = tmp_path / "tick-subprocess.log"
    with out.open("wb") as sink:
        proc = subprocess.Popen([sys.executable, "-c", TICK_SCRIPT, json.dumps(args)], cwd=str(tmp_path),
                                env=env, stdout=sink, stderr=subprocess.STDOUT)
        try:
            storage = {"storage": {"url": storage_url}} if storage_url else {}
            db = settings_for(tmp_path, sim_server.url, **storage).log_target()
            _wait_for(lambda: proc.poll() is not None or (_rent_intent_logged(db) and in_flight()),
                      "the rent intent and the rent request")
            assert proc.poll() is None, out.read_text(errors="replace")[-3000:]
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(WAIT_S)
    assert proc.returncode == -signal.SIGKILL


def _ours_in_sim(sim: Simulator, app: Any) -> set[int]:
    base = app.settings.fleet.label_prefix + app.settings.agent_id + "-"
    return {i for i, inst in sim.instances.items() if (inst["label"] or "").startswith(base)}


def _active_owned(app: Any) -> set[int]:
    return set(app.log.store.owned_instance_ids())


def _rent_result(app: Any) -> Any:
    (res,) = [e for e in events_of(app, "tool.result") if e.payload["name"] == "rent_instance"]
    return res


@pytest.mark.slow
def test_killed_while_rent_is_in_flight_and_not_created(tmp_path, sim, sim_server, make_app, fake_model,
                                                        storage_url):
    """Killed after the rent intent is logged while the request is held before vast.ai
    processes it: the next tick records the rent as pending (recovered; one listing without
    the label proves nothing), owns nothing, never re-sends the rent; once vast.settle_after
    has passed and a second listing lacks the label, it is settled 'not created'. The log
    verifies and rebuilds to the same read models."""
    app_settings = settings_for(tmp_path, sim_server.url)
    offer = good_offer(sim, app_settings)
    sim.hold_rents = True
    _kill_tick_mid_rent(tmp_path, sim, sim_server, fake_model, offer["id"], sim.held.is_set, storage_url)
    sim.hold_rents = False
    sim.release.set()

    app = make_app()
    r = run_tick(app)

    assert r.ok, r.reason
    res = _rent_result(app)
    assert res.payload["recovered"] is True and res.payload["effect"]["type"] == "rent_pending"
    assert "PENDING" in res.payload["output"]
    assert app.log.store.pending_rents() != []
    sim.advance(app.settings.vast.settle_after + 1)
    assert run_tick(app).ok
    assert [e.payload["created"] for e in events_of(app, "rent.settled")] == [False]
    assert app.log.store.pending_rents() == []
    assert sim.instances == {}
    assert _active_owned(app) == set()
    assert sim.rents_arrived == 1
    assert rent_puts(sim, offer["id"]) == []
    assert [e.payload["error_kind"] for e in events_of(app, "tick.failed", 1)] == ["interrupted"]
    assert app.log.store.dangling_intents() == []
    assert app.log.verify().ok
    assert app.log.rebuild_check() == []


@pytest.mark.slow
def test_killed_after_vast_created_the_instance_but_before_the_result(tmp_path, sim, sim_server, make_app,
                                                                      fake_model, storage_url):
    """Killed after vast.ai created the instance but before its answer (so no tool.result):
    the next tick finds our label, records exactly that instance as ours (recovered success),
    the rent PUT appears exactly once, and the log verifies and rebuilds to the same read models."""
    app_settings = settings_for(tmp_path, sim_server.url)
    offer = good_offer(sim, app_settings)
    sim.realism.update({"listing_lag": 0})  # listed at once; a late listing leaves the rent pending (test_uncertain)
    sim.faults.update({"ambiguous_rent": 1.0, "ambiguous_rent_mode": "hang", "hang_seconds": WAIT_S,
                       "paths": ["/api/v0/asks/"]})
    _kill_tick_mid_rent(tmp_path, sim, sim_server, fake_model, offer["id"], lambda: bool(sim.instances),
                        storage_url)
    sim.faults.update({"ambiguous_rent": 0.0})

    app = make_app()
    r = run_tick(app)
    assert r.ok, r.reason
    sim.advance(600)
    assert run_tick(app).ok

    res = _rent_result(app)
    assert res.payload["recovered"] is True and res.payload["ok"] is True
    (iid,) = sim.instances
    assert res.payload["effect"]["instance_id"] == iid
    assert _ours_in_sim(sim, app) == {iid}
    assert _active_owned(app) == {iid}
    assert len(rent_puts(sim, offer["id"])) == 1
    assert len(rent_puts(sim)) == 1
    obs = events_of(app, "tick.started", 3)[0].payload["observation"]
    assert [(i["id"], i["ours"]) for i in obs["instances"]] == [(iid, True)]
    assert app.log.verify().ok
    assert app.log.rebuild_check() == []


@pytest.mark.parametrize("mode", ["500", "hang"])
def test_ambiguous_rent_answer_is_resolved_in_the_tick_without_resending(sim, make_app, fake_model, mode: str):
    """vast.ai creates the instance but answers 500 (or never answers in time): the tick looks
    for our label in one listing, records the instance as ours, and never re-sends the rent."""
    app = make_app(vast={"timeout": 0.5})
    offer = good_offer(sim, app.settings)
    sim.realism.update({"listing_lag": 0})  # listed at once; a late listing leaves the rent pending (test_uncertain)
    sim.faults.update({"ambiguous_rent": 1.0, "ambiguous_rent_mode": mode, "hang_seconds": 5.0,
                       "paths": ["/api/v0/asks/"]})
    fake_model.enqueue(reply("renting", tool_calls=[("rent_instance", {"offer_id": offer["id"],
                                                                       "reason": "queue growing"})]),
                       reply("done"))

    r = run_tick(app)
    assert r.ok, r.reason
    assert run_tick(app).ok

    res = _rent_result(app)
    assert res.payload["ok"] is True and not res.payload.get("recovered")
    assert "failed ambiguously" in res.payload["output"]
    (iid,) = sim.instances
    assert res.payload["effect"]["instance_id"] == iid
    assert _active_owned(app) == _ours_in_sim(sim, app) == {iid}
    assert len(rent_puts(sim, offer["id"])) == 1
    assert app.log.verify().ok
    assert app.log.rebuild_check() == []
