"""`fleet-agent demo`."""

from __future__ import annotations

import argparse

from agent import logsetup
from agent.cli import args as args_
from agent.errors import UsageError


def cmd_demo(args: argparse.Namespace, _app: object) -> int:
    from agent.runtime.demo import run_demo  # the simulator and the tick: only for the command that runs them

    logsetup.configure("error", "auto")  # the demo prints its own story; everything is in the log

    if bool(args.model_url) != bool(args.model):
        raise UsageError("--model-url and --model go together")
    return run_demo(ticks=args.ticks, speed=args.speed, model_url=args.model_url, model=args.model,
                    keep=args.keep, seed=args.seed, model_timeout=args.model_timeout)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("demo", help="run a simulated fleet for a few minutes (no keys, no servers needed)",
                       description="Start the vast.ai simulator in-process, run N ticks with the built-in rules "
                       "provider (or a real OpenAI-compatible model), with an operator who acks an alert, edits "
                       "a knowledge file and pins a directive midway. Exit 0 only if every tick completed and the "
                       "log verifies.")
    s.add_argument("--ticks", type=args_.number, default=15, help="how many ticks (default 15)")
    s.add_argument("--speed", type=args_.positive, default=600.0,
                   help="simulated seconds per real second between ticks (default 600: a tick every 0.5 s)")
    s.add_argument("--model-url", help="an OpenAI-compatible base URL, e.g. http://127.0.0.1:11434/v1")
    s.add_argument("--model", help="the model name at --model-url")
    s.add_argument("--model-timeout", type=args_.positive, default=None, metavar="SECONDS",
                   help="how long one model request may take (default 600 with --model-url: a cold CPU model "
                   "needs minutes for its first request)")
    s.add_argument("--keep", metavar="DIR", help="keep the data and config in DIR (must be empty)")
    s.add_argument("--seed", type=args_.count, default=11, help="simulator seed (default 11)")
    s.set_defaults(func=cmd_demo, no_config=True)
