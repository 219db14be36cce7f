"""Load figures for the vast.ai simulator through the real client: requests/s and latency.

    python bench/sim_load.py [--calls 300] [--instances 30] [--threads 4]

Prints one line per operation (calls, req/s, p50 and p95 latency in ms). Figures only;
nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from agent.clients.vast import VastClient
from agent.sim import ManualClock, SimServer, Simulator


def _measure(name: str, fn, calls: int, threads: int) -> None:
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--instances", type=int, default=30)
    ap.add_argument("--threads", type=int, default=4)
    args = ap.parse_args()
    sim = Simulator(seed=1, clock=ManualClock())
    for oid in sorted(sim.offers)[: args.instances]:
        sim.create_instance(oid, label="bench")
    sim.advance(600)
    with SimServer(sim) as server, VastClient(server.url, sim.api_key) as client:
        _measure(f"list_instances({args.instances})", client.list_instances, args.calls, args.threads)
        _measure("search_offers", lambda: client.search_offers({"num_gpus": 1}), args.calls, args.threads)
        _measure("current_user", client.current_user, args.calls, args.threads)
        _measure("sim.advance(60s)", lambda: sim.advance(60), args.calls, 1)
    print(f"requests logged: {len(sim.requests)}")


if __name__ == "__main__":
    main()
