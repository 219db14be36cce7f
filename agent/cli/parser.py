"""The command-line parser (argparse). Each command group's module adds its own commands (``register``);
handlers are ``handler(args, app) -> int``."""

from __future__ import annotations

import argparse
from typing import NoReturn

from agent import __version__
from agent.cli import (
    backup,
    completion,
    context,
    demo,
    feedback,
    fork,
    hosts,
    init,
    log,
    manual,
    ops,
    override,
    pause,
    policy,
    service,
    sim,
    spend,
    thread,
    web,
)

# The command groups in the order ``--help`` lists their commands.
GROUPS = (init, log, thread, sim, context, ops, feedback, policy, pause, hosts, manual, spend, fork, override,
          service, backup, demo, completion, web)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2
        self.exit(2, f"fleet-agent: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser: every command."""
    p = _Parser(prog="fleet-agent", description="Run a vast.ai GPU fleet with an LLM in the loop, on an "
                "append-only, replayable event log.")
    p.add_argument("--config", help="config file (default: $FLEET_AGENT_CONFIG, ./config.yaml, "
                   "/etc/fleet-agent/config.yaml)")
    p.add_argument("--version", action="version", version=f"fleet-agent {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for group in GROUPS:
        group.register(sub)
    p.set_defaults(root_parser=p)  # completion and man read every command from it
    return p
