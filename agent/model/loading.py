"""How long this fleet's rents take to start, and when one still loading is slow.

vast.ai schedules a rent on its machine, pulls the image and starts the container (``loading``): minutes for a
small image, twenty or more for a large one on a slow host, and for good on a host that cannot start it. An
instance still loading counts as capacity (it was rented to run), but one that has not started well past the
time this fleet's own rents took is likely on such a host: it stops counting, so cover is rented for it while
``alerts.stuck_after`` still decides its fate (it counts again if it runs after all, and the surplus rule trims
the fleet). The limit is learned, never assumed: ``LOADING_MARGIN`` × the longest start (rent to running) among
the fleet's instances in the recent observations, no less than ``LOADING_FLOOR``; with fewer than
``LOADING_SAMPLES`` starts seen there is no limit (only ``stuck_after``), so a fleet whose image takes 20
minutes to load never rents cover for a normal start. Starts are timed from the rent (its ``rent_instance``
tool result) to the start vast.ai reports (the observation's time less ``up_s``), both exact, not from when a
tick first saw the instance (up to an interval late); an instance this agent did not rent in the window has no
start time and is never slow. The fleet rents one image (``fleet.image``): its recent starts are that image's.

The rules provider (agent/model/rules.py) and the observation's ``need`` (agent/fleet/throughput.py) both size
the fleet with it, over the same observations.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agent.times import parse_ts

LOAD_WINDOW = 48
"""Observations (4 h at the default 5-minute interval) whose starts the limit is learned from."""
LOADING_MARGIN = 1.25
"""An instance loading this many times longer after its rent than the fleet's longest recent start is slow."""
LOADING_FLOOR = 660.0
"""s: no instance is slow sooner after its rent, however quickly the fleet's others started (vast.ai: a rent
waits 0.5-4 min to be scheduled, then loads 2.5-7 min)."""
LOADING_SAMPLES = 2
"""Starts seen before the limit applies: fewer, and only ``alerts.stuck_after`` decides."""


def rent_times(log: Any, ids: Iterable[int], since: float) -> dict[int, float]:
    """Instance id -> when this agent rented it (epoch seconds of its ``rent_instance`` tool result), for those of
    ``ids`` rented at ``since`` or later. Read by key from the ownership read model (two lookups an instance),
    not from the log's recent events, which hold every search result too; an adopted instance has no rent."""
    out: dict[int, float] = {}
    for iid in sorted(set(ids)):
        inst = log.store.instance(iid)
        e = log.get(inst.rented_seq) if inst is not None else None
        if e is not None and e.kind == "tool.result" and (t := parse_ts(e.ts).timestamp()) >= since:
            out[iid] = t
    return out


def start_times(observations: Iterable[Mapping[str, Any]], rented: Mapping[int, float]) -> list[float]:
    """Seconds each instance of ours rented at ``rented`` took from the rent to running (the observation's time
    less the uptime vast.ai reports, ``up_s``), over ``observations``, oldest first; its first start only."""
    done: set[int] = set()
    out: list[float] = []
    for obs in observations:
        t = obs.get("time")
        if not isinstance(t, int | float):
            continue
        for i in obs.get("instances") or []:
            iid = i.get("id") if isinstance(i, Mapping) and i.get("ours") and i.get("status") == "running" else None
            if not isinstance(iid, int) or iid not in rented or iid in done:
                continue
            up = i.get("up_s")
            up = float(up) if isinstance(up, int | float) and not isinstance(up, bool) and up >= 0 else 0.0
            out.append(max(0.0, float(t) - up - rented[iid]))
            done.add(iid)
    return out


def loading_limit(observations: Iterable[Mapping[str, Any]], rented: Mapping[int, float]) -> float | None:
    """Seconds after its rent past which an instance of ours still loading is slow (``LOADING_MARGIN`` × the
    longest start in ``observations``, at least ``LOADING_FLOOR``); None while fewer than ``LOADING_SAMPLES``
    starts were seen."""
    times = start_times(observations, rented)
    if len(times) < LOADING_SAMPLES:
        return None
    return max(LOADING_FLOOR, LOADING_MARGIN * max(times))


def slow_loading(i: Mapping[str, Any], now: float, limit: float | None, rented: Mapping[int, float]) -> bool:
    """``i`` is loading ``limit`` seconds (``loading_limit``) or longer after its rent: not counted as capacity
    until it runs."""
    iid = i.get("id")
    return (limit is not None and i.get("status") == "loading" and isinstance(iid, int) and iid in rented
            and now - rented[iid] > limit)


def of_log(log: Any, observations: Sequence[Mapping[str, Any]]) -> tuple[float | None, dict[int, float]]:
    """The limit and the rent times for ``observations`` (the last ``LOAD_WINDOW`` of them, oldest first, the
    current one last) from ``log``'s rents since the first of them."""
    window = observations[-LOAD_WINDOW:]
    times = [float(o["time"]) for o in window if isinstance(o.get("time"), int | float)]
    if not times:
        return None, {}
    ours = {i["id"] for o in window for i in o.get("instances") or []
            if isinstance(i, Mapping) and i.get("ours") and isinstance(i.get("id"), int)}
    rented = rent_times(log, ours, min(times))
    return loading_limit(window, rented), rented
