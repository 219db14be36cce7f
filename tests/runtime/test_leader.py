"""The leadership lock (agent/runtime/leader.py): one active holder per fleet, takeover, and the fence.

The file lock runs on real files in a temp dir; the PostgreSQL lock against a throwaway server
(tests/pgserver.py). Holders that get killed or suspended are real processes
(tests/leader_driver.py) that act only while their fence passes.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from agent import config
from agent.clients.vast import VastClient
from agent.errors import ConfigError, LogError
from agent.runtime.leader import FileLeader, LeadershipLost, PgLeader, leader_for
from agent.runtime.lock import FleetLock
from agent.sim import SimServer, Simulator
from agent.store import pglock
from agent.store.log import EventLog
from agent.store.pglock import identity
from tests.service.test_daemon import wait_for as _wait_for

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 60.0


wait_for = partial(_wait_for, timeout=WAIT_S)  # daemons starting and taking over under load


def stopped(pid: int) -> bool:
    """The process is suspended (state T in /proc)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")


class Driver:
    """tests/leader_driver.py in a subprocess: holds the lock and acts while its fence passes."""

    def __init__(self, tmp: Path, kind: str, target: str, failover: float, name: str = "driver") -> None:
        self.acts = tmp / f"{name}.acts"
        self.out = tmp / f"{name}.out"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.leader_driver", kind, target, "fleet-1",
                                      str(failover), str(self.acts)], cwd=tmp, env=env,
                                     stdout=self.out.open("w"), stderr=subprocess.STDOUT)

    def output(self) -> str:
        return self.out.read_text(errors="replace")

    def acting(self) -> bool:
        assert self.proc.poll() is None, self.output()
        return self.acts.exists() and self.acts.stat().st_size > 0

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def drivers() -> Iterator[list[Driver]]:
    made: list[Driver] = []
    yield made
    for d in made:
        if d.proc.poll() is None:
            d.proc.send_signal(signal.SIGCONT)
        d.kill()


def file_leader(tmp: Path, failover: float = 30.0, **kw: Any) -> FileLeader:
    return FileLeader(tmp / "data", "fleet-1", failover_seconds=failover, **kw)


# ------------------------------------------------------------------ the file lock (SQLite, one host)


def test_one_holder_at_a_time_and_a_clean_release_hands_over(tmp_path: Path):
    """While one holder has the lease a second one cannot take it and names the holder's pid; once the
    first releases it, the second takes it as free, and the first's fence refuses from then on."""
    a, b = file_leader(tmp_path), file_leader(tmp_path)
    try:
        assert a.try_acquire()
        a.check()
        assert not b.try_acquire()
        assert f"pid {os.getpid()} on {socket.gethostname()}" in b.holder()
        a.release()
        assert b.try_acquire()
        assert b.took_because == "free"
        with pytest.raises(LeadershipLost):
            a.check()
    finally:
        a.release()
        b.release()


def test_a_holder_that_stops_heartbeating_loses_the_lease_and_its_fence_refuses(tmp_path: Path):
    """A holder alive but silent past failover_seconds (seen through a clock 31 s ahead) is replaced
    without the single-writer flock it still holds; its next fence check reads the lease, raises
    LeadershipLost naming the new holder, and it never gets the lease back."""
    a = file_leader(tmp_path)
    b = file_leader(tmp_path, clock=lambda: time.time() + 31)
    a.fresh_s = 0.0  # every check reads the lease: no heartbeat thread runs here
    try:
        assert a.try_acquire()
        assert b.try_acquire()
        assert b.took_because.endswith("s") and "has not heartbeated for 3" in b.took_because
        assert not b.flock.held  # a still holds it: the lease alone moved
        with pytest.raises(LeadershipLost, match=f"held by pid {os.getpid()}"):
            a.check()
        assert a.lost is not None
        assert not a.try_acquire()
        b.check()
    finally:
        a.release()
        b.release()


def test_a_free_lease_is_not_taken_while_a_tick_command_holds_the_single_writer_lock(tmp_path: Path):
    """``fleet-agent tick`` and ``backup`` take the single-writer flock without a lease: a daemon must not
    become active beside them; once they let go it can."""
    tick = FleetLock(tmp_path / "data").acquire()
    b = file_leader(tmp_path)
    try:
        assert not b.try_acquire()
        assert f"pid {os.getpid()}" in b.holder()
        tick.release()
        assert b.try_acquire()
    finally:
        tick.release()
        b.release()


def test_the_log_appends_nothing_once_the_fence_refuses(tmp_path: Path):
    """The log calls its fence inside every appending transaction, before the commit: after the lock is
    lost the append raises LeadershipLost and the event is not there; an unfenced log (an operator's
    command) appends as before."""
    db = tmp_path / "log.db"
    lead = file_leader(tmp_path)
    lead.fresh_s = 0.0
    with EventLog(db) as lg:
        assert lead.try_acquire()
        lg.fence = lead.check
        lg.append("daemon.stopped", {"reason": "before"}, "system")
        file_leader(tmp_path, clock=lambda: time.time() + 31).try_acquire()
        with pytest.raises(LeadershipLost):
            lg.append("daemon.stopped", {"reason": "after"}, "system")
        with pytest.raises(LeadershipLost):
            lg.check_fence()
        assert [e.payload["reason"] for e in lg.read(0)] == ["before"]
        lg.fence = None
        lg.append("daemon.stopped", {"reason": "operator"}, "system")
        assert lg.verify().ok
    lead.release()


def test_the_vast_client_sends_nothing_once_the_fence_refuses(tmp_path: Path):
    """The vast.ai client calls its fence before each request: with a fence that refuses, no request
    reaches the simulator."""
    sim = Simulator(seed=3)
    server = SimServer(sim).start()
    try:
        client = VastClient(server.url, sim.api_key, max_attempts=1, min_interval=0)
        client.list_instances()
        before = len(sim.requests)

        def refuse() -> None:
            raise LeadershipLost("lost for the test")

        client.fence = refuse
        with pytest.raises(LeadershipLost):
            client.destroy(12345)
        with pytest.raises(LeadershipLost):
            client.list_instances()
        assert len(sim.requests) == before
        client.close()
    finally:
        server.stop()


def test_a_killed_holder_is_replaced_at_once_through_the_released_flock(tmp_path: Path, drivers: list[Driver]):
    """kill -9 frees the holder's flock: a standby takes the lease as soon as it next polls, saying the
    holder died (no need to wait for its heartbeat to age)."""
    d = Driver(tmp_path, "file", str(tmp_path / "data"), 30.0)
    drivers.append(d)
    wait_for(d.acting, "the driver to act")
    b = file_leader(tmp_path)
    try:
        assert not b.try_acquire()
        d.kill()
        assert b.try_acquire()
        assert b.took_because == f"its holder (pid {d.proc.pid}) died"
    finally:
        b.release()


def test_file_partition_a_suspended_holder_acts_no_more_when_resumed(tmp_path: Path, drivers: list[Driver]):
    """SIGSTOP the holder past failover_seconds: a standby takes the lease; SIGCONT the old holder: its
    fence finds the lease gone, it exits 3 and writes not one more act."""
    _partition(tmp_path, drivers, "file", str(tmp_path / "data"),
               lambda: file_leader(tmp_path, failover=3.0))


def _partition(tmp_path: Path, drivers: list[Driver], kind: str, target: str,
               make_standby: Callable[[], FileLeader | PgLeader]) -> None:
    d = Driver(tmp_path, kind, target, 3.0 if kind == "file" else 4.0)
    drivers.append(d)
    wait_for(d.acting, "the driver to act")
    standby = make_standby()
    try:
        assert not standby.try_acquire()
        d.proc.send_signal(signal.SIGSTOP)
        wait_for(lambda: stopped(d.proc.pid), "the driver to stop")
        acts = d.acts.read_bytes()
        t0 = time.monotonic()
        wait_for(lambda: standby.try_acquire() or time.sleep(0.1), "the standby to take over", timeout=60)
        print(f"{kind}: takeover {time.monotonic() - t0:.2f}s after SIGSTOP")
        # Now active, it heartbeats as a daemon does: however long the old holder takes to wake and exit on a
        # loaded machine, its own lease (on PostgreSQL, a session idle past failover/2) does not run out.
        standby.start_heartbeat(lambda why: None)
        d.proc.send_signal(signal.SIGCONT)
        assert d.proc.wait(WAIT_S) == 3, d.output()
        assert "lost: " in d.output()
        assert d.acts.read_bytes() == acts
        standby.check()
    finally:
        standby.release()


# ------------------------------------------------------------------ the PostgreSQL lock


@pytest.fixture
def pg_url(pg_url: str, tmp_path: Path) -> str:
    """The database with fleet-1 and fleet-2 made by its owner (as init makes them), so each has its
    leadership table and the owner may lock it."""
    from agent.config import PgTarget

    for fleet in ("fleet-1", "fleet-2"):
        EventLog(PgTarget(pg_url, fleet, state_dir=tmp_path), create=True).close()
    return pg_url


@pytest.fixture
def pg_dsn(pg_url: str) -> str:
    return pg_url


def pg_leader(dsn: str, failover: float = 30.0) -> PgLeader:
    return PgLeader(dsn, "fleet-1", failover_seconds=failover)


def test_pg_one_holder_named_by_application_name_and_a_release_hands_over(pg_dsn: str):
    """The fleet's leadership table lock admits one session; pg_locks joined with pg_stat_activity
    names the holder as "fleet-agent <agent_id> <host> <pid>"; another fleet's lock is independent; the
    lock session has idle_session_timeout at half of failover_seconds; a release hands over."""
    a, b = pg_leader(pg_dsn), pg_leader(pg_dsn)
    other = PgLeader(pg_dsn, "fleet-2", failover_seconds=30)
    try:
        assert a.try_acquire()
        a.check()
        assert not b.try_acquire()
        assert other.try_acquire()
        (h,) = a.holders()
        assert h.application_name == identity("fleet-1")
        assert f"'{identity('fleet-1')}'" in b.holder()
        assert pglock.session_setting(a._conn, "idle_session_timeout") == "15s"
        a.release()
        assert b.try_acquire()
        assert b.holders()[0].pid != h.pid
    finally:
        for x in (a, b, other):
            x.release()


def test_pg_fence_refuses_once_the_lock_session_is_gone(pg_dsn: str):
    """When the server ends the lock session (here: its backend gets SIGTERM, as from pg_terminate_backend,
    and as idle_session_timeout or a lost connection would end it), the next synchronous check raises LeadershipLost and a standby gets the lock."""
    a, b = pg_leader(pg_dsn), pg_leader(pg_dsn)
    a.fresh_s = 0.0
    try:
        assert a.try_acquire()
        (h,) = a.holders()
        os.kill(h.pid, signal.SIGTERM)  # the server ends that session, as pg_terminate_backend does
        with pytest.raises(LeadershipLost, match="lock session"):
            a.check()
        assert b.try_acquire()
    finally:
        a.release()
        b.release()


def test_pg_a_killed_holder_is_replaced(pg_dsn: str, tmp_path: Path, drivers: list[Driver]):
    """kill -9 closes the holder's socket: the server ends its session and frees the lock, and a standby
    polling the leadership table lock takes it."""
    d = Driver(tmp_path, "pg", pg_dsn, 30.0)
    drivers.append(d)
    wait_for(d.acting, "the driver to act")
    b = pg_leader(pg_dsn)
    try:
        assert not b.try_acquire()
        d.kill()
        wait_for(lambda: b.try_acquire() or time.sleep(0.1), "the standby to take over")
    finally:
        b.release()


def test_pg_partition_a_suspended_holder_acts_no_more_when_resumed(pg_dsn: str, tmp_path: Path,
                                                                   drivers: list[Driver]):
    """SIGSTOP keeps the holder's socket open, so only idle_session_timeout (failover/2) ends its session:
    a standby then takes the lock; SIGCONT the old holder: its fence finds the session gone, it exits 3
    and writes not one more act."""
    _partition(tmp_path, drivers, "pg", pg_dsn, lambda: pg_leader(pg_dsn, failover=4.0))


def test_pg_an_answer_read_after_the_lock_went_vouches_for_nothing(pg_server: Any):
    """A check's answer vouches for when the question left, not for when it is read. The holder asks the
    server whether it still holds the lock; the server answers yes, but the answer is held back on its way
    (as when the holder is suspended or starved of CPU right then) until the server has ended the silent
    session and a standby has taken the lock. Read late, that yes must not pass the fence: the check asks
    again, finds its session gone, and raises LeadershipLost."""
    from tests.pgfleets import superuser_fleet
    from tests.tcpproxy import StallingProxy

    superuser_fleet(pg_server, "postgres", "fleet-stall")
    proxy = StallingProxy(pg_server.port)
    dsn = pg_server.tcp_dsn(with_password=True).replace(f":{pg_server.port}/", f":{proxy.port}/")
    a = PgLeader(dsn, "fleet-stall", failover_seconds=3.0)  # the server ends a silent session after 1.5 s
    b = PgLeader(pg_server.dsn(), "fleet-stall", failover_seconds=3.0)
    outcome: list[str] = []

    def check() -> None:
        try:
            a.check()
            outcome.append("held")
        except LeadershipLost as e:
            outcome.append(f"lost: {e}")

    try:
        assert a.try_acquire()
        a.fresh_s = 0.0  # this check asks the server
        proxy.hold()
        t = threading.Thread(target=check, daemon=True)
        t.start()
        wait_for(lambda: b.try_acquire() or time.sleep(0.1), "the server to end a's session and b to take over")
        b.start_heartbeat(lambda why: None)
        proxy.release()
        t.join(WAIT_S)
        assert len(outcome) == 1 and outcome[0].startswith("lost: ") and "lock session" in outcome[0]
        assert a.lost is not None
        b.check()
    finally:
        proxy.release()
        a.release()
        b.release()
        proxy.close()


def test_the_apps_clients_ask_nothing_once_the_fence_refuses(make_app: Any, sim: Simulator):
    """The App puts the daemon's fence on every client that talks to another system: with a fence that
    refuses, neither the demand source nor vast.ai gets a request."""
    app = make_app(provider="rules")
    demand = app.demand()
    assert demand is not None
    demand.get()
    app.vast().list_instances()
    before = len(sim.requests)

    def refuse() -> None:
        raise LeadershipLost("lost for the test")

    app.fence = refuse
    with pytest.raises(LeadershipLost):
        demand.get()
    with pytest.raises(LeadershipLost):
        app.vast().list_instances()
    assert sim.requests[before:] == []


def test_pg_a_standby_through_an_outage_warns_once_then_once_a_minute_then_on_recovery(pg_dsn: str):
    """A standby polls four times a second: while nothing answers at the server's address it logs one
    warning as the outage starts, at most one a minute while it lasts (with the failures so far), and one
    when a poll reaches the server again; meanwhile ``unreachable`` says why the lock could not be asked."""
    from structlog.testing import capture_logs

    from tests.pgserver import _free_port

    now = [0.0]
    lead = PgLeader(f"postgresql://nobody@127.0.0.1:{_free_port()}/postgres", "fleet-1", failover_seconds=30,
                    monotonic=lambda: now[0])
    try:
        with capture_logs() as logs:
            for n in range(200):  # 50 s of polls
                now[0] = n * 0.25
                assert not lead.try_acquire()
            assert lead.unreachable is not None and "cannot reach the fleet's PostgreSQL database" in lead.unreachable
            assert [e["event"] for e in logs] == ["leader.standby_query_failed"]
            now[0] = 61.0
            assert not lead.try_acquire()
            now[0] = 62.0
            assert not lead.try_acquire()
            lead.conninfo = pg_dsn  # the server answers again
            now[0] = 70.0
            assert lead.try_acquire()
        assert [(e["event"], e["log_level"]) for e in logs] == [
            ("leader.standby_query_failed", "warning"), ("leader.standby_query_still_failing", "warning"),
            ("leader.standby_query_recovered", "warning")]
        assert (logs[1]["failures"], logs[1]["for_s"]) == (201, 61.0)
        assert (logs[2]["failures"], logs[2]["outage_s"]) == (202, 70.0)
        assert lead.unreachable is None
    finally:
        lead.release()


def test_pg_run_with_the_server_down_says_the_database_is_unreachable(pg_url: str, tmp_path: Path):
    """A plain ``run`` whose PostgreSQL server does not answer exits 1 saying the database cannot be
    reached and how to check it, not that another daemon holds the fleet's lock."""
    import re

    from tests.pgserver import _free_port
    from tests.reliability.harness import write_config

    cfg = write_config(tmp_path, "http://127.0.0.1:9", storage={"url": pg_url}, http={"listen": None})
    down = re.sub(r"port=\d+", f"port={_free_port()}", pg_url)  # no server on that socket any more
    cfg.write_text(cfg.read_text(encoding="utf-8").replace(pg_url, down), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "agent.cli", "--config", str(cfg), "run"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=WAIT_S)
    assert out.returncode == 1, out.stderr
    assert "cannot reach the fleet's PostgreSQL database" in out.stderr and "storage.url" in out.stderr
    assert "holds" not in out.stderr


# ------------------------------------------------------------------ settings


def test_failover_seconds_is_bounded_with_file_and_line(tmp_path: Path):
    """storage.failover_seconds below 3s is refused naming the file, line and key; the default is 30s and
    a SQLite fleet gets the file lock in its data directory."""
    cfg = tmp_path / "config.yaml"
    cfg.write_text("agent_id: fleet-1\nstorage:\n  failover_seconds: 1s\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"config.yaml:3: storage.failover_seconds: must be between 3s"):
        config.load(str(cfg))
    cfg.write_text("agent_id: fleet-1\n", encoding="utf-8")
    s = config.load(str(cfg))
    assert float(s.storage.failover_seconds) == 30.0
    lead = leader_for(s)
    assert isinstance(lead, FileLeader) and lead.path == s.data_path / "fleet-agent.runtime.leader"


def test_pg_a_suspended_daemon_mid_append_does_not_hold_the_append_lock(pg_url: str, tmp_path: Path):
    """The daemon's logs on PostgreSQL end their session after failover/2 inside an open transaction: an
    append left open (as by a daemon suspended mid-append) is rolled back by the server, and another
    writer's append goes through instead of waiting for the suspended one."""
    from agent.config import PgTarget
    from agent.store.pglock import bound_idle_transactions

    with EventLog(PgTarget(pg_url, "fleet-1", state_dir=tmp_path), create=True) as lg, \
            EventLog(PgTarget(pg_url, "fleet-1", state_dir=tmp_path)) as other:
        bound_idle_transactions(lg, 1.0)
        lg.fence = lambda: None  # a daemon's log: fenced, so each append's statements go out at once
        successor = threading.Thread(target=other.append, args=("daemon.stopped", {"reason": "the new active"},
                                                                "system"), daemon=True)
        with pytest.raises(LogError), lg.transaction() as tx:
            tx.append("daemon.stopped", {"reason": "suspended mid-append"}, "system")
            successor.start()  # waits for the fleet's append lock, held by this open transaction
            successor.join(30)
            assert not successor.is_alive(), "the open transaction kept the append lock"
        assert [e.payload["reason"] for e in other.read(0)] == ["the new active"]


# ------------------------------------------------------------------ doctor


def _settings(tmp_path: Path, storage_url: str | None = None) -> config.Settings:
    cfg = tmp_path / "config.yaml"
    extra = f'storage:\n  url: "{storage_url}"\n' if storage_url else ""
    cfg.write_text(f"agent_id: fleet-1\ndata_dir: ./data\n{extra}", encoding="utf-8")
    return config.load(str(cfg))


def test_doctor_names_the_file_lock_holder_and_fails_a_stale_one(tmp_path: Path):
    """doctor's lock check: no daemon active (ok), the holder's pid and host with its heartbeat age (ok),
    and a holder whose heartbeat is older than failover_seconds (FAIL: suspended or hung, with the fix)."""
    from agent.cli.doctor import check_leader

    s = _settings(tmp_path)
    c = check_leader(s)
    assert (c.ok, c.detail) == (True, "no daemon is active")
    lead = FileLeader(s.data_path, "fleet-1", failover_seconds=30)
    assert lead.try_acquire()
    c = check_leader(s)
    assert c.ok and c.detail.startswith(f"held by pid {os.getpid()} on {socket.gethostname()}, heartbeat ")
    lead.release()
    stale = FileLeader(s.data_path, "fleet-1", failover_seconds=30, clock=lambda: time.time() - 31)
    assert stale.try_acquire()
    c = check_leader(s)
    assert not c.ok and "stale" in c.detail and c.fix is not None and "suspended or hung" in c.fix
    stale.release()


def test_doctor_names_the_pg_lock_holder_by_application_name(pg_url: str, tmp_path: Path):
    """doctor's lock check on PostgreSQL reads pg_locks and pg_stat_activity: nobody (ok), a daemon named
    "fleet-agent fleet-1 <host> <pid>" (ok), a session of something else holding the fleet's leadership table
    lock (FAIL, with the pg_terminate_backend fix)."""
    import psycopg

    from agent.cli.doctor import check_leader

    s = _settings(tmp_path, pg_url)
    assert check_leader(s).detail == "no daemon holds the leadership table lock of fleet 'fleet-1'"
    lead = pg_leader(pg_url)
    assert lead.try_acquire()
    c = check_leader(s)
    assert c.ok and f"'{identity('fleet-1')}'" in c.detail
    lead.release()
    with psycopg.connect(pg_url, autocommit=True, application_name="psql") as other:
        assert pglock.try_lock(other, "fleet-1")
        c = check_leader(s)
        assert not c.ok and "'psql'" in c.detail and c.fix is not None and "pg_terminate_backend" in c.fix


# ------------------------------------------------------------------ status


def test_status_names_the_file_lock_holder_and_its_standbys(tmp_path: Path, drivers: list[Driver]):
    """On SQLite ``status`` reads the lease for the active daemon (pid, host, heartbeat age) and lists the
    standbys waiting (each keeps a file of its own flocked); a standby or holder killed drops out."""
    from agent.cli.status import format_text
    from agent.runtime.status import daemon_state, leadership

    s = _settings(tmp_path)
    assert leadership(s) == {"lock": "file", "standbys": []}
    a = Driver(tmp_path, "file", str(s.data_path), 30.0, "a")
    drivers.append(a)
    wait_for(a.acting, "the holder to act")
    b = Driver(tmp_path, "file", str(s.data_path), 30.0, "b")
    drivers.append(b)
    wait_for(lambda: leadership(s)["standbys"], "the standby to be listed")
    st = leadership(s)
    assert st["running"] and st["holder"].startswith(f"pid {a.proc.pid} on {socket.gethostname()}, heartbeat ")
    assert [(x["pid"], x["host"]) for x in st["standbys"]] == [(b.proc.pid, socket.gethostname())]
    text = format_text({"daemon": {**daemon_state(s.data_path), **st}, "error": "(the log is not read here)"})
    assert text.splitlines()[:2] == [f"daemon: running ({st['holder']})",
                                     f"standbys: 1 waiting (pid {b.proc.pid} on {socket.gethostname()})"]
    b.kill()
    assert leadership(s)["standbys"] == []
    a.kill()
    st = leadership(s)
    assert "running" not in st and "it died" in st["stale_lease"]


def test_status_names_the_pg_lock_holder_and_its_standbys(pg_url: str, tmp_path: Path, drivers: list[Driver]):
    """On PostgreSQL ``status`` asks the server: the session holding the fleet's lock names the active
    daemon (pid and host, and its server pid), the other daemons' sessions are its standbys; another fleet's
    daemons are not listed, and a server that cannot be reached is said so."""
    from agent.cli.status import format_text
    from agent.runtime.status import leadership

    s = _settings(tmp_path, pg_url)
    assert leadership(s) == {"lock": "postgresql", "running": False, "holder": None, "standbys": []}
    a = Driver(tmp_path, "pg", pg_url, 30.0, "a")
    drivers.append(a)
    wait_for(a.acting, "the holder to act")
    b = Driver(tmp_path, "pg", pg_url, 30.0, "b")
    drivers.append(b)
    other = PgLeader(pg_url, "fleet-2", failover_seconds=30)
    try:
        assert other.try_acquire()
        wait_for(lambda: leadership(s)["standbys"], "the standby to be listed")
        st = leadership(s)
        assert st["running"] and st["holder"].startswith(f"pid {a.proc.pid} on {socket.gethostname()}, server pid ")
        assert st["standbys"] == [{"pid": b.proc.pid, "host": socket.gethostname()}]
        text = format_text({"daemon": {**st, "running": True}, "error": "(the log is not read here)"})
        assert text.splitlines()[:2] == [f"daemon: running ({st['holder']})",
                                         f"standbys: 1 waiting (pid {b.proc.pid} on {socket.gethostname()})"]
    finally:
        other.release()
    b.kill()
    a.kill()
    wait_for(lambda: not leadership(s)["running"], "the server to free the killed holder's lock")
    import re

    from tests.pgserver import _free_port

    (tmp_path / "down").mkdir()
    down = _settings(tmp_path / "down", re.sub(r"port=\d+", f"port={_free_port()}", pg_url))
    st = leadership(down)
    assert not st["running"] and st["error"].startswith("cannot ask the server who holds the lock: ")
    assert "leadership: cannot ask the server" in format_text({"daemon": st, "error": "-"})
