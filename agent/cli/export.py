"""The log as data: `log export` (JSON lines or Parquet; --training for fine-tuning examples) and
`override` (mark a model answer the operator overrode, so training exports leave it out)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from agent.cli import args as args_
from agent.cli import output
from agent.errors import UsageError
from agent.runtime.app import App


def _out(s: str = "") -> None:
    output.out(s)


def _since(v: str | None) -> tuple[int, str | None]:
    if v is None:
        return 0, None
    return args_.seq_or_when(v, "--since")


def cmd_log_export(args: argparse.Namespace, app: App) -> int:
    from agent.runtime.export import Inputs, Selection, export_events, export_training

    since, since_ts = _since(args.since)
    sel = Selection(tuple(args.kind or ()), since, since_ts)
    dest = Path(args.output) if args.output else None
    if args.training:
        if args.format != "jsonl" or args.kind:
            raise UsageError("--training writes fine-tuning examples as JSON lines; drop --format and --kind")
        inputs = Inputs(app.prompts, app.settings.context, app.policy_dict(), app.tool_specs(),
                        app.settings.model.name)
        r = export_training(app.log, inputs, dest, sys.stdout, sel=sel, metadata=not args.no_metadata,
                            cache=app.projection_cache)
        skipped = f"; {len(r.unreproducible)} requests did not re-derive (run 'fleet-agent replay --verify')" \
            if r.unreproducible else ""
        sys.stderr.write(f"exported {r.written} examples ({r.with_blocked} with policy-blocked calls), left out "
                         f"{r.overridden} overridden answers{skipped}\n")
        return 1 if r.unreproducible else 0
    n = export_events(app.log, sel, args.format, dest, sys.stdout)
    if dest is not None:
        _out(f"exported {n} events to {dest}")
    return 0


def add_log_export(lsub: argparse._SubParsersAction[Any]) -> None:
    """`log export`, under the `log` command."""
    s = lsub.add_parser("export", help="write events as JSON lines or Parquet (--training: fine-tuning examples)",
                        description="Export events (every field, hashes included) as JSON lines or a Parquet "
                        "table; or, with --training, each answered model request with its answer in the OpenAI "
                        "fine-tuning chat format (policy-blocked calls marked, overridden answers left out).")
    s.add_argument("--format", default="jsonl", help="jsonl (default) or parquet (needs the parquet extra)")
    s.add_argument("--kind", action="append", help="only this kind, or a family like 'tool.' (repeatable)")
    s.add_argument("--since", help="only events after this seq, or from this time (ISO 8601, now, 2h ago, "
                   "yesterday 15:45)")
    s.add_argument("--training", action="store_true", help="fine-tuning examples instead of events")
    s.add_argument("--no-metadata", action="store_true", help="with --training: only the format's own keys "
                   "(an answer with a policy-blocked call then gets weight 0)")
    s.add_argument("-o", "--output", help="file to write, replaced only when complete (default: stdout)")
    s.set_defaults(func=cmd_log_export)


def cmd_override(args: argparse.Namespace, app: App) -> int:
    from agent.cli.feedback import invoking_user
    from agent.runtime.export import mark_overridden

    e = mark_overridden(app.log, args.response_seq, args.by or invoking_user(), args.note)
    _out(f"model answer #{args.response_seq} marked overridden (#{e.seq}); 'log export --training' leaves it out")
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
