"""The log's storage tiers at scale: verify and replay before and after archiving, and the bytes saved.

Builds a log of N events (``EventLog.append_many`` through bench/biglog.py: copies of a few real ticks,
the simulator and the rules provider, with a summary every 10 ticks) spread over ``--months`` months,
then times, before and after ``archive`` moves every whole month older than 90 days into segments:

- ``log verify``: the whole chain (segments re-read, sha256-checked and re-hashed row by row);
- ``replay --verify``: every request re-derived from the log (``--no-replay`` skips it; copies of a tick
  do not re-derive to their recorded hash, so it counts mismatches, the same number before and after:
  the figure is the time to re-derive them, reading the archived months from their segments);
- ``read``: every event, in order;

and prints one JSON line with the sizes: the database file (after VACUUM) before and after, the segments'
bytes, and the rows' bytes before compression.

    python bench/tiers.py [--events 100000] [--months 12] [--no-replay]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.runtime.app import App  # noqa: E402
from agent.sim import ManualClock, SimServer, Simulator  # noqa: E402
from agent.store import archive  # noqa: E402
from bench import biglog  # noqa: E402
from tests.conftest import settings_for  # noqa: E402


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    r = fn()
    return round(time.perf_counter() - t, 2), r


def _replay(app: App) -> tuple[int, int]:
    import heapq

    from agent.context.replay import replay, replay_summaries, verify

    kw: dict[str, Any] = {"policy": app.policy_dict(), "tools": app.tool_specs()}
    agent = replay(app.log, app.prompts, app.settings.context, model=app.settings.model.name, **kw)
    summ = replay_summaries(app.log, app.prompts, app.settings.context, **kw)
    s = verify(heapq.merge(agent, summ, key=lambda r: r.seq), stop_at_first=False)
    return s.checked, len(s.mismatches)


def _size(app: App) -> int:
    app.log.store.vacuum()
    return app.settings.db_path.stat().st_size


def _walk(app: App) -> dict[str, Any]:
    out: dict[str, Any] = {}
    out["log_verify_s"], v = _timed(app.log.verify)
    assert v.ok, v
    out["read_all_s"], n = _timed(lambda: sum(1 for _ in app.log.read()))
    out["events"] = n
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--months", type=int, default=12)
    ap.add_argument("--no-replay", action="store_true")
    a = ap.parse_args()
    now = datetime(2027, 1, 1, tzinfo=UTC)
    clock = ManualClock(now.timestamp() - (a.months * 30 + 2) * 86400)  # the real ticks come first
    sim = Simulator(seed=7, clock=clock)
    with SimServer(sim) as server, tempfile.TemporaryDirectory() as tmp:
        app = App(settings_for(Path(tmp), server.url, provider="rules"), env={"VAST_API_KEY": sim.api_key},
                  clock=clock)
        app.init_database()
        template = biglog.record_template(app, clock.advance)
        biglog.SECONDS_PER_EVENT = a.months * 30 * 86400 / a.events  # the log spans --months months
        biglog.grow(app.log, template, a.events, now=now)
        before = _walk(app)
        if not a.no_replay:
            before["replay_verify_s"], before["replay_checked_mismatched"] = _timed(lambda: _replay(app))
        before["db_bytes"] = _size(app)
        archive_s, r = _timed(lambda: archive.archive(app.log, older_than=90 * 86400, now=now))
        after = _walk(app)
        if not a.no_replay:
            after["replay_verify_s"], after["replay_checked_mismatched"] = _timed(lambda: _replay(app))
        after["db_bytes"] = _size(app)
        after["segment_bytes"] = r.bytes
        seg_rows = r.raw_bytes
        app.close()
    print(json.dumps({"events": a.events, "months": a.months, "archived_events": r.plan.events,
                      "segments": len(r.sealed), "archive_s": archive_s, "rows_bytes_archived": seg_rows,
                      "bytes_saved": before["db_bytes"] - after["db_bytes"] - after["segment_bytes"],
                      "before": before, "after": after}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
