"""The simulator's own endpoints under `/_sim/`, for tests and operators; no vast auth.

    GET  /_sim/state        everything, as of now (Simulator.state)
    GET  /_sim/requests     the logged /api/ requests, credentials redacted (?since=N)
    POST /_sim/advance      {"seconds": s}: move a ManualClock and the simulation (409 otherwise); each
                            call counts as one tick in the accounting's unmet_job_ticks
    POST /_sim/plant_logs   {"instance_id", "text"}: what the instance's logs will say
    POST /_sim/outbid       {"instance_id"}: a bid instance loses its GPU to a rival bid held until the
                            market hour ends (then it starts again by itself), or until a higher bid;
                            an on-demand instance is never outbid (400)
    POST /_sim/stop         {"instance_id"} or {"instance_ids": [...]}, "status_msg"?: each stops without
                            its owner asking, as when its host's side stops the container (stopped, intended
                            status still running, storage billed, no outbid message); it stays stopped
    POST /_sim/price_increase {"instance_id", "multiplier", "in_s"?}: its host asks multiplier x the GPU price
                            from in_s seconds on (default 3600): a pending price increase
    POST /_sim/maintenance  {"machine_id" or "instance_id", "in_s"?, "duration_hours"?, "category"?}: the
                            machine's host announces a maintenance window from in_s seconds on (default 6 h),
                            duration_hours long (default 2); listed by GET /api/v0/machines/maintenances
    POST /_sim/bid_market   {"moving": false}: every offer's min_bid stays at its quiet level (true: it follows
                            the seeded bid market, the default)
    GET/POST /_sim/traffic  {"scale": x}: instances rented from now on move x times the GB an hour the
                            simulator draws for each (the workload's data volume; default 1: 0.2-3 up,
                            0.5-6 down), billed at their host's $/GB; GET shows it
    GET/POST /_sim/faults   read or set the fault knobs (agent/sim/faults.py)
    GET/POST /_sim/realism  read or set rate limits, listing lag, log delay (agent/sim/realism.py)
    POST /_sim/set_status   {"instance_id", "status", "status_msg"?}: what vast.ai reports for it
    POST /_sim/demand       {"pending": n}: jobs waiting in the queue now
    POST /_sim/arrivals     how jobs arrive from now on: {"shape": "constant", "rate": jobs/h},
                            {"shape": "ramp", "points": [[s, jobs/h], ...]} (s after now),
                            {"shape": "day", "rate", "amplitude"?, "period_s"?, "bursts"?: [{"at_s", "for_s", "x"}]},
                            {"shape": "seeded"} (the default); GET shows the shape and the rate now
    POST /_sim/prices       {"offer_id" | "gpu_name", "multiplier" | "dph"}: dph in $/h per GPU;
                            multiplier x the list price (1 restores it); rented instances keep theirs
    POST /_sim/credit       {"balance": $} sets it, {"top_up": $} adds to it
    POST /_sim/host         {"host_id", "online": false}: its instances go offline, its offers leave;
                            {"online": true}: its offers return, its offline instances restart
    POST /_sim/offers       {"withdraw": [ids] | "all"}, {"keep": n} (withdraw all but the n cheapest per GPU
                            model), {"restore": [ids] | "all"}, {"add": [{"gpu_name", "dph"?, "host_id"?,
                            "num_gpus"?}]}
    POST /_sim/flap         {"instance_id", "down_s", "every_s", "phase_s"?}: down (no jobs done) down_s of
                            every every_s seconds; {"instance_id", "stop": true} ends it
    GET  /_sim/accounting   ground truth: jobs arrived and served, job-hours waited, unmet job-ticks,
                            the running fleet's jobs/h, spend billed, balance,
                            and per instance its GPU, host, status, jobs/h, jobs done and cost (and of it
                            the bandwidth billed)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from agent.sim import instances
from agent.sim.clock import ManualClock
from agent.sim.demand import Flap, parse_shape
from agent.sim.market import MODEL_BY_NAME
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
    with sim._lock:
        now = sim.advance(seconds)
        # A driver advancing once a tick scores the tick: the jobs still waiting beyond what the
        # running fleet finishes in a tick as long are jobs whose demand that tick did not meet.
        sim.queue.unmet_job_ticks += max(0.0, sim.queue.pending - _capacity(sim) * seconds / 3600.0)
    return json_reply(200, {"now": now})


def _capacity(sim: Simulator) -> float:
    """Jobs/h the running instances finish, a flapping one for the share of the time it is up."""
    total = 0.0
    for iid, inst in sim.instances.items():
        if inst["actual_status"] == "running":
            flap = sim.flaps.get(iid)
            total += instances.jobs_per_h(inst) * (flap.up_fraction() if flap else 1.0)
    return total


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
    except ValueError as e:
        raise ApiError(400, "invalid_args", str(e)) from e
    return json_reply(200, {"success": True})


def _admin_stop(sim: Simulator, query: dict[str, Any], body: dict[str, Any]) -> Reply:
    ids = body.get("instance_ids", [body.get("instance_id")] if "instance_id" in body else None)
    if not isinstance(ids, list) or not ids:
        raise ApiError(400, "invalid_args", "stop: give instance_id or instance_ids (a non-empty list)")
    msg = body.get("status_msg")
    if msg is not None and not isinstance(msg, str):
        raise ApiError(400, "invalid_args", "stop: status_msg must be a string")
    wanted = [as_id(i) for i in ids]
    with sim._lock:  # every one checked before any stops: a bad body changes nothing
        for iid in wanted:
            inst = sim.instances.get(iid)
            if inst is None:
                raise ApiError(404, "no_such_instance", f"no instance {iid}")
            if inst["actual_status"] in ("exited", "offline"):
                raise ApiError(400, "invalid_args", f"instance {iid} is {inst['actual_status']}: not running to stop")
        for iid in wanted:
            sim.host_stop(iid, msg)
    return json_reply(200, {"success": True, "stopped": wanted})


def _admin_price_increase(sim: Simulator, query: dict[str, Any], body: dict[str, Any]) -> Reply:
    try:
        multiplier, in_s = float(body.get("multiplier", 0)), float(body.get("in_s", 3600.0))
    except (TypeError, ValueError) as e:
        raise ApiError(400, "invalid_args", "multiplier and in_s must be numbers") from e
    try:
        row = sim.raise_price(as_id(body.get("instance_id")), multiplier, in_s)
    except LookupError as e:
        raise ApiError(404, "no_such_instance", str(e)) from e
    except ValueError as e:
        raise ApiError(400, "invalid_args", str(e)) from e
    return json_reply(200, {"success": True, "pending_price_increase": row})


def _admin_maintenance(sim: Simulator, query: dict[str, Any], body: dict[str, Any]) -> Reply:
    try:
        in_s, hours = float(body.get("in_s", 6 * 3600.0)), float(body.get("duration_hours", 2.0))
    except (TypeError, ValueError) as e:
        raise ApiError(400, "invalid_args", "in_s and duration_hours must be numbers") from e
    category = str(body.get("category") or "other")
    with sim._lock:
        now = sim.tick()
        if body.get("instance_id") is not None:
            inst = sim.instances.get(as_id(body.get("instance_id")))
            if inst is None:
                raise ApiError(404, "no_such_instance", f"no instance {body.get('instance_id')}")
            machine = int(inst["machine_id"])
        elif body.get("machine_id") is not None:
            machine = as_id(body.get("machine_id"))
        else:
            raise ApiError(400, "invalid_args", "give machine_id or instance_id")
        try:
            row = sim.schedule_maintenance(machine, now + in_s, hours, category)
        except ValueError as e:
            raise ApiError(400, "invalid_args", str(e)) from e
    return json_reply(200, {"success": True, "maintenance": row})


def _admin_bid_market(sim: Simulator, query: dict[str, Any], body: dict[str, Any]) -> Reply:
    if not isinstance(body.get("moving"), bool):
        raise ApiError(400, "invalid_args", "need {\"moving\": true|false}")
    with sim._lock:
        sim.tick()
        sim.market.bid_market = body["moving"]
    return json_reply(200, {"moving": sim.market.bid_market})


def _admin_traffic(sim: Simulator, query: dict[str, Any], body: dict[str, Any]) -> Reply:
    with sim._lock:
        if body:
            scale = body.get("scale")
            if isinstance(scale, bool) or not isinstance(scale, int | float) or not 0 <= scale <= 1000:
                raise ApiError(400, "invalid_args", "need {\"scale\": x}, a number from 0 to 1000")
            sim.traffic_scale = float(scale)
        return json_reply(200, {"scale": sim.traffic_scale})


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


def _number(body: dict[str, Any], key: str, *, low: float | None = 0.0) -> float:
    v = body.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float) or (low is not None and v < low):
        where = f" >= {low:g}" if low is not None else ""
        raise ApiError(400, "invalid_args", f"{key} must be a number{where}, not {v!r}")
    return float(v)


def _arrivals(sim: Simulator) -> dict[str, Any]:
    now = sim.now()
    shape = sim.shape.public() if sim.shape is not None else {"shape": "seeded"}
    return {**shape, "rate_now": round(sim.arrival_rate(now), 3), "now": now}


def _admin_get_arrivals(sim: Simulator, query: dict[str, Any], body: dict[str, Any]) -> Reply:
    with sim._lock:
        sim.tick()
        return json_reply(200, _arrivals(sim))


def _admin_set_arrivals(sim: Simulator, query: dict[str, Any], body: dict[str, Any]) -> Reply:
    with sim._lock:
        now = sim.tick()
        try:
            sim.shape = parse_shape(body, now)
        except ValueError as e:
            raise ApiError(400, "invalid_args", f"arrivals: {e}") from e
        return json_reply(200, _arrivals(sim))


def _admin_prices(sim: Simulator, query: dict[str, Any], body: dict[str, Any]) -> Reply:
    if ("offer_id" in body) == ("gpu_name" in body):
        raise ApiError(400, "invalid_args", "prices: give exactly one of offer_id and gpu_name")
    if ("dph" in body) == ("multiplier" in body):
        raise ApiError(400, "invalid_args", "prices: give exactly one of dph ($/h per GPU) and multiplier")
    dph = _number(body, "dph") if "dph" in body else None
    mult = _number(body, "multiplier") if "multiplier" in body else None
    with sim._lock:
        sim.tick()
        try:
            ids = sim.market.set_price(dph, mult, offer_id=as_id(body["offer_id"]) if "offer_id" in body else None,
                                       gpu_name=body.get("gpu_name"))
        except LookupError as e:
            raise ApiError(404, "no_such_offer", str(e)) from e
        return json_reply(200, {"offers": [{"id": i, "gpu_name": sim.offers[i]["gpu_name"],
                                            "dph_total": sim.offers[i]["dph_total"]} for i in ids]})


def _admin_credit(sim: Simulator, query: dict[str, Any], body: dict[str, Any]) -> Reply:
    if ("balance" in body) == ("top_up" in body):
        raise ApiError(400, "invalid_args", "credit: give exactly one of balance and top_up")
    with sim._lock:
        sim.tick()
        amount = _number(body, "balance", low=None) if "balance" in body else sim.balance + _number(body, "top_up")
        sim.set_credit(amount)  # at $0 or less every instance stops, as vast.ai stops them
        return json_reply(200, {"balance": round(sim.balance, 6)})


def _admin_host(sim: Simulator, query: dict[str, Any], body: dict[str, Any]) -> Reply:
    host = as_id(body.get("host_id"))
    if not isinstance(body.get("online"), bool):
        raise ApiError(400, "invalid_args", "host: online must be true or false")
    with sim._lock:
        now = sim.tick()
        if not any(o["host_id"] == host for o in sim.offers.values()):
            raise ApiError(404, "no_such_host", f"host {host} has no offers in this market")
        mine = [i for i in sim._sorted_instances() if i["host_id"] == host]
        if body["online"]:
            sim.market.offline_hosts.discard(host)
            for inst in mine:
                if inst["actual_status"] == "offline":
                    instances.restart(sim.seed, inst, now, "host back online: starting container")
        else:
            sim.market.offline_hosts.add(host)
            for inst in mine:
                instances.force_status(inst, "offline", "host machine is offline: no heartbeat", now)
        return json_reply(200, {"host_id": host, "online": body["online"], "instances": [i["id"] for i in mine]})


def _admin_offers(sim: Simulator, query: dict[str, Any], body: dict[str, Any]) -> Reply:
    m = sim.market
    with sim._lock:
        sim.tick()
        # Everything is checked before anything changes: a bad body leaves the market as it was.
        sets: dict[str, set[int]] = {}
        for key in ("withdraw", "restore"):
            ids = body.get(key)
            if ids is None:
                continue
            chosen = set(sim.offers) if ids == "all" else {as_id(i) for i in ids} if isinstance(ids, list) else None
            if chosen is None or not chosen <= set(sim.offers):
                raise ApiError(400, "invalid_args", f"offers: {key} takes \"all\" or a list of known offer ids")
            sets[key] = chosen
        keep = int(_number(body, "keep")) if "keep" in body else None
        specs = body.get("add") or []
        if not isinstance(specs, list):
            raise ApiError(400, "invalid_args", "offers: add is a list of {gpu_name, dph?, host_id?, num_gpus?}")
        adds = []
        for spec in specs:
            if not isinstance(spec, dict) or spec.get("gpu_name") not in MODEL_BY_NAME:
                raise ApiError(400, "invalid_args", f"offers: each of add is {{gpu_name, dph?, host_id?, num_gpus?}} "
                               f"with gpu_name one of {', '.join(MODEL_BY_NAME)}; got {spec!r}")
            adds.append((spec["gpu_name"], as_id(spec["host_id"]) if "host_id" in spec else None,
                         int(_number(spec, "num_gpus")) if "num_gpus" in spec else 1,
                         _number(spec, "dph") if "dph" in spec else None))
        m.withdrawn |= sets.get("withdraw", set())
        m.withdrawn -= sets.get("restore", set())
        if keep is not None:
            by_model: dict[str, list[dict[str, Any]]] = {}
            for o in sorted(sim.offers.values(), key=lambda o: (o["dph_total"], o["id"])):
                if m.listed(o):
                    by_model.setdefault(o["gpu_name"], []).append(o)
            for rows in by_model.values():
                m.withdrawn |= {o["id"] for o in rows[keep:]}
        added = [m.add_offer(g, host_id=h, num_gpus=max(1, n), dph=d) for g, h, n, d in adds]
        listed = sum(1 for o in sim.offers.values() if m.listed(o))
        return json_reply(200, {"listed": listed, "withdrawn": sorted(m.withdrawn), "added": added})


def _admin_flap(sim: Simulator, query: dict[str, Any], body: dict[str, Any]) -> Reply:
    iid = as_id(body.get("instance_id"))
    with sim._lock:
        now = sim.tick()
        if iid not in sim.instances:
            raise ApiError(404, "no_such_instance", f"no instance {iid}")
        if body.get("stop"):
            sim.flaps.pop(iid, None)
            return json_reply(200, {"instance_id": iid, "flapping": False})
        down, every = _number(body, "down_s"), _number(body, "every_s")
        phase = _number(body, "phase_s") if "phase_s" in body else 0.0
        if not 0 < down < every:
            raise ApiError(400, "invalid_args", "flap: need 0 < down_s < every_s")
        sim.flaps[iid] = Flap(now, down, every, phase)
        return json_reply(200, {"instance_id": iid, "flapping": True, "down_s": down, "every_s": every,
                                "phase_s": phase})


def _admin_accounting(sim: Simulator, query: dict[str, Any], body: dict[str, Any]) -> Reply:
    with sim._lock:
        now = sim.tick()
        q = sim.queue
        rows = []
        for iid, inst in sorted({**sim.destroyed, **sim.instances}.items()):
            rows.append({
                "id": iid, "gpu_name": inst["gpu_name"], "num_gpus": inst["num_gpus"], "host_id": inst["host_id"],
                "offer_id": inst["_offer_id"], "label": inst["label"],
                "status": "destroyed" if iid in sim.destroyed else inst["actual_status"],
                "rented_at": inst["start_date"], "destroyed_at": inst.get("_destroyed_at"),
                "dph_total": inst["dph_total"], "jobs_per_h": instances.jobs_per_h(inst),
                "jobs_done": round(q.per_instance.get(iid, 0.0), 3), "cost": round(inst["_cost"], 6),
                "traffic_cost": round(inst.get("_traffic_cost", 0.0), 6),
                "inet_up_cost": inst.get("inet_up_cost"), "inet_down_cost": inst.get("inet_down_cost"),
                "flapping": iid in sim.flaps,
            })
        return json_reply(200, {
            "now": now, "jobs_arrived": round(q.arrived, 3), "jobs_served": round(q.completed, 3),
            "pending": round(q.pending, 3), "job_hours_waited": round(q.job_hours_waited, 6),
            "unmet_job_ticks": round(q.unmet_job_ticks, 3), "capacity_jobs_per_h": round(_capacity(sim), 3),
            "arrival_rate_per_h": round(sim.arrival_rate(now), 3),
            "spend": round(float(sum(r["cost"] for r in rows)), 6), "balance": round(sim.balance, 6),
            "instances": rows,
        })


ADMIN: dict[tuple[str, str], AdminHandler] = {
    ("GET", "/_sim/state"): _admin_state,
    ("GET", "/_sim/requests"): _admin_requests,
    ("POST", "/_sim/advance"): _admin_advance,
    ("POST", "/_sim/plant_logs"): _admin_plant_logs,
    ("POST", "/_sim/outbid"): _admin_outbid,
    ("POST", "/_sim/stop"): _admin_stop,
    ("POST", "/_sim/price_increase"): _admin_price_increase,
    ("POST", "/_sim/bid_market"): _admin_bid_market,
    ("GET", "/_sim/traffic"): _admin_traffic,
    ("POST", "/_sim/traffic"): _admin_traffic,
    ("POST", "/_sim/maintenance"): _admin_maintenance,
    ("POST", "/_sim/faults"): _admin_set_faults,
    ("GET", "/_sim/faults"): _admin_faults,
    ("POST", "/_sim/realism"): _admin_set_realism,
    ("GET", "/_sim/realism"): _admin_realism,
    ("POST", "/_sim/set_status"): _admin_set_status,
    ("POST", "/_sim/demand"): _admin_set_demand,
    ("GET", "/_sim/arrivals"): _admin_get_arrivals,
    ("POST", "/_sim/arrivals"): _admin_set_arrivals,
    ("POST", "/_sim/prices"): _admin_prices,
    ("POST", "/_sim/credit"): _admin_credit,
    ("POST", "/_sim/host"): _admin_host,
    ("POST", "/_sim/offers"): _admin_offers,
    ("POST", "/_sim/flap"): _admin_flap,
    ("GET", "/_sim/accounting"): _admin_accounting,
}


def handle(sim: Simulator, method: str, path: str, query: dict[str, Any], body: dict[str, Any]) -> Reply:
    handler = ADMIN.get((method, path))
    if handler is None:
        raise ApiError(404, "not_found", f"no such admin endpoint: {method} {path}")
    return handler(sim, query, body)

