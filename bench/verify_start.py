"""Start-up verification time of the event log, with and without the verified checkpoint.

Builds a log of N events (EventLog.append_many, batches of 1000), then times what
``run`` and ``tick`` do before their first append (``check_before_append``):

- cold: no checkpoint file, so the whole chain is walked (the first start after an upgrade);
- warm: a checkpoint at the head, as the previous start left it, plus the events one day
  of ticks appends after it (``--tail``, default 6000: 288 ticks of about 20 events).

Prints one JSON line. A database built once is reused with ``--dir`` (it is kept there).

    python bench/verify_start.py [--events 1000000] [--tail 6000] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agent.store.log import EventLog

BATCH = 1000
_OUTPUT = "offer 123456 RTX 4090 x1 $0.38/h reliability 0.991 host 4411 " * 4


def payloads(i: int) -> tuple[str, dict[str, Any], str, int | None]:
    """A mix close to a tick's: tool calls, their results, operator notes."""
    r = i % 3
    if r == 0:
        return ("tool.called", {"call_id": f"c{i}", "name": "search_offers", "arguments": '{"gpu":"RTX 4090"}'},
                "model", i // 20)
    if r == 1:
        return ("tool.result", {"call_id": f"c{i - 1}", "name": "search_offers", "ok": True, "output": _OUTPUT},
                "tool", i // 20)
    return ("operator.note", {"text": f"note {i}: prefer hosts with reliability above 0.97", "by": "alice"},
            "operator", None)


def fill(log: EventLog, upto: int) -> float:
    """Append events until the log holds ``upto``; the seconds it took."""
    t0 = time.perf_counter()
    n = log.last_seq()
    while n < upto:
        k = min(BATCH, upto - n)
        log.append_many([payloads(n + j) for j in range(k)])
        n += k
    return time.perf_counter() - t0


def timed_check(log: EventLog) -> tuple[float, int, bool]:
    t0 = time.perf_counter()
    r = log.check_before_append()
    return time.perf_counter() - t0, r.checked, r.ok


def run(directory: Path, events: int, tail: int) -> dict[str, Any]:
    log = EventLog(directory / "bench.db")
    try:
        build_s = fill(log, events)
        log.checkpoint_file.unlink(missing_ok=True)
        cold_s, cold_checked, ok_cold = timed_check(log)  # walks everything, leaves a checkpoint at the head
        again_s, again_checked, _ = timed_check(log)  # nothing appended since
        fill(log, events + tail)
        warm_s, warm_checked, ok_warm = timed_check(log)
    finally:
        log.close()
    return {
        "bench": "verify_start",
        "events": events,
        "build_s": round(build_s, 1),
        "no_checkpoint_s": round(cold_s, 3),
        "no_checkpoint_checked": cold_checked,
        "checkpoint_at_head_s": round(again_s, 4),
        "checkpoint_at_head_checked": again_checked,
        "checkpoint_plus_tail_s": round(warm_s, 4),
        "checkpoint_plus_tail_checked": warm_checked,
        "chain_verifies": ok_cold and ok_warm,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000, help="events in the log (default 10^6)")
    ap.add_argument("--tail", type=int, default=6000, help="events appended after the checkpoint (default 6000)")
    ap.add_argument("--dir", help="directory for the database (default: a fresh temporary one)")
    a = ap.parse_args(argv)
    if a.dir:
        Path(a.dir).mkdir(parents=True, exist_ok=True)
        result = run(Path(a.dir), a.events, a.tail)
    else:
        with tempfile.TemporaryDirectory(prefix="fleet-agent-bench-") as d:
            result = run(Path(d), a.events, a.tail)
    sys.stdout.write(json.dumps(result) + "\n")
    return 0 if result["chain_verifies"] else 1


if __name__ == "__main__":
    sys.exit(main())
