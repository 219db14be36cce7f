"""fleet-agent's exceptions, in one place.

    FleetAgentError            base; the CLI turns it into one line and an exit code
    ├── ConfigError            bad or missing settings (exit 2); names file, line, key, fix
    ├── UsageError             bad command-line input (exit 2)
    ├── LogError               the event log refused or failed an operation (exit 1)
    │   ├── PayloadError       an event payload does not match its kind's shape
    │   └── ChainError         the hash chain does not verify
    └── LockError              another process holds the single-writer lock (exit 1)

Every message says what is wrong, where, and how to fix it, and never carries a
secret.
"""

from __future__ import annotations


class FleetAgentError(Exception):
    exit_code = 1


class ConfigError(FleetAgentError):
    exit_code = 2


class UsageError(FleetAgentError):
    exit_code = 2


class LogError(FleetAgentError):
    pass


class PayloadError(LogError):
    pass


class ChainError(LogError):
    def __init__(self, message: str, seq: int | None = None) -> None:
        super().__init__(message)
        self.seq = seq


class LockError(FleetAgentError):
    pass
