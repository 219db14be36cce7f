"""structlog setup: JSON lines when stdout is not a TTY (journald), readable on a TTY.

A redaction processor scrubs every known secret and any value under a key that
names a credential, wherever it appears. Tracebacks never carry local variables.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

from agent.secrets import REDACTED, scrub

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


def configure(level: str = "info", fmt: str = "auto", stream: Any = None) -> None:
    stream = stream or _Stderr()
    if fmt == "auto":
        fmt = "console" if getattr(stream, "isatty", lambda: False)() else "json"
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
    structlog.configure(
        processors=shared + renderer,
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper(), logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )
