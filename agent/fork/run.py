"""Make a fork and run it: copy the origin's prefix, seed a simulator, run K ticks with the change."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.config import Settings
from agent.context.prompts import Prompts
from agent.errors import UsageError
from agent.fork.point import ForkPoint, at_tick, at_time
from agent.fork.replay import Replay
from agent.fork.seed import Seeded, seeded_simulator
from agent.fork.setup import SIM_KEY, Change, in_force_at, write_config
from agent.runtime.app import App
from agent.sim import ManualClock, SimServer
from agent.store.log import EventLog
from agent.times import parse_operator_time, utc_ts

if TYPE_CHECKING:
    from agent.model.llm import ChatProvider
    from agent.runtime.tick import TickResult


@dataclass(frozen=True)
class Where:
    """The fork point as the operator names it: one of a tick or a time."""

    tick: int | None = None
    at: str | None = None

    def __post_init__(self) -> None:
        if (self.tick is None) == (self.at is None):
            raise UsageError("fork needs exactly one of --tick N or --at TIME (the moment to fork)")


@dataclass
class ForkResult:
    out: Path
    config: Path
    point: ForkPoint
    seeded: Seeded
    ticks: list[TickResult] = field(default_factory=list)
    replayed: list[int] = field(default_factory=list)  # ticks that started as the origin's (replay.py)
    live_why: str | None = None                          # why the fork went on with its own simulator


def open_origin(settings: Settings) -> EventLog:
    """The origin log, read-only: a fork never writes to it (nor to its head or checkpoint files)."""
    c = settings.context
    return EventLog(settings.log_target(), readonly=True, encoding=c.encoding, encoding_file=c.encoding_file,
                    encoding_sha256=c.encoding_sha256, create=False)


def fork_point(origin: EventLog, where: Where) -> ForkPoint:
    if where.tick is not None:
        return at_tick(origin, where.tick)
    assert where.at is not None
    return at_time(origin, utc_ts(parse_operator_time(where.at, origin.clock())), where.at)


def _out_dir(out: Path | None, agent_id: str) -> Path:
    if out is None:
        return Path(tempfile.mkdtemp(prefix=f"fleet-agent-fork-{agent_id}-"))
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"--out {out}: exists and is not an empty directory; name a new one")
    out.mkdir(parents=True, exist_ok=True)
    return out.resolve()


def _empty(dest: Path) -> None:
    for child in dest.iterdir():
        if child.is_dir():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


def tick_times(origin: EventLog, point: ForkPoint, ticks: int, interval: float) -> list[float]:
    """When each fork tick runs: when the origin ran the same tick, else one interval after the last."""
    then = {e.tick: float(e.payload["observation"].get("time") or 0.0)
            for e in origin.read(point.seq, kinds=["tick.started"])
            if e.tick is not None and point.first_tick <= e.tick < point.first_tick + ticks}
    out: list[float] = []
    t = point.time
    for n in range(ticks):
        t = max(then.get(point.first_tick + n, t + (interval if n else 0.0)), t)
        out.append(t)
    return out


def make_fork(settings: Settings, where: Where, change: Change, *, ticks: int, out: Path | None = None,
              seed: int = 0, env: Mapping[str, str] | None = None, provider: ChatProvider | None = None
              ) -> ForkResult:
    """Fork the log of ``settings`` at ``where``, apply ``change`` and run ``ticks`` ticks into a new log.

    The origin is opened read-only; the fork's first events are the origin's 1..seq copied row for row,
    then ``fork.started`` names the origin (fleet, database, seq, hash, head)."""
    if ticks < 1:
        raise UsageError("--ticks must be at least 1")
    origin = open_origin(settings)
    try:
        point = fork_point(origin, where)
        prompts, policy = in_force_at(origin, point.seq, settings)
        tmpl = (policy or {}).get("fleet_template") or {}
        sim, clock, seeded = seeded_simulator(origin, point.seq, point.observation, seed=seed, time=point.time,
                                              api_key=SIM_KEY, disk_gb=tmpl.get("disk_gb", settings.fleet.disk_gb))
        dest = _out_dir(out, settings.agent_id)
        server = SimServer(sim).start()
        try:
            replay = Replay(origin, point.seq, server, clock, seed=seed, api_key=SIM_KEY,
                            disk_gb=tmpl.get("disk_gb", settings.fleet.disk_gb))
            return _run(settings, origin, point, seeded, dest, server, clock,
                        _Spec(change, ticks, prompts, policy, env, provider, replay))
        except UsageError:
            _empty(dest)  # a change that does not hold leaves nothing behind
            if out is None:
                dest.rmdir()
            raise
        finally:
            server.stop()
    finally:
        origin.close()


@dataclass(frozen=True)
class _Spec:
    change: Change
    ticks: int
    prompts: Prompts
    policy: dict[str, Any] | None
    env: Mapping[str, str] | None
    provider: ChatProvider | None
    replay: Replay


def _run(settings: Settings, origin: EventLog, point: ForkPoint, seeded: Seeded, dest: Path, server: SimServer,
         clock: ManualClock, spec: _Spec) -> ForkResult:
    from agent.runtime.tick import run_tick

    fs = write_config(settings, dest, server.url, prompts=spec.prompts, policy=spec.policy, change=spec.change)
    app = App(fs, env=spec.env, clock=clock, provider=spec.provider)
    app.replay = spec.replay  # type: ignore[attr-defined]  # read by the tick (agent/runtime/tick.py)
    try:
        app.init_database()
        app.log.adopt(origin.read(0, until_seq=point.seq))
        head_seq, head_hash = origin.head()
        model = "rules" if fs.model.provider == "rules" else f"{fs.model.name} at {fs.model.base_url}"
        app.log.append("fork.started", {
            "origin_fleet": settings.agent_id, "origin_db": settings.log_location, "origin_seq": point.seq,
            "origin_hash": point.hash, "origin_head_seq": head_seq, "origin_head_hash": head_hash,
            "at": point.label, "changes": spec.change.describe(), "model": model, "ticks": spec.ticks,
            "seeded": seeded.to_dict()}, "operator")
        result = ForkResult(dest, dest / "config.yaml", point, seeded)
        for t in tick_times(origin, point, spec.ticks, float(fs.schedule.interval)):
            if t > clock():
                clock.advance(t - clock())
            server.sim.tick()
            result.ticks.append(run_tick(app))
        result.replayed, result.live_why = list(spec.replay.replayed), spec.replay.why
        return result
    finally:
        app.close()
