"""`thread show`: the event log read as a thread, every tick, model answer, tool call and operator message."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator

from agent.cli import args as args_
from agent.cli import output
from agent.errors import UsageError
from agent.events import Event, describe
from agent.runtime.app import App


def first_event_ts(app: App) -> str | None:
    e = next(iter(app.log.read(0, limit=1)), None)
    return e.ts if e else None


def not_before_first(app: App, ts: str | None, flag: str) -> None:
    """Refuse a time before the log's first event: it would show an empty history, not an answer."""
    if ts is None:  # nothing to check (and the projection's module not to load)
        return
    from agent.context.load import not_before_first as check  # shared with the console's time travel

    check(app.log, ts, flag)


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
    if any(not k.strip() for k in args.kind or ()):
        raise UsageError("--kind '' names no kind; write a kind like tool.result, or a family like 'tool.'")
    wanted = _wanted(args.kind or None)

    def show(e: Event) -> None:
        if args.json:
            output.out(output.json_text(e.to_dict(), sort_keys=True))
        else:
            tick = f" t{e.tick}" if e.tick is not None else ""
            output.out(f"#{e.seq} {e.ts[:19]}Z {e.kind} [{e.source}{tick}]\n  " + describe(e).replace("\n", "\n  "))

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
