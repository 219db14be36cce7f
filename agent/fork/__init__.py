"""Fork any past moment of the log and re-run it with a change ("what if"), then compare decisions.

    point.py   where a fork starts: a tick or a time, rounded back to a tick boundary
    seed.py    a simulator seeded from what the origin logged (instances, balance, demand, offers)
    setup.py   the fork's config: the origin's, with the policy and prompts in force then, plus the change
    replay.py  the origin's tick starts and call results, replayed until the fork decides differently
    run.py     make_fork: copy the origin's prefix row for row, append fork.started, run K ticks
    diff.py    what the model decided in the origin and in the fork, step by step

The origin database is only ever opened read-only. The fork is a new log in its own directory
(FORKDIR/config.yaml, FORKDIR/data/fleet-agent.db): its events 1..seq are the origin's (same hashes, so
``log verify --head SEQ:HASH`` on the fork proves it grew from the origin), then ``fork.started`` names the
origin, then the re-run ticks.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from agent import config
from agent.config import PgTarget
from agent.errors import LogError, UsageError
from agent.fork.diff import Decision, TickDecisions, TickDiff, compare, decisions, render
from agent.fork.point import ForkPoint
from agent.fork.run import ForkResult, Where, fork_point, make_fork, open_origin
from agent.fork.setup import Change
from agent.store.log import EventLog

__all__ = ["Change", "Decision", "ForkOrigin", "ForkPoint", "ForkResult", "TickDecisions", "TickDiff", "Where",
           "compare", "decisions", "diff_fork", "fork_point", "make_fork", "open_origin", "render"]


class ForkOrigin:
    """A fork directory's log and what its ``fork.started`` says about the origin."""

    def __init__(self, fork_dir: Path) -> None:
        cfg = fork_dir / "config.yaml"
        if not cfg.is_file():
            raise UsageError(f"{fork_dir} is not a fork directory (no config.yaml); give the directory "
                             "`fleet-agent fork` printed")
        s = config.load(str(cfg))
        self.settings = s
        self.log = EventLog(s.db_path, readonly=True, create=False)
        started = next(iter(self.log.read(0, kinds=["fork.started"], limit=1)), None)
        if started is None:
            self.log.close()
            raise UsageError(f"{fork_dir} holds a log that is not a fork (no fork.started event); give the "
                             "directory `fleet-agent fork` printed")
        self.started = started.payload
        self.started_seq = started.seq
        self.ticks = sorted({e.tick for e in self.log.read(started.seq, kinds=["tick.started"]) if e.tick is not None})

    def close(self) -> None:
        self.log.close()


def origin_location(recorded: str, fork_settings: config.Settings) -> Path | PgTarget:
    """The origin log a fork.started names: a SQLite path, or "URL (fleet AGENT_ID)" for a fleet in
    PostgreSQL (the password from the fork's storage.password_* settings, copied from the origin's)."""
    m = re.fullmatch(r"(postgres(?:ql)?://\S+) \(fleet (\S+)\)", recorded)
    if m is None:
        return Path(recorded)
    pw = config.find_secret("storage.password", fork_settings.storage.password_ref, fork_settings, None)
    return PgTarget(m.group(1), m.group(2), password=pw)


def diff_fork(fork_dir: Path) -> tuple[dict[str, Any], list[TickDiff], list[str]]:
    """(the fork's origin pointer, the per-tick comparison, warnings) for the fork in ``fork_dir``."""
    f = ForkOrigin(fork_dir)
    try:
        p = f.started
        origin_db = origin_location(str(p["origin_db"]), f.settings)
        try:
            origin = EventLog(origin_db, readonly=True, create=False)
        except LogError as e:
            raise UsageError(f"the fork's origin {origin_db} cannot be opened ({e}); it names the database the "
                             "fork was made from") from None
        try:
            warnings = []
            row = origin.get(int(p["origin_seq"]))
            if row is not None and row.hash != p["origin_hash"]:
                warnings.append(f"the origin's seq {p['origin_seq']} no longer has the hash the fork recorded: "
                                "the origin was rewritten; run `fleet-agent log verify` on it")
            return dict(p), compare(origin, f.log, f.ticks), warnings
        finally:
            origin.close()
    finally:
        f.close()
