"""structlog setup: JSON lines when stdout is not a TTY (journald), readable on a TTY.

Under systemd, when stderr is the journal stream (``JOURNAL_STREAM`` names its
device and inode), every line starts with a syslog priority prefix (``<4>`` for
a warning, ``<3>`` for an error), which journald strips and stores as the
entry's priority: ``journalctl -p warning -u fleet-agent`` then shows exactly
the warnings and worse.

A redaction processor scrubs every known secret and any value under a key that
names a credential, wherever it appears. Tracebacks never carry local variables.

Modules take their logger from ``get_logger`` at import. structlog (and rich, which it loads) is imported
only when a line is first logged: a command that logs nothing (most reads) never pays for it. ``configure``
applies at once when structlog is already loaded, else at that first line.
"""

from __future__ import annotations

import io
import os
import sys
import threading
from collections.abc import Mapping
from typing import Any

from agent.secrets import REDACTED, scrub

# configure()'s arguments, while structlog is not loaded yet: applied when the first line is logged.
_pending: dict[str, Any] | None = None
_applying = threading.Lock()


# The numbers of the standard logging levels, by structlog's method names.
_LEVELS = {"debug": 10, "info": 20, "msg": 20, "warning": 30, "warn": 30, "error": 40, "exception": 40,
           "critical": 50, "fatal": 50}


def _dropped(*_args: Any, **_kw: Any) -> None:
    """A line below the configured level, while structlog is not loaded."""


class _Logger:
    """The logger of one module: structlog's, fetched (structlog loaded, a pending configuration applied) when
    it is first called."""

    __slots__ = ("_logger", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._logger: Any = None

    def __getattr__(self, attr: str) -> Any:
        if self._logger is None:
            pending = _pending
            if pending is not None and _LEVELS.get(attr, 100) < _LEVELS.get(pending["level"].lower(), 20):
                return _dropped  # below the level configured: structlog would drop it, so it stays unloaded
            self._logger = _structlog().get_logger(self._name)
        return getattr(self._logger, attr)

    def __repr__(self) -> str:
        return f"<logger {self._name}>"


def _structlog() -> Any:
    """structlog, configured as ``configure`` last asked (by one thread; any other waits for it)."""
    global _pending
    import structlog

    with _applying:
        if _pending is not None:
            _configure(**_pending)
            _pending = None
    return structlog


def get_logger(name: str) -> Any:
    """The logger for module ``name``."""
    return _Logger(name)


_SECRET_KEY_PARTS = ("api_key", "apikey", "authorization", "password", "secret", "token_value", "bearer")


def _redact_value(v: Any) -> Any:
    if isinstance(v, str):
        return scrub(v)
    if isinstance(v, dict):
        return {k: (REDACTED if _is_secret_key(k) else _redact_value(x)) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return type(v)(_redact_value(x) for x in v)
    return v


def _is_secret_key(k: Any) -> bool:
    k = str(k).lower()
    return any(p in k for p in _SECRET_KEY_PARTS)


def redact(_logger: Any, _name: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    return {k: (REDACTED if _is_secret_key(k) else _redact_value(v)) for k, v in event_dict.items()}


class _Stderr:
    """Whatever ``sys.stderr`` is when a line is written, not when logging was configured
    (a replaced or closed stream must not break every later log call)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()

    def isatty(self) -> bool:
        return sys.stderr.isatty()

    def fileno(self) -> int:
        return sys.stderr.fileno()


# structlog method name -> syslog priority (sd-daemon(3): <0> emerg ... <7> debug).
PRIORITIES: dict[str, int] = {"critical": 2, "fatal": 2, "exception": 3, "error": 3, "warning": 4, "warn": 4,
                              "notice": 5, "info": 6, "msg": 6, "debug": 7}


def is_journal_stream(stream: Any, env: Mapping[str, str] | None = None) -> bool:
    """True when ``stream`` is the journald stream systemd connected: ``JOURNAL_STREAM`` is
    ``device:inode`` of it (systemd.exec(5)). A stream redirected elsewhere does not match."""
    value = (os.environ if env is None else env).get("JOURNAL_STREAM", "")
    try:
        dev, ino = (int(part) for part in value.split(":"))
        st = os.fstat(stream.fileno())
    except (ValueError, OSError, AttributeError, io.UnsupportedOperation):
        return False
    return (st.st_dev, st.st_ino) == (dev, ino)


def syslog_prefix(_logger: Any, method_name: str, rendered: str) -> str:
    """Prefix each rendered line with its syslog priority, as journald reads it."""
    prefix = f"<{PRIORITIES.get(method_name, 6)}>"
    return "\n".join(prefix + line for line in rendered.split("\n"))


def configure(level: str = "info", fmt: str = "auto", stream: Any = None,
              env: Mapping[str, str] | None = None) -> None:
    """Log to ``stream`` (stderr): ``json``, ``console`` or ``auto`` (console on a TTY).
    On the journal stream each line carries its syslog priority prefix. Applied at once when structlog is
    loaded, else when the first line is logged (the stream and the environment as they are now)."""
    global _pending
    env = dict(os.environ if env is None else env)
    with _applying:
        if "structlog" in sys.modules:
            _pending = None
            _configure(level, fmt, stream, env)
        else:
            _pending = {"level": level, "fmt": fmt, "stream": stream, "env": env}


def _configure(level: str, fmt: str, stream: Any, env: Mapping[str, str]) -> None:
    import logging

    import structlog

    stream = stream or _Stderr()
    if fmt == "auto":
        fmt = "console" if getattr(stream, "isatty", lambda: False)() else "json"
    journal = is_journal_stream(stream, env)
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if fmt == "json":
        renderer: list[Any] = [
            structlog.processors.ExceptionRenderer(
                structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
            ),
            redact,
            structlog.processors.JSONRenderer(),
        ]
    else:
        renderer = [
            structlog.processors.format_exc_info,
            redact,
            structlog.dev.ConsoleRenderer(colors=False, exception_formatter=structlog.dev.plain_traceback),
        ]
    if journal:
        renderer.append(syslog_prefix)
    structlog.configure(
        processors=shared + renderer,
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper(), logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )
