"""The command-line parser (argparse): every command, or only the one a run names.

Imported when a run needs it: help, a usage error, a form ``agent.cli.plain`` does not read. The handlers
and the command table live in ``agent.cli``; each group's module adds its own commands (``register``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from agent import __version__
from agent.cli import (
    COMMAND_GROUPS,
    CORE_COMMANDS,
    cmd_config_check,
    cmd_config_diff,
    cmd_config_show,
    cmd_init,
    cmd_log_rebuild,
    cmd_log_search,
    cmd_log_verify,
    cmd_sim,
    cmd_thread_show,
    command_of,
    group_module,
    subcommand_of,
)
from agent.cli import args as args_

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NoReturn


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

def parser_for(argv: list[str]) -> argparse.ArgumentParser:
    """The parser a run of ``argv`` needs: what it names built (see ``build_parser``), or all of it."""
    if argv == ["--version"]:
        return build_parser("")
    return build_parser(command_of(argv), subcommand_of(argv))

