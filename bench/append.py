"""Append throughput and latency of the event log against a raw SQLite insert loop, in the same run.

Ours: ``EventLog.append`` (single-event commits) and ``EventLog.append_many`` (batches of 100),
each commit BEGIN IMMEDIATE + synchronous=FULL + validation + canonical JSON + hash chain + read
models + the head file. The full-text index is not written by an append: ``index_search`` renders
and indexes what it lacks (before a search, and once a tick in the tick's last transaction); its
CPU per event is printed beside, measured once over the whole log at the end.
The baseline: a database opened as the log opens its own (the same driver, pysqlite3, pragmas, WAL
and synchronous=FULL, and schema: the events table with all its indexes), and plain ``INSERT``
statements of prepared rows (the same payloads as JSON text), committed one by one and in batches
of 100.

Raw and ours take turns, so a busy machine slows both alike: single commits one after the other (which
goes first alternates), then a batch of each. Prints one JSON
line: batched events/s of each and their ratio, CPU microseconds per batched event, single-append
p50 of each and their ratio, the search index's CPU per event. ``--profile`` adds cProfile's top
lines for the batched appends and for the single ones.

    python bench/append.py [--rounds 40] [--single 20] [--dir DIR] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from agent.events.canonical import canonical
from agent.store.db import connect, sqlite3
from agent.store.log import EventLog
from agent.times import utc_ts

# A mix close to a tick's: model-visible notes and tool results, an invisible intent.
_OUTPUT = "offer 123456 RTX 4090 x1 $0.38/h reliability 0.991 host 4411 " * 4
BATCH = 100

_RAW_INSERT = ("INSERT INTO events (seq, id, ts, kind, version, source, tick, payload, tokens, prev_hash, hash)"
               " VALUES (?,?,?,?,?,?,?,?,?,?,?)")


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


def _raw_row(seq: int) -> tuple[Any, ...]:
    """A row as an append writes it (a uuid4, a rising timestamp, 64-hex hashes), prepared in advance."""
    kind, payload, source, tick = payloads(seq)
    return (seq, str(uuid.uuid4()), utc_ts(), kind, 1, source, tick, canonical(payload), None,
            f"{seq - 1:064x}", f"{seq:064x}")


class _Raw:
    """The baseline: prepared rows inserted into a database opened as the log opens its own (same
    driver, pragmas and schema: the events table with all its indexes), no chain, no search index,
    no read models."""

    def __init__(self, directory: Path) -> None:
        self.conn = connect(directory / "raw.db", create=True)
        self.seq = 0

    def rows(self, n: int) -> list[tuple[Any, ...]]:
        self.seq += n
        return [_raw_row(i) for i in range(self.seq - n + 1, self.seq + 1)]

    def single(self, row: tuple[Any, ...]) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.execute(_RAW_INSERT, row)
        self.conn.execute("COMMIT")

    def batch(self, rows: list[tuple[Any, ...]]) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.executemany(_RAW_INSERT, rows)
        self.conn.execute("COMMIT")


def commit_ms(directory: Path, n: int = 60) -> float:
    """p50 of ``n`` raw single-event commits (BEGIN IMMEDIATE, one INSERT, COMMIT: synchronous=FULL in WAL)
    on a fresh database in ``directory`` opened as the log opens its own: what one fsync'd commit costs on
    this disk now (bench/tick_cost.py prints it beside a tick's commits)."""
    raw = _Raw(Path(tempfile.mkdtemp(prefix="commit-", dir=directory)))
    try:
        times = [_timed(raw.single, row)[0] for row in raw.rows(n)]
    finally:
        raw.conn.close()
    return statistics.median(times) * 1e3


def _timed(fn: Any, *args: Any) -> tuple[float, float]:
    w, c = time.perf_counter(), time.process_time()
    fn(*args)
    return time.perf_counter() - w, time.process_time() - c


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else 0.0


def run(directory: Path, rounds: int, single: int, profile: bool = False) -> dict[str, Any]:
    """``rounds`` rounds, each: ``single`` single commits of each, raw and ours one after the other (which goes
    first alternates), then one batch of 100 of each (so a busy machine slows both alike); medians over the
    rounds."""
    rw, log = _Raw(directory), EventLog(directory / "bench.db")
    prof = cProfile.Profile() if profile else None
    prof_single = cProfile.Profile() if profile else None
    lat: dict[str, list[float]] = {"raw": [], "ours": []}
    batch: dict[str, list[tuple[float, float]]] = {"raw": [], "ours": []}
    n = 0
    try:
        log.append(*payloads(0))  # warms the statement cache
        for r in range(rounds):
            for i, row in enumerate(rw.rows(single)):  # one of each in turn, each first every other time
                n += 1
                item = payloads(n)
                for who in (("raw", "ours") if (r + i) % 2 == 0 else ("ours", "raw")):
                    if who == "raw":
                        lat["raw"].append(_timed(rw.single, row)[0])
                        continue
                    if prof_single is not None:
                        prof_single.enable()
                    lat["ours"].append(_timed(log.append, *item)[0])
                    if prof_single is not None:
                        prof_single.disable()
            batch["raw"].append(_timed(rw.batch, rw.rows(BATCH)))
            items = [payloads(n + j) for j in range(BATCH)]
            n += BATCH
            if prof is not None:
                prof.enable()
            batch["ours"].append(_timed(log.append_many, items))
            if prof is not None:
                prof.disable()
        ok = log.verify().ok
        c = time.process_time()
        indexed = log.index_search()
        index_us = 1e6 * (time.process_time() - c) / max(indexed, 1)
    finally:
        log.close()
        rw.conn.close()
    per_s = {k: BATCH / _median([w for w, _ in v]) for k, v in batch.items()}
    cpu_us = {k: 1e6 * _median([c for _, c in v]) / BATCH for k, v in batch.items()}
    p50 = {k: _median(v) * 1e3 for k, v in lat.items()}
    result: dict[str, Any] = {
        "bench": "append", "sqlite_version": sqlite3.sqlite_version, "synchronous": "FULL", "rounds": rounds,
        "batch100_events_per_s": round(per_s["ours"]), "raw_batch100_events_per_s": round(per_s["raw"]),
        "batch100_vs_raw": round(per_s["ours"] / per_s["raw"], 2),
        "cpu_us_per_event": round(cpu_us["ours"], 1), "raw_cpu_us_per_event": round(cpu_us["raw"], 1),
        "single_p50_ms": round(p50["ours"], 3), "raw_single_p50_ms": round(p50["raw"], 3),
        "single_p50_vs_raw": round(p50["ours"] / p50["raw"], 2),
        "search_index_cpu_us_per_event": round(index_us, 1), "events": n + 1, "chain_verifies": ok,
    }
    if prof is not None and prof_single is not None:
        out = io.StringIO()
        for title, p in (("batched appends", prof), ("single appends", prof_single)):
            out.write(f"--- {title}\n")
            pstats.Stats(p, stream=out).sort_stats("tottime").print_stats(12)
        result["profile"] = out.getvalue()
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=40, help="rounds of single commits and one batch of 100")
    ap.add_argument("--single", type=int, default=20, help="single-event commits per round")
    ap.add_argument("--dir", help="directory for the databases (default: a fresh temporary one)")
    ap.add_argument("--profile", action="store_true", help="print cProfile's top lines for the batched and the single appends")
    a = ap.parse_args(argv)
    if a.dir:
        result = run(Path(a.dir), a.rounds, a.single, a.profile)
    else:
        with tempfile.TemporaryDirectory(prefix="fleet-agent-bench-") as d:
            result = run(Path(d), a.rounds, a.single, a.profile)
    profile = result.pop("profile", None)
    sys.stdout.write(json.dumps(result) + "\n")
    if profile:
        sys.stdout.write(profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
