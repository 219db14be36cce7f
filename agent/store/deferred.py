"""Commits a thread has left open for its next commit (``EventLog.transaction(defer=True)``), and the rule
that nothing goes over the network while one is open.

A deferred commit holds the log's write lock, and what it appended is not durable yet: nothing may depend on
it from outside the process. So every path that reaches another system (the vast.ai client before each
request, the demand queue's client, the model client, the tool pipeline before a handler runs) calls
``settle()`` first, which commits what this thread deferred: another process's writer never waits on the
lock across network I/O, and no call is made whose cause is not committed.

Kept apart from ``agent.store.log`` so the clients can call it without loading the log.
"""

from __future__ import annotations

from _thread import _local as _thread_local  # (threading and typing stay unloaded for the lean commands)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from agent.store.log import EventLog as Deferring

_local = _thread_local()


def _open() -> list[Deferring]:
    logs: list[Deferring] | None = getattr(_local, "logs", None)
    if logs is None:
        logs = _local.logs = []
    return logs


def deferring(log: Deferring) -> None:
    """``log`` holds a commit of this thread's for later."""
    logs = _open()
    if not any(x is log for x in logs):
        logs.append(log)


def settled(log: Deferring) -> None:
    """``log`` holds no deferred commit of this thread's any more (committed or rolled back)."""
    logs = _open()
    logs[:] = [x for x in logs if x is not log]


def pending() -> bool:
    """True while this thread has a commit deferred on some log."""
    return bool(getattr(_local, "logs", None))


def settle() -> None:
    """Commit what this thread deferred, on every log: called before anything goes over the network. Raises
    what the commit raises (a lost leadership, a database error): then nothing is sent."""
    for log in list(getattr(_local, "logs", None) or ()):
        log.flush()
