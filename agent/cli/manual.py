"""``instances``, ``destroy``, ``drain``: manual actions through the same log and pipeline as the agent's."""

from __future__ import annotations

import argparse
from typing import Any

from agent.cli import output, steer
from agent.cli.output import line
from agent.errors import FleetAgentError
from agent.runtime import manual
from agent.runtime.app import App


def _age(s: Any) -> str:
    if not isinstance(s, int | float):
        return "-"
    m = int(s) // 60
    return f"{m // 60}h{m % 60:02d}m" if m >= 60 else f"{m}m"


def cmd_instances(args: argparse.Namespace, app: App) -> int:
    rows = manual.instances(app)
    if args.json:
        output.out(output.json_text(rows, indent=2))
        return 0
    if not rows:
        output.out("no instances on the account")
        return 0
    output.out(f"{'id':<10} {'ours':<4} {'status':<14} {'since':<17} {'age':>7} {'$/h':>7} {'host':<8} gpu / label")
    for r in rows:
        since = r["status_since"][:16].replace("T", " ") if r["status_since"] else "-"
        dph = f"{r['dph']:.3f}" if isinstance(r["dph"], int | float) else "-"
        output.out(f"{r['id']:<10} {'yes' if r['ours'] else 'no':<4} {line(r['status']):<14} {since:<17} "
                   f"{_age(r['age_s']):>7} {dph:>7} {line(r['host_id']):<8} {line(r['gpu_name'])} "
                   f"x{r['num_gpus']} / {line(r['label'] or '-')}")
    return 0


def _said(d: manual.Destroyed) -> str:
    o = d.outcome
    return line(o.output if o.ok else (o.error or "failed"))


def cmd_destroy(args: argparse.Namespace, app: App) -> int:
    reason = steer.reason(args)
    by = steer.by(args)
    steer.confirm(args, f"destroy instance {args.id}")
    d = manual.destroy(app, args.id, by=by, reason=reason, force=args.force)
    output.out(f"{_said(d)} (operator event #{d.event_seq})")
    if not d.outcome.ok:
        raise FleetAgentError(f"destroy of instance {args.id} did not complete; 'fleet-agent thread show --since "
                              f"{d.event_seq}' shows the attempt")
    return 0


def cmd_drain(args: argparse.Namespace, app: App) -> int:
    reason = (args.reason or "").strip() or "operator drain"
    steer.confirm(args, "destroy every instance of ours and pause")
    done, pause_seq = manual.drain(app, by=steer.by(args), reason=reason)
    for d in done:
        output.out(f"#{d.instance_id}: {_said(d)}")
    failed = [d for d in done if not d.outcome.ok]
    output.out(f"drained: {len(done) - len(failed)} of {len(done)} instances destroyed; paused (event #{pause_seq}); "
               "'fleet-agent resume' ends the pause")
    if failed:
        raise FleetAgentError(f"{len(failed)} destroys did not complete; run 'fleet-agent instances' and "
                              "'fleet-agent destroy ID' for each")
    return 0
