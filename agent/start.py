"""The ``fleet-agent`` console script. Its first act, before anything heavy is imported, makes SIGTERM a
clean stop: the daemon installs its own handlers only once it is up (config read, log opened and
verified), and until then the default action would kill the process mid-way with no exit code of its own.

A stop that arrives that early ends ``run`` with 0 (nothing had started; what was opened is closed and a
write under way rolls back) and any other command with 143, 128 + SIGTERM (it did not finish).
"""

from __future__ import annotations

import signal
import sys
from types import FrameType

# Options of the top-level parser that take a value (``--config FILE``).
_VALUED = {"--config"}


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
    raise SystemExit(0 if command(sys.argv[1:]) == "run" else 128 + signum)


def install() -> None:
    """SIGTERM raises SystemExit until the daemon (or ``web``) installs handlers of its own."""
    signal.signal(signal.SIGTERM, _stop_before_start)


def entry() -> None:
    install()
    from agent.cli import main

    sys.exit(main())
