"""Fault injection: the knobs (`Faults`, set through POST /_sim/faults) and the draws.

Each eligible /api/ request draws once from the seeded fault RNG: a plain-text or quota 429,
a 500, a 503, and independently a slow answer. A rent can also succeed and then answer 500 or
hang (`ambiguous_rent`), which is what makes a client's retry of a rent dangerous.

Faults after the action, on every side-effecting endpoint (rent, destroy, reboot, start/stop/
label): `rate_after_action` makes vast.ai act and then lose the answer ("500": a 500 after the
change) or receive the request only late ("late": it waits `late_seconds`, past a client's
timeout, then acts). `script` plays a fixed plan instead of dice, in order: its first entry
applies to the next request it matches (`times` times, default once), then the next entry:

    {"method": "PUT", "path": "/api/v0/asks/", "action": "drop"}   act, then answer 500
    {"method": "PUT", "path": "/api/v0/asks/", "action": "late"}   act only after late_seconds
    {"method": "GET", "path": "/api/v1/instances/", "action": "fail"}  answer 500, do nothing
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, fields
from typing import Any

from agent.sim.clock import Clock
from agent.sim.replies import Reply, json_reply, text_reply


@dataclass
class Faults:
    """Fault injection knobs; rates are probabilities per eligible request."""

    rate_429_text: float = 0.0      # plain-text "API requests too frequent" 429
    rate_429_quota: float = 0.0     # JSON {"error": "search_quota_exceeded"} 429
    rate_500: float = 0.0
    rate_503: float = 0.0
    retry_after: float | None = None  # Retry-After header sent with injected 429/503
    rate_slow: float = 0.0          # delay the response by slow_seconds
    slow_seconds: float = 0.0
    ambiguous_rent: float = 0.0     # a rent creates the instance, then answers 500 or hangs
    ambiguous_rent_mode: str = "500"  # "500" | "hang"
    hang_seconds: float = 5.0
    rate_after_action: float = 0.0  # a side-effecting request acts, then its answer is lost or late
    after_action_mode: str = "mix"  # "500" | "late" | "mix"
    late_seconds: float = 2.0       # how late a "late" request reaches vast.ai
    script: list[dict[str, Any]] = field(default_factory=list)  # scripted faults, see the module doc
    limit: int | None = None        # stop injecting after this many faults
    paths: list[str] = field(default_factory=list)  # only paths starting with one of these
    injected: int = 0

    def update(self, values: dict[str, Any]) -> None:
        names = {f.name for f in fields(self)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError("unknown fault setting(s): " + ", ".join(unknown))
        if values.get("ambiguous_rent_mode", self.ambiguous_rent_mode) not in ("500", "hang"):
            raise ValueError("ambiguous_rent_mode must be '500' or 'hang'")
        if values.get("after_action_mode", self.after_action_mode) not in ("500", "late", "mix"):
            raise ValueError("after_action_mode must be '500', 'late' or 'mix'")
        for entry in values.get("script") or []:
            if not isinstance(entry, dict) or entry.get("action") not in SCRIPT_ACTIONS:
                raise ValueError(f"script entries need an action in {SCRIPT_ACTIONS}: {entry!r}")
        for key, value in values.items():
            setattr(self, key, value)

    def applies_to(self, path: str) -> bool:
        if self.limit is not None and self.injected >= self.limit:
            return False
        return not self.paths or any(path.startswith(p) for p in self.paths)


def draw_fault(f: Faults, rng: random.Random, path: str, now: Clock) -> Reply | None:
    """The fault to inject for one request to `path`, if any; status 0 means only a delay."""
    if not f.applies_to(path):
        return None
    extra = {"Retry-After": _fmt_num(f.retry_after)} if f.retry_after is not None else {}
    delay = 0.0
    if f.rate_slow and rng.random() < f.rate_slow:
        delay = f.slow_seconds
    x = rng.random()
    reply = None
    edge = f.rate_429_text
    if x < edge:
        reply = text_reply(429, "API requests too frequent endpoint threshold=2.0 (requests/s)", extra)
    elif x < (edge := edge + f.rate_429_quota):
        reply = json_reply(429, {"success": False, "error": "search_quota_exceeded",
                                 "msg": "Daily search quota exceeded"},
                           {"X-RateLimit-Reset": str(int(now() // 86400 + 1) * 86400)})
    elif x < (edge := edge + f.rate_500):
        reply = json_reply(500, {"success": False, "error": "server_error", "msg": "Internal Server Error"})
    elif x < edge + f.rate_503:
        reply = text_reply(503, "503 Service Temporarily Unavailable", extra)
    if reply is not None:
        f.injected += 1
        reply.delay = delay
        return reply
    if delay:
        f.injected += 1
        return Reply(0, b"", delay=delay)  # status 0: answer normally after the delay
    return None


def ambiguous_rent(f: Faults, rng: random.Random, instance_id: int) -> Reply | None:
    """After a rent created `instance_id`: a 500, or the success answered only after hang_seconds."""
    if f.ambiguous_rent and f.applies_to("/api/v0/asks/") and rng.random() < f.ambiguous_rent:
        f.injected += 1
        if f.ambiguous_rent_mode == "hang":
            reply = json_reply(200, {"success": True, "new_contract": instance_id})
            reply.delay = f.hang_seconds
            return reply
        return json_reply(500, {"success": False, "error": "server_error", "msg": "Internal Server Error"})
    return None


SCRIPT_ACTIONS = ("fail", "drop", "late")
SIDE_EFFECTS = (("PUT", "/api/v0/asks/"), ("PUT", "/api/v0/instances/"), ("DELETE", "/api/v0/instances"))


def side_effecting(method: str, path: str) -> bool:
    """A request that changes the account: rent, destroy, reboot, start/stop/label (not log requests)."""
    return "request_logs" not in path and any(method == m and path.startswith(p) for m, p in SIDE_EFFECTS)


def scripted(f: Faults, method: str, path: str) -> str | None:
    """The scripted action for this request ("fail", "drop", "late"), consuming one use of its entry."""
    if not f.script:
        return None
    entry = f.script[0]  # a plan plays in order: the next entry waits for this one to be used
    if entry.get("method", method) != method or not path.startswith(entry.get("path", "")):
        return None
    entry["times"] = int(entry.get("times", 1)) - 1
    if entry["times"] <= 0:
        f.script.pop(0)
    f.injected += 1
    return str(entry["action"])


def after_action(f: Faults, rng: random.Random, method: str, path: str) -> str | None:
    """A drawn after-action fault for a side-effecting request: "drop" or "late", or None."""
    if not f.rate_after_action or not side_effecting(method, path) or not f.applies_to(path):
        return None
    if rng.random() >= f.rate_after_action:
        return None
    f.injected += 1
    mode = f.after_action_mode
    if mode == "mix":
        mode = "500" if rng.random() < 0.5 else "late"
    return "drop" if mode == "500" else "late"


def lost_answer() -> Reply:
    """What a client sees when vast.ai acted and the answer was lost on the way."""
    return json_reply(500, {"success": False, "error": "server_error", "msg": "Internal Server Error"})


def _fmt_num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)
