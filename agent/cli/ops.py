"""Commands that run the fleet: `tick` (one tick now)."""

from __future__ import annotations

import argparse

from agent.cli import output
from agent.runtime.app import App


def cmd_tick(args: argparse.Namespace, app: App) -> int:
    from agent.runtime.tick import run_tick  # the tick and its clients: only for the command that runs one

    # The keys first, as `run` does: a missing or unreadable key is a config error, not a failed tick.
    app.settings.vast_api_key(app.env)
    app.settings.model_api_key(app.env)
    r = run_tick(app)
    if args.json:
        output.out(output.json_text(r.__dict__, sort_keys=True))
    else:
        state = "completed" if r.ok else f"FAILED: {r.reason}"
        output.out(f"tick {r.tick} {state} ({r.steps} model steps"
                   + (f"; {', '.join(r.actions)}" if r.actions else "") + ")")
    return 0 if r.ok else 1
