"""Bytes per event on a realistic run: the database file against the number of events, and each
kind's share of the payload bytes.

Runs ``--ticks`` real ticks against the simulator with the scripted model (tests/fakes/openai_server.py
through the real openai SDK; each tick asks for the fleet, then answers) at the default context budget,
with ``--instances`` instances on the account that every tick observes (10 by default: a fleet, as the
agent runs one), and prints one JSON line:

- ``file_bytes_per_event``: the whole database file (write-ahead log checkpointed into it) over every
  event. It includes the fixed cost of ~40 tables and indexes of at least one page each, which a short
  run spreads over few events;
- ``marginal_file_bytes_per_event``: what the file grows by per event appended over the second half of
  the run (checkpointed at the midpoint and at the end). The fixed cost is paid by then, so this is what
  each further event costs a log that runs for months: the figure for a realistic run;
- ``wal_bytes_per_commit``: bytes the second half's commits wrote to the write-ahead log (whole pages,
  each with its 24-byte frame header), per commit that wrote, and ``commits_per_tick``;
- payload bytes per event, the kinds with the largest share of payload bytes, each kind's payload bytes
  per event, and (where the Python's own sqlite3 has the ``dbstat`` table) the file's bytes per event by
  table and index.

``--page-size`` creates the database with another page size than the one ``fleet-agent init`` uses.

    python bench/storage.py [--ticks 200] [--instances 10] [--page-size 8192] [--keep copy.db]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agent import logsetup  # noqa: E402
from agent.runtime.app import App  # noqa: E402
from agent.runtime.tick import run_tick  # noqa: E402
from agent.sim import ManualClock, SimServer, Simulator  # noqa: E402
from agent.store import db, plans  # noqa: E402
from agent.store.usage import bytes_by_table  # noqa: E402
from tests.conftest import settings_for  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI, reply  # noqa: E402


def _ticks(app: App, sim: Simulator, n: int) -> None:
    for _ in range(n):
        run_tick(app)
        sim.advance(300)
    app.log.index_search()  # appends leave the full-text index behind; a search (or the daemon) catches it up


def _settled_size(app: App) -> tuple[int, int]:
    """(events, database file bytes) once the write-ahead log is checkpointed into the file and truncated."""
    app.log.store.checkpoint()
    return app.log.count(), app.settings.db_path.stat().st_size


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ticks", type=int, default=200)
    ap.add_argument("--keep", type=Path, help="copy the database here when done (to look inside it)")
    ap.add_argument("--instances", type=int, default=10,
                    help="instances running on the account from the start (each tick observes them all)")
    ap.add_argument("--page-size", type=int, default=db.PAGE_SIZE,
                    help=f"the new database's page size in bytes (default {db.PAGE_SIZE}, what 'fleet-agent init' uses)")
    a = ap.parse_args(argv)
    db.PAGE_SIZE = a.page_size  # the database init creates below takes it
    if a.ticks < 2:
        ap.error("--ticks must be at least 2 (the marginal figure is measured over the second half)")
    logsetup.configure("warning", "auto")
    clock = ManualClock()
    sim = Simulator(seed=7, clock=clock)
    for offer in sorted(sim.offers.values(), key=lambda o: (o["dph_total"], o["id"]))[:a.instances]:
        sim.create_instance(offer["id"])
    with SimServer(sim) as server, FakeOpenAI() as fake, tempfile.TemporaryDirectory(prefix="fleet-agent-st-") as d:
        fake.enqueue(*[s for _ in range(a.ticks + 10) for s in (reply(tool_calls=[("list_fleet", {})]),
                                                                 reply("fleet steady; nothing to change"))])
        app = App(settings_for(Path(d), server.url, model_url=fake.base_url), env={"VAST_API_KEY": sim.api_key},
                  clock=clock)
        app.init_database()
        _ticks(app, sim, a.ticks // 2)
        mid_events, mid_size = _settled_size(app)
        app.log.store.autocheckpoint(0)  # every frame of the second half stays in the WAL, to be counted
        with plans.record(app.log) as statements:
            _ticks(app, sim, a.ticks - a.ticks // 2)
        frames = app.log.store.checkpoint()
        events, size = _settled_size(app)
        page = app.log.store.page_size()
        by_kind = app.log.store.payload_bytes_by_kind()
        path = app.settings.db_path
        app.close()
        tables = bytes_by_table(path)
        if a.keep is not None:
            shutil.copyfile(path, a.keep)
    commits = plans.commits_that_wrote(statements)
    payload = sum(b for _, b in by_kind.values())
    top = sorted(by_kind.items(), key=lambda kv: -kv[1][1])[:6]
    print(json.dumps({
        "bench": "storage", "ticks": a.ticks, "instances": a.instances, "events": events, "page_size": page,
        "file_bytes_per_event": round(size / events),
        "marginal_file_bytes_per_event": round((size - mid_size) / (events - mid_events)),
        "payload_bytes_per_event": round(payload / events),
        "wal_bytes_per_commit": round(frames * (page + 24) / commits), "commits_per_tick": round(commits / (a.ticks - a.ticks // 2), 1),
        "payload_share": {k: round(b / payload, 3) for k, (_, b) in top},
        "bytes_per_event_of_kind": {k: round(b / n) for k, (n, b) in sorted(by_kind.items(), key=lambda kv: -kv[1][1])},
        "file_bytes_per_event_by_table": {k: round(b / events) for k, b in tables.items()},
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
