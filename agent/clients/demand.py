"""The demand side: how much proving work is queued, read from the job queue over HTTP.

Production points `DemandClient` at the queue's status URL; the simulator serves the
same shape at `GET /demand`. The body is JSON with at least `pending` and
`completed`; `running` and `arrival_rate_per_h` are read when present, and so is
`workers` (`{instance_id: {"completed": N}}`: the jobs each worker has completed,
cumulative), from which the fleet learns what each GPU model delivers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from agent.errors import FleetAgentError


class DemandError(FleetAgentError):
    """The job queue could not be read or answered something unusable."""


@dataclass(frozen=True)
class Demand:
    pending: int
    running: int
    completed: int
    arrival_rate_per_h: float | None
    # Jobs completed by each worker (instance id -> cumulative count); empty when the queue does not say.
    workers: dict[int, int] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Any) -> Demand:
        if not isinstance(data, dict):
            raise DemandError(f"demand: expected a JSON object, got {type(data).__name__}")
        missing = [k for k in ("pending", "completed") if data.get(k) is None]
        if missing:
            raise DemandError(f"demand: response lacks {', '.join(missing)} (keys: {sorted(data)[:10]})")
        try:
            rate = data.get("arrival_rate_per_h")
            return cls(
                pending=int(data["pending"]),
                running=int(data.get("running") or 0),
                completed=int(data["completed"]),
                arrival_rate_per_h=None if rate is None else float(rate),
                workers=_workers(data.get("workers")),
                raw=dict(data),
            )
        except (TypeError, ValueError) as e:
            raise DemandError(f"demand: non-numeric field in response: {e}") from e


def _workers(data: Any) -> dict[int, int]:
    """``workers`` as instance id -> completed jobs; absent or null is none known."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise DemandError(f"demand: 'workers' must map instance ids to {{\"completed\": N}}, "
                          f"got {type(data).__name__}")
    out: dict[int, int] = {}
    for key, w in data.items():
        if not isinstance(w, dict) or isinstance(w.get("completed"), bool):
            raise DemandError(f"demand: workers[{str(key)[:40]!r}] must be {{\"completed\": N}}")
        try:
            out[int(key)] = int(w["completed"])
        except (KeyError, TypeError, ValueError):
            raise DemandError(f"demand: workers[{str(key)[:40]!r}] needs an instance id and a numeric "
                              "'completed'") from None
    return out


class DemandClient:
    """Reads the job queue's status with one GET per call."""

    def __init__(self, url: str, *, timeout: float = 10, transport: httpx.BaseTransport | None = None,
                 hold: Callable[[Callable[[], Any]], Any] | None = None) -> None:
        self.url = url
        self._shown = url.split("?", 1)[0]  # never show a query string: it may hold a token
        # Called before every request is sent, as late as httpx allows; raising sends nothing. The daemon's
        # App sets it to its leadership check: a daemon that lost the fleet's lock asks the queue nothing.
        self.fence: Callable[[], None] | None = None
        self._http = httpx.Client(timeout=timeout, transport=transport, headers={"Accept": "application/json"},
                                  event_hooks={"request": [self._fenced]})
        if hold is not None:  # and each write of a request to the socket (agent.httpfence)
            from agent.httpfence import fence_client

            fence_client(self._http, hold)

    def __repr__(self) -> str:
        return f"DemandClient(url={self._shown!r})"

    def _fenced(self, _request: httpx.Request) -> None:
        if self.fence is not None:
            self.fence()

    def get(self) -> Demand:
        try:
            resp = self._http.get(self.url)
        except httpx.TransportError as e:
            raise DemandError(f"demand: cannot reach {self._shown}: {type(e).__name__}") from None
        if resp.status_code != 200:
            raise DemandError(f"demand: {self._shown} answered HTTP {resp.status_code}")
        try:
            data = resp.json()
        except ValueError:
            raise DemandError(f"demand: {self._shown} did not answer JSON") from None
        return Demand.from_json(data)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> DemandClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
