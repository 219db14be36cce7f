"""The reference arm of bench/outcomes.py: a plain cron-style autoscaler, what an operator would write.

Every tick it reads the queue and the instance list over the vast.ai API, destroys its dead instances,
rents the cheapest reliable offers while more jobs wait than it has instances (one job each,
whatever the GPU), and destroys one idle instance a tick while fewer jobs wait than it has instances. It keeps the
same caps as the agent's policy (instances, total $/h, rents an hour) and raises no alerts. It reads no
notes, but an operator told to stop using a host or to rent one GPU model only edits the script
(``obey``): its searches then leave that host out and ask for that model, and it destroys its instances
that break the order, as the agent is asked to. It talks plain HTTP (httpx) to the same endpoints the
agent's client uses.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import httpx

LABEL = "cron-arm"
JOBS_PER_INSTANCE = 1.0  # one job at a time per instance, whatever the GPU
MIN_RELIABILITY = 0.95
STUCK_S = 900.0  # not running this long after the rent: dead
DEAD = ("exited", "offline", "unknown", "stopped")
OCI = "OCI runtime"


@dataclass(frozen=True)
class Caps:
    max_instances: int = 12
    max_total_dph: float = 8.0
    max_rents_per_hour: int = 8


@dataclass
class CronArm:
    """One autoscaler against one vast.ai endpoint (`url`, `key`) and a demand URL."""

    url: str
    key: str
    demand_url: str
    caps: Caps = field(default_factory=Caps)
    image: str = "sim/prover:latest"
    disk: float = 10.0
    rents: deque[float] = field(default_factory=deque)  # when each rent was sent (simulated time)
    log: list[str] = field(default_factory=list)
    excluded_hosts: set[int] = field(default_factory=set)  # hosts the operator said to stop using
    only_gpu: str | None = None  # the one GPU model the operator allows, once told

    def obey(self, *, exclude_host: int | None = None, only_gpu: str | None = None) -> None:
        """The operator's edit to the script after an order: a host left out, one GPU model only."""
        if exclude_host is not None:
            self.excluded_hosts.add(exclude_host)
        if only_gpu is not None:
            self.only_gpu = only_gpu

    def _breaks_order(self, i: dict[str, Any]) -> bool:
        return i.get("host_id") in self.excluded_hosts or (self.only_gpu is not None
                                                           and i.get("gpu_name") != self.only_gpu)

    def _http(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.key}"}, timeout=30.0)

    def tick(self, now: float) -> list[str]:
        """One cron run at simulated time `now`; returns what it did."""
        did: list[str] = []
        with self._http() as http:
            pending = float(http.get(self.demand_url).json().get("pending") or 0)
            mine = [i for i in self._instances(http) if (i.get("label") or "").startswith(LABEL)]
            dead = [i for i in mine if self._dead(i, now)]
            for i in dead:
                self._destroy(http, i["id"])
                did.append(f"destroy dead {i['id']} ({i.get('actual_status')})")
            for i in [i for i in mine if i not in dead and self._breaks_order(i)]:
                self._destroy(http, i["id"])
                dead.append(i)
                did.append(f"destroy {i['id']} against the operator's order ({i.get('gpu_name')}, host "
                           f"{i.get('host_id')})")
            live = [i for i in mine if i not in dead]
            capacity = len(live) * JOBS_PER_INSTANCE
            if pending > capacity:
                did += self._scale_up(http, live, math.ceil((pending - capacity) / JOBS_PER_INSTANCE), now)
            elif pending + 1 < capacity and live:  # more than one instance without a job: idle
                idle = max(live, key=lambda i: i["id"])  # the newest goes first
                self._destroy(http, idle["id"])
                did.append(f"destroy idle {idle['id']}")
        self.log += did
        return did

    def _instances(self, http: httpx.Client) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        params: dict[str, Any] = {"limit": 100}
        while True:
            data = http.get("/api/v1/instances/", params=params).json()
            out += data.get("instances") or []
            if not data.get("next_token"):
                return out
            params["after_token"] = data["next_token"]

    def _dead(self, i: dict[str, Any], now: float) -> bool:
        status = i.get("actual_status")
        if status in DEAD or OCI in (i.get("status_msg") or ""):
            return True
        return status != "running" and now - float(i.get("start_date") or now) > STUCK_S

    def _destroy(self, http: httpx.Client, iid: int) -> None:
        http.request("DELETE", f"/api/v0/instances/{iid}/", json={})

    def _scale_up(self, http: httpx.Client, live: list[dict[str, Any]], want: int, now: float) -> list[str]:
        while self.rents and self.rents[0] <= now - 3600:
            self.rents.popleft()
        room = min(want, self.caps.max_instances - len(live), self.caps.max_rents_per_hour - len(self.rents))
        if room <= 0:
            return []
        dph = sum(float(i.get("dph_total") or 0) for i in live)
        q = {"reliability2": {"gte": MIN_RELIABILITY}, "rentable": {"eq": True}, "rented": {"eq": False},
             "num_gpus": {"eq": 1}, "order": [["dph_total", "asc"]], "limit": 20, "type": "on-demand",
             "allocated_storage": self.disk}
        if self.excluded_hosts:
            q["host_id"] = {"notin": sorted(self.excluded_hosts)}
        if self.only_gpu is not None:
            q["gpu_name"] = {"eq": self.only_gpu}
        offers = http.post("/api/v0/bundles/", json=q).json().get("offers") or []
        did = []
        for o in offers:
            if room <= 0:
                break
            if dph + float(o["dph_total"]) > self.caps.max_total_dph:
                break
            body = {"client_id": "me", "image": self.image, "disk": self.disk, "label": f"{LABEL}-{o['id']}",
                    "env": {}, "onstart": None, "runtype": "ssh", "cancel_unavail": True}
            r = http.put(f"/api/v0/asks/{o['id']}/", json=body)
            self.rents.append(now)
            if r.status_code == 200 and r.json().get("success"):
                dph += float(o["dph_total"])
                room -= 1
                did.append(f"rent {o['id']} {o['gpu_name']} ${o['dph_total']:.3f}/h")
        return did
