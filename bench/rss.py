"""Resident memory of the daemon's tick loop over many ticks: start, end and slope.

This process serves the vast.ai simulator and the scripted model (tests/fakes/openai_server.py,
through the real openai SDK) on 127.0.0.1; a child process opens the data directory as the daemon
does (one App for its whole life, the provider ``openai``) and runs ``--ticks`` ticks in a row,
reporting its RSS (``/proc/self/status`` VmRSS) after every tick. The model alternates a tool call
(get_balance) and a plain answer, so each tick takes two steps. With ``--events N`` the log is
first grown to N events (bench/biglog.py, ``EventLog.append_many``; kept under
/tmp/fleet-agent-biglogs for reruns, see ``grow_cached``).

Prints RSS at the first tick, after the warm-up and at the end, the slope per 100 ticks after
the warm-up (least squares), the growth from the warm-up to the end, and RSS every 100 ticks.

With ``--trace`` the child also takes tracemalloc snapshots after the warm-up and at the end and
prints the 15 source lines whose allocations grew most in between (ticks run slower while traced).

With ``--python`` the child runs in another interpreter: a virtualenv with fleet-agent installed without
the dev extra measures the daemon as it runs in production (the dev extra brings aiohttp, which the openai
SDK imports when it is installed, and trio, which httpcore imports: 16 MB more).

    python bench/rss.py [--ticks 600] [--warmup 100] [--events 10000] [--trace] [--python VENV/bin/python]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agent import logsetup  # noqa: E402
from agent.runtime.app import App  # noqa: E402
from agent.sim import ManualClock, SimServer, Simulator  # noqa: E402
from bench.biglog import grow_cached, record_template  # noqa: E402
from tests.conftest import settings_for  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI, reply  # noqa: E402

_CHILD = """
import dataclasses, json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from agent import config
from agent.runtime.app import App
from agent.runtime.tick import run_tick

def settings_for(root, sim_url, model_url):
    # tests/conftest.py's settings_for, without pytest: the child may run in an install without the dev extra
    s = config.parse(config.example_text(), str(root / "config.yaml"))
    return dataclasses.replace(s, vast=dataclasses.replace(s.vast, url=sim_url),
                               demand=dataclasses.replace(s.demand, url=sim_url + "/demand"),
                               model=dataclasses.replace(s.model, provider="openai", max_retries=0, base_url=model_url))

def rss_kb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])

root, sim_url, model_url, key, ticks = Path(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6])
warmup, trace = int(sys.argv[7]), sys.argv[8] == "1"
if trace:
    import tracemalloc
    tracemalloc.start(1)
app = App(settings_for(root, sim_url, model_url=model_url), env={"VAST_API_KEY": key})
first = None
for n in range(ticks):
    r = run_tick(app)
    print(json.dumps({"tick": n + 1, "ok": r.ok, "rss_kb": rss_kb()}), flush=True)
    if trace and n + 1 == warmup:
        first = tracemalloc.take_snapshot()
if trace and first is not None:
    for d in tracemalloc.take_snapshot().compare_to(first, "lineno")[:15]:
        print("TRACE " + str(d), flush=True)
app.close()
"""


def _slope(points: list[tuple[int, int]]) -> float:
    """Least-squares slope of (tick, rss_kb), in MB per 100 ticks."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points) or 1.0
    sxy = sum((x - mx) * (y - my) for x, y in points)
    return sxy / sxx * 100 / 1024


def _prepare(root: Path, sim: Simulator, sim_url: str, model_url: str, events: int, clock: ManualClock) -> None:
    """The database (grown to ``events`` from copies of real ticks when asked)."""
    app = App(settings_for(root, sim_url, model_url=model_url), env={"VAST_API_KEY": sim.api_key})
    app.init_database()
    if events:
        tpl = App(settings_for(root / "template", sim_url, provider="rules"), env={"VAST_API_KEY": sim.api_key},
                  clock=clock)
        tpl.init_database()
        template = record_template(tpl, sim.advance, ticks=4)
        tpl.close()
        grow_cached(app, template, events, "rss")  # closes the app
    app.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ticks", type=int, default=600)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--events", type=int, default=10_000, help="grow the log to this many events first")
    ap.add_argument("--trace", action="store_true", help="print where allocations grew after the warm-up")
    ap.add_argument("--python", default=sys.executable,
                    help="the interpreter that runs the ticks, e.g. a virtualenv's with fleet-agent installed "
                         "without the dev extra (as it runs in production)")
    a = ap.parse_args(argv)
    logsetup.configure("warning", "auto")
    clock = ManualClock()
    sim = Simulator(seed=7, clock=clock)
    points: list[tuple[int, int]] = []
    failed = 0
    with SimServer(sim) as server, FakeOpenAI() as fake, tempfile.TemporaryDirectory(prefix="fleet-agent-rss-") as d:
        fake.enqueue(*[s for _ in range(a.ticks + 10) for s in (reply(tool_calls=[("get_balance", {})]),
                                                                 reply("steady"))])
        _prepare(Path(d), sim, server.url, fake.base_url, a.events, clock)
        proc = subprocess.Popen([a.python, "-c", _CHILD, str(REPO), d, server.url, fake.base_url, sim.api_key,
                                 str(a.ticks), str(a.warmup), "1" if a.trace else "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("TRACE "):
                print(line[6:].rstrip())
                continue
            if not line.startswith('{"tick"'):
                continue  # the daemon's own log lines
            rec = json.loads(line)
            points.append((rec["tick"], rec["rss_kb"]))
            failed += not rec["ok"]
        proc.wait()
    if not points:
        print("the child ran no tick")
        return 1
    warm = [p for p in points if p[0] > a.warmup] or points
    print(json.dumps({
        "bench": "rss", "python": a.python, "ticks": len(points), "failed_ticks": failed, "events_before": a.events,
        "rss_first_tick_mb": round(points[0][1] / 1024, 1), "rss_after_warmup_mb": round(warm[0][1] / 1024, 1),
        "rss_end_mb": round(points[-1][1] / 1024, 1),
        "slope_after_warmup_mb_per_100_ticks": round(_slope(warm), 3),
        "growth_after_warmup_mb": round((warm[-1][1] - warm[0][1]) / 1024, 2),
        "rss_every_100_ticks_mb": [round(kb / 1024, 1) for t, kb in points if t % 100 == 0],
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
