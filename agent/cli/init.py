"""`init` (a config, the data directory, the database and the knowledge directory) and `config` (check,
show, diff)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from agent import config
from agent.cli import output
from agent.errors import ConfigError, FleetAgentError
from agent.runtime.app import App

EXAMPLE_KNOWLEDGE = """\
# Fleet notes

Plain text the agent reads at every tick. Edit it to steer the fleet:
pricing limits, hosts to avoid, runbooks. Changes reach the agent as
tagged messages in its conversation.

- Prefer RTX 4090 offers under $0.45/h with reliability above 0.97.
"""


# ------------------------------------------------------------------ init


def cmd_init(args: argparse.Namespace, _app: App | None) -> int:
    """Create a config (from the example), the data directory, the database and the knowledge directory;
    with ``--config FILE`` and no DIR, what an existing config names (the config is left as it is)."""
    try:
        if args.config and args.dir is None:
            if args.revoke:
                return _revoke(Path(args.config), args.revoke)
            return _init_from(Path(args.config), grant=args.grant)
        if args.grant or args.revoke:
            flag = "--grant" if args.grant else "--revoke"
            raise FleetAgentError(f"init {flag}: needs --config FILE whose storage.url names the PostgreSQL "
                                  "database (run it as the role that owns the schema)")
        return _init_dir(Path(args.dir or ".").resolve())
    except OSError as e:
        where = e.filename or "the directory"
        raise FleetAgentError(f"init: cannot create {where}: {e.strerror}; choose a directory the user running "
                              "fleet-agent can write, or create it with that owner first") from None


def _init_dir(root: Path) -> int:
    cfg = root / "config.yaml"
    if cfg.exists():
        raise FleetAgentError(f"{cfg} already exists; init refuses to overwrite it "
                              "(remove it, or pass another directory)")
    text = config.example_text()
    settings = config.parse(text, str(cfg))
    if settings.db_path.exists():
        raise FleetAgentError(f"{settings.db_path} already exists; init refuses to touch an existing database "
                              "(use --config with a config that names it, or pass another directory)")
    root.mkdir(parents=True, exist_ok=True)
    tmp = cfg.with_suffix(".yaml.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.chmod(tmp, 0o600)
    os.replace(tmp, cfg)
    output.out(f"created {cfg}")
    _init_data(settings)
    output.out(f"next: set VAST_API_KEY, edit {cfg}, then 'fleet-agent --config {cfg} doctor'")
    return 0


def _init_from(cfg: Path, *, grant: str | None = None) -> int:
    settings = config.load(str(cfg))
    if grant is not None and not settings.storage.is_pg:
        raise FleetAgentError(f"init --grant: {cfg} keeps the log in SQLite (storage.url); GRANTs are for a "
                              "PostgreSQL storage.url")
    _init_data(settings, grant=grant)
    output.out(f"next: 'fleet-agent --config {cfg} doctor'")
    return 0


def _revoke(cfg: Path, role: str) -> int:
    """Unbind ``role`` from the config's fleet (and revoke its grants when it runs no fleet any more); the
    database must exist already: revoking creates nothing."""
    settings = config.load(str(cfg))
    if not settings.storage.is_pg:
        raise FleetAgentError(f"init --revoke: {cfg} keeps the log in SQLite (storage.url); bindings and GRANTs "
                              "are for a PostgreSQL storage.url")
    from agent.store import pg  # psycopg: only with PostgreSQL storage

    app = App(settings)
    try:
        for line in pg.apply_revoke(app.log, role):
            output.out(line)
        if not pg.bindings(pg._raw(app.log), role):
            held = pg.held_grants(app.log, role)
            if held:
                output.out(f"note: the role {role} still holds {', '.join(held[:4])} through PUBLIC or a role it "
                           "is a member of; it is bound to no fleet, so it reads and writes no fleet's rows")
    finally:
        app.close()
    output.out(f"note: a daemon already running as {role} for {settings.agent_id!r} sees none of its rows from now "
               f"on: its next append fails; end its sessions sooner with pg_terminate_backend")
    return 0


def _init_data(settings: config.Settings, *, grant: str | None = None) -> None:
    """The database (refusing an existing one) and the knowledge directory with its example file."""
    app = App(settings)
    try:
        app.init_database(exist_ok=grant is not None)  # a role may be granted a fleet that already runs
        if grant is not None:
            from agent.store import pg  # psycopg: only with PostgreSQL storage

            for stmt in pg.apply_grants(app.log, grant):
                output.out(stmt)
            others = [f for f in pg.bindings(pg._raw(app.log), grant) if f != settings.agent_id]
            if others:
                output.out(f"note: the role {grant} is also bound to {', '.join(others)}: it reads and writes those "
                           "fleets' rows too; give each fleet a role of its own to keep them apart")
    finally:
        app.close()
    output.out(f"created {settings.log_location}")
    kdir = settings.knowledge_path
    kdir.mkdir(parents=True, exist_ok=True)
    example = kdir / "fleet-notes.md"
    if not example.exists():
        example.write_text(EXAMPLE_KNOWLEDGE, encoding="utf-8")
        output.out(f"created {example}")


# ------------------------------------------------------------------ config


def cmd_config_check(args: argparse.Namespace, app: App) -> int:
    s = app.settings
    problem = config.budget_problem(s.context)
    if problem is not None:
        raise ConfigError(f"{s.source_path}: {problem}")
    vast = s.vast_api_key(app.env)
    model = s.model_api_key(app.env) if s.model.provider == "openai" else None
    if args.json:
        output.out(output.json_text({"ok": True, "path": str(s.source_path), "config_hash": s.config_hash(),
                                     "vast_key_from": vast.origin, "model_key_from": model.origin if model else None},
                                    sort_keys=True))
        return 0
    output.out(f"{s.source_path}: ok (config hash {s.config_hash()[:12]})")
    return 0


def cmd_config_show(args: argparse.Namespace, app: App) -> int:
    output.out(output.json_text(app.settings.to_dict(), indent=2, sort_keys=True, default=str))
    return 0


def cmd_config_diff(args: argparse.Namespace, app: App) -> int:
    """The config file against the configuration the daemon last put in force (start or reload)."""
    from agent.service.daemon import effective  # the daemon's scheduler and tick: not for every command

    rec = next(iter(app.log.read(0, kinds=["config.applied", "config.changed"], newest_first=True, limit=1)), None)
    file = effective(app.settings)
    if rec is None or rec.payload.get("settings") is None:
        if args.json:
            output.out(output.json_text({"in_force": None, "differences": None}, sort_keys=True))
        else:
            output.out("no configuration in force is recorded yet (the daemon records it when it starts or reloads)")
        return 0
    force = rec.payload["settings"]
    diffs = [{"key": k, "in_force": force.get(k), "file": file.get(k)} for k in sorted(force.keys() | file.keys())
             if force.get(k) != file.get(k)]
    since = {"seq": rec.seq, "ts": rec.ts, "kind": rec.kind, "config_hash": rec.payload.get("config_hash")}
    if args.json:
        output.out(output.json_text({"in_force": since, "file": str(app.settings.source_path), "differences": diffs},
                                    indent=2, sort_keys=True))
        return 1 if diffs else 0
    output.out(f"in force since {rec.ts[:19]}Z ({rec.kind}, event #{rec.seq}) vs {app.settings.source_path}:")
    for d in diffs:
        output.out(f"  {d['key']}: {json.dumps(d['in_force'])} (in force) -> {json.dumps(d['file'])} (file)")
    output.out("  no differences" if not diffs else
               f"{len(diffs)} differences; 'systemctl reload fleet-agent' (SIGHUP) puts the file in force")
    return 1 if diffs else 0
