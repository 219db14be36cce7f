"""Takeover time of a standby daemon: p50 and max over ``--kills`` kill -9 runs, per backend.

Two ``fleet-agent run --standby`` daemons for one fleet against the simulator on 127.0.0.1 (the rules
provider as the model): the active one is SIGKILLed at a random point mid-tick (half the time right after a
fleet-changing request reached the simulator), a new standby replaces it, and the time from the kill to the
new active daemon's ``leader.acquired`` event is one takeover (tests/reliability/failover.py, the loop the
slow test runs). On SQLite both daemons share one data directory (one host: the released ``flock`` says the
holder died); on PostgreSQL (a throwaway local server, tests/pgserver.py) each has its own data directory
(two hosts: the server ends the dead holder's session and frees the leadership lock). Then one partition
run per backend: the active one is SIGSTOPped until the standby takes over (``--partition-failover``
seconds, the lock session's idle timeout being half of it on PostgreSQL) and resumed: the time from the
SIGSTOP to the takeover, and what the resumed one appended and sent (both must be 0).

Prints ONE JSON object; exit 1 when a run found a problem (a duplicate rent, an intent without result, a
broken chain, a takeover past failover_seconds, a resumed daemon that acted).

    PYTHONPATH=. .venv/bin/python bench/failover.py [--kills 20] [--failover 10] [--only sqlite|postgresql]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.reliability.failover import run_failover, run_partition  # noqa: E402


def _bad(fig: dict[str, Any]) -> bool:
    audit = fig.get("audit") or {}
    return bool(fig.get("problems")) or bool(fig.get("duplicate_requests")) or any(
        audit.get(k) for k in ("duplicates", "untraced", "untracked", "dangling_intents", "calls_without_result"))


def _one(backend: str, base: Path, args: argparse.Namespace, url: Any) -> dict[str, Any]:
    root = base / backend
    root.mkdir()
    t0 = time.monotonic()
    rep = run_failover(root / "kill9", kills=args.kills, seed=args.seed, failover=args.failover,
                       storage_url=url() if url else None)
    out: dict[str, Any] = {"kill9": rep.figures(), "kill9_seconds": round(time.monotonic() - t0, 1),
                           "kill9_past_failover_seconds": rep.late}
    part = run_partition(root / "partition", seed=args.seed, failover=args.partition_failover,
                         storage_url=url() if url else None)
    out["partition"] = {"failover_seconds": args.partition_failover, "takeover_s": round(part.takeover_s, 3),
                        "resumed_exit": part.old_exit, "resumed_appended": part.old_appended,
                        "resumed_requests": part.old_requests, "problems": part.problems,
                        "audit": part.audit, "duplicate_requests": part.intents.get("duplicate_requests")}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--failover", type=float, default=10.0, help="storage.failover_seconds of the kill runs")
    ap.add_argument("--partition-failover", type=float, default=6.0)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--only", choices=("sqlite", "postgresql"))
    args = ap.parse_args(argv)
    from agent import logsetup

    logsetup.configure("warning", "json", stream=sys.stderr)  # stdout carries the one JSON object
    base = Path(tempfile.mkdtemp(prefix="fa-failover-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    out: dict[str, Any] = {"kills": args.kills, "failover_seconds": args.failover}
    srv = None
    try:
        if args.only in (None, "sqlite"):
            out["sqlite"] = _one("sqlite", base, args, None)
        if args.only in (None, "postgresql"):
            from tests.pgserver import create_fleet_database, start_server

            srv = start_server()
            out["postgresql"] = _one("postgresql", base, args, lambda: create_fleet_database(srv))
    finally:
        if srv is not None:
            srv.stop()
        shutil.rmtree(base, ignore_errors=True)
    bad = False
    for b in ("sqlite", "postgresql"):
        r = out.get(b)
        if r is None:
            continue
        p = r["partition"]
        bad = bad or _bad(r["kill9"]) or bool(r["kill9_past_failover_seconds"]) or _bad(p) or p["resumed_exit"] != 3 or \
            (p["resumed_appended"], p["resumed_requests"]) != (0, 0)
    out["ok"] = not bad
    print(json.dumps(out, indent=2))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
