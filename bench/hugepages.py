"""Per-tick cost with the heap in ordinary 4 KiB pages and in transparent huge pages, in the same minutes.

On a virtual machine whose host runs other work while this one idles, the first touch of each memory page
after the idle costs microseconds (``bench/tick_cost.py`` prints how many now): a daemon's tick, which comes
minutes after its last, pays that for every page it touches. glibc puts its heap in 2 MB transparent huge
pages with ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1`` (set before the process starts; the systemd unit sets
it), and ``PYTHONMALLOC=malloc`` puts Python's small objects in that heap too (Python keeps them in 1 MiB
arenas of 4 KiB pages otherwise).

One worker process per variant (``--variants``; ``base`` sets neither), each with a log of ``--size`` events
(bench/biglog.py, as bench/tick_cost.py grows it) and its own simulator, runs ``--ticks`` real ticks; the
workers take turns tick by tick, in an order that alternates, each tick after ``--pause`` seconds with every
worker idle. Prints per variant the tick's overhead and its CPU (p50, ``bench/tick_cost.py``'s figures), as a
ratio to the first variant's, its resident memory and how much of it is in huge pages; then what touching a
page costs after the same pause (``tick_cost.page_cost``).

    python bench/hugepages.py [--size 1000000] [--ticks 20] [--pause 10] [--variants base,hugetlb,malloc]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

VARIANTS: dict[str, dict[str, str]] = {
    "base": {},
    "hugetlb": {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"},
    "malloc": {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1", "PYTHONMALLOC": "malloc"},
}


def worker(size: int, root: Path) -> int:
    """Serve ticks on stdin ("tick" runs one; anything else, or the end of input, ends), one JSON line on
    stdout for each: the tick's overhead and CPU (ms), the process's RSS and its memory in huge pages (MB)."""
    from bench import tick_cost

    replies = os.fdopen(os.dup(1), "w")  # the replies' own channel: the log lines the ticks print go elsewhere
    os.dup2(2, 1)
    tick_cost.instrument()
    with ExitStack() as stack:
        run = tick_cost.setup(size, root, stack)
        os.sync()
        print(json.dumps({"ready": True}), file=replies, flush=True)
        for line in sys.stdin:
            if line.strip() != "tick":
                break
            run.tick(None)
            print(json.dumps({"overhead": run.overhead[-1], "cpu": run.cpu[-1], "rss_mb": tick_cost._rss_mb(),
                              "huge_mb": tick_cost._anon_huge_kb() / 1024}), file=replies, flush=True)
    return 0


class _Worker:
    def __init__(self, name: str, size: int, root: Path) -> None:
        self.name = name
        env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "PYTHONMALLOC")}
        env.update(VARIANTS[name])
        self.proc = subprocess.Popen(  # noqa: S603 - this script, run again as a worker
            [sys.executable, __file__, "--worker", str(size), str(root / name)], cwd=REPO, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.rows: list[dict[str, Any]] = []

    def ask(self, what: str) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if what:
            self.proc.stdin.write(what + "\n")
            self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"the {self.name} worker ended early (exit {self.proc.wait()})")
        return dict(json.loads(line))

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1_000_000, help="events in each worker's log")
    ap.add_argument("--ticks", type=int, default=20, help="real ticks per variant (the variants take turns)")
    ap.add_argument("--pause", type=float, default=10.0, help="seconds every worker idles before each tick")
    ap.add_argument("--variants", default="base,hugetlb,malloc", help=f"comma-separated, of {', '.join(VARIANTS)}")
    ap.add_argument("--worker", nargs=2, metavar=("SIZE", "DIR"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        return worker(int(a.worker[0]), Path(a.worker[1]))
    names = a.variants.split(",")
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        ap.error(f"unknown variant {unknown[0]!r}: use {', '.join(VARIANTS)}")
    from bench.tick_cost import page_cost

    with tempfile.TemporaryDirectory(prefix="fleet-agent-bench-") as d:
        workers = [_Worker(n, a.size, Path(d)) for n in names]
        try:
            for w in workers:  # one at a time: each grows or copies its own log
                w.ask("")
            for n in range(a.ticks):
                for w in workers if n % 2 == 0 else workers[::-1]:  # which goes first alternates
                    time.sleep(a.pause)
                    w.rows.append(w.ask("tick"))
        finally:
            for w in workers:
                w.close()
    base = statistics.median(r["overhead"] for r in workers[0].rows[1:])
    for w in workers:
        rows = w.rows[1:]  # the first tick verifies the whole log once
        over = statistics.median(r["overhead"] for r in rows)
        print(f"{w.name:>8} {' '.join(f'{k}={v}' for k, v in VARIANTS[w.name].items()) or '(neither set)':<58} "
              f"tick overhead p50 {over:6.1f} ms (x{over / base:4.2f} of {names[0]}; its CPU "
              f"{statistics.median(r['cpu'] for r in rows):.1f} ms)  RSS {rows[-1]['rss_mb']:.0f} MB, "
              f"{rows[-1]['huge_mb']:.0f} MB of it in huge pages", flush=True)
    small, huge = page_cost(a.pause)
    print(f"{a.size:,} events, {a.ticks} ticks each, each after {a.pause:g} s idle; touching a page after "
          f"{a.pause:g} s idle costs {small:.2f} us in 4 KiB pages, "
          + (f"{huge:.2f} us in huge pages" if huge is not None else "huge pages not available here"), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
