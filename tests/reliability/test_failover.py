"""Two daemons for one fleet (tests/reliability/failover.py): the standby takes over when the active
one is killed or suspended; a suspended one that comes back appends nothing and sends nothing.

Real ``fleet-agent run --standby`` processes, the simulator on 127.0.0.1, the rules provider as the
model; every test runs on both backends: one SQLite data directory shared by the daemons (one host),
and the fleet in a PostgreSQL database on a throwaway server, each daemon with a directory of its own
(two hosts).
"""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from agent.sim import ManualClock, Reply, SimServer
from tests.reliability.failover import Fleet, _config, run_failover, run_partition, wait_for
from tests.reliability.harness import LABEL_BASE, SIM_KEY, CountingSim, check_db, running_sim

pytestmark = pytest.mark.usefixtures("backend")


class HoldingSim(CountingSim):
    """Holds rent requests while ``hold`` is set (a request in flight when its daemon dies), then drops them."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.hold = True
        self.held = threading.Event()
        self.release = threading.Event()
        self.rent_labels: list[str] = []  # every rent request that arrived, held or not

    def handle(self, method: str, target: str, headers: dict[str, str], body: bytes, base_url: str) -> Reply:
        if method == "PUT" and urlsplit(target).path.startswith("/api/v0/asks/"):
            self.rent_labels.append(str(json.loads(body or b"{}").get("label")))
        if method == "PUT" and urlsplit(target).path.startswith("/api/v0/asks/") and self.hold:
            self.held.set()
            self.release.wait(60)
            return Reply(503, b'{"success": false, "error": "dropped"}')
        return super().handle(method, target, headers, body, base_url)


def test_standby_takes_over_after_kill9_and_settles_the_intent_before_its_first_tick(fast_root: Path,
                                                                                      storage_url: str | None):
    """A second daemon for the same fleet started with --standby waits; the active one is killed with
    kill -9 while its rents are held by vast.ai (an intent logged, no answer): the standby appends
    leader.lost naming it, leader.acquired and daemon.started, settles every intent left without a result
    with a recovered result before its first tick starts (reconcile first, as after any crash), never
    re-sends a rent, and ticks; the chain verifies."""
    sim = HoldingSim(seed=4, clock=ManualClock(), api_key=SIM_KEY)
    server = SimServer(sim).start()
    try:
        sim.pending = 600.0
        fleet = Fleet(fast_root, _config(fast_root, sim, server.url, 10.0, storage_url), storage_url)
        try:
            a = fleet.start(standby=False)
            first = wait_for(lambda: fleet.acquired_after(0), "the first daemon to become active")
            assert fleet.holder_pid(first) == a.pid and first.payload["because"] == "free"
            b = fleet.start()
            wait_for(lambda: "daemon.standby" in fleet.stderr(b.pid), "the standby to wait")
            assert sim.held.wait(60), "the active daemon never rented"
            a.send_signal(signal.SIGKILL)
            a.wait(30)
            results = {e.payload["call_id"] for e in fleet.events(first.seq, ["tool.result"])}
            open_intents = [e for e in fleet.events(first.seq, ["tool.called"])
                            if e.payload["side_effect"] and e.payload["call_id"] not in results]
            assert open_intents, "the kill left no intent without its result"
            sim.hold = False
            sim.release.set()
            took = wait_for(lambda: fleet.acquired_after(first.seq), "the standby to take over")
            assert fleet.holder_pid(took) == b.pid
            assert took.payload["because"] == (f"its holder (pid {a.pid}) died" if storage_url is None else
                                               "its holder's session ended (it stopped, died or lost its "
                                               "connection)")
            lost = fleet.events(took.seq - 2)[0]
            assert (lost.kind, lost.payload["holder"]) == ("leader.lost", first.payload["holder"])
            after = wait_for(lambda: fleet.events(took.seq), "the new active daemon's next event")
            assert after[0].kind == "daemon.started"
            tick = wait_for(lambda: fleet.events(took.seq, ["tick.started"]), "the new active daemon to tick")[0]
            for intent in open_intents:
                (settled,) = [e for e in fleet.events(intent.seq, ["tool.result"])
                              if e.payload["call_id"] == intent.payload["call_id"]]
                assert settled.payload.get("recovered") is True and settled.seq < tick.seq
                if intent.payload["name"] == "rent_instance":
                    assert sim.rent_labels.count(f"{LABEL_BASE}{intent.payload['idempotency_key']}") <= 1
            wait_for(lambda: fleet.events(took.seq, ["tick.completed"]), "the new active daemon's tick to end")
        finally:
            codes = fleet.stop_all()
        assert (codes[a.pid], codes[b.pid]) == (-signal.SIGKILL, 0)
        assert check_db(fleet.db) == []
    finally:
        server.stop()


@pytest.mark.slow
def test_a_second_plain_daemon_is_refused_while_a_standby_may_stop_while_waiting(fast_root: Path,
                                                                                 storage_url: str | None):
    """Without --standby a second daemon is refused (exit 1, naming the holder's pid and the lock file);
    a standby stopped by SIGTERM while it waits exits 0 having appended nothing."""
    with running_sim(5) as (sim, server):
        fleet = Fleet(fast_root, _config(fast_root, sim, server.url, 10.0, storage_url), storage_url)
        try:
            a = fleet.start(standby=False)
            wait_for(lambda: fleet.acquired_after(0), "the first daemon to become active")
            second = fleet.start(standby=False)
            assert second.wait(60) == 1
            text = fleet.stderr(second.pid)
            assert f" {a.pid}" in text and "--standby" in text
            assert ("fleet-agent.runtime.lock" if storage_url is None else "'fleet-agent rel ") in text
            b = fleet.start()
            wait_for(lambda: "daemon.standby" in fleet.stderr(b.pid), "the standby to wait")
            n = len(fleet.events())
            b.send_signal(signal.SIGTERM)
            assert b.wait(60) == 0
            assert not [e for e in fleet.events(n) if Fleet.holder_pid(e) == b.pid]
        finally:
            codes = fleet.stop_all()
        assert codes[a.pid] == 0


@pytest.mark.slow
def test_failover_kill9_twelve_times(fast_root: Path, storage_url: str | None):
    """kill -9 the active daemon at random points mid-tick (half right after a rent, destroy or other
    fleet-changing request reached the simulator) 12 times, a new standby replacing each: every time the
    standby takes over (how fast is bench/failover.py's figure, not asserted here: no timed assertions) and
    leader.lost names the killed daemon; at the end
    no rent was sent twice, no instance is untraced or untracked, every intent has its result, the chain
    verifies and the read models rebuild equal, and the last two daemons stop with 0."""
    t0 = time.monotonic()
    rep = run_failover(fast_root, kills=12, seed=7, failover=10.0, storage_url=storage_url)
    print("failover figures:", rep.figures(), f"in {time.monotonic() - t0:.0f}s")
    assert rep.problems == []
    assert rep.kills == 12 and len(rep.takeover_s) == 12
    assert rep.lost_named == 12
    assert rep.kills_after_mutation >= 3
    assert rep.audit["created"] >= 3
    assert rep.audit["duplicates"] == 0
    assert rep.audit["untraced"] == 0
    assert rep.audit["untracked"] == 0
    assert rep.audit["dangling_intents"] == 0
    assert rep.audit["calls_without_result"] == 0
    assert rep.intents["duplicate_requests"] == 0
    assert rep.exit_codes == [0, 0]


# The partition is a race against the suspension's moment (mid-request, mid-append, mid-heartbeat): it runs
# this many times per backend, each SIGSTOP at another point (bench/partition_load.py runs it under load).
PARTITION_RUNS = 2


@pytest.mark.slow
@pytest.mark.parametrize("run", range(PARTITION_RUNS))
def test_partition_a_suspended_active_appends_nothing_and_sends_nothing_when_resumed(fast_root: Path,
                                                                                      storage_url: str | None,
                                                                                      run: int):
    """SIGSTOP the active daemon mid-tick past storage.failover_seconds (3s): the standby takes over and
    ticks; with the new active suspended too, SIGCONT the old one: it exits 3 with a leader.lost log line,
    having appended no event and written no request to vast.ai or the demand source. On SQLite that holds
    wherever the SIGSTOP fell, mid-append included: every COMMIT and every write of a request to a socket
    runs under the lease file's lock (``FileLeader.hold``), which a standby must hold to take over. On
    PostgreSQL the server refuses a superseded daemon's COMMIT (its session is ended), but the check before
    a write is a query, not a lock: a request written just as the SIGSTOP came can leave on resume (one at
    most; nothing short of a fencing token vast.ai checks could stop it; the audit below shows it did
    nothing twice). The new active resumes and ticks (or, when it stayed suspended past its own lease,
    exits 3 having appended nothing and a fresh daemon ticks); the chain verifies and no intent is left
    without a result."""
    rep = run_partition(fast_root, seed=2 + run, failover=3.0, storage_url=storage_url)
    print("partition figures:", rep)
    assert rep.problems == []
    assert rep.old_exit == 3
    assert rep.old_logged_lost
    assert rep.old_appended == 0
    assert rep.old_requests <= (0 if storage_url is None else 1)
    if rep.new_lost_while_suspended:
        assert (rep.new_exit, rep.new_appended_after_lost) == (3, 0)
    assert rep.new_ticked_after
    assert rep.exit_codes == [0]
    assert rep.audit["duplicates"] == 0 and rep.audit["dangling_intents"] == 0
    assert rep.intents["duplicate_requests"] == 0


@pytest.mark.slow
def test_sqlite_a_standby_waits_out_a_suspended_writer_holding_the_write_lock(fast_root: Path,
                                                                              storage_url: str | None):
    """SQLite: the active daemon is suspended while another process holds the log's write lock (as the
    daemon itself does when suspended mid-append). The standby takes the fleet and waits for the lock past
    the busy timeout without exiting; once the lock comes free it appends leader.acquired and
    daemon.started and ticks, and the old daemon, resumed, exits 3 having lost the fleet."""
    if storage_url is not None:
        pytest.skip("PostgreSQL ends a suspended writer's session itself (test_leader.py)")
    from agent.store.db import BUSY_TIMEOUT_MS
    from tests.reliability.failover import suspended
    from tests.tamper import hold_sqlite_write_lock

    with running_sim(3) as (sim, server):
        fleet = Fleet(fast_root, _config(fast_root, sim, server.url, 3.0), None)
        holder = None
        try:
            old = fleet.start(standby=False)
            first = wait_for(lambda: fleet.acquired_after(0), "the first daemon to become active")
            new = fleet.start()
            wait_for(lambda: "daemon.standby" in fleet.stderr(new.pid), "the second daemon to wait as a standby")
            wait_for(lambda: fleet.events(first.seq, ["tick.completed"]), "the active daemon to tick")
            old.send_signal(signal.SIGSTOP)
            wait_for(lambda: suspended(old.pid), "the active daemon to stop")
            holder = hold_sqlite_write_lock(fleet.db)
            head = len(fleet.events())
            held = time.monotonic()
            # Past failover_seconds (the standby takes the fleet) and then the busy timeout, where its first
            # append would have failed; on a loaded machine the standby may take longer to get there.
            wait_for(lambda: "daemon.waiting_for_writer" in fleet.stderr(new.pid) or new.poll() is not None,
                     "the standby to wait for the write lock")
            time.sleep(max(0.0, held + 3.0 + BUSY_TIMEOUT_MS / 1000 + 5 - time.monotonic()))
            assert new.poll() is None, fleet.stderr(new.pid)
            assert "daemon.waiting_for_writer" in fleet.stderr(new.pid)
            assert len(fleet.events()) == head
            holder.kill()
            holder.wait(10)
            took = wait_for(lambda: fleet.acquired_after(first.seq), "the standby to take over")
            assert fleet.holder_pid(took) == new.pid
            wait_for(lambda: fleet.events(took.seq, ["tick.completed"]), "the new active daemon to tick")
            old.send_signal(signal.SIGCONT)
            assert old.wait(60) == 3, fleet.stderr(old.pid)
            assert new.poll() is None
        finally:
            if holder is not None and holder.poll() is None:
                holder.kill()
            codes = fleet.stop_all()
        assert codes[new.pid] == 0
        assert check_db(fleet.db) == []
