"""A wall clock whose waits take no real time, shared by a vast.ai client and the simulator.

    FastWall    monotonic real time plus every wait skipped so far
    fast_waits(sim, client)  give an App's vast.ai client and the simulator that clock
"""

from __future__ import annotations

import threading
import time

from agent.clients.vast import VastClient
from agent.sim import Simulator


class FastWall:
    """Monotonic real time plus every wait skipped so far. ``sleep`` returns at once and moves this
    clock on by the wait, so a client pacing one endpoint 0.6 s apart (or polling a log upload) runs
    at full speed while the simulator's rate limit and log uploads, reading the same clock, still see
    the waits elapse."""

    def __init__(self) -> None:
        self.skipped = 0.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return time.monotonic() + self.skipped

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.skipped += max(0.0, seconds)


def fast_waits(sim: Simulator, client: VastClient) -> None:
    """Put ``client``'s waits (an App's vast.ai client) and ``sim``'s wall clock on one FastWall. A
    simulator whose wall a test already replaced (a ManualClock it drives) is left alone, and so is
    the client then."""
    if sim.wall is time.monotonic:
        sim.wall = FastWall()
    wall = sim.wall
    if isinstance(wall, FastWall):
        client._sleep = wall.sleep
        client._monotonic = wall
