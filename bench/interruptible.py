"""Interruptible fleets: $/job and mean job wait with bids against on-demand, for a workload that tolerates
interruption (a proof job lost to an outbid is simply run again).

    python bench/interruptible.py [--ticks 144] [--seed 0] [--rate 30] [--max-bid-share 0.7] [--json] [--breakdown]

Runs the same scenario twice, each against its own `fleet-agent sim --manual-clock` subprocess (same seed, the
simulator's default market: bids follow a moving market and are outbid), with the agent's real tick and the
built-in rules provider, 5 simulated minutes a tick, reusing bench/outcomes.py's simulator driver and agent
config: once on-demand (the default policy), once with `policy.interruptible: true`. Every figure comes from
the simulator's ground truth (GET /_sim/accounting); outbids are counted from the agent's log. Figures only.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.outcomes import TICK_S, Sim, agent_config  # noqa: E402


@dataclass
class Figures:
    arm: str
    ticks: int
    wait_min: float
    spend: float
    jobs_served: float
    per_job: float | None
    outbids: int
    rents: int
    wall_s: float
    breakdown: dict[str, float] | None = None  # --breakdown: mean wait (min) by what the fleet was doing


def _phase(t_h: float, stopped: bool, capacity: float, rate: float) -> str:
    """What a tick's wait is put down to: the first hour (the fleet's ramp), an instance stopped (outbid) with what
    runs below the arrivals (the gap not yet covered) or not (the backlog it left draining), or neither: capacity
    below the arrivals (a rent not yet running, a swap, a host lost) or a backlog draining."""
    if t_h < 1.0:
        return "ramp (first hour)"
    if stopped:
        return "outbid, uncovered" if capacity < rate else "outbid, covered"
    return "under arrivals" if capacity < rate else "backlog draining"


def run(arm: str, ticks: int, seed: int, rate: float, max_bid_share: float, trace: bool = False,
        breakdown: bool = False) -> Figures:
    from agent import config
    from agent.runtime.app import App
    from agent.runtime.tick import run_tick

    t0 = time.monotonic()
    sim = Sim(seed)
    tmp = tempfile.TemporaryDirectory(prefix="interruptible-")
    app = None
    try:
        cfg = agent_config(Path(tmp.name), sim.url, None, None)
        if arm == "interruptible":  # the policy section is the config's last: these keys join it
            with cfg.open("a", encoding="utf-8") as fh:
                fh.write(f"  interruptible: true\n  max_bid_share: {max_bid_share}\n")
        now = sim.now()
        clock = [now]
        app = App(config.load(str(cfg)), clock=lambda: clock[0])
        app.init_database()
        sim.post("/_sim/demand", {"pending": 0})
        sim.post("/_sim/arrivals", {"shape": "constant", "rate": rate})
        base = sim.get("/_sim/accounting")
        waited_by: dict[str, float] = {}
        for _ in range(ticks):
            clock[0] = now
            seen = next((e.seq for e in app.log.read(0, newest_first=True, limit=1)), 0) if trace else 0
            run_tick(app)
            if trace:  # what the tick decided, and why (the agent's log: labels only)
                for e in app.log.read(seen, kinds=["model.response", "instance.outbid", "tool.result"]):
                    what = e.payload.get("text") if e.kind == "model.response" else \
                        f"{e.payload.get('name')} ok={e.payload.get('ok')}" if e.kind == "tool.result" else e.payload
                    print(f"{arm}   {e.kind}: {str(what)[:400]}", file=sys.stderr)
            if breakdown:  # the fleet as the tick left it, and the job-hours waited until the next
                before = sim.get("/_sim/accounting")
                key = _phase((float(before["now"]) - float(base["now"])) / 3600.0,
                             any(i["status"] == "stopped" for i in before["instances"]),
                             float(before["capacity_jobs_per_h"]), rate)
            now = float(sim.post("/_sim/advance", {"seconds": TICK_S})["now"])
            if breakdown:
                after = sim.get("/_sim/accounting")
                waited_by[key] = waited_by.get(key, 0.0) + after["job_hours_waited"] - before["job_hours_waited"]
            if trace:
                a = sim.get("/_sim/accounting")
                print(f"{arm} t={(now - float(base['now'])) / 60:5.0f}m pending {a['pending']:6.1f} capacity "
                      f"{a['capacity_jobs_per_h']:5.1f} " + " ".join(
                          f"{i['id'] % 1000}:{i['gpu_name'][-4:]}:{i['status']}:{i['dph_total']:.3f}" for i in a["instances"]
                          if i["status"] != "destroyed"), file=sys.stderr)
        acc = sim.get("/_sim/accounting")
        arrived = acc["jobs_arrived"] - base["jobs_arrived"]
        served = acc["jobs_served"] - base["jobs_served"]
        waited = acc["job_hours_waited"] - base["job_hours_waited"]
        spend = acc["spend"] - base["spend"]
        outbids = len(list(app.log.read(0, kinds=["instance.outbid"])))
        return Figures(arm, ticks, round(60.0 * waited / arrived, 2) if arrived else 0.0, round(spend, 4),
                       round(served, 1), round(spend / served, 5) if served else None, outbids,
                       len(acc["instances"]), round(time.monotonic() - t0, 1),
                       {k: round(60.0 * v / arrived, 2) for k, v in sorted(waited_by.items())}
                       if breakdown and arrived else None)
    finally:
        if app is not None:
            app.close()
        sim.close()
        tmp.cleanup()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--ticks", type=int, default=144)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rate", type=float, default=30.0, help="jobs arriving per hour (constant)")
    ap.add_argument("--max-bid-share", type=float, default=0.7)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--trace", action="store_true",
                    help="each tick's queue and instances, and the decisions and outbids the agent logged, on stderr")
    ap.add_argument("--breakdown", action="store_true",
                    help="each arm's mean wait split by what the fleet was doing when the jobs waited")
    ap.add_argument("--arm", choices=("both", "on-demand", "interruptible"), default="both",
                    help="run one arm only (the on-demand arm does not bid: a change to bidding leaves it as it was)")
    args = ap.parse_args(argv)
    res = [run(a, args.ticks, args.seed, args.rate, args.max_bid_share, args.trace, args.breakdown)
           for a in ("on-demand", "interruptible") if args.arm in ("both", a)]
    if args.json:
        print(json.dumps([asdict(r) for r in res], indent=2))
        return 0
    hours = args.ticks * TICK_S / 3600
    print(f"{args.ticks} ticks ({hours:.1f} simulated hours), {args.rate:g} jobs/h, seed {args.seed}, "
          f"max_bid_share {args.max_bid_share}")
    print(f"{'arm':<14} {'wait min':>8} {'spend $':>9} {'served':>7} {'$/job':>8} {'outbids':>7} {'rents':>5}")
    for r in res:
        per = f"{r.per_job:.5f}" if r.per_job is not None else "-"
        print(f"{r.arm:<14} {r.wait_min:8.2f} {r.spend:9.3f} {r.jobs_served:7.1f} {per:>8} {r.outbids:7d} "
              f"{r.rents:5d}")
        if r.breakdown is not None:
            print("    wait min by phase: " + ", ".join(f"{k} {v:.2f}" for k, v in r.breakdown.items()))
    if len(res) < 2:
        return 0
    od, bid = res
    if od.per_job and bid.per_job:
        print(f"interruptible vs on-demand: $/job {bid.per_job / od.per_job - 1:+.1%}, "
              f"mean wait {bid.wait_min - od.wait_min:+.2f} min")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
