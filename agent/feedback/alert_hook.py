"""The operator's alert hook: ``alerts.notify_command``, run once per notification with the event as JSON
on standard input, in its own process group, killed when it overruns its timeout.

A notification (an ``alert.notified`` event) covers the alerts that opened together with the same key
prefix, an open alert nobody acked for ``alerts.repeat_after``, or alerts that resolved; silenced alerts
notify nobody (``agent.feedback.alerts.dispatch_notifications`` decides). Its JSON carries ``reason``
(opened | repeat | resolved), ``alerts`` (each with id, severity, title, key, status) and, for the first
alert, ``alert_id``, ``severity`` (the highest) and ``title``.

Hooks run on a worker thread, one at a time, from a bounded queue (``notify_alert``), so a slow hook
never stalls the tick that raised the alert. A process that exits waits for the queued hooks (each
still bounded by ``alerts.notify_timeout``) for at most ``EXIT_DRAIN_S``.

The hook runs with a minimal environment: ``PATH``, ``LANG`` and ``TZ`` from ours (when set), and
``FLEET_AGENT_ALERT_ID``, ``FLEET_AGENT_SEVERITY``, ``FLEET_AGENT_AGENT_ID`` about the alert. Nothing
else is inherited: the vast.ai and model keys stay in this process.

(Not to be confused with ``agent.service.sdnotify``, which speaks systemd's notify protocol.)
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import queue
import shlex
import signal
import subprocess
import tempfile
import threading
from collections.abc import Mapping
from typing import Any

from agent import logsetup
from agent.events import Event

logger = logsetup.get_logger(__name__)

# Variables a hook inherits from the daemon's environment; everything else is left behind.
INHERITED_ENV = ("PATH", "LANG", "TZ")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
QUEUE_SIZE = 100
EXIT_DRAIN_S = 30.0


def hook_env(settings: Any, event: Event, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment of a hook: ``INHERITED_ENV`` and the documented ``FLEET_AGENT_*`` variables."""
    environ = os.environ if environ is None else environ
    env = {k: environ[k] for k in INHERITED_ENV if environ.get(k)}
    env.setdefault("PATH", DEFAULT_PATH)
    env["FLEET_AGENT_ALERT_ID"] = str(event.payload.get("alert_id", ""))
    env["FLEET_AGENT_SEVERITY"] = str(event.payload.get("severity", ""))
    env["FLEET_AGENT_AGENT_ID"] = str(getattr(settings, "agent_id", "") or "")
    return env


class HookQueue:
    """Runs alert hooks one at a time on a worker thread, off the caller's path."""

    def __init__(self, maxsize: int = QUEUE_SIZE) -> None:
        self._q: queue.Queue[tuple[Any, Event]] = queue.Queue(maxsize)
        self._lock = threading.Lock()
        self._worker: threading.Thread | None = None

    def submit(self, settings: Any, event: Event) -> bool:
        """Queue a hook run; False (logged) when the queue is full."""
        try:
            self._q.put_nowait((settings, event))
        except queue.Full:
            logger.warning("alert.notify_dropped", alert_id=event.payload.get("alert_id"), queued=self._q.qsize(),
                           reason="too many hooks waiting; the alert itself is in the log")
            return False
        with self._lock:
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._run, name="alert-hooks", daemon=True)
                self._worker.start()
        return True

    def _run(self) -> None:
        while True:
            settings, event = self._q.get()
            try:
                run_alert_hook(settings, event)
            except Exception as e:  # noqa: BLE001 - the worker must outlive any one hook's failure
                logger.error("alert.notify_failed", alert_id=event.payload.get("alert_id"),
                             error=type(e).__name__, detail=str(e)[:300])
            finally:
                self._q.task_done()

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until every queued hook has run; False when ``timeout`` passed first."""
        done = threading.Event()

        def wait() -> None:
            self._q.join()
            done.set()

        threading.Thread(target=wait, name="alert-hooks-drain", daemon=True).start()
        return done.wait(timeout)


_QUEUE = HookQueue()
atexit.register(_QUEUE.drain, EXIT_DRAIN_S)


def notify_alert(settings: Any, event: Event) -> None:
    """Run ``alerts.notify_command`` for ``event`` soon, on the hook worker; returns at once."""
    if settings is not None and getattr(settings.alerts, "notify_command", None):
        _QUEUE.submit(settings, event)


def submit_notification(settings: Any, event: Event) -> bool:
    """Queue the command for an ``alert.notified`` event (``agent.feedback.alerts.dispatch_notifications``
    decided and logged it); False when the queue is full."""
    return _QUEUE.submit(settings, event)


def drain_alert_hooks(timeout: float | None = None) -> bool:
    """Wait for the queued alert hooks to finish (True), or until ``timeout`` (False)."""
    return _QUEUE.drain(timeout)


def run_alert_hook(settings: Any, event: Event) -> bool:
    """Run ``alerts.notify_command`` with the new alert as JSON on stdin.

    Never raises: a missing command, a non-zero exit or a timeout is logged.
    On timeout the command's whole process group is killed. True when the
    command ran and exited 0.
    """
    cmd = settings.alerts.notify_command
    if not cmd:
        return False
    timeout = float(settings.alerts.notify_timeout)
    body = dict(event.payload)
    body.update({"seq": event.seq, "ts": event.ts, "tick": event.tick,
                 "agent_id": getattr(settings, "agent_id", None)})
    data = (json.dumps(body, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")
    alert_id = event.payload.get("alert_id")
    try:
        argv = shlex.split(cmd)
    except ValueError as e:
        logger.warning("alert.notify_failed", alert_id=alert_id, error="bad_command", detail=str(e))
        return False
    if not argv:
        return False
    with tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err,
                                    start_new_session=True, close_fds=True, env=hook_env(settings, event))
        except OSError as e:
            logger.warning("alert.notify_failed", alert_id=alert_id, command=argv[0], error=type(e).__name__,
                        detail=e.strerror)
            return False
        try:
            proc.communicate(data, timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            logger.warning("alert.notify_timeout", alert_id=alert_id, command=argv[0], timeout_s=timeout,
                        pid=proc.pid)
            return False
        except OSError as e:  # the command exited without reading stdin (EPIPE)
            proc.wait(timeout=timeout) if proc.poll() is None else None
            if proc.returncode is None:
                kill_group(proc)
            logger.warning("alert.notify_failed", alert_id=alert_id, command=argv[0], error=type(e).__name__)
            return False
        if proc.returncode != 0:
            err.seek(0)
            tail = err.read()[-500:].decode("utf-8", "replace").strip()
            logger.warning("alert.notify_failed", alert_id=alert_id, command=argv[0], status=proc.returncode,
                        stderr=tail)
            return False
    logger.info("alert.notified", alert_id=alert_id, command=argv[0])
    return True


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    proc.wait()
    if proc.stdin is not None:
        with contextlib.suppress(OSError):
            proc.stdin.close()
