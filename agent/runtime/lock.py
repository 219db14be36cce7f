"""The single-writer lock: one daemon (or one `fleet-agent tick`) per data directory.

An advisory ``flock`` on ``<data_dir>/fleet-agent.runtime.lock``, released by the kernel
when the process dies — a crash never leaves a stale lock. The file records the
holder's pid and command so a refused process can name it. Operator commands
(ack, say, knowledge) do not take it: they only append, and appends are safe
from any number of processes.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from pathlib import Path

from agent.errors import LockError


class FleetLock:
    def __init__(self, data_dir: Path, name: str = "fleet-agent.runtime.lock") -> None:
        self.path = Path(data_dir) / name
        self._fd: int | None = None

    def holder(self) -> str:
        try:
            return self.path.read_text(encoding="utf-8").strip() or "unknown"
        except OSError:
            return "unknown"

    def acquire(self, *, wait: float = 0.0) -> FleetLock:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as e:
            raise LockError(f"cannot open the lock file {self.path}: {e.strerror}; the data directory must be "
                            "writable by the user running fleet-agent") from None
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise LockError(
                        f"another fleet-agent holds {self.path} ({self.holder()}); "
                        "stop it first, or use a different data_dir"
                    ) from None
                time.sleep(0.05)
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()}: {' '.join(os.path.basename(a) for a in sys.argv[:3])}\n".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, 0)
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
                os.close(self._fd)
                self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> FleetLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
