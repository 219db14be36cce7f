"""Console page render time and /metrics scrape time over a large log.

Builds a log of N events (default 10^6): real ticks by the rules provider against the simulator at the
start and at the end, and between them tick-shaped filler appended in batches (an observation, tool
calls and results, a completed tick, now and then a note, an alert, and a compaction every
``--compact-every`` events, as a long-running daemon's log holds). The simulator's clock moves five
minutes per filler tick, so the spend chart and today's/this month's spend have a real series to read.

Then, through the ASGI app (Starlette's test client, no sockets), times:

- the overview (``/``) and time travel of the newest tick (``/travel?tick=N``): p50 and p90 of ``--runs``;
- ``/metrics``: the first scrape (folds every event since seq 0), then a scrape after one more tick.

Prints one JSON line. ``--dir`` keeps (and reuses) the database.

    python bench/web.py [--events 1000000] [--runs 20] [--dir DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from agent import config
from agent.runtime.app import App
from agent.runtime.tick import run_tick
from agent.sim import ManualClock, SimServer, Simulator
from agent.web import Console
from agent.web.routes import create_app

BATCH = 1000
TICK_S = 300.0
START = 1_764_547_200.0  # 2025-12-01T00:00:00Z
_OUTPUT = "offer 123456 RTX 4090 x1 $0.38/h reliability 0.991 host 4411 " * 4


def filler_tick(n: int, seq: int, compact: bool) -> list[tuple[str, dict[str, Any], str, int | None]]:
    """About 12 events of one tick; with ``compact``, a compaction covering everything before it."""
    insts = [{"id": 1000 + k, "label": f"fa-bench-{k}", "gpu_name": "RTX 4090", "num_gpus": 1, "status": "running",
              "dph": 0.4 + 0.05 * ((n + k) % 7), "age_s": 3600.0, "host_id": 4400 + k, "ours": True}
             for k in range(4)]
    obs = {"time": START + n * TICK_S, "instances": insts, "fleet_dph": round(sum(i["dph"] for i in insts), 4),
           "balance": 500.0 - n * 0.01, "demand": None, "errors": [], "changes": [], "open_alerts": []}
    out: list[tuple[str, dict[str, Any], str, int | None]] = []
    if compact:
        out.append(("context.compacted", {"summary": f"## Fleet\nfour RTX 4090 running (tick {n}).\n## Open alerts\nnone",
                                          "covered_to": seq, "method": "fallback", "covered_from": 1}, "system", None))
    out.append(("tick.started", {"observation": obs}, "system", n))
    for k in range(4):
        out.append(("tool.called", {"call_id": f"c{n}-{k}", "name": "search_offers",
                                    "arguments": '{"gpu":"RTX 4090"}'}, "model", n))
        out.append(("tool.result", {"call_id": f"c{n}-{k}", "name": "search_offers", "ok": True, "output": _OUTPUT},
                    "tool", n))
    if n % 10 == 0:
        out.append(("operator.note", {"text": f"note {n}: prefer hosts above 0.97", "by": "alice"}, "operator", None))
    out.append(("tick.completed", {"steps": 2, "usage": {"prompt_tokens": 4000, "completion_tokens": 120,
                                                         "cached_tokens": 3500}, "actions": [],
                                   "duration_ms": 900.0 + n % 400}, "system", n))
    return out


def fill(app: App, clock: ManualClock, upto: int, compact_every: int, first_tick: int) -> tuple[float, int]:
    """Append filler ticks until the log holds ``upto`` events; (seconds, next tick number)."""
    t0 = time.perf_counter()
    lg = app.log
    n, seq, since_compact = first_tick, lg.last_seq(), 0
    while seq < upto:
        batch: list[tuple[str, dict[str, Any], str, int | None]] = []
        while len(batch) < BATCH and seq + len(batch) < upto:
            compact = since_compact >= compact_every
            batch.extend(filler_tick(n, seq + len(batch), compact))
            since_compact = 0 if compact else since_compact + 12
            n += 1
        lg.append_many(batch)
        seq = lg.last_seq()
        clock.advance(TICK_S * (len(batch) / 12))
    return time.perf_counter() - t0, n


def timed(client: TestClient, path: str, runs: int) -> dict[str, float]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        r = client.get(path)
        times.append(time.perf_counter() - t0)
        if r.status_code != 200:
            raise SystemExit(f"{path}: HTTP {r.status_code}: {r.text[:300]}")
    times.sort()
    return {"p50_ms": round(statistics.median(times) * 1000, 1),
            "p90_ms": round(times[int(0.9 * (len(times) - 1))] * 1000, 1)}


def settings_for(root: Path, sim_url: str) -> config.Settings:
    s = config.parse(config.example_text(), str(root / "config.yaml"))
    return dataclasses.replace(
        s, vast=dataclasses.replace(s.vast, url=sim_url), demand=dataclasses.replace(s.demand, url=f"{sim_url}/demand"),
        model=dataclasses.replace(s.model, provider="rules"))


def run(root: Path, events: int, runs: int, compact_every: int) -> dict[str, Any]:
    clock = ManualClock(START)
    sim = Simulator(seed=7, clock=clock)
    server = SimServer(sim).start()
    env = {"VAST_API_KEY": sim.api_key}
    (root / "knowledge").mkdir(exist_ok=True)
    app = App(settings_for(root, server.url), env=env, clock=clock)
    try:
        build_s = 0.0
        if not app.settings.db_path.exists():
            app.init_database()
            for _ in range(3):
                run_tick(app)
                clock.advance(TICK_S)
            build_s, _ = fill(app, clock, events, compact_every, app.log.store.next_tick_number())
            for _ in range(3):
                run_tick(app)
                clock.advance(TICK_S)
        else:
            clock.advance(ts_of_head(app) - START + TICK_S)
        tick = app.log.store.latest_tick()
        console = Console(app.settings, env=env, clock=clock)
        try:
            with TestClient(create_app(console)) as client:
                t0 = time.perf_counter()
                client.get("/metrics")
                metrics_first = time.perf_counter() - t0
                run_tick(app)
                clock.advance(TICK_S)
                t0 = time.perf_counter()
                body = client.get("/metrics").text
                metrics_next = time.perf_counter() - t0
                overview = timed(client, "/", runs)
                travel = timed(client, f"/travel?tick={tick}", runs)
        finally:
            console.close()
        return {"bench": "web", "events": app.log.last_seq(), "build_s": round(build_s, 1),
                "overview": overview, "time_travel_tick": tick, "time_travel": travel,
                "metrics_first_scrape_s": round(metrics_first, 3), "metrics_scrape_ms": round(metrics_next * 1000, 1),
                "metrics_bytes": len(body)}
    finally:
        app.close()
        server.stop()


def ts_of_head(app: App) -> float:
    from agent.web.console import ts_seconds

    e = app.log.get(app.log.last_seq())
    return ts_seconds(e.ts) if e else START


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--compact-every", type=int, default=3000, help="filler events between compactions")
    p.add_argument("--dir", help="keep the database here (reused when it exists)")
    a = p.parse_args(argv)
    if a.dir:
        root = Path(a.dir)
        root.mkdir(parents=True, exist_ok=True)
        out = run(root, a.events, a.runs, a.compact_every)
    else:
        with tempfile.TemporaryDirectory(prefix="bench-web-") as d:
            out = run(Path(d), a.events, a.runs, a.compact_every)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
