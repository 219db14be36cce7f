"""fleet-agent's exceptions, in one place.

    FleetAgentError            base; the CLI turns it into one line and an exit code
    ├── ConfigError            bad or missing settings (exit 2); names file, line, key, fix
    ├── UsageError             bad command-line input (exit 2)
    ├── LogError               the event log refused or failed an operation (exit 1)
    │   ├── PayloadError       an event payload does not match its kind's shape
    │   └── ChainBroken        the log fails verification; nothing may be appended to it
    ├── LockError              another process holds the single-writer lock (exit 1)
    ├── LeadershipLost         this daemon lost the fleet's leadership lock to another one; it
    │   │                      appends and sends nothing more (exit 3) (agent/runtime/leader.py)
    │   └── LeaseBusy          a commit or request was refused: the lock was not this daemon's
    │                          when it was about to act, so the action did not run
    ├── LLMError               a model call failed; ``kind`` and ``retryable`` say how (agent/model/llm.py)
    ├── VastError              a vast.ai call failed: HTTP status, vast's code and message
    │                          (agent/clients/vast.py)
    ├── DemandError            the job queue could not be read or answered nonsense
    │                          (agent/clients/demand.py)
    ├── ToolInputError         the model's tool call cannot run as written; the message goes
    │                          back to the model (agent/fleet/toolkit.py)
    ├── ToolsNotInstalled      no tools under the fleet_agent.tools entry point: reinstall
    │                          (agent/fleet/toolkit.py)
    └── ExportError            an export cannot be written as asked: Parquet without pyarrow, an
                               output path that is not a file (agent/runtime/export.py)

Every message says what is wrong, where, and how to fix it, and never carries a
secret. The errors defined next to the code that raises them are drawn here too,
so this tree is the whole list (a test checks it).
"""

from __future__ import annotations

import importlib
from types import ModuleType


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


class ChainBroken(LogError):
    pass


class LockError(FleetAgentError):
    pass


def optional_import(module: str, extra: str, feature: str) -> ModuleType:
    """``module``, which only the optional install ``fleet-agent[extra]`` brings; a ConfigError naming the
    extra when it is missing (``feature`` says what needs it, e.g. "storage.url: postgresql://…")."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ConfigError(f"{feature} needs the optional package {module.partition('.')[0]}, which is not "
                          f"installed ({e.name or module}); install it with: pip install 'fleet-agent[{extra}]'"
                          ) from None
