"""A simulator seeded from what the origin log recorded at the fork point.

The instances (id, label, GPU, status, price, age, host) and the balance come from the observation the
origin logged; the demand queue from its demand figures; the offers from every ``search_offers`` table
the origin's model was shown up to the fork point (the newest row of each offer wins), in place of the
simulator's own seeded market (which stays only when the origin logged no search). Offers a logged rent took are marked rented. What the log does not hold
(other offers, host behaviour) comes from the simulator's seed.

Logged prices include storage: the origin searched with its fleet's disk as ``allocated_storage`` and
rented that disk, and vast.ai prices ``dph_total`` as the GPU price plus that storage. The seed keeps the
GPU price (``dph_base``) and the disk apart, so the simulator prices them back to what the origin logged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agent.config import FleetSettings
from agent.context.inputs import manifest_of, recorded
from agent.events import Event
from agent.sim import ManualClock, Simulator
from agent.sim import instances as sim_instances
from agent.store.log import EventLog

DEFAULT_BALANCE = 500.0
_STATUSES = ("created", "loading", "running", "exited", "offline")


@dataclass(frozen=True)
class Seeded:
    """What the simulator was seeded with (recorded in ``fork.started``)."""

    instances: int
    offers: int
    rented_offers: int
    balance: float
    time: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def logged_offers(events: list[Event]) -> dict[int, dict[str, Any]]:
    """Offer rows from ``search_offers`` results: id -> {gpu_name, num_gpus, dph_total, reliability, host_id,
    geolocation}; a later table's row replaces an earlier one."""
    out: dict[int, dict[str, Any]] = {}
    for e in events:
        p = e.payload
        if e.kind != "tool.result" or p.get("name") != "search_offers" or not p.get("ok"):
            continue
        for line in str(p.get("output") or "").splitlines():
            row = _offer_row(line)
            if row is not None:
                out[row["id"]] = row
    return out


def _offer_row(line: str) -> dict[str, Any] | None:
    parts = [x.strip() for x in line.split("|")]
    if len(parts) < 6 or not parts[0].isdigit():
        return None
    gpu, _, n = parts[1].rpartition(" x")
    try:
        return {"id": int(parts[0]), "gpu_name": gpu or parts[1], "num_gpus": int(n) if n.isdigit() else 1,
                "dph_total": float(parts[2]), "reliability": float(parts[3]),
                "host_id": int(parts[4]) if parts[4].isdigit() else 0, "geolocation": parts[5]}
    except ValueError:
        return None


def rented_offer_ids(events: list[Event]) -> set[int]:
    """Offers a logged rent_instance call took (its result was ok)."""
    args: dict[str, int] = {}
    out: set[int] = set()
    for e in events:
        p = e.payload
        if e.kind == "tool.called" and p.get("name") == "rent_instance":
            try:
                args[p["call_id"]] = int(json.loads(p["arguments"] or "{}").get("offer_id"))
            except (ValueError, TypeError, AttributeError):
                continue
        elif e.kind == "tool.result" and p.get("name") == "rent_instance" and p.get("ok") and p["call_id"] in args:
            out.add(args[p["call_id"]])
    return out


def logged_disk_gb(origin: EventLog, seq: int) -> float:
    """The fleet's disk (GB) in the policy of the origin's last request at or before ``seq``; the
    configuration's default when the log records none."""
    req = next(iter(origin.read(0, until_seq=seq, kinds=["model.request"], newest_first=True, limit=1)), None)
    texts = recorded(origin, seq)
    policy = texts.get(str(manifest_of(req, texts).get("policy_hash"))) if req is not None else None
    disk = ((policy or {}).get("fleet_template") or {}).get("disk_gb") if isinstance(policy, dict) else None
    return float(disk) if isinstance(disk, int | float) else FleetSettings.disk_gb


def _gpu_price(dph_total: float, disk_gb: float) -> float:
    """The GPU price under a ``dph_total`` that includes ``disk_gb`` GB of storage (kept to 6 places, so
    the simulator's 4-place price of it with that storage is ``dph_total`` again)."""
    return round(max(0.0, dph_total - sim_instances.storage_price(disk_gb)), 6)


def _template(sim: Simulator, gpu_name: str) -> dict[str, Any]:
    same = [o for o in sim.offers.values() if o["gpu_name"] == gpu_name]
    return dict(min(same or sim.offers.values(), key=lambda o: o["id"]))


def _offer(sim: Simulator, row: dict[str, Any], disk_gb: float) -> dict[str, Any]:
    """A logged offer row: priced with ``disk_gb`` of storage, and with at least that much disk (the
    origin was shown only offers its disk fits on)."""
    o = _template(sim, row["gpu_name"])
    n = row["num_gpus"]
    o.update({"id": row["id"], "ask_contract_id": row["id"], "bundle_id": row["id"] + 7,
              "gpu_name": row["gpu_name"], "num_gpus": n, "gpu_total_ram": o["gpu_ram"] * n,
              "disk_space": max(float(o["disk_space"]), disk_gb), "dph_total": row["dph_total"],
              "dph_base": _gpu_price(row["dph_total"], disk_gb), "min_bid": round(row["dph_total"] * 0.5, 4),
              "reliability": row["reliability"], "reliability2": row["reliability"], "host_id": row["host_id"],
              "geolocation": row["geolocation"], "rented": False})
    return o


def _place(sim: Simulator, obs_inst: dict[str, Any], now: float, offer_id: int, disk_gb: float) -> None:
    """One observed instance, as the origin saw it (renting the fleet's disk), on a synthetic (rented)
    offer of its own."""
    dph = float(obs_inst.get("dph") or 0.0)
    offer = _offer(sim, {"id": offer_id, "gpu_name": obs_inst.get("gpu_name") or "?",
                         "num_gpus": int(obs_inst.get("num_gpus") or 1), "dph_total": dph,
                         "reliability": 0.99, "host_id": int(obs_inst.get("host_id") or 0), "geolocation": "?"},
                   disk_gb)
    offer["rented"] = True
    sim.offers[offer_id] = offer
    behaviour = sim.bad_hosts.get(offer["host_id"], "good")
    iid = int(obs_inst["id"])
    inst = sim_instances.new_instance(sim.seed, iid, offer, {"label": obs_inst.get("label") or None, "disk": disk_gb},
                                      now, behaviour)
    inst["dph_total"] = dph  # exactly the logged price (GPU plus the disk's storage)
    inst["start_date"] = now - float(obs_inst.get("age_s") or 0.0)
    status = obs_inst.get("status")
    if status in _STATUSES:
        sim_instances.transition(sim.seed, inst, str(status), now)
    elif status == "stopped":
        sim_instances.stop(inst, "stopped")
    sim.instances[iid] = inst


def seeded_simulator(origin: EventLog, seq: int, observation: dict[str, Any], *, seed: int, time: float,
                     api_key: str, disk_gb: float | None = None, clock: ManualClock | None = None,
                     effects: list[Event] | None = None) -> tuple[Simulator, ManualClock, Seeded]:
    """A simulator on a manual clock at ``time`` holding what the origin logged up to ``seq``; ``disk_gb``
    is the fleet's disk the origin searched and rented with (by default, the one its policy recorded).
    ``clock``: the manual clock to run on (a fork switching simulators keeps its clock); ``effects``: the
    ``tool.result`` events of rents and destroys done since ``observation`` (a tick's earlier steps)."""
    disk = logged_disk_gb(origin, seq) if disk_gb is None else float(disk_gb)
    clock = clock if clock is not None else ManualClock(time)
    balance = observation.get("balance")
    sim = Simulator(seed=seed, clock=clock, api_key=api_key,
                    start_balance=float(balance) if isinstance(balance, int | float) else DEFAULT_BALANCE)
    events = list(origin.read(0, until_seq=seq, kinds=["tool.called", "tool.result"]))
    offers = logged_offers(events)
    logged = {row["id"]: _offer(sim, row, disk) for row in offers.values()}
    if logged:
        # The market the origin saw, not the seed's: a search in the fork shows the offers the origin's model
        # was shown (cheaper offers of the seed's own would change what a no-change fork rents first).
        for oid in [oid for oid, o in sim.offers.items() if not o.get("rented")]:
            del sim.offers[oid]
    sim.offers.update(logged)
    taken = rented_offer_ids(events)
    for oid in taken:
        if oid in sim.offers:
            sim.offers[oid]["rented"] = True
    insts = [i for i in observation.get("instances") or [] if isinstance(i.get("id"), int)]
    spare = max([*sim.offers, 0]) + 1
    for n, i in enumerate(insts):
        _place(sim, i, time, spare + n, disk)
    sim.reserve_ids(max([i["id"] for i in insts], default=0))
    _apply(sim, effects or [], offers, time, disk)
    demand = observation.get("demand") or {}
    if isinstance(demand.get("pending"), int | float):
        sim.pending = float(demand["pending"])
    if isinstance(demand.get("completed"), int | float):
        sim.completed = float(demand["completed"])
    return sim, clock, Seeded(len(insts), len(offers), len(taken), sim.balance, time)


def _apply(sim: Simulator, results: list[Event], offers: dict[int, dict[str, Any]], now: float, disk_gb: float) -> None:
    """Rents and destroys logged after the observation, done to the seeded simulator: a rented instance on
    the offer it took (created just now), a destroyed one gone."""
    for e in results:
        eff = e.payload.get("effect") or {}
        iid = eff.get("instance_id")
        if not e.payload.get("ok") or not isinstance(iid, int):
            continue
        if eff.get("type") == "destroyed":
            gone = sim.instances.pop(iid, None)
            if gone is not None:
                sim.destroyed[iid] = gone
        elif eff.get("type") == "rented" and iid not in sim.instances:
            row = offers.get(int(eff.get("offer_id") or 0)) or {}
            _place(sim, {"id": iid, "label": eff.get("label"), "gpu_name": eff.get("gpu_name") or row.get("gpu_name"),
                         "num_gpus": row.get("num_gpus") or 1, "dph": eff.get("dph") or row.get("dph_total") or 0.0,
                         "host_id": row.get("host_id") or 0, "status": "created"},
                   now, max([*sim.offers, 0]) + 1, disk_gb)
            sim.reserve_ids(iid)
