"""Shared pieces of the steering handlers (policy, pause, hosts, manual actions); their arguments are
``who`` and ``until`` in agent.cli.parser."""

from __future__ import annotations

import argparse
import sys

from agent.cli.feedback import invoking_user
from agent.errors import UsageError


def by(args: argparse.Namespace) -> str:
    return args.by if args.by is not None else invoking_user()


def reason(args: argparse.Namespace) -> str:
    r = (args.reason or "").strip()
    if not r:
        raise UsageError("--reason must say why (it is logged and shown to the agent)")
    if len(r) > 500:
        raise UsageError(f"--reason is {len(r)} characters; keep it under 500 (put detail in a knowledge file)")
    return r


def confirm(args: argparse.Namespace, question: str) -> None:
    """Go on with --yes, or when the operator answers y on a terminal; else a UsageError."""
    if args.yes:
        return
    if not sys.stdin.isatty():
        raise UsageError(f"{question}: pass --yes to confirm (standard input is not a terminal)")
    answer = input(f"{question} [y/N] ").strip().lower()
    if answer not in ("y", "yes"):
        raise UsageError("not confirmed; nothing was done")
