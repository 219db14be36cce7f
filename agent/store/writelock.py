"""Waiting for the SQLite log's write lock, for a daemon that has just taken over.

A daemon suspended (SIGSTOP) inside a write transaction keeps SQLite's write lock while its
successor takes over the fleet: every append of the successor would wait out the busy timeout and
fail. ``wait_for_write_lock`` is what the successor does first instead: it tries the lock every
``poll_s`` for as long as it takes (the old writer, resumed, finds it lost the fleet and exits, or
dies, and the lock comes free), giving up only when told to stop.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from agent.store.db import sqlite3


def wait_for_write_lock(path: str | os.PathLike[str], *, stop: Callable[[], bool],
                        waiting: Callable[[float], None], poll_s: float = 1.0) -> bool:
    """True once a write transaction could begin on ``path`` (taken and let go at once, on a connection
    of its own); False when ``stop()`` says to give up. ``waiting(seconds so far)`` runs before each new
    try, after the first failed one (log it, check the fence: it may raise to end the wait)."""
    conn = sqlite3.connect(str(path), isolation_level=None, timeout=poll_s)
    waited = 0.0
    try:
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("ROLLBACK")
                return True
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) and "busy" not in str(e):
                    raise
            waited += poll_s
            if stop():
                return False
            waiting(waited)
    finally:
        conn.close()
