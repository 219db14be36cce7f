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


def cmd_policy_proposals(args: argparse.Namespace, app: App) -> int:
    from agent.fleet import constraints

    ps = [p for p in constraints.proposals(app.log).values() if args.all or p.state == "proposed"]
    rows = [{"id": p.id, "state": p.state, "constraint": p.constraint.kind, "value": p.constraint.value,
             "until": p.constraint.until, "source": p.source, "source_seq": p.source_seq, "by": p.by,
             "decided_by": p.decided_by, "text": p.text, "ts": p.ts} for p in ps]
    if args.json:
        output.out(output.json_text(rows, indent=2, sort_keys=True))
        return 0
    if not rows:
        output.out("no proposals" if args.all else "no proposals waiting; --all lists the decided ones too")
    for p in ps:
        output.out(f"#{p.id:<5} {p.state:<9} {line(p.describe())}  (from {p.source} by {line(p.by)}: "
                   f"{line(p.text[:80])})")
    return 0


def cmd_policy_accept(args: argparse.Namespace, app: App) -> int:
    from agent.fleet import constraints

    for p, what in constraints.accept(app.log, app.settings, args.ids, by=steer.by(args)):
        output.out(f"constraint #{p.id} accepted: {line(p.describe())}; enforced now ({line(what)})")
    return 0


def cmd_policy_reject(args: argparse.Namespace, app: App) -> int:
    from agent.fleet import constraints

    for p in constraints.reject(app.log, args.ids, by=steer.by(args), reason=(args.reason or "").strip() or None):
        output.out(f"constraint #{p.id} rejected: {line(p.describe())}; the words stay advice to the agent")
    return 0
