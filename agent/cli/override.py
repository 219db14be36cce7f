"""`override`: mark a model answer the operator overrode, so training exports (`log export --training`)
leave it out."""

from __future__ import annotations

import argparse

from agent.cli import args as args_
from agent.cli import output
from agent.cli.feedback import invoking_user
from agent.runtime.app import App
from agent.runtime.export import mark_overridden


def cmd_override(args: argparse.Namespace, app: App) -> int:
    e = mark_overridden(app.log, args.response_seq, args.by or invoking_user(), args.note)
    output.out(f"model answer #{args.response_seq} marked overridden (#{e.seq}); 'log export --training' leaves "
               "it out")
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("override", help="mark a model answer as overridden (left out of training exports)",
                       description="Record that you overrode a model answer (a model.response seq, as 'thread "
                       "show --kind model.response' lists them): 'log export --training' leaves it out. The "
                       "agent is not told; use 'say' for that.")
    s.add_argument("response_seq", type=args_.number, help="the model.response event's seq")
    s.add_argument("--note", help="why (kept in the log)")
    s.add_argument("--by", help="who you are (default: $SUDO_USER or your login name)")
    s.set_defaults(func=cmd_override)
