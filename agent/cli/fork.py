"""`fleet-agent fork`: re-run a past moment with a change, into a new log; `fork diff`: compare decisions.

    fleet-agent fork --tick 42 --set policy.max_instances=4 --ticks 3 --out /tmp/what-if
    fleet-agent fork diff /tmp/what-if
"""

from __future__ import annotations

import argparse
from pathlib import Path

from agent.cli import args as args_
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


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("fork", help="re-run a past moment with a change, into a new log (what if)",
                       description="Fork the log at a tick or a time: the context exactly as it was, the change "
                       "applied (settings, prompts or model), K ticks against a simulator seeded from what the "
                       "log recorded then, into a new log in its own directory. The real fleet and the real log "
                       "are never touched (the database is opened read-only). 'fork diff DIR' compares the "
                       "decisions.")
    s.add_argument("--tick", type=args_.number, help="re-run from the start of this tick")
    s.add_argument("--at", metavar="TIME", help="the log as it stood at this time (ISO 8601; a tick running then "
                   "is re-run from its start)")
    s.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="change a setting in the fork, e.g. policy.max_instances=4 (repeatable)")
    s.add_argument("--prompt-dir", metavar="DIR", help="prompt files (system.md, summarize.md) to try instead")
    s.add_argument("--model", nargs=2, metavar=("URL", "NAME"), help="an OpenAI-compatible model server and model "
                   "(its key, if it needs one, from $FLEET_AGENT_FORK_MODEL_KEY: the configured key goes only to "
                   "the configured server)")
    s.add_argument("--rules", action="store_true", help="decide with the built-in rules provider")
    s.add_argument("--same", action="store_true", help="re-run without a change (how repeatable is the model?)")
    s.add_argument("--ticks", type=args_.number, default=1, help="how many ticks to run (default 1)")
    s.add_argument("--out", metavar="DIR", help="the fork's directory (new or empty; default: a new temp dir)")
    s.add_argument("--seed", type=args_.count, default=0, help="the simulator's seed for what the log does not "
                   "hold (the rest of the market, host behaviour)")
    s.set_defaults(func=cmd_fork)
    fsub = s.add_subparsers(dest="fork_command", metavar="SUBCOMMAND")
    d = fsub.add_parser("diff", help="compare what the model decided in the origin and in a fork",
                        description="Step by step, what the model decided in the original log and in the fork: "
                        "tool calls and their outcomes, policy blocks, alerts, how each tick ended.")
    d.add_argument("fork_dir", help="the fork's directory (printed by 'fleet-agent fork')")
    d.add_argument("--json", action="store_true", help="print the comparison as JSON")
    d.set_defaults(func=cmd_fork_diff, no_config=True)
