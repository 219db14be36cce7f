"""`fleet-agent demo`."""

from __future__ import annotations

import argparse

from agent import logsetup
from agent.errors import UsageError


def cmd_demo(args: argparse.Namespace, _app: object) -> int:
    from agent.runtime.demo import run_demo  # the simulator and the tick: only for the command that runs them

    logsetup.configure("error", "auto")  # the demo prints its own story; everything is in the log

    if bool(args.model_url) != bool(args.model):
        raise UsageError("--model-url and --model go together")
    return run_demo(ticks=args.ticks, speed=args.speed, model_url=args.model_url, model=args.model,
                    keep=args.keep, seed=args.seed, model_timeout=args.model_timeout)
