"""The simulator's own endpoints under `/_sim/`, for tests and operators; no vast auth.

    GET  /_sim/state        everything, as of now (Simulator.state)
    GET  /_sim/requests     the logged /api/ requests, credentials redacted (?since=N)
    POST /_sim/advance      {"seconds": s}: move a ManualClock and the simulation (409 otherwise)
    POST /_sim/plant_logs   {"instance_id", "text"}: what the instance's logs will say
    POST /_sim/outbid       {"instance_id"}: a bid instance loses its GPU
    GET/POST /_sim/faults   read or set the fault knobs (agent/sim/faults.py)
    GET/POST /_sim/realism  read or set rate limits, listing lag, log delay (agent/sim/realism.py)
    POST /_sim/set_status   {"instance_id", "status", "status_msg"?}: what vast.ai reports for it
    POST /_sim/demand       {"pending": n}: jobs waiting in the queue now
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from agent.sim.clock import ManualClock
from agent.sim.replies import ApiError, Reply, as_id, json_reply

if TYPE_CHECKING:
    from agent.sim.simulator import Simulator

AdminHandler = Callable[["Simulator", dict[str, Any], dict[str, Any]], Reply]


def _admin_state(sim: Simulator, query: dict[str, Any], body: dict[str, Any]) -> Reply:
    return json_reply(200, sim.state())


def _admin_requests(sim: Simulator, query: dict[str, Any], body: dict[str, Any]) -> Reply:
    since = int(query.get("since") or 0)
    with sim._lock:
        return json_reply(200, {"requests": sim.requests[since:]})


def _admin_advance(sim: Simulator, query: dict[str, Any], body: dict[str, Any]) -> Reply:
    if not isinstance(sim.clock, ManualClock):
        raise ApiError(409, "not_manual", "advance needs a simulator started with a ManualClock")
    try:
        seconds = float(body.get("seconds", 0))
    except (TypeError, ValueError) as e:
        raise ApiError(400, "invalid_args", "seconds must be a number") from e
    if seconds < 0:
        raise ApiError(400, "invalid_args", "seconds must be >= 0")
    return json_reply(200, {"now": sim.advance(seconds)})


def _admin_plant_logs(sim: Simulator, query: dict[str, Any], body: dict[str, Any]) -> Reply:
    if "instance_id" not in body or not isinstance(body.get("text"), str):
        raise ApiError(400, "invalid_args", "need instance_id and text")
    sim.plant_logs(as_id(body["instance_id"]), body["text"])
    return json_reply(200, {"success": True})


def _admin_outbid(sim: Simulator, query: dict[str, Any], body: dict[str, Any]) -> Reply:
    try:
        sim.outbid(as_id(body.get("instance_id")))
    except LookupError as e:
        raise ApiError(404, "no_such_instance", str(e)) from e
    return json_reply(200, {"success": True})


def _admin_set_faults(sim: Simulator, query: dict[str, Any], body: dict[str, Any]) -> Reply:
    with sim._lock:
        try:
            sim.faults.update(body)
        except ValueError as e:
            raise ApiError(400, "invalid_args", str(e)) from e
        return json_reply(200, asdict(sim.faults))


def _admin_set_realism(sim: Simulator, query: dict[str, Any], body: dict[str, Any]) -> Reply:
    with sim._lock:
        try:
            sim.realism.update(body)
        except ValueError as e:
            raise ApiError(400, "invalid_args", str(e)) from e
        return json_reply(200, asdict(sim.realism))


def _admin_realism(sim: Simulator, query: dict[str, Any], body: dict[str, Any]) -> Reply:
    return json_reply(200, asdict(sim.realism))


def _admin_set_status(sim: Simulator, query: dict[str, Any], body: dict[str, Any]) -> Reply:
    try:
        sim.set_status(as_id(body.get("instance_id")), str(body.get("status")), body.get("status_msg"))
    except LookupError as e:
        raise ApiError(404, "no_such_instance", str(e)) from e
    except ValueError as e:
        raise ApiError(400, "invalid_args", str(e)) from e
    return json_reply(200, {"success": True})


def _admin_set_demand(sim: Simulator, query: dict[str, Any], body: dict[str, Any]) -> Reply:
    try:
        pending = float(body["pending"])
    except (KeyError, TypeError, ValueError) as e:
        raise ApiError(400, "invalid_args", "need pending, a number of jobs") from e
    with sim._lock:
        sim.tick()
        sim.pending = max(0.0, pending)
    return json_reply(200, sim.demand())


def _admin_faults(sim: Simulator, query: dict[str, Any], body: dict[str, Any]) -> Reply:
    return json_reply(200, asdict(sim.faults))


ADMIN: dict[tuple[str, str], AdminHandler] = {
    ("GET", "/_sim/state"): _admin_state,
    ("GET", "/_sim/requests"): _admin_requests,
    ("POST", "/_sim/advance"): _admin_advance,
    ("POST", "/_sim/plant_logs"): _admin_plant_logs,
    ("POST", "/_sim/outbid"): _admin_outbid,
    ("POST", "/_sim/faults"): _admin_set_faults,
    ("GET", "/_sim/faults"): _admin_faults,
    ("POST", "/_sim/realism"): _admin_set_realism,
    ("GET", "/_sim/realism"): _admin_realism,
    ("POST", "/_sim/set_status"): _admin_set_status,
    ("POST", "/_sim/demand"): _admin_set_demand,
}


def handle(sim: Simulator, method: str, path: str, query: dict[str, Any], body: dict[str, Any]) -> Reply:
    handler = ADMIN.get((method, path))
    if handler is None:
        raise ApiError(404, "not_found", f"no such admin endpoint: {method} {path}")
    return handler(sim, query, body)

