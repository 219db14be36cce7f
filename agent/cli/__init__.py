"""The operator CLI: parse, call the library, print. One command per operator verb.

Exit codes: 0 ok, 1 failure, 2 usage or configuration error. Each command group
lives in a small module with a ``register(subparsers)`` function; handlers are
``handler(args, app) -> int``.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from collections.abc import Callable, Iterator
from types import ModuleType

from agent import lazy
from agent.cli import args as args_
from agent.cli import output
from agent.errors import FleetAgentError, UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:  # a command loads only what it uses: the app, the config, the vocabulary on first use
    import argparse  # the parser loads when a run needs one (agent.cli.parser): see main()
    from pathlib import Path
    from typing import NoReturn

    from agent import config
    from agent.events import Event
    from agent.runtime.app import App

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
    return lazy.import_module(f"agent.cli.{name}")


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
    from agent.runtime.app import App

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
    import json

    from agent.runtime.daemon import effective

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
    import json

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
    from agent.events import describe

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


def build_parser(only: str | None = None, then: str | None = None) -> argparse.ArgumentParser:
    """The command-line parser (``agent.cli.parser.build_parser``): every command, or with ``only`` that
    command alone, with ``then`` that subcommand alone."""
    from agent.cli import parser

    return parser.build_parser(only, then)


def parser_for(argv: list[str]) -> argparse.ArgumentParser:
    """The parser a run of ``argv`` needs: what it names built (see ``build_parser``), or all of it."""
    from agent.cli import parser

    return parser.parser_for(argv)


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


def main(argv: list[str] | None = None, *, whole_process: bool = False) -> int:
    """Run one command; its exit code. ``whole_process``: the process runs only this command (the console
    script), so what its start made need never be collected (see ``_StartupGc``)."""
    argv = sys.argv[1:] if argv is None else argv
    with _StartupGc(freeze=whole_process) as startup:
        from agent.cli import plain

        args = plain.parse(argv) or parser_for(argv).parse_args(argv)
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
        from agent.runtime.app import App

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




