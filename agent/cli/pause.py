"""``pause`` / ``resume``: stop every side-effecting call (ticks still observe, alert and talk)."""

from __future__ import annotations

import argparse

from agent.cli import output, steer
from agent.cli.output import line
from agent.fleet import steering
from agent.runtime.app import App


def cmd_pause(args: argparse.Namespace, app: App) -> int:
    until = steering.until_ts(app.log, args.for_, args.until)
    reason = steer.reason(args)
    current = steering.paused(app.log)
    e = steering.pause(app.log, by=steer.by(args), reason=reason, until=until)
    end = f"until {until[:16].replace('T', ' ')} UTC" if until else "until 'fleet-agent resume'"
    again = f" (replaces pause #{current.id})" if current is not None else ""
    output.out(f"paused (event #{e.seq}) {end}{again}: no rent, destroy or reboot runs; ticks still observe and "
               f"the agent is told why: {line(reason)}")
    return 0


def cmd_resume(args: argparse.Namespace, app: App) -> int:
    e = steering.resume(app.log, by=steer.by(args), reason=(args.reason or "").strip() or None)
    output.out(f"resumed (event #{e.seq}): pause #{e.payload['pause_id']} ended; actions run again within policy")
    return 0
