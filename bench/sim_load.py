"""Load figures for the vast.ai simulator through the real client, and what a tick costs in requests.

    python bench/sim_load.py [--calls 300] [--instances 30] [--threads 4] [--ticks 6] [--pending 200]
    python bench/sim_load.py --vast-url http://127.0.0.1:18790 --ticks 6   # a running `fleet-agent sim`

Part one prints one line per operation (calls, req/s, p50 and p95 latency in ms) against a simulator
with its rate limit off. Part two runs ticks of the built-in rules provider against a simulator with
vast.ai's defaults (rate limits, listing lag, small disks, storage pricing) and a burst of demand, and
prints per tick the requests sent, the 429s vast.ai answered, the 429s that reached the model (in a
tool result) and the rents. Figures only; nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from agent import config
from agent.clients.vast import VastClient
from agent.runtime.app import App
from agent.sim import ManualClock, SimServer, Simulator

TICK_SECONDS = 300.0


def _measure(name: str, fn: Callable[[], Any], calls: int, threads: int) -> None:
    lat: list[float] = []

    def one(_: int) -> None:
        t0 = time.perf_counter()
        fn()
        lat.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(one, range(calls)))
    wall = time.perf_counter() - t0
    lat.sort()
    p95 = lat[min(len(lat) - 1, int(len(lat) * 0.95))]
    print(f"{name:<22} calls={calls:<5} {calls / wall:8.1f} calls/s  p50={statistics.median(lat) * 1e3:6.2f} ms"
          f"  p95={p95 * 1e3:6.2f} ms")


def throughput(args: argparse.Namespace) -> None:
    sim = Simulator(seed=1, clock=ManualClock())
    if hasattr(sim, "realism"):
        sim.realism.update({"rate_interval": 0})  # raw throughput: the rate limit would only refuse
    for oid in sorted(sim.offers)[: args.instances]:
        sim.create_instance(oid, label="bench")
    sim.advance(600)
    with SimServer(sim) as server, VastClient(server.url, sim.api_key, min_interval=0) as client:
        _measure(f"list_instances({args.instances})", client.list_instances, args.calls, args.threads)
        _measure("search_offers", lambda: client.search_offers({"num_gpus": 1}), args.calls, args.threads)
        _measure("current_user", client.current_user, args.calls, args.threads)
        _measure("sim.advance(60s)", lambda: sim.advance(60), args.calls, 1)
    print(f"requests logged: {len(sim.requests)}")


def _config(sim_url: str) -> str:
    return f"""\
agent_id: bench
data_dir: ./data
knowledge_dir: ./knowledge
vast:
  url: {sim_url}
  api_key_env: BENCH_VAST_KEY
demand:
  url: {sim_url}/demand
model:
  provider: rules
  name: rules-provider
policy:
  max_instances: 8
  max_total_dph: 8.0
  max_rents_per_hour: 8
"""


def _requests(http: httpx.Client, url: str, since: int) -> list[dict[str, Any]]:
    return list(http.get(f"{url}/_sim/requests", params={"since": since}).json()["requests"])


def _model_saw_429(app: App, since: int) -> int:
    n = 0
    for e in app.log.read(since, kinds=["tool.result"]):
        text = json.dumps(e.payload)
        n += ("HTTP 429" in text) or ("too frequent" in text)
    return n


def ticks(args: argparse.Namespace) -> None:
    from agent.runtime.tick import run_tick

    sim: Simulator | None = None
    server: SimServer | None = None
    clock: ManualClock | None = None
    url = args.vast_url
    key = args.api_key
    if url is None:
        clock = ManualClock()
        sim = Simulator(seed=args.seed, clock=clock)
        server = SimServer(sim).start()
        url, key = server.url, sim.api_key
    root = Path(tempfile.mkdtemp(prefix="fleet-agent-bench-"))
    (root / "knowledge").mkdir()
    (root / "config.yaml").write_text(_config(url), encoding="utf-8")
    os.environ["BENCH_VAST_KEY"] = key
    app = App(config.load(str(root / "config.yaml")), **({"clock": clock} if clock else {}))
    app.init_database()
    http = httpx.Client(timeout=10)
    try:
        http.post(f"{url}/_sim/demand", json={"pending": args.pending})
        seen = len(_requests(http, url, 0))
        totals = {"requests": 0, "429": 0, "model_429": 0, "rents": 0}
        print(f"{'tick':>4} {'requests':>8} {'429s':>5} {'429s the model saw':>18} {'rents':>5} {'ok':>3}")
        for _ in range(args.ticks):
            seq = app.log.last_seq()
            r = run_tick(app)
            reqs = _requests(http, url, seen)
            seen += len(reqs)
            row = {"requests": len(reqs), "429": sum(1 for q in reqs if q["status"] == 429),
                   "model_429": _model_saw_429(app, seq),
                   "rents": sum(1 for q in reqs if q["method"] == "PUT" and q["path"].startswith("/api/v0/asks/")
                                and q["status"] == 200)}
            for k in totals:
                totals[k] += row[k]
            print(f"{r.tick:>4} {row['requests']:>8} {row['429']:>5} {row['model_429']:>18} {row['rents']:>5} "
                  f"{'yes' if r.ok else 'no':>3}")
            if clock is not None and sim is not None:
                sim.advance(TICK_SECONDS)
            else:
                time.sleep(args.tick_wait)
        n = max(1, args.ticks)
        print(f"per tick: {totals['requests'] / n:.1f} requests, {totals['429'] / n:.2f} 429s from vast.ai, "
              f"{totals['model_429'] / n:.2f} 429s reaching the model; rents {totals['rents']}")
    finally:
        http.close()
        app.close()
        if server is not None:
            server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--instances", type=int, default=30)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--ticks", type=int, default=6, help="rules-provider ticks to run (0 = none)")
    ap.add_argument("--pending", type=float, default=200.0, help="jobs waiting when the ticks start")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--vast-url", help="a running simulator (fleet-agent sim) instead of an in-process one")
    ap.add_argument("--api-key", default="sim-key", help="its key (default sim-key)")
    ap.add_argument("--tick-wait", type=float, default=1.0, help="seconds between ticks with --vast-url")
    ap.add_argument("--skip-throughput", action="store_true")
    args = ap.parse_args()
    if not args.skip_throughput:
        throughput(args)
    if args.ticks:
        ticks(args)


if __name__ == "__main__":
    main()
