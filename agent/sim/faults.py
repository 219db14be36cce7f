"""Fault injection: the knobs (`Faults`, set through POST /_sim/faults) and the draws.

Each eligible /api/ request draws once from the seeded fault RNG: a plain-text or quota 429,
a 500, a 503, and independently a slow answer. A rent can also succeed and then answer 500 or
hang (`ambiguous_rent`), which is what makes a client's retry of a rent dangerous.
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


def _fmt_num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)
