"""Spend from the log against the simulator's own billing, over a run of the demo's fleet.

    python bench/spend_vs_billing.py [--ticks 144] [--seed 0] [--interruptible]

Runs the demo's configuration (the built-in rules provider renting and destroying against the
simulator, 5 simulated minutes per tick), then prints what `fleet-agent spend` computes from the log
and what the simulator billed for the same instances: in total, per instance, and the % difference,
with the bandwidth part (vast.ai bills traffic per GB at each host's prices) on its own line.
With --interruptible the fleet bids (``policy.interruptible: true``): outbids, re-bids and lowered bids
(``instance.bid``) are in the figures.
Figures only; nothing here asserts.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from agent import config
from agent.fleet import spend
from agent.runtime.app import App
from agent.runtime.demo import SIM_KEY, TICK_SECONDS, demo_config
from agent.runtime.tick import run_tick
from agent.sim import ManualClock, SimServer, Simulator


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ticks", type=int, default=144)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--interruptible", action="store_true", help="the fleet bids (policy.interruptible: true)")
    args = ap.parse_args()
    clock = ManualClock()
    sim = Simulator(seed=args.seed, clock=clock, api_key=SIM_KEY)
    with tempfile.TemporaryDirectory() as tmp, SimServer(sim) as server:
        root = Path(tmp)
        (root / "vast_api_key").write_text(SIM_KEY + "\n", encoding="utf-8")
        os.chmod(root / "vast_api_key", 0o600)
        (root / "knowledge").mkdir()
        cfg = root / "config.yaml"
        text = demo_config(root, server.url, model_url=None, model=None, budget=30000)
        if args.interruptible:
            text = text.replace("\npolicy:\n", "\npolicy:\n  interruptible: true\n", 1)
        cfg.write_text(text, encoding="utf-8")
        app = App(config.load(str(cfg)), clock=clock)
        app.init_database()
        try:
            for n in range(args.ticks):
                run_tick(app)
                if n + 1 < args.ticks:
                    clock.advance(TICK_SECONDS)
            rep = spend.report(app.log)
            billed = sim.billing()
            led = spend.Ledger.of(app.log)
            epoch = spend.datetime(1970, 1, 1, tzinfo=spend.UTC)
            log_traffic = sum(led.traffic_cost(r, epoch, led.now) for r in led.rentals)
            sim_traffic = {iid: float(i.get("_traffic_cost", 0.0)) for iid, i in {**sim.destroyed, **sim.instances}.items()}
        finally:
            app.close()
    ours = [i for i in rep["instances"]]
    sim_total = sum(billed.get(i["instance_id"], 0.0) for i in ours)
    hours = args.ticks * TICK_SECONDS / 3600
    print(f"{args.ticks} ticks ({hours:.1f} simulated hours), {len(ours)} instances of ours"
          + (", interruptible" if args.interruptible else ""))
    for i in ours:
        b = billed.get(i["instance_id"], 0.0)
        diff = (i["spent"] - b) / b * 100 if b else float("nan")
        print(f"  #{i['instance_id']} {i['gpu_name']:<10} {i['hours']:7.2f} h  log ${i['spent']:8.4f}  "
              f"simulator ${b:8.4f}  {diff:+6.2f} %")
    diff = (rep["total"] - sim_total) / sim_total * 100 if sim_total else float("nan")
    print(f"total: log ${rep['total']:.4f}  simulator ${sim_total:.4f}  difference {diff:+.2f} %")
    st = sum(sim_traffic.get(i["instance_id"], 0.0) for i in ours)
    tdiff = (log_traffic - st) / st * 100 if st else float("nan")
    print(f"of which bandwidth: log ${log_traffic:.4f}  simulator ${st:.4f}  difference {tdiff:+.2f} %")


if __name__ == "__main__":
    main()
