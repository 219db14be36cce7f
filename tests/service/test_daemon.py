"""The daemon: real processes, real signals, the simulator and a fake model on 127.0.0.1."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from agent import config
from agent.errors import ConfigError
from agent.service.daemon import changed_keys, make_trigger, run_daemon
from agent.sim import SimServer, Simulator
from agent.store.log import EventLog
from tests.cli.test_cli_feedback import fleet_agent
from tests.conftest import init_database
from tests.fakes.openai_server import FakeOpenAI, hang, reply

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 60.0  # a daemon starting and ticking on a loaded machine (a PostgreSQL one took over 20 s); only a failure waits this long


# ------------------------------------------------------------------ helpers


def wait_for(pred: Callable[[], Any], what: str, timeout: float = WAIT_S) -> Any:
    """Poll ``pred`` until it returns something truthy; fail naming ``what`` after ``timeout``."""
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def write_config(root: Path, sim_url: str, *, interval: str = "1s", max_steps: int = 2,
                 model: str = "provider: rules", tick_timeout: str = "30s", stop_deadline: str = "10s") -> Path:
    (root / "knowledge").mkdir(exist_ok=True)
    cfg = root / "config.yaml"
    cfg.write_text(f"""\
agent_id: test-1
data_dir: ./data
knowledge_dir: ./knowledge
logging:
  level: info
  format: json
schedule:
  interval: {interval}
  max_steps: {max_steps}
  misfire_grace: 5s
  tick_timeout: {tick_timeout}
  stop_deadline: {stop_deadline}
vast:
  url: {sim_url}
  timeout: 5s
model:
  {model}
""", encoding="utf-8")
    init_database(cfg)
    return cfg


@pytest.fixture
def sim_server() -> Iterator[SimServer]:
    server = SimServer(Simulator(seed=7)).start()
    try:
        yield server
    finally:
        server.stop()


@dataclass
class Proc:
    popen: subprocess.Popen
    stderr_path: Path
    db: Path
    _log: EventLog | None = field(default=None)

    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    @property
    def log(self) -> EventLog:
        if self._log is None:
            wait_for(lambda: '"daemon.started"' in self.stderr() or self.popen.poll() is not None,
                     "the daemon to start")
            assert self.popen.poll() is None, self.stderr()
            self._log = EventLog(self.db)
        return self._log

    def kinds(self, kind: str, since: int = 0) -> list[Any]:
        return list(self.log.read(since, kinds=[kind]))

    def stop(self) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
        try:
            return self.popen.wait(timeout=WAIT_S)
        finally:
            if self._log is not None:
                self._log.close()


def env_for(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")}
    env.update(VAST_API_KEY="sim-key", PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", **extra)
    return env


def start_daemon(root: Path, cfg: Path, env: dict[str, str] | None = None, name: str = "daemon") -> Proc:
    err = root / f"{name}.stderr"
    p = subprocess.Popen([sys.executable, "-m", "agent.cli", "--config", str(cfg), "run"], cwd=root,
                         env=env or env_for(), stdout=subprocess.DEVNULL, stderr=err.open("w"))
    return Proc(p, err, root / "data" / "fleet-agent.db")


@pytest.fixture
def daemons() -> Iterator[list[Proc]]:
    started: list[Proc] = []
    yield started
    for p in started:
        if p.popen.poll() is None:
            p.popen.kill()
            p.popen.wait(timeout=10)


def ends_for_every_start(lg: EventLog) -> list[int]:
    """Ticks that started and neither completed nor failed."""
    started = {e.tick for e in lg.read(0, kinds=["tick.started"])}
    ended = {e.tick for e in lg.read(0, kinds=["tick.completed", "tick.failed"])}
    return sorted(started - ended)


# ------------------------------------------------------------------ the daemon as a process


@pytest.mark.slow
def test_ticks_run_and_sighup_reloads_or_refuses(tmp_path, sim_server, daemons):
    """The daemon ticks every second against the simulator; SIGHUP with a valid config appends
    config.loaded naming the changed keys; SIGHUP with an invalid one is refused and ticking goes on;
    SIGTERM then exits 0 with daemon.stopped and a verifiable log."""
    cfg = write_config(tmp_path, sim_server.url)
    d = start_daemon(tmp_path, cfg)
    daemons.append(d)
    wait_for(lambda: len(d.kinds("tick.completed")) >= 2, "two completed ticks")
    started = d.kinds("daemon.started")[0].payload
    assert started["pid"] == d.popen.pid and started["config_hash"] and "system.md" in started["prompt_hashes"]

    write_config(tmp_path, sim_server.url, interval="1500ms", max_steps=3)
    d.popen.send_signal(signal.SIGHUP)
    loaded = wait_for(lambda: d.kinds("config.loaded"), "config.loaded")
    assert loaded[0].payload["changed"] == ["schedule.interval", "schedule.max_steps"]
    assert loaded[0].payload["config_hash"] == config.load(str(cfg)).config_hash()

    cfg.write_text("schedule: [not, a, mapping\n", encoding="utf-8")
    d.popen.send_signal(signal.SIGHUP)
    wait_for(lambda: "config.reload_refused" in d.stderr(), "the refusal log line")
    after = d.log.last_seq()
    wait_for(lambda: d.kinds("tick.completed", since=after), "a tick after the refused reload")
    assert len(d.kinds("config.loaded")) == 1

    assert d.stop() == 0
    lg = EventLog(d.db)
    stopped = list(lg.read(0, kinds=["daemon.stopped"]))
    assert [e.payload["reason"] for e in stopped] == ["SIGTERM"]
    assert ends_for_every_start(lg) == []
    assert lg.verify().ok
    lg.close()


@pytest.mark.slow
def test_sigterm_mid_tick_finishes_the_step_and_exits_cleanly(tmp_path, sim_server, daemons):
    """SIGTERM while a model call is in flight: the tick stops after that step (tick.failed
    'stopped', every tool call answered), daemon.stopped is appended, the exit code is 0 and
    `log verify` passes."""
    with FakeOpenAI(default=hang(0.4, then=reply(tool_calls=[("get_balance", {})]))) as fake:
        cfg = write_config(tmp_path, sim_server.url, max_steps=8, interval="1h",
                           model=f"provider: openai\n  base_url: {fake.base_url}\n  name: fake-model")
        d = start_daemon(tmp_path, cfg)
        daemons.append(d)
        wait_for(lambda: d.kinds("model.request"), "the first model request")
        d.popen.send_signal(signal.SIGTERM)
        assert d.popen.wait(timeout=WAIT_S) == 0, d.stderr()
    lg = EventLog(d.db)
    try:
        assert ends_for_every_start(lg) == []
        failed = list(lg.read(0, kinds=["tick.failed"]))
        assert len(failed) == 1 and failed[0].payload["error_kind"] == "stopped"
        assert failed[0].payload["steps"] < 8
        calls = {e.payload["call_id"] for e in lg.read(0, kinds=["tool.called"])}
        results = {e.payload["call_id"] for e in lg.read(0, kinds=["tool.result"])}
        assert calls == results
        last = list(lg.read(0, newest_first=True, limit=1))[0]
        assert last.kind == "daemon.stopped" and last.payload["reason"] == "SIGTERM"
        assert lg.verify().ok
    finally:
        lg.close()
    check = subprocess.run([sys.executable, "-m", "agent.cli", "--config", str(cfg), "log", "verify"],
                           cwd=tmp_path, env=env_for(), capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.slow
def test_notify_socket_and_the_single_writer_lock(tmp_path, sim_server, daemons):
    """Under a (test) service manager the daemon sends READY=1, STATUS= after its tick and WATCHDOG=1
    keep-alives to NOTIFY_SOCKET; a second daemon on the same data directory exits 1 naming the
    running one's pid; on SIGTERM the first sends STOPPING=1 and exits 0."""
    path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(WAIT_S)
    try:
        cfg = write_config(tmp_path, sim_server.url, interval="1h")
        d = start_daemon(tmp_path, cfg, env=env_for(NOTIFY_SOCKET=str(path), WATCHDOG_USEC="200000"))
        daemons.append(d)
        lines: list[bytes] = []

        def until(pred: Callable[[bytes], bool]) -> bytes:
            while True:
                for line in lines:
                    if pred(line):
                        return line
                lines.extend(sock.recv(4096).split(b"\n"))

        until(lambda m: m == b"READY=1")
        until(lambda m: m.startswith(b"STATUS=tick 1 ok: "))
        statuses = [m for m in lines if m.startswith(b"STATUS=")]
        assert statuses[1:3] == [b"STATUS=reconciling with vast.ai before the first tick",
                                 b"STATUS=tick 1 running since " + statuses[2][-9:]], statuses
        assert statuses[3].startswith(b"STATUS=tick 1 ok: ") and b"; next " in statuses[3]
        until(lambda m: m == b"WATCHDOG=1")

        second = subprocess.run([sys.executable, "-m", "agent.cli", "--config", str(cfg), "run"], cwd=tmp_path,
                                env=env_for(), capture_output=True, text=True, timeout=60)
        assert second.returncode == 1
        assert f"pid {d.popen.pid}" in second.stderr and "fleet-agent.runtime.lock" in second.stderr
        assert d.popen.poll() is None

        d.popen.send_signal(signal.SIGTERM)
        until(lambda m: m == b"STOPPING=1")
        assert d.popen.wait(timeout=WAIT_S) == 0
    finally:
        sock.close()


# ------------------------------------------------------------------ in-process, with a stand-in tick


@dataclass
class StandInResult:
    tick: int
    ok: bool
    reason: str | None
    steps: int
    usage: dict[str, int]
    duration_ms: float


def stand_in_tick(app, *, stop=None, crash_on: tuple[int, ...] = (), gate: threading.Event | None = None):
    """A tick-shaped function: tick.started, an optional wait, then tick.completed (or a crash)."""
    n = app.log.store.next_tick_number()
    app.log.append("tick.started", {"observation": {"instances": [], "balance": 1.0}}, "scheduler", n)
    if n in crash_on:
        raise RuntimeError(f"boom in tick {n}")
    if gate is not None:
        gate.wait(WAIT_S)
    app.log.append("tick.completed", {"steps": 1, "usage": {}}, "system", n)
    return StandInResult(n, True, None, 1, {"prompt_tokens": 10, "completion_tokens": 2}, 1.0)


def _in_process(tmp_path: Path, sim_url: str, tick_fn: Callable[..., Any], until: Callable[[EventLog], bool],
                env: dict[str, str] | None = None, **cfg_kw: str) -> int:
    """Run run_daemon in this (main) thread; a helper thread sends SIGTERM once ``until(log)`` holds."""
    cfg = write_config(tmp_path, sim_url, **cfg_kw)
    settings = config.load(str(cfg))
    db = tmp_path / "data" / "fleet-agent.db"
    problems: list[BaseException] = []

    def stopper() -> None:
        try:
            wait_for(db.exists, "the database")
            with EventLog(db) as lg:
                wait_for(lambda: until(lg), "the in-process condition")
        except BaseException as e:
            problems.append(e)
        os.kill(os.getpid(), signal.SIGTERM)

    t = threading.Thread(target=stopper, daemon=True)
    t.start()
    code = run_daemon(settings, config_path=str(cfg), tick_fn=tick_fn, env=env or {"VAST_API_KEY": "sim-key"})
    t.join(timeout=WAIT_S)
    if problems:
        raise problems[0]
    return code


def test_a_crashing_tick_does_not_stop_the_schedule(tmp_path, sim_server):
    """A tick function that raises is logged (EVENT_JOB_ERROR), closed in the log with tick.failed,
    and the next tick still runs."""

    def tick(app, *, stop=None):
        return stand_in_tick(app, stop=stop, crash_on=(1,))

    def two_ticks(lg: EventLog) -> bool:
        return any(e.tick == 2 for e in lg.read(0, kinds=["tick.completed"]))

    with capture_logs() as logs:
        code = _in_process(tmp_path, sim_server.url, tick, two_ticks)
    assert code == 0
    with EventLog(tmp_path / "data" / "fleet-agent.db") as lg:
        failed = list(lg.read(0, kinds=["tick.failed"]))
        assert [(e.tick, e.payload["error_kind"]) for e in failed] == [(1, "crash")]
        assert "boom in tick 1" in failed[0].payload["reason"]
        assert ends_for_every_start(lg) == []
    assert any(x["event"] == "tick.crashed" for x in logs)
    with EventLog(tmp_path / "data" / "fleet-agent.db") as lg:
        assert [e.tick for e in lg.read(0, kinds=["tick.completed"])][:1] == [2]


def test_watchdog_is_withheld_while_a_tick_overruns(tmp_path, sim_server):
    """When a tick runs past tick_timeout + stop_deadline the keep-alive stops (logged), and it
    resumes once the tick ends."""
    gate = threading.Event()
    sock_path = tmp_path / "n.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(sock_path))

    def tick(app, *, stop=None):
        return stand_in_tick(app, stop=stop, gate=gate)

    def overrun_then_release(_lg: EventLog) -> bool:
        try:
            wait_for(lambda: any(x["event"] == "watchdog.withheld" for x in logs), "watchdog.withheld")
        finally:
            gate.set()
        wait_for(lambda: any(x["event"] == "watchdog.resumed" for x in logs), "watchdog.resumed")
        return True

    try:
        with capture_logs() as logs:
            code = _in_process(tmp_path, sim_server.url, tick, overrun_then_release,
                               env={"VAST_API_KEY": "sim-key", "NOTIFY_SOCKET": str(sock_path),
                                    "WATCHDOG_USEC": "100000"},
                               interval="1h", tick_timeout="0.1s", stop_deadline="0.1s")
        assert code == 0
        withheld = next(x for x in logs if x["event"] == "watchdog.withheld")
        assert "tick_timeout" in withheld["reason"]
        assert sock.recv(4096) == b"READY=1\nSTATUS=running; every 3600s; first tick now"
    finally:
        sock.close()


def test_a_bad_cron_is_refused_before_the_daemon_starts(tmp_path):
    """Settings built in code with an impossible cron expression are refused with a ConfigError naming
    schedule.cron before the daemon logs or appends anything: no daemon.started, no lock file."""
    cfg = write_config(tmp_path, "http://127.0.0.1:9")
    settings = config.load(str(cfg))
    bad = dataclasses.replace(settings, schedule=dataclasses.replace(settings.schedule, cron="99 * * * *"))
    with capture_logs() as logs, pytest.raises(ConfigError, match=r"schedule\.cron: '99 \* \* \* \*'"):
        run_daemon(bad, config_path=str(cfg), tick_fn=stand_in_tick, env={"VAST_API_KEY": "sim-key"})
    assert [x["event"] for x in logs if x["event"].startswith("daemon.")] == []
    with EventLog(tmp_path / "data" / "fleet-agent.db", readonly=True) as lg:
        assert lg.count() == 0
    assert not (tmp_path / "data" / "fleet-agent.runtime.lock").exists()


# ------------------------------------------------------------------ pure parts


def test_changed_keys_names_dotted_settings():
    """changed_keys lists exactly the dotted keys whose values differ, nested dicts included."""
    a = config.parse("schedule: {interval: 5m}\n")
    b = config.parse("schedule: {interval: 10m}\nfleet: {env: {A: '1'}}\npolicy: {allowed_gpus: [L40S]}\n")
    assert changed_keys(a, b) == ["fleet.env.A", "policy.allowed_gpus", "schedule.interval"]
    assert changed_keys(a, a) == []


def test_triggers_follow_interval_or_cron():
    """The interval trigger carries interval and jitter; a cron expression becomes a UTC cron trigger."""
    s = config.parse("schedule: {interval: 90s, jitter: 5s}\n").schedule
    t = make_trigger(s)
    assert t.interval.total_seconds() == 90 and t.jitter == 5
    c = make_trigger(config.parse("schedule: {cron: '*/5 * * * *'}\n").schedule)
    assert str(c.timezone) == "UTC" and "minute='*/5'" in str(c)


# ------------------------------------------------------------------ systemd notifications


class NotifyListener:
    """A datagram socket standing in for systemd's NOTIFY_SOCKET; keeps every message in order."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(WAIT_S)
        self.messages: list[bytes] = []
        self._seen = 0

    def next_matching(self, pred: Callable[[bytes], bool]) -> bytes:
        """The next message (after the last one returned) for which ``pred`` holds."""
        while True:
            while self._seen < len(self.messages):
                m = self.messages[self._seen]
                self._seen += 1
                if pred(m):
                    return m
            self.messages.append(self.sock.recv(4096))

    def drain(self) -> list[bytes]:
        """Every message already queued (sends are synchronous, so after the sender is done: all)."""
        self.sock.setblocking(False)
        try:
            while True:
                self.messages.append(self.sock.recv(4096))
        except BlockingIOError:
            return self.messages

    def close(self) -> None:
        self.sock.close()


def _fields(message: bytes) -> dict[str, str]:
    return dict(line.split("=", 1) for line in message.decode().split("\n"))


@pytest.mark.slow
def test_ready_comes_before_a_hanging_start_up_reconcile(tmp_path, daemons):
    """With vast.ai accepting connections and never answering, the daemon still sends READY=1 (then
    STATUS= 'reconciling') while the start-up reconcile waits, so systemd's start timeout cannot hit;
    SIGTERM during that reconcile is honoured within stop_deadline (exit 0, daemon.stopped naming the
    reconcile), and nothing is sent after STOPPING=1."""
    hanging = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    hanging.bind(("127.0.0.1", 0))
    hanging.listen(16)  # the kernel accepts; nobody ever answers
    notify = NotifyListener(tmp_path / "notify.sock")
    try:
        cfg = write_config(tmp_path, f"http://127.0.0.1:{hanging.getsockname()[1]}", interval="1h",
                           stop_deadline="1s")
        cfg.write_text(cfg.read_text().replace("timeout: 5s", "timeout: 600s"), encoding="utf-8")
        d = start_daemon(tmp_path, cfg, env=env_for(NOTIFY_SOCKET=str(notify.path), WATCHDOG_USEC="200000"))
        daemons.append(d)
        ready = notify.next_matching(lambda m: b"READY=1" in m.split(b"\n"))
        assert _fields(ready)["STATUS"].startswith("running; every 3600s")
        notify.next_matching(lambda m: m == b"STATUS=reconciling with vast.ai before the first tick")
        assert "reconcile.deferred" not in d.stderr() and "daemon.reconcile_failed" not in d.stderr()
        assert d.kinds("tick.started") == []

        d.popen.send_signal(signal.SIGTERM)
        assert d.popen.wait(timeout=WAIT_S) == 0, d.stderr()
        messages = notify.drain()
    finally:
        notify.close()
        hanging.close()
    stopping = [i for i, m in enumerate(messages) if b"STOPPING=1" in m.split(b"\n")]
    assert stopping == [len(messages) - 1], messages
    with EventLog(d.db) as lg:
        stopped = [e.payload["reason"] for e in lg.read(0, kinds=["daemon.stopped"])]
    assert stopped == ["SIGTERM; the start-up reconcile still running after the 1s stop deadline"]


def test_status_during_ticks_and_reloads_and_silence_after_stopping(tmp_path, sim_server):
    """STATUS= says 'tick N running' while a tick runs and shows its outcome with the next run time after;
    the daemon records its effective config at start (config.applied); a reload that changes the schedule
    re-announces READY=1 with the new next run time and appends config.changed with old -> new; 'config
    diff' then shows a file edited since against the config in force (exit 1); a refused reload
    appends config.refused (the error names the file) and keeps 'reload refused' in STATUS=; once
    STOPPING=1 is sent no WATCHDOG=1 or STATUS= follows, however busy the keep-alive thread is."""
    gate = threading.Event()
    notify = NotifyListener(tmp_path / "n.sock")
    cfg_path = tmp_path / "config.yaml"

    def tick(app, *, stop=None):
        return stand_in_tick(app, stop=stop, gate=gate if app.log.store.next_tick_number() == 1 else None)

    def script(lg: EventLog) -> bool:
        running = notify.next_matching(lambda m: m.startswith(b"STATUS=tick 1 running since "))
        assert re.fullmatch(rb"STATUS=tick 1 running since \d\d:\d\d:\d\dZ", running)
        gate.set()
        done = notify.next_matching(lambda m: m.startswith(b"STATUS=tick 1 ok: "))
        old_next = _fields(done)["STATUS"].rsplit("; next ", 1)[1]

        write_config(tmp_path, sim_server.url, interval="2h")
        os.kill(os.getpid(), signal.SIGHUP)
        notify.next_matching(lambda m: m.startswith(b"RELOADING=1\n"))
        reloaded = _fields(notify.next_matching(lambda m: m.startswith(b"READY=1\n")))["STATUS"]
        assert reloaded.startswith("tick 1 ok: ") and "refused" not in reloaded
        new_next = reloaded.rsplit("; next ", 1)[1]
        assert re.fullmatch(r"\d\d:\d\d:\d\dZ", new_next) and new_next != old_next
        applied = wait_for(lambda: list(lg.read(0, kinds=["config.applied"])), "config.applied")
        assert applied[0].payload["settings"]["schedule.interval"] == 3600.0
        changed = wait_for(lambda: list(lg.read(0, kinds=["config.changed"])), "config.changed")
        assert changed[0].payload["changes"] == [{"key": "schedule.interval", "old": 3600.0, "new": 7200.0}]

        write_config(tmp_path, sim_server.url, interval="3h")  # on disk, not yet in force
        diff = fleet_agent(cfg_path, "config", "diff", "--json")
        assert diff.returncode == 1, diff.stderr
        assert json.loads(diff.stdout)["differences"] == [
            {"key": "schedule.interval", "in_force": 7200.0, "file": 10800.0}]

        cfg_path.write_text("schedule: [not, a, mapping\n", encoding="utf-8")
        os.kill(os.getpid(), signal.SIGHUP)
        refused = _fields(notify.next_matching(lambda m: m.startswith(b"READY=1\n")))["STATUS"]
        assert refused.startswith("tick 1 ok: ") and "; reload refused at " in refused
        assert str(cfg_path) in refused
        events = wait_for(lambda: list(lg.read(0, kinds=["config.refused"])), "config.refused")
        assert str(cfg_path) in events[0].payload["error"] and events[0].payload["path"] == str(cfg_path)
        return True

    try:
        with capture_logs():
            code = _in_process(tmp_path, sim_server.url, tick, script,
                               env={"VAST_API_KEY": "sim-key", "NOTIFY_SOCKET": str(notify.path),
                                    "WATCHDOG_USEC": "40000"}, interval="1h")
        assert code == 0
        messages = notify.drain()
    finally:
        notify.close()
    stopping = [i for i, m in enumerate(messages) if b"STOPPING=1" in m.split(b"\n")]
    assert stopping == [len(messages) - 1], messages[-5:]
    assert messages.count(b"WATCHDOG=1") > 0


def _catches_sigterm(pid: int) -> bool:
    """Whether the process has a handler for SIGTERM (its SigCgt mask in /proc)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        mask = next(int(line.split()[1], 16) for line in f if line.startswith("SigCgt:"))
    return bool(mask & (1 << (signal.SIGTERM - 1)))


@pytest.mark.parametrize("delay", [0.0, 0.05, 0.15, 0.3, 0.5, 0.8, 1.1])
def test_sigterm_at_any_moment_of_start_up_is_a_clean_stop(tmp_path, sim_server, delay):
    """SIGTERM at any moment of ``fleet-agent run``'s start-up, from its first Python statement (the
    interpreter's own start, some 50 ms, cannot be helped) through reading the config, opening and verifying
    the log, to well after the daemon's own handlers exist: exit 0, never death by the signal, and the log
    (if it got that far) verifies."""
    cfg = write_config(tmp_path, sim_server.url, interval="1h")
    p = subprocess.Popen([sys.executable, "-c", "from agent.start import entry; entry()", "--config", str(cfg),
                          "run"], cwd=tmp_path, env=env_for(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_for(lambda: p.poll() is not None or _catches_sigterm(p.pid), "the console script's first statement")
    time.sleep(delay)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=WAIT_S)
    assert p.returncode == 0, err.decode(errors="replace")[-2000:]
    with EventLog(tmp_path / "data" / "fleet-agent.db", readonly=True) as lg:
        assert lg.verify().ok


def test_an_early_sigterm_ends_other_commands_with_143():
    """Any other command stopped before it finished says so: 128 + SIGTERM. The command word is found past
    the top-level options."""
    from agent.start import command

    code = ("import os, signal, sys, time; from agent.start import install; install(); "
            "os.kill(os.getpid(), signal.SIGTERM); time.sleep(5)")
    for argv, want in ((["--config", "c.yaml", "say", "hi"], 143), (["--config", "c.yaml", "run"], 0)):
        r = subprocess.run([sys.executable, "-c", code, *argv], env=env_for(), capture_output=True, timeout=30)
        assert r.returncode == want, (argv, r.stderr)
    assert command(["--config", "run", "status"]) == "status" and command(["-h"]) is None


def test_an_early_sigterm_wrapped_by_an_import_is_still_a_stop():
    """A SIGTERM that lands while a module is imported, inside a class attribute's ``__set_name__`` (pydantic
    has such attributes), reaches the command wrapped in a RuntimeError on Python 3.11: still a stop, exit 0 for
    ``run`` and 143 for any other command, not a traceback and 1."""
    code = ("import os, signal, sys, time\n"
            "from agent.start import guarded, install\n"
            "install()\n"
            "class Slot:\n"
            "    def __set_name__(self, owner, name):\n"
            "        os.kill(os.getpid(), signal.SIGTERM)\n"
            "        time.sleep(5)\n"
            "def command():\n"
            "    class Model:\n"
            "        data = Slot()\n"
            "    return 3\n"
            "sys.exit(guarded(command))\n")
    for argv, want in ((["--config", "c.yaml", "say", "hi"], 143), (["--config", "c.yaml", "run"], 0)):
        r = subprocess.run([sys.executable, "-c", code, *argv], env=env_for(), capture_output=True, timeout=30)
        assert r.returncode == want, (argv, r.stderr)
        assert b"Traceback" not in r.stderr
