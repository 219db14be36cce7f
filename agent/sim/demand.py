"""The job queue the fleet works on: arrivals over simulated time, completions by running GPUs.

By default arrivals follow a day cycle times a multiplier drawn per two-hour block from the seed
(a burst, a quiet spell or an ordinary block). `POST /_sim/arrivals` replaces that with a
`Shape`: a constant rate, a ramp through points, or a day cycle with bursts at given times.
Completions are shared out between the running instances by their GPU's throughput (jobs/h per
GPU model, agent/sim/market.py). The queue keeps the ground truth a benchmark needs: jobs
arrived and served, job-hours waited (the integral of the backlog over time, which is the sum
of every job's wait), and per instance the jobs it finished. `GET /demand` serves a snapshot.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

DEMAND_STEP_S = 60.0  # the queue moves in steps that end on whole minutes
SHAPES = ("seeded", "constant", "ramp", "day")


def arrival_rate(seed: int, t: float) -> float:
    """Jobs per hour arriving at simulated time t: a day cycle, bursts, quiet spells."""
    block = int(t // 7200)
    r = random.Random(f"{seed}:demand:{block}")
    x = r.random()
    if x < 0.2:
        mult = r.uniform(2.5, 4.0)
    elif x < 0.35:
        mult = 0.15
    else:
        mult = r.uniform(0.8, 1.2)
    day = 1.0 + 0.4 * math.sin(2 * math.pi * (t % 86400) / 86400)
    return 30.0 * day * mult


@dataclass(frozen=True)
class Burst:
    at_s: float  # seconds after the shape was set
    for_s: float
    x: float  # the rate is multiplied by this while the burst lasts


@dataclass(frozen=True)
class Shape:
    """An arrival rate set from outside, as of `since` (simulated time it was set).

    constant  `rate` jobs/h
    ramp      straight lines through `points` [[seconds after since, jobs/h], ...]; flat outside them
    day       `rate` x (1 + amplitude x sin(2 pi t / period_s)), times each burst's x while it lasts
    """

    kind: str
    since: float
    rate: float = 0.0
    points: tuple[tuple[float, float], ...] = ()
    amplitude: float = 0.4
    period_s: float = 86400.0
    bursts: tuple[Burst, ...] = ()

    def at(self, t: float) -> float:
        dt = t - self.since
        if self.kind == "constant":
            return self.rate
        if self.kind == "ramp":
            pts = self.points
            if dt <= pts[0][0]:
                return pts[0][1]
            for (t0, r0), (t1, r1) in zip(pts, pts[1:], strict=False):
                if dt <= t1:
                    return r0 + (r1 - r0) * (dt - t0) / (t1 - t0) if t1 > t0 else r1
            return pts[-1][1]
        rate = self.rate * (1.0 + self.amplitude * math.sin(2 * math.pi * dt / self.period_s))
        for b in self.bursts:
            if b.at_s <= dt < b.at_s + b.for_s:
                rate *= b.x
        return max(0.0, rate)

    def public(self) -> dict[str, Any]:
        out: dict[str, Any] = {"shape": self.kind, "since": self.since}
        if self.kind in ("constant", "day"):
            out["rate"] = self.rate
        if self.kind == "ramp":
            out["points"] = [list(p) for p in self.points]
        if self.kind == "day":
            out.update(amplitude=self.amplitude, period_s=self.period_s,
                       bursts=[{"at_s": b.at_s, "for_s": b.for_s, "x": b.x} for b in self.bursts])
        return out


def _num(body: dict[str, Any], key: str, default: float | None = None, *, low: float = 0.0) -> float:
    v = body.get(key, default)
    if v is None:
        raise ValueError(f"{key} is required")
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < low:
        raise ValueError(f"{key} must be a number >= {low:g}, not {v!r}")
    return float(v)


def parse_shape(body: dict[str, Any], now: float) -> Shape | None:
    """The Shape a `POST /_sim/arrivals` body asks for (None: back to the seeded default); ValueError
    naming the bad field otherwise."""
    kind = body.get("shape", "constant")
    if kind not in SHAPES:
        raise ValueError(f"shape must be one of {', '.join(SHAPES)}, not {kind!r}")
    if kind == "seeded":
        return None
    if kind == "constant":
        return Shape("constant", now, rate=_num(body, "rate"))
    if kind == "ramp":
        raw = body.get("points")
        if not isinstance(raw, list) or not raw:
            raise ValueError("points must be a non-empty list of [seconds after now, jobs/h]")
        pts = []
        for p in raw:
            if not (isinstance(p, list | tuple) and len(p) == 2):
                raise ValueError(f"each point is [seconds, jobs/h], not {p!r}")
            pts.append((_num({"t": p[0]}, "t"), _num({"rate": p[1]}, "rate")))
        if any(b[0] < a[0] for a, b in zip(pts, pts[1:], strict=False)):
            raise ValueError("points must be in time order")
        return Shape("ramp", now, points=tuple(pts))
    bursts = []
    for b in body.get("bursts") or []:
        if not isinstance(b, dict):
            raise ValueError(f"each burst is {{at_s, for_s, x}}, not {b!r}")
        bursts.append(Burst(_num(b, "at_s"), _num(b, "for_s"), _num(b, "x")))
    return Shape("day", now, rate=_num(body, "rate"), amplitude=_num(body, "amplitude", 0.4),
                 period_s=_num(body, "period_s", 86400.0, low=60.0), bursts=tuple(bursts))


def step_end(t: float, now: float) -> float:
    """The end of the step that starts at t: the next whole minute, or now if sooner."""
    return min(now, (math.floor(t / DEMAND_STEP_S) + 1) * DEMAND_STEP_S)


@dataclass
class JobQueue:
    pending: float = 120.0
    completed: float = 0.0
    arrived: float = 0.0  # since the simulator started (the starting backlog not counted)
    job_hours_waited: float = 0.0
    unmet_job_ticks: float = 0.0  # summed per /_sim/advance: jobs left beyond what the fleet did in it
    per_instance: dict[int, float] = field(default_factory=dict)  # instance id -> jobs it finished

    def step(self, arrived: float, capacity: float, dt: float = 0.0) -> float:
        """Add `arrived` jobs, finish up to `capacity` of the pending ones over `dt` seconds; return how
        many finished. Jobs left waiting at the step's end waited all of it (those served in it: none)."""
        self.pending += arrived
        self.arrived += arrived
        done = min(self.pending, capacity)
        self.pending -= done
        self.completed += done
        self.job_hours_waited += self.pending * dt / 3600.0
        return done

    def credit(self, iid: int, jobs: float) -> None:
        self.per_instance[iid] = self.per_instance.get(iid, 0.0) + jobs

    def snapshot(self, now: float, running_gpus: int, rate: float) -> dict[str, Any]:
        pending = int(self.pending)
        return {
            "pending": pending, "running": min(pending, running_gpus), "completed": int(self.completed),
            "arrival_rate_per_h": round(rate, 3), "time": now,
            "workers": {str(i): {"completed": int(n)} for i, n in sorted(self.per_instance.items())},
        }


@dataclass(frozen=True)
class Flap:
    """An instance down `down_s` seconds of every `every_s`, from `phase_s` into each period (periods
    counted from `since`): it finishes no jobs then, though it bills and vast.ai lists it running if
    asked outside the down spell, as a container that crashes and restarts between two looks would."""

    since: float
    down_s: float
    every_s: float
    phase_s: float = 0.0

    def down(self, t: float) -> bool:
        into = (t - self.since - self.phase_s) % self.every_s
        return t >= self.since + self.phase_s and into < self.down_s

    def up_since(self, t: float) -> float | None:
        """When the current up spell began (None while down or before the first spell)."""
        if self.down(t) or t < self.since + self.phase_s:
            return None
        start = self.since + self.phase_s
        return start + ((t - start) // self.every_s) * self.every_s + self.down_s

    def up_fraction(self) -> float:
        return max(0.0, 1.0 - self.down_s / self.every_s)
