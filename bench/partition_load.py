"""The partition run under CPU pressure: what a resumed, superseded daemon appends and sends.

Each run is tests/reliability/failover.py's ``run_partition`` (the slow test's loop): two real
``fleet-agent run --standby`` daemons, the active one SIGSTOPped mid-tick until the standby takes over,
the new active suspended too, the old one resumed. A resumed daemon must append 0 events and send 0
requests (to vast.ai or the demand source: the simulator serves both and counts every request). Meanwhile
``--burners`` processes spin on the CPU, so the daemons' threads, the server and the simulator get the
CPU late, as on a loaded host.

Prints one line per run and then ONE JSON object with the counts; exit 1 when any run's resumed daemon
appended or sent anything. A run that could not set the partition up is counted apart (``failed_runs``,
with why): on a host loaded past what ``--failover`` allows, the first daemon's own lease can run out
before the SIGSTOP (its heartbeat starved for failover/2), and then there is no partition to measure.

    PYTHONPATH=. .venv/bin/python bench/partition_load.py [--runs 25] [--burners 2] [--only sqlite|postgresql]
                                                          [--keep-failed]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.reliability.failover import run_partition  # noqa: E402


def _runs(backend: str, base: Path, args: argparse.Namespace, url: Any) -> dict[str, Any]:
    clean = acted = failed = retries = 0
    why_failed: dict[str, int] = {}
    events = requests = mid_append = held = 0
    takeover: list[float] = []
    for n in range(args.runs):
        root = base / f"{backend}-{n}"
        root.mkdir()
        t0 = time.monotonic()
        try:
            rep = run_partition(root, seed=args.seed + n, failover=args.failover,
                                storage_url=url() if url else None)
        except Exception as e:  # noqa: BLE001 - a run that could not finish is counted, not fatal
            if args.keep_failed:  # the daemons' logs, for a look at why
                kept = Path(tempfile.mkdtemp(prefix=f"fa-partition-failed-{backend}-{n}-"))
                shutil.copytree(root, kept, dirs_exist_ok=True)
                print(f"{backend} run {n + 1}: its files are kept in {kept}", file=sys.stderr)
            failed += 1
            why_failed[str(e)[:120]] = why_failed.get(str(e)[:120], 0) + 1
            print(f"{backend} run {n + 1}: FAILED {type(e).__name__}: {str(e)[:300]}", file=sys.stderr)
            traceback.print_exc(limit=3, file=sys.stderr)
            continue
        finally:
            shutil.rmtree(root, ignore_errors=True)
        ok = (rep.old_appended, rep.old_requests) == (0, 0) and rep.old_exit == 3 and not rep.problems
        clean += ok
        acted += not ok
        events += rep.old_appended
        requests += rep.old_requests
        takeover.append(rep.takeover_s)
        retries += rep.setup_retries
        mid_append += rep.mid_append
        held += rep.stopped_holding_lease
        print(f"{backend} run {n + 1}/{args.runs}: resumed daemon exit {rep.old_exit}, appended "
              f"{rep.old_appended}, sent {rep.old_requests}, takeover {rep.takeover_s:.2f}s, "
              f"{time.monotonic() - t0:.0f}s" + (", suspended mid-append" if rep.mid_append else "")
              + (f", stopped holding the lease {rep.stopped_holding_lease}x (resumed, stopped again)"
                 if rep.stopped_holding_lease else "")
              + (f", pair restarted {rep.setup_retries}x (lease lost before the partition)" if rep.setup_retries else "")
              + ("" if ok else "  <-- ACTED")
              + (f" problems: {rep.problems}" if rep.problems else ""), file=sys.stderr, flush=True)
    t = sorted(takeover)
    return {"runs": args.runs, "clean_runs": clean, "runs_that_acted": acted, "failed_runs": failed,
            "suspended_mid_append": mid_append, "stopped_holding_lease": held, "events_appended_by_resumed": events, "requests_sent_by_resumed": requests,
            "failed_because": why_failed, "pairs_restarted_before_the_partition": retries, "takeover_p50_s": round(t[len(t) // 2], 3) if t else None,
            "takeover_max_s": round(t[-1], 3) if t else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=25, help="partition runs per backend")
    ap.add_argument("--burners", type=int, default=2, help="processes spinning on the CPU meanwhile")
    ap.add_argument("--failover", type=float, default=3.0, help="storage.failover_seconds (the test's 3s)")
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--only", choices=("sqlite", "postgresql"))
    ap.add_argument("--keep-failed", action="store_true", help="keep a copy of a failed run's files (its logs)")
    args = ap.parse_args(argv)
    from agent import logsetup

    logsetup.configure("warning", "json", stream=sys.stderr)
    base = Path(tempfile.mkdtemp(prefix="fa-partition-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    burners = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(args.burners)]
    out: dict[str, Any] = {"burners": args.burners, "failover_seconds": args.failover}
    srv = None
    t0 = time.monotonic()
    try:
        if args.only in (None, "sqlite"):
            out["sqlite"] = _runs("sqlite", base, args, None)
        if args.only in (None, "postgresql"):
            from tests.pgserver import create_fleet_database, start_server

            srv = start_server()
            out["postgresql"] = _runs("postgresql", base, args, lambda: create_fleet_database(srv))
    finally:
        for b in burners:
            b.kill()
            b.wait()
        if srv is not None:
            srv.stop()
        shutil.rmtree(base, ignore_errors=True)
    out["seconds"] = round(time.monotonic() - t0)
    results = [out[b] for b in ("sqlite", "postgresql") if b in out]
    out["ok"] = all(r["runs_that_acted"] == 0 for r in results)
    print(json.dumps(out, indent=2))
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
