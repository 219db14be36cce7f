"""The operator's alert hook: ``alerts.notify_command``, run once per new alert with the event as JSON on
standard input, in its own process group, killed when it overruns its timeout.

(Not to be confused with ``agent.sdnotify``, which speaks systemd's notify protocol.)
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import tempfile
from typing import Any

import structlog

from agent.events import Event

logger = structlog.get_logger(__name__)
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
                                    start_new_session=True, close_fds=True)
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
