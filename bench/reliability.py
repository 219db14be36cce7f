"""Reliability figures: kill -9 loops, ambiguous rents, API chaos, policy fuzzing,
prompt injections, secrets and concurrency, at sizes too large for CI.

Prints ONE JSON object: kills survived, events checked, duplicates, untracked
instances, faults injected per kind, fuzzed calls and injections tried, canary hits,
lock errors. Exit 1 when any figure shows a broken promise.

    PYTHONPATH=. python bench/reliability.py [--quick] [--kills 300] [--seconds 60]
    PYTHONPATH=. python bench/reliability.py --only-kill9 --kills 600 --lag-destroy 0.5 --max-instances 3 \
        --operators --seed 1          # destroys whose answer is lost inside the listing lag, operators writing
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.reliability import harness  # noqa: E402


def _root(base: Path, name: str) -> Path:
    p = base / name
    p.mkdir(parents=True)
    return p


def _passes(fn: Any, *args: Any) -> bool:
    try:
        fn(*args)
    except AssertionError as e:
        sys.stderr.write(f"{fn.__name__}: {e}\n")
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="CI sizes (about two minutes)")
    ap.add_argument("--kills", type=int, help="SIGKILLs in the kill -9 loop (default 300; quick 40)")
    ap.add_argument("--seconds", type=float, help="concurrency run length (default 60; quick 15)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--after-action", type=float, default=0.15,
                    help="share of side-effecting requests that act, then lose their answer or arrive late")
    ap.add_argument("--only-kill9", action="store_true", help="run the kill -9 loop alone")
    ap.add_argument("--lag-destroy", type=float, default=0.0,
                    help="share of destroys sent inside the listing lag whose answer is lost (the provider then "
                    "destroys the newest unlisted instance each tick; a third of the runs stay inside the lag)")
    ap.add_argument("--max-instances", type=int, default=10, help="policy cap the monitor holds the simulator to")
    ap.add_argument("--operators", action="store_true", help="a note and an ack through the CLI beside each tick")
    args = ap.parse_args(argv)
    q = args.quick
    kills = args.kills or (40 if q else 300)
    seconds = args.seconds or (15.0 if q else 60.0)
    from agent import logsetup

    logsetup.configure("warning", "json", stream=sys.stderr)  # stdout carries the one JSON object
    base = Path(tempfile.mkdtemp(prefix="fa-rel-bench-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    t0 = time.monotonic()
    out: dict[str, Any] = {"quick": q, "seed": args.seed}
    zygote = harness.Zygote()
    try:
        k = harness.run_kill9(_root(base, "kill9"), kills=kills, seed=args.seed, spawner=zygote,
                              exec_every=0 if q else 15, after_action=args.after_action,
                              lag_destroy=args.lag_destroy, max_instances=args.max_instances,
                              operators=args.operators,
                              install="tests.reliability.harness:install_lag_destroys" if args.lag_destroy
                              else "tests.reliability.harness:install_reboots")
        out["kill9"] = {**asdict(k), "problems": k.problems[:10], "problem_count": len(k.problems)}
        if args.only_kill9:
            return _finish(out, kills, t0, only_kill9=True)
        p = harness.run_kill9(_root(base, "planted"), kills=12 if q else 30, seed=args.seed, spawner=zygote,
                              fault_rate=0.0, ambiguous=0.0,
                              install="tests.reliability.test_kill9:install_rent_before_intent")
        out["planted_rent_before_intent"] = {"kills": p.kills, "audit": p.audit,
                                             "caught": p.audit["untraced"] + p.audit["untracked"] > 0}
        out["ambiguous"] = harness.run_ambiguous(_root(base, "ambiguous"), ticks=14 if q else 60)
        out["api_chaos"] = harness.run_api_chaos(_root(base, "chaos"), ticks=60 if q else 300)

        from tests.reliability.test_concurrency import run_concurrency
        from tests.reliability.test_model_chaos import FAULTS
        from tests.reliability.test_model_chaos import (
            test_every_model_fault_is_logged_and_the_projection_stays_within_budget as model_chaos,
        )
        from tests.reliability.test_policy_attack import STYLES, fuzz_calls
        from tests.reliability.test_policy_attack import (
            test_prompt_injections_in_logs_and_knowledge_reach_no_call_outside_policy as injections,
        )
        from tests.reliability.test_secrets import (
            test_canary_keys_never_leave_the_auth_header_under_every_fault as canaries,
        )

        # These scenarios are the suite's own tests (they assert); here they report pass/fail.
        out["model_chaos"] = {"fault_kinds": sorted(FAULTS), "ok": _passes(model_chaos, _root(base, "model"))}
        out["prompt_injection"] = {"payloads": 32, "styles": len(STYLES),
                                   "ok": _passes(injections, _root(base, "inject"))}
        out["secrets"] = {"canary_hits": 0 if _passes(canaries, _root(base, "secrets"), zygote) else "see stderr"}

        out["policy_fuzz"] = fuzz_calls(200 if q else 1000, _root(base, "fuzz"), seed=args.seed)
        c = run_concurrency(_root(base, "concurrency"), zygote, seconds)
        out["concurrency"] = {
            "seconds": seconds, "ticks": c["ticks"], "writes": sum(1 for r in c["records"] if r["op"] != "read"),
            "reads": sum(1 for r in c["records"] if r["op"] == "read"),
            "failed_commands": sum(1 for r in c["records"] if r["rc"] != 0) + len(c["tick_errors"]),
            "lock_errors": c["stderr"].count("database is locked"),
            "notes_exactly_once": sorted(c["notes"]) == sorted(r["text"] for r in c["records"] if r["op"] == "note"),
            "acks_exactly_once": sorted(c["acks"]) == sorted(r["alert"] for r in c["records"] if r["op"] == "ack"),
            "problems": c["problems"]}
    finally:
        zygote.close()
        shutil.rmtree(base, ignore_errors=True)
    return _finish(out, kills, t0)


def _kill9_broken(k9: dict[str, Any], kills: int) -> bool:
    return any([
        k9["problem_count"] > 0, k9["kills"] < kills, k9["final_tick_rc"] != 0,
        any(k9["audit"][x] for x in ("duplicates", "untraced", "untracked", "dangling_intents")),
        k9["monitor"]["over_max_instances"] > 0, k9["monitor"]["over_max_total_dph"] > 0,
        k9["intents"]["duplicate_requests"] > 0, k9["intents"]["adopted_after_destroyed"] > 0,
        bool(k9["destroyed_but_alive"]),
        any(k9["operators"].get(x) for x in ("failed_commands", "lost_notes", "lost_acks", "notes_twice",
                                              "acks_twice")),
    ])


def _finish(out: dict[str, Any], kills: int, t0: float, *, only_kill9: bool = False) -> int:
    out["seconds"] = round(time.monotonic() - t0, 1)
    if only_kill9:
        out["ok"] = not _kill9_broken(out["kill9"], kills)
        sys.stdout.write(json.dumps(out, sort_keys=True, default=str) + "\n")
        return 0 if out["ok"] else 1
    broken = [
        _kill9_broken(out["kill9"], kills),
        not out["planted_rent_before_intent"]["caught"],
        bool(out["ambiguous"]["unresolved"]), out["ambiguous"]["audit"]["duplicates"] > 0,
        bool(out["api_chaos"]["internal_errors"]), bool(out["api_chaos"]["problems"]),
        out["policy_fuzz"]["violations"] > 0,
        out["concurrency"]["lock_errors"] > 0, out["concurrency"]["failed_commands"] > 0,
        not out["concurrency"]["notes_exactly_once"], not out["concurrency"]["acks_exactly_once"],
        not out["model_chaos"]["ok"], not out["prompt_injection"]["ok"], out["secrets"]["canary_hits"] != 0,
    ]
    out["ok"] = not any(broken)
    sys.stdout.write(json.dumps(out, sort_keys=True, default=str) + "\n")
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
