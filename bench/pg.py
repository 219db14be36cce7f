"""The event log on PostgreSQL next to SQLite, in the same run: appends per second and projection p50.

For each backend a log of ``--events`` events (default 10^5, the daemon-shaped synthetic log of
bench/context.py: ticks, notes, compactions) is built through ``EventLog.append_many``, 5,000 events per
transaction (hash chain, search index, read models as a daemon writes them): ``append_batched_per_s``.
Then ``--single`` events are appended one transaction each, as the daemon and an operator's ``say`` do:
``append_single_per_s`` and its latency p50/p99. Then the projection p50 at every position of the newest
compaction cycle (bench/context.py ``projection_times``: warm render cache, and cold), and a full
``verify`` walk.

PostgreSQL runs as a throwaway local server (tests/pgserver.py: a temp dir, Unix socket, fsync off as in
the tests, so these figures are the database's work and the client's, not the disk's); SQLite runs with
its production settings (WAL, synchronous=FULL) on a temp dir. Both share this machine's load: compare
the two columns of one run, not figures across runs.

With ``--fleets N`` the PostgreSQL database holds N fleets, as a shared server does: fleets 1..N-1 are
copies of one built log (same rows under other agent_ids, copied by the superuser), then ANALYZE, then
the newest fleet is built through ``append_many`` with autovacuum off on every table, so its rows arrive
after the last ANALYZE and the planner has never seen them. Its projection p50 and single appends are the
figures, next to SQLite's (one fleet in one file, as always): ``pg_over_sqlite``.

    python bench/pg.py [--events 100000] [--single 1000] [--quick] [--fleets 10]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import context as bctx  # noqa: E402  (bench/context.py)
import structlog  # noqa: E402

from agent.config import PgTarget  # noqa: E402
from agent.context.prompts import load_prompts  # noqa: E402
from agent.store.log import EventLog  # noqa: E402
from tests.pgfleets import analyzed, copy_fleet  # noqa: E402
from tests.pgserver import PgServer, create_fleet_database, start_server  # noqa: E402


def _build(log: EventLog, n: int) -> float:
    """Append the synthetic log's ``n`` events in batches; events per second."""
    batch: list[Any] = []
    t = time.perf_counter()
    for it in bctx.synthetic_items(n):
        batch.append(it)
        if len(batch) >= bctx.BATCH:
            log.append_many(batch)
            batch = []
    if batch:
        log.append_many(batch)
    took = time.perf_counter() - t
    assert log.last_seq() == n, (log.last_seq(), n)
    return n / took


def _singles(log: EventLog, n: int) -> dict[str, float]:
    lat: list[float] = []
    t0 = time.perf_counter()
    for i in range(n):
        t = time.perf_counter()
        log.append("operator.note", {"text": f"bench note {i}", "by": "bench"}, "operator")
        lat.append((time.perf_counter() - t) * 1000)
    took = time.perf_counter() - t0
    lat.sort()
    return {"append_single_per_s": round(n / took, 1), "append_single_ms_p50": round(statistics.median(lat), 3),
            "append_single_ms_p99": round(lat[int(len(lat) * 0.99) - 1], 3)}


def measure(where: Path | PgTarget, n: int, single: int, runs: int, prompts: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with EventLog(where) as log:
        log.tokenizer  # noqa: B018 - loaded before the clock starts, as a running daemon has it
        out["append_batched_per_s"] = round(_build(log, n), 1)
        out.update(bctx.projection_times(log, prompts, runs))
        out.update(_singles(log, single))
        t = time.perf_counter()
        r = log.verify()
        out["verify_s"] = round(time.perf_counter() - t, 2)
        assert r.ok and r.head_seq == n + single, r
        out["events"] = r.head_seq
    return out


def measure_fleets(srv: PgServer, fleets: int, n: int, single: int, runs: int, prompts: Any,
                   state: Path) -> dict[str, Any]:
    """The newest of ``fleets`` fleets in one database, its rows never analyzed."""
    url = create_fleet_database(srv)
    with EventLog(PgTarget(url, "fleet-1", state_dir=state)) as first:
        _build(first, n)
    for i in range(2, fleets):
        EventLog(PgTarget(url, f"fleet-{i}", state_dir=state)).close()  # bound and made, as init does
    copy_fleet(srv, url, "fleet-1", [f"fleet-{i}" for i in range(2, fleets)])
    out = measure(PgTarget(url, f"fleet-{fleets}", state_dir=state), n, single, runs, prompts)
    out["fleets_in_database"] = fleets
    out["newest_fleet_analyzed"] = analyzed(srv, url, f"fleet-{fleets}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=100_000, help="events in each log (default 10^5)")
    ap.add_argument("--single", type=int, default=1000, help="single-event appends after the build")
    ap.add_argument("--quick", action="store_true", help="a seconds-long smoke run (5,000 events, 200 appends)")
    ap.add_argument("--fleets", type=int, default=1, help="fleets in the PostgreSQL database (each of --events "
                    "events); the newest is measured, its rows never analyzed")
    args = ap.parse_args()
    n, single, runs = (5000, 200, 2) if args.quick else (args.events, args.single, 5)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING + 10))
    prompts = load_prompts(None)
    result: dict[str, Any] = {"events": n, "single": single, "fleets": args.fleets,
                              "loadavg_start": [round(x, 2) for x in os.getloadavg()]}
    srv = start_server()
    try:
        with tempfile.TemporaryDirectory(prefix="fleet-agent-bench-pg-") as tmp:
            result["sqlite"] = measure(Path(tmp) / "bench.db", n, single, runs, prompts)
            if args.fleets > 1:
                result["postgresql"] = measure_fleets(srv, args.fleets, n, single, runs, prompts, Path(tmp))
            else:
                url = create_fleet_database(srv)
                result["postgresql"] = measure(PgTarget(url, "bench", state_dir=Path(tmp)), n, single, runs, prompts)
    finally:
        srv.stop()
    sq, pg = result["sqlite"], result["postgresql"]
    result["pg_over_sqlite"] = {k: round(pg[k] / sq[k], 2) for k in (
        "append_batched_per_s", "append_single_per_s", "project_ms_p50", "project_cold_ms_p50", "verify_s")
        if sq.get(k)}
    result["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
