"""A vast.ai-compatible simulator: market, instances, billing, demand and faults.

    Simulator   all state and logic, pure Python; time comes from an injectable clock
    SimServer   serves a Simulator over HTTP on 127.0.0.1 (ThreadingHTTPServer, daemon thread)
    ManualClock a clock tests advance by hand

The HTTP surface is the one the official `vastai` CLI and agent/clients/vast.py use (see
VAST_API.md): Bearer or `?api_key=` auth, JSON bodies with `Content-Type:
application/json`, v1 instance pagination, the logs `result_url` flow. Admin
endpoints live under `/_sim/` and need no vast auth; `GET /demand` serves the job
queue the fleet works on. Everything random is drawn from RNGs seeded by `seed`, so
a seed fixes the market, the bad hosts, each instance's timings and the demand.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import os
import random
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import structlog

log = structlog.get_logger(__name__)

STATE_VERSION = 1
DEFAULT_START = 1_750_000_000.0
DEMAND_STEP_S = 60.0
OCI_MSG = (
    "Error response from daemon: failed to create task for container: failed to create shim task: "
    "OCI runtime create failed: runc create failed: unable to start container process: "
    "error during container init: nvidia-container-cli: initialization error: driver rpc error"
)
BEHAVIOURS = ("stuck_loading", "oci_fail", "exits", "offline")


@dataclass(frozen=True)
class GpuModel:
    name: str
    gpu_ram_mb: int
    dph_per_gpu: float
    dlperf_per_gpu: float
    jobs_per_h_per_gpu: float
    cuda: float
    total_flops: float


GPU_MODELS: tuple[GpuModel, ...] = (
    GpuModel("RTX 3090", 24576, 0.21, 31.0, 4.0, 12.2, 35.6),
    GpuModel("RTX 4090", 24564, 0.38, 62.0, 8.0, 12.4, 82.6),
    GpuModel("RTX A6000", 49140, 0.47, 44.0, 6.0, 12.2, 38.7),
    GpuModel("L40S", 46068, 0.82, 78.0, 10.0, 12.4, 91.6),
    GpuModel("A100 SXM4", 81920, 1.15, 108.0, 16.0, 12.2, 19.5),
    GpuModel("H100 SXM", 81559, 2.25, 205.0, 30.0, 12.4, 66.9),
)
MODEL_BY_NAME = {m.name: m for m in GPU_MODELS}
GEOLOCATIONS = (
    "Texas, US", "California, US", "Virginia, US", "Quebec, CA", "Ontario, CA", "Sweden, SE",
    "Germany, DE", "Netherlands, NL", "Poland, PL", "Japan, JP", "Taiwan, TW", "Norway, NO",
)
STORAGE_PER_GB_MONTH = 0.15


class ManualClock:
    """A clock that only moves when told to: `advance(seconds)`."""

    def __init__(self, start: float = DEFAULT_START) -> None:
        self._t = float(start)
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._t

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("a clock cannot go backwards")
        with self._lock:
            self._t += seconds
            return self._t


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


@dataclass
class Reply:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


class ApiError(Exception):
    def __init__(self, status: int, error: str, msg: str) -> None:
        super().__init__(msg)
        self.status, self.error, self.msg = status, error, msg


def _json_reply(status: int, obj: Any, headers: dict[str, str] | None = None) -> Reply:
    return Reply(status, json.dumps(obj).encode(), "application/json", headers or {})


def _text_reply(status: int, text: str, headers: dict[str, str] | None = None) -> Reply:
    return Reply(status, text.encode(), "text/plain; charset=utf-8", headers or {})


# --- filters -----------------------------------------------------------------------------


def _coerce(arg: Any, like: Any) -> Any:
    if isinstance(like, bool):
        if isinstance(arg, str):
            return arg.strip().lower() in ("true", "1", "yes")
        return bool(arg)
    if isinstance(like, int | float):
        try:
            return float(arg)
        except (TypeError, ValueError):
            return arg
    if isinstance(like, str) and isinstance(arg, str):
        return arg.replace("_", " ")
    return arg


def _eq(value: Any, arg: Any, key: str) -> bool:
    if isinstance(value, str) and isinstance(arg, str):
        v, a = value.replace("_", " ").lower(), arg.lower()
        if key == "geolocation":
            return v == a or v.rsplit(", ", 1)[-1] == a
        return v == a
    return value == arg


def _match_op(value: Any, op: str, arg: Any, key: str) -> bool:
    if op in ("in", "notin"):
        items = arg if isinstance(arg, list) else [arg]
        hit = any(_eq(value, _coerce(a, value), key) for a in items)
        return hit if op == "in" else not hit
    if op not in ("eq", "neq", "gt", "gte", "lt", "lte"):
        raise ApiError(400, "invalid_args", f"unknown operator {op!r} on {key!r}")
    a = _coerce(arg, value)
    if op == "eq":
        return _eq(value, a, key)
    if op == "neq":
        return not _eq(value, a, key)
    if value is None or a is None:
        return False
    try:
        return {"gt": value > a, "gte": value >= a, "lt": value < a, "lte": value <= a}[op]
    except TypeError:
        return False


def _matches(row: dict[str, Any], filters: dict[str, Any]) -> bool:
    for key, cond in filters.items():
        if key not in row:
            continue  # unknown fields are ignored, as the real search tolerates extra keys
        if not isinstance(cond, dict):
            cond = {"eq": cond}
        for op, arg in cond.items():
            if not _match_op(row[key], op, arg, key):
                return False
    return True


def _sort_rows(rows: list[dict[str, Any]], order: list[tuple[str, str]]) -> list[dict[str, Any]]:
    out = list(rows)
    for col, direction in reversed(order):
        desc = str(direction).lower() == "desc"
        present = [r for r in out if r.get(col) is not None]
        missing = [r for r in out if r.get(col) is None]
        present.sort(key=lambda r, c=col: r[c], reverse=desc)
        out = present + missing
    return out


def _token(offset: int) -> str:
    raw = json.dumps({"offset": offset}).encode()
    return "pg_" + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _untoken(token: str) -> int:
    if not token.startswith("pg_"):
        raise ApiError(400, "invalid_args", "bad after_token")
    body = token[3:]
    try:
        data = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        return max(0, int(data["offset"]))
    except (ValueError, KeyError, TypeError, binascii.Error) as e:
        raise ApiError(400, "invalid_args", "bad after_token") from e


# --- the simulator -------------------------------------------------------------------------


class Simulator:
    """The whole simulated vast.ai account: market, instances, billing, demand, faults."""

    def __init__(
        self,
        seed: int = 0,
        speed: float = 1.0,
        clock: Callable[[], float] | None = None,
        api_key: str = "sim-key",
        state_file: str | None = None,
        start_balance: float = 500.0,
    ) -> None:
        self.seed = seed
        self.speed = speed
        self.api_key = api_key
        self.state_file = state_file
        self.faults = Faults()
        self.requests: list[dict[str, Any]] = []
        self.instances: dict[int, dict[str, Any]] = {}
        self.destroyed: dict[int, dict[str, Any]] = {}
        self.offers: dict[int, dict[str, Any]] = {}
        self.bad_hosts: dict[int, str] = {}
        self.balance = float(start_balance)
        self.pending = 120.0
        self.completed = 0.0
        self._lock = threading.RLock()
        self._fault_rng = random.Random(f"{seed}:faults")
        self._next_id = 21_000_000 + random.Random(f"{seed}:ids").randrange(1000, 9000)
        self._planted: dict[int, str] = {}
        self._results: dict[str, dict[str, Any]] = {}
        self._result_seq = 0
        self._build_market()
        saved = self._read_state() if state_file else None
        start = float(saved["now"]) if saved else time.time()
        if clock is None:
            t0 = time.monotonic()
            self.manual = False
            self._clock: Callable[[], float] = lambda: start + (time.monotonic() - t0) * speed
        else:
            self.manual = isinstance(clock, ManualClock)
            self._clock = clock
        self._last_t = self._clock()
        if saved:
            self._restore(saved)

    def __repr__(self) -> str:
        return f"Simulator(seed={self.seed}, instances={len(self.instances)})"

    # -- time ---------------------------------------------------------------------------

    @property
    def clock(self) -> Callable[[], float]:
        return self._clock

    def now(self) -> float:
        return self._clock()

    def tick(self) -> float:
        """Bring every instance, the balance and the queue up to the clock's now."""
        with self._lock:
            now = self._clock()
            self._advance_to(now)
            return now

    def advance(self, seconds: float) -> float:
        """Advance a ManualClock and the simulation with it."""
        if not isinstance(self._clock, ManualClock):
            raise RuntimeError("advance needs a ManualClock")
        self._clock.advance(seconds)
        return self.tick()

    # -- market -------------------------------------------------------------------------

    def _build_market(self) -> None:
        rng = random.Random(f"{self.seed}:market")
        hosts = sorted(rng.sample(range(10_000, 99_999), 24))
        host_geo = {h: rng.choice(GEOLOCATIONS) for h in hosts}
        host_rel = {h: round(rng.uniform(0.93, 0.999), 4) for h in hosts}
        for i, h in enumerate(rng.sample(hosts, 8)):
            self.bad_hosts[h] = BEHAVIOURS[i % len(BEHAVIOURS)]
        good = [h for h in hosts if h not in self.bad_hosts]
        bad = sorted(self.bad_hosts)
        machine_ids = iter(rng.sample(range(10_000, 60_000), 200))
        offer_ids = iter(rng.sample(range(1_000_000, 9_999_999), 200))

        def add(model: GpuModel, host: int, n: int) -> None:
            mid, oid = next(machine_ids), next(offer_ids)
            per_gpu = model.dph_per_gpu * rng.uniform(0.8, 1.35)
            disk = float(rng.choice([50, 100, 200, 500, 1000]))
            storage_h = disk * STORAGE_PER_GB_MONTH / 730.0
            dph = round(per_gpu * n + storage_h * 0.1, 4)
            rel = round(max(0.8, host_rel[host] - rng.uniform(0.0, 0.02)), 4)
            dlperf = round(model.dlperf_per_gpu * n * rng.uniform(0.9, 1.05), 2)
            self.offers[oid] = {
                "id": oid, "ask_contract_id": oid, "bundle_id": oid + 7, "machine_id": mid,
                "host_id": host, "num_gpus": n, "gpu_name": model.name, "gpu_ram": model.gpu_ram_mb,
                "gpu_total_ram": model.gpu_ram_mb * n, "gpu_frac": 1.0, "cpu_name": "AMD EPYC 7763 64-Core",
                "cpu_cores": 64, "cpu_cores_effective": float(8 * n), "cpu_ram": 64_000 * n,
                "cpu_ghz": round(rng.uniform(2.4, 3.6), 1), "disk_space": disk, "disk_bw": 2000.0,
                "disk_name": "nvme", "dph_base": round(per_gpu * n, 4), "dph_total": dph,
                "min_bid": round(dph * rng.uniform(0.45, 0.7), 4), "storage_cost": STORAGE_PER_GB_MONTH,
                "inet_down": round(rng.uniform(150, 2500), 1), "inet_up": round(rng.uniform(100, 1500), 1),
                "inet_down_cost": 0.002, "inet_up_cost": 0.002, "reliability": rel, "reliability2": rel,
                "verification": "verified", "verified": True, "rentable": True, "rented": False,
                "external": False, "geolocation": host_geo[host], "cuda_max_good": model.cuda,
                "driver_version": "550.54.14", "dlperf": dlperf, "dlperf_per_dphtotal": round(dlperf / dph, 2),
                "score": round(dlperf / dph * rel * 4, 2), "total_flops": round(model.total_flops * n, 1),
                "pcie_bw": round(rng.uniform(11, 25), 1), "direct_port_count": rng.choice([20, 50, 100]),
                "duration": float(rng.randint(7, 90) * 86400), "static_ip": rng.random() < 0.5,
                "is_bid": False, "compute_cap": 890 if "40" in model.name else 800,
            }

        for model in GPU_MODELS:
            for _ in range(rng.randint(6, 9)):
                add(model, rng.choice(hosts), rng.choice([1, 1, 1, 2, 2, 4, 8]))
            mine = [o for o in self.offers.values() if o["gpu_name"] == model.name and o["num_gpus"] == 1]
            if not any(o["host_id"] in good for o in mine):
                add(model, rng.choice(good), 1)
            if not any(o["host_id"] in self.bad_hosts for o in mine):
                add(model, rng.choice(bad), 1)
        for behaviour in BEHAVIOURS:
            singles = [o for o in self.offers.values() if o["num_gpus"] == 1]
            if not any(self.bad_hosts.get(o["host_id"]) == behaviour for o in singles):
                host = next(h for h in bad if self.bad_hosts[h] == behaviour)
                add(rng.choice(GPU_MODELS), host, 1)

    def find_offer(self, gpu_name: str | None = None, *, good: bool = True, num_gpus: int | None = 1,
                   behaviour: str | None = None) -> dict[str, Any]:
        """The cheapest unrented offer matching; `good=False` picks one on a bad host."""
        with self._lock:
            rows = sorted(self.offers.values(), key=lambda o: (o["dph_total"], o["id"]))
            for o in rows:
                bad = o["host_id"] in self.bad_hosts
                if o["rented"] or (gpu_name and o["gpu_name"] != gpu_name):
                    continue
                if num_gpus is not None and o["num_gpus"] != num_gpus:
                    continue
                if behaviour is not None:
                    if self.bad_hosts.get(o["host_id"]) == behaviour:
                        return dict(o)
                    continue
                if bad != (not good):
                    continue
                return dict(o)
        raise LookupError(f"no offer for gpu_name={gpu_name} good={good} behaviour={behaviour}")

    # -- instances ----------------------------------------------------------------------

    def create_instance(self, offer_id: int, *, image: str = "sim/prover:latest", label: str | None = None,
                        env: dict[str, str] | None = None, onstart: str | None = None, disk: float = 10.0,
                        price: float | None = None) -> int:
        """Rent an offer directly (no HTTP), as if through PUT /asks/{id}/; return the instance id."""
        with self._lock:
            now = self.tick()
            offer = self.offers.get(offer_id)
            if offer is None or offer["rented"]:
                raise LookupError(f"offer {offer_id} is not available")
            body = {"image": image, "label": label, "env": env or {}, "onstart": onstart, "disk": disk,
                    "price": price, "runtype": "ssh"}
            return int(self._create_instance(offer, body, now)["id"])

    def _irng(self, iid: int, what: str) -> random.Random:
        return random.Random(f"{self.seed}:{iid}:{what}")

    def _create_instance(self, offer: dict[str, Any], body: dict[str, Any], now: float) -> dict[str, Any]:
        iid = self._next_id
        self._next_id += 1 + self._irng(iid, "id").randrange(0, 17)
        env = body.get("env") or {}
        price = body.get("price")
        disk = float(body.get("disk") or 10.0)
        behaviour = self.bad_hosts.get(offer["host_id"], "good")
        ssh_rng = self._irng(iid, "ssh")
        inst: dict[str, Any] = {
            "id": iid, "label": body.get("label"), "machine_id": offer["machine_id"],
            "host_id": offer["host_id"], "bundle_id": offer["bundle_id"], "actual_status": None,
            "intended_status": "running", "cur_state": "running", "next_state": "running",
            "status_msg": None, "num_gpus": offer["num_gpus"], "gpu_name": offer["gpu_name"],
            "gpu_ram": offer["gpu_ram"], "gpu_totalram": offer["gpu_total_ram"], "gpu_util": None,
            "gpu_temp": None, "dph_base": offer["dph_base"],
            "dph_total": float(price) if price is not None else offer["dph_total"],
            "is_bid": price is not None, "min_bid": offer["min_bid"],
            "storage_cost": STORAGE_PER_GB_MONTH, "start_date": float(now),
            "extra_env": [[str(k), str(v)] for k, v in env.items()],
            "image_uuid": body.get("image"), "image_args": [], "onstart": body.get("onstart"),
            "image_runtype": body.get("runtype") or "ssh", "disk_space": disk, "disk_usage": 0.0,
            "disk_util": 0.0, "volume_info": [], "reliability2": offer["reliability2"],
            "geolocation": offer["geolocation"], "verification": offer["verification"],
            "ssh_host": f"ssh{ssh_rng.randint(1, 9)}.vast.ai", "ssh_port": 10_000 + iid % 50_000,
            "ssh_idx": str(ssh_rng.randint(1, 9)),
            "public_ipaddr": f"203.0.113.{ssh_rng.randint(2, 250)}", "ports": {},
            "inet_up": offer["inet_up"], "inet_down": offer["inet_down"], "cpu_ram": offer["cpu_ram"],
            "cpu_cores_effective": offer["cpu_cores_effective"], "cuda_max_good": offer["cuda_max_good"],
            "driver_version": offer["driver_version"], "uptime_mins": None, "template_id": None,
            "template_hash_id": None, "template_name": None, "client_run_time": 0.0,
            "_offer_id": offer["id"], "_behaviour": behaviour, "_next": None, "_running_since": None,
            "_cost": 0.0, "_jobs": 0.0,
        }
        self._schedule(inst, now + self._irng(iid, "boot").uniform(3.0, 12.0), "created")
        self.instances[iid] = inst
        offer["rented"] = True
        return inst

    def _schedule(self, inst: dict[str, Any], at: float, status: str) -> None:
        inst["_next"] = [float(at), status]

    def _transition(self, inst: dict[str, Any], status: str, t: float) -> None:
        r = self._irng(inst["id"], f"{status}:{t:.3f}")
        beh = inst["_behaviour"]
        inst["_next"] = None
        inst["actual_status"] = status
        if status == "created":
            if beh == "oci_fail":
                inst["status_msg"] = OCI_MSG
            else:
                inst["status_msg"] = "Creating container"
                self._schedule(inst, t + r.uniform(5.0, 20.0), "loading")
        elif status == "loading":
            inst["status_msg"] = f"Pulling image {inst['image_uuid']}: downloading layers"
            if beh != "stuck_loading":
                self._schedule(inst, t + r.uniform(30.0, 120.0), "running")
        elif status == "running":
            inst["status_msg"] = f"success, running {inst['image_uuid']}"
            inst["_running_since"] = t
            if beh == "exits":
                self._schedule(inst, t + r.uniform(300.0, 1200.0), "exited")
            elif beh == "offline":
                self._schedule(inst, t + r.uniform(600.0, 1800.0), "offline")
        elif status == "exited":
            inst["status_msg"] = "container exited with code 137 (out of memory)"
            inst["_running_since"] = None
        elif status == "offline":
            inst["status_msg"] = "host machine is offline: no heartbeat"
            inst["_running_since"] = None

    def _restart(self, inst: dict[str, Any], t: float, msg: str) -> None:
        """After a start or reboot: loading, then running unless the host misbehaves."""
        r = self._irng(inst["id"], f"restart:{t:.3f}")
        inst["_running_since"] = None
        inst["intended_status"] = inst["cur_state"] = inst["next_state"] = "running"
        if inst["_behaviour"] == "oci_fail":
            inst["actual_status"], inst["status_msg"], inst["_next"] = "created", OCI_MSG, None
            return
        inst["actual_status"], inst["status_msg"] = "loading", msg
        inst["_next"] = None
        if inst["_behaviour"] != "stuck_loading":
            self._schedule(inst, t + r.uniform(10.0, 40.0), "running")

    def outbid(self, instance_id: int) -> None:
        """An interruptible (bid) instance loses its GPU: stopped, not destroyed; storage still bills."""
        with self._lock:
            now = self.tick()
            inst = self.instances.get(int(instance_id))
            if inst is None:
                raise LookupError(f"no instance {instance_id}")
            inst["actual_status"] = inst["cur_state"] = "stopped"
            inst["status_msg"] = "outbid: stopped by a higher bid"
            inst["_next"] = inst["_running_since"] = None
            inst["_outbid_at"] = now

    def _storage_per_h(self, inst: dict[str, Any]) -> float:
        return inst["disk_space"] * inst["storage_cost"] / 730.0

    def _advance_instance(self, inst: dict[str, Any], t0: float, t1: float) -> float:
        """Bill and transition one instance over [t0, t1]; return its running seconds."""
        t, running = t0, 0.0
        while True:
            nxt = inst["_next"]
            seg_end = t1 if nxt is None or nxt[0] >= t1 else max(nxt[0], t)
            dt = seg_end - t
            if dt > 0:
                if inst["actual_status"] == "running":
                    cost = inst["dph_total"] * dt / 3600.0
                    running += dt
                else:
                    cost = self._storage_per_h(inst) * dt / 3600.0
                self.balance -= cost
                inst["_cost"] += cost
            t = seg_end
            if nxt is not None and nxt[0] <= t:
                self._transition(inst, nxt[1], nxt[0])
                continue
            if t >= t1:
                return running

    def _advance_to(self, now: float) -> None:
        t = self._last_t
        while t < now:
            step_end = min(now, (math.floor(t / DEMAND_STEP_S) + 1) * DEMAND_STEP_S)
            shares: list[tuple[dict[str, Any], float]] = []
            for iid in sorted(self.instances):
                inst = self.instances[iid]
                secs = self._advance_instance(inst, t, step_end)
                if secs > 0:
                    shares.append((inst, secs * self._jobs_per_h(inst) / 3600.0))
            capacity = sum(c for _, c in shares)
            self.pending += self.arrival_rate(t) * (step_end - t) / 3600.0
            done = min(self.pending, capacity)
            self.pending -= done
            self.completed += done
            for inst, c in shares:
                inst["_jobs"] += done * c / capacity
            if self.balance <= 0:
                for inst in self.instances.values():
                    if inst["actual_status"] in ("running", "loading", "created", None):
                        inst["actual_status"] = inst["intended_status"] = inst["cur_state"] = "stopped"
                        inst["status_msg"] = "stopped: insufficient credit"
                        inst["_next"] = inst["_running_since"] = None
            t = step_end
        self._last_t = max(self._last_t, now)

    def _jobs_per_h(self, inst: dict[str, Any]) -> float:
        model = MODEL_BY_NAME.get(inst["gpu_name"])
        return (model.jobs_per_h_per_gpu if model else 5.0) * inst["num_gpus"]

    # -- demand -------------------------------------------------------------------------

    def arrival_rate(self, t: float) -> float:
        """Jobs per hour arriving at simulated time t: a day cycle, bursts, quiet spells."""
        block = int(t // 7200)
        r = random.Random(f"{self.seed}:demand:{block}")
        x = r.random()
        if x < 0.2:
            mult = r.uniform(2.5, 4.0)
        elif x < 0.35:
            mult = 0.15
        else:
            mult = r.uniform(0.8, 1.2)
        day = 1.0 + 0.4 * math.sin(2 * math.pi * (t % 86400) / 86400)
        return 30.0 * day * mult

    def demand(self) -> dict[str, Any]:
        with self._lock:
            now = self.tick()
            gpus = sum(i["num_gpus"] for i in self.instances.values() if i["actual_status"] == "running")
            pending = int(self.pending)
            return {
                "pending": pending, "running": min(pending, gpus), "completed": int(self.completed),
                "arrival_rate_per_h": round(self.arrival_rate(now), 3), "time": now,
            }

    # -- logs ---------------------------------------------------------------------------

    def plant_logs(self, instance_id: int, text: str) -> None:
        with self._lock:
            self._planted[int(instance_id)] = text

    def _synthetic_logs(self, inst: dict[str, Any], now: float) -> str:
        r = self._irng(inst["id"], "logs")
        lines = [f"[{_iso(inst['start_date'])}] pulling {inst['image_uuid']}", "container started"]
        if inst["actual_status"] in ("created",) and inst["_behaviour"] == "oci_fail":
            return OCI_MSG + "\n"
        since = inst["_running_since"]
        if since is None and inst["actual_status"] != "exited":
            return "\n".join(lines + ["waiting for image layers..."]) + "\n"
        lines.append(f"prover: {inst['num_gpus']}x {inst['gpu_name']} detected, CUDA {inst['cuda_max_good']}")
        t = since or inst["start_date"]
        job = r.randrange(10_000, 90_000)
        end = now if since is not None else inst["start_date"] + 600
        while t < end and len(lines) < 400:
            dur = r.uniform(120, 600) / max(1.0, self._jobs_per_h(inst) / 8)
            t += dur
            job += 1
            lines.append(f"[{_iso(t)}] prover: job {job} proved in {dur:.1f}s (gpu util {r.randint(85, 99)}%)")
        if inst["actual_status"] == "exited":
            lines.append("CUDA error: out of memory; Killed")
        return "\n".join(lines) + "\n"

    # -- HTTP-level handling --------------------------------------------------------------

    def handle(self, method: str, target: str, headers: dict[str, str], body: bytes,
               base_url: str) -> Reply:
        """Answer one HTTP request. Thread-safe; delays are returned, not slept."""
        parts = urlsplit(target)
        path = parts.path
        raw_q = parse_qs(parts.query, keep_blank_values=True)
        query: dict[str, Any] = {}
        for k, vals in raw_q.items():
            v = vals[-1]
            try:
                query[k] = json.loads(v)
            except ValueError:
                query[k] = v
        parsed_body: Any = None
        if body:
            try:
                parsed_body = json.loads(body)
            except ValueError:
                parsed_body = body.decode("utf-8", "replace")
        auth_header = headers.get("authorization") or ""
        via = None
        if auth_header:
            via = "bearer"
        elif "api_key" in query:
            via = "query"
        record = None
        if not path.startswith("/_sim/"):
            red_q = {k: ("<REDACTED>" if k == "api_key" else v) for k, v in query.items()}
            red_h = {k: ("<REDACTED>" if k == "authorization" else v) for k, v in headers.items()}
            record = {
                "method": method, "path": path, "query": red_q or None, "body": parsed_body,
                "auth": via, "headers": red_h, "status": None, "t": None,
            }
            with self._lock:
                self.requests.append(record)
                if len(self.requests) > 20_000:
                    del self.requests[:5_000]
        try:
            reply = self._route(method, path, query, headers, parsed_body, base_url)
        except ApiError as e:
            reply = _json_reply(e.status, {"success": False, "error": e.error, "msg": e.msg})
        if record is not None:
            record["status"] = reply.status
            record["t"] = self._clock()
        return reply

    def _authorized(self, headers: dict[str, str], query: dict[str, Any]) -> bool:
        auth = headers.get("authorization") or ""
        if auth.startswith("Bearer ") and auth[7:].strip() == self.api_key:
            return True
        return str(query.get("api_key", "")) == self.api_key and bool(self.api_key)

    def _draw_fault(self, path: str) -> Reply | None:
        f = self.faults
        if not f.applies_to(path):
            return None
        extra = {"Retry-After": _fmt_num(f.retry_after)} if f.retry_after is not None else {}
        delay = 0.0
        if f.rate_slow and self._fault_rng.random() < f.rate_slow:
            delay = f.slow_seconds
        x = self._fault_rng.random()
        reply = None
        edge = f.rate_429_text
        if x < edge:
            reply = _text_reply(429, "API requests too frequent endpoint threshold=2.0 (requests/s)", extra)
        elif x < (edge := edge + f.rate_429_quota):
            reply = _json_reply(429, {"success": False, "error": "search_quota_exceeded",
                                      "msg": "Daily search quota exceeded"},
                                {"X-RateLimit-Reset": str(int(self._clock() // 86400 + 1) * 86400)})
        elif x < (edge := edge + f.rate_500):
            reply = _json_reply(500, {"success": False, "error": "server_error", "msg": "Internal Server Error"})
        elif x < edge + f.rate_503:
            reply = _text_reply(503, "503 Service Temporarily Unavailable", extra)
        if reply is not None:
            f.injected += 1
            reply.delay = delay
            return reply
        if delay:
            f.injected += 1
            return Reply(0, b"", delay=delay)  # status 0: answer normally after the delay
        return None

    def _route(self, method: str, path: str, query: dict[str, Any], headers: dict[str, str],
               body: Any, base_url: str) -> Reply:
        if path.startswith("/_sim/"):
            return self._admin(method, path, query, body)
        if path.startswith("/results/") and method == "GET":
            return self._result(path)
        if path == "/demand" and method == "GET":
            return _json_reply(200, self.demand())
        if path == "/api/v0/gpu_names/unique/" and method == "GET":
            return _json_reply(200, {"gpu_names": sorted(m.name for m in GPU_MODELS)})
        if not path.startswith("/api/"):
            raise ApiError(404, "not_found", f"no such endpoint: {method} {path}")
        if not self._authorized(headers, query):
            raise ApiError(401, "auth_error", "Invalid user key")
        delay = 0.0
        with self._lock:
            fault = self._draw_fault(path)
        if fault is not None:
            if fault.status:
                return fault
            delay = fault.delay
        body = body if isinstance(body, dict) else {}
        with self._lock:
            now = self.tick()
            reply = self._api(method, path, query, body, base_url, now)
        reply.delay += delay
        return reply

    def _api(self, method: str, path: str, query: dict[str, Any], body: dict[str, Any],
             base_url: str, now: float) -> Reply:
        seg = [s for s in path.split("/") if s]  # ["api", "v0", ...]
        ver, rest = seg[1], seg[2:]
        key = (method, ver, tuple(rest))
        if key == ("GET", "v1", ("instances",)):
            return _json_reply(200, self._list_v1(query))
        if key == ("GET", "v0", ("instances",)):
            return _json_reply(200, {"instances": [self._public(i) for i in self._sorted_instances()]})
        if key == ("GET", "v0", ("instances", "filters")):
            return _json_reply(200, {"filters": self._filter_values()})
        if key == ("GET", "v0", ("users", "current")):
            return _json_reply(200, self._user())
        if key == ("GET", "v0", ("machines",)):
            return _json_reply(200, {"machines": []})
        if key == ("POST", "v0", ("bundles",)):
            return _json_reply(200, {"offers": self._search(body)})
        if key == ("PUT", "v0", ("search", "asks")):
            return _json_reply(200, {"offers": self._search(body.get("q") or {})})
        if method == "PUT" and ver == "v0" and len(rest) == 2 and rest[0] == "asks":
            return self._rent(_int(rest[1]), body, now)
        if key == ("DELETE", "v0", ("instances",)):
            ids = body.get("instance_ids") or []
            for iid in ids:
                self._destroy(_int(iid), now)
            return _json_reply(200, {"success": True, "msg": f"destroyed {len(ids)} instances"})
        if ver == "v0" and len(rest) == 2 and rest[0] == "instances":
            iid = _int(rest[1])
            if method == "GET":
                inst = self.instances.get(iid)
                return _json_reply(200, {"instances": self._public(inst) if inst else None})
            if method == "DELETE":
                self._destroy(iid, now)
                return _json_reply(200, {"success": True, "msg": f"Instance {iid} destroyed."})
            if method == "PUT":
                return _json_reply(200, self._modify(iid, body, now))
        if method == "PUT" and ver == "v0" and len(rest) == 3 and rest[0] == "instances":
            iid = _int(rest[2])
            if rest[1] == "reboot":
                return _json_reply(200, self._reboot(iid, now))
            if rest[1] == "request_logs":
                return _json_reply(200, self._request_logs(iid, body, base_url, now))
        raise ApiError(404, "not_found", f"no such endpoint: {method} {path}")

    # -- endpoint bodies --------------------------------------------------------------------

    def _public(self, inst: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in inst.items() if not k.startswith("_")}
        since = inst["_running_since"]
        now = self._clock()
        if since is not None:
            out["uptime_mins"] = round((now - since) / 60.0, 2)
            busy = self.pending >= 1
            r = self._irng(inst["id"], f"util:{int(now // 60)}")
            out["gpu_util"] = round(r.uniform(85, 99) if busy else r.uniform(0, 3), 1)
            out["gpu_temp"] = round(r.uniform(55, 78) if busy else r.uniform(30, 40), 1)
        out["client_run_time"] = round(now - inst["start_date"], 1)
        return out

    def _sorted_instances(self) -> list[dict[str, Any]]:
        return [self.instances[i] for i in sorted(self.instances)]

    def _list_v1(self, query: dict[str, Any]) -> dict[str, Any]:
        filters = query.get("select_filters") or {}
        order_by = query.get("order_by") or [{"col": "id", "dir": "asc"}]
        if not isinstance(filters, dict) or not isinstance(order_by, list):
            raise ApiError(400, "invalid_args", "select_filters must be an object, order_by a list")
        try:
            limit = int(query.get("limit", 25))
        except (TypeError, ValueError) as e:
            raise ApiError(400, "invalid_args", "limit must be an integer") from e
        limit = max(1, min(limit, 25))
        token = query.get("after_token")
        offset = _untoken(str(token)) if token else 0
        rows = [self._public(i) for i in self._sorted_instances()]
        rows = [r for r in rows if _matches(r, filters)]
        order = [(o.get("col", "id"), o.get("dir", "asc")) for o in order_by if isinstance(o, dict)]
        rows = _sort_rows(rows, order)
        labels: dict[str, int] = {}
        for r in rows:
            labels[r.get("label") or ""] = labels.get(r.get("label") or "", 0) + 1
        page = rows[offset:offset + limit]
        cols = query.get("select_cols")
        if isinstance(cols, list) and cols and cols != ["*"]:
            page = [{c: r.get(c) for c in ["id", *cols]} for r in page]
        more = offset + limit < len(rows)
        return {"instances": page, "next_token": _token(offset + limit) if more else None,
                "total_instances": len(rows), "label_counts": labels}

    def _filter_values(self) -> list[dict[str, Any]]:
        combos: dict[tuple[Any, ...], int] = {}
        for inst in self.instances.values():
            k = (inst["actual_status"], inst["verification"], inst["gpu_name"])
            combos[k] = combos.get(k, 0) + 1
        return [{"actual_status": a, "verification": v, "gpu_name": g, "count": n}
                for (a, v, g), n in sorted(combos.items(), key=lambda kv: str(kv[0]))]

    def _user(self) -> dict[str, Any]:
        bal = round(self.balance, 4)
        return {
            "id": 77_000 + self.seed % 1000, "username": "sim", "email": "fleet@sim.invalid",
            "fullname": "Simulated Account", "balance": bal, "credit": bal, "can_pay": bal > 0,
            "has_billing": True, "billing_creditonly": True, "email_verified": True,
            "host_agreement_accepted": False, "ssh_key": "ssh-ed25519 AAAAsim", "balance_threshold": 0,
            "balance_threshold_enabled": False, "got_signup_credit": True, "user": "sim",
        }

    def _search(self, q: dict[str, Any]) -> list[dict[str, Any]]:
        if not isinstance(q, dict):
            raise ApiError(400, "invalid_args", "search body must be an object")
        special = {"order", "type", "limit", "allocated_storage", "select_cols", "disable_bundling"}
        filters = {k: v for k, v in q.items() if k not in special}
        rows = [dict(o) for o in self.offers.values() if not o["rented"]]
        rows = [r for r in rows if _matches(r, filters)]
        order = q.get("order") or [["score", "desc"]]
        if not isinstance(order, list):
            raise ApiError(400, "invalid_args", "order must be a list of [field, direction]")
        rows = _sort_rows(sorted(rows, key=lambda r: r["id"]),
                          [(o[0], o[1] if len(o) > 1 else "asc") for o in order if o])
        try:
            limit = int(q.get("limit") or 64)
        except (TypeError, ValueError) as e:
            raise ApiError(400, "invalid_args", "limit must be an integer") from e
        if q.get("type") == "bid":
            for r in rows:
                r["is_bid"] = True
        return rows[:max(0, min(limit, 1000))]

    def _rent(self, offer_id: int, body: dict[str, Any], now: float) -> Reply:
        offer = self.offers.get(offer_id)
        if offer is None:
            raise ApiError(404, "no_such_ask", f"Instance type by id {offer_id} is not available.")
        if offer["rented"]:
            raise ApiError(410, "no_such_ask", f"Offer {offer_id} is no longer available: already rented.")
        if not body.get("image"):
            raise ApiError(400, "invalid_args", "image is required")
        disk = body.get("disk") or 10
        try:
            disk = float(disk)
        except (TypeError, ValueError) as e:
            raise ApiError(400, "invalid_args", "disk must be a number") from e
        if disk > offer["disk_space"]:
            raise ApiError(400, "invalid_args", f"disk {disk} GB exceeds the offer's {offer['disk_space']} GB")
        price = body.get("price")
        if price is not None:
            try:
                price = float(price)
            except (TypeError, ValueError) as e:
                raise ApiError(400, "invalid_args", "price must be a number") from e
            if price < offer["min_bid"]:
                raise ApiError(400, "invalid_args",
                               f"bid price {price} is below the offer's min_bid {offer['min_bid']}")
        if self.balance <= 0:
            raise ApiError(402, "insufficient_credit", "Your account balance is too low to rent.")
        env = body.get("env") or {}
        if not isinstance(env, dict):
            raise ApiError(400, "invalid_args", "env must be an object")
        inst = self._create_instance(offer, body, now)
        f = self.faults
        if f.ambiguous_rent and f.applies_to("/api/v0/asks/") and self._fault_rng.random() < f.ambiguous_rent:
            f.injected += 1
            if f.ambiguous_rent_mode == "hang":
                reply = _json_reply(200, {"success": True, "new_contract": inst["id"]})
                reply.delay = f.hang_seconds
                return reply
            return _json_reply(500, {"success": False, "error": "server_error", "msg": "Internal Server Error"})
        return _json_reply(200, {"success": True, "new_contract": inst["id"]})

    def _get(self, iid: int) -> dict[str, Any]:
        inst = self.instances.get(iid)
        if inst is None:
            raise ApiError(404, "no_such_instance", f"Instance {iid} not found.")
        return inst

    def _destroy(self, iid: int, now: float) -> None:
        inst = self._get(iid)
        del self.instances[iid]
        inst["_destroyed_at"] = now
        self.destroyed[iid] = inst
        offer = self.offers.get(inst["_offer_id"])
        if offer is not None:
            offer["rented"] = False
        self._planted.pop(iid, None)

    def _modify(self, iid: int, body: dict[str, Any], now: float) -> dict[str, Any]:
        inst = self._get(iid)
        msgs = []
        if "label" in body:
            inst["label"] = body["label"]
            msgs.append("label set")
        state = body.get("state")
        if state == "stopped":
            if inst["actual_status"] in ("offline",):
                raise ApiError(400, "invalid_state", f"Instance {iid} is offline and cannot be stopped.")
            inst["actual_status"] = inst["intended_status"] = inst["cur_state"] = inst["next_state"] = "stopped"
            inst["status_msg"] = "stopped by user"
            inst["_next"] = inst["_running_since"] = None
            msgs.append("stopping")
        elif state == "running":
            if inst["actual_status"] in ("exited", "offline"):
                raise ApiError(400, "invalid_state",
                               f"Instance {iid} is {inst['actual_status']} and cannot be started.")
            if inst["actual_status"] == "stopped":
                self._restart(inst, now, "starting container")
            msgs.append("starting")
        elif state is not None:
            raise ApiError(400, "invalid_args", f"unknown state {state!r}")
        return {"success": True, "msg": ", ".join(msgs) or "nothing to change"}

    def _reboot(self, iid: int, now: float) -> dict[str, Any]:
        inst = self._get(iid)
        if inst["actual_status"] in ("offline", "stopped"):
            raise ApiError(400, "invalid_state", f"Instance {iid} is {inst['actual_status']}; cannot reboot.")
        self._restart(inst, now, "rebooting")
        return {"success": True, "msg": f"Rebooting instance {iid}."}

    def _request_logs(self, iid: int, body: dict[str, Any], base_url: str, now: float) -> dict[str, Any]:
        inst = self._get(iid)
        try:
            tail = int(body.get("tail") or 1000)
        except (TypeError, ValueError) as e:
            raise ApiError(400, "invalid_args", "tail must be a number") from e
        text = self._planted.get(iid)
        if text is None:
            text = self._synthetic_logs(inst, now)
        lines = text.splitlines(keepends=True)
        text = "".join(lines[-tail:]) if tail > 0 else ""
        self._result_seq += 1
        token = f"{iid}-{self._result_seq}-{self._irng(iid, f'tok{self._result_seq}').randrange(16**8):08x}"
        self._results[token] = {"text": text, "not_ready": 1 + self._result_seq % 2}
        if len(self._results) > 500:
            self._results.pop(next(iter(self._results)))
        return {"success": True, "result_url": f"{base_url}/results/{token}.txt",
                "msg": "Logs requested; fetch result_url when ready."}

    def _result(self, path: str) -> Reply:
        token = path.rsplit("/", 1)[-1].removesuffix(".txt")
        with self._lock:
            res = self._results.get(token)
            if res is None:
                return _text_reply(404, "NoSuchKey")
            if res["not_ready"] > 0:
                res["not_ready"] -= 1
                return _text_reply(404, "NoSuchKey")
            return _text_reply(200, res["text"])

    # -- admin --------------------------------------------------------------------------

    def _admin(self, method: str, path: str, query: dict[str, Any], body: Any) -> Reply:
        body = body if isinstance(body, dict) else {}
        if (method, path) == ("GET", "/_sim/state"):
            return _json_reply(200, self.state())
        if (method, path) == ("GET", "/_sim/requests"):
            since = int(query.get("since") or 0)
            with self._lock:
                return _json_reply(200, {"requests": self.requests[since:]})
        if (method, path) == ("POST", "/_sim/advance"):
            if not isinstance(self._clock, ManualClock):
                raise ApiError(409, "not_manual", "advance needs a simulator started with a ManualClock")
            try:
                seconds = float(body.get("seconds", 0))
            except (TypeError, ValueError) as e:
                raise ApiError(400, "invalid_args", "seconds must be a number") from e
            if seconds < 0:
                raise ApiError(400, "invalid_args", "seconds must be >= 0")
            return _json_reply(200, {"now": self.advance(seconds)})
        if (method, path) == ("POST", "/_sim/plant_logs"):
            if "instance_id" not in body or not isinstance(body.get("text"), str):
                raise ApiError(400, "invalid_args", "need instance_id and text")
            self.plant_logs(_int(body["instance_id"]), body["text"])
            return _json_reply(200, {"success": True})
        if (method, path) == ("POST", "/_sim/outbid"):
            try:
                self.outbid(_int(body.get("instance_id")))
            except LookupError as e:
                raise ApiError(404, "no_such_instance", str(e)) from e
            return _json_reply(200, {"success": True})
        if (method, path) == ("POST", "/_sim/faults"):
            with self._lock:
                try:
                    self.faults.update(body)
                except ValueError as e:
                    raise ApiError(400, "invalid_args", str(e)) from e
                return _json_reply(200, asdict(self.faults))
        if (method, path) == ("GET", "/_sim/faults"):
            return _json_reply(200, asdict(self.faults))
        raise ApiError(404, "not_found", f"no such admin endpoint: {method} {path}")

    def state(self) -> dict[str, Any]:
        with self._lock:
            now = self.tick()
            insts = []
            for inst in self._sorted_instances():
                row = self._public(inst)
                row["behaviour"] = inst["_behaviour"]
                row["cost_so_far"] = round(inst["_cost"], 6)
                insts.append(row)
            return {
                "now": now, "seed": self.seed, "balance": round(self.balance, 6),
                "instances": insts, "destroyed": sorted(self.destroyed),
                "bad_hosts": {str(k): v for k, v in sorted(self.bad_hosts.items())},
                "offers_total": len(self.offers),
                "offers_rented": sum(1 for o in self.offers.values() if o["rented"]),
                "demand": self.demand(), "faults": asdict(self.faults),
                "requests_logged": len(self.requests),
            }

    # -- persistence --------------------------------------------------------------------

    def save(self, path: str | None = None) -> None:
        """Write the state as JSON, atomically (temp file + rename)."""
        path = path or self.state_file
        if not path:
            return
        with self._lock:
            now = self.tick()
            data = {
                "version": STATE_VERSION, "seed": self.seed, "now": now, "balance": self.balance,
                "pending": self.pending, "completed": self.completed, "next_id": self._next_id,
                "instances": list(self.instances.values()),
                "destroyed": list(self.destroyed.values())[-500:],
                "rented_offers": sorted(o["id"] for o in self.offers.values() if o["rented"]),
                "planted": {str(k): v for k, v in self._planted.items()},
            }
        directory = os.path.dirname(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(prefix=".sim-state-", dir=directory)
        try:
            with os.fdopen(fd, "w") as fh:
                json.dump(data, fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def _read_state(self) -> dict[str, Any] | None:
        assert self.state_file is not None
        try:
            with open(self.state_file) as fh:
                data = json.load(fh)
        except FileNotFoundError:
            return None
        if data.get("version", 0) > STATE_VERSION:
            raise ValueError(f"{self.state_file}: state version {data.get('version')} is newer than "
                             f"this simulator ({STATE_VERSION}); upgrade or start with a fresh --state file")
        if data.get("seed") != self.seed:
            raise ValueError(f"{self.state_file}: saved with seed {data.get('seed')}, not {self.seed}; "
                             "pass the same --seed or use another --state file")
        return data

    def _restore(self, data: dict[str, Any]) -> None:
        self.balance = float(data["balance"])
        self.pending = float(data["pending"])
        self.completed = float(data["completed"])
        self._next_id = int(data["next_id"])
        self.instances = {int(i["id"]): i for i in data["instances"]}
        self.destroyed = {int(i["id"]): i for i in data.get("destroyed", [])}
        for oid in data.get("rented_offers", []):
            if oid in self.offers:
                self.offers[oid]["rented"] = True
        self._planted = {int(k): v for k, v in data.get("planted", {}).items()}
        self._last_t = float(data["now"])


def _int(v: Any) -> int:
    try:
        return int(v)
    except (TypeError, ValueError) as e:
        raise ApiError(400, "invalid_args", f"not an id: {v!r}") from e


def _fmt_num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


# --- HTTP server ---------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes; don't wait for delayed ACKs
    server_version = "vast-sim/1"
    sys_version = ""

    def _dispatch(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        srv: _Server = self.server  # type: ignore[assignment]
        headers = {k.lower(): v for k, v in self.headers.items()}
        reply = srv.sim.handle(self.command, self.path, headers, body, srv.base_url)
        if reply.delay > 0 and srv.stopping.wait(reply.delay):
            self.close_connection = True
            return
        try:
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(reply.body)))
            for k, v in reply.headers.items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(reply.body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (a timeout): nothing to answer

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _dispatch

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        return


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr: tuple[str, int], sim: Simulator) -> None:
        super().__init__(addr, _Handler)
        self.sim = sim
        self.stopping = threading.Event()
        self.base_url = f"http://{addr[0]}:{self.server_address[1]}"


class SimServer:
    """Serve a Simulator on 127.0.0.1 in a daemon thread."""

    def __init__(self, sim: Simulator, host: str = "127.0.0.1", port: int = 0) -> None:
        self.sim = sim
        self._server = _Server((host, port), sim)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return self._server.base_url

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> SimServer:
        if self._thread is None:
            self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                            name="vast-sim", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._server.stopping.set()
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> SimServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"SimServer(url={self.url!r})"


def serve_forever(port: int, seed: int, speed: float, state_file: str | None, api_key: str) -> None:
    """Run the simulator until SIGTERM/SIGINT, saving state periodically and on exit."""
    sim = Simulator(seed=seed, speed=speed, api_key=api_key, state_file=state_file)
    server = SimServer(sim, port=port).start()
    stop = threading.Event()

    def _on_signal(signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    print(f"vast.ai simulator listening on {server.url}", flush=True)
    print(f"  VAST_URL={server.url} VAST_API_KEY={api_key}", flush=True)
    print(f"  seed={seed} speed={speed} state={state_file or '(not persisted)'}", flush=True)
    log.info("sim.started", url=server.url, seed=seed, speed=speed, state_file=state_file)
    try:
        while not stop.wait(30.0):
            sim.save()
    finally:
        server.stop()
        sim.save()
        log.info("sim.stopped", url=server.url, instances=len(sim.instances))
