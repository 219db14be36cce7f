"""Per-tick cost against the log's size: real ticks on logs of 10^4, 10^5 (and 10^6) events.

For each size a log is built through ``EventLog.append_many`` from copies of real ticks
(bench/biglog.py), then ``--ticks`` real ticks run against the simulator with the rules provider, the
sizes taking turns tick by tick (which goes first alternates), each tick after ``--pause`` seconds idle.
Per tick it measures the wall time, the time spent in HTTP calls (vast.ai, the demand queue), in
waiting for vast.ai's rate limit (``vast.min_interval`` between two requests to one endpoint) and in
the model, and what is left: the tick's own overhead. It counts the tick's transactions that
wrote (each one commit, so one fsync with synchronous=FULL) next to the aim 2 + model steps +
2 x side-effecting calls, and the SQL statements the tick itself runs (from the same trace; the model's
reads, which the rules provider makes, left out). Prints one line per size, with p50 overhead as a ratio to the
smallest size's in the same run, then what the overhead is made of: the tick's own CPU time (this
thread's, the model's and the HTTP calls' left out; on a machine whose physical cores other processes
share, it still grows with their load, 2-3x on a busy 2-core VM), the time it was ready to run but waited for a core other processes held (the kernel's
run-queue time for this thread, /proc/thread-self/schedstat) and the rest, the time it was blocked
(fsyncs and other I/O, another thread holding the GIL); and the process's resident memory after the
size's ticks. ``--profile`` pauses cProfile inside the model and the HTTP calls, so its lines are the
tick's own work (a function that calls them shows only its time outside them, cumulatively). Under it: what one synchronous=FULL commit costs on this
disk now (so the overhead splits into commits and everything else), and how much other processes
slow a pure-Python loop down now (wall over CPU; 1.0 on an idle machine).

Each grown log is kept under /tmp/fleet-agent-biglogs (``$FLEET_AGENT_BIGLOG_CACHE``; bench/biglog.py
``grow_cached``), so a rerun at 10^6 copies the database instead of appending 10^6 events again.

    python bench/tick_cost.py [--sizes 10000,100000,1000000] [--ticks 30] [--pause 1] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx

from agent.clients.vast import VastClient
from agent.runtime.app import App
from agent.runtime.tick import run_tick
from agent.sim import ManualClock, SimServer, Simulator
from agent.store import plans

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.append import commit_ms  # noqa: E402
from bench.biglog import grow_cached, record_template  # noqa: E402
from tests.conftest import settings_for  # noqa: E402


def _runq() -> float:
    """Seconds this thread has waited on the run queue (ready, but another process had the core)."""
    try:
        with open("/proc/thread-self/schedstat", encoding="ascii") as f:
            return int(f.read().split()[1]) / 1e9
    except OSError:
        return 0.0


class _Outside:
    """Time spent in the model and in API calls (wall, this thread's CPU, its wait for a core), summed
    over a tick; the profiler, when one runs, is paused inside, so it sees only the tick's own work."""

    def __init__(self) -> None:
        self.s = self.cpu = self.runq = 0.0
        self.depth = 0
        self.prof: cProfile.Profile | None = None
        self.statements: list[str] = []  # what the log's connection runs (traced for the tick anyway)
        self.statements_outside = 0  # how many of them ran inside the model or an API call

    @contextmanager
    def timed(self) -> Iterator[None]:
        self.depth += 1
        if self.depth > 1:  # already inside: counted once, by the outer call
            try:
                yield
            finally:
                self.depth -= 1
            return
        if self.prof is not None:
            self.prof.disable()
        # the clocks' own reads (/proc for the run queue) fall inside the window, so the tick is not charged them
        t, c, q, n = time.perf_counter(), time.thread_time(), _runq(), len(self.statements)
        try:
            yield
        finally:
            self.statements_outside += len(self.statements) - n
            self.runq += _runq() - q
            self.cpu += time.thread_time() - c
            self.s += time.perf_counter() - t
            self.depth -= 1
            if self.prof is not None:
                self.prof.enable()


_OUTSIDE = _Outside()


def _timed_send(orig: Any) -> Any:
    """``orig`` (an HTTP send, or the vast.ai client's wait for its rate limit), its time counted as API time."""
    def send(self: Any, *a: Any, **k: Any) -> Any:
        with _OUTSIDE.timed():
            return orig(self, *a, **k)
    return send


class _TimedProvider:
    """The rules provider, its time counted as model time."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = getattr(inner, "name", "rules")
        self.can_summarise = getattr(inner, "can_summarise", True)

    def complete(self, messages: Any, tools: Any) -> Any:
        with _OUTSIDE.timed():
            return self.inner.complete(messages, tools)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _app(root: Path, url: str, sim: Simulator, clock: ManualClock) -> App:
    app = App(settings_for(root, url, provider="rules"), env={"VAST_API_KEY": sim.api_key}, clock=clock)
    app.init_database()
    return app


class _Size:
    """One log size: its app (the log grown to ``size`` events), its own simulator and clock, and the
    figures of its ticks so far."""

    def __init__(self, size: int, template: list[Any], url: str, sim: Simulator, clock: ManualClock,
                 root: Path) -> None:
        self.size, self.clock = size, clock
        self.app = _app(root, url, sim, clock)
        self.app._provider = _TimedProvider(self.app.provider())  # noqa: SLF001 - the bench's timing wrapper
        self.cached = grow_cached(self.app, template, size, "tick_cost")
        self.overhead: list[float] = []
        self.cpu: list[float] = []
        self.runq: list[float] = []
        self.walls: list[float] = []
        self.txs: list[int] = []
        self.aims: list[int] = []
        self.sql: list[int] = []

    def tick(self, prof: cProfile.Profile | None) -> None:
        """One real tick, five minutes after the last; ``prof`` (when given) sees the tick's own work. The
        first tick of a size verifies the whole log once, not a tick's usual cost: it is not profiled."""
        app = self.app
        self.clock.advance(300)
        _OUTSIDE.s = _OUTSIDE.cpu = _OUTSIDE.runq = 0.0
        _OUTSIDE.statements_outside = 0
        on = prof is not None and bool(self.walls)
        with plans.record(app.log) as statements:
            _OUTSIDE.statements = statements
            q, c, t = _runq(), time.thread_time(), time.perf_counter()   # the /proc read before the tick's window
            if on and prof is not None:
                _OUTSIDE.prof = prof
                prof.enable()
            r = run_tick(app)
            if on and prof is not None:
                prof.disable()
                _OUTSIDE.prof = None
            wall, used, queued = time.perf_counter() - t, time.thread_time() - c, _runq() - q
        self.walls.append(wall * 1e3)
        self.overhead.append((wall - _OUTSIDE.s) * 1e3)
        self.cpu.append((used - _OUTSIDE.cpu) * 1e3)
        self.runq.append((queued - _OUTSIDE.runq) * 1e3)
        self.txs.append(plans.commits_that_wrote(statements))
        # the tick's own statements: the model's (the rules provider reads the log too) and nested ones
        # (FTS5's, a trigger's) left out; counted from the trace the tick runs under anyway
        self.sql.append(sum(1 for s in statements if not s.startswith("-- ")) - _OUTSIDE.statements_outside)
        side = sum(1 for e in app.log.read(0, kinds=["tool.called"], tick=r.tick) if e.payload.get("side_effect"))
        self.aims.append(2 + r.steps + 2 * side)

    def result(self) -> dict[str, Any]:
        t = time.perf_counter()
        for _ in range(200):
            self.app.log.store.next_tick_number()
        ntn = (time.perf_counter() - t) / 200 * 1e3
        blocked = (o - c - q for o, c, q in zip(self.overhead, self.cpu, self.runq, strict=True))
        return {"events": self.size, "cached": self.cached, "tick_overhead_p50_ms": statistics.median(self.overhead),
                "tick_cpu_p50_ms": statistics.median(self.cpu), "tick_runq_p50_ms": statistics.median(self.runq),
                "tick_blocked_p50_ms": statistics.median(blocked), "tick_wall_p50_ms": statistics.median(self.walls),
                "transactions_p50": statistics.median(self.txs), "aim_p50": statistics.median(self.aims),
                "transactions_max": max(self.txs), "next_tick_number_ms": ntn,
                "statements_p50": statistics.median(self.sql)}


def setup(size: int, root: Path, stack: ExitStack) -> _Size:
    """A log of ``size`` events under ``root`` grown from four real ticks, with its own simulator serving
    until ``stack`` closes (which closes the app too)."""
    clock = ManualClock()
    tsim = Simulator(seed=7, clock=clock)
    with SimServer(tsim) as server:
        tpl = _app(root / f"template{size}", server.url, tsim, clock)
        template = record_template(tpl, tsim.advance, ticks=4)
        tpl.close()
    # a fresh market for the measured ticks: the template's instances are not orphans to them
    sim = Simulator(seed=7, clock=clock)
    server = stack.enter_context(SimServer(sim))
    run = _Size(size, template, server.url, sim, clock, root / f"s{size}")
    stack.callback(run.app.close)
    return run


def measure(sizes: list[int], ticks: int, root: Path, profile: bool,
            pause: float = 1.0) -> tuple[list[dict[str, Any]], cProfile.Profile | None]:
    """``ticks`` real ticks on a log of each size, the sizes taking turns tick by tick, in an order that
    alternates (so a minute when other processes load the machine slows every size alike, and the ratio
    compares like with like), each after ``pause`` seconds of the process idle (by default 1 s, longer
    than vast.ai's ``min_interval``). The profile, when asked for, covers the last size's ticks (the
    largest, as the sizes are given)."""
    prof = cProfile.Profile() if profile else None
    with ExitStack() as stack:
        runs = [setup(size, root, stack) for size in sizes]
        # the logs copied from the cache (a gigabyte at 10^6) reach the disk now, not under the measured ticks
        os.sync()
        for n in range(ticks):
            # which size goes first alternates, so neither is always the one that follows the other
            for run in runs if n % 2 == 0 else runs[::-1]:
                # a daemon's tick comes minutes after its last, with every wait for vast.ai's rate limit run
                # out and the process idle meanwhile; the pause gives every tick that start, whatever size
                # ran just before it
                time.sleep(pause)
                run.tick(prof if run is runs[-1] else None)
        return [run.result() for run in runs], prof


def contention(n: int = 15) -> float:
    """Wall time over CPU time of a pure-Python loop, p50: how much other processes slow this one down now
    (1.0 on an idle machine)."""
    ratios = []
    for _ in range(n):
        t, c = time.perf_counter(), time.thread_time()
        x = 0
        for i in range(200_000):
            x += i * i
        ratios.append((time.perf_counter() - t) / max(time.thread_time() - c, 1e-9))
    return statistics.median(ratios)


def _rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return kb / 1024


def instrument() -> None:
    """Count HTTP calls, and the vast.ai client's waits for its rate limit, as API time (``_OUTSIDE``)."""
    httpx.Client.send = _timed_send(httpx.Client.send)  # type: ignore[method-assign]
    # the wait between two requests to one vast.ai endpoint (its rate limit) is API time too
    VastClient._pace = _timed_send(VastClient._pace)  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000", help="log sizes, comma-separated")
    ap.add_argument("--ticks", type=int, default=30, help="real ticks per size (the sizes take turns)")
    ap.add_argument("--pause", type=float, default=1.0, help="seconds idle before each tick (default 1: a daemon's tick "
                    "comes minutes after its last, its caches cold; 0 runs them back to back, warmer and cheaper)")
    ap.add_argument("--profile", action="store_true", help="cProfile's top lines (cumulative, then own time) over the largest size's ticks "
                    "but the first (which verifies the whole log once)")
    ap.add_argument("--profile-out", metavar="FILE", help="with --profile, also write the raw profile to FILE (pstats)")
    a = ap.parse_args(argv)
    sizes = [int(x) for x in a.sizes.split(",")]
    instrument()
    with tempfile.TemporaryDirectory(prefix="fleet-agent-bench-") as d:
        rows, prof = measure(sizes, a.ticks, Path(d), a.profile, a.pause)
        base = rows[0]["tick_overhead_p50_ms"]
        for r in rows:
            print(f"events {r['events']:>8,}  tick overhead p50 {r['tick_overhead_p50_ms']:7.1f} ms "
                  f"(x{r['tick_overhead_p50_ms'] / base:4.2f} of {sizes[0]:,}; its CPU {r['tick_cpu_p50_ms']:.1f} ms, "
                  f"waiting for a core {r['tick_runq_p50_ms']:.1f} ms, blocked {r['tick_blocked_p50_ms']:.1f} ms)  wall p50 {r['tick_wall_p50_ms']:7.1f} ms  "
                  f"transactions p50 {r['transactions_p50']:.0f} (max {r['transactions_max']}, aim <= {r['aim_p50']:.0f})  "
                  f"SQL statements a tick p50 {r['statements_p50']:.0f}  "
                  f"next_tick_number {r['next_tick_number_ms']:.3f} ms"
                  f"{'  (log from cache)' if r['cached'] else ''}", flush=True)
        print(f"the sizes took turns, tick by tick, each tick after {a.pause:g} s idle; bench RSS after all of them {_rss_mb():.0f} MB; "
              f"one synchronous=FULL commit p50 {commit_ms(Path(d)):.2f} ms (x{rows[-1]['transactions_p50']:.0f} a tick); "
              f"machine contention now: wall/CPU of a pure-Python loop x{contention():.2f}", flush=True)
        if prof is not None:
            out = io.StringIO()
            stats = pstats.Stats(prof, stream=out)
            if a.profile_out:
                stats.dump_stats(a.profile_out)
            stats.sort_stats("cumulative").print_stats(30)
            stats.sort_stats("tottime").print_stats(30)
            print(out.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
