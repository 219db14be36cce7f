"""How the simulated market behaves where vast.ai is harder than a naive API: on by default.

    rate_interval   vast.ai limits each endpoint per key as a minimum interval between requests
                    (wall-clock seconds; 0 = off). A request sooner than that after the last one
                    accepted on the same (key, method, endpoint) gets a 429 whose body is plain text,
                    "API requests too frequent: endpoint threshold=...", and no Retry-After.
    listing_lag     a new instance appears in listings this many simulated seconds after the
                    rent that created it (0 = at once)
    logs_delay      a log upload is ready this many wall-clock seconds after it was requested;
                    its result_url answers 404 NoSuchKey until then
    unschedulable   probability that a rent's machine cannot be scheduled: with
                    `cancel_unavail: true` the rent is refused; with false (the CLI's default)
                    vast.ai creates a *stopped* instance that bills storage and answers success
    price_increases how often a host asks a price increase on a running on-demand contract (per
                    instance per simulated day): a pending row (GET /instances/pending-price-increases/)
                    the renter accepts or rejects; unaccepted, the contract ends (the instance stops)
                    at its end date, 1-7 days later
    stuck_scheduling probability that a rent waits in scheduling for good (the host never takes it)
    maintenance     host maintenance windows per machine per simulated day, on machines running one of
                    our instances: announced 6-72 h ahead (GET /machines/maintenances), 1-8 h long; at
                    its start the machine goes down and its instances go offline
    image_pull      seconds every rent's first load takes on top of the usual 2.5-7 min: a large image,
                    which vast.ai hosts pull for 10-20 min or more (0 = the small image the default
                    market pulls; not in the instant market)
    quick           1 = the instant market older tests were written for: a rent boots in seconds (no
                    scheduling wait, no long image pull), a stop takes effect at once, and no rent is
                    unschedulable or stuck and no maintenance is announced. 0 (the default) = as vast.ai:
                    a rent waits in scheduling 0.5-4 min, then loads 2.5-7 min; a stop takes 10-40 s

Read and set through GET/POST /_sim/realism, or `fleet-agent sim --rate-interval ...`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any

from agent.sim.replies import Reply, text_reply

DEFAULT_RATE_INTERVAL = 0.5   # "endpoint threshold=2.0 (requests/s)", as vast.ai's 429 bodies say
DEFAULT_LISTING_LAG = 30.0
DEFAULT_LOGS_DELAY = 2.5
DEFAULT_PRICE_INCREASES = 0.1
DEFAULT_UNSCHEDULABLE = 0.03  # rents whose machine cannot take the instance (vast.ai's cancel_unavail case)
DEFAULT_STUCK_SCHEDULING = 0.02
DEFAULT_MAINTENANCE = 0.02  # windows per machine per day
_ID = re.compile(r"/\d+(?=/|$)")


@dataclass
class Realism:
    rate_interval: float = DEFAULT_RATE_INTERVAL
    listing_lag: float = DEFAULT_LISTING_LAG
    logs_delay: float = DEFAULT_LOGS_DELAY
    unschedulable: float = DEFAULT_UNSCHEDULABLE
    price_increases: float = DEFAULT_PRICE_INCREASES
    stuck_scheduling: float = DEFAULT_STUCK_SCHEDULING
    maintenance: float = DEFAULT_MAINTENANCE
    image_pull: float = 0.0
    quick: float = 0.0

    def update(self, values: dict[str, Any]) -> None:
        names = {f.name for f in fields(self)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError("unknown realism setting(s): " + ", ".join(unknown))
        for key, value in values.items():
            try:
                number = float(value)
            except (TypeError, ValueError) as e:
                raise ValueError(f"{key} must be a number, got {value!r}") from e
            if number < 0:
                raise ValueError(f"{key} must be >= 0, got {number}")
            setattr(self, key, number)


def endpoint(method: str, path: str) -> str:
    """The endpoint a request is limited on: its method and path, ids replaced by ``*``."""
    return f"{method} {_ID.sub('/*', path)}"


class RateLimiter:
    """The minimum interval between accepted requests, per (key, endpoint)."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], float] = {}
        self.refused = 0

    def check(self, identity: str, method: str, path: str, now: float, interval: float) -> Reply | None:
        """None when the request may go on (and it is recorded), else the 429 vast.ai answers."""
        if interval <= 0:
            return None
        key = (identity, endpoint(method, path))
        last = self._last.get(key)
        if last is not None and now - last < interval:
            self.refused += 1
            return text_reply(429, f"API requests too frequent: endpoint threshold={1.0 / interval:g} "
                              "(requests/s)")
        self._last[key] = now
        return None
