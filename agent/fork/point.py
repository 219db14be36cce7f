"""Where a fork starts: a tick or a time of the origin log, rounded back to a tick boundary.

``--tick N`` forks just before tick N's first event, so the fork re-runs tick N. ``--at TIME`` takes
the log as it stood at TIME; when a tick was running then, the fork starts before that tick instead
(a fork never starts between an intent and its result). The simulator is seeded from the
observation the origin logged next (the tick the fork re-runs), else the last one before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent.errors import UsageError
from agent.events import Event
from agent.store.log import EventLog
from agent.times import parse_ts

ENDS = ["tick.completed", "tick.failed"]


@dataclass(frozen=True)
class ForkPoint:
    """The fork point: the origin's events 1..seq are the fork's, then it runs from ``time``."""

    seq: int
    hash: str
    label: str                       # "tick 12" or the time asked for
    time: float                      # the fork's clock starts here (unix seconds)
    observation: dict[str, Any]      # what the simulator is seeded from
    first_tick: int                  # the tick number the fork runs first


def _newest(log: EventLog, kinds: list[str], *, until_seq: int | None = None, tick: int | None = None
            ) -> Event | None:
    return next(iter(log.read(0, until_seq=until_seq, kinds=kinds, tick=tick, newest_first=True, limit=1)), None)


def at_tick(log: EventLog, tick: int) -> ForkPoint:
    """Just before tick ``tick``'s first event."""
    first = next(iter(log.read(0, tick=tick, limit=1)), None)
    started = next(iter(log.read(0, kinds=["tick.started"], tick=tick, limit=1)), None)
    if first is None or started is None:
        last = _newest(log, ["tick.started"])
        have = f"the log's ticks end at {last.tick}" if last is not None else "the log has no ticks yet"
        raise UsageError(f"--tick {tick}: no such tick in the origin log ({have}); pick one `fleet-agent thread "
                         "show --kind tick.started` lists")
    return _point(log, first.seq - 1, f"tick {tick}", started)


def at_time(log: EventLog, at_ts: str, label: str) -> ForkPoint:
    """The log as it stood at ``at_ts``, moved back to the start of a tick running then."""
    from agent.context import seq_at

    seq = seq_at(log, at_ts)
    if seq == 0:
        raise UsageError(f"--at {label}: the origin log holds nothing that early; pick a later time")
    started = _newest(log, ["tick.started"], until_seq=seq)
    if started is not None and started.tick is not None and _newest(log, ENDS, until_seq=seq, tick=started.tick) is None:
        first = next(iter(log.read(0, tick=started.tick, limit=1)))
        return _point(log, first.seq - 1, label, started)
    upcoming = next(iter(log.read(seq, kinds=["tick.started"], limit=1)), None)
    p = _point(log, seq, label, upcoming or started)
    return ForkPoint(p.seq, p.hash, p.label, parse_ts(at_ts).timestamp(), p.observation, p.first_tick)


def _point(log: EventLog, seq: int, label: str, seen: Event | None) -> ForkPoint:
    row = log.get(seq) if seq > 0 else None
    h = row.hash if row is not None else "0" * 64
    obs: dict[str, Any] = dict(seen.payload["observation"]) if seen is not None else {}
    when = float(obs.get("time") or (parse_ts(row.ts).timestamp() if row is not None else 0.0))
    before = _newest(log, ["tick.started"], until_seq=seq)
    first_tick = (before.tick or 0) + 1 if before is not None else 1
    return ForkPoint(seq, h, label, when, obs, first_tick)
