"""An instance of ours that fails between ticks: ``instance:underperforming:<id>``.

A tick sees one instant; an instance down three minutes in every five can look running at every tick.
What the last ``WINDOW`` observations say about each instance of ours still listed:

    flapping     its status left running and came back (or the reverse) twice or more
    restarts     its uptime (``uptime_s`` / ``uptime_mins``, when the observation has it) went back while it
                 showed running: restarted between ticks, twice or more; or its ``restarts`` count rose by 2+
    idle GPU     ``gpu_util`` (when present) under IDLE_UTIL % at every tick while jobs were waiting
    few jobs     ``jobs_done`` (when present) rose by under PEER_SHARE of what its peers' median pace says its
                 GPUs do (pace: jobs per job-capacity, the observation's ``gpu_models`` jobs/h per GPU times the
                 GPUs; a 1-GPU RTX 3090 is not measured against a 4-GPU box or an H100), that pace expecting at
                 least MIN_EXPECTED jobs of it (one job more or less of a slow instance is chance, not failure)

A field an observation lacks is skipped, never guessed. The alert resolves when no sign holds or the
instance is gone. ``dead:`` and ``stuck:`` (agent.feedback.conditions) cover an instance that stays down, so
one the newest observation shows down (stopped, exited, offline, unknown) is left to them (or to ``outbid:``,
``credit:stopped``): started and then stopped is not flapping, and one event opens one alert.
"""

from __future__ import annotations

import statistics
from typing import Any

from agent.feedback.alerts import raise_alert, resolve_absent
from agent.feedback.conditions import DEAD_STATUSES
from agent.store.log import EventLog

KEY_UNDER = "instance:underperforming:"
WINDOW = 3           # observations read, the newest included
IDLE_UTIL = 10.0     # % GPU utilisation under which a running instance does no work
PEER_SHARE = 0.25    # jobs done under this share of what the peers' median pace expects of it is failing
MIN_PEERS = 2
MIN_EXPECTED = 2.0   # jobs the peers' pace must expect of it in the window before few jobs is a sign


def _uptime_s(i: dict[str, Any]) -> float | None:
    v = i.get("up_s", i.get("uptime_s"))  # tick.started v6 names it up_s
    if isinstance(v, int | float):
        return float(v)
    v = i.get("uptime_mins")
    return float(v) * 60.0 if isinstance(v, int | float) else None


def _jobs(i: dict[str, Any]) -> float | None:
    """Jobs the instance finished since rent (``jobs`` in tick.started v6)."""
    return _num(i, "jobs") if "jobs" in i else _num(i, "jobs_done")


def _num(i: dict[str, Any], key: str) -> float | None:
    v = i.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _history(observations: list[dict[str, Any]], iid: Any) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(observation, the instance in it), oldest first, for every observation that lists ``iid``."""
    out = []
    for obs in observations:
        for i in obs.get("instances") or []:
            if i.get("id") == iid:
                out.append((obs, i))
                break
    return out


def _pending(obs: dict[str, Any]) -> int:
    return int((obs.get("demand") or {}).get("pending") or 0)


def signs(observations: list[dict[str, Any]], iid: Any) -> list[str]:
    """What says instance ``iid`` is failing between ticks, in ``observations`` (oldest first)."""
    h = _history(observations, iid)
    if len(h) < WINDOW:  # a sign needs the whole window: one odd reading is not a failing instance
        return []
    out = []
    statuses = [i.get("status") for _, i in h]
    flips = sum(1 for a, b in zip(statuses, statuses[1:], strict=False) if (a == "running") != (b == "running"))
    if flips >= 2:
        out.append(f"flapping: status went {' -> '.join(str(s) for s in statuses)} in {len(h)} ticks")
    restarts = 0
    for (o1, a), (o2, b) in zip(h, h[1:], strict=False):
        u1, u2 = _uptime_s(a), _uptime_s(b)
        gap = float(o2.get("time") or 0) - float(o1.get("time") or 0)
        up = a.get("status") == "running" and b.get("status") == "running"
        if up and u2 is not None and ((u1 is not None and u2 < u1) or (gap > 0 and u2 < gap)):
            restarts += 1
    r0, r1 = _num(h[0][1], "restarts"), _num(h[-1][1], "restarts")
    if r0 is not None and r1 is not None:
        restarts = max(restarts, int(r1 - r0))
    if restarts >= 2:
        out.append(f"restarts: restarted {restarts} times between the last {len(h)} ticks (uptime went back)")
    utils = [(_num(i, "gpu_util"), _pending(o)) for o, i in h if i.get("status") == "running"]
    if len(utils) == len(h) and all(u is not None and u < IDLE_UTIL and p > 0 for u, p in utils):
        out.append(f"idle GPU: at {max(u or 0.0 for u, _ in utils):.0f}% or less for {len(h)} ticks while jobs waited")
    return out


def _capacities(observation: dict[str, Any], insts: dict[Any, dict[str, Any]]) -> dict[Any, float]:
    """Each instance's job-capacity: its GPUs times its model's jobs/h per GPU in the observation's ``gpu_models``;
    its GPUs alone when a model has no figure there (then for every instance, so all are measured alike)."""
    models = observation.get("gpu_models") or {}
    rates = {iid: _num(models.get(str(i.get("gpu_name"))) or {}, "jobs_per_h") for iid, i in insts.items()}
    known = all(r is not None and r > 0 for r in rates.values())
    out = {}
    for iid, i in insts.items():
        gpus = _num(i, "num_gpus") or 1.0
        out[iid] = gpus * ((rates[iid] or 1.0) if known else 1.0)
    return out


def _jobs_signs(observations: list[dict[str, Any]], ids: list[Any]) -> dict[Any, str]:
    """Instances whose ``jobs_done`` rose by far less over the window than their peers' pace expects of them."""
    done: dict[Any, float] = {}
    newest: dict[Any, dict[str, Any]] = {}
    for iid in ids:
        h = _history(observations, iid)
        if len(h) < WINDOW or any(i.get("status") != "running" for _, i in h[1:]):
            continue
        j0, j1 = _jobs(h[0][1]), _jobs(h[-1][1])
        if j0 is not None and j1 is not None:
            done[iid], newest[iid] = j1 - j0, h[-1][1]
    cap = _capacities(observations[-1], newest)
    pace = {iid: n / cap[iid] for iid, n in done.items()}
    out = {}
    for iid, n in done.items():
        peers = [v for k, v in pace.items() if k != iid]
        if len(peers) < MIN_PEERS:
            continue
        expected = statistics.median(peers) * cap[iid]
        if expected >= MIN_EXPECTED and n < PEER_SHARE * expected:
            out[iid] = (f"few jobs: did {n:.0f} jobs in the last {WINDOW} ticks; at its peers' pace its GPUs "
                        f"would have done {expected:.0f}")
    return out


def check_underperforming(log: EventLog, settings: Any, tick: int | None) -> dict[Any, list[str]]:
    """Raise (or repeat) ``instance:underperforming:<id>`` for each instance of ours failing between ticks
    in the last WINDOW observations; resolve the others. Returns id -> the signs found."""
    observations = [e.payload.get("observation") or {} for e in
                    log.read(0, kinds=["tick.started"], newest_first=True, limit=WINDOW)][::-1]
    if not observations:
        return {}
    newest = observations[-1]
    ours = [i for i in newest.get("instances") or [] if i.get("ours") and i.get("status") not in DEAD_STATUSES]
    found: dict[Any, list[str]] = {}
    jobs = _jobs_signs(observations, [i.get("id") for i in ours])
    for i in ours:
        iid = i.get("id")
        s = signs(observations, iid) + ([jobs[iid]] if iid in jobs else [])
        if s:
            found[iid] = s
    for iid, s in found.items():
        inst = next(i for i in ours if i.get("id") == iid)
        raise_alert(log, key=f"{KEY_UNDER}{iid}", severity="warning",
                    title=f"instance #{iid} is failing between ticks ({', '.join(x.split(':')[0] for x in s)})",
                    detail=f"{inst.get('gpu_name', '?')} on host {inst.get('host_id', '?')}, "
                           f"${float(inst.get('dph') or 0):.2f}/h; " + "; ".join(s),
                    tick=tick, settings=settings)
    resolve_absent(log, KEY_UNDER, {f"{KEY_UNDER}{iid}" for iid in found}, tick,
                   "the instance works again or is gone")
    return found
