"""Standby on SQLite with a writer suspended inside a write transaction: suspend/resume trials.

One data directory, two ``fleet-agent run --standby`` daemons against the simulator on 127.0.0.1 (the rules
provider as the model). Each trial: while the active daemon ticks, SIGSTOP it at random moments until it is
caught holding the log's write lock (a probe connection's ``BEGIN IMMEDIATE`` finds the database locked);
the standby takes the fleet after ``failover_seconds`` and must wait for the lock, past SQLite's busy
timeout, without exiting. Then the new active is suspended too (so every request and event that follows
is the old one's), the old one is resumed (SIGCONT): it must exit 3 having sent nothing; the new one is
resumed and must tick. A fresh standby joins for the next trial.

Counted: trials, trials caught in the write lock, standby exits (the new active ended before its tick),
double senders (trials where the resumed old daemon sent a request), the old daemon's events appended and
requests sent after resuming, its exit codes, and the log's checks.

Prints ONE JSON object; exit 1 when a standby exited or an old daemon sent anything.

    PYTHONPATH=. .venv/bin/python bench/standby.py [--trials 50] [--failover 3] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.reliability.failover import Fleet, _config, suspended, wait_for  # noqa: E402
from tests.reliability.harness import audit_intents, audit_rentals, check_db, running_sim  # noqa: E402
from tests.tamper import sqlite_write_lock_free  # noqa: E402 - the daemons' SQLite build, as probes must use


def write_locked(db: Path) -> bool:
    """Whether another connection holds the SQLite write lock now."""
    return not sqlite_write_lock_free(db)


def catch_in_write(proc: Any, db: Path, rng: random.Random, tries: int = 3000) -> bool:
    """SIGSTOP ``proc`` at random moments until it is suspended holding the write lock (True), or give up
    after ``tries`` (False: it is left suspended anyway, outside a write)."""
    for _ in range(tries):
        time.sleep(rng.uniform(0.0, 0.02))
        proc.send_signal(signal.SIGSTOP)
        wait_for(lambda: suspended(proc.pid), "the active daemon to stop")
        if write_locked(db):
            return True
        proc.send_signal(signal.SIGCONT)
    proc.send_signal(signal.SIGSTOP)
    wait_for(lambda: suspended(proc.pid), "the active daemon to stop")
    return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--failover", type=float, default=3.0, help="storage.failover_seconds")
    ap.add_argument("--hold", type=float, default=8.0,
                    help="seconds the old writer stays suspended after the takeover (past the busy timeout)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", help="copy the data directory and the daemons' stderr here at the end")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    base = Path(tempfile.mkdtemp(prefix="fa-standby-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    t0 = time.monotonic()
    out: dict[str, Any] = {"trials": 0, "caught_in_write": 0, "standby_exits": 0, "standby_exit_codes": [],
                           "double_senders": 0, "old_events_after_resume": 0, "old_requests_after_resume": 0,
                           "old_exit_codes": [], "takeover_s": [], "problems": []}
    try:
        with running_sim(args.seed) as (sim, server):
            cfg = _config(base, sim, server.url, args.failover)
            sim.pending = 600.0
            fleet = Fleet(base, cfg)
            try:
                active = fleet.start(standby=False)
                acquired = wait_for(lambda: fleet.acquired_after(0), "the first daemon to become active")
                for n in range(args.trials):
                    standby = fleet.start()
                    wait_for(lambda s=standby: "daemon.standby" in fleet.stderr(s.pid), "a standby to wait")
                    mark = acquired.seq
                    wait_for(lambda m=mark: fleet.events(m, ["tick.started"]), "the active daemon to tick")
                    sim.advance(rng.choice([60.0, 300.0]))
                    t_stop = time.time()
                    caught = catch_in_write(active, fleet.db, rng)
                    out["caught_in_write"] += int(caught)
                    out["trials"] += 1
                    # The standby logs its takeover before it can append (the lock is held): read its stderr.
                    wait_for(lambda s=standby: '"leader.acquired"' in fleet.stderr(s.pid) or s.poll() is not None,
                             "the standby to take the fleet")
                    out["takeover_s"].append(round(time.time() - t_stop, 2))
                    time.sleep(args.hold)  # past the busy timeout: a standby that gives up exits here
                    if standby.poll() is None:
                        standby.send_signal(signal.SIGSTOP)
                        wait_for(lambda s=standby: suspended(s.pid), "the new active daemon to stop")
                    head, requests = len(fleet.events()), len(sim.requests)
                    active.send_signal(signal.SIGCONT)
                    out["old_exit_codes"].append(active.wait(120))
                    got_events, got_requests = len(fleet.events()) - head, len(sim.requests) - requests
                    out["old_events_after_resume"] += got_events
                    out["old_requests_after_resume"] += got_requests
                    out["double_senders"] += int(got_requests > 0)
                    if standby.poll() is None:
                        standby.send_signal(signal.SIGCONT)
                    took = wait_for(lambda m=mark, s=standby: fleet.acquired_after(m) or s.poll() is not None,
                                    "the new active to record its takeover")
                    if standby.poll() is not None:
                        out["standby_exits"] += 1
                        out["standby_exit_codes"].append(standby.returncode)
                        out["problems"].append(f"trial {n + 1}: standby exited {standby.returncode}: "
                                               f"{fleet.stderr(standby.pid)[-300:]}")
                        active = fleet.start(standby=False)  # what systemd's restart would do
                        acquired = wait_for(lambda m=mark: fleet.acquired_after(m), "a fresh daemon to take over")
                        continue
                    acquired, active = took, standby
                    wait_for(lambda a=acquired, p=active: fleet.events(a.seq, ["tick.completed"]) or p.poll() is not None,
                             "the new active to tick")
                    if active.poll() is not None:
                        out["standby_exits"] += 1
                        out["standby_exit_codes"].append(active.returncode)
                        active = fleet.start(standby=False)
                        acquired = wait_for(lambda m=mark: fleet.acquired_after(m), "a fresh daemon to take over")
                    out["problems"] += [f"trial {n + 1}: {p}" for p in check_db(fleet.db, rebuild=False)]
            finally:
                codes = fleet.stop_all()
            out["final_exit_codes"] = dict(Counter(str(c) for c in codes.values()))
            out["problems"] += check_db(fleet.db)
            out["audit"] = dict(vars(audit_rentals(sim, fleet.db)))
            out["duplicate_requests"] = audit_intents(sim, fleet.db)["duplicate_requests"]
    finally:
        if args.keep:
            shutil.copytree(base, args.keep, dirs_exist_ok=True)
        shutil.rmtree(base, ignore_errors=True)
    t = sorted(out.pop("takeover_s"))
    out["takeover_p50_s"] = t[len(t) // 2] if t else None
    out["takeover_max_s"] = t[-1] if t else None
    out["old_exit_codes"] = dict(Counter(str(c) for c in out["old_exit_codes"]))
    out["seconds"] = round(time.monotonic() - t0, 1)
    out["ok"] = (out["standby_exits"] == 0 and out["double_senders"] == 0 and out["old_events_after_resume"] == 0
                 and not out["problems"] and not out["duplicate_requests"])
    sys.stdout.write(json.dumps(out, sort_keys=True, default=str) + "\n")
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
