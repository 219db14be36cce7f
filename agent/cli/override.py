"""`override`: mark a model answer the operator overrode, so training exports (`log export --training`)
leave it out."""

from __future__ import annotations

import argparse

from agent.cli import output
from agent.cli.feedback import invoking_user
from agent.runtime.app import App
from agent.runtime.export import mark_overridden


def cmd_override(args: argparse.Namespace, app: App) -> int:
    e = mark_overridden(app.log, args.response_seq, args.by or invoking_user(), args.note)
    output.out(f"model answer #{args.response_seq} marked overridden (#{e.seq}); 'log export --training' leaves "
               "it out")
    return 0
