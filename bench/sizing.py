"""The rules provider's sizing on the simulator: mean job wait and $/job per scenario, and each rent's $/job
against the best on offer when it was made.

    python bench/sizing.py [--ticks 36] [--seed 0] [--scenario NAME ...]

Runs the demo's configuration (the built-in rules provider, 5 simulated minutes per tick; 10 GB disks,
reliability from 0.9, up to 12 instances, 20 rents an hour, $20/h, so the market is deep enough to choose
from) through a few scenarios, with ground truth from the simulator: mean wait = job-hours waited / jobs arrived (the queue
sampled every simulated minute), $/job = what the simulator billed / jobs completed. Scenarios:

    day        the seed's own demand (a day cycle with bursts)
    backlog    150 jobs already waiting at the start
    ebb        300 jobs waiting, then the queue empties at tick 8 (a surplus to shed)
    surge      as ebb, then at tick 10 the best GPU model per job (RTX 4090) doubles in price and 300 jobs
               arrive

rent_vs_best: each rent's true $/job (by what the simulator's GPUs really do; $/h and the traffic its host
bills for what an instance moves on average) over the best on offer when
it was made (a tick's k-th cheapest rent against the k-th best offer), from tick 10 on in surge.

Figures only; nothing here asserts. Run from another checkout with PYTHONPATH=<checkout> to compare.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from agent import config
from agent.runtime.app import App
from agent.runtime.demo import SIM_KEY, TICK_SECONDS, demo_config
from agent.runtime.tick import run_tick
from agent.sim import ManualClock, SimServer, Simulator
from agent.sim.instances import true_per_job

SURGE_GPU = "RTX 4090"
EBB_AT = 8
SURGE_AT = 10


def _offers_per_job(sim: Simulator, allowed: list[str], max_dph: float) -> list[float]:
    """The true $/job of every unrented single-GPU offer policy would allow, on a good host, best first."""
    return sorted(true_per_job(o) for o in sim.offers.values()
                  if not o["rented"] and o["num_gpus"] == 1 and o["gpu_name"] in allowed
                  and o["dph_total"] <= max_dph and o["reliability"] >= 0.9 and o["host_id"] not in sim.bad_hosts
                  and o["disk_space"] >= 10)


def run(scenario: str, seed: int, ticks: int) -> dict[str, Any]:
    clock = ManualClock()
    sim = Simulator(seed=seed, clock=clock, api_key=SIM_KEY)
    sim.pending = {"backlog": 150.0, "ebb": 300.0, "surge": 300.0}.get(scenario, sim.pending)
    with tempfile.TemporaryDirectory() as tmp, SimServer(sim) as server:
        root = Path(tmp)
        (root / "vast_api_key").write_text(SIM_KEY + "\n", encoding="utf-8")
        os.chmod(root / "vast_api_key", 0o600)
        (root / "knowledge").mkdir()
        cfg = root / "config.yaml"
        cfg.write_text(demo_config(root, server.url, model_url=None, model=None, budget=30000), encoding="utf-8")
        s = config.load(str(cfg))
        # a market deep enough to choose from: small-disk hosts and reliability down to 0.9, caps with room
        s = dataclasses.replace(s, fleet=dataclasses.replace(s.fleet, disk_gb=10.0),
                                policy=dataclasses.replace(s.policy, min_reliability=0.9, max_instances=12,
                                                           max_total_dph=20.0, max_rents_per_hour=20,
                                                           max_destroys_per_hour=20))
        app = App(s, clock=clock)
        app.init_database()
        allowed = app.settings.policy.allowed_gpus
        c0 = sim.completed
        waited = 0.0
        rents: list[tuple[int, float, float]] = []  # (tick, $/job rented, the matching best $/job on offer)
        try:
            for n in range(ticks):
                if scenario in ("ebb", "surge") and n == EBB_AT:
                    sim.pending = 0.0
                if scenario == "surge" and n == SURGE_AT:
                    sim.pending += 300.0
                    for o in sim.offers.values():
                        if o["gpu_name"] == SURGE_GPU:
                            o["dph_total"] = round(o["dph_total"] * 2, 4)
                            o["dph_base"] = round(o["dph_base"] * 2, 4)
                before = set(sim.instances)
                best = _offers_per_job(sim, allowed, app.settings.policy.max_dph_per_instance)
                run_tick(app)
                # the k-th cheapest rent of a tick against the k-th best offer on the market at its start
                got = sorted(true_per_job(sim.instances[iid]) for iid in set(sim.instances) - before)
                rents.extend((n, g, best[min(k, len(best) - 1)] if best else float("nan")) for k, g in enumerate(got))
                for _ in range(int(TICK_SECONDS // 60)):
                    clock.advance(60)
                    sim.tick()
                    waited += sim.pending * 60 / 3600
            billed = sum(sim.billing().values())
        finally:
            app.close()
    done = sim.completed - c0
    arrived = done + sim.pending  # served or still waiting (jobs taken away at an ebb are neither)
    post = [r for r in rents if scenario != "surge" or r[0] >= SURGE_AT]
    return {"scenario": scenario, "mean_wait_min": round(60 * waited / arrived, 1) if arrived else None,
            "usd_per_job": round(billed / done, 4) if done else None, "jobs_done": round(done),
            "pending_end": round(sim.pending), "spend": round(billed, 2), "rents": len(rents),
            "rent_vs_best": [round(r[1] / r[2], 3) for r in post if r[2] == r[2]],
            "code": str(Path(config.__file__).parent.parent)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ticks", type=int, default=36)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scenario", action="append", choices=["day", "backlog", "ebb", "surge"])
    args = ap.parse_args()
    for sc in args.scenario or ["day", "backlog", "ebb", "surge"]:
        print(json.dumps(run(sc, args.seed, args.ticks)))


if __name__ == "__main__":
    main()
