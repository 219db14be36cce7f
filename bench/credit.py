"""A credit run-out and a top-up, judged from the simulator's state: what the fleet lost and how fast it came back.

    python bench/credit.py [--seed 0] [--warmup 24] [--outage 6] [--model rules|renter] [--compare DIR]

Runs the demo's configuration (the built-in rules provider against the simulator, 5 simulated minutes per
tick): ``--warmup`` ticks to build the fleet, then the account's credit is set to $0 (vast.ai stops every
instance), ``--outage`` ticks without credit, then a top-up of $500 and ticks until the running capacity
(jobs/h of our running instances, as the simulator rates them) is back to what it was before the run-out
(at most 24). Prints: instances destroyed, disks kept, ``host.failed`` events, hosts excluded, critical
alerts, rents vast.ai refused with HTTP 402, rents refused in code (``credit_exhausted``), rents blocked by
the hourly limit, ticks until the capacity is back, and $/h per job/h of capacity before and after.

``--compare DIR`` runs the same scenario a second time with the agent from the checkout DIR first on the
import path (e.g. an export of the commit before this change: ``git archive <commit> | tar -x -C DIR``)
and prints both side by side. Figures only; nothing here asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from agent import config
from agent.fleet.policy import Policy
from agent.runtime.app import App
from agent.runtime.demo import SIM_KEY, TICK_SECONDS, demo_config
from agent.runtime.tick import run_tick
from agent.sim import ManualClock, SimServer, Simulator
from agent.sim import instances as sim_instances

TOP_UP = 500.0
MAX_RECOVERY_TICKS = 24


class Renter:
    """``--model renter``: a model that keeps the fleet at a fixed size whatever the credit, as a language
    model that does not read money well does: each tick it counts our instances that run or are starting
    (and any the system started this tick), searches, and rents the cheapest offers for the rest. It
    destroys nothing and never reads the credit."""

    can_summarise = False

    def __init__(self, app: App, target: int) -> None:
        self.app, self.target, self.name = app, target, "renter"

    def list_models(self) -> list[str]:
        return [self.name]

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        from agent.model.llm import ModelReply, ToolCall, Usage
        from agent.model.rules import _parse_offers

        log = self.app.log
        start = next(log.read(0, kinds=["tick.started"], newest_first=True, limit=1))
        since = list(log.read(start.seq, kinds=["model.response", "tool.result", "system.start"]))
        live = {i["id"] for i in start.payload["observation"]["instances"]
                if i["ours"] and i["status"] in ("running", "loading", "created", "provisioning", "unlisted")}
        live |= {e.payload["instance_id"] for e in since if e.kind == "system.start" and e.payload.get("ok")}
        need = self.target - len(live)
        steps = sum(1 for e in since if e.kind == "model.response")
        searched = [e for e in since if e.kind == "tool.result" and e.payload["name"] == "search_offers"
                    and e.payload["ok"]]
        calls: list[tuple[str, dict[str, Any]]] = []
        if need > 0 and steps == 0:
            calls = [("search_offers", {"limit": 25})]
        elif need > 0 and steps == 1 and searched:
            offers = _parse_offers(searched[-1].payload.get("output", ""))[:need]
            calls = [("rent_instance", {"offer_id": o["id"], "reason": "keep the fleet at its size"}) for o in offers]
        tick = start.tick
        return ModelReply(text=f"renter: {len(live)} live, target {self.target}",
                          tool_calls=tuple(ToolCall(f"renter_{tick}_{steps}_{n}", name, json.dumps(args))
                                           for n, (name, args) in enumerate(calls)),
                          usage=Usage(0, 0, 0), finish_reason="tool_calls" if calls else "stop", model=self.name)


def _set_credit(sim: Simulator, amount: float) -> None:
    setter = getattr(sim, "set_credit", None)
    if setter is not None:
        setter(amount)
    else:  # a simulator from before set_credit: it stops everything at its next step when the balance is <= 0
        with sim._lock:
            sim.tick()
            sim.balance = amount


def _capacity(sim: Simulator, policy: Policy) -> tuple[float, float, int]:
    """(jobs/h, $/h, count) of our running instances, as the simulator has them."""
    run = [i for i in sim.instances.values() if policy.is_our_label(i["label"]) and i["actual_status"] == "running"]
    return (sum(sim_instances.jobs_per_h(i) for i in run), sum(float(i["dph_total"]) for i in run), len(run))


def _events(app: App, since: int, kind: str) -> list[Any]:
    return [e for e in app.log.read(since, kinds=[kind]) if e.seq > since]


def scenario(seed: int, warmup: int, outage: int, model: str = "rules") -> dict[str, Any]:
    clock = ManualClock()
    sim = Simulator(seed=seed, clock=clock, api_key=SIM_KEY)
    with tempfile.TemporaryDirectory() as tmp, SimServer(sim) as server:
        root = Path(tmp)
        (root / "vast_api_key").write_text(SIM_KEY + "\n", encoding="utf-8")
        os.chmod(root / "vast_api_key", 0o600)
        (root / "knowledge").mkdir()
        cfg = root / "config.yaml"
        cfg.write_text(demo_config(root, server.url, model_url=None, model=None, budget=30000), encoding="utf-8")
        app = App(config.load(str(cfg)), clock=clock)
        app.init_database()
        policy = Policy(app.settings)
        try:
            for _ in range(warmup):
                run_tick(app)
                clock.advance(TICK_SECONDS)
            if model == "renter":  # the rules built the fleet; from here a model rents whatever the credit
                app._provider = Renter(app, _capacity(sim, policy)[2])
            sim.tick()
            cap0, dph0, n0 = _capacity(sim, policy)
            alive0 = {iid for iid, i in sim.instances.items() if policy.is_our_label(i["label"])}
            seq0 = next(app.log.read(0, newest_first=True, limit=1)).seq
            req0 = len(sim.requests)
            destroyed0 = set(sim.destroyed)

            _set_credit(sim, 0.0)
            for _ in range(outage):
                clock.advance(TICK_SECONDS)
                run_tick(app)
            clock.advance(TICK_SECONDS)
            _set_credit(sim, TOP_UP)
            back = None
            for n in range(1, MAX_RECOVERY_TICKS + 1):
                run_tick(app)
                clock.advance(TICK_SECONDS)
                sim.tick()
                if _capacity(sim, policy)[0] >= cap0 - 1e-9:
                    back = n
                    break
            cap1, dph1, n1 = _capacity(sim, policy)
            blocked = [e.payload["rule"] for e in _events(app, seq0, "policy.blocked")]
            raised = [e.payload for e in _events(app, seq0, "alert.raised")]
            escalated = [e for e in _events(app, seq0, "alert.severity_changed") if e.payload["severity"] == "critical"]
            rents = [r for r in sim.requests[req0:] if r["method"] == "PUT" and r["path"].startswith("/api/v0/asks/")]
            return {
                "fleet_before": n0, "capacity_before": cap0, "dph_before": dph0,
                "destroyed": len((set(sim.destroyed) - destroyed0) & alive0),
                "disks_kept": len(alive0 & set(sim.instances)),
                "host_failed": len(_events(app, seq0, "host.failed")),
                "hosts_excluded": len(_events(app, seq0, "host.excluded")),
                "critical_alerts": sum(1 for p in raised if p["severity"] == "critical") + len(escalated),
                "critical_titles": sorted({p["title"] for p in raised if p["severity"] == "critical"}),
                "rents_402": sum(1 for r in rents if r["status"] == 402),
                "credit_blocks": blocked.count("credit_exhausted"),
                "hourly_limit_blocks": blocked.count("max_rents_per_hour"),
                "ticks_to_capacity": back, "fleet_after": n1, "capacity_after": cap1, "dph_after": dph1,
            }
        finally:
            app.close()


def _per_unit(dph: float, cap: float) -> str:
    return f"${dph / cap:.4f}" if cap else "n/a"


ROWS = [
    ("instances destroyed", lambda r: r["destroyed"]),
    ("disks kept (of the fleet at run-out)", lambda r: f"{r['disks_kept']} of {r['fleet_before']}"),
    ("host.failed events", lambda r: r["host_failed"]),
    ("hosts excluded", lambda r: r["hosts_excluded"]),
    ("critical alerts (raised or escalated)", lambda r: r["critical_alerts"]),
    ("rents refused by vast.ai (HTTP 402)", lambda r: r["rents_402"]),
    ("rents refused in code (credit_exhausted)", lambda r: r["credit_blocks"]),
    ("rents blocked by max_rents_per_hour", lambda r: r["hourly_limit_blocks"]),
    ("ticks until capacity is back after top-up", lambda r: r["ticks_to_capacity"] or f">{MAX_RECOVERY_TICKS}"),
    ("$/h per job/h before the run-out", lambda r: _per_unit(r["dph_before"], r["capacity_before"])),
    ("$/h per job/h once back (else at the end)", lambda r: _per_unit(r["dph_after"], r["capacity_after"])),
    ("running capacity then (jobs/h)", lambda r: f"{r['capacity_after']:.0f} of {r['capacity_before']:.0f}"),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=24)
    ap.add_argument("--outage", type=int, default=6)
    ap.add_argument("--model", choices=("rules", "renter"), default="rules",
                    help="rules: the built-in rules provider throughout; renter: after the warm-up, a model that "
                    "rents to keep the fleet's size whatever the credit")
    ap.add_argument("--compare", metavar="DIR", help="also run with the agent of the checkout DIR (before)")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    after = scenario(args.seed, args.warmup, args.outage, args.model)
    if args.json:
        print(json.dumps(after))
        return
    runs = {"this checkout": after}
    if args.compare:
        env = {**os.environ, "PYTHONPATH": str(Path(args.compare).resolve())}
        out = subprocess.run([sys.executable, __file__, "--json", "--seed", str(args.seed), "--warmup",
                              str(args.warmup), "--outage", str(args.outage), "--model", args.model], env=env, check=True,
                             capture_output=True, text=True).stdout
        runs = {f"before ({args.compare})": json.loads(out.strip().splitlines()[-1]), **runs}
    hours = args.outage * TICK_SECONDS / 3600
    print(f"model {args.model}, seed {args.seed}: {args.warmup} ticks to build the fleet, credit $0 for {args.outage} ticks "
          f"({hours:.1f} h), top-up ${TOP_UP:.0f}; {after['fleet_before']} instances "
          f"({after['capacity_before']:.0f} jobs/h) at the run-out")
    names = list(runs)
    width = max(len(n) for n in names) + 2
    print(f"{'':44}" + "".join(f"{n:>{width}}" for n in names))
    for label, get in ROWS:
        print(f"{label:44}" + "".join(f"{get(runs[n])!s:>{width}}" for n in names))
    for n in names:
        if runs[n]["critical_titles"]:
            print(f"critical alerts raised ({n}): " + "; ".join(runs[n]["critical_titles"]))


if __name__ == "__main__":
    main()
