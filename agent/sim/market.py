"""The GPU market: offers on hosts, their prices, and which hosts misbehave.

A seed fixes everything: the hosts, their places and reliability, each offer's price and
hardware, and which 8 of the 24 hosts are bad (each with one of BEHAVIOURS). Every GPU model
has at least one single-GPU offer on a good host and one on a bad host, and every behaviour
has a single-GPU offer, so tests can always find what they ask for.

Disks differ: about a third of the offers have less than 40 GB (8-32 GB), as small hosts do, but
every GPU model keeps a single-GPU offer with 50 GB or more on a good host and on a bad one. As on
vast.ai, an offer's `dph_total` includes storage: the GPU price (`dph_base`) plus the search's
`allocated_storage` GB (5 when the search names none) at `storage_cost` $/GB/month, and a search
with `allocated_storage` only shows offers with at least that much disk. Each host sets its own
storage price and its own bandwidth prices (`inet_up_cost`/`inet_down_cost`, $/GB), as on vast.ai,
where bandwidth is billed per GB on top of `dph_total`.

Each offer carries `duration`, the seconds until its host's listing ends (7-90 days here; the simulated hosts
keep extending their listings, so an offer's duration stays put), and `end_date` in searches; a contract rented
from it ends then (see agent/sim/simulator.py).

Interruptible (bid) prices move: each offer's `min_bid` follows the market (`bid_level`, a seeded
walk per GPU model over simulated time, between 0.45 and 1.0 of the on-demand price); a running
bid instance whose bid is below its offer's `min_bid` now is outbid: stopped, not destroyed, and it starts
again by itself once its bid holds the GPU again (the market falls back, or its owner raises the bid).

The market can be changed from outside (agent/sim/admin.py): an offer's or a GPU model's price set
or multiplied (`set_price`; instances already rented keep the price they were rented at, as on
vast.ai), offers withdrawn and brought back or new ones listed (`withdraw`, `restore`, `add_offer`),
and a host taken offline, which withdraws its offers until it is back (`offline_hosts`), as a machine in a
maintenance window does its own (`down_machines`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from agent.sim.query import matches, sort_rows
from agent.sim.replies import ApiError

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
DEFAULT_ALLOCATED_STORAGE = 5.0
SMALL_DISKS = (8.0, 16.0, 24.0, 32.0)


STORAGE_PRICES = (0.05, 0.08, 0.10, 0.15, 0.20, 0.30)  # $/GB/month: each host sets its own
INET_PRICES = (0.0, 0.001, 0.002, 0.005, 0.01, 0.02)  # $/GB up or down: each host sets its own


def with_storage(dph_base: float, disk_gb: float, storage_cost: float = STORAGE_PER_GB_MONTH) -> float:
    """dph_total for ``disk_gb`` GB of storage at ``storage_cost`` $/GB/month on top of the GPU price, as
    vast.ai prices it."""
    return round(dph_base + disk_gb * storage_cost / 730.0, 4)


class Market:
    """The offers (by id) and the bad hosts (host id -> behaviour) of one seed."""

    def __init__(self, seed: int) -> None:
        self.offers: dict[int, dict[str, Any]] = {}
        self.bad_hosts: dict[int, str] = {}
        self.withdrawn: set[int] = set()  # offers taken off the market (still known, so they can return)
        self.offline_hosts: set[int] = set()  # hosts down: none of their offers is listed or rentable
        self.down_machines: set[int] = set()  # machines in a maintenance window: nor theirs, until it is over
        self._build(seed)
        self._host_prices(seed)
        self._list_price = {oid: o["dph_base"] for oid, o in self.offers.items()}
        self._added = random.Random(f"{seed}:added-offers")
        self.seed = seed
        self.bid_market = True  # min_bid follows bid_level over time; False pins each offer's min_bid

    def bid_level(self, gpu_name: str, t: float) -> float:
        """How far above its quiet level the bid market for ``gpu_name`` is at simulated time ``t``: 1.0 in
        most hours, higher when other renters bid up (a seeded draw per GPU model and hour)."""
        if not self.bid_market:
            return 1.0
        r = random.Random(f"{self.seed}:bid:{gpu_name}:{int(t // 3600)}")
        return 1.0 if r.random() < 0.7 else round(r.uniform(1.05, 1.6), 3)

    def min_bid(self, offer: dict[str, Any], t: float | None) -> float:
        """The lowest bid that holds ``offer``'s GPUs at ``t``: its quiet min_bid times the market level,
        never above the on-demand price."""
        if t is None:
            return float(offer["min_bid"])
        return round(min(float(offer["dph_total"]), float(offer["min_bid"]) * self.bid_level(offer["gpu_name"], t)), 4)

    def listed(self, offer: dict[str, Any]) -> bool:
        """On the market now: not rented, not withdrawn, its host up and its machine not in maintenance."""
        return not offer["rented"] and offer["id"] not in self.withdrawn and not self._down(offer)

    def _down(self, offer: dict[str, Any]) -> bool:
        return offer["host_id"] in self.offline_hosts or offer.get("machine_id") in self.down_machines

    def set_price(self, dph: float | None = None, multiplier: float | None = None, *,
                  offer_id: int | None = None, gpu_name: str | None = None) -> list[int]:
        """Price one offer, or every offer of a GPU model, at `dph` $/h per GPU or at `multiplier` x its
        list price (1.0 restores it); returns the offers changed. LookupError when none matches."""
        if offer_id is not None:
            ids = [offer_id] if offer_id in self.offers else []
        else:
            ids = sorted(oid for oid, o in self.offers.items() if o["gpu_name"] == gpu_name)
        if not ids:
            raise LookupError(f"no offer {offer_id}" if offer_id is not None else f"no offer of GPU {gpu_name!r}")
        for oid in ids:
            o = self.offers[oid]
            base = dph * o["num_gpus"] if dph is not None else self._list_price[oid] * float(multiplier or 1.0)
            o["dph_base"] = round(base, 4)
            o["dph_total"] = with_storage(base, DEFAULT_ALLOCATED_STORAGE, o["storage_cost"])
            o["min_bid"] = round(o["dph_total"] * 0.55, 4)
            o["dlperf_per_dphtotal"] = round(o["dlperf"] / o["dph_total"], 2)
            o["score"] = round(o["dlperf"] / o["dph_total"] * o["reliability"] * 4, 2)
        return ids

    def add_offer(self, gpu_name: str, *, host_id: int | None = None, num_gpus: int = 1,
                  dph: float | None = None) -> int:
        """List a new offer of `gpu_name` (on `host_id`, or a good host), `dph` $/h per GPU (default the
        model's list price); returns its id."""
        model = MODEL_BY_NAME.get(gpu_name)
        if model is None:
            raise LookupError(f"unknown GPU model {gpu_name!r}; one of {', '.join(MODEL_BY_NAME)}")
        hosts = sorted({o["host_id"] for o in self.offers.values()})
        good = [h for h in hosts if h not in self.bad_hosts]
        host = host_id if host_id is not None else self._added.choice(good)
        like = next((o for o in sorted(self.offers.values(), key=lambda o: o["id"])
                     if o["host_id"] == host), None) or self.offers[min(self.offers)]
        oid = max(max(self.offers) + 1, 10_000_000) + self._added.randrange(1, 50)
        per_gpu = model.dph_per_gpu if dph is None else dph
        dph_total = with_storage(per_gpu * num_gpus, DEFAULT_ALLOCATED_STORAGE, like["storage_cost"])
        dlperf = round(model.dlperf_per_gpu * num_gpus, 2)
        rel = like["reliability"]
        self.offers[oid] = {
            **like, "id": oid, "ask_contract_id": oid, "bundle_id": oid + 7,
            "machine_id": 60_000 + self._added.randrange(0, 30_000), "host_id": host, "num_gpus": num_gpus,
            "gpu_name": model.name, "gpu_ram": model.gpu_ram_mb, "gpu_total_ram": model.gpu_ram_mb * num_gpus,
            "cpu_cores_effective": float(8 * num_gpus), "cpu_ram": 64_000 * num_gpus, "disk_space": 100.0,
            "dph_base": round(per_gpu * num_gpus, 4), "dph_total": dph_total,
            "min_bid": round(dph_total * 0.55, 4), "cuda_max_good": model.cuda, "dlperf": dlperf,
            "dlperf_per_dphtotal": round(dlperf / dph_total, 2), "score": round(dlperf / dph_total * rel * 4, 2),
            "total_flops": round(model.total_flops * num_gpus, 1), "rented": False,
            "compute_cap": 890 if "40" in model.name else 800,
        }
        self._list_price[oid] = self.offers[oid]["dph_base"]
        return oid

    def _build(self, seed: int) -> None:
        rng = random.Random(f"{seed}:market")
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
            dph = with_storage(per_gpu * n, DEFAULT_ALLOCATED_STORAGE)
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
        self._small_disks(seed)

    def _host_prices(self, seed: int) -> None:
        """Each host's storage and bandwidth prices, applied to its offers (dph_total re-priced)."""
        rng = random.Random(f"{seed}:host-prices")
        for host in sorted({o["host_id"] for o in self.offers.values()}):
            storage, up, down = rng.choice(STORAGE_PRICES), rng.choice(INET_PRICES), rng.choice(INET_PRICES)
            for o in self.offers.values():
                if o["host_id"] == host:
                    o["storage_cost"], o["inet_up_cost"], o["inet_down_cost"] = storage, up, down
                    o["dph_total"] = with_storage(o["dph_base"], DEFAULT_ALLOCATED_STORAGE, storage)
                    o["dlperf_per_dphtotal"] = round(o["dlperf"] / o["dph_total"], 2)
                    o["score"] = round(o["dlperf"] / o["dph_total"] * o["reliability"] * 4, 2)

    def _small_disks(self, seed: int) -> None:
        """About a third of the offers get a small disk; each GPU model keeps its cheapest big-disk
        single-GPU offer on a good host and on a bad host, and every behaviour one big-disk single."""
        rng = random.Random(f"{seed}:disks")
        keep: set[int] = set()
        singles = sorted((o for o in self.offers.values() if o["num_gpus"] == 1),
                         key=lambda o: (o["dph_total"], o["id"]))
        for model in GPU_MODELS:
            for bad in (False, True):
                first = next((o for o in singles if o["gpu_name"] == model.name
                              and (o["host_id"] in self.bad_hosts) == bad), None)
                if first is not None:
                    keep.add(first["id"])
        for behaviour in BEHAVIOURS:
            first = next(o for o in singles if self.bad_hosts.get(o["host_id"]) == behaviour)
            keep.add(first["id"])
        for oid in sorted(self.offers):
            if oid not in keep and rng.random() < 0.35:
                self.offers[oid]["disk_space"] = rng.choice(SMALL_DISKS)

    def find_offer(self, gpu_name: str | None = None, *, good: bool = True, num_gpus: int | None = 1,
                   behaviour: str | None = None) -> dict[str, Any]:
        """The cheapest unrented offer matching; `good=False` picks one on a bad host."""
        rows = sorted(self.offers.values(), key=lambda o: (o["dph_total"], o["id"]))
        for o in rows:
            bad = o["host_id"] in self.bad_hosts
            if not self.listed(o) or (gpu_name and o["gpu_name"] != gpu_name):
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

    def search(self, q: dict[str, Any], now: float | None = None) -> list[dict[str, Any]]:
        """Unrented offers matching the filters in `q`, in its `order` (default best score first); `min_bid`
        as the bid market stands at `now`."""
        if not isinstance(q, dict):
            raise ApiError(400, "invalid_args", "search body must be an object")
        special = {"order", "type", "limit", "allocated_storage", "select_cols", "disable_bundling"}
        filters = {k: v for k, v in q.items() if k not in special}
        try:
            storage = float(q.get("allocated_storage") or DEFAULT_ALLOCATED_STORAGE)
        except (TypeError, ValueError) as e:
            raise ApiError(400, "invalid_args", "allocated_storage must be a number") from e
        rows = [dict(o) for o in self.offers.values() if self.listed(o) and o["disk_space"] >= storage]
        for r in rows:
            r["min_bid"] = self.min_bid(r, now)
            r["dph_total"] = with_storage(r["dph_base"], storage, r["storage_cost"])
            if now is not None and r.get("duration") is not None:
                # The date the host's listing (and any contract rented from it) ends.
                r["end_date"] = round(now + float(r["duration"]), 1)
        rows = [r for r in rows if matches(r, filters)]
        order = q.get("order") or [["score", "desc"]]
        if not isinstance(order, list):
            raise ApiError(400, "invalid_args", "order must be a list of [field, direction]")
        rows = sort_rows(sorted(rows, key=lambda r: r["id"]),
                         [(o[0], o[1] if len(o) > 1 else "asc") for o in order if o])
        try:
            limit = int(q.get("limit") or 64)
        except (TypeError, ValueError) as e:
            raise ApiError(400, "invalid_args", "limit must be an integer") from e
        if q.get("type") == "bid":
            for r in rows:
                r["is_bid"] = True
        return rows[:max(0, min(limit, 1000))]

    def check_rent(self, offer_id: int, body: dict[str, Any], now: float | None = None) -> dict[str, Any]:
        """The offer `body` may rent: image, disk and bid price checked; ApiError (404, 410, 400) if not."""
        offer = self.offers.get(offer_id)
        if offer is None or offer_id in self.withdrawn or self._down(offer):
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
            floor = self.min_bid(offer, now)
            if price < floor:
                raise ApiError(400, "invalid_args", f"bid price {price} is below the offer's min_bid {floor}")
        return offer
