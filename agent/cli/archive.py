"""The log's storage tiers: `log archive` (old months into sealed segments), `log segments` (what is
archived, and where), `log prune` (delete local segment files that have a verified copy elsewhere)."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent.cli import args as args_
from agent.cli import output
from agent.errors import UsageError
from agent.record import asdict
from agent.runtime.app import App
from agent.store.segments import Remote


def _now(app: App) -> datetime:
    return datetime.fromtimestamp(app.clock(), UTC)


def _remote(app: App) -> Remote | None:
    return app.archive_remote() if app.settings.storage.archive_url else None


def cmd_log_archive(args: argparse.Namespace, app: App) -> int:
    from agent.store import archive

    older = args.older_than if args.older_than is not None else app.settings.storage.archive_after
    if older is None:
        raise UsageError("storage.archive_after is not set; set it in the config (e.g. 90d) or pass "
                         "--older-than 90d")
    r = archive.archive(app.log, older_than=float(older), now=_now(app), remote=None if args.dry_run else _remote(app),
                        dry_run=args.dry_run)
    if args.vacuum and not args.dry_run and r.sealed:
        app.log.store.vacuum()
    if args.json:
        output.out(output.json_text({"dry_run": args.dry_run, "before_ts": r.plan.before_ts,
                                     "covered_to": r.plan.covered_to, "cut_seq": r.plan.cut_seq,
                                     "months": [asdict(m) for m in r.plan.months],
                                     "sealed": [asdict(s) for s in r.sealed]}, sort_keys=True))
        return 0
    if not r.plan.months:
        output.out(f"nothing to archive: no whole month before {r.plan.before_ts[:19]}Z is covered by a summary "
                   f"(the newest covers up to seq {r.plan.covered_to})")
        return 0
    if args.dry_run:
        for m in r.plan.months:
            output.out(f"would seal {m.month}: seq {m.first_seq}..{m.last_seq} ({m.events:,} events)")
        output.out(f"{r.plan.events:,} events in {len(r.plan.months)} months; nothing was changed (drop --dry-run)")
        return 0
    for s in r.sealed:
        where = f", copy {output.line(s.copy_url)}" if s.copy_url else ""
        output.out(f"sealed {s.name}: seq {s.first_seq}..{s.last_seq} ({s.events:,} events), {s.raw_bytes:,} -> "
                   f"{s.bytes:,} bytes, sha256 {s.sha256[:16]}…{where}")
    output.out(f"archived {r.plan.events:,} events into {len(r.sealed)} segments in "
               f"{output.line(str(app.log.segment_files.dir))} ({r.raw_bytes:,} bytes of rows in {r.bytes:,})")
    return 0


def cmd_log_segments(args: argparse.Namespace, app: App) -> int:
    segs = app.log.store.segments()
    if args.json:
        output.out(output.json_text([asdict(s) for s in segs], sort_keys=True))
        return 0
    if not segs:
        output.out("no archived segments: every event is in the database")
    for s in segs:
        state = f"pruned here; copy {output.line(s.copy_url or '')}" if s.pruned_ts else (
            f"local + copy {output.line(s.copy_url)}" if s.copy_url else "local")
        output.out(f"{s.name}: seq {s.first_seq}..{s.last_seq} ({s.events:,} events, {s.first_ts[:10]}..{s.last_ts[:10]}),"
                   f" {s.bytes:,} bytes, {state}")
    return 0


def cmd_log_prune(args: argparse.Namespace, app: App) -> int:
    from agent.store import archive

    before = args_.parse_when(args.before, _now(app))
    backup = Path(args.backup) if args.backup else None
    if backup is not None and not backup.is_file():
        raise UsageError(f"--backup {args.backup}: no such file; name a database 'fleet-agent backup' wrote")
    r = archive.prune(app.log, before_ts=before, now=_now(app), remote=None if backup else _remote(app),
                      backup=backup, yes=args.yes)
    if args.json:
        output.out(output.json_text({"dry_run": r.dry_run, "bytes": r.bytes,
                                     "segments": [s.name for s in r.pruned]}, sort_keys=True))
        return 0
    verb = "would delete" if r.dry_run else "deleted"
    for s in r.pruned:
        output.out(f"{verb} {s.name} (seq {s.first_seq}..{s.last_seq}, {s.bytes:,} bytes)")
    if not r.pruned:
        output.out(f"no local segment ends before {before[:19]}Z")
    elif r.dry_run:
        output.out("nothing was deleted: run again with --yes (each file goes only after its copy elsewhere "
                   "reads back with the same sha256)")
    return 0


def add_log_commands(lsub: argparse._SubParsersAction[Any]) -> None:
    """`log archive`, `log segments` and `log prune`, under the `log` command."""
    s = lsub.add_parser("archive", help="move old months of events into sealed, compressed segment files",
                        description="Move every calendar month whose events are all older than "
                        "storage.archive_after and covered by a summary into a sealed zstd segment beside the "
                        "database (and its copy at storage.archive_url). Every read command still reads them; "
                        "the chain verifies across them. Crash-safe: the file is written and read back before "
                        "one transaction records it and removes the rows.")
    s.add_argument("--dry-run", action="store_true", help="only say which months would move")
    s.add_argument("--older-than", type=args_.span, metavar="SPAN",
                   help="instead of storage.archive_after, e.g. 90d")
    s.add_argument("--vacuum", action="store_true", help="then rewrite the database file to its new size "
                   "(VACUUM; holds the write lock meanwhile)")
    s.add_argument("--json", action="store_true", help="print the result as JSON")
    s.set_defaults(func=cmd_log_archive)
    s = lsub.add_parser("segments", help="list the archived segments and where their copies are",
                        description="Every sealed segment: its seq and time range, size, and whether the file is "
                        "here, copied elsewhere, or pruned here.")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(func=cmd_log_segments)
    s = lsub.add_parser("prune", help="delete local segment files that have a verified copy elsewhere",
                        description="Delete the local files of segments whose events all precede --before, each "
                        "only after its copy on storage.archive_url (written first when missing) or beside a "
                        "backup (--backup) reads back with its sha256. Without --yes nothing is deleted. The "
                        "stubs stay: reads and verify fetch the copy.")
    s.add_argument("--before", required=True, help="segments ending before this time: ISO 8601, 90d, ...")
    s.add_argument("--backup", metavar="PATH", help="a database 'fleet-agent backup' wrote, whose segment copies count")
    s.add_argument("--yes", action="store_true", help="really delete")
    s.add_argument("--json", action="store_true", help="print the result as JSON")
    s.set_defaults(func=cmd_log_prune)
