"""`sim`: the vast.ai simulator on 127.0.0.1."""

from __future__ import annotations

import argparse


def cmd_sim(args: argparse.Namespace, _app: object) -> int:
    from agent.errors import UsageError
    from agent.sim import DEFAULT_START, ManualClock, serve_forever  # only for the command that serves it
    from agent.sim.realism import Realism

    if args.start is not None and not args.manual_clock:  # it would be ignored: the clock is the wall clock
        raise UsageError("--start sets the simulated start of a --manual-clock simulator; add --manual-clock "
                         "or drop --start")

    realism = Realism(rate_interval=args.rate_interval, listing_lag=args.listing_lag, logs_delay=args.logs_delay,
                      unschedulable=args.unschedulable, quick=1.0 if args.quick else 0.0)
    serve_forever(port=args.port, seed=args.seed, speed=args.speed, state_file=args.state, api_key=args.api_key,
                  realism=realism, clock=ManualClock(args.start or DEFAULT_START) if args.manual_clock else None)
    return 0
