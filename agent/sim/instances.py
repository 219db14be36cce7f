"""Rented instances: the record, its lifecycle, billing, and the changes a user can make.

An instance is a dict shaped like the vast.ai API's, plus private keys (leading `_`) the
API never shows: the offer it came from, its host's behaviour, the next scheduled
transition, when it started running, its cost and jobs so far. Lifecycle: created ->
loading -> running, unless the host misbehaves (BEHAVIOURS): oci_fail stays `created` with
the OCI error, stuck_loading never leaves `loading`, exits ends `exited` a while after running,
and offline loses its heartbeat (`unknown`) and then its host (`offline`). A reboot goes through
`rebooting`. dph_total includes the storage rented (`disk` GB at the offer's storage price). Timings are drawn from RNGs seeded by (seed, instance id, what), so a seed fixes them.
"""

from __future__ import annotations

import random
from typing import Any

from agent.sim.market import MODEL_BY_NAME, STORAGE_PER_GB_MONTH
from agent.sim.replies import ApiError

Instance = dict[str, Any]

OCI_MSG = (
    "Error response from daemon: failed to create task for container: failed to create shim task: "
    "OCI runtime create failed: runc create failed: unable to start container process: "
    "error during container init: nvidia-container-cli: initialization error: driver rpc error"
)


def irng(seed: int, iid: int, what: str) -> random.Random:
    return random.Random(f"{seed}:{iid}:{what}")


SCHEDULING_MSG = "scheduling: waiting for the machine to take the instance"
SCHEDULING_S = (30.0, 240.0)  # vast.ai: a new rent waits 0.5-4 min for its machine...
LOADING_S = (150.0, 420.0)  # ...then pulls its image and starts for 2.5-7 min
STOPPING_S = (10.0, 40.0)  # a stop asked takes effect 10-40 s later
QUICK_BOOT_S, QUICK_LOADING_S = (3.0, 12.0), (30.0, 120.0)  # realism.quick: the instant market
DRAINING = "-draining"  # a label ending so: the workers finish the job in hand and take no new one


def new_instance(seed: int, iid: int, offer: dict[str, Any], body: dict[str, Any], now: float,
                 behaviour: str, *, quick: bool = True, stuck: bool = False, traffic_scale: float = 1.0) -> Instance:
    """The record of instance `iid` renting `offer` with a rent `body`, booting from `now`. Unless `quick`, it
    waits in scheduling (actual_status null) first, for good when `stuck`, and loads for minutes. It moves
    `traffic_scale` x the GB an hour drawn for it (the workload's data volume)."""
    env = body.get("env") or {}
    price = body.get("price")
    disk = float(body.get("disk") or 10.0)
    ssh_rng = irng(seed, iid, "ssh")
    inst: Instance = {
        "id": iid, "label": body.get("label"), "machine_id": offer["machine_id"],
        "host_id": offer["host_id"], "bundle_id": offer["bundle_id"], "actual_status": None,
        "intended_status": "running", "cur_state": "running", "next_state": "running",
        "status_msg": None, "num_gpus": offer["num_gpus"], "gpu_name": offer["gpu_name"],
        "gpu_ram": offer["gpu_ram"], "gpu_totalram": offer["gpu_total_ram"], "gpu_util": None,
        "gpu_temp": None, "dph_base": offer["dph_base"],
        "dph_total": float(price) if price is not None else round(
            offer["dph_base"] + storage_price(disk, offer.get("storage_cost", STORAGE_PER_GB_MONTH)), 4),
        "is_bid": price is not None, "min_bid": offer["min_bid"],
        "end_date": float(now) + float(offer.get("duration") or 0.0) if offer.get("duration") else None,
        "storage_cost": offer.get("storage_cost", STORAGE_PER_GB_MONTH), "start_date": float(now),
        "inet_up_cost": offer.get("inet_up_cost", 0.0), "inet_down_cost": offer.get("inet_down_cost", 0.0),
        "inet_up_billed": 0.0, "inet_down_billed": 0.0,
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
        "driver_version": offer["driver_version"], "dlperf": offer.get("dlperf"), "uptime_mins": None, "template_id": None,
        "template_hash_id": None, "template_name": None, "client_run_time": 0.0,
        "_offer_id": offer["id"], "_behaviour": behaviour, "_next": None, "_running_since": None,
        "_cost": 0.0, "_jobs": 0.0, "_traffic_cost": 0.0,
        "_up_gbph": round(traffic_scale * irng(seed, iid, "traffic").uniform(*UP_GBPH), 3),
        "_down_gbph": round(traffic_scale * irng(seed, iid, "traffic-down").uniform(*DOWN_GBPH), 3),
    }
    inst["_quick"] = quick
    if quick:
        schedule(inst, now + irng(seed, iid, "boot").uniform(*QUICK_BOOT_S), "created")
        return inst
    inst["status_msg"] = SCHEDULING_MSG
    if not stuck:
        schedule(inst, now + irng(seed, iid, "boot").uniform(*SCHEDULING_S), "created")
    return inst


# --- lifecycle ---------------------------------------------------------------------------


def schedule(inst: Instance, at: float, status: str) -> None:
    inst["_next"] = [float(at), status]


def transition(seed: int, inst: Instance, status: str, t: float) -> None:
    """Enter `status` at time t and schedule what follows it for this host's behaviour."""
    r = irng(seed, inst["id"], f"{status}:{t:.3f}")
    beh = inst["_behaviour"]
    inst["_next"] = None
    inst["actual_status"] = status
    if status == "created":
        if beh == "oci_fail":
            inst["status_msg"] = OCI_MSG
        else:
            inst["status_msg"] = "Creating container"
            schedule(inst, t + r.uniform(5.0, 20.0), "loading")
    elif status == "loading":
        inst["status_msg"] = f"Pulling image {inst['image_uuid']}: downloading layers"
        if beh == "oci_fail":
            inst["actual_status"], inst["status_msg"] = "created", OCI_MSG
        elif beh != "stuck_loading":
            pull = float(inst.pop("_pull_s", 0.0) or 0.0)  # a large image's first pull (realism.image_pull)
            schedule(inst, t + pull + r.uniform(*(QUICK_LOADING_S if inst.get("_quick", True) else LOADING_S)),
                     "running")
    elif status == "running":
        inst["status_msg"] = f"success, running {inst['image_uuid']}"
        inst["_running_since"] = t
        if beh == "exits":
            schedule(inst, t + r.uniform(300.0, 1200.0), "exited")
        elif beh == "offline":
            schedule(inst, t + r.uniform(600.0, 1800.0), "unknown")
    elif status == "exited":
        inst["status_msg"] = "container exited with code 137 (out of memory)"
        inst["_running_since"] = None
    elif status == "unknown":
        inst["status_msg"] = "no heartbeat from the host"
        inst["_running_since"] = None
        schedule(inst, t + r.uniform(60.0, 300.0), "offline")
    elif status == "offline":
        inst["status_msg"] = "host machine is offline: no heartbeat"
        inst["_running_since"] = None
    elif status == "stopped":  # a stop asked earlier takes effect
        stop(inst, "stopped by user")
    elif status == "rebooting":
        inst["status_msg"] = "rebooting"
        inst["_running_since"] = None
        schedule(inst, t + r.uniform(5.0, 15.0), "loading")


def restart(seed: int, inst: Instance, t: float, msg: str, *, reboot: bool = False) -> None:
    """After a start or reboot: (rebooting,) loading, then running unless the host misbehaves."""
    r = irng(seed, inst["id"], f"restart:{t:.3f}")
    inst["_running_since"] = None
    inst.pop("_credit_stop", None)
    inst["intended_status"] = inst["cur_state"] = inst["next_state"] = "running"
    if reboot:
        transition(seed, inst, "rebooting", t)
        return
    if inst["_behaviour"] == "oci_fail":
        inst["actual_status"], inst["status_msg"], inst["_next"] = "created", OCI_MSG, None
        return
    inst["actual_status"], inst["status_msg"] = "loading", msg
    inst["_next"] = None
    if inst["_behaviour"] != "stuck_loading":
        schedule(inst, t + r.uniform(10.0, 40.0), "running")


def stop(inst: Instance, msg: str, *, intended: bool = True) -> None:
    """Stopped with `msg`; `intended=False` leaves the user's intended status alone (an outbid)."""
    inst["actual_status"] = inst["cur_state"] = "stopped"
    if intended:
        inst["intended_status"] = "stopped"
    inst["status_msg"] = msg
    inst["_next"] = inst["_running_since"] = None


CREDIT_MSG = "stopped: insufficient credit; add credit and start the instance again"


EXPIRED_MSG = "contract ended: the instance expired at its end date; it can no longer start"


def expire(inst: Instance) -> None:
    """What vast.ai does at a contract's end_date: the instance stops and can never start again; its disk stays
    and its storage is still billed until it is destroyed ("expired instances still pay storage fees, but can
    not start", vast.ai's host docs)."""
    if inst["actual_status"] not in ("exited", "offline"):  # those never run again anyway
        stop(inst, EXPIRED_MSG, intended=False)
    inst["_expired"] = True


def credit_stop(inst: Instance) -> None:
    """What vast.ai does to every instance when the account's credit reaches $0: stopped, the disk kept and
    its storage still billed (the balance goes negative), and not started again by itself after a top-up."""
    stop(inst, CREDIT_MSG)
    inst["_credit_stop"] = True


# --- billing -----------------------------------------------------------------------------


MB_PER_GB = 1024.0  # inet_up_billed / inet_down_billed count MB, as the official CLI's display reads them


def storage_price(disk_gb: float, storage_cost: float = STORAGE_PER_GB_MONTH) -> float:
    """$/h of ``disk_gb`` GB of storage at ``storage_cost`` $/GB/month, as vast.ai adds it to dph_total."""
    return float(disk_gb) * float(storage_cost) / 730.0


UP_GBPH = (0.2, 3.0)  # GB an hour a running instance sends: drawn per instance, evenly between these
DOWN_GBPH = (0.5, 6.0)  # ...and receives


def true_per_job(o: dict[str, Any], traffic_scale: float = 1.0) -> float:
    """What an offer or instance really costs per job it can do: its $/h and the traffic its host bills on
    average (the middle of each draw, times the simulator's ``traffic_scale``), over what its GPUs really do."""
    up, down = float(o.get("inet_up_cost") or 0.0), float(o.get("inet_down_cost") or 0.0)
    traffic = traffic_scale * (sum(UP_GBPH) / 2 * up + sum(DOWN_GBPH) / 2 * down)
    return float((o["dph_total"] + traffic) / (MODEL_BY_NAME[o["gpu_name"]].jobs_per_h_per_gpu * o["num_gpus"]))


def traffic(inst: Instance, dt: float) -> float:
    """Bill ``dt`` running seconds of traffic: the counters grow (MB) and the charge ($) is returned. vast.ai
    bills bandwidth per GB at the host's inet_up_cost / inet_down_cost, on top of dph_total."""
    up, down = inst.get("_up_gbph", 0.0) * dt / 3600.0, inst.get("_down_gbph", 0.0) * dt / 3600.0
    inst["inet_up_billed"] = inst.get("inet_up_billed", 0.0) + up * MB_PER_GB
    inst["inet_down_billed"] = inst.get("inet_down_billed", 0.0) + down * MB_PER_GB
    cost = float(up * float(inst.get("inet_up_cost") or 0.0) + down * float(inst.get("inet_down_cost") or 0.0))
    inst["_traffic_cost"] = inst.get("_traffic_cost", 0.0) + cost
    return cost


def storage_per_h(inst: Instance) -> float:
    return float(inst["disk_space"] * inst["storage_cost"] / 730.0)


def jobs_per_h(inst: Instance) -> float:
    model = MODEL_BY_NAME.get(inst["gpu_name"])
    return float((model.jobs_per_h_per_gpu if model else 5.0) * inst["num_gpus"])


def advance(seed: int, inst: Instance, t0: float, t1: float) -> tuple[float, list[float]]:
    """Bill and transition one instance over [t0, t1]: (its running seconds, the charges in order).

    Running time bills at dph_total plus its traffic (per GB), anything else at the storage rate.
    """
    t, running, charges = t0, 0.0, []
    while True:
        nxt = inst["_next"]
        seg_end = t1 if nxt is None or nxt[0] >= t1 else max(nxt[0], t)
        dt = seg_end - t
        if dt > 0:
            if inst["actual_status"] == "running":
                cost = inst["dph_total"] * dt / 3600.0 + traffic(inst, dt)
                running += dt
            else:
                cost = storage_per_h(inst) * dt / 3600.0
            charges.append(cost)
            inst["_cost"] += cost
        t = seg_end
        if nxt is not None and nxt[0] <= t:
            transition(seed, inst, nxt[1], nxt[0])
            continue
        if t >= t1:
            return running, charges


# --- what the API shows and changes ----------------------------------------------------------


def draining(inst: Instance) -> bool:
    return str(inst.get("label") or "").endswith(DRAINING)


def work_seconds(seed: int, inst: Instance, secs: float) -> float:
    """Of ``secs`` running seconds, those spent on jobs: all of them, unless the instance is draining (labelled
    ``<label>-draining``): then only what is left of the job it held when the label was set, after which it
    is idle."""
    if not draining(inst):
        inst.pop("_drain_left", None)
        return secs
    if "_drain_left" not in inst:  # the job in hand: somewhere in its run, drawn once
        job_s = 3600.0 / max(jobs_per_h(inst) / max(int(inst["num_gpus"] or 1), 1), 1e-9)
        inst["_drain_left"] = irng(seed, inst["id"], "drain").uniform(0.0, job_s)
    used = min(secs, float(inst["_drain_left"]))
    inst["_drain_left"] = float(inst["_drain_left"]) - used
    return used


def idle(inst: Instance) -> bool:
    """A draining instance whose last job is done."""
    return draining(inst) and float(inst.get("_drain_left", 1.0)) <= 0.0


def public(seed: int, inst: Instance, now: float, busy: bool) -> dict[str, Any]:
    """The instance as the API shows it: no private keys; uptime (``uptime_mins``, since it last started running),
    age (``duration``, seconds since the rent) and GPU readings as of now."""
    out = {k: v for k, v in inst.items() if not k.startswith("_")}
    since = inst["_running_since"]
    busy = busy and not idle(inst)
    if since is not None:
        out["uptime_mins"] = round((now - since) / 60.0, 2)
        r = irng(seed, inst["id"], f"util:{int(now // 60)}")
        out["gpu_util"] = round(r.uniform(85, 99) if busy else r.uniform(0, 3), 1)
        out["gpu_temp"] = round(r.uniform(55, 78) if busy else r.uniform(30, 40), 1)
    out["client_run_time"] = round(now - inst["start_date"], 1)
    out["duration"] = round(now - inst["start_date"], 1)  # its age in seconds: the official CLI's "age(hours)"
    return out


def filter_values(instances: list[Instance]) -> list[dict[str, Any]]:
    """Counts per (actual_status, verification, gpu_name), for GET /instances/filters."""
    combos: dict[tuple[Any, ...], int] = {}
    for inst in instances:
        k = (inst["actual_status"], inst["verification"], inst["gpu_name"])
        combos[k] = combos.get(k, 0) + 1
    return [{"actual_status": a, "verification": v, "gpu_name": g, "count": n}
            for (a, v, g), n in sorted(combos.items(), key=lambda kv: str(kv[0]))]


def modify(seed: int, inst: Instance, body: dict[str, Any], now: float) -> dict[str, Any]:
    """PUT /instances/{id}/: set the label, stop, or start."""
    iid = inst["id"]
    msgs = []
    if "label" in body:
        inst["label"] = body["label"]
        msgs.append("label set")
    state = body.get("state")
    if state == "stopped":
        if inst["actual_status"] in ("offline",):
            raise ApiError(400, "invalid_state", f"Instance {iid} is offline and cannot be stopped.")
        inst["next_state"] = "stopped"
        if inst.get("_quick", True) or inst["actual_status"] != "running":
            stop(inst, "stopped by user")
        else:  # vast.ai stops a running container 10-40 s later; it bills as running until then
            inst["intended_status"] = "stopped"
            inst["status_msg"] = "stopping"
            schedule(inst, now + irng(seed, iid, f"stop:{now:.3f}").uniform(*STOPPING_S), "stopped")
        msgs.append("stopping")
    elif state == "running":
        if inst.get("_expired"):
            raise ApiError(400, "invalid_state", f"Instance {iid} has expired (its contract ended) and cannot be "
                           "started; destroy it and rent another.")
        if inst["actual_status"] in ("exited", "offline"):
            raise ApiError(400, "invalid_state",
                           f"Instance {iid} is {inst['actual_status']} and cannot be started.")
        if inst["actual_status"] == "stopped":
            restart(seed, inst, now, "starting container")
        msgs.append("starting")
    elif state is not None:
        raise ApiError(400, "invalid_args", f"unknown state {state!r}")
    return {"success": True, "msg": ", ".join(msgs) or "nothing to change"}


def reboot(seed: int, inst: Instance, now: float) -> dict[str, Any]:
    iid = inst["id"]
    if inst["actual_status"] in ("offline", "stopped"):
        raise ApiError(400, "invalid_state", f"Instance {iid} is {inst['actual_status']}; cannot reboot.")
    restart(seed, inst, now, "rebooting", reboot=True)
    return {"success": True, "msg": f"Rebooting instance {iid}."}


def force_status(inst: Instance, status: str | None, msg: str | None, now: float) -> None:
    """Report ``status`` from now on, whatever the lifecycle had planned (GPU billed only while running)."""
    inst["actual_status"] = status
    inst["status_msg"] = msg
    inst["_next"] = None
    inst["_running_since"] = now if status == "running" else None
