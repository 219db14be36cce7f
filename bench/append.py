"""Append throughput and latency of the event log, on a fresh database file.

Prints one JSON line: events/s for single-event commits and for batches of 100
(every commit BEGIN IMMEDIATE + synchronous=FULL + hash chain + FTS + read
models), p50/p99 single-append latency in ms, and the SQLite version.

    python bench/append.py [--single 2000] [--batches 100] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agent.store.db import sqlite3
from agent.store.log import EventLog

# A mix close to a tick's: model-visible notes and tool results, an invisible intent.
_OUTPUT = "offer 123456 RTX 4090 x1 $0.38/h reliability 0.991 host 4411 " * 4


def payloads(i: int) -> tuple[str, dict[str, Any], str, int | None]:
    r = i % 3
    if r == 0:
        return ("tool.called", {"call_id": f"c{i}", "name": "search_offers", "arguments": '{"gpu":"RTX 4090"}'},
                "model", i // 10)
    if r == 1:
        return ("tool.result", {"call_id": f"c{i - 1}", "name": "search_offers", "ok": True, "output": _OUTPUT},
                "tool", i // 10)
    return ("operator.note", {"text": f"note {i}: prefer hosts with reliability above 0.97", "by": "alice"},
            "operator", None)


def run(directory: Path, single: int, batches: int, batch_size: int = 100) -> dict[str, Any]:
    log = EventLog(directory / "bench.db")
    try:
        log.append(*payloads(0))  # loads the tokenizer and warms the statement cache
        lat = []
        t0 = time.perf_counter()
        for i in range(single):
            t = time.perf_counter()
            log.append(*payloads(i))
            lat.append(time.perf_counter() - t)
        single_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        for b in range(batches):
            log.append_many([payloads(b * batch_size + j) for j in range(batch_size)])
        batch_s = time.perf_counter() - t0
        ok = log.verify().ok
    finally:
        log.close()
    lat.sort()
    return {
        "bench": "append",
        "sqlite_version": sqlite3.sqlite_version,
        "synchronous": "FULL",
        "single_events_per_s": round(single / single_s),
        "batch100_events_per_s": round(batches * batch_size / batch_s),
        "single_p50_ms": round(statistics.median(lat) * 1e3, 3),
        "single_p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3, 3),
        "events": single + batches * batch_size + 1,
        "chain_verifies": ok,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--single", type=int, default=2000, help="single-event commits to time")
    ap.add_argument("--batches", type=int, default=100, help="batches of 100 events to time")
    ap.add_argument("--dir", help="directory for the database (default: a fresh temporary one)")
    a = ap.parse_args(argv)
    if a.dir:
        result = run(Path(a.dir), a.single, a.batches)
    else:
        with tempfile.TemporaryDirectory(prefix="fleet-agent-bench-") as d:
            result = run(Path(d), a.single, a.batches)
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
