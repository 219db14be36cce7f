"""The systemd notification protocol (sd_notify), without a dependency.

systemd starts a ``Type=notify`` service with ``NOTIFY_SOCKET`` in its
environment: an AF_UNIX datagram socket, either a filesystem path or, when the
value starts with ``@``, an abstract socket name. The service sends newline-
separated ``KEY=value`` assignments to it: ``READY=1`` once it serves,
``STATUS=...`` for ``systemctl status``, ``WATCHDOG=1`` as a keep-alive when
``WatchdogSec=`` is set, ``RELOADING=1`` and ``STOPPING=1`` around reloads and
shutdown.

Once ``STOPPING=1`` has gone out, nothing more is sent (no late ``WATCHDOG=1``
or ``STATUS=`` from another thread): sends are serialised, so "after" is exact.

Outside systemd (``NOTIFY_SOCKET`` unset) every method is a no-op. A failed send
is logged and swallowed: losing a status line must never stop the daemon; if
keep-alives keep failing, systemd's watchdog restarts the service, which is the
right outcome.
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from agent import logsetup

log = logsetup.get_logger(__name__)

# A send blocks only if systemd's receive queue is full; never wait long for it.
_SEND_TIMEOUT_SECONDS = 1.0
_KEY = re.compile(r"^[A-Z][A-Z0-9_]*$")


def _parse_int(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        log.warning("notify.bad_env", variable=name, value=raw)
        return None
    if value <= 0:
        log.warning("notify.bad_env", variable=name, value=raw)
        return None
    return value


def _clean(value: object) -> str:
    """One line: a newline inside a value would start a new assignment."""
    return str(value).replace("\r\n", " ").replace("\n", " ").replace("\r", " ")


class _SendState:
    """Mutable state shared by the copies of one notifier: the send lock and whether it stopped."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.stopped = False


@dataclass(frozen=True)
class SystemdNotifier:
    """Talks to the service manager through ``NOTIFY_SOCKET``.

    ``socket_path`` is the variable's value as given (``@name`` for an abstract
    socket); ``None`` disables every method.
    """

    socket_path: str | None = None
    watchdog_usec: int | None = None
    watchdog_pid: int | None = None
    pid: int = field(default_factory=os.getpid)
    _sent: _SendState = field(default_factory=_SendState, init=False, repr=False, compare=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *, pid: int | None = None) -> SystemdNotifier:
        """Build from ``NOTIFY_SOCKET``, ``WATCHDOG_USEC`` and ``WATCHDOG_PID``.

        ``env`` defaults to ``os.environ``; ``pid`` to this process's id.
        """
        env = os.environ if env is None else env
        path = env.get("NOTIFY_SOCKET") or None
        return cls(
            socket_path=path,
            watchdog_usec=_parse_int(env, "WATCHDOG_USEC"),
            watchdog_pid=_parse_int(env, "WATCHDOG_PID"),
            pid=os.getpid() if pid is None else pid,
        )

    @property
    def enabled(self) -> bool:
        """True when running under a service manager that listens."""
        return self.socket_path is not None

    def watchdog_interval(self) -> float | None:
        """Seconds between keep-alives (half of ``WATCHDOG_USEC``), or None.

        None when no watchdog is configured, or when ``WATCHDOG_PID`` names a
        different process (the watchdog is meant for that one, not us).
        """
        if self.watchdog_usec is None:
            return None
        if self.watchdog_pid is not None and self.watchdog_pid != self.pid:
            return None
        return self.watchdog_usec / 2 / 1_000_000

    def ready(self, status: str | None = None) -> bool:
        """Startup finished: ``READY=1`` (with ``STATUS=`` when given)."""
        if status is None:
            return self.send(READY=1)
        return self.send(READY=1, STATUS=status)

    def status(self, text: str) -> bool:
        """A one-line status for ``systemctl status`` (newlines become spaces)."""
        return self.send(STATUS=text)

    def watchdog(self) -> bool:
        """Keep-alive: ``WATCHDOG=1``."""
        return self.send(WATCHDOG=1)

    def stopping(self, status: str | None = None) -> bool:
        """Shutdown began: ``STOPPING=1`` (with ``STATUS=`` when given); the last message sent."""
        if status is None:
            return self.send(STOPPING=1)
        return self.send(STOPPING=1, STATUS=status)

    @property
    def stopped(self) -> bool:
        """True once ``STOPPING=1`` was sent; every later send is dropped."""
        return self._sent.stopped

    def reloading(self) -> bool:
        """Reload began: ``RELOADING=1`` with ``MONOTONIC_USEC`` (CLOCK_MONOTONIC).

        Send ``ready()`` again once the reload is done.
        """
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.send(RELOADING=1, MONOTONIC_USEC=usec)

    def send(self, **fields: object) -> bool:
        """Send ``KEY=value`` lines in the order given; True when delivered.

        Keys must be upper-case assignment names (``READY``, ``STATUS``, ...);
        values are made single-line. Returns False (and logs) on any socket
        error; never raises for one. After ``STOPPING=1`` returns False and
        sends nothing.
        """
        for key in fields:
            if not _KEY.match(key):
                raise ValueError(f"notify field name must be upper case like READY or STATUS, got {key!r}")
        if not self.enabled or not fields:
            return False
        message = "\n".join(f"{key}={_clean(value)}" for key, value in fields.items())
        with self._sent.lock:
            if self._sent.stopped:
                return False
            if "STOPPING" in fields:
                self._sent.stopped = True
            return self._send_bytes(message.encode("utf-8"))

    def _address(self) -> str | bytes:
        assert self.socket_path is not None
        if self.socket_path.startswith("@"):
            return b"\0" + self.socket_path[1:].encode("utf-8")
        return self.socket_path

    def _send_bytes(self, data: bytes) -> bool:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.settimeout(_SEND_TIMEOUT_SECONDS)
                sock.connect(self._address())
                sock.sendall(data)
        except OSError as exc:
            log.warning(
                "notify.send_failed",
                socket=self.socket_path,
                fields=[line.split(b"=", 1)[0].decode() for line in data.split(b"\n")],
                error=type(exc).__name__,
                detail=str(exc),
            )
            return False
        return True
