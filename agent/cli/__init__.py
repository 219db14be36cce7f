"""The operator CLI: parse, call the library, print. One command per operator verb.

Exit codes: 0 ok, 1 failure, 2 usage or configuration error. Every command is one entry of the table in
``agent.cli.parser``, naming its handler ``"module:function"``; handlers are ``handler(args, app) -> int``.
This package imports only what parsing needs: a handler's module, the config and the App are imported when
a command runs, so ``--help`` and ``alerts list`` load no more than they use.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from agent.cli.parser import build_parser, parse_args

if TYPE_CHECKING:
    from agent.runtime.app import App

__all__ = ["build_parser", "entry", "main"]


# Commands that act on the fleet (or check the config for the daemon): they parse the config file themselves
# rather than read the validated-config cache (agent.config.load_partial).
ACTING = frozenset({"run", "tick", "destroy", "drain", "doctor"})


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit code."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    """Load the config and the App (none for a ``no_config`` command), run the handler; errors become one
    line on stderr and the exit code."""
    from agent import config, logsetup
    from agent.cli import output
    from agent.cli.args import check_utf8
    from agent.errors import FleetAgentError
    from agent.secrets import scrub

    app: App | None = None
    try:
        check_utf8(args)
        if getattr(args, "no_config", False):
            logsetup.configure("warning", "auto")
            return int(args.func(args, None))
        settings, broken = config.load_partial(args.config, from_cache=args.command not in ACTING)
        from agent.runtime.app import App

        app = App(settings, verify_writes=True, broken=broken)
        reads = getattr(args, "reads", None)
        # Parts a command may take as the daemon last put them in force when the file breaks them.
        fallback = [p for p in getattr(args, "in_force", ()) if p in broken]
        if fallback and config.needed({p: e for p, e in broken.items() if p not in fallback}, reads) is None:
            for p in app.sections_in_force(*fallback):
                del app.broken[p]
        refused = config.needed(app.broken, reads)
        if refused is not None:
            raise refused
        if broken:  # parts this command does not read: say so, and go on
            shown = sorted(broken.keys() - app.broken.keys())
            also = f"; it reads {' and '.join(shown)} as the daemon last put them in force" if shown else ""
            sys.stderr.write(f"fleet-agent: warning: {output.line(scrub('; '.join(map(str, broken.values()))))}; "
                             f"this command does not read that part of the config{also}; fix it before the daemon "
                             "reloads or restarts ('fleet-agent config check')\n")
        lg = config.LoggingSettings() if "logging" in broken else settings.logging
        logsetup.configure(lg.level if args.command in ("run", "tick") else "warning", lg.format)
        return int(args.func(args, app))
    except FleetAgentError as e:
        sys.stderr.write(f"fleet-agent: {output.text(scrub(str(e)))}\n")
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except OSError as e:  # a path the operator named: missing directory, no permission, disk full
        where = f"{e.filename}: " if e.filename else ""
        sys.stderr.write(f"fleet-agent: {output.text(where)}{e.strerror or e}; check the path and its permissions\n")
        return 1
    finally:
        if app is not None:
            app.close()


def entry() -> None:
    """The ``fleet-agent`` console script (and ``python -m agent.cli``)."""
    sys.exit(main())
