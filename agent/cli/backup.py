"""`backup PATH` (a verified copy, while the daemon runs) and `restore PATH` (with the daemon stopped)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from agent.cli import output
from agent.errors import FleetAgentError, LockError, UsageError
from agent.runtime.app import App
from agent.runtime.lock import FleetLock
from agent.store import backup as backup_


def _not_on_postgres(app: App, what: str) -> None:
    if app.settings.storage.is_pg:
        raise FleetAgentError(f"{what} copies a SQLite file; this log is in PostgreSQL ({app.settings.log_location}): "
                              "back it up with the server's tools (pg_dump), or copy this fleet's log into a SQLite "
                              "file with 'fleet-agent log migrate --to FILE'")


def cmd_backup(args: argparse.Namespace, app: App) -> int:
    _not_on_postgres(app, "backup")
    if not args.path.strip():
        raise UsageError("backup needs a place: name a new file or a directory (e.g. /srv/backups/)")
    dest = backup_.backup_target(Path(args.path), app.settings.agent_id)
    r = backup_.backup(app.log, dest)
    if args.json:
        output.out(output.json_text(dataclasses.asdict(r), sort_keys=True))
    else:
        output.out(f"backup {output.line(r.path)}: {r.events} events, head {r.head_seq}:{r.head_hash}, verified "
                   f"({r.bytes:,} bytes; head file {output.line(r.path)}.head)")
    return 0


def cmd_restore(args: argparse.Namespace, app: App) -> int:
    _not_on_postgres(app, "restore")
    if not args.path.strip():
        raise UsageError("restore needs the file 'fleet-agent backup' wrote; name it")
    src = Path(args.path)
    if not src.is_file():  # before the lock: a mistyped name changes nothing, not even the lock file
        raise UsageError(f"no backup at {src}; name a file written by 'fleet-agent backup'")
    try:
        lock = FleetLock(app.settings.data_path).acquire()
    except LockError as e:
        raise FleetAgentError(f"restore refused: {e}. A running daemon would keep writing to the file being "
                              "replaced: stop it (systemctl stop fleet-agent), restore, then start it") from None
    try:
        r = backup_.restore(src, app.settings.db_path)
    finally:
        lock.release()
    if args.json:
        output.out(output.json_text(dataclasses.asdict(r), sort_keys=True))
        return 0
    output.out(f"restored {output.line(r.path)} from {output.line(src)}: {r.events} events verified, head "
               f"{r.head_seq}:{r.head_hash}")
    for p in r.kept_aside:
        output.out(f"  kept the replaced file as {output.line(p)}")
    return 0
