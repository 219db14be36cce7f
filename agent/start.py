"""The ``fleet-agent`` console script. Its first act, before anything heavy is imported, makes SIGTERM a
clean stop: the daemon installs its own handlers only once it is up (config read, log opened and
verified), and until then the default action would kill the process mid-way with no exit code of its own.

A stop that arrives that early ends ``run`` with 0 (nothing had started; what was opened is closed and a
write under way rolls back) and any other command with 143, 128 + SIGTERM (it did not finish).
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from types import FrameType

# Options of the top-level parser that take a value (``--config FILE``).
_VALUED = {"--config"}
# The stops _stop_before_start raised, to know them again inside another exception.
_RAISED: list[SystemExit] = []


def command(argv: list[str]) -> str | None:
    """The command word of a ``fleet-agent`` argument list (``run`` in ``--config c.yaml run``)."""
    skip = False
    for a in argv:
        if skip:
            skip = False
        elif a in _VALUED:
            skip = True
        elif not a.startswith("-"):
            return a
    return None


def _stop_before_start(signum: int, _frame: FrameType | None) -> None:
    stop = SystemExit(0 if command(sys.argv[1:]) == "run" else 128 + signum)
    _RAISED.append(stop)
    raise stop


def install() -> None:
    """SIGTERM raises SystemExit until the daemon (or ``web``) installs handlers of its own."""
    signal.signal(signal.SIGTERM, _stop_before_start)


def _stop_within(e: BaseException | None) -> SystemExit | None:
    """The early stop ``e`` is, or carries as its cause or context."""
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, SystemExit) and any(e is s for s in _RAISED):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


def guarded(run: Callable[[], int]) -> int:
    """``run()``, an early stop ending it as a stop however it surfaces: landing while a module is imported, the
    SystemExit can come out wrapped (Python 3.11 turns one raised in a class attribute's ``__set_name__`` into a
    RuntimeError), and would otherwise end the command with a traceback and exit code 1."""
    try:
        return run()
    except Exception as e:
        stop = _stop_within(e)
        if stop is None:
            raise
        raise SystemExit(stop.code) from None


def _main() -> int:
    from agent.cli import main

    return main()


def entry() -> None:
    install()
    sys.exit(guarded(_main))
