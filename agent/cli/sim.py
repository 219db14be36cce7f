"""`sim`: the vast.ai simulator on 127.0.0.1."""

from __future__ import annotations

import argparse
from typing import Any

from agent.cli import args as args_


def cmd_sim(args: argparse.Namespace, _app: object) -> int:
    from agent.sim import DEFAULT_START, ManualClock, serve_forever  # only for the command that serves it
    from agent.sim.realism import Realism

    realism = Realism(rate_interval=args.rate_interval, listing_lag=args.listing_lag, logs_delay=args.logs_delay,
                      unschedulable=args.unschedulable)
    serve_forever(port=args.port, seed=args.seed, speed=args.speed, state_file=args.state, api_key=args.api_key,
                  realism=realism, clock=ManualClock(args.start or DEFAULT_START) if args.manual_clock else None)
    return 0


def register(sub: argparse._SubParsersAction[Any]) -> None:
    s = sub.add_parser("sim", help="run the vast.ai simulator on 127.0.0.1",
                       description="Serve a vast.ai-compatible API (and GET /demand) on 127.0.0.1.")
    s.add_argument("--port", type=args_.port, default=18790, help="port (default 18790)")
    s.add_argument("--seed", type=args_.count, default=0, help="market and fault seed")
    s.add_argument("--speed", type=args_.positive, default=1.0, help="simulated seconds per real second")
    s.add_argument("--state", help="persist state to this file and reload it on start")
    s.add_argument("--api-key", default="sim-key", help="the key clients must send (default sim-key)")
    s.add_argument("--rate-interval", type=args_.non_negative, default=0.5,
                   help="seconds between two requests to one endpoint, as vast.ai limits them (0 = off; default 0.5)")
    s.add_argument("--listing-lag", type=args_.non_negative, default=30.0,
                   help="simulated seconds before a new instance is listed (default 30)")
    s.add_argument("--logs-delay", type=args_.non_negative, default=2.5,
                   help="seconds before requested logs are ready (default 2.5)")
    s.add_argument("--unschedulable", type=args_.fraction, default=0.0,
                   help="probability a rent's machine cannot be scheduled (default 0)")
    s.add_argument("--manual-clock", action="store_true",
                   help="simulated time moves only when told to, by POST /_sim/advance {\"seconds\": s}")
    s.add_argument("--start", type=args_.positive, default=None,
                   help="with --manual-clock: the simulated start, a Unix time (default 1750000000)")
    s.set_defaults(func=cmd_sim, no_config=True)
