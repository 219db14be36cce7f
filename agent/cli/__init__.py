"""The operator CLI: parse, call the library, print. One command per operator verb.

Exit codes: 0 ok, 1 failure, 2 usage or configuration error. Each command group lives in a small module
with a ``register(subparsers)`` function (``agent.cli.parser`` lists them); handlers are
``handler(args, app) -> int``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from agent import config, logsetup
from agent.cli import output
from agent.cli.args import check_utf8
from agent.cli.thread import not_before_first
from agent.errors import FleetAgentError
from agent.runtime.app import App
from agent.secrets import scrub

__all__ = ["build_parser", "entry", "main", "not_before_first"]


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser, every command (``agent.cli.parser``)."""
    # agent.runtime.status imports agent.cli.output, and the commands import the runtime: the package
    # itself imports no command module, so importing agent.cli.output never imports them all.
    from agent.cli import parser

    return parser.build_parser()


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit code."""
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    """Load the config and the App (none for a ``no_config`` command), run the handler; errors become one
    line on stderr and the exit code."""
    handler: Callable[[argparse.Namespace, App | None], int] = args.func
    app: App | None = None
    try:
        check_utf8(args)
        if getattr(args, "no_config", False):
            logsetup.configure("warning", "auto")
            return handler(args, None)
        settings = config.load(args.config)
        logsetup.configure(settings.logging.level if args.command in ("run", "tick") else "warning",
                           settings.logging.format)
        app = App(settings)
        return handler(args, app)
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
