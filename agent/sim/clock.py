"""Simulated time: a hand-driven clock for tests, a scaled wall clock for `fleet-agent sim`."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

DEFAULT_START = 1_750_000_000.0

Clock = Callable[[], float]


class ManualClock:
    """A clock that only moves when told to: `advance(seconds)`."""

    def __init__(self, start: float = DEFAULT_START) -> None:
        self._t = float(start)
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._t

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("a clock cannot go backwards")
        with self._lock:
            self._t += seconds
            return self._t


def scaled_wall_clock(start: float, speed: float) -> Clock:
    """Starts at `start` and runs `speed` times faster than the monotonic clock."""
    t0 = time.monotonic()
    return lambda: start + (time.monotonic() - t0) * speed


def iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
