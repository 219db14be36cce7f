"""The market's scenarios for the outcome benchmark (bench/outcomes.py), kept apart from its core.

    maint   hosts announce maintenance on the machines of two of the fleet's running instances, 90 min ahead
            and 2 h long (POST /_sim/maintenance, listed by GET /api/v0/machines/maintenances); at the start the
            machines go down and their instances go offline. An arm that reads the windows replaces and drains
            them before; one that does not loses them, and the jobs in hand, when the machines go down.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

MAINT_AHEAD_S = 90 * 60.0
MAINT_HOURS = 2.0
MAINT_EVENT_TICK = 8


def maintenance(r: Any) -> None:
    """Announce a window on the machines of the two running instances that deliver most (ties: the lower id)."""
    running = sorted((i for i in r.live() if i["status"] == "running"), key=lambda i: (-i["jobs_per_h"], i["id"]))
    r.notes["victims"] = [i["id"] for i in running[:2]]
    for iid in r.notes["victims"]:
        r.sim.post("/_sim/maintenance", {"instance_id": iid, "in_s": MAINT_AHEAD_S, "duration_hours": MAINT_HOURS,
                                         "category": "power"})


def scenarios(scenario: Callable[..., Any], constant: Callable[[float], Callable[[Any], None]]) -> dict[str, Any]:
    """name -> Scenario, built with bench/outcomes.py's own ``Scenario`` and ``constant``."""
    out = [scenario("maint", "hosts announce maintenance on two of the fleet's machines, 90 min ahead, 2 h long",
                    constant(30), {MAINT_EVENT_TICK: maintenance}, MAINT_EVENT_TICK, "destroyed")]
    return {s.name: s for s in out}
