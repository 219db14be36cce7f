"""The job queue the fleet works on: arrivals over simulated time, completions by running GPUs.

Arrivals follow a day cycle times a multiplier drawn per two-hour block from the seed (a
burst, a quiet spell or an ordinary block). Completions are shared out between the running
instances by their throughput; `GET /demand` serves a snapshot, with each live instance's
cumulative completed jobs under `workers` (keyed by instance id), as a job queue that knows
which worker finished a job reports it.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

DEMAND_STEP_S = 60.0  # the queue moves in steps that end on whole minutes


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


def step_end(t: float, now: float) -> float:
    """The end of the step that starts at t: the next whole minute, or now if sooner."""
    return min(now, (math.floor(t / DEMAND_STEP_S) + 1) * DEMAND_STEP_S)


@dataclass
class JobQueue:
    pending: float = 120.0
    completed: float = 0.0

    def step(self, arrived: float, capacity: float) -> float:
        """Add `arrived` jobs, finish up to `capacity` of the pending ones; return how many finished."""
        self.pending += arrived
        done = min(self.pending, capacity)
        self.pending -= done
        self.completed += done
        return done

    def snapshot(self, now: float, running_gpus: int, rate: float,
                 workers: dict[int, float] | None = None) -> dict[str, Any]:
        """The queue as ``GET /demand`` serves it; ``workers`` maps an instance id to the jobs it completed."""
        pending = int(self.pending)
        return {
            "pending": pending, "running": min(pending, running_gpus), "completed": int(self.completed),
            "arrival_rate_per_h": round(rate, 3), "time": now,
            "workers": {str(iid): {"completed": int(n)} for iid, n in sorted((workers or {}).items())},
        }
