"""`fleet-agent fork`: re-run a past moment with a change, into a new log; `fork diff`: compare decisions.

    fleet-agent fork --tick 42 --set policy.max_instances=4 --ticks 3 --out /tmp/what-if
    fleet-agent fork diff /tmp/what-if
"""

from __future__ import annotations

import argparse
from pathlib import Path

from agent.cli import output
from agent.errors import UsageError
from agent.runtime.app import App


def _out(s: str = "") -> None:
    output.out(s)


def cmd_fork(args: argparse.Namespace, app: App) -> int:
    from agent.fork import Change, Where, make_fork  # the simulator and the tick: only for the fork commands

    change = Change(sets=tuple(args.set or ()), prompt_dir=Path(args.prompt_dir) if args.prompt_dir else None,
                    model=(args.model[0], args.model[1]) if args.model else None, rules=args.rules)
    if not change.describe() and not args.same:
        raise UsageError("fork needs a change to try: --set KEY=VALUE, --prompt-dir DIR, --model URL NAME or "
                         "--rules (or --same to re-run the moment unchanged)")
    where = Where(tick=args.tick, at=args.at)
    r = make_fork(app.settings, where, change, ticks=args.ticks, out=Path(args.out) if args.out else None,
                  seed=args.seed, env=app.env)
    p = r.point
    _out(f"forked {app.settings.agent_id} at {p.label} (origin seq {p.seq}, hash {p.hash[:16]}), "
         f"change: {'; '.join(change.describe()) or 'none'}")
    _out(f"simulator seeded with {r.seeded.instances} instances, {r.seeded.offers} logged offers, balance "
         f"${r.seeded.balance:.2f}")
    for t in r.ticks:
        state = "completed" if t.ok else f"FAILED: {t.reason}"
        _out(f"  tick {t.tick} {state} ({t.steps} model steps" + (f"; {', '.join(t.actions)}" if t.actions else "")
             + ")")
    if r.replayed:
        _out(f"ticks {', '.join(map(str, r.replayed))} started as the origin's did (its observation, alerts and "
             "operator inputs), with the origin's results for the same calls")
    if r.live_why:
        _out(f"then on the fork's own simulator, seeded from the origin's state: {r.live_why}")
    _out(f"fork in {r.out}")
    _out(f"  compare:  fleet-agent fork diff {r.out}")
    _out(f"  read it:  fleet-agent --config {r.config} thread show")
    return 0 if all(t.ok for t in r.ticks) else 1


def cmd_fork_diff(args: argparse.Namespace, _app: App | None) -> int:
    from agent.fork import diff_fork, render

    origin, diffs, warnings = diff_fork(Path(args.fork_dir))
    if args.json:
        _out(output.json_text({"origin": origin, "ticks": [
            {"tick": d.tick, "same": d.same, "original": d.original.to_dict(), "fork": d.fork.to_dict()}
            for d in diffs], "warnings": warnings}, sort_keys=True))
        return 0
    for w in warnings:
        _out(f"WARNING: {w}")
    _out(f"fork of {origin['origin_fleet']} at {origin['at']} (origin seq {origin['origin_seq']}); change: "
         f"{'; '.join(str(c) for c in origin['changes']) or 'none'}; model: {origin['model']}")
    for line in render(diffs):
        _out(output.line(line))
    differ = sum(1 for d in diffs if not d.same)
    _out(f"{differ} of {len(diffs)} ticks decided differently")
    return 0
