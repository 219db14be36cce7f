"""Big, realistic logs for the benches and the query-plan test, built through ``EventLog.append_many``.

``record_template`` runs a few real ticks (the simulator, the rules provider) and keeps their events;
``grow`` appends copies of those ticks until the log holds N events, each copy a tick of its own
(its own tick number, call ids, idempotency keys and alert ids), stamped in the past, with a
``context.compacted`` every ``COMPACT_EVERY`` ticks, as a long-running daemon leaves them:

- every rent intent gets a fresh key, so the intents table grows with the log;
- every alert a copy raises is resolved in the same tick, so the alerts table grows too
  while the open alerts stay few;
- the newest event is ``PAST`` before the clock's now, so windows such as "rents in the last
  hour" hold only what real ticks add on top.
"""

from __future__ import annotations

import copy
import os
import shutil
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.store.log import EventLog

if TYPE_CHECKING:
    from agent.runtime.app import App

Item = tuple[str, dict[str, Any], str, "int | None"]

SKIP = ("input.recorded", "daemon.started", "daemon.stopped", "knowledge.changed", "instance.adopted",
        "instance.gone", "rent.settled", "memory.written", "memory.deleted", "context.compacted")
COMPACT_EVERY = 10
SECONDS_PER_EVENT = 3.0
PAST = timedelta(hours=3)
BATCH = 2000


def record_template(app: Any, advance: Callable[[float], None], ticks: int = 4) -> list[list[Item]]:
    """Run ``ticks`` real ticks on ``app`` (``advance(seconds)`` moves the fleet's clock between
    them); their events, tick by tick, as (kind, payload, source, tick)."""
    from agent.runtime.tick import run_tick

    for _ in range(ticks):
        run_tick(app)
        advance(300)
    return ticks_of(app.log)


def ticks_of(log: EventLog) -> list[list[Item]]:
    """The events of the ticks ``log`` holds, tick by tick, as (kind, payload, source, tick): a template."""
    by_tick: dict[int, list[Item]] = {}
    for e in log.read(0):
        if e.tick is not None and e.kind not in SKIP:
            by_tick.setdefault(e.tick, []).append((e.kind, e.payload, e.source, e.tick))
    return [by_tick[t] for t in sorted(by_tick)]


class _Copier:
    """Rewrites a template tick into tick ``n`` with ids of its own."""

    def __init__(self) -> None:
        self.alert_id = 100_000
        self.n = 0

    def tick(self, items: list[Item], n: int) -> list[Item]:
        self.n = n
        alerts: dict[int, int] = {}
        out: list[Item] = []
        for kind, payload, source, _ in items:
            p = copy.deepcopy(payload)
            self._ids(p)
            if "alert_id" in p:
                if kind == "alert.raised":
                    self.alert_id += 1
                    alerts[p["alert_id"]] = self.alert_id
                    p["dedup_key"] = f"{p['dedup_key']}#{self.alert_id}"
                if p["alert_id"] not in alerts:
                    continue  # about an alert this copy did not raise
                p["alert_id"] = alerts.pop(p["alert_id"]) if kind == "alert.resolved" else alerts[p["alert_id"]]
            out.append((kind, p, source, n))
        for old, new in alerts.items():  # every alert a copy raises is resolved in the same tick
            out.append(("alert.resolved", {"alert_id": new, "title": f"alert {old}", "reason": "cleared"},
                        "system", n))
        return out

    def _ids(self, p: dict[str, Any]) -> None:
        suffix = f"-x{self.n}"
        if "call_id" in p:
            p["call_id"] += suffix
        if p.get("idempotency_key"):
            p["idempotency_key"] = f"{p['idempotency_key'][:6]}{self.n:06x}"
        for c in p.get("tool_calls") or ():
            c["id"] += suffix
        p.pop("effect", None)  # ownership stays with the real ticks


def grow(log: EventLog, template: list[list[Item]], events: int, *, now: datetime | None = None,
         first_tick: int = 1) -> int:
    """Append copies of ``template``'s ticks until ``log`` holds ``events`` events; the next free tick number.

    Events are stamped ``SECONDS_PER_EVENT`` apart, ending ``PAST`` before ``now``; the search index
    is brought up to the head at the end."""
    now = now or log.clock()
    have = log.last_seq()
    start = now - PAST - timedelta(seconds=SECONDS_PER_EVENT * max(0, events - have))
    stamp = {"i": 0}

    def clock() -> datetime:
        stamp["i"] += 1
        return start + timedelta(seconds=SECONDS_PER_EVENT * stamp["i"])

    saved = log.clock
    log.clock = clock
    copier, tick, batch = _Copier(), first_tick, []
    try:
        while have + len(batch) < events:
            items = copier.tick(template[(tick - first_tick) % len(template)], tick)
            if (tick - first_tick) % COMPACT_EVERY == COMPACT_EVERY - 1:
                seq = have + len(batch) + len(items)
                items.append(("context.compacted", {"summary": f"ticks up to {tick}: fleet steady", "method": "fallback",
                                                    "covered_to": seq, "first_kept_seq": seq + 1}, "system", tick))
            batch.extend(items[: events - have - len(batch)])
            tick += 1
            if len(batch) >= BATCH:
                log.append_many(batch)
                have, batch = have + len(batch), []
        if batch:
            log.append_many(batch)
        log.index_search()  # as a daemon's ticks keep it: indexed up to the last tick
    finally:
        log.clock = saved
    return tick


CACHE_DIR = Path(os.environ.get("FLEET_AGENT_BIGLOG_CACHE", "/tmp/fleet-agent-biglogs"))


def grow_cached(app: App, template: list[list[Item]], size: int, name: str) -> bool:
    """``grow(app.log, template, size)``, kept under ``CACHE_DIR`` (``$FLEET_AGENT_BIGLOG_CACHE``) by
    ``name``, size and the schema's newest migration: a rerun copies the files grown before (the
    database, its head and checkpoint files) instead of appending 10^6 events again. Closes the app (its
    log reopens on next use). True when the log came from the cache."""
    from agent.store.db import migrations

    cached = CACHE_DIR / f"{name}-{size}-{migrations()[-1][0]}"
    db = app.settings.db_path
    if (cached / "complete").exists():
        app.close()
        for f in db.parent.glob(db.name + "*"):
            f.unlink()
        for f in cached.glob(db.name + "*"):
            shutil.copy2(f, db.parent / f.name)
        return True
    grow(app.log, template, size)
    app.close()
    tmp = cached.with_name(cached.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for f in db.parent.glob(db.name + "*"):
        shutil.copy2(f, tmp / f.name)
    (tmp / "complete").write_text(f"{size} events\n", encoding="utf-8")
    shutil.rmtree(cached, ignore_errors=True)
    tmp.rename(cached)
    return False
