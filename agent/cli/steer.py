"""Shared pieces of the steering commands (policy, pause, hosts, spend, manual actions)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from agent.cli.feedback import invoking_user
from agent.errors import UsageError

BY_HELP = "who you are (default: $SUDO_USER or your login name)"


def sub(parent: Any, dest: str) -> Any:
    return parent.add_subparsers(dest=dest, metavar="SUBCOMMAND", required=True)


def by(args: argparse.Namespace) -> str:
    return args.by if args.by is not None else invoking_user()


def reason(args: argparse.Namespace) -> str:
    r = (args.reason or "").strip()
    if not r:
        raise UsageError("--reason must say why (it is logged and shown to the agent)")
    if len(r) > 500:
        raise UsageError(f"--reason is {len(r)} characters; keep it under 500 (put detail in a knowledge file)")
    return r


def add_who(p: argparse.ArgumentParser, *, reason_required: bool) -> None:
    p.add_argument("--reason", required=reason_required, help="why (logged; the agent sees it)")
    p.add_argument("--by", help=BY_HELP)


def add_until(p: argparse.ArgumentParser, what: str) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--for", dest="for_", metavar="DURATION", help=f"{what} for this long (30m, 4h, 7d, 2w)")
    g.add_argument("--until", metavar="TIME", help=f"{what} until this time (ISO 8601; naive = UTC)")


def confirm(args: argparse.Namespace, question: str) -> None:
    """Go on with --yes, or when the operator answers y on a terminal; else a UsageError."""
    if args.yes:
        return
    if not sys.stdin.isatty():
        raise UsageError(f"{question}: pass --yes to confirm (standard input is not a terminal)")
    answer = input(f"{question} [y/N] ").strip().lower()
    if answer not in ("y", "yes"):
        raise UsageError("not confirmed; nothing was done")
