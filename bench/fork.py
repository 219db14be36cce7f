"""A fork's diff on a scripted incident, and what a fork costs.

Runs the demo (the simulated market with its flaky hosts, the rules provider, the operator stepping in)
into a directory, then forks it at tick ``--at-tick`` with ``--set`` (default: a lower instance cap, the
change an operator would test after an overspend) for ``--ticks`` ticks, and prints the fork's diff
followed by one JSON line of figures: origin events, events copied, seconds to make and run the fork,
ticks that decided differently, the ticks that replayed the origin's and why the fork went on with its
own simulator, and whether the origin database was byte-identical afterwards. ``--same`` forks with no
change at all: the rules provider deciding again must decide as it did (0 ticks differently).

    python bench/fork.py [--at-tick 6] [--ticks 3] [--set policy.max_instances=2 | --same] [--dir DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path

from agent import config, logsetup
from agent.fork import Change, Where, diff_fork, make_fork, render
from agent.runtime.demo import run_demo
from agent.store.log import EventLog


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--at-tick", type=int, default=6)
    ap.add_argument("--ticks", type=int, default=3)
    ap.add_argument("--set", action="append", default=None)
    ap.add_argument("--same", action="store_true", help="fork without a change")
    ap.add_argument("--dir", help="keep the demo and the fork here (default: a temp dir)")
    a = ap.parse_args()
    logsetup.configure("warning", "auto")
    root = Path(a.dir or tempfile.mkdtemp(prefix="fleet-agent-bench-fork-"))
    demo = root / "demo"
    if run_demo(keep=str(demo), speed=1e9, out=io.StringIO()) != 0:
        print("the demo failed", file=sys.stderr)
        return 1
    settings = config.load(str(demo / "config.yaml"))
    with EventLog(settings.db_path, readonly=True) as log:
        events = log.count()
    before = _sha(settings.db_path)
    sets = () if a.same else tuple(a.set or ["policy.max_instances=2"])
    t0 = time.perf_counter()
    r = make_fork(settings, Where(tick=a.at_tick), Change(sets=sets), ticks=a.ticks, out=root / "fork")
    seconds = time.perf_counter() - t0
    _, diffs, _ = diff_fork(r.out)
    for line in render(diffs):
        print(line)
    print(json.dumps({"origin_events": events, "copied": r.point.seq, "fork_at": r.point.label, "change": list(sets),
                      "ticks": a.ticks, "fork_seconds": round(seconds, 2),
                      "ticks_decided_differently": sum(not d.same for d in diffs),
                      "replayed_ticks": r.replayed, "own_simulator_from": r.live_why,
                      "origin_byte_identical": _sha(settings.db_path) == before, "dir": str(root)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
