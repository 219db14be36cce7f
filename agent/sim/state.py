"""The simulator's state on disk (`--state FILE`) and the snapshot GET /_sim/state serves.

The file is JSON written atomically (temp file + rename). It keeps what the seed cannot
rebuild: the clock, balance, queue, instances, the last 500 destroyed ones, which offers
are rented and the planted logs. A file from a newer simulator, or saved with another
seed, is refused rather than half-read.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent.sim.simulator import Simulator

STATE_VERSION = 1


def snapshot(sim: Simulator, now: float) -> dict[str, Any]:
    insts = []
    for inst in sim._sorted_instances():
        row = sim._public(inst)
        row["behaviour"] = inst["_behaviour"]
        row["cost_so_far"] = round(inst["_cost"], 6)
        insts.append(row)
    return {
        "now": now, "seed": sim.seed, "balance": round(sim.balance, 6),
        "instances": insts, "destroyed": sorted(sim.destroyed),
        "bad_hosts": {str(k): v for k, v in sorted(sim.bad_hosts.items())},
        "offers_total": len(sim.offers),
        "offers_rented": sum(1 for o in sim.offers.values() if o["rented"]),
        "demand": sim.demand(), "faults": asdict(sim.faults),
        "requests_logged": len(sim.requests),
    }


def to_saved(sim: Simulator, now: float) -> dict[str, Any]:
    return {
        "version": STATE_VERSION, "seed": sim.seed, "now": now, "balance": sim.balance,
        "pending": sim.pending, "completed": sim.completed, "next_id": sim._next_id,
        "instances": list(sim.instances.values()),
        "destroyed": list(sim.destroyed.values())[-500:],
        "rented_offers": sorted(o["id"] for o in sim.offers.values() if o["rented"]),
        "planted": {str(k): v for k, v in sim._planted.items()},
        "price_increases": list(sim.price_increases.values()),
        "maintenances": list(sim.maintenances),
    }


def write(path: str, data: dict[str, Any]) -> None:
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


def read(path: str, seed: int) -> dict[str, Any] | None:
    """The saved state, or None when there is no file yet."""
    try:
        with open(path) as fh:
            data: dict[str, Any] = json.load(fh)
    except FileNotFoundError:
        return None
    if data.get("version", 0) > STATE_VERSION:
        raise ValueError(f"{path}: state version {data.get('version')} is newer than "
                         f"this simulator ({STATE_VERSION}); upgrade or start with a fresh --state file")
    if data.get("seed") != seed:
        raise ValueError(f"{path}: saved with seed {data.get('seed')}, not {seed}; "
                         "pass the same --seed or use another --state file")
    return data


def restore(sim: Simulator, data: dict[str, Any]) -> None:
    sim.balance = float(data["balance"])
    sim.pending = float(data["pending"])
    sim.completed = float(data["completed"])
    sim._next_id = int(data["next_id"])
    sim.instances = {int(i["id"]): i for i in data["instances"]}
    sim.destroyed = {int(i["id"]): i for i in data.get("destroyed", [])}
    for oid in data.get("rented_offers", []):
        if oid in sim.offers:
            sim.offers[oid]["rented"] = True
    sim._planted = {int(k): v for k, v in data.get("planted", {}).items()}
    sim.price_increases = {int(r["pending_price_increase_id"]): r for r in data.get("price_increases", [])}
    sim.maintenances = list(data.get("maintenances", []))
    sim._last_t = float(data["now"])
