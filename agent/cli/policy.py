"""``policy show|set|reset``: the policy in force, and operator overrides that only tighten it."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from agent.cli import output, steer
from agent.cli.output import line
from agent.fleet import steering
from agent.runtime.app import App


def _show(v: Any) -> str:
    if isinstance(v, list):
        return ", ".join(str(x) for x in v) or "-"
    if v is None:
        return "off"
    return f"{v:g}" if isinstance(v, float) else str(v)


def policy_view(app: App) -> dict[str, Any]:
    cfg = dataclasses.asdict(app.settings.policy)
    eff = dataclasses.asdict(steering.effective_policy(app.settings, app.log))
    ov = steering.active_overrides(app.log)
    return {
        "config": cfg, "effective": eff,
        "overrides": [{"id": o.id, "key": o.key, "value": o.value, "by": o.by, "reason": o.reason, "set_at": o.ts,
                       "until": o.until} for o in ov.values()],
        "overridable": sorted(steering.OVERRIDABLE),
    }


def cmd_policy_show(args: argparse.Namespace, app: App) -> int:
    view = policy_view(app)
    if args.json:
        output.out(output.json_text(view, indent=2, sort_keys=True))
        return 0
    ov = {o["key"]: o for o in view["overrides"]}
    output.out(f"{'key':<24} {'config':<40} effective")
    for k, v in view["config"].items():
        o = ov.get(k)
        note = ""
        if o is not None:
            until = f"until {o['until'][:16].replace('T', ' ')} UTC" if o["until"] else "until reset"
            note = f"  (override #{o['id']} by {line(o['by'])}, {until}: {line(o['reason'])})"
        output.out(f"{k:<24} {line(_show(v)):<40} {line(_show(view['effective'][k]))}{note}")
    return 0


def cmd_policy_set(args: argparse.Namespace, app: App) -> int:
    until = steering.until_ts(app.log, args.for_, args.until)
    e = steering.set_override(app.log, app.settings, args.key, args.value, by=steer.by(args),
                              reason=steer.reason(args), until=until)
    end = f"until {until[:16].replace('T', ' ')} UTC" if until else "until 'fleet-agent policy reset " + args.key + "'"
    output.out(f"policy override #{e.seq}: {args.key} {line(_show(e.payload['value']))} {end}")
    return 0


def cmd_policy_reset(args: argparse.Namespace, app: App) -> int:
    events = steering.reset_override(app.log, app.settings, args.key, by=steer.by(args),
                                     reason=(args.reason or "").strip() or None)
    ids = ", ".join(f"#{e.payload['override_id']}" for e in events)
    output.out(f"override {ids} of {args.key} ended; the config value "
               f"{line(_show(getattr(app.settings.policy, args.key)))} is in force")
    return 0
