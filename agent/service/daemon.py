"""The daemon: ticks on a schedule (APScheduler), under systemd or in a terminal.

    run_daemon(settings, config_path=...)   start, tick until SIGTERM/SIGINT, return the exit code

One job on a ``BackgroundScheduler`` (one worker thread, ``max_instances=1``,
``coalesce=True``): an interval (with jitter) or a cron expression, the first
tick right after start. The main thread only waits for signals; signal handlers
set flags and wake it through a pipe, so a tick running in the worker thread is
never interrupted mid-write.

- SIGTERM / SIGINT: no new tick starts; the running tick is asked to stop after
  its current model step (the ``stop`` event) and given ``stop_deadline``;
  ``daemon.stopped`` is appended; exit 0.
- SIGHUP: the config file and prompt files are read again. An invalid new
  config is refused (one error log line) and the old one kept; a valid one
  replaces the settings from the next tick on, reschedules when the schedule
  changed, and appends ``config.loaded`` with the dotted keys that differ.
  The files are read on a worker thread within ``RELOAD_LIMIT_S``; a SIGTERM
  during a reload abandons it, so stopping never waits on a slow read.
- systemd: ``READY=1`` once the log is open and the schedule set, before the
  start-up reconcile with vast.ai (it runs in the worker thread ahead of the
  first tick, so a hanging vast.ai neither exceeds the start timeout nor delays
  SIGTERM); ``STATUS=`` while reconciling, "tick N running" during a tick, the
  outcome and next run time after it; ``WATCHDOG=1`` from a thread while healthy
  (withheld when the scheduler thread died or a tick overran ``tick_timeout +
  stop_deadline``, so systemd restarts the service); ``RELOADING=1``/``READY=1``
  around a reload (the status then shows the new next run time, or that the
  reload was refused); ``STOPPING=1``, after which nothing more is sent.
- A refused reload is appended as ``config.refused`` and stays in ``STATUS=``
  until a reload succeeds.

The daemon holds the fleet's leadership lock (agent.runtime.leader) for its whole
life and appends its own events through a connection of its own, so they never
share a transaction with the tick's. Another daemon for the same fleet is
refused, unless started with ``standby``: it then waits (polling the lock every
``STANDBY_POLL_S``; SIGTERM/SIGINT end the wait, exit 0) and takes over when the
active one dies, hangs or stops: ``leader.lost`` (when the old one did not stop
cleanly) and ``leader.acquired``, then the usual start, whose first job is the
reconcile with vast.ai, as after any crash.

Fencing: every append (the tick's and the daemon's own) checks the lock just
before it commits, and every side-effecting vast.ai call checks it after its
intent is logged. A daemon that finds it lost the lock (it was suspended or cut
off past ``storage.failover_seconds``) appends nothing more, sends nothing more,
logs ``leader.lost`` and exits with ``EXIT_LOST`` (3); systemd restarts it, and
it comes back as a standby when started with ``--standby``.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from types import FrameType
from typing import Any, Protocol

from apscheduler.events import (
    EVENT_JOB_ERROR,
    EVENT_JOB_MAX_INSTANCES,
    EVENT_JOB_MISSED,
    JobExecutionEvent,
)
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.interval import IntervalTrigger

from agent import __version__, config, logsetup
from agent.config import Settings
from agent.context.prompts import Prompts, load_prompts
from agent.errors import ChainBroken, ConfigError, FleetAgentError, LockError, LogError
from agent.runtime.app import App
from agent.runtime.leader import FileLeader, LeadershipLost, PgLeader, leader_for
from agent.runtime.tick import reconcile_at_start, run_tick
from agent.secrets import scrub
from agent.service.sdnotify import SystemdNotifier
from agent.store.db import check_database_file
from agent.store.log import EventLog
from agent.store.pglock import bound_idle_transactions, identity
from agent.store.writelock import wait_for_write_lock

log = logsetup.get_logger(__name__)

JOB_ID = "tick"
MAIN_LOOP_WAKE_S = 0.5
# A reload reads the config and prompt files for at most this long before it is refused.
RELOAD_LIMIT_S = 10.0
# A standby tries the fleet's lock this often.
STANDBY_POLL_S = 0.25
# The exit code of a daemon that lost the fleet's lock to another one.
EXIT_LOST = LeadershipLost.exit_code
SIGNAL_NAMES: dict[int, str] = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "SIGINT", signal.SIGHUP: "SIGHUP"}

SignalHandler = Callable[[int, FrameType | None], Any] | int | None


# How often the daemon moves old months into segments (storage.archive_after).
ARCHIVE_EVERY = 86400.0


class TickReport(Protocol):
    """What the daemon reads from a tick's result (``agent.runtime.tick.TickResult`` carries it)."""

    @property
    def tick(self) -> int: ...
    @property
    def ok(self) -> bool: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def steps(self) -> int: ...
    @property
    def usage(self) -> Mapping[str, int]: ...
    @property
    def duration_ms(self) -> float: ...


class TickFn(Protocol):
    """One tick: ``agent.runtime.tick.run_tick``, or a stand-in with its shape."""

    def __call__(self, app: App, *, stop: threading.Event) -> TickReport: ...


ReconcileFn = Callable[[App], None]


# ------------------------------------------------------------------ pure helpers


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested settings as ``{"schedule.interval": 300.0, ...}`` (lists are leaves, empty mappings vanish)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def changed_keys(old: Settings, new: Settings) -> list[str]:
    """The dotted setting keys whose values differ between ``old`` and ``new``, sorted."""
    a, b = flatten(old.to_dict()), flatten(new.to_dict())
    return sorted(k for k in a.keys() | b.keys() if a.get(k, _MISSING) != b.get(k, _MISSING))


_MISSING = object()


def config_changes(old: Settings, new: Settings) -> list[dict[str, Any]]:
    """``{key, old, new}`` for each dotted setting that differs, sorted by key (absent = null)."""
    a, b = flatten(old.to_dict()), flatten(new.to_dict())
    return [{"key": k, "old": a.get(k), "new": b.get(k)} for k in changed_keys(old, new)]


def effective(settings: Settings) -> dict[str, Any]:
    """Every setting as dotted key -> JSON value: what is in force (the config holds no secrets)."""
    out: dict[str, Any] = json.loads(json.dumps(flatten(settings.to_dict()), default=str))
    return out


def make_trigger(schedule: config.ScheduleSettings) -> BaseTrigger:
    """The APScheduler trigger for ``schedule``: cron when set, else the interval (UTC).

    A loaded config has had its cron expression read by the same parser; settings
    built in code get the same ConfigError here.
    """
    jitter = float(schedule.jitter) or None
    if schedule.cron:
        try:
            trigger = config.cron_trigger(schedule.cron)
        except ValueError as e:
            raise ConfigError(f"schedule.cron: {schedule.cron!r} is not a valid cron expression: {e}") from None
        trigger.jitter = jitter
        return trigger
    return IntervalTrigger(seconds=float(schedule.interval), jitter=jitter, timezone=config.SCHEDULE_TIMEZONE)


def schedule_text(schedule: config.ScheduleSettings) -> str:
    if schedule.cron:
        return f"cron '{schedule.cron}' UTC"
    return f"every {float(schedule.interval):g}s"


def _usage_tokens(usage: Mapping[str, int] | None) -> tuple[int, int]:
    """(total tokens, cached tokens) from a tick's usage dict."""
    u = usage or {}
    total = u.get("total_tokens")
    if not isinstance(total, int):
        total = int(u.get("prompt_tokens") or 0) + int(u.get("completion_tokens") or 0)
    return total, int(u.get("cached_tokens") or 0)



# ------------------------------------------------------------------ the daemon


class Daemon:
    """One daemon process: the lock, the schedule, the signals, the notifications."""

    def __init__(self, settings: Settings, *, config_path: str | None, tick_fn: TickFn,
                 reconcile_fn: ReconcileFn | None = None, env: Mapping[str, str] | None = None,
                 notifier: SystemdNotifier | None = None, standby: bool = False,
                 leader: FileLeader | PgLeader | None = None) -> None:
        self.settings = settings
        self.standby = standby
        self.config_path = config_path or settings.source_path
        self.tick_fn = tick_fn
        self.reconcile_fn = reconcile_fn
        self.env = env
        self.notifier = notifier or SystemdNotifier.from_env(env)
        self.stop_event = threading.Event()  # passed to the tick: stop after the current step
        self.app: App | None = None
        self._archived_at: float | None = None  # monotonic time of the last daily archive run
        self.events: EventLog | None = None  # the daemon's own connection
        self.scheduler: BackgroundScheduler | None = None
        self.leader = leader if leader is not None else leader_for(settings, env)
        self._lost: str | None = None  # why the leadership lock was lost mid-run
        self._prompt_hashes: dict[str, str] = {}
        self._state = threading.Lock()
        self._idle = threading.Event()
        self._idle.set()
        self._tick_started: float | None = None
        self._pending: tuple[Settings, Prompts] | None = None  # settings and prompts for the next tick
        self._signals: list[int] = []
        self._wake_r, self._wake_w = -1, -1
        self._watchdog_stop = threading.Event()
        self._withheld: str | None = None
        self._reconciled = reconcile_fn is None  # the start-up reconcile ran (or there is none)
        self._activity: str | None = None  # what the worker does now ("tick 4 running since ...")
        self._web: Any = None  # the HTTP endpoint (agent.web.WebServer), when http.listen is set
        self._summary: str | None = None  # the last tick's outcome, for STATUS=
        self._reload_problem: str | None = None  # why the last reload was refused, until one succeeds
        self._broken: str | None = None  # why the log was refused mid-run

    # -------------------------------------------------------------- lifecycle

    def run(self) -> int:
        s = self.settings
        # Everything that can refuse the settings runs before daemon.started is appended.
        s.vast_api_key(self.env)  # fail fast (exit 2) when the key cannot be found
        prompts = _load_prompts(s)
        trigger = make_trigger(s.schedule)
        if not s.storage.is_pg:
            check_database_file(s.db_path)  # only init creates one; refuse before the lock file is made
        old_handlers: dict[int, SignalHandler] = {}
        try:
            waited = 0.0
            if self.standby:
                old_handlers = self._install_signals()
                got = self._wait_for_leadership()
                if got is None:
                    log.info("daemon.standby_stopped", reason="a stop signal arrived while waiting as a standby")
                    return 0
                waited = got
            elif not self.leader.try_acquire():
                if self.leader.unreachable:  # no holder is known: the store itself could not be asked
                    raise LogError(self.leader.unreachable)
                raise LockError(self._refusal())
            self.leader.start_heartbeat(self._on_leadership_lost)
            if not s.storage.is_pg and not self._wait_for_writer(s):
                log.info("daemon.standby_stopped", reason="a stop signal arrived while waiting for the log's "
                         "previous writer")
                return 0
            self.app = self._make_app(s, prompts)
            self.events = EventLog(s.log_target(self.env), encoding=s.context.encoding, encoding_file=s.context.encoding_file,
                                   encoding_sha256=s.context.encoding_sha256, create=False)
            self.events.fence = self.leader.check
            self.events.commit_guard = self.leader.hold
            bound_idle_transactions(self.events, float(s.storage.failover_seconds) / 2)
            verified = self.events.check_before_append()  # ChainBroken (exit 1) before the first append
            log.info("log.verified", since_seq=verified.since, checked=verified.checked,
                     head=f"{verified.head_seq}:{verified.head_hash}")
            for w in verified.warnings:
                log.warning("log.verify_warning", warning=w)
            self._prompt_hashes = dict(prompts.hashes)
            self._append_leadership(waited)
            self.events.append("daemon.started", {
                "version": __version__, "config_hash": s.config_hash(), "prompt_hashes": self._prompt_hashes,
                "pid": os.getpid()}, "system")
            self.events.append("config.applied", {"config_hash": s.config_hash(), "settings": effective(s),
                                                  "path": str(self.config_path) if self.config_path else None},
                               "system")
            log.info("daemon.started", version=__version__, pid=os.getpid(), config=self.config_path,
                     data_dir=str(s.data_path), schedule=schedule_text(s.schedule),
                     config_hash=s.config_hash()[:12])
            log.info("config.effective", settings=effective(s))
            self._web = self._start_web(s, prompts)
            if not old_handlers:
                old_handlers = self._install_signals()
            # Ready before the worker starts: its start-up reconcile may wait on vast.ai for long.
            self.notifier.ready(f"running; {schedule_text(s.schedule)}; first tick now")
            watchdog = self._start_watchdog()
            self.scheduler = self._start_scheduler(trigger)
            try:
                code, reason = self._main_loop()
                code, reason = self._shutdown(code, reason)
            finally:
                self._watchdog_stop.set()
                if watchdog is not None:
                    watchdog.join(timeout=5)
            self._append_stopped(reason)
            log.info("daemon.stopped", reason=reason, exit_code=code)
            return code
        finally:
            if self._web is not None:
                self._web.stop()
            self._restore_signals(old_handlers)
            if self.events is not None:
                self.events.close()
            if self._idle.is_set() and self.app is not None:
                self.app.close()
            self.leader.release()

    # -------------------------------------------------------------- leadership

    def _refusal(self) -> str:
        lock = self.leader
        where = f"the lock on the fleet '{self.settings.agent_id}' on PostgreSQL" if isinstance(lock, PgLeader) \
            else str(lock.flock.path)
        return (f"another fleet-agent holds {where} ({lock.holder()}); stop it first, start this one with "
                "--standby to take over when it stops, or use a different data_dir")

    def _wait_for_leadership(self) -> float | None:
        """As a standby: poll the lock until it is ours (seconds waited) or a stop signal arrives (None).
        A SIGHUP while waiting stays queued for the main loop (the config is read again then)."""
        started = time.monotonic()
        if self.leader.try_acquire():
            return 0.0
        self.notifier.ready(f"standby; waiting for the fleet's lock ({self.leader.holder()})")
        log.info("daemon.standby", pid=os.getpid(), holder=self.leader.holder(), lock=self.leader.kind,
                 failover_seconds=self.leader.failover_seconds)
        while True:
            if any(sig != signal.SIGHUP for sig in self._signals):
                self._signals[:] = [sig for sig in self._signals if sig == signal.SIGHUP]
                return None
            if self.leader.try_acquire():
                waited = time.monotonic() - started
                log.info("leader.acquired", waited_s=round(waited, 3), lock=self.leader.kind,
                         because=self.leader.took_because)
                return waited
            with contextlib.suppress(InterruptedError):
                select.select([self._wake_r], [], [], STANDBY_POLL_S)
            with contextlib.suppress(BlockingIOError, OSError):
                os.read(self._wake_r, 4096)

    def _append_leadership(self, waited: float) -> None:
        """``leader.lost`` for a previous active that never stopped cleanly, then ``leader.acquired``."""
        assert self.events is not None
        prev = next(self.events.read(0, kinds=["leader.acquired", "daemon.stopped"], newest_first=True, limit=1),
                    None)
        lock = self.leader
        items: list[tuple[str, dict[str, Any], str, int | None]] = []
        if prev is not None and prev.kind == "leader.acquired":
            items.append(("leader.lost", {"holder": str(prev.payload.get("holder")), "acquired_seq": prev.seq,
                                          "why": lock.took_because if lock.took_because != "free" else
                                          "it did not stop cleanly"}, "system", None))
        items.append(("leader.acquired", {"lock": lock.kind, "holder": identity(self.settings.agent_id),
                                          "because": lock.took_because, "waited_s": round(waited, 3),
                                          "failover_seconds": lock.failover_seconds}, "system", None))
        self.events.append_many(items)

    def _on_leadership_lost(self, why: str) -> None:
        """From the heartbeat thread or a fence check: stop at once; nothing more is appended or sent."""
        self._lost = why
        self.stop_event.set()
        with contextlib.suppress(OSError):
            if self._wake_w >= 0:
                os.write(self._wake_w, b"\0")

    def _wait_for_writer(self, s: Settings) -> bool:
        """SQLite: wait, as long as it takes, until the log's write lock is free. A predecessor suspended
        inside a write transaction holds it after losing the fleet; resumed, it finds its fence gone and
        exits, and the lock comes free (False: a stop signal arrived first)."""
        told: list[bool] = []

        def waiting(seconds: float) -> None:
            self.leader.check()  # LeadershipLost ends the wait: someone else has the fleet now
            if not told:
                told.append(True)
                log.warning("daemon.waiting_for_writer", db=str(s.db_path),
                            reason="another process holds the log's write lock (a suspended predecessor?); "
                            "waiting for it to let go")
                self.notifier.status("waiting for the log's write lock (held by another process)")

        if self._signals:
            return not any(sig != signal.SIGHUP for sig in self._signals)
        return wait_for_write_lock(s.db_path, waiting=waiting,
                                   stop=lambda: any(sig != signal.SIGHUP for sig in self._signals))

    def _start_web(self, s: Settings, prompts: Prompts) -> Any:
        """Metrics, health and the console from this process (``http.listen``), on a connection of their
        own. A console that cannot start is logged and the daemon ticks on without it."""
        if s.http.listen is None:
            return None
        from agent.web import Console, WebServer

        try:
            console = Console(s, env=self.env, prompts=prompts,
                              daemon=lambda: {"status": self.status_text(), "next_run": self._next_run()})
            return WebServer(console, s.http.listen).start()
        except FleetAgentError as e:
            log.error("http.unavailable", error=scrub(str(e))[:300])
            return None

    def _make_app(self, settings: Settings, prompts: Prompts) -> App:
        # The prompts read at start or reload, not re-read mid-run; the daemon holds the
        # single-writer lock, so the tick must not take it.
        return App(settings, env=self.env, prompts=prompts, lock_held=True, fence=self.leader.check,
                   hold=self.leader.hold)

    def _reconcile(self, app: App) -> None:
        """The start-up reconcile (worker thread, ahead of the first tick)."""
        self._reconciled = True
        if self.reconcile_fn is None:
            return
        self._activity = "reconciling with vast.ai before the first tick"
        self._publish()
        try:
            self.reconcile_fn(app)
        except Exception as e:  # noqa: BLE001 - the first tick reconciles again; starting matters more
            log.error("daemon.reconcile_failed", error=type(e).__name__, detail=str(e)[:300])
        finally:
            self._activity = None

    def _start_scheduler(self, trigger: BaseTrigger) -> BackgroundScheduler:
        sch = self.settings.schedule
        scheduler = BackgroundScheduler(executors={"default": ThreadPoolExecutor(max_workers=1)}, timezone=UTC)
        scheduler.add_listener(self._on_job_event, EVENT_JOB_ERROR | EVENT_JOB_MISSED | EVENT_JOB_MAX_INSTANCES)
        scheduler.add_job(self._run_tick, trigger, id=JOB_ID, name="tick", max_instances=1,
                          coalesce=True, misfire_grace_time=max(1, int(float(sch.misfire_grace))),
                          next_run_time=datetime.now(UTC))
        scheduler.start()
        return scheduler

    def _main_loop(self) -> tuple[int, str]:
        """Wait for signals; handle reloads; return (exit code, reason) when told to stop."""
        while True:
            with contextlib.suppress(InterruptedError):
                select.select([self._wake_r], [], [], MAIN_LOOP_WAKE_S)
            with contextlib.suppress(BlockingIOError, OSError):
                os.read(self._wake_r, 4096)
            if self._lost is not None:
                return EXIT_LOST, f"lost the fleet's lock: {self._lost}"
            while self._signals:
                signum = self._signals.pop(0)
                if signum == signal.SIGHUP:
                    self.reload()
                elif self._broken is not None:
                    return 1, "the event log fails verification"
                else:
                    return 0, SIGNAL_NAMES.get(signum, f"signal {signum}")
            if not self._scheduler_alive():
                log.error("daemon.scheduler_died")
                return 1, "the scheduler thread died"

    def _shutdown(self, code: int, reason: str) -> tuple[int, str]:
        """Stop scheduling, ask the running tick to stop, wait up to ``stop_deadline``."""
        # The last notification: no WATCHDOG=1 or STATUS= follows it.
        self.notifier.stopping(f"stopping ({reason}); a running tick gets "
                               f"{float(self.settings.schedule.stop_deadline):g}s to finish")
        log.info("daemon.stopping", reason=reason)
        if self.scheduler is not None:
            with contextlib.suppress(Exception):  # a scheduler that died cannot be paused; stopping anyway
                self.scheduler.pause()
        with self._state:
            self.stop_event.set()
        deadline = float(self.settings.schedule.stop_deadline)
        if self._lost is not None:
            deadline = min(deadline, 2.0)  # the tick can append and send nothing: no reason to wait for it
        if not self._idle.wait(deadline):
            tick = self._current_tick()
            log.error("daemon.tick_abandoned", tick=tick, stop_deadline_s=deadline)
            what = f"tick {tick}" if tick is not None else "the start-up reconcile"
            reason += f"; {what} still running after the {deadline:g}s stop deadline"
        if self.scheduler is not None:
            with contextlib.suppress(Exception):  # shutting down a dead scheduler raises; nothing to stop
                self.scheduler.shutdown(wait=False)
        return code, reason

    def _append_stopped(self, reason: str) -> None:
        assert self.events is not None
        if self._broken is not None or self._lost is not None:
            return  # nothing is appended to a log that does not verify, nor by a daemon that lost the lock
        try:
            self.events.append("daemon.stopped", {"reason": reason}, "system")
        except FleetAgentError as e:
            log.error("daemon.stop_event_failed", error=str(e)[:300])

    # -------------------------------------------------------------- signals

    def _install_signals(self) -> dict[int, SignalHandler]:
        if threading.current_thread() is not threading.main_thread():
            raise FleetAgentError("the daemon must run in the main thread (signal handling)")
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        old: dict[int, SignalHandler] = {}
        for signum in SIGNAL_NAMES:
            old[signum] = signal.signal(signum, self._on_signal)
        return old

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        # Only flags here: the main loop does the work.
        self._signals.append(signum)
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"\0")

    def _restore_signals(self, old: dict[int, SignalHandler]) -> None:
        for signum, handler in old.items():
            signal.signal(signum, handler)
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                os.close(fd)
        self._wake_r = self._wake_w = -1

    # -------------------------------------------------------------- the tick job

    def _run_tick(self) -> None:
        """The scheduled job (worker thread): one tick, then its STATUS line for systemd."""
        with self._state:
            if self.stop_event.is_set():
                return
            self._idle.clear()
            self._tick_started = time.monotonic()
            if self._pending is not None:
                self._swap_app()
        try:
            if not self._reconciled:
                assert self.app is not None
                self._reconcile(self.app)
                with self._state:
                    if self.stop_event.is_set():
                        return
                    self._tick_started = time.monotonic()  # the tick's own time budget starts now
                    if self._pending is not None:
                        self._swap_app()
            app = self.app
            assert app is not None
            self._announce_tick(app)
            try:
                result = self.tick_fn(app, stop=self.stop_event)
            except ChainBroken as e:
                self._refuse_log(str(e))
                return
            except LeadershipLost:
                return  # the main loop stops the daemon; this tick's end belongs to the new active one
            except Exception as e:
                # A tick that raises must not stop the schedule: close it in the log, then let the
                # EVENT_JOB_ERROR listener log the traceback.
                self._close_dangling_tick(app, e)
                self._activity = None
                self._summary = f"tick crashed: {type(e).__name__}"
                self._publish()
                raise
            self._report(result)
            self._archive_daily(app)
        finally:
            with self._state:
                self._activity = None
                self._tick_started = None
                self._idle.set()

    def _archive_daily(self, app: App) -> None:
        """With storage.archive_after set, move old months into segments once a day, after a tick (the same
        worker thread, so never during one). A failure is logged and tried again the next day."""
        older = app.settings.storage.archive_after
        now = time.monotonic()
        if older is None or (self._archived_at is not None and now - self._archived_at < ARCHIVE_EVERY):
            return
        self._archived_at = now
        from agent.store import archive

        try:
            r = archive.archive(app.log, older_than=float(older), now=datetime.fromtimestamp(app.clock(), UTC),
                                remote=app.archive_remote() if app.settings.storage.archive_url else None)
        except Exception as e:  # noqa: BLE001 - archiving is housekeeping: the ticks go on, the log keeps every event
            log.error("daemon.archive_failed", error=type(e).__name__, detail=str(e)[:300])
            return
        if r.sealed:
            log.info("daemon.archived", segments=[s.name for s in r.sealed], events=r.plan.events,
                     raw_bytes=r.raw_bytes, bytes=r.bytes)

    def _announce_tick(self, app: App) -> None:
        """STATUS= "tick N running since HH:MM:SSZ" while the tick runs."""
        try:
            n: int | None = app.log.store.next_tick_number()
        except FleetAgentError:
            n = None
        since = datetime.now(UTC).strftime("%H:%M:%SZ")
        self._activity = f"tick {n} running since {since}" if n is not None else f"a tick running since {since}"
        self._publish()

    def _refuse_log(self, why: str) -> None:
        """The log failed verification mid-run: append nothing more, stop with exit 1."""
        log.error("log.verify_failed", error=why[:500])
        self._broken = why
        self._activity = "stopping: the event log fails verification"
        self._publish()
        self._on_signal(signal.SIGTERM, None)

    def _report(self, result: TickReport) -> None:
        tokens, _cached = _usage_tokens(result.usage)
        nxt = self._next_run()
        # The canonical per-tick line is agent.runtime.tick's "tick"; this only adds the schedule.
        log.debug("daemon.next_run", tick=result.tick, next_run=nxt)
        outcome = "ok" if result.ok else f"failed ({result.reason})" if result.reason else "failed"
        self._summary = (f"tick {result.tick} {outcome}: {result.steps} steps, {tokens} tokens, "
                         f"{float(result.duration_ms) / 1000:.1f}s")
        self._activity = None
        self._publish()

    def _close_dangling_tick(self, app: App, exc: BaseException) -> None:
        """A tick that raised may have left ``tick.started`` without an end; append ``tick.failed``."""
        try:
            tick = _open_tick(app.log)
            if tick is not None:
                app.log.append("tick.failed", {"reason": f"the tick crashed: {type(exc).__name__}: {exc}"[:500],
                                               "error_kind": "crash"}, "system", tick)
        except FleetAgentError as e:
            log.error("daemon.close_tick_failed", error=str(e)[:300])

    def _on_job_event(self, event: JobExecutionEvent) -> None:
        if event.code == EVENT_JOB_ERROR:
            log.error("tick.crashed", error=type(event.exception).__name__, detail=str(event.exception)[:300],
                      exc_info=event.exception)
        elif event.code == EVENT_JOB_MISSED:
            log.warning("tick.missed", scheduled=str(event.scheduled_run_time))
        elif event.code == EVENT_JOB_MAX_INSTANCES:
            log.warning("tick.skipped", why="the previous tick is still running")

    def status_text(self) -> str:
        """The ``STATUS=`` line: what runs now, else the last outcome and the next run time;
        then a refused reload, until a reload succeeds."""
        text = self._activity
        if text is None:
            text = self._summary or f"running; {schedule_text(self.settings.schedule)}"
            nxt = self._next_run()
            if nxt:
                text += f"; next {nxt}"
        if self._reload_problem:
            text += f"; {self._reload_problem}"
        return text

    def _publish(self) -> None:
        self.notifier.status(self.status_text())

    def _next_run(self) -> str | None:
        if self.scheduler is None:
            return None
        job = self.scheduler.get_job(JOB_ID)
        t = getattr(job, "next_run_time", None)
        now = datetime.now(UTC)
        if job is not None and t is not None and t <= now:
            # APScheduler stores a job's next run time only after it handed the run to the worker: a tick
            # that ends quickly can finish first. Ask the trigger what follows the run that just happened.
            t = job.trigger.get_next_fire_time(t, now)
        return t.astimezone(UTC).strftime("%H:%M:%SZ") if t else None

    def _current_tick(self) -> int | None:
        try:
            return _open_tick(self.events) if self.events is not None else None
        except FleetAgentError:
            return None

    # -------------------------------------------------------------- reload

    def reload(self) -> bool:
        """Read the config and prompts again; True when the new settings were accepted."""
        self.notifier.reloading()
        try:
            return self._reload()
        finally:
            self.notifier.ready(self.status_text())

    def _read_config(self) -> tuple[Settings, Prompts]:
        """The new settings and prompts, read on a worker thread: the main thread keeps watching the
        signals, gives up at once on SIGTERM/SIGINT (left queued for the main loop) and after
        ``RELOAD_LIMIT_S`` (a file that never finishes reading must not hold the daemon)."""
        box: list[tuple[Settings, Prompts] | BaseException] = []

        def read() -> None:
            try:
                new = config.load(self.config_path, self.env)
                new.vast_api_key(self.env)
                new.http_token(self.env)  # a console token that cannot be read refuses the reload
                box.append((new, _load_prompts(new)))
            except BaseException as e:  # noqa: BLE001 - handed to the main thread, which re-raises it
                box.append(e)

        worker = threading.Thread(target=read, name="config-reload", daemon=True)
        worker.start()
        deadline = time.monotonic() + RELOAD_LIMIT_S
        while worker.is_alive():
            if any(s != signal.SIGHUP for s in self._signals):
                raise ConfigError("reload abandoned: a stop signal arrived while the config was being read")
            if time.monotonic() > deadline:
                raise ConfigError(f"{self.config_path}: reading the config and prompt files took more than "
                                  f"{RELOAD_LIMIT_S:g}s; check they are plain files, not pipes or network mounts")
            worker.join(0.05)
        if isinstance(box[0], BaseException):
            raise box[0]
        return box[0]

    def _reload(self) -> bool:
        old = self.settings
        try:
            new, prompts = self._read_config()
            if new.data_path != old.data_path:
                raise ConfigError(f"data_dir: changing it from {old.data_path} to {new.data_path} needs a "
                                  "restart (the daemon holds the lock and the log there)")
            trigger = make_trigger(new.schedule)
        except FleetAgentError as e:
            self._refuse_reload(e)
            return False
        self._reload_problem = None
        changed = changed_keys(old, new)
        changed += [f"prompts/{name}" for name, h in sorted(prompts.hashes.items())
                    if self._prompt_hashes.get(name) != h]
        assert self.events is not None
        path = str(self.config_path) if self.config_path else None
        self.events.append("config.loaded", {"config_hash": new.config_hash(), "changed": changed, "path": path},
                           "system")
        changes = config_changes(old, new)
        if changes:
            self.events.append("config.changed", {
                "config_hash": new.config_hash(), "previous_hash": old.config_hash(),
                "changes": json.loads(json.dumps(changes, default=str)), "path": path,
                "settings": effective(new)}, "system")
            for c in changes:
                log.info("config.changed", key=c["key"], old=c["old"], new=c["new"])
        with self._state:
            self.settings = new
            self._prompt_hashes = dict(prompts.hashes)
            self._pending = (new, prompts)
            if self._idle.is_set():
                self._swap_app()
        if any(k.startswith("schedule.") and k.split(".")[1] in ("interval", "cron", "jitter", "misfire_grace")
               for k in changed) and self.scheduler is not None:
            self.scheduler.reschedule_job(JOB_ID, trigger=trigger)
            self.scheduler.modify_job(JOB_ID, misfire_grace_time=max(1, int(float(new.schedule.misfire_grace))))
        if any(k.startswith("logging.") for k in changed):
            logsetup.configure(new.logging.level, new.logging.format)
        self._reload_web(old, new, prompts)
        log.info("config.loaded", path=self.config_path, changed=changed, config_hash=new.config_hash()[:12],
                 schedule=schedule_text(new.schedule))
        return True

    def _reload_web(self, old: Settings, new: Settings, prompts: Prompts) -> None:
        """Apply ``http.*`` now: a new listen address gets a new endpoint (the old one stops first); else the
        running console takes the new token (read again even when its path did not change, so a token
        rotated in place or removed stops writing), operator name and allowed host names."""
        if new.http.listen != old.http.listen or self._web is None:
            if self._web is not None:
                self._web.stop()
                self._web = None
            self._web = self._start_web(new, prompts)
            return
        try:
            self._web.console.apply_http(new, self.env)
        except FleetAgentError as e:  # read a moment ago, gone since: the console is read-only now
            log.error("http.token_unavailable", error=scrub(str(e))[:300])

    def _refuse_reload(self, e: FleetAgentError) -> None:
        """Log, append ``config.refused`` and keep it in ``STATUS=``; the old settings stay."""
        error = scrub(str(e))[:500]
        kept = self.settings.config_hash()
        log.error("config.reload_refused", path=self.config_path, error=error, kept_config_hash=kept[:12])
        at = datetime.now(UTC).strftime("%H:%M:%SZ")
        self._reload_problem = f"reload refused at {at}, kept config {kept[:12]}: {error[:200]}"
        assert self.events is not None
        try:
            self.events.append("config.refused", {"error": error, "kept_config_hash": kept,
                                                  "path": str(self.config_path) if self.config_path else None},
                               "system")
        except FleetAgentError as append_error:
            log.error("daemon.refused_event_failed", error=str(append_error)[:300])

    def _swap_app(self) -> None:
        """Use the pending settings from now on (caller holds ``_state``; no tick is mid-way)."""
        assert self._pending is not None
        new, prompts = self._pending
        self._pending = None
        old = self.app
        self.app = self._make_app(new, prompts)
        if old is not None:
            old.close()

    # -------------------------------------------------------------- health and watchdog

    @property
    def idle(self) -> bool:
        """True when no tick is running."""
        return self._idle.is_set()

    def _scheduler_alive(self) -> bool:
        thread = getattr(self.scheduler, "_thread", None)
        return thread is None or thread.is_alive()

    def health(self) -> str | None:
        """None when healthy, else why the watchdog keep-alive is withheld."""
        if not self._scheduler_alive():
            return "the scheduler thread died"
        started = self._tick_started
        sch = self.settings.schedule
        limit = float(sch.tick_timeout) + float(sch.stop_deadline)
        if started is not None and time.monotonic() - started > limit:
            return f"a tick has run for more than tick_timeout + stop_deadline ({limit:g}s)"
        return None

    def _start_watchdog(self) -> threading.Thread | None:
        interval = self.notifier.watchdog_interval()
        if interval is None:
            return None
        t = threading.Thread(target=self._watchdog_loop, args=(interval,), name="watchdog", daemon=True)
        t.start()
        return t

    def _watchdog_loop(self, interval: float) -> None:
        while True:
            problem = self.health()
            if problem is None:
                if self._withheld is not None:
                    log.info("watchdog.resumed")
                    self._withheld = None
                self.notifier.watchdog()
            elif problem != self._withheld:
                log.error("watchdog.withheld", reason=problem)
                self._withheld = problem
            if self._watchdog_stop.wait(interval):
                return


# ------------------------------------------------------------------ helpers


def _load_prompts(settings: Settings) -> Prompts:
    return load_prompts(settings.prompts_path)


def _open_tick(log_: EventLog | None) -> int | None:
    """The newest tick that has ``tick.started`` but neither ``tick.completed`` nor ``tick.failed``."""
    if log_ is None:
        return None
    t = log_.store.open_tick()
    return None if t is None else t.tick


def run_daemon(settings: Settings, *, config_path: str | os.PathLike[str] | None, tick_fn: TickFn | None = None,
               env: Mapping[str, str] | None = None, reconcile_fn: ReconcileFn | None = None,
               hard_exit: bool = False, standby: bool = False) -> int:
    """Run the daemon in the foreground until SIGTERM/SIGINT; the exit code.

    ``tick_fn(app, stop=event)`` defaults to ``agent.runtime.tick.run_tick`` (with
    ``agent.runtime.tick.reconcile_at_start`` before the first tick); an injected
    ``tick_fn`` runs with ``reconcile_fn`` only. Raises ``LockError`` when another
    process holds the data directory (unless ``standby``: then it waits to take
    over), ``ConfigError`` for bad settings. With
    ``hard_exit`` (the CLI), a tick still running after the stop deadline does not
    hold the process: it exits at once.
    """
    if tick_fn is None:
        tick_fn = run_tick
        reconcile_fn = reconcile_fn or reconcile_at_start
    d = Daemon(settings, config_path=str(config_path) if config_path else None, tick_fn=tick_fn,
               reconcile_fn=reconcile_fn, env=env, standby=standby)
    code = d.run()
    if hard_exit and not d.idle:
        # A tick overran the stop deadline: its committed events are whole (every append is
        # one transaction); leave now instead of waiting for it at interpreter exit.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code

