"""The command-line parser (argparse), declared as one table: ``COMMANDS``.

Each command is one entry, its path (``"alerts list"``), its handler as ``"module:function"``, its one-line
help (the parent's list), its description (its own ``--help``) and its arguments::

    command("alerts resolve", "agent.cli.feedback:cmd_alerts_resolve", "close an alert", "Close an alert.",
            arg("id", type=number, help="alert number"), *who(reason_required=True)),

A group (``alerts``, ``log``) is an entry whose handler is None; its subcommands follow it. A command
with a handler may have subcommands too (``fork``, ``fork diff``): they are then optional. The handler,
``handler(args, app) -> int``, is imported only when its command runs, so building the parser (every
``--help``, every command) imports no command module and nothing they import; and a run builds only the
parsers of the command it names (``parse_args``). ``no_config=True``: the
command runs without a config (its handler gets no App). ``reads=``: the parts of the config the command
reads besides where the log is (``agent.config.CORE_PARTS``), by top-level key; it still runs when another
part of the file is broken (a one-line warning names it). Without ``reads`` a command needs the whole file
sound. ``in_force=``: parts of ``reads`` it takes as the daemon last put them in force (recorded in the log)
when the file breaks them. The table of them is in docs/configuration.md.
"""

from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

from agent import __version__
from agent.cli.args import count, fraction, non_negative, number, port, positive, span

if TYPE_CHECKING:
    from agent.runtime.app import App

BY_HELP = "who you are (default: $SUDO_USER or your login name)"
# `log compact --page-size`: what SQLite accepts as a page size here, and the default (agent.store.db.PAGE_SIZE,
# not imported: the store is not for every command's parser).
PAGE_SIZES = (4096, 8192, 16384, 32768, 65536)
PAGE_SIZE = 8192
# `policy set`'s keys, as agent.fleet.steering.OVERRIDABLE has them (tests/cli/test_cli_parser.py holds them equal).
OVERRIDABLE_KEYS = ("allowed_gpus", "max_daily_spend", "max_destroys_per_hour", "max_dph_per_instance",
                    "max_instances", "max_monthly_spend", "max_rents_per_hour", "max_total_dph", "min_reliability")


@dataclass(frozen=True)
class Arg:
    """One ``add_argument`` call: its names and keywords."""

    names: tuple[str, ...]
    options: dict[str, Any]


@dataclass(frozen=True)
class OneOf:
    """A mutually exclusive group of arguments."""

    args: tuple[Arg, ...]


@dataclass(frozen=True)
class Command:
    """One command (or group) of the table; ``command(...)`` makes one."""

    path: str  # "alerts list"
    handler: str | None  # "agent.cli.feedback:cmd_alerts_list"; None for a group
    help: str
    description: str
    args: tuple[Arg | OneOf, ...] = ()
    no_config: bool = False
    reads: tuple[str, ...] | None = None  # None: the whole config
    in_force: tuple[str, ...] = ()  # of ``reads``: taken as the daemon last put them in force when broken


class Handler:
    """A command's handler, ``"module:function"``, imported when the command runs. ``args.func(args, app)``."""

    def __init__(self, target: str) -> None:
        self.target = target

    def __call__(self, args: argparse.Namespace, app: App | None) -> int:
        module, _, name = self.target.partition(":")
        return int(getattr(importlib.import_module(module), name)(args, app))

    def __repr__(self) -> str:
        return f"Handler({self.target!r})"


def arg(*names: str, **options: Any) -> Arg:
    return Arg(names, options)


def one_of(*args: Arg) -> OneOf:
    return OneOf(args)


def command(path: str, handler: str | None, help: str, description: str, *args: Arg | OneOf,
            no_config: bool = False, reads: tuple[str, ...] | None = None,
            in_force: tuple[str, ...] = ()) -> Command:
    return Command(path, handler, help, description, args, no_config, reads, in_force)


def who(*, reason_required: bool) -> tuple[Arg, Arg]:
    """--reason and --by of a steering command."""
    return (arg("--reason", required=reason_required, help="why (logged; the agent sees it)"),
            arg("--by", help=BY_HELP))


def until(what: str) -> OneOf:
    """--for or --until of a steering command."""
    return one_of(arg("--for", dest="for_", metavar="DURATION", help=f"{what} for this long (30m, 4h, 7d, 2w)"),
                  arg("--until", metavar="TIME", help=f"{what} until this time (ISO 8601; naive = UTC)"))


# Every command, in the order `--help` lists them.
COMMANDS: tuple[Command, ...] = (
    command("init", "agent.cli.init:cmd_init",
            "create a config, data dir, database and knowledge dir",
            "Create DIR/config.yaml (from config.example.yaml), the data directory and database, "
            "and a knowledge directory with one example file. With --config FILE and no DIR: create "
            "the data directory, database and knowledge directory FILE names. Only init creates a "
            "database; every other command refuses a missing or empty one. Refuses to overwrite.",
            arg("dir", nargs="?", help="where to create them (default: .)"),
            one_of(arg("--grant", metavar="ROLE",
                       help="PostgreSQL storage: also GRANT ROLE what a fleet needs (read and append only "
                            "on the events, read and write on the read models), bind it to the config's "
                            "agent_id and print the statements; run as the schema's owner"),
                   arg("--revoke", metavar="ROLE",
                       help="PostgreSQL storage: unbind ROLE from the config's agent_id (and REVOKE what "
                            "--grant granted once it runs no fleet), in one transaction; creates nothing; "
                            "run as the schema's owner")),
            no_config=True),
    command("config", None,
            "check or show the configuration",
            "Check or show settings."),
    command("config check", "agent.cli.init:cmd_config_check",
            "validate the config and find the secrets (never printed)",
            "Validate the config file and check the secrets can be found.",
            arg("--json", action="store_true", help="print the result as JSON")),
    command("config show", "agent.cli.init:cmd_config_show",
            "print the effective settings (no secrets)",
            "Print the effective settings as JSON; secrets are never part of them.",
            arg("--json", action="store_true", help="print JSON (the form it prints anyway)")),
    command("config diff", "agent.cli.init:cmd_config_diff",
            "the config file against the configuration in force (exit 1 on difference)",
            "Compare the config file with the configuration the daemon last put in force (recorded "
            "in the log at start and at each reload): each differing key with its value in force "
            "and in the file. Exit 1 when they differ.",
            arg("--json", action="store_true", help="print JSON")),
    command("log", None,
            "verify, export, search or rebuild from the event log",
            "Operate on the append-only event log."),
    command("log verify", "agent.cli.log:cmd_log_verify",
            "walk the hash chain; exit 1 naming the first bad seq",
            "Verify the hash chain and the head file; report the first bad seq.",
            arg("--json", action="store_true", help="print the report as JSON"),
            arg("--head", metavar="SEQ:HASH",
                help="also check the log holds this head, recorded elsewhere (the daemon logs it as "
                     "head= on every 'tick' line)"),
            reads=()),
    command("log export", "agent.cli.log:cmd_log_export",
            "write events as JSON lines or Parquet (--training: fine-tuning examples)",
            "Export events (every field, hashes included) as JSON lines or a Parquet table; or, "
            "with --training, each answered model request with its answer in the OpenAI fine-tuning "
            "chat format, only the format's keys (an answer with a policy-blocked call has weight 0, "
            "overridden answers are left out; what fleet-agent knows of each goes to a metadata file).",
            arg("--format", default="jsonl", help="jsonl (default) or parquet (needs the parquet extra)"),
            arg("--kind", action="append", help="only this kind, or a family like 'tool.' (repeatable)"),
            arg("--since",
                help="only events after this seq, or from this time (ISO 8601, now, 2h ago, "
                     "yesterday 15:45)"),
            arg("--training", action="store_true", help="fine-tuning examples instead of events"),
            one_of(arg("--metadata", metavar="FILE",
                       help="with --training: write each example's seqs, tick, model and policy-blocked "
                            "calls to FILE (default with -o: OUTPUT.metadata.jsonl beside it)"),
                   arg("--no-metadata", action="store_true", help="with --training: no metadata file")),
            arg("-o", "--output", help="file to write, replaced only when complete (default: stdout)"),
            arg("--json", action="store_true",
                help="the closing summary as one JSON object (the events are JSON lines either way)"),
            reads=()),
    command("log archive", "agent.cli.log:cmd_log_archive",
            "move old months of events into sealed, compressed segment files",
            "Move every calendar month whose events are all older than storage.archive_after and "
            "covered by a summary into a sealed zstd segment beside the database (and its copy at "
            "storage.archive_url). Every read command still reads them; the chain verifies across "
            "them. Crash-safe: the file is written and read back before one transaction records it "
            "and removes the rows.",
            arg("--dry-run", action="store_true", help="only say which months would move"),
            arg("--older-than", type=span, metavar="SPAN", help="instead of storage.archive_after, e.g. 90d"),
            arg("--vacuum", action="store_true",
                help="then rewrite the database file to its new size (VACUUM; holds the write lock "
                     "meanwhile)"),
            arg("--json", action="store_true", help="print the result as JSON"),
            reads=()),
    command("log segments", "agent.cli.log:cmd_log_segments",
            "list the archived segments and where their copies are",
            "Every sealed segment: its seq and time range, size, and whether the file is here, "
            "copied elsewhere, or pruned here.",
            arg("--json", action="store_true", help="print JSON"),
            reads=()),
    command("log prune", "agent.cli.log:cmd_log_prune",
            "delete local segment files that have a verified copy elsewhere",
            "Delete the local files of segments whose events all precede --before, each only after "
            "its copy on storage.archive_url (written first when missing) or beside a backup "
            "(--backup) reads back with its sha256. Without --yes nothing is deleted. The stubs "
            "stay: reads and verify fetch the copy.",
            arg("--before", required=True, help="segments ending before this time: ISO 8601, 90d, ..."),
            arg("--backup", metavar="PATH",
                help="a database 'fleet-agent backup' wrote, whose segment copies count"),
            arg("--yes", action="store_true", help="really delete"),
            arg("--json", action="store_true", help="print the result as JSON"),
            reads=()),
    command("log migrate", "agent.cli.log:cmd_log_migrate",
            "copy the log to PostgreSQL or SQLite, chain and all (verified)",
            "Copy this fleet's event log, row for row with its hash chain, into an empty log: a "
            "SQLite file or a postgresql:// database (the password from storage.password_env / "
            "_file / _credential). The source must verify; the target must hold no events; the copy "
            "is verified against the source's head and its read models against a rebuild. Stop the "
            "daemon first, then point storage.url at the target.",
            arg("--to", required=True, metavar="URL",
                help="the target: a new SQLite file path or postgresql://USER@HOST:PORT/DATABASE"),
            arg("--from", dest="source", metavar="URL",
                help="the source (default: storage.url of the config)"),
            arg("--json", action="store_true", help="print the result as JSON"),
            reads=()),
    command("log compact", "agent.cli.log:cmd_log_compact",
            "rewrite the database file, converting it to larger pages (daemon stopped)",
            "Rewrite the SQLite database file (VACUUM): every row as it is, free pages dropped, "
            f"pages of --page-size bytes (default {PAGE_SIZE}, what 'fleet-agent init' gives a new "
            "database; one created with 4 KiB pages converts here). Needs the database to itself: "
            "refused while a daemon or a tick holds the lock.",
            arg("--page-size", type=int, default=PAGE_SIZE, metavar="BYTES",
                help=f"bytes per page: {', '.join(map(str, PAGE_SIZES))} (default {PAGE_SIZE})"),
            arg("--json", action="store_true", help="print the result as JSON"),
            reads=()),
    command("log search", "agent.cli.log:cmd_log_search",
            "full-text search over every event",
            "Full-text search over the rendered text of every event, newest first.",
            arg("query", nargs="+", help="words to find (all must match)"),
            arg("--limit", type=number, default=20, help="at most this many hits"),
            arg("--json", action="store_true", help="print the hits as JSON"),
            reads=()),
    command("log rebuild", "agent.cli.log:cmd_log_rebuild",
            "rebuild read models from the log (--check: compare only)",
            "Rebuild alerts, memory, directives, ownership, intents, knowledge versions and spend "
            "runs from the log alone.",
            arg("--check", action="store_true",
                help="only compare with the live tables; exit 1 on difference"),
            arg("--json", action="store_true", help="with --check: print the differences as JSON"),
            reads=()),
    command("thread", None,
            "read the conversation and everything around it",
            "Read the event log as a thread."),
    command("thread show", "agent.cli.thread:cmd_thread_show",
            "print events readably (or --json), optionally following new ones",
            "Print events: every tick, model answer, tool call and result, operator message. "
            "--follow keeps printing events other processes append.",
            arg("--since",
                help="after this seq, or from this time: ISO 8601, now, 10m, 2h ago, yesterday 15:45"),
            arg("--until", help="up to this time (same forms as --since, no seq)"),
            arg("--kind", action="append", help="only this kind, or a family like 'tool.' (repeatable)"),
            one_of(arg("--limit", type=number, help="at most this many events (the oldest)"),
                  arg("--tail", type=number, metavar="N", help="the newest N events")),
            arg("--follow", action="store_true", help="keep printing new events"),
            arg("--follow-for", type=positive, help=argparse.SUPPRESS),
            arg("--json", action="store_true", help="one JSON object per event"),
            reads=()),
    command("sim", "agent.cli.sim:cmd_sim",
            "run the vast.ai simulator on 127.0.0.1",
            "Serve a vast.ai-compatible API (and GET /demand) on 127.0.0.1.",
            arg("--port", type=port, default=18790, help="port (default 18790)"),
            arg("--seed", type=count, default=0, help="market and fault seed"),
            arg("--speed", type=positive, default=1.0, help="simulated seconds per real second"),
            arg("--state", help="persist state to this file and reload it on start"),
            arg("--api-key", default="sim-key", help="the key clients must send (default sim-key)"),
            arg("--rate-interval", type=non_negative, default=0.5,
                help="seconds between two requests to one endpoint, as vast.ai limits them (0 = "
                     "off; default 0.5)"),
            arg("--listing-lag", type=non_negative, default=30.0,
                help="simulated seconds before a new instance is listed (default 30)"),
            arg("--logs-delay", type=non_negative, default=2.5,
                help="seconds before requested logs are ready (default 2.5)"),
            arg("--unschedulable", type=fraction, default=0.03,
                help="probability a rent's machine cannot be scheduled, as on vast.ai (default 0.03)"),
            arg("--quick", action="store_true",
                help="the instant market: rents start in seconds, stops at once, no unschedulable or stuck "
                     "rents, no maintenance (default: vast.ai's scheduling and loading waits)"),
            arg("--manual-clock", action="store_true",
                help="simulated time moves only when told to, by POST /_sim/advance {\"seconds\": s}"),
            arg("--start", type=positive, default=None,
                help="with --manual-clock: the simulated start, a Unix time (default 1750000000)"),
            no_config=True),
    command("context", "agent.cli.context:cmd_context",
            "print exactly what the model saw (or would see now), with token counts",
            "Project the model's request from the log: now, as of a time (--at), the last request "
            "of a tick (--tick, checked against its recorded hash) or a seq (--seq). Shows each "
            "section's tokens and every message.",
            one_of(arg("--at", metavar="TIME",
                      help="as of this time: ISO 8601 UTC (2026-11-29T10:05), now, 10m, 2h ago, "
                           "yesterday 15:45"),
                  arg("--tick", type=count, metavar="N", help="the last request tick N sent"),
                  arg("--seq", type=count, metavar="S", help="as of event seq S")),
            arg("--json", action="store_true", help="print messages and manifest as JSON"),
            reads=("prompts_dir", "context", "model", "policy", "fleet")),
    command("replay", "agent.cli.context:cmd_replay",
            "re-derive every past model request and check its hash",
            "Re-derive every recorded model.request from the log and the prompt files and compare "
            "request hashes. --verify stops at the first mismatch, says why and exits 1.",
            arg("--verify", action="store_true", help="exit 1 at the first mismatch"),
            arg("--json", action="store_true", help="JSON output"),
            reads=("prompts_dir", "context", "model", "policy", "fleet")),
    command("tick", "agent.cli.ops:cmd_tick",
            "run one tick now (exit 1 if it fails)",
            "Run one tick: reconcile, observe, ingest feedback, compact if needed, then let the "
            "model act. Takes the single-writer lock; exits 0 on tick.completed, 1 on tick.failed.",
            arg("--json", action="store_true", help="print the result as JSON")),
    command("alerts", None,
            "list, show, ack and silence alerts",
            "Alerts raised by the agent or by code; acking one tells the agent an operator has seen it."),
    command("alerts list", "agent.cli.feedback:cmd_alerts_list",
            "list open alerts (--all: every alert)",
            "List open alerts, newest sighting and repeat count included.",
            arg("--all", action="store_true", help="include acked and resolved alerts"),
            arg("--json", action="store_true", help="print JSON"),
            reads=()),
    command("alerts show", "agent.cli.feedback:cmd_alerts_show",
            "one alert with its history",
            "Show one alert's fields and every event about it.",
            arg("id", type=number, help="alert number"),
            arg("--json", action="store_true", help="print JSON"),
            reads=()),
    command("alerts ack", "agent.cli.feedback:cmd_alerts_ack",
            "acknowledge an open alert (the agent sees the ack and note)",
            "Acknowledge an open alert. The agent sees '[alert #N acked · you]' with your note. "
            "Acking an acked alert changes nothing (exit 0); unknown or resolved alerts are "
            "refused.",
            arg("id", type=number, help="alert number"),
            arg("--note", help="a note for the agent, e.g. what you did about it"),
            arg("--by", help=BY_HELP),
            reads=()),
    command("alerts silence", "agent.cli.feedback:cmd_alerts_silence",
            "stop an alert (or alerts by key pattern) notifying for a while",
            "Silence one alert, or every alert whose key matches a glob (--key 'stuck:*'), for a "
            "duration: a silenced alert runs no notify command; the agent still sees it, marked "
            "silenced, and sees the silence as '[alert silence #N · you]'.",
            arg("id", nargs="?", type=number, help="alert number (or use --key)"),
            arg("--key", metavar="PATTERN", help="silence alerts whose key matches this glob, now and later"),
            arg("--for", dest="for_", type=span, required=True, metavar="DURATION",
                help="how long: 30m, 2h, 3d, 1w"),
            arg("--reason", required=True, help="why (the agent and other operators see it)"),
            arg("--by", help=BY_HELP),
            reads=()),
    command("alerts silences", "agent.cli.feedback:cmd_alerts_silences",
            "list silences in force (--all: every silence)",
            "Silences in force, with what they cover, until when, who and why.",
            arg("--all", action="store_true", help="include expired and lifted silences"),
            arg("--json", action="store_true", help="print JSON"),
            reads=()),
    command("alerts unsilence", "agent.cli.feedback:cmd_alerts_unsilence",
            "lift a silence before it expires",
            "Lift a silence now; the agent sees '[alert silence #N lifted · you]'.",
            arg("id", type=number, help="silence number (see 'fleet-agent alerts silences')"),
            arg("--by", help=BY_HELP),
            reads=()),
    command("knowledge", None,
            "list, show, edit knowledge files and their history",
            "Knowledge files (*.md, *.txt, *.yaml) in the knowledge directory steer the agent; each "
            "change reaches it as a tagged message."),
    command("knowledge list", "agent.cli.feedback:cmd_knowledge_list",
            "knowledge files and whether the agent has their current text",
            "Each knowledge file on disk or in the log, its logged version and state (current, "
            "pending, new, removed, bad).",
            arg("--json", action="store_true", help="print JSON"),
            reads=("knowledge_dir",)),
    command("knowledge show", "agent.cli.feedback:cmd_knowledge_show",
            "print the text the agent knows for a file",
            "Print the latest version of a knowledge file as the log holds it.",
            arg("name", help="file name, e.g. hosts.md"),
            arg("--json", action="store_true", help="print JSON (the text with its version and hash)"),
            reads=()),
    command("knowledge edit", "agent.cli.feedback:cmd_knowledge_edit",
            "edit (or create) a file in $VISUAL/$EDITOR; YAML is checked",
            "Edit a copy in $VISUAL or $EDITOR (default vi), then save it atomically. A YAML file "
            "that no longer parses is refused and the saved version kept; so is a save over a "
            "change someone else made meanwhile (their change is shown).",
            arg("name", help="file name, e.g. hosts.md (created if missing)"),
            arg("--by", help=BY_HELP),
            arg("--editor", help=argparse.SUPPRESS),
            reads=("knowledge_dir",)),
    command("knowledge history", "agent.cli.feedback:cmd_knowledge_history",
            "every logged version of a file",
            "The versions of a knowledge file recorded in the log: version, time, change, size, hash.",
            arg("name", help="file name"),
            arg("--json", action="store_true", help="print JSON"),
            reads=()),
    command("say", "agent.cli.feedback:cmd_say",
            "tell the agent something (--pin: a standing directive)",
            "Append an operator note; the agent sees '[operator note · you] TEXT'. With --pin it "
            "becomes a directive kept in every request until unpinned. What code can enforce in it "
            "(hosts, GPU models, caps, pauses) is proposed as constraints to accept ('policy accept "
            "N'); --enforce accepts them at once.",
            arg("text", nargs="+", help="what to say ('-': read it from standard input)"),
            arg("--by", help=BY_HELP),
            arg("--pin", action="store_true", help="make it a standing directive"),
            arg("--enforce", action="store_true", help="accept at once every constraint code reads in it"),
            reads=()),
    command("unpin", "agent.cli.feedback:cmd_unpin",
            "withdraw a pinned directive",
            "Withdraw a directive; the agent sees that it was withdrawn.",
            arg("id", type=number, help="directive number (see 'fleet-agent directives')"),
            arg("--by", help=BY_HELP),
            reads=()),
    command("directives", "agent.cli.feedback:cmd_directives",
            "list active directives",
            "The directives the agent keeps in every request.",
            arg("--json", action="store_true", help="print JSON"),
            reads=()),
    command("policy", None,
            "show the policy in force; tighten it for a while (overrides)",
            "The policy code enforces: the config, the operator overrides in force, and the "
            "effective values. Overrides only tighten (lower caps, a narrower GPU list, a higher "
            "reliability floor, smaller budgets); loosening needs a config change. Each is an event "
            "the agent sees, and it ends on reset or at its time."),
    command("policy show", "agent.cli.policy:cmd_policy_show",
            "config, overrides and effective values",
            "Print each policy key: config value, effective value, override in force.",
            arg("--json", action="store_true", help="print JSON"),
            reads=("policy",)),
    command("policy set", "agent.cli.policy:cmd_policy_set",
            "override a key with a tighter value",
            "Tighten one policy key, e.g. 'policy set max_instances 4 --for 8h --reason \"budget review\"'. Keys: "
            + ", ".join(OVERRIDABLE_KEYS) + ". allowed_gpus takes a comma-separated list.",
            arg("key", help="policy key"),
            arg("value", help="the tighter value"),
            until("binds"),
            *who(reason_required=True),
            reads=("policy",)),
    command("policy reset", "agent.cli.policy:cmd_policy_reset",
            "end the override of a key",
            "End the override of KEY now; the config value is in force again.",
            arg("key", help="policy key"),
            *who(reason_required=False),
            reads=("policy",)),
    command("policy proposals", "agent.cli.policy:cmd_policy_proposals",
            "constraints proposed from operators' words (--all: decided too)",
            "Constraints code read in notes, directives and knowledge edits, waiting for an operator "
            "to accept or reject them.",
            arg("--all", action="store_true", help="include accepted and rejected proposals"),
            arg("--json", action="store_true", help="print JSON"),
            reads=()),
    command("policy accept", "agent.cli.policy:cmd_policy_accept",
            "enforce proposed constraints now",
            "Enforce proposed constraints now (numbers from 'policy proposals').",
            arg("ids", nargs="+", type=number, metavar="N", help="proposal number"),
            *who(reason_required=False),
            reads=("policy",)),
    command("policy reject", "agent.cli.policy:cmd_policy_reject",
            "leave proposed constraints as advice",
            "Leave proposed constraints as advice (numbers from 'policy proposals').",
            arg("ids", nargs="+", type=number, metavar="N", help="proposal number"),
            *who(reason_required=False),
            reads=()),
    command("pause", "agent.cli.pause:cmd_pause",
            "refuse every rent, destroy and reboot until resumed",
            "Pause the fleet: no side-effecting call runs (ticks still observe, raise alerts and "
            "talk to the agent, which is told it is paused and why). An operator's own 'destroy' "
            "still runs. Ends with 'fleet-agent resume' or at --for/--until.",
            until("pause"),
            *who(reason_required=True),
            reads=()),
    command("resume", "agent.cli.pause:cmd_resume",
            "end the pause",
            "End the pause now; the agent sees that it ended.",
            *who(reason_required=False),
            reads=()),
    command("hosts", None,
            "list, exclude and include vast.ai hosts",
            "Hosts rents are refused on: policy.excluded_hosts from the config, and exclusions in "
            "the log (by an operator, by the agent's exclude_host tool, or automatic after two "
            "failures within a day). The agent can exclude, never include."),
    command("hosts list", "agent.cli.hosts:cmd_hosts_list",
            "the hosts excluded now",
            "Every host excluded now, why and until when.",
            arg("--json", action="store_true", help="print JSON"),
            reads=("policy",)),
    command("hosts exclude", "agent.cli.hosts:cmd_hosts_exclude",
            "refuse rents on a host",
            "Exclude a host from rents.",
            arg("host_id", type=number, help="vast.ai host id"),
            until("exclude"),
            *who(reason_required=True),
            reads=()),
    command("hosts include", "agent.cli.hosts:cmd_hosts_include",
            "allow rents on an excluded host again",
            "End a host's exclusion (not one from the config file).",
            arg("host_id", type=number, help="vast.ai host id"),
            *who(reason_required=False),
            reads=("policy",)),
    command("instances", "agent.cli.manual:cmd_instances",
            "every instance on the account, ours and others",
            "List the account's instances as vast.ai shows them now: whether ours, status and since "
            "when (from the log's observations), age, $/h, host, GPU and label.",
            arg("--json", action="store_true", help="print JSON"),
            reads=("vast", "fleet")),
    command("destroy", "agent.cli.manual:cmd_destroy",
            "destroy an instance through the log (refused if not ours unless --force)",
            "Destroy one instance through the same intent -> call -> result path as the agent's "
            "(idempotent; reconciled after a crash). The agent sees who did it and why. Refused for "
            "an instance that is not ours unless --force.",
            arg("id", type=number, help="instance id"),
            arg("--yes", action="store_true", help="do not ask for confirmation"),
            arg("--force", action="store_true", help="destroy even if it is not ours"),
            *who(reason_required=True),
            reads=("vast", "fleet", "policy")),
    command("drain", "agent.cli.manual:cmd_drain",
            "pause, then destroy every instance of ours",
            "Pause the fleet (until 'fleet-agent resume'), then destroy every instance of ours "
            "through the log, one by one.",
            arg("--yes", action="store_true", help="do not ask for confirmation"),
            *who(reason_required=False),
            reads=("vast", "fleet", "policy")),
    command("spend", "agent.cli.spend:cmd_spend",
            "spend today, this week, this month, per instance and GPU model",
            "Spend computed from the log's own rental history: each instance of ours at its $/h "
            "(storage included) for the time the ticks saw it running, between its rent and its "
            "destroy. UTC day, week from Monday, calendar month.",
            arg("--json", action="store_true", help="print JSON"),
            reads=("policy",)),
    command("fork", "agent.cli.fork:cmd_fork",
            "re-run a past moment with a change, into a new log (what if)",
            "Fork the log at a tick or a time: the context exactly as it was, the change applied "
            "(settings, prompts or model), K ticks against a simulator seeded from what the log "
            "recorded then, into a new log in its own directory. The real fleet and the real log "
            "are never touched (the database is opened read-only). 'fork diff DIR' compares the "
            "decisions.",
            arg("--tick", type=number, help="re-run from the start of this tick"),
            arg("--at", metavar="TIME",
                help="the log as it stood at this time (ISO 8601; a tick running then is re-run "
                     "from its start)"),
            arg("--set", action="append", metavar="KEY=VALUE",
                help="change a setting in the fork, e.g. policy.max_instances=4 (repeatable)"),
            arg("--prompt-dir", metavar="DIR", help="prompt files (system.md, summarize.md) to try instead"),
            arg("--model", nargs=2, metavar=("URL", "NAME"),
                help="an OpenAI-compatible model server and model (its key, if it needs one, from "
                     "$FLEET_AGENT_FORK_MODEL_KEY: the configured key goes only to the configured "
                     "server)"),
            arg("--rules", action="store_true", help="decide with the built-in rules provider"),
            arg("--same", action="store_true", help="re-run without a change (how repeatable is the model?)"),
            arg("--ticks", type=number, default=1, help="how many ticks to run (default 1)"),
            arg("--out", metavar="DIR", help="the fork's directory (new or empty; default: a new temp dir)"),
            arg("--seed", type=count, default=0,
                help="the simulator's seed for what the log does not hold (the rest of the market, "
                     "host behaviour)")),
    command("fork diff", "agent.cli.fork:cmd_fork_diff",
            "compare what the model decided in the origin and in a fork",
            "Step by step, what the model decided in the original log and in the fork: tool calls "
            "and their outcomes, policy blocks, alerts, how each tick ended.",
            arg("fork_dir", help="the fork's directory (printed by 'fleet-agent fork')"),
            arg("--json", action="store_true", help="print the comparison as JSON"),
            no_config=True),
    command("override", "agent.cli.override:cmd_override",
            "mark a model answer as overridden (left out of training exports)",
            "Record that you overrode a model answer (a model.response seq, as 'thread show --kind "
            "model.response' lists them): 'log export --training' leaves it out. The agent is not "
            "told; use 'say' for that.",
            arg("response_seq", type=number, help="the model.response event's seq"),
            arg("--note", help="why (kept in the log)"),
            arg("--by", help=BY_HELP),
            reads=()),
    command("run", "agent.cli.service:cmd_run",
            "run the daemon in the foreground (ticks on the configured schedule)",
            "Run the daemon: take the single-writer lock, tick on the schedule (schedule.interval "
            "or schedule.cron), reload on SIGHUP, stop on SIGTERM/SIGINT. Under systemd it speaks "
            "sd_notify (READY, STATUS, WATCHDOG, STOPPING). Exit 3 when it lost the fleet's lock to "
            "another daemon (it was suspended or cut off).",
            arg("--standby", action="store_true",
                help="when another daemon is active for this fleet, wait and take over within "
                     "storage.failover_seconds of it dying or hanging, instead of refusing to start")),
    command("status", "agent.cli.service:cmd_status",
            "is the daemon running; last tick, fleet, alerts, context size",
            "Show whether the daemon runs (and who holds the lock), the last tick, the fleet as "
            "last observed, open alerts and the context size against the budget.",
            arg("--json", action="store_true", help="print the status as JSON"),
            reads=("knowledge_dir", "context", "policy"), in_force=("context", "policy")),
    command("doctor", "agent.cli.service:cmd_doctor",
            "check config, secrets, database, vast.ai, model, tokenizer, files",
            "Run every health check, one line each ('ok' or 'FAIL' with the fix); exit 1 when any "
            "fails. Secrets are never printed.",
            arg("--json", action="store_true", help="print the results as JSON"),
            no_config=True),
    command("backup", "agent.cli.backup:cmd_backup",
            "copy the database while the daemon runs, verified, with its head",
            "Write a consistent copy of the database (SQLite's online backup API; the daemon keeps "
            "running) to PATH, or to a dated file inside PATH when it is a directory; write "
            "PATH.head with the newest seq and hash, then verify the copy's whole chain. Never "
            "overwrites.",
            arg("path", help="the new file, or a directory to write a dated file into"),
            arg("--json", action="store_true", help="print the result as JSON"),
            reads=()),
    command("restore", "agent.cli.backup:cmd_restore",
            "replace the database with a verified backup (daemon stopped)",
            "Verify the copy at PATH (its chain and its .head file) and put it in place of the "
            "database; the replaced database and its companion files are kept beside it as "
            "<name>.replaced-<time>.db. Refused while a daemon or a tick holds the lock.",
            arg("path", help="a file written by 'fleet-agent backup'"),
            arg("--json", action="store_true", help="print the result as JSON"),
            reads=()),
    command("demo", "agent.cli.demo:cmd_demo",
            "run a simulated fleet for a few minutes (no keys, no servers needed)",
            "Start the vast.ai simulator in-process, run N ticks with the built-in rules provider "
            "(or a real OpenAI-compatible model), with an operator who acks an alert, edits a "
            "knowledge file and pins a directive midway. Exit 0 only if every tick completed and "
            "the log verifies.",
            arg("--ticks", type=number, default=15, help="how many ticks (default 15)"),
            arg("--speed", type=positive, default=600.0,
                help="simulated seconds per real second between ticks (default 600: a tick every 0.5 s)"),
            arg("--model-url", help="an OpenAI-compatible base URL, e.g. http://127.0.0.1:11434/v1"),
            arg("--model", help="the model name at --model-url"),
            arg("--model-timeout", type=positive, metavar="SECONDS",
                help="how long one model request may take (default 600 with --model-url: a cold CPU "
                     "model needs minutes for its first request)"),
            arg("--keep", metavar="DIR", help="keep the data and config in DIR (must be empty)"),
            arg("--seed", type=count, default=11, help="simulator seed (default 11)"),
            no_config=True),
    command("completion", "agent.cli.completion:cmd_completion",
            "print the shell completion script (bash or zsh)",
            "Print a completion script generated from the commands: 'fleet-agent completion bash > "
            "/etc/bash_completion.d/fleet-agent', or for zsh 'fleet-agent completion zsh > "
            '"${fpath[1]}/_fleet-agent"\'.',
            arg("shell", choices=("bash", "zsh"), help="bash or zsh"),
            no_config=True),
    command("man", "agent.cli.completion:cmd_man",
            "print the man page, fleet-agent(1)",
            "Print the man page (roff) generated from the commands: 'fleet-agent man > "
            "/usr/local/share/man/man1/fleet-agent.1', or read it with 'fleet-agent man | man -l "
            "-'.",
            no_config=True),
    command("web", "agent.cli.web:cmd_web",
            "serve metrics, health and the operator console from the log (no daemon needed)",
            "Serve /metrics, /healthz and the operator console (overview, alerts, thread, time "
            "travel, knowledge) read from the event log, in the foreground until Ctrl-C. The daemon "
            "serves the same pages itself at http.listen; use this from another account or when the "
            "daemon is not running. Writes (ack, note) need http.token_file or "
            "http.token_credential.",
            arg("--listen", metavar="HOST:PORT", help="where to listen (default: http.listen)")),
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2
        self.exit(2, f"fleet-agent: error: {message} (see '{self.prog} --help')\n")


class _Retry(Exception):
    """A parser built for one command met something it cannot judge alone: parse again with every command."""


class _OneCommandParser(_Parser):
    def error(self, message: str) -> NoReturn:
        raise _Retry(message)


def _add(p: argparse.ArgumentParser | argparse._MutuallyExclusiveGroup, a: Arg) -> None:
    p.add_argument(*a.names, **a.options)


def build_parser(commands: tuple[Command, ...] = COMMANDS, *, only: str | None = None,
                 parser_class: type[_Parser] = _Parser) -> argparse.ArgumentParser:
    """The command-line parser: every command of ``commands``, or with ``only`` (a top-level name) that command
    and its subcommands alone, which is all one run of it needs."""
    p = parser_class(prog="fleet-agent", description="Run a vast.ai GPU fleet with an LLM in the loop, on an "
                     "append-only, replayable event log.")
    p.add_argument("--config", help="config file (default: $FLEET_AGENT_CONFIG, ./config.yaml, "
                   "/etc/fleet-agent/config.yaml)")
    p.add_argument("--version", action="version", version=f"fleet-agent {__version__}")
    parsers: dict[str, argparse.ArgumentParser] = {"": p}
    subs: dict[str, Any] = {"": p.add_subparsers(dest="command", metavar="COMMAND", required=True)}
    for c in commands:
        if only is not None and c.path.partition(" ")[0] != only:
            continue
        parent, _, name = c.path.rpartition(" ")
        if parent not in parsers:
            raise ValueError(f"command {c.path!r}: declare {parent!r} before it")
        if parent not in subs:  # the first subcommand: a group needs one, a command may have one
            subs[parent] = parsers[parent].add_subparsers(
                dest=f"{parent.rpartition(' ')[2]}_command", metavar="SUBCOMMAND",
                required=parsers[parent].get_default("func") is None)
        s = subs[parent].add_parser(name, help=c.help, description=c.description)
        for a in c.args:
            if isinstance(a, OneOf):
                g = s.add_mutually_exclusive_group()
                for x in a.args:
                    _add(g, x)
            else:
                _add(s, a)
        if c.handler is not None:
            s.set_defaults(func=Handler(c.handler), reads=c.reads, in_force=c.in_force, **({"no_config": True} if c.no_config else {}))
        parsers[c.path] = s
    return p


def _command_name(argv: list[str]) -> str | None:
    """The top-level command ``argv`` names, when only ``--config FILE`` (or ``--config=FILE``) comes before it;
    None otherwise (no command, another option first: the whole parser decides)."""
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--config":
            i += 2
        elif a.startswith("--config="):
            i += 1
        else:
            return None if a.startswith("-") else a
    return None


def parse_args(argv: list[str], commands: tuple[Command, ...] = COMMANDS) -> argparse.Namespace:
    """``argv`` as ``build_parser(commands).parse_args`` reads it, with the parsers of the one command it names
    built alone (every command's parser costs time a command's run does not need). Anything that parser cannot
    judge alone, every error among them, is parsed again by the whole parser, so what it prints is the same."""
    name = _command_name(argv)
    if name is not None and any(c.path.partition(" ")[0] == name for c in commands):
        try:
            return build_parser(commands, only=name, parser_class=_OneCommandParser).parse_args(argv)
        except _Retry:
            pass
    return build_parser(commands).parse_args(argv)
