"""Two daemons, one fleet: kill -9 or suspend the active one and watch the standby take over.

    run_failover(root, kills=20, ...)   SIGKILL the active daemon mid-tick, ``kills`` times; a new
                                        standby replaces each killed one. Returns a FailoverReport
                                        (takeover seconds per kill, audit figures, problems).
    run_partition(root, ...)            SIGSTOP the active past failover_seconds, let the standby
                                        take over, SIGCONT the old one: what it appended and sent.

Both run real ``fleet-agent run --standby`` processes (the console script's code path,
``python -m agent.cli``) against the simulator on 127.0.0.1, with the built-in rules provider as
the model, over one log: the SQLite file in a shared data directory, or, given ``storage_url``,
the fleet in a PostgreSQL database (each daemon then has a data directory of its own, as on two
hosts). ``bench/failover.py`` prints the figures; the
slow tests in tests/reliability/test_failover.py assert them.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

from agent.config import PgTarget
from agent.events import Event
from agent.store.log import EventLog
from tests.reliability.harness import (
    AGENT_ID,
    ROOT,
    CountingSim,
    audit_intents,
    audit_rentals,
    check_db,
    db_path,
    mutating,
    running_sim,
    write_config,
)
from tests.service.test_daemon import wait_for as _wait_for

WAIT_S = 90.0


wait_for = partial(_wait_for, timeout=WAIT_S)  # daemons starting and taking over under load


def ts_seconds(ts: str) -> float:
    """An event's ts ('2026-12-01T06:01:51.123456Z') as a Unix time."""
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def suspended(pid: int) -> bool:
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")


QUIET_S = 1.0  # no request recorded for this long: the simulator has read all a suspended daemon wrote


def settled(requests: list[Any], limit_s: float = 30.0) -> int:
    """The simulator's request count once it has recorded none for ``QUIET_S``, with every daemon suspended.
    A request a daemon wrote just before its SIGSTOP waits in the socket until the server's thread reads it,
    which on a loaded machine can be after the daemon stopped; counted from before that, it would be charged
    to the daemon resumed next. (Seen once in CI: a GET /instances the new active began its next tick with.)"""
    n, since, end = len(requests), time.monotonic(), time.monotonic() + limit_s
    while time.monotonic() < end:
        time.sleep(0.05)
        if len(requests) != n:
            n, since = len(requests), time.monotonic()
        elif time.monotonic() - since >= QUIET_S:
            break
    return n


class Fleet:
    """The daemon processes of one fleet, and what its log says."""

    def __init__(self, root: Path, cfg: Path, storage_url: str | None = None) -> None:
        self.root, self.cfg = root, cfg
        self.db: Path | PgTarget = db_path(root) if storage_url is None else \
            PgTarget(storage_url, AGENT_ID, state_dir=root / "check")
        (root / "check").mkdir(exist_ok=True)
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.stderr_paths: dict[int, Path] = {}
        self.n = 0

    def start(self, *, standby: bool = True) -> subprocess.Popen[bytes]:
        """A daemon; on PostgreSQL each in a copy of the config in a directory of its own (another host)."""
        self.n += 1
        cfg = self.cfg
        if isinstance(self.db, PgTarget):
            host = self.root / f"host-{self.n}"
            host.mkdir()
            (host / "knowledge").mkdir()
            for name in ("config.yaml", "vast_api_key"):
                (host / name).write_bytes((self.root / name).read_bytes())
            cfg = host / "config.yaml"
        path = self.root / f"daemon-{self.n}.stderr"
        err = path.open("wb")
        env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")}
        env.update(PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
        argv = [sys.executable, "-m", "agent.cli", "--config", str(cfg), "run"] + (["--standby"] if standby
                                                                                         else [])
        p = subprocess.Popen(argv, cwd=self.root, env=env, stdout=subprocess.DEVNULL, stderr=err)
        err.close()
        self.procs[p.pid] = p
        self.stderr_paths[p.pid] = path
        return p

    def stderr(self, pid: int) -> str:
        return self.stderr_paths[pid].read_text(errors="replace")

    def events(self, since: int = 0, kinds: list[str] | None = None) -> list[Event]:
        if isinstance(self.db, Path) and not self.db.exists():
            return []
        with EventLog(self.db, readonly=True) as lg:
            return list(lg.read(since, kinds=kinds))

    def acquired_after(self, seq: int) -> Event | None:
        got = self.events(seq, ["leader.acquired"])
        return got[-1] if got else None

    @staticmethod
    def holder_pid(e: Event) -> int | None:
        """The pid ending the event's ``holder`` ("fleet-agent AGENT HOST PID"), or None when it names none."""
        last = str(e.payload.get("holder", "")).rsplit(" ", 1)[-1]
        return int(last) if last.isdigit() else None

    def stop_all(self) -> dict[int, int | None]:
        """SIGTERM every daemon still running (each once its handler is installed: a standby launched just
        before is otherwise still in the interpreter's start-up and ends by the signal, -15, as
        bench/sigterm_start.py measures), then their exit codes."""
        codes: dict[int, int | None] = {}
        until = time.monotonic() + WAIT_S
        for p in self.procs.values():
            while p.poll() is None and not _handles_sigterm(p.pid) and time.monotonic() < until:
                time.sleep(0.05)
        for pid, p in self.procs.items():
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(signal.SIGCONT)
                    p.send_signal(signal.SIGTERM)
        for pid, p in self.procs.items():
            try:
                codes[pid] = p.wait(WAIT_S)
            except subprocess.TimeoutExpired:
                p.kill()
                codes[pid] = p.wait(10)
        return codes


def _handles_sigterm(pid: int) -> bool:
    """Whether the process installed a SIGTERM handler (/proc/PID/status SigCgt); False when it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    except OSError:
        return False
    return False


def _config(root: Path, sim: CountingSim, url: str, failover: float, storage_url: str | None = None) -> Path:
    storage: dict[str, Any] = {"failover_seconds": f"{failover:g}s"}
    if storage_url is not None:
        storage["url"] = storage_url
    return write_config(root, url, key=sim.api_key, schedule={"interval": "1s", "max_steps": 4,
                                                                "misfire_grace": "5s", "stop_deadline": "5s"},
                        storage=storage, http={"listen": None},
                        policy={"max_instances": 10, "max_total_dph": 40.0},
                        vast={"settle_after": 60.0, "timeout": 5.0})


@dataclass
class FailoverReport:
    kills: int = 0
    takeover_s: list[float] = field(default_factory=list)
    late: list[str] = field(default_factory=list)  # takeovers past failover_seconds (the bench reports them)
    failover_seconds: float = 0.0
    problems: list[str] = field(default_factory=list)
    lost_named: int = 0  # takeovers whose leader.lost names the killed daemon
    kills_after_mutation: int = 0
    audit: dict[str, int] = field(default_factory=dict)
    intents: dict[str, Any] = field(default_factory=dict)
    exit_codes: list[int | None] = field(default_factory=list)

    def figures(self) -> dict[str, Any]:
        t = sorted(self.takeover_s)
        return {"kills": self.kills, "failover_seconds": self.failover_seconds,
                "takeover_p50_s": round(t[len(t) // 2], 3) if t else None,
                "takeover_max_s": round(t[-1], 3) if t else None, "lost_named": self.lost_named,
                "kills_after_mutation": self.kills_after_mutation, "audit": self.audit,
                "duplicate_requests": self.intents.get("duplicate_requests"), "problems": self.problems}


def _kill_active(fleet: Fleet, sim: CountingSim, acquired: Event, rng: random.Random, rep: FailoverReport) -> float:
    """Wait until the active daemon ticks, then SIGKILL it at a random point: half the time right after a
    fleet-changing request reached the simulator, else a random moment into a tick. Returns the kill time."""
    pid = fleet.holder_pid(acquired)
    proc = fleet.procs[pid]
    wait_for(lambda: fleet.events(acquired.seq, ["tick.started"]) or proc.poll() is not None,
             f"daemon {pid} to start a tick")
    if rng.random() < 0.5:
        start = len(sim.requests)
        end = time.monotonic() + 4.0
        while time.monotonic() < end:
            with sim._lock:
                hit = any(mutating(r) for r in sim.requests[start:])
            if hit:
                rep.kills_after_mutation += 1
                time.sleep(rng.uniform(0.0, 0.01))
                break
            time.sleep(0.002)
    else:
        time.sleep(rng.uniform(0.0, 0.6))
    t = time.time()
    proc.send_signal(signal.SIGKILL)
    proc.wait(WAIT_S)
    return t


def run_failover(root: Path, *, kills: int = 20, seed: int = 1, failover: float = 10.0,
                 storage_url: str | None = None) -> FailoverReport:
    """SIGKILL the active daemon ``kills`` times; after each the standby must take over within
    ``failover`` seconds and name the killed one in ``leader.lost``. At the end both daemons stop
    cleanly and the log and the simulator are audited."""
    rng = random.Random(seed)
    rep = FailoverReport(failover_seconds=failover)
    with running_sim(seed) as (sim, server):
        cfg = _config(root, sim, server.url, failover, storage_url)
        sim.pending = 600.0
        fleet = Fleet(root, cfg, storage_url)
        try:
            fleet.start()
            fleet.start()
            acquired = wait_for(lambda: fleet.acquired_after(0), "the first daemon to become active")
            for n in range(kills):
                sim.pending = 0.0 if n % 4 == 3 else 600.0
                sim.advance(rng.choice([60.0, 300.0]))
                killed_pid = fleet.holder_pid(acquired)
                t_kill = _kill_active(fleet, sim, acquired, rng, rep)
                rep.kills += 1
                fleet.start()  # the next standby
                prev = acquired
                acquired = wait_for(lambda p=prev: fleet.acquired_after(p.seq), "a standby to take over")
                took = ts_seconds(acquired.ts) - t_kill
                rep.takeover_s.append(took)
                if took > failover:  # a figure for bench/failover.py, not a test failure (no timed assertions)
                    rep.late.append(f"kill {n + 1}: takeover took {took:.2f}s > {failover:g}s")
                lost = [e for e in fleet.events(prev.seq, ["leader.lost"]) if e.seq < acquired.seq]
                if any(Fleet.holder_pid(e) == killed_pid for e in lost):
                    rep.lost_named += 1
                rep.problems += [f"kill {n + 1}: {p}" for p in check_db(fleet.db, rebuild=False)]
            wait_for(lambda: fleet.events(acquired.seq, ["tick.completed"]), "the last active daemon to tick")
        finally:
            codes = fleet.stop_all()
        rep.exit_codes = [c for pid, c in codes.items() if c != -signal.SIGKILL]
        rep.problems += check_db(fleet.db)
        rep.audit = dict(vars(audit_rentals(sim, fleet.db)))
        rep.intents = audit_intents(sim, fleet.db)
    return rep


@dataclass
class PartitionReport:
    takeover_s: float = 0.0
    old_exit: int | None = None
    old_appended: int = 0
    old_requests: int = 0
    old_logged_lost: bool = False
    # The new active, suspended while the old one runs, may outlast its own lease (failover_seconds / 2 on
    # PostgreSQL) on a loaded machine: then it must exit 3 having appended nothing, and a fresh daemon takes over.
    new_lost_while_suspended: bool = False
    new_exit: int | None = None
    new_appended_after_lost: int = 0
    new_ticked_after: bool = False  # the fleet ticks again after the partition (the new active, or its successor)
    exit_codes: list[int | None] = field(default_factory=list)  # daemons still active at the end
    problems: list[str] = field(default_factory=list)
    audit: dict[str, int] = field(default_factory=dict)
    intents: dict[str, Any] = field(default_factory=dict)
    setup_retries: int = 0  # pairs started again: the first one lost its lease before the partition
    # SQLite: the old active was suspended holding the log's write lock (mid-append), so the standby, having
    # taken the fleet, waits for that lock; the old one is resumed to finish the append it began as leader,
    # and must then stop with no further append and no request.
    mid_append: bool = False
    # SQLite: SIGSTOPs that fell while the active held the lease file's lock (inside a COMMIT or a request's
    # write): no takeover until it resumes, by design; it was resumed and stopped again at another moment.
    stopped_holding_lease: int = 0
    void_pids: list[int] = field(default_factory=list)  # those pairs' daemons


def _active_and_standby(fleet: Fleet, rep: PartitionReport) -> tuple[subprocess.Popen[bytes],
                                                                      subprocess.Popen[bytes], Event]:
    """The first daemon active and ticking, the second waiting as its standby. On a host loaded past what
    failover_seconds allows, the first one's lease can run out before the partition (its heartbeat starved
    of CPU: it rightly exits 3 and the second becomes active); then both stop and a new pair starts."""
    for _ in range(3):
        last = fleet.acquired_after(0)
        since = last.seq if last is not None else 0
        old = fleet.start(standby=False)
        first = wait_for(lambda s=since: fleet.acquired_after(s), "the first daemon to become active")
        new = fleet.start()
        wait_for(lambda: "daemon.standby" in fleet.stderr(new.pid) or old.poll() is not None,
                 "the second daemon to wait as a standby")
        if old.poll() is None:
            wait_for(lambda: fleet.events(first.seq, ["tick.started"]) or old.poll() is not None,
                     "the active daemon to tick")
        if old.poll() is None and fleet.acquired_after(first.seq) is None:
            return old, new, first
        rep.setup_retries += 1
        rep.void_pids += [old.pid, new.pid]
        for p in (old, new):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in (old, new):
            p.wait(WAIT_S)
    raise AssertionError("the first daemon lost its lease before the partition three times: the host is too "
                         "loaded for this failover_seconds")


def _ticks_after_partition(fleet: Fleet, new: subprocess.Popen[bytes], mark: int, rep: PartitionReport) -> bool:
    """After SIGCONT: the new active ticks again, or (its lease ran out while it was suspended) it exits 3
    having appended nothing and a fresh daemon takes over and ticks."""
    wait_for(lambda: fleet.events(mark, ["tick.completed"]) or new.poll() is not None,
             "the new active daemon to tick again or to exit")
    if new.poll() is None or fleet.events(mark, ["tick.completed"]):
        return True
    rep.new_lost_while_suspended = True
    rep.new_exit = new.wait(WAIT_S)
    rep.new_appended_after_lost = len(fleet.events(mark))
    for _ in range(3):  # on a loaded host a fresh daemon's own lease may run out too (it exits 3): another
        fresh = fleet.start(standby=False)
        wait_for(lambda f=fresh: fleet.events(mark, ["tick.completed"]) or f.poll() is not None,
                 "a fresh daemon to tick")
        if fleet.events(mark, ["tick.completed"]):
            return True
        if fresh.returncode == 3:
            rep.void_pids.append(fresh.pid)
    return False


def run_partition(root: Path, *, seed: int = 2, failover: float = 3.0,
                  storage_url: str | None = None) -> PartitionReport:
    """SIGSTOP the active daemon mid-tick, let the standby take over (past ``failover``), SIGSTOP the new
    active too so nothing else moves, SIGCONT the old one: it must exit 3 having appended nothing and
    sent nothing. Then the new active resumes, ticks, and both are audited."""
    rng = random.Random(seed)
    rep = PartitionReport()
    with running_sim(seed) as (sim, server):
        cfg = _config(root, sim, server.url, failover, storage_url)
        sim.pending = 600.0
        fleet = Fleet(root, cfg, storage_url)
        try:
            old, new, first = _active_and_standby(fleet, rep)
            for _ in range(3):
                time.sleep(rng.uniform(0.0, 0.5))
                t_stop = time.time()
                busy = fleet.stderr(new.pid).count('"leader.lease_busy"')
                old.send_signal(signal.SIGSTOP)
                wait_for(lambda: suspended(old.pid), "the active daemon to stop")
                took = wait_for(lambda b=busy: fleet.acquired_after(first.seq) or (
                    storage_url is None and "daemon.waiting_for_writer" in fleet.stderr(new.pid)) or (
                    fleet.stderr(new.pid).count('"leader.lease_busy"') > b and "lease busy"),
                    "the standby to take over")
                if took != "lease busy":
                    break
                # SQLite: stopped inside a COMMIT or a request's write, holding the lease file's lock, which
                # no standby can take: by design the fleet stays the old active's until it resumes, and then
                # it goes on as the active. Not a partition: resume it and stop it at another moment.
                rep.stopped_holding_lease += 1
                mark = len(fleet.events())
                old.send_signal(signal.SIGCONT)
                wait_for(lambda m=mark: fleet.events(m, ["tick.completed"]) or old.poll() is not None,
                         "the resumed active to tick on")
                assert old.poll() is None and fleet.acquired_after(first.seq) is None, \
                    "resumed from inside its lease's lock, the active lost the fleet"
            else:
                raise AssertionError("the active was stopped holding its lease's lock three times running")
            if took is True:  # the old active holds the write lock and the new one waits for it
                rep.mid_append = True
                # The new active is suspended too while the old one resumes, so whatever is appended or sent
                # meanwhile is the old one's (left running, its own start-up appends and requests, made the
                # moment the lock comes free, would be counted as the old daemon's).
                new.send_signal(signal.SIGSTOP)
                wait_for(lambda: suspended(new.pid), "the new active daemon to stop")
                requests = settled(sim.requests)
                head = len(fleet.events())
                old.send_signal(signal.SIGCONT)
                rep.old_exit = old.wait(WAIT_S)
                rep.old_appended = len(fleet.events()) - head
                rep.old_requests = len(sim.requests) - requests
                new.send_signal(signal.SIGCONT)
                rep.old_logged_lost = '"leader.lost"' in fleet.stderr(old.pid)
                took = wait_for(lambda: fleet.acquired_after(first.seq), "the standby to take over")
                rep.takeover_s = ts_seconds(took.ts) - t_stop
                rep.new_ticked_after = bool(wait_for(lambda: fleet.events(took.seq, ["tick.completed"]),
                                                     "the new active daemon to tick"))
            else:
                rep.takeover_s = ts_seconds(took.ts) - t_stop
                wait_for(lambda: fleet.events(took.seq, ["tick.completed"]), "the new active daemon to tick")
                new.send_signal(signal.SIGSTOP)
                wait_for(lambda: suspended(new.pid), "the new active daemon to stop")
                requests = settled(sim.requests)
                head = len(fleet.events())
                old.send_signal(signal.SIGCONT)
                rep.old_exit = old.wait(WAIT_S)
                rep.old_appended = len(fleet.events()) - head
                rep.old_requests = len(sim.requests) - requests
                new.send_signal(signal.SIGCONT)  # at once: the longer it stays suspended, the likelier it loses its lease
                rep.old_logged_lost = '"leader.lost"' in fleet.stderr(old.pid)
                mark = head + rep.old_appended
                rep.new_ticked_after = _ticks_after_partition(fleet, new, mark, rep)
        finally:
            codes = fleet.stop_all()
        rep.exit_codes = [c for pid, c in codes.items() if pid != old.pid and pid not in rep.void_pids and not (
            pid == new.pid and rep.new_lost_while_suspended)]
        rep.problems += check_db(fleet.db)
        rep.audit = dict(vars(audit_rentals(sim, fleet.db)))
        rep.intents = audit_intents(sim, fleet.db)
    return rep
