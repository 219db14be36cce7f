"""`log migrate`: copy the event log between SQLite and PostgreSQL, chain and all, verified on both sides."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from agent.cli import output
from agent.errors import ConfigError, UsageError
from agent.record import asdict
from agent.runtime.app import App
from agent.store.target import LogLocation, PgTarget, is_pg_url


def _location(app: App, value: str | None, flag: str) -> LogLocation:
    """The log a --from / --to value names: the config's own (None), a postgresql:// URL (this fleet, the
    password from storage.password_*), or a SQLite file path."""
    s = app.settings
    if value is None:
        return s.log_target(app.env)
    if is_pg_url(value):
        from agent.config import find_secret

        try:
            return PgTarget(value, s.agent_id, password=find_secret("storage.password", s.storage.password_ref, s,
                                                                    app.env), state_dir=s.data_path)
        except ConfigError as e:
            raise UsageError(f"log migrate {flag}: {str(e).removeprefix('storage.url: ')}") from None
    if "://" in value:
        raise UsageError(f"log migrate {flag}: {value.split('://', 1)[0]}:// is not a database fleet-agent can use; "
                         "give a SQLite file path or postgresql://USER@HOST:PORT/DATABASE")
    return Path(value).expanduser().resolve()


def cmd_log_migrate(args: argparse.Namespace, app: App) -> int:
    from agent.store.migrate import migrate

    source = _location(app, args.source, "--from")
    target = _location(app, args.to, "--to")
    r = migrate(source, target)
    if args.json:
        output.out(output.json_text(asdict(r), sort_keys=True))
        return 0
    output.out(f"migrated {r.events} events from {output.line(r.source)} to {output.line(r.target)}: both verify "
               f"to head {r.head_seq}:{r.head_hash}; read models rebuilt and checked")
    output.out("next: stop the daemon, set storage.url to the new location, start it again")
    return 0


def add_log_migrate(lsub: argparse._SubParsersAction[Any]) -> None:
    """`log migrate`, under the `log` command."""
    s = lsub.add_parser("migrate", help="copy the log to PostgreSQL or SQLite, chain and all (verified)",
                        description="Copy this fleet's event log, row for row with its hash chain, into an empty "
                        "log: a SQLite file or a postgresql:// database (the password from storage.password_env / "
                        "_file / _credential). The source must verify; the target must hold no events; the copy "
                        "is verified against the source's head and its read models against a rebuild. Stop the "
                        "daemon first, then point storage.url at the target.")
    s.add_argument("--to", required=True, metavar="URL", help="the target: a new SQLite file path or "
                   "postgresql://USER@HOST:PORT/DATABASE")
    s.add_argument("--from", dest="source", metavar="URL", help="the source (default: storage.url of the config)")
    s.add_argument("--json", action="store_true", help="print the result as JSON")
    s.set_defaults(func=cmd_log_migrate)
