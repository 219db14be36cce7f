"""Bytes per event on a realistic run: the database file against the number of events, and each
kind's share of the payload bytes.

Runs ``--ticks`` real ticks against the simulator with the scripted model (tests/fakes/openai_server.py
through the real openai SDK; each tick asks for the fleet, then answers) at the default context budget,
then checkpoints the write-ahead log into the database and prints one JSON line: events, file bytes
per event, payload bytes per event, the kinds with the largest share of payload bytes, each kind's
payload bytes per event, and (where the Python's own sqlite3 has the ``dbstat`` table) the file's bytes
per event by table and index.

    python bench/storage.py [--ticks 200] [--instances 0] [--keep copy.db]
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
from agent.app import App  # noqa: E402
from agent.sim import ManualClock, SimServer, Simulator  # noqa: E402
from agent.store.usage import bytes_by_table  # noqa: E402
from agent.tick import run_tick  # noqa: E402
from tests.conftest import settings_for  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI, reply  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ticks", type=int, default=200)
    ap.add_argument("--keep", type=Path, help="copy the database here when done (to look inside it)")
    ap.add_argument("--instances", type=int, default=0,
                    help="instances running on the account from the start (each tick observes them all)")
    a = ap.parse_args(argv)
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
        for _ in range(a.ticks):
            run_tick(app)
            sim.advance(300)
        app.log.index_search()  # appends leave the full-text index behind; a search (or the daemon) catches it up
        by_kind = app.log.store.payload_bytes_by_kind()
        events = app.log.count()
        db = app.settings.db_path
        app.close()
        App(settings_for(Path(d), server.url, model_url=fake.base_url)).log.close()  # last close checkpoints the WAL
        size = db.stat().st_size + sum(p.stat().st_size for p in db.parent.glob(db.name + "-wal"))
        tables = bytes_by_table(db)
        if a.keep is not None:
            shutil.copyfile(db, a.keep)
    payload = sum(b for _, b in by_kind.values())
    top = sorted(by_kind.items(), key=lambda kv: -kv[1][1])[:6]
    print(json.dumps({
        "bench": "storage", "ticks": a.ticks, "instances": a.instances, "events": events,
        "file_bytes_per_event": round(size / events), "payload_bytes_per_event": round(payload / events),
        "payload_share": {k: round(b / payload, 3) for k, (_, b) in top},
        "bytes_per_event_of_kind": {k: round(b / n) for k, (n, b) in sorted(by_kind.items(), key=lambda kv: -kv[1][1])},
        "file_bytes_per_event_by_table": {k: round(b / events) for k, b in tables.items()},
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
