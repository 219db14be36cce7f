"""The operator CLI: parse, call the library, print. One command per operator verb.

Exit codes: 0 ok, 1 failure, 2 usage or configuration error. Each command group
lives in a small module with a ``register(subparsers)`` function; handlers are
``handler(args, app) -> int``.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from types import ModuleType

from agent import __version__
from agent.cli import args as args_
from agent.cli import output
from agent.errors import FleetAgentError, UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:  # a command loads only what it uses: the app, the config, the vocabulary on first use
    from pathlib import Path
    from typing import Any, NoReturn

    from agent import config
    from agent.app import App
    from agent.events import Event

# Command groups beyond the core ones below: the module agent.cli.<name> (with register(sub)) and the
# top-level commands it adds, in help order. A command's own module is the only one a run of it imports
# (tests/test_lean_commands.py checks the names against what each register() adds).
COMMAND_GROUPS: dict[str, tuple[str, ...]] = {
    "context": ("context", "replay"), "ops": ("tick",),
    "feedback": ("alerts", "knowledge", "say", "unpin", "directives"), "policy": ("policy",),
    "pause": ("pause", "resume"), "hosts": ("hosts",), "manual": ("instances", "destroy", "drain"),
    "spend": ("spend",), "fork": ("fork",), "export": ("override",), "service": ("run", "status", "doctor"),
    "backup": ("backup", "restore"), "demo": ("demo",), "completion": ("completion", "man"), "web": ("web",),
}
CORE_COMMANDS = ("init", "config", "log", "thread", "sim")
_OWNER = {command: group for group, commands in COMMAND_GROUPS.items() for command in commands}


def group_module(name: str) -> ModuleType:
    """The module ``agent.cli.<name>`` of one command group."""
    return importlib.import_module(f"agent.cli.{name}")


EXAMPLE_KNOWLEDGE = """\
# Fleet notes

Plain text the agent reads at every tick. Edit it to steer the fleet:
pricing limits, hosts to avoid, runbooks. Changes reach the agent as
tagged messages in its conversation.

- Prefer RTX 4090 offers under $0.45/h with reliability above 0.97.
"""


def _print(s: str = "") -> None:
    output.out(s)


# ------------------------------------------------------------------ init


def cmd_init(args: argparse.Namespace, _app: App | None) -> int:
    """Create a config (from the example), the data directory, the database and the knowledge directory;
    with ``--config FILE`` and no DIR, what an existing config names (the config is left as it is)."""
    from pathlib import Path

    try:
        if args.config and args.dir is None:
            return _init_from(Path(args.config), grant=args.grant)
        if args.grant:
            raise FleetAgentError("init --grant: needs --config FILE whose storage.url names the PostgreSQL "
                                  "database (run it as the role that owns the schema)")
        return _init_dir(Path(args.dir or ".").resolve())
    except OSError as e:
        where = e.filename or "the directory"
        raise FleetAgentError(f"init: cannot create {where}: {e.strerror}; choose a directory the user running "
                              "fleet-agent can write, or create it with that owner first") from None


def _init_dir(root: Path) -> int:
    from agent import config

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
    _print(f"created {cfg}")
    _init_data(settings)
    _print(f"next: set VAST_API_KEY, edit {cfg}, then 'fleet-agent --config {cfg} doctor'")
    return 0


def _init_from(cfg: Path, *, grant: str | None = None) -> int:
    from agent import config

    settings = config.load(str(cfg))
    if grant is not None and not settings.storage.is_pg:
        raise FleetAgentError(f"init --grant: {cfg} keeps the log in SQLite (storage.url); GRANTs are for a "
                              "PostgreSQL storage.url")
    _init_data(settings, grant=grant)
    _print(f"next: 'fleet-agent --config {cfg} doctor'")
    return 0


def _init_data(settings: config.Settings, *, grant: str | None = None) -> None:
    """The database (refusing an existing one) and the knowledge directory with its example file."""
    from agent.app import App

    app = App(settings)
    try:
        app.init_database()
        if grant is not None:
            from agent.store import pg

            for stmt in pg.apply_grants(app.log, grant):
                _print(stmt)
    finally:
        app.close()
    _print(f"created {settings.log_location}")
    kdir = settings.knowledge_path
    kdir.mkdir(parents=True, exist_ok=True)
    example = kdir / "fleet-notes.md"
    if not example.exists():
        example.write_text(EXAMPLE_KNOWLEDGE, encoding="utf-8")
        _print(f"created {example}")


# ------------------------------------------------------------------ config


def cmd_config_check(args: argparse.Namespace, app: App) -> int:
    s = app.settings
    vast = s.vast_api_key(app.env)
    model = s.model_api_key(app.env) if s.model.provider == "openai" else None
    if args.json:
        _print(output.json_text({"ok": True, "path": str(s.source_path), "config_hash": s.config_hash(),
                                 "vast_key_from": vast.origin, "model_key_from": model.origin if model else None},
                                sort_keys=True))
        return 0
    _print(f"{s.source_path}: ok (config hash {s.config_hash()[:12]})")
    return 0


def cmd_config_show(args: argparse.Namespace, app: App) -> int:
    _print(output.json_text(app.settings.to_dict(), indent=2, sort_keys=True, default=str))
    return 0


def cmd_config_diff(args: argparse.Namespace, app: App) -> int:
    """The config file against the configuration the daemon last put in force (start or reload)."""
    from agent.daemon import effective

    rec = next(iter(app.log.read(0, kinds=["config.applied", "config.changed"], newest_first=True, limit=1)), None)
    file = effective(app.settings)
    if rec is None or rec.payload.get("settings") is None:
        if args.json:
            _print(output.json_text({"in_force": None, "differences": None}, sort_keys=True))
        else:
            _print("no configuration in force is recorded yet (the daemon records it when it starts or reloads)")
        return 0
    force = rec.payload["settings"]
    diffs = [{"key": k, "in_force": force.get(k), "file": file.get(k)} for k in sorted(force.keys() | file.keys())
             if force.get(k) != file.get(k)]
    since = {"seq": rec.seq, "ts": rec.ts, "kind": rec.kind, "config_hash": rec.payload.get("config_hash")}
    if args.json:
        _print(output.json_text({"in_force": since, "file": str(app.settings.source_path), "differences": diffs},
                                indent=2, sort_keys=True))
        return 1 if diffs else 0
    _print(f"in force since {rec.ts[:19]}Z ({rec.kind}, event #{rec.seq}) vs {app.settings.source_path}:")
    for d in diffs:
        _print(f"  {d['key']}: {json.dumps(d['in_force'])} (in force) -> {json.dumps(d['file'])} (file)")
    _print("  no differences" if not diffs else
           f"{len(diffs)} differences; 'systemctl reload fleet-agent' (SIGHUP) puts the file in force")
    return 1 if diffs else 0


# ------------------------------------------------------------------ log


def _parse_anchor(v: str | None) -> tuple[int, str] | None:
    if v is None:
        return None
    seq, _, h = v.partition(":")
    h = h.strip().lower()
    if not seq.strip().isdigit() or len(h) != 64 or any(c not in "0123456789abcdef" for c in h):
        raise UsageError(f"--head {v!r} is not SEQ:HASH (a seq number and a 64-hex-digit hash, as the daemon's "
                         "'tick' log line prints them in head=)")
    return int(seq), h


def cmd_log_verify(args: argparse.Namespace, app: App) -> int:
    anchor = _parse_anchor(args.head)
    r = app.log.verify(anchor=anchor)
    complete = r.ok and not r.warnings
    if args.json:
        _print(json.dumps({**r.__dict__, "warnings": list(r.warnings)}))
        return 0 if complete else 1
    for w in r.warnings:
        _print(f"WARNING: {w}")
    if not r.ok:
        _print(f"FAILED at seq {r.first_bad_seq}: {r.reason}")
    elif r.warnings:
        _print(f"incomplete: the chain links up to seq {r.head_seq} ({r.checked} events), but the head file is "
               f"missing; check against a head recorded elsewhere with --head SEQ:HASH (the daemon logs "
               f"head= on every 'tick' line)")
    else:
        against = f" and matches the recorded head {anchor[0]}" if anchor else ""
        _print(f"ok: {r.checked} events, chain verifies up to seq {r.head_seq}{against} "
               f"(head {r.head_seq}:{r.head_hash})")
    return 0 if complete else 1


def first_event_ts(app: App) -> str | None:
    e = next(iter(app.log.read(0, limit=1)), None)
    return e.ts if e else None


def not_before_first(app: App, ts: str | None, flag: str) -> None:
    """Refuse a time before the log's first event: it would show an empty history, not an answer."""
    first = first_event_ts(app)
    if ts is not None and first is not None and ts < first:
        raise UsageError(f"{flag} {ts[:19]}Z is before the first event ({first[:19]}Z); the log holds nothing "
                         "then: use a later time ('fleet-agent thread show --limit 1' shows the first event)")


def cmd_log_search(args: argparse.Namespace, app: App) -> int:
    hits = app.log.search(" ".join(args.query), limit=args.limit)
    if args.json:
        _print(output.json_text([{"seq": e.seq, "ts": e.ts, "kind": e.kind, "tick": e.tick, "snippet": snip}
                                 for e, snip in hits], indent=2))
        return 0
    for e, snip in hits:
        _print(f"#{e.seq} {e.ts[:19]} {e.kind}: {output.line(snip)}")
    if not hits:
        _print("no matches")
    return 0


def cmd_log_rebuild(args: argparse.Namespace, app: App) -> int:
    if args.check:
        diffs = app.log.rebuild_check()
        if args.json:
            _print(output.json_text({"ok": not diffs, "differences": diffs}, indent=2))
            return 0 if not diffs else 1
        for d in diffs:
            _print(d)
        _print("read models match the log" if not diffs else f"{len(diffs)} differences")
        return 0 if not diffs else 1
    if args.json:
        raise UsageError("log rebuild: --json goes with --check (a rebuild changes the read models; it is not a read)")
    app.log.rebuild()
    _print("read models rebuilt from the log")
    return 0


# ------------------------------------------------------------------ thread


def describe(e: Event) -> str:
    """One readable line (or block) for an event."""
    from agent.events import render

    msg = render(e)
    p = e.payload
    if msg is not None:
        body = msg.get("content") or ""
        for c in msg.get("tool_calls") or ():
            body += f"\n  -> {c['function']['name']}({c['function']['arguments']})"
        return body.strip()
    if e.kind == "tool.called":
        key = f" key={p['idempotency_key']}" if p.get("idempotency_key") else ""
        return f"{p['name']}({p['arguments']}){key}"
    if e.kind == "policy.blocked":
        return f"BLOCKED {p['name']}: {p['rule']} {p.get('detail', '')}".strip()
    if e.kind == "model.request":
        m = p["manifest"]
        return f"request {p['request_hash'][:12]} ~{m.get('estimated_tokens', '?')} tokens"
    if e.kind == "context.compacted":
        return (f"compacted #{p.get('covered_from')}–#{p['covered_to']} ({p['method']}): "
                f"{p.get('tokens_before')} -> {p.get('tokens_after')} tokens")
    if e.kind == "tick.completed":
        return f"steps={p['steps']} usage={json.dumps(p.get('usage', {}), sort_keys=True)}"
    return json.dumps(p, sort_keys=True, ensure_ascii=False)[:400]


def _wanted(kinds: list[str] | None) -> Callable[[Event], bool]:
    def wanted(e: Event) -> bool:
        return kinds is None or any(e.kind == k or e.kind.startswith(k.rstrip(".*") + ".") for k in kinds)
    return wanted


def _thread_range(args: argparse.Namespace, app: App) -> tuple[int, str | None, str | None]:
    """``thread show``'s (since seq, since ts, until ts), each checked against the log."""
    since, since_ts = args_.seq_or_when(args.since, "--since") if args.since is not None else (0, None)
    until_ts = args_.parse_when(args.until) if args.until else None
    not_before_first(app, until_ts, "--until")
    last = app.log.last_seq()
    if since > last and not args.follow:
        raise UsageError(f"--since {since}: the log ends at seq {last}; use a smaller seq")
    return since, since_ts, until_ts


def _thread_events(args: argparse.Namespace, app: App) -> Iterator[Event]:
    """The events ``thread show`` reads before following, in seq order: every event in the range (the
    caller filters by kind), or with --tail only the newest N wanted ones."""
    since, since_ts, until_ts = _thread_range(args, app)
    if args.tail is None:
        yield from app.log.read(since, since_ts=since_ts, until_ts=until_ts)
        return
    wanted, picked = _wanted(args.kind or None), []
    for e in app.log.read(since, since_ts=since_ts, until_ts=until_ts, newest_first=True):
        if wanted(e):
            picked.append(e)
            if len(picked) >= args.tail:
                break
    yield from reversed(picked)


def cmd_thread_show(args: argparse.Namespace, app: App) -> int:
    wanted = _wanted(args.kind or None)

    def show(e: Event) -> None:
        if args.json:
            _print(output.json_text(e.to_dict(), sort_keys=True))
        else:
            tick = f" t{e.tick}" if e.tick is not None else ""
            _print(f"#{e.seq} {e.ts[:19]}Z {e.kind} [{e.source}{tick}]\n  " + describe(e).replace("\n", "\n  "))

    n = 0
    since = args_.seq_or_when(args.since, "--since")[0] if args.since is not None else 0
    last = app.log.last_seq() if args.tail is not None else since
    for e in _thread_events(args, app):
        last = max(last, e.seq)
        if wanted(e):
            show(e)
            n += 1
            if args.limit and n >= args.limit:
                return 0
    if args.follow:
        deadline = time.monotonic() + args.follow_for if args.follow_for else None
        try:
            for e in app.log.follow(last, stop=lambda: deadline is not None and time.monotonic() > deadline):
                if wanted(e):
                    show(e)
                    sys.stdout.flush()
        except KeyboardInterrupt:
            return 0
    return 0


# ------------------------------------------------------------------ sim


def cmd_sim(args: argparse.Namespace, _app: App | None) -> int:
    from agent.sim import serve_forever
    from agent.sim.realism import Realism

    realism = Realism(rate_interval=args.rate_interval, listing_lag=args.listing_lag, logs_delay=args.logs_delay,
                      unschedulable=args.unschedulable)
    serve_forever(port=args.port, seed=args.seed, speed=args.speed, state_file=args.state, api_key=args.api_key,
                  realism=realism)
    return 0


# ------------------------------------------------------------------ parser


def _columns() -> int:
    """``shutil.get_terminal_size().columns``, without importing shutil (and with it bz2, lzma and fnmatch)
    for every command: argparse's formatter asks for the width each time an argument is added."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
        columns = columns or 80
    return columns


class _Formatter(argparse.HelpFormatter):
    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        super().__init__(prog, indent_increment, max_help_position, _columns() - 2 if width is None else width)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:  # one line, exit 2
        self.exit(2, f"fleet-agent: error: {message} (see '{self.prog} --help')\n")


def _untranslated() -> None:
    """Let argparse skip gettext when there is no message catalog to translate from.

    argparse passes every heading and help string it makes through ``gettext.gettext``, which looks for
    a catalog on disk each time (``gettext.find``: the locale variables normalised, a stat per language):
    some fifty lookups, several milliseconds, for one group's parser. When no catalog exists for the
    current locale every lookup returns its message unchanged, so argparse's ``_`` becomes that; with a
    catalog it keeps translating."""
    import gettext

    domain = gettext.textdomain()
    localedir = gettext.bindtextdomain(domain)
    # (every catalog find() looks for is under localedir: without it, skip find's import of locale)
    if not os.path.isdir(localedir) or gettext.find(domain, localedir) is None:
        setattr(argparse, "_", str)  # noqa: B010  (a module global argparse reads, not an attribute of ours)


def build_parser(only: str | None = None, then: str | None = None) -> argparse.ArgumentParser:
    """The command-line parser: every command, or with ``only`` (a top-level command name) only that command
    (with its group's module, or the core ones), which is all a run of it needs to import; ``only=""`` gives
    the top-level options alone (all ``--version`` needs). ``then``, the word after the command, builds only
    that subcommand of a group's command (its siblings are names without options); a word that names no
    subcommand builds them all, so its error is the full parser's."""
    _untranslated()
    p = _Parser(prog="fleet-agent", description="Run a vast.ai GPU fleet with an LLM in the loop, on an "
                "append-only, replayable event log.")
    p.add_argument("--config", help="config file (default: $FLEET_AGENT_CONFIG, ./config.yaml, "
                   "/etc/fleet-agent/config.yaml)")
    p.add_argument("--version", action="version", version=f"fleet-agent {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    if only is None or only in CORE_COMMANDS:
        _add_core(sub)

    for group, commands in COMMAND_GROUPS.items():
        if only is None:
            group_module(group).register(sub)
        elif only in commands:
            one = _OnlyCommand(sub, only, then)
            group_module(group).register(one)
            if then is not None and one.missed():
                return build_parser(only)
    return p


class _Unbuilt:
    """What a group's ``register()`` gets back for a parser that is not being built: every method call
    (``add_argument``, ``set_defaults``, ``add_subparsers``, ...) does nothing and returns the stand-in."""

    def __getattr__(self, name: str) -> Callable[..., _Unbuilt]:
        return self._nothing

    def _nothing(self, *args: object, **kwargs: object) -> _Unbuilt:
        return self


class _Forward:
    """An argparse object as ``register()`` sees it, every attribute read and written through to it."""

    def __init__(self, wrapped: object) -> None:
        object.__setattr__(self, "_wrapped", wrapped)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._wrapped, name)

    def __setattr__(self, name: str, value: object) -> None:
        setattr(self._wrapped, name, value)


class _OnlyCommand:
    """The top-level subparsers as one group's ``register()`` sees them when a run names ``command``: only
    that command's parser is built; the group's other commands get a stand-in, since the parse never reaches
    them. argparse takes no abbreviation of a command name, so the names match exactly (``command_of`` sends
    anything else to the full parser). With ``then``, the command's subcommands are narrowed the same way."""

    def __init__(self, sub: argparse._SubParsersAction[_Parser], command: str, then: str | None) -> None:
        self.sub, self.command, self.then = sub, command, then
        self.choices: list[_OnlySubcommand] = []

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        if name != self.command:
            return _Unbuilt()
        parser = self.sub.add_parser(name, **kwargs)
        return parser if self.then is None else _CommandParser(parser, self)

    def missed(self) -> bool:
        """Whether the command has subcommands and ``then`` named none of them."""
        return bool(self.choices) and not any(c.built for c in self.choices)


class _CommandParser(_Forward):
    """The invoked command's parser, whose ``add_subparsers`` gives an ``_OnlySubcommand``."""

    def __init__(self, parser: _Parser, only: _OnlyCommand) -> None:
        super().__init__(parser)
        object.__setattr__(self, "_only", only)

    def add_subparsers(self, **kwargs: Any) -> _OnlySubcommand:
        if kwargs.get("parser_class") is _CommandParser:  # register() passed type(its parser)
            kwargs["parser_class"] = type(self._wrapped)
        choice = _OnlySubcommand(self._wrapped.add_subparsers(**kwargs), self._only.then)
        self._only.choices.append(choice)
        return choice


class _OnlySubcommand(_Forward):
    """A command's subparsers when the run names subcommand ``then``: that one is built whole, each other one
    as its name and help line alone (what the command's choices and help show), none of its options."""

    def __init__(self, action: argparse._SubParsersAction[_Parser], then: str | None) -> None:
        super().__init__(action)
        object.__setattr__(self, "_then", then)
        object.__setattr__(self, "built", False)

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        if name == self._then:
            object.__setattr__(self, "built", True)
            return self._wrapped.add_parser(name, **kwargs)
        self._wrapped.add_parser(name, **{k: v for k, v in kwargs.items() if k in ("help", "aliases")})
        return _Unbuilt()


def _add_core(sub: argparse._SubParsersAction[_Parser]) -> None:
    """The core commands: init, config, log, thread, sim."""
    s = sub.add_parser("init", help="create a config, data dir, database and knowledge dir",
                       description="Create DIR/config.yaml (from config.example.yaml), the data directory and "
                       "database, and a knowledge directory with one example file. With --config FILE and no "
                       "DIR: create the data directory, database and knowledge directory FILE names. Only init "
                       "creates a database; every other command refuses a missing or empty one. Refuses to "
                       "overwrite.")
    s.add_argument("dir", nargs="?", default=None, help="where to create them (default: .)")
    s.add_argument("--grant", metavar="ROLE", default=None,
                   help="PostgreSQL storage: also GRANT ROLE what a fleet needs (read and append only on the "
                   "events, read and write on the read models) and print the statements; run as the schema's owner")
    s.set_defaults(func=cmd_init, no_config=True)

    c = sub.add_parser("config", help="check or show the configuration", description="Check or show settings.")
    csub = c.add_subparsers(dest="config_command", metavar="SUBCOMMAND", parser_class=_Parser)
    csub.required = True
    s = csub.add_parser("check", help="validate the config and find the secrets (never printed)",
                        description="Validate the config file and check the secrets can be found.")
    s.add_argument("--json", action="store_true", help="print the result as JSON")
    s.set_defaults(func=cmd_config_check)
    s = csub.add_parser("show", help="print the effective settings (no secrets)",
                        description="Print the effective settings as JSON; secrets are never part of them.")
    s.set_defaults(func=cmd_config_show)
    s = csub.add_parser("diff", help="the config file against the configuration in force (exit 1 on difference)",
                        description="Compare the config file with the configuration the daemon last put in force "
                        "(recorded in the log at start and at each reload): each differing key with its value in "
                        "force and in the file. Exit 1 when they differ.")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(func=cmd_config_diff)

    lg = sub.add_parser("log", help="verify, export, search or rebuild from the event log",
                        description="Operate on the append-only event log.")
    lsub = lg.add_subparsers(dest="log_command", metavar="SUBCOMMAND", parser_class=_Parser)
    lsub.required = True
    s = lsub.add_parser("verify", help="walk the hash chain; exit 1 naming the first bad seq",
                        description="Verify the hash chain and the head file; report the first bad seq.")
    s.add_argument("--json", action="store_true", help="print the report as JSON")
    s.add_argument("--head", metavar="SEQ:HASH", help="also check the log holds this head, recorded elsewhere "
                   "(the daemon logs it as head= on every 'tick' line)")
    s.set_defaults(func=cmd_log_verify)
    group_module("export").add_log_export(lsub)
    group_module("archive").add_log_commands(lsub)
    group_module("log").add_log_migrate(lsub)
    group_module("compact").add_log_compact(lsub)
    s = lsub.add_parser("search", help="full-text search over every event",
                        description="Full-text search over the rendered text of every event, newest first.")
    s.add_argument("query", nargs="+", help="words to find (all must match)")
    s.add_argument("--limit", type=args_.number, default=20, help="at most this many hits")
    s.add_argument("--json", action="store_true", help="print the hits as JSON")
    s.set_defaults(func=cmd_log_search)
    s = lsub.add_parser("rebuild", help="rebuild read models from the log (--check: compare only)",
                        description="Rebuild alerts, memory, directives, ownership, intents, knowledge versions "
                        "and spend runs from the log alone.")
    s.add_argument("--check", action="store_true", help="only compare with the live tables; exit 1 on difference")
    s.add_argument("--json", action="store_true", help="with --check: print the differences as JSON")
    s.set_defaults(func=cmd_log_rebuild)

    t = sub.add_parser("thread", help="read the conversation and everything around it",
                       description="Read the event log as a thread.")
    tsub = t.add_subparsers(dest="thread_command", metavar="SUBCOMMAND", parser_class=_Parser)
    tsub.required = True
    s = tsub.add_parser("show", help="print events readably (or --json), optionally following new ones",
                        description="Print events: every tick, model answer, tool call and result, operator "
                        "message. --follow keeps printing events other processes append.")
    s.add_argument("--since", help="after this seq, or from this time: ISO 8601, now, 10m, 2h ago, yesterday 15:45")
    s.add_argument("--until", help="up to this time (same forms as --since, no seq)")
    s.add_argument("--kind", action="append", help="only this kind, or a family like 'tool.' (repeatable)")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--limit", type=args_.number, help="at most this many events (the oldest)")
    g.add_argument("--tail", type=args_.number, metavar="N", help="the newest N events")
    s.add_argument("--follow", action="store_true", help="keep printing new events")
    s.add_argument("--follow-for", type=args_.positive, help=argparse.SUPPRESS)
    s.add_argument("--json", action="store_true", help="one JSON object per event")
    s.set_defaults(func=cmd_thread_show)

    s = sub.add_parser("sim", help="run the vast.ai simulator on 127.0.0.1",
                       description="Serve a vast.ai-compatible API (and GET /demand) on 127.0.0.1.")
    s.add_argument("--port", type=args_.port, default=18790, help="port (default 18790)")
    s.add_argument("--seed", type=args_.count, default=0, help="market and fault seed")
    s.add_argument("--speed", type=args_.positive, default=1.0, help="simulated seconds per real second")
    s.add_argument("--state", help="persist state to this file and reload it on start")
    s.add_argument("--api-key", default="sim-key", help="the key clients must send (default sim-key)")
    s.add_argument("--rate-interval", type=args_.non_negative, default=0.5,
                   help="seconds between two requests to one endpoint, as vast.ai limits them (0 = off; default 0.5)")
    s.add_argument("--listing-lag", type=args_.non_negative, default=30.0,
                   help="simulated seconds before a new instance is listed (default 30)")
    s.add_argument("--logs-delay", type=args_.non_negative, default=2.5,
                   help="seconds before requested logs are ready (default 2.5)")
    s.add_argument("--unschedulable", type=args_.fraction, default=0.0,
                   help="probability a rent's machine cannot be scheduled (default 0)")
    s.set_defaults(func=cmd_sim, no_config=True)

def _command_index(argv: list[str]) -> int | None:
    """Where in ``argv`` the top-level command is when it is a known one and only ``--config`` comes before
    it (else None: help, version and mistakes go to the full parser, which lists every command)."""
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--") and len(a) > 2 and "--config".startswith(a.partition("=")[0]):
            i += 1 if "=" in a else 2
            continue
        if a.startswith("-"):
            return None
        return i if a in _OWNER or a in CORE_COMMANDS else None
    return None


def command_of(argv: list[str]) -> str | None:
    """The top-level command ``argv`` names when it is a known one and only ``--config`` comes before it
    (else None: help, version and mistakes go to the full parser, which lists every command)."""
    i = _command_index(argv)
    return None if i is None else argv[i]


def subcommand_of(argv: list[str]) -> str | None:
    """The word right after the command ``command_of`` finds (None when there is none, or it is an option)."""
    i = _command_index(argv)
    rest = argv[i + 1:] if i is not None else []
    return rest[0] if rest and not rest[0].startswith("-") else None


class _StartupGc:
    """The cyclic garbage collector paused while a command starts (``with``), resumed as it was by
    ``resume()`` or at the end of the block, whichever comes first.

    Starting a command imports its modules, builds its parser and reads the config: objects that live as
    long as the process, which the collector would walk again and again as they pile up (a few
    milliseconds of a short command's run, for nothing). The command itself runs with the collector on.
    With ``freeze`` (a process that runs this one command) what exists when it resumes is moved out of the
    collector's sight (``gc.freeze``), so its first collection does not walk the whole start either."""

    def __init__(self, *, freeze: bool) -> None:
        self.freeze = freeze

    def __enter__(self) -> _StartupGc:
        self.paused = gc.isenabled()
        gc.disable()
        return self

    def resume(self) -> None:
        if self.paused:
            self.paused = False
            if self.freeze:
                gc.freeze()
            gc.enable()

    def __exit__(self, *exc: object) -> None:
        self.resume()


def parser_for(argv: list[str]) -> argparse.ArgumentParser:
    """The parser a run of ``argv`` needs: what it names built (see ``build_parser``), or all of it."""
    if argv == ["--version"]:
        return build_parser("")
    return build_parser(command_of(argv), subcommand_of(argv))


def main(argv: list[str] | None = None, *, whole_process: bool = False) -> int:
    """Run one command; its exit code. ``whole_process``: the process runs only this command (the console
    script), so what its start made need never be collected (see ``_StartupGc``)."""
    argv = sys.argv[1:] if argv is None else argv
    with _StartupGc(freeze=whole_process) as startup:
        args = parser_for(argv).parse_args(argv)
        return _run(args, startup.resume)


def _run(args: argparse.Namespace, started: Callable[[], None]) -> int:
    """Load the config and the App (none for a ``no_config`` command), call ``started``, run the handler;
    errors become one line on stderr and the exit code."""
    handler: Callable[[argparse.Namespace, App | None], int] = args.func
    app: App | None = None
    try:
        args_.check_utf8(args)
        from agent import config, logsetup

        if getattr(args, "no_config", False):
            logsetup.configure("warning", "auto")
            started()
            return handler(args, None)
        settings = config.load(args.config)
        logsetup.configure(settings.logging.level if args.command in ("run", "tick") else "warning",
                           settings.logging.format)
        from agent.app import App

        app = App(settings)
        started()
        return handler(args, app)
    except FleetAgentError as e:
        from agent.secrets import scrub

        sys.stderr.write(f"fleet-agent: {output.text(scrub(str(e)))}\n")
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except OSError as e:  # a path the operator named: missing directory, no permission, disk full
        where = f"{e.filename}: " if e.filename else ""
        sys.stderr.write(f"fleet-agent: {output.text(where)}{e.strerror or e}; check the path and its permissions\n")
        return 1
    finally:
        if app is not None:
            app.close()


def entry() -> NoReturn:
    """The ``fleet-agent`` console script (and ``python -m agent.cli``): run ``main`` and end the process.

    The exit is what ``sys.exit(main())`` does, in the same order, less the interpreter's teardown of
    every module and object (some 110 modules for ``alerts list``, about a sixth of its wall time):
    ``exit_now`` waits for nothing and frees nothing that would outlive the process anyway. argparse's
    own exits (``--help``, a usage error) end the same way, with their code."""
    try:
        code = main(whole_process=True)
    except SystemExit as e:
        if e.code is not None and not isinstance(e.code, int):
            raise
        code = e.code or 0
    exit_now(code)


def exit_now(code: int) -> NoReturn:
    """End the process with ``code`` as the interpreter's own exit would, without its teardown.

    What ``sys.exit`` runs that matters to the world outside the process, in its order: waiting for
    non-daemon threads, the ``atexit`` functions (logging's flush, the alert hooks' drain, temporary
    directories' cleanup), then flushing stdout and stderr. This runs the ``atexit`` functions and the
    flushes itself, then ``os._exit``. What it skips is freeing memory, clearing modules and collecting
    objects still referenced: ``main`` has closed the App (the event log's connection, its head file,
    the PostgreSQL connection) in its ``finally``, every file the commands write is written in a
    ``with`` block, and a connection left open would lose nothing either way (a commit is durable when
    it returns; an open transaction is rolled back by the database when the process's connection goes,
    at exit or at teardown alike). The cases where the teardown could still do something are handed to
    ``sys.exit`` unchanged: another live non-daemon thread (the interpreter waits for it), or a flush of
    stdout or stderr that fails (a closed pipe: the interpreter reports it and exits 120, as before)."""
    threading = sys.modules.get("threading")
    if threading is not None and any(t.is_alive() and not t.daemon and t is not threading.main_thread()
                                     for t in threading.enumerate()):
        sys.exit(code)
    import atexit

    atexit._run_exitfuncs()
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        sys.exit(code)
    os._exit(code & 0xFF)



