"""How long a spend-budget check takes before a rent, on a log holding a month of ticks.

    python bench/spend_budget_check.py [--days 30] [--instances 8] [--flip N]

Writes a log of one tick every 5 minutes for --days days, each observing --instances instances of
ours (each rented at the start; with --flip N each goes from running to stopped and back every N ticks,
a run of observations each time), then times the budget check a rent runs (first call of a tick, and a
second one in the same tick, which reuses the observations), `status`'s month-to-date figure and the
`spend` report: without its kept figures, then with them written (spend-before.json), then keeping them.
Figures only; nothing here asserts.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from agent.config import PolicySettings
from agent.fleet import spend
from agent.store.log import EventLog


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--instances", type=int, default=8)
    ap.add_argument("--flip", type=int, default=0, help="ticks between an instance's state changes (0: never)")
    args = ap.parse_args()
    t = [datetime(2026, 11, 30, 12, tzinfo=UTC) - timedelta(days=args.days)]  # ends mid-day, late in a month
    with tempfile.TemporaryDirectory() as tmp:
        log = EventLog(Path(tmp) / "bench.db", clock=lambda: t[0])
        ids = list(range(1000, 1000 + args.instances))
        for iid in ids:
            log.append("tool.result", {"call_id": f"c{iid}", "name": "rent_instance", "ok": True, "output": "ok",
                                       "effect": {"type": "rented", "instance_id": iid, "label": f"fa-{iid}",
                                                  "gpu_name": "RTX 4090", "dph": 0.4}}, "tool", 0)
        ticks = args.days * 288
        t0 = time.perf_counter()
        for n in range(ticks):
            t[0] += timedelta(minutes=5)
            status = "stopped" if args.flip and (n // args.flip) % 2 else "running"
            obs = {"instances": [{"id": i, "status": status, "ours": True, "host_id": 7, "dph": 0.4,
                                  "gpu_name": "RTX 4090", "label": f"fa-{i}"} for i in ids]}
            log.append("tick.started", {"observation": obs}, "scheduler", n + 1)
        print(f"wrote {ticks} ticks x {args.instances} instances in {time.perf_counter() - t0:.1f} s")
        policy = PolicySettings(max_daily_spend=1000.0, max_monthly_spend=10000.0)
        for label in ("first rent check of a tick", "next rent check, same tick"):
            t0 = time.perf_counter()
            block = spend.budget_block(log, policy, 0.5)
            print(f"{label:<32} {(time.perf_counter() - t0) * 1e3:8.1f} ms  (blocked: {block is not None})")
        t0 = time.perf_counter()
        mtd = spend.month_to_date(log)
        print(f"{'status month-to-date':<32} {(time.perf_counter() - t0) * 1e3:8.1f} ms  {mtd}")
        kept = Path(tmp) / spend.BEFORE_FILE
        for label, cache in (("spend report", None), ("spend report, writing kept", kept),
                             ("spend report, kept figures", kept)):
            t0 = time.perf_counter()
            rep = spend.report(log, cache=cache)
            print(f"{label:<32} {(time.perf_counter() - t0) * 1e3:8.1f} ms  total ${rep['total']:.2f}")
        log.close()


if __name__ == "__main__":
    main()
