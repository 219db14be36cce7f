"""The rules provider's sizing on the simulator: mean job wait and $/job per scenario, and each rent's $/job
against the best on offer when it was made.

    python bench/sizing.py [--ticks 36] [--seed 0] [--scenario NAME ...]

Runs the demo's configuration (the built-in rules provider, 5 simulated minutes per tick) through a few
scenarios, with ground truth from the simulator: mean wait = job-hours waited / jobs arrived (the queue
sampled every simulated minute), $/job = what the simulator billed / jobs completed. Scenarios:

    day        the seed's own demand (a day cycle with bursts)
    backlog    400 jobs already waiting at the start
    surge      the best GPU model per job (RTX 4090) doubles in price after tick 8, with 300 jobs queued

Figures only; nothing here asserts. Run from another checkout with PYTHONPATH=<checkout> to compare.
"""

from __future__ import annotations

import argparse
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
from agent.sim.market import MODEL_BY_NAME

SURGE_GPU = "RTX 4090"
SURGE_AT = 8


def _best_per_job(sim: Simulator, allowed: list[str], max_dph: float) -> float:
    """The best true $/job among the unrented single-GPU offers policy would allow."""
    out = [o["dph_total"] / MODEL_BY_NAME[o["gpu_name"]].jobs_per_h_per_gpu for o in sim.offers.values()
           if not o["rented"] and o["num_gpus"] == 1 and o["gpu_name"] in allowed and o["dph_total"] <= max_dph
           and o["reliability"] >= 0.95 and o["host_id"] not in sim.bad_hosts]
    return min(out) if out else float("nan")


def run(scenario: str, seed: int, ticks: int) -> dict[str, Any]:
    clock = ManualClock()
    sim = Simulator(seed=seed, clock=clock, api_key=SIM_KEY)
    if scenario == "backlog":
        sim.pending = 400.0
    if scenario == "surge":
        sim.pending = 300.0
    with tempfile.TemporaryDirectory() as tmp, SimServer(sim) as server:
        root = Path(tmp)
        (root / "vast_api_key").write_text(SIM_KEY + "\n", encoding="utf-8")
        os.chmod(root / "vast_api_key", 0o600)
        (root / "knowledge").mkdir()
        cfg = root / "config.yaml"
        cfg.write_text(demo_config(root, server.url, model_url=None, model=None, budget=30000), encoding="utf-8")
        app = App(config.load(str(cfg)), clock=clock)
        app.init_database()
        allowed = app.settings.policy.allowed_gpus
        p0, c0 = sim.pending, sim.completed
        waited = 0.0
        rents: list[tuple[str, float, float]] = []  # (gpu, $/job rented, best $/job on offer then)
        try:
            for n in range(ticks):
                if scenario == "surge" and n == SURGE_AT:
                    for o in sim.offers.values():
                        if o["gpu_name"] == SURGE_GPU:
                            o["dph_total"] = round(o["dph_total"] * 2, 4)
                            o["dph_base"] = round(o["dph_base"] * 2, 4)
                before = set(sim.instances)
                best = _best_per_job(sim, allowed, app.settings.policy.max_dph_per_instance)
                run_tick(app)
                for iid in sorted(set(sim.instances) - before):
                    i = sim.instances[iid]
                    rents.append((i["gpu_name"], i["dph_total"] / MODEL_BY_NAME[i["gpu_name"]].jobs_per_h_per_gpu,
                                  best))
                for _ in range(int(TICK_SECONDS // 60)):
                    clock.advance(60)
                    sim.tick()
                    waited += sim.pending * 60 / 3600
            billed = sum(sim.billing().values())
        finally:
            app.close()
    arrived = (sim.completed - c0) + (sim.pending - p0) + p0
    done = sim.completed - c0
    post = [r for r in rents] if scenario != "surge" else rents[-max(1, len(rents) // 2):]
    return {"scenario": scenario, "mean_wait_min": round(60 * waited / arrived, 1) if arrived else None,
            "usd_per_job": round(billed / done, 4) if done else None, "jobs_done": round(done),
            "pending_end": round(sim.pending), "spend": round(billed, 2), "rents": len(rents),
            "rent_vs_best": [round(r[1] / r[2], 3) for r in post if r[2] == r[2]]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ticks", type=int, default=36)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scenario", action="append", choices=["day", "backlog", "surge"])
    args = ap.parse_args()
    for sc in args.scenario or ["day", "backlog", "surge"]:
        print(json.dumps(run(sc, args.seed, args.ticks)))


if __name__ == "__main__":
    main()
