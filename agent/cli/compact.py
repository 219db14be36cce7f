"""`log compact`: rewrite the SQLite database file, with the page size a new database gets (daemon stopped).

A database keeps the page size it was created with; one created before 8 KiB pages were the default (4 KiB)
converts here. VACUUM rewrites every row as it is: the events, their hashes and the head file stay valid.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from agent.cli import output
from agent.errors import FleetAgentError, LockError, LogError, UsageError
from agent.runtime.app import App
from agent.runtime.lock import FleetLock
from agent.store.db import PAGE_SIZE, sqlite3

PAGE_SIZES = (4096, 8192, 16384, 32768, 65536)


def cmd_log_compact(args: argparse.Namespace, app: App) -> int:
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


def add_log_compact(lsub: argparse._SubParsersAction[Any]) -> None:
    """`log compact`, under the `log` command."""
    s = lsub.add_parser("compact", help="rewrite the database file, converting it to larger pages (daemon stopped)",
                        description="Rewrite the SQLite database file (VACUUM): every row as it is, free pages "
                        f"dropped, pages of --page-size bytes (default {PAGE_SIZE}, what 'fleet-agent init' gives a "
                        "new database; one created with 4 KiB pages converts here). Needs the database to itself: "
                        "refused while a daemon or a tick holds the lock.")
    s.add_argument("--page-size", type=int, default=PAGE_SIZE, metavar="BYTES",
                   help=f"bytes per page: {', '.join(map(str, PAGE_SIZES))} (default {PAGE_SIZE})")
    s.add_argument("--json", action="store_true", help="print the result as JSON")
    s.set_defaults(func=cmd_log_compact)
