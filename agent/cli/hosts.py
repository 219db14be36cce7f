"""``hosts list|exclude|include``: vast.ai hosts rents are refused on."""

from __future__ import annotations

import argparse
from typing import Any

from agent.cli import output, steer
from agent.cli.output import line
from agent.fleet import steering
from agent.runtime.app import App


def cmd_hosts_list(args: argparse.Namespace, app: App) -> int:
    xs = sorted(steering.excluded_hosts(app.settings, app.log).values(), key=lambda x: x.host_id)
    rows: list[dict[str, Any]] = [{"host_id": x.host_id, "source": x.source, "by": x.by, "reason": x.reason, "since": x.since,
             "until": x.until, "event": x.id} for x in xs]
    if args.json:
        output.out(output.json_text(rows, indent=2))
        return 0
    if not rows:
        output.out("no excluded hosts")
    for r in rows:
        until = f"until {r['until'][:16].replace('T', ' ')} UTC" if r["until"] else "no end"
        output.out(f"host {r['host_id']:<10} {r['source']:<8} {until:<28} by {line(r['by'])}: {line(r['reason'])}")
    return 0


def cmd_hosts_exclude(args: argparse.Namespace, app: App) -> int:
    until = steering.until_ts(app.log, args.for_, args.until)
    e = steering.exclude_host(app.log, args.host_id, by=steer.by(args), reason=steer.reason(args),
                              source="operator", until=until)
    end = f"until {until[:16].replace('T', ' ')} UTC" if until else "until 'fleet-agent hosts include'"
    output.out(f"host {args.host_id} excluded (event #{e.seq}) {end}: rents on it are refused")
    return 0


def cmd_hosts_include(args: argparse.Namespace, app: App) -> int:
    e = steering.include_host(app.log, app.settings, args.host_id, by=steer.by(args),
                              reason=(args.reason or "").strip() or None)
    output.out(f"host {args.host_id} included again (event #{e.seq})")
    return 0
