"""The `log` command and every subcommand of it: verify, export, archive, segments, prune, migrate, compact,
search and rebuild."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from agent.cli import args as args_
from agent.cli import output
from agent.cli.parser import PAGE_SIZES
from agent.config import LogLocation, PgTarget, find_secret, is_pg_url
from agent.errors import ConfigError, FleetAgentError, LockError, LogError, UsageError
from agent.store.db import PAGE_SIZE, sqlite3

if TYPE_CHECKING:  # what export, archive, migrate and compact use is imported when they run: search reads only
    from agent.runtime.app import App
    from agent.store.segments import Remote

# ------------------------------------------------------------------ verify, search, rebuild


def _parse_anchor(v: str | None) -> tuple[int, str] | None:
    if v is None:
        return None
    seq, _, h = v.partition(":")
    h = h.strip().lower()
    if not seq.strip().isdigit() or len(h) != 64 or any(c not in "0123456789abcdef" for c in h):
        raise UsageError(f"--head {v!r} is not SEQ:HASH; write a seq number and a 64-hex-digit hash, as head= of "
                         "the daemon's 'tick' log line prints them")
    return int(seq), h


def cmd_log_verify(args: argparse.Namespace, app: App) -> int:
    anchor = _parse_anchor(args.head)
    r = app.log.verify(anchor=anchor)
    complete = r.ok and not r.warnings
    if args.json:
        output.out(json.dumps({**r.__dict__, "warnings": list(r.warnings)}))
        return 0 if complete else 1
    for w in r.warnings:
        output.out(f"WARNING: {w}")
    if not r.ok:
        output.out(f"FAILED at seq {r.first_bad_seq}: {r.reason}")
    elif r.warnings:
        output.out(f"incomplete: the chain links up to seq {r.head_seq} ({r.checked} events), but the head file is "
                   f"missing; check against a head recorded elsewhere with --head SEQ:HASH (the daemon logs "
                   f"head= on every 'tick' line)")
    else:
        against = f" and matches the recorded head {anchor[0]}" if anchor else ""
        output.out(f"ok: {r.checked} events, chain verifies up to seq {r.head_seq}{against} "
                   f"(head {r.head_seq}:{r.head_hash})")
    return 0 if complete else 1


def cmd_log_search(args: argparse.Namespace, app: App) -> int:
    hits = app.log.search(" ".join(args.query), limit=args.limit)
    if args.json:
        output.out(output.json_text([{"seq": e.seq, "ts": e.ts, "kind": e.kind, "tick": e.tick, "snippet": snip}
                                     for e, snip in hits], indent=2))
        return 0
    for e, snip in hits:
        output.out(f"#{e.seq} {e.ts[:19]} {e.kind}: {output.line(snip)}")
    if not hits:
        output.out("no matches")
    return 0


def cmd_log_rebuild(args: argparse.Namespace, app: App) -> int:
    if args.check:
        diffs = app.log.rebuild_check()
        if args.json:
            output.out(output.json_text({"ok": not diffs, "differences": diffs}, indent=2))
            return 0 if not diffs else 1
        for d in diffs:
            output.out(d)
        output.out("read models match the log" if not diffs else f"{len(diffs)} differences")
        return 0 if not diffs else 1
    if args.json:
        raise UsageError("log rebuild: --json goes with --check (a rebuild changes the read models; it is not a read)")
    app.log.rebuild()
    output.out("read models rebuilt from the log")
    return 0


# ------------------------------------------------------------------ export


def cmd_log_export(args: argparse.Namespace, app: App) -> int:
    from agent.runtime.export import Inputs, Selection, export_events, export_training, metadata_path

    since, since_ts = args_.seq_or_when(args.since, "--since") if args.since is not None else (0, None)
    sel = Selection(tuple(args.kind or ()), since, since_ts)
    dest = Path(args.output) if args.output else None
    if any(not k.strip() for k in args.kind or ()):
        raise UsageError("--kind '' names no kind; write a kind like tool.result, or a family like 'tool.'")
    if not args.training and (args.metadata or args.no_metadata):
        raise UsageError("--metadata and --no-metadata go with --training (plain events carry their own fields); "
                         "drop them, or add --training")
    if args.metadata and not Path(args.metadata).parent.is_dir():
        raise UsageError(f"--metadata {args.metadata}: {Path(args.metadata).parent} is not a directory; create it "
                         "or name another place")
    if args.training:
        if args.format != "jsonl" or args.kind:
            raise UsageError("--training writes fine-tuning examples as JSON lines; drop --format and --kind")
        inputs = Inputs(app.prompts, app.settings.context, app.policy_dict(), app.tool_specs(),
                        app.settings.model.name)
        meta = None if args.no_metadata else Path(args.metadata) if args.metadata else \
            metadata_path(dest) if dest is not None else None
        r = export_training(app.log, inputs, dest, sys.stdout, sel=sel, metadata=meta, cache=app.projection_cache)
        skipped = f"; {len(r.unreproducible)} requests did not re-derive (run 'fleet-agent replay --verify')" \
            if r.unreproducible else ""
        where = f"; metadata in {meta}" if meta is not None else ""
        if args.json:
            sys.stderr.write(output.json_text({
                "examples": r.written, "with_blocked": r.with_blocked, "overridden": r.overridden,
                "unreproducible": len(r.unreproducible), "path": str(dest) if dest else None,
                "metadata": str(meta) if meta else None}, sort_keys=True) + "\n")
        else:
            sys.stderr.write(f"exported {r.written} examples ({r.with_blocked} with policy-blocked calls), left out "
                             f"{r.overridden} overridden answers{skipped}{where}\n")
        return 1 if r.unreproducible else 0
    n = export_events(app.log, sel, args.format, dest, sys.stdout)
    if dest is not None:
        output.out(output.json_text({"events": n, "path": str(dest), "format": args.format}, sort_keys=True)
                   if args.json else f"exported {n} events to {dest}")
    return 0


# ------------------------------------------------------------------ archive, segments, prune


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


# ------------------------------------------------------------------ migrate


def _location(app: App, value: str | None, flag: str) -> LogLocation:
    """The log a --from / --to value names: the config's own (None), a postgresql:// URL (this fleet, the
    password from storage.password_*), or a SQLite file path."""
    s = app.settings
    if value is None:
        return s.log_target(app.env)
    if is_pg_url(value):
        try:
            return PgTarget(value, s.agent_id, password=find_secret("storage.password", s.storage.password_ref, s,
                                                                    app.env), state_dir=s.data_path)
        except ConfigError as e:
            raise UsageError(f"log migrate {flag}: {str(e).removeprefix('storage.url: ')}") from None
    if "://" in value:
        raise UsageError(f"log migrate {flag}: {value.split('://', 1)[0]}:// is not a database fleet-agent can use; "
                         "give a SQLite file path or postgresql://USER@HOST:PORT/DATABASE")
    p = Path(value).expanduser().resolve()
    if flag == "--to" and not p.parent.is_dir():  # a mistyped directory is not made up on the spot
        raise UsageError(f"log migrate --to {value}: {p.parent} is not a directory; create it first, or name a file "
                         "in an existing directory")
    if flag == "--from" and not p.is_file():
        raise UsageError(f"log migrate --from {value}: no such file; name the SQLite file the log is in")
    return p


def cmd_log_migrate(args: argparse.Namespace, app: App) -> int:
    from agent.store.migrate import migrate

    source = _location(app, args.source, "--from")
    target = _location(app, args.to, "--to")
    if isinstance(source, Path) and isinstance(target, Path) and source == target.resolve():
        raise UsageError(f"log migrate --to {args.to}: that is the log itself; name a new file or a PostgreSQL "
                         "database to copy it into")
    r = migrate(source, target)
    if args.json:
        output.out(output.json_text(asdict(r), sort_keys=True))
        return 0
    output.out(f"migrated {r.events} events from {output.line(r.source)} to {output.line(r.target)}: both verify "
               f"to head {r.head_seq}:{r.head_hash}; read models rebuilt and checked")
    output.out("next: stop the daemon, set storage.url to the new location, start it again")
    return 0


# ------------------------------------------------------------------ compact


def cmd_log_compact(args: argparse.Namespace, app: App) -> int:
    from agent.runtime.lock import FleetLock

    """Rewrite the SQLite database file with the page size a new database gets (daemon stopped). A database
    keeps the page size it was created with; VACUUM rewrites every row as it is, so the events, their hashes
    and the head file stay valid."""
    if args.page_size not in PAGE_SIZES:
        raise UsageError(f"log compact --page-size {args.page_size}: not a page size SQLite takes here; give one of "
                         f"{', '.join(map(str, PAGE_SIZES))} (default {PAGE_SIZE})")
    if app.settings.storage.is_pg:
        raise FleetAgentError(f"log compact rewrites a SQLite file; this log is in PostgreSQL "
                              f"({app.settings.log_location}): use the server's VACUUM")
    try:
        lock = FleetLock(app.settings.data_path).acquire()
    except LockError as e:
        raise FleetAgentError(f"log compact refused: {e}. The rewrite needs the database to itself: stop the "
                              "daemon (systemctl stop fleet-agent), compact, then start it") from None
    path = app.settings.db_path
    try:
        before, old = path.stat().st_size, app.log.store.page_size()
        try:
            app.log.store.compact(args.page_size)
        except sqlite3.Error as e:
            raise LogError(f"log compact: {path} was left as it was ({e}); close every other fleet-agent command "
                           "using it and run again") from e
        after, new = path.stat().st_size, app.log.store.page_size()
    finally:
        lock.release()
    if args.json:
        output.out(json.dumps({"path": str(path), "bytes_before": before, "bytes_after": after,
                               "page_size_before": old, "page_size": new}, sort_keys=True))
    else:
        output.out(f"compacted {output.line(str(path))}: {before:,} -> {after:,} bytes, pages of {old:,} -> "
                   f"{new:,} bytes")
    return 0
