"""The HTTP API, independent of any server: a request in, a `Reply` out.

    handle()  parse, log (credentials redacted), route, turn ApiError into its JSON answer
    ROUTES    the vast.ai endpoints (Bearer or `?api_key=` auth, faults apply)

`/_sim/...` goes to agent/sim/admin.py (no auth, never logged, no faults).

`/results/...` (log uploads), `GET /demand` (the job queue) and the GPU name list need no auth.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from agent.sim import admin, faults, instances
from agent.sim.market import GPU_MODELS
from agent.sim.query import matches, page_offset, page_token, sort_rows
from agent.sim.replies import ApiError, Reply, as_id, json_reply

if TYPE_CHECKING:
    from agent.sim.simulator import Simulator

MAX_LOGGED_REQUESTS = 20_000


@dataclass
class Call:
    """One authorised /api/ request, as a route handler sees it."""

    query: dict[str, Any]
    body: dict[str, Any]
    base_url: str
    now: float
    args: tuple[str, ...]  # the path segments the route's "*" matched


Handler = Callable[["Simulator", Call], Reply]


def handle(sim: Simulator, method: str, target: str, headers: dict[str, str], body: bytes,
           base_url: str) -> Reply:
    """Answer one HTTP request. Thread-safe; delays are returned, not slept."""
    parts = urlsplit(target)
    path = parts.path
    query = _parse_query(parts.query)
    parsed_body = _parse_body(body)
    record = None if path.startswith("/_sim/") else _log_request(sim, method, path, query, headers, parsed_body)
    try:
        reply = _route(sim, method, path, query, headers, parsed_body, base_url)
    except ApiError as e:
        reply = json_reply(e.status, {"success": False, "error": e.error, "msg": e.msg})
    if record is not None:
        record["status"] = reply.status
        record["t"] = sim.clock()
    return reply


def _parse_query(raw: str) -> dict[str, Any]:
    """The last value of each parameter, JSON-decoded when it is JSON (vast sends filters that way)."""
    query: dict[str, Any] = {}
    for k, vals in parse_qs(raw, keep_blank_values=True).items():
        v = vals[-1]
        try:
            query[k] = json.loads(v)
        except ValueError:
            query[k] = v
    return query


def _parse_body(body: bytes) -> Any:
    if not body:
        return None
    try:
        return json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace")


def _log_request(sim: Simulator, method: str, path: str, query: dict[str, Any], headers: dict[str, str],
                 body: Any) -> dict[str, Any]:
    via = "bearer" if headers.get("authorization") else ("query" if "api_key" in query else None)
    record = {
        "method": method, "path": path,
        "query": {k: ("<REDACTED>" if k == "api_key" else v) for k, v in query.items()} or None,
        "body": body, "auth": via,
        "headers": {k: ("<REDACTED>" if k == "authorization" else v) for k, v in headers.items()},
        "status": None, "t": None,
    }
    with sim._lock:
        sim.requests.append(record)
        if len(sim.requests) > MAX_LOGGED_REQUESTS:
            del sim.requests[:5_000]
    return record


def _authorized(sim: Simulator, headers: dict[str, str], query: dict[str, Any]) -> bool:
    auth = headers.get("authorization") or ""
    if auth.startswith("Bearer ") and auth[7:].strip() == sim.api_key:
        return True
    return str(query.get("api_key", "")) == sim.api_key and bool(sim.api_key)


def _route(sim: Simulator, method: str, path: str, query: dict[str, Any], headers: dict[str, str],
           body: Any, base_url: str) -> Reply:
    if path.startswith("/_sim/"):
        return admin.handle(sim, method, path, query, body if isinstance(body, dict) else {})
    if path.startswith("/results/") and method == "GET":
        return sim._result(path)
    if path == "/demand" and method == "GET":
        return json_reply(200, sim.demand())
    if path == "/api/v0/gpu_names/unique/" and method == "GET":
        return json_reply(200, {"gpu_names": sorted(m.name for m in GPU_MODELS)})
    if not path.startswith("/api/"):
        raise ApiError(404, "not_found", f"no such endpoint: {method} {path}")
    if not _authorized(sim, headers, query):
        raise ApiError(401, "auth_error", "Invalid user key")
    delay = 0.0
    with sim._lock:
        limited = sim.limiter.check(sim.api_key, method, path, sim.wall(), sim.realism.rate_interval)
        if limited is not None:
            return limited
        plan = faults.scripted(sim.faults, method, path)
        if plan == "fail":
            return faults.lost_answer()
        fault = None if plan else sim._draw_fault(path)
        plan = plan or sim._after_action(method, path)
    if fault is not None:
        if fault.status:
            return fault
        delay = fault.delay
    handler, args = _find_route(method, path)
    call_body = body if isinstance(body, dict) else {}

    def act() -> Reply:
        with sim._lock:
            now = sim.tick()
            return handler(sim, Call(query, call_body, base_url, now, args))

    if plan == "late":  # vast.ai receives it only after late_seconds: the client has given up
        return Reply(0, b"", delay=sim.faults.late_seconds, then=_answered(act))
    reply = act()
    if plan == "drop":
        return faults.lost_answer()
    reply.delay += delay
    return reply


def _answered(act: Callable[[], Reply]) -> Callable[[], Reply]:
    def run() -> Reply:
        try:
            return act()
        except ApiError as e:
            return json_reply(e.status, {"success": False, "error": e.error, "msg": e.msg})
    return run


# --- the vast.ai endpoints ------------------------------------------------------------------


def _list_v1(sim: Simulator, c: Call) -> Reply:
    """GET /api/v1/instances/: filtered, ordered, paginated by token, with label counts."""
    filters = c.query.get("select_filters") or {}
    order_by = c.query.get("order_by") or [{"col": "id", "dir": "asc"}]
    if not isinstance(filters, dict) or not isinstance(order_by, list):
        raise ApiError(400, "invalid_args", "select_filters must be an object, order_by a list")
    try:
        limit = int(c.query.get("limit", 25))
    except (TypeError, ValueError) as e:
        raise ApiError(400, "invalid_args", "limit must be an integer") from e
    limit = max(1, min(limit, 25))
    token = c.query.get("after_token")
    offset = page_offset(str(token)) if token else 0
    rows = [r for r in (sim._public(i) for i in sim._listed_instances(c.now)) if matches(r, filters)]
    rows = sort_rows(rows, [(o.get("col", "id"), o.get("dir", "asc")) for o in order_by if isinstance(o, dict)])
    labels: dict[str, int] = {}
    for r in rows:
        labels[r.get("label") or ""] = labels.get(r.get("label") or "", 0) + 1
    page = rows[offset:offset + limit]
    cols = c.query.get("select_cols")
    if isinstance(cols, list) and cols and cols != ["*"]:
        page = [{col: r.get(col) for col in ["id", *cols]} for r in page]
    more = offset + limit < len(rows)
    return json_reply(200, {"instances": page, "next_token": page_token(offset + limit) if more else None,
                            "total_instances": len(rows), "label_counts": labels})


def _list_v0(sim: Simulator, c: Call) -> Reply:
    return json_reply(200, {"instances": [sim._public(i) for i in sim._listed_instances(c.now)]})


def _filters(sim: Simulator, c: Call) -> Reply:
    return json_reply(200, {"filters": instances.filter_values(list(sim.instances.values()))})


def _user(sim: Simulator, c: Call) -> Reply:
    """`credit` is what the account can spend (prepaid credit less charges); `balance` is the
    invoice balance: the charges of the current day not yet settled against the credit, as a
    negative number. The two differ whenever anything has been billed today."""
    credit = round(sim.balance, 4)
    return json_reply(200, {
        "id": 77_000 + sim.seed % 1000, "username": "sim", "email": "fleet@sim.invalid",
        "fullname": "Simulated Account", "balance": round(-sim.billed_today(c.now), 4), "credit": credit,
        "can_pay": credit > 0,
        "has_billing": True, "billing_creditonly": True, "email_verified": True,
        "host_agreement_accepted": False, "ssh_key": "ssh-ed25519 AAAAsim", "balance_threshold": 0,
        "balance_threshold_enabled": False, "got_signup_credit": True, "user": "sim",
    })


def _machines(sim: Simulator, c: Call) -> Reply:
    return json_reply(200, {"machines": []})


def _maintenances(sim: Simulator, c: Call) -> Reply:
    """GET /machines/maintenances?machine_ids=[...]: the machines' maintenance windows not over yet, a JSON list
    of {machine_id, start_time, end_time, duration_hours, maintenance_category} (the shape the official CLI's
    `show maints` reads)."""
    ids = c.query.get("machine_ids")
    if ids is not None and not (isinstance(ids, list) and all(isinstance(m, int) and not isinstance(m, bool)
                                                              for m in ids)):
        raise ApiError(400, "invalid_args", "machine_ids must be a JSON list of machine ids, e.g. [1234, 5678]")
    return json_reply(200, sim.maintenances_for(ids, c.now))


def _bundles(sim: Simulator, c: Call) -> Reply:
    return json_reply(200, {"offers": sim.market.search(c.body, c.now)})


def _search_asks(sim: Simulator, c: Call) -> Reply:
    return json_reply(200, {"offers": sim.market.search(c.body.get("q") or {}, c.now)})


def _rent(sim: Simulator, c: Call) -> Reply:
    return sim._rent(as_id(c.args[0]), c.body, c.now)


def _destroy_many(sim: Simulator, c: Call) -> Reply:
    ids = c.body.get("instance_ids") or []
    for iid in ids:
        sim._destroy(as_id(iid), c.now)
    return json_reply(200, {"success": True, "msg": f"destroyed {len(ids)} instances"})


def _show(sim: Simulator, c: Call) -> Reply:
    inst = sim.instances.get(as_id(c.args[0]))
    if inst is not None and not sim._is_listed(inst, c.now):
        inst = None
    return json_reply(200, {"instances": sim._public(inst) if inst else None})


def _destroy_one(sim: Simulator, c: Call) -> Reply:
    iid = as_id(c.args[0])
    sim._destroy(iid, c.now)
    return json_reply(200, {"success": True, "msg": f"Instance {iid} destroyed."})


def _modify(sim: Simulator, c: Call) -> Reply:
    inst = sim._get(as_id(c.args[0]))
    if c.body.get("state") == "running" and inst["actual_status"] == "stopped" and sim.balance <= 0:
        # vast.ai starts nothing on an account without credit, as it rents nothing.
        raise ApiError(402, "insufficient_credit", "Your account balance is too low to start the instance.")
    return json_reply(200, instances.modify(sim.seed, inst, c.body, c.now))


def _reboot(sim: Simulator, c: Call) -> Reply:
    inst = sim._get(as_id(c.args[0]))
    return json_reply(200, instances.reboot(sim.seed, inst, c.now))


def _request_logs(sim: Simulator, c: Call) -> Reply:
    return json_reply(200, sim._request_logs(as_id(c.args[0]), c.body, c.base_url, c.now))


def _pending_increases(sim: Simulator, c: Call) -> Reply:
    rows = sim.pending_increases()
    return json_reply(200, {"success": True, "count": len(rows), "truncated": False,
                            "pending_price_increases": rows})


def _accept_increase(sim: Simulator, c: Call) -> Reply:
    return json_reply(200, sim.answer_increase(c.body, accept=True))


def _reject_increase(sim: Simulator, c: Call) -> Reply:
    return json_reply(200, sim.answer_increase(c.body, accept=False))


def _change_bid(sim: Simulator, c: Call) -> Reply:
    return json_reply(200, sim.change_bid(as_id(c.args[0]), c.body, c.now))


# (method, path segments after /api/, handler); "*" matches one segment; the first match wins.
ROUTES: list[tuple[str, tuple[str, ...], Handler]] = [
    ("GET", ("v0", "instances", "pending-price-increases"), _pending_increases),
    ("PUT", ("v0", "instances", "accept-price-increase"), _accept_increase),
    ("PUT", ("v0", "instances", "reject-price-increase"), _reject_increase),
    ("PUT", ("v0", "instances", "bid_price", "*"), _change_bid),
    ("GET", ("v1", "instances"), _list_v1),
    ("GET", ("v0", "instances"), _list_v0),
    ("GET", ("v0", "instances", "filters"), _filters),
    ("GET", ("v0", "users", "current"), _user),
    ("GET", ("v0", "machines"), _machines),
    ("GET", ("v0", "machines", "maintenances"), _maintenances),
    ("POST", ("v0", "bundles"), _bundles),
    ("PUT", ("v0", "search", "asks"), _search_asks),
    ("PUT", ("v0", "asks", "*"), _rent),
    ("DELETE", ("v0", "instances"), _destroy_many),
    ("GET", ("v0", "instances", "*"), _show),
    ("DELETE", ("v0", "instances", "*"), _destroy_one),
    ("PUT", ("v0", "instances", "*"), _modify),
    ("PUT", ("v0", "instances", "reboot", "*"), _reboot),
    ("PUT", ("v0", "instances", "request_logs", "*"), _request_logs),
]


def _find_route(method: str, path: str) -> tuple[Handler, tuple[str, ...]]:
    segs = tuple(s for s in path.split("/") if s)[1:]  # without the leading "api"
    for m, pattern, handler in ROUTES:
        if m != method or len(pattern) != len(segs):
            continue
        if all(p in ("*", s) for p, s in zip(pattern, segs, strict=True)):
            return handler, tuple(s for p, s in zip(pattern, segs, strict=True) if p == "*")
    raise ApiError(404, "not_found", f"no such endpoint: {method} {path}")
