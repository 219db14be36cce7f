"""The Simulator: one simulated vast.ai account, holding the state the other modules work on.

It owns the market, the instances (live and destroyed), the balance, the job queue, the
fault knobs and the request log, all behind one lock. Time comes from an injectable clock;
`tick()` brings billing, lifecycles and the queue up to the clock's now in steps of a
simulated minute. HTTP requests come in through `handle()` (see agent/sim/api.py).
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

from agent.sim import api, instances, state
from agent.sim.clock import Clock, ManualClock, scaled_wall_clock
from agent.sim.demand import Flap, JobQueue, Shape, arrival_rate, step_end
from agent.sim.faults import Faults, after_action, ambiguous_rent, draw_fault
from agent.sim.instances import Instance
from agent.sim.logs import LogResults, synthetic_logs, tail_lines
from agent.sim.market import Market
from agent.sim.realism import RateLimiter, Realism
from agent.sim.replies import ApiError, Reply, json_reply

# Instance ids grow with simulated time (ID_PER_S a second from ID_EPOCH) as well as with each rent,
# so a simulator restarted without --state never hands out an id it handed out before, as long as
# rents come slower than ID_PER_S / MAX_ID_STEP a second (the rent endpoint's rate limit keeps them so).
ID_EPOCH = 1_796_000_000.0
ID_BASE = 21_000_000
ID_PER_S = 20
MAX_ID_STEP = 4
MAINT_CATEGORIES = ("power", "internet", "disk", "gpu", "software", "other")  # the official CLI's list
STATUSES = (None, "created", "loading", "running", "stopped", "frozen", "exited", "rebooting", "unknown",
            "offline")


class Simulator:
    """The whole simulated vast.ai account: market, instances, billing, demand, faults."""

    def __init__(
        self,
        seed: int = 0,
        speed: float = 1.0,
        clock: Clock | None = None,
        api_key: str = "sim-key",
        state_file: str | None = None,
        start_balance: float = 500.0,
        realism: Realism | None = None,
        wall: Clock = time.monotonic,
    ) -> None:
        self.seed = seed
        self.speed = speed
        self.api_key = api_key
        self.state_file = state_file
        self.faults = Faults()
        self.realism = realism if realism is not None else Realism()
        self.limiter = RateLimiter()
        self.wall = wall  # real time, for rate limits and log uploads whatever the simulated clock does
        self._sched_rng = random.Random(f"{seed}:schedule")
        self._billed_day = (0, 0.0)  # (UTC day number, charges billed that day)
        self.requests: list[dict[str, Any]] = []
        self.instances: dict[int, Instance] = {}
        self.destroyed: dict[int, Instance] = {}
        self.market = Market(seed)
        self.offers = self.market.offers
        self.bad_hosts = self.market.bad_hosts
        self.balance = float(start_balance)
        self.queue = JobQueue()
        self.shape: Shape | None = None  # arrivals set from outside (POST /_sim/arrivals); None = seeded
        self.flaps: dict[int, Flap] = {}  # instance id -> its down spells between two looks
        self.traffic_scale = 1.0  # instances rented from now on move this many times the GB/h drawn for them
        self._lock = threading.RLock()
        self._fault_rng = random.Random(f"{seed}:faults")
        self._next_id = ID_BASE + random.Random(f"{seed}:ids").randrange(1000, 9000)
        self._planted: dict[int, str] = {}
        self.price_increases: dict[int, dict[str, Any]] = {}  # pending_price_increase_id -> row (any status)
        self._increase_rng = random.Random(f"{seed}:price-increases")
        self.maintenances: list[dict[str, Any]] = []  # host maintenance windows, announced and past
        self._maint_rng = random.Random(f"{seed}:maintenance")
        self._results = LogResults(seed)
        saved = state.read(state_file, seed) if state_file else None
        start = float(saved["now"]) if saved else time.time()
        self.manual = isinstance(clock, ManualClock)
        self._clock: Clock = clock if clock is not None else scaled_wall_clock(start, speed)
        self._last_t = self._clock()
        if saved:
            state.restore(self, saved)

    def __repr__(self) -> str:
        return f"Simulator(seed={self.seed}, instances={len(self.instances)})"

    @property
    def pending(self) -> float:
        """Jobs waiting in the queue (tests set it to make demand high or low)."""
        return self.queue.pending

    @pending.setter
    def pending(self, value: float) -> None:
        self.queue.pending = value

    @property
    def completed(self) -> float:
        return self.queue.completed

    @completed.setter
    def completed(self, value: float) -> None:
        self.queue.completed = value

    # -- time ---------------------------------------------------------------------------

    @property
    def clock(self) -> Clock:
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

    def _advance_to(self, now: float) -> None:
        t = self._last_t
        while t < now:
            end = step_end(t, now)
            shares: list[tuple[Instance, float]] = []
            for iid in sorted(self.instances):
                inst = self.instances[iid]
                secs, charges = instances.advance(self.seed, inst, t, end)
                for cost in charges:
                    self.balance -= cost
                    self._bill(t, cost)
                flap = self.flaps.get(iid)
                if flap is not None and flap.down((t + end) / 2):
                    secs = 0.0
                secs = instances.work_seconds(self.seed, inst, secs) if secs > 0 else secs
                if secs > 0:
                    shares.append((inst, secs * instances.jobs_per_h(inst) / 3600.0))
            capacity = sum(c for _, c in shares)
            done = self.queue.step(self.arrival_rate(t) * (end - t) / 3600.0, capacity, end - t)
            for inst, c in shares:
                inst["_jobs"] += done * c / capacity
                self.queue.credit(inst["id"], done * c / capacity)
            if self.balance <= 0:
                for inst in self.instances.values():
                    if inst["actual_status"] in ("running", "loading", "created", "rebooting", None):
                        instances.credit_stop(inst)
            self._market_step(t, end)
            self._maintenance_step(t, end)
            t = end
        self._last_t = max(self._last_t, now)

    def _market_step(self, t: float, end: float) -> None:
        """What the market does to running contracts over [t, end]: bids below the market's min_bid lose their
        GPU (outbid), hosts ask for price increases now and then, and contracts reach their end date."""
        for iid in sorted(self.instances):
            inst = self.instances[iid]
            offer = self.offers.get(inst["_offer_id"])
            if inst.get("is_bid") and offer is not None:
                inst["min_bid"] = self.market.min_bid(offer, end)
                if inst["actual_status"] in ("running", "loading", "created", None) \
                        and inst["dph_total"] < inst["min_bid"] - 1e-9:
                    instances.stop(inst, f"outbid: the market's min_bid is ${inst['min_bid']:.4f}/h, above this "
                                   f"instance's bid ${inst['dph_total']:.4f}/h", intended=False)
                    inst["_outbid_at"] = end
                elif self._resumes(inst, end):
                    # vast.ai: an outbid instance starts again by itself once its bid holds the GPU again.
                    self._resume(inst, end, "starting container: the bid holds the GPU again")
            rate = self.realism.price_increases
            if (rate > 0 and not inst.get("is_bid") and inst["actual_status"] == "running"
                    and not self._open_increase(iid)
                    and self._increase_rng.random() < rate * (end - t) / 86400.0):
                self._ask_increase(inst, round(self._increase_rng.uniform(1.1, 1.6), 3),
                                   end + self._increase_rng.uniform(1.0, 7.0) * 86400.0, end)
        for iid in sorted(self.instances):
            inst = self.instances[iid]
            ends = inst.get("end_date")
            if ends is not None and float(ends) <= end and not inst.get("_expired"):
                instances.expire(inst)
        for row in sorted(self.price_increases.values(), key=lambda r: r["pending_price_increase_id"]):
            if row["_applied"] or row["contract_end_date"] > end:
                continue
            row["_applied"] = True
            target = self.instances.get(row["contract_id"])
            if target is None:
                continue
            inst = target
            if row["_status"] == "accepted":
                inst["dph_base"] = round(row["new_gpu_costpersec"] * 3600.0, 4)
                inst["dph_total"] = round(inst["dph_base"] + instances.storage_per_h(inst), 4)
            elif inst["actual_status"] not in ("exited", "offline"):
                # Rejected or never answered: the contract is not extended at the old price.
                instances.stop(inst, "contract ended: the host's price increase was not accepted", intended=False)

    @property
    def quick(self) -> bool:
        """realism.quick: the instant market (no scheduling wait, no stuck or unschedulable rents, no
        maintenance, stops at once)."""
        return self.realism.quick > 0

    def _maintenance_step(self, t: float, end: float) -> None:
        """Hosts announce maintenance windows on machines running our instances (``realism.maintenance`` per
        machine per day, 6-72 h ahead, 1-8 h long); at a window's start the machine goes down: its instances
        go offline, and until its end its offers are neither listed nor rentable."""
        rate = 0.0 if self.quick else self.realism.maintenance
        machines = sorted({int(i["machine_id"]) for i in self.instances.values()
                           if i["actual_status"] not in ("exited", "offline")})
        for mid in machines:
            if rate > 0 and not self.next_maintenance(mid, end) \
                    and self._maint_rng.random() < rate * (end - t) / 86400.0:
                r = self._maint_rng
                self.schedule_maintenance(mid, end + r.uniform(6.0, 72.0) * 3600.0, r.uniform(1.0, 8.0),
                                          r.choice(MAINT_CATEGORIES), now=end)
        for w in self.maintenances:
            if w["_applied"] or w["start_time"] > end:
                continue
            w["_applied"] = True
            for inst in self.instances.values():
                if int(inst["machine_id"]) == w["machine_id"] and inst["actual_status"] not in ("exited", "offline"):
                    instances.force_status(inst, "offline", "host machine is down for scheduled maintenance "
                                           f"({w['maintenance_category']}, {w['duration_hours']:.1f} h)",
                                           w["start_time"])
        self.market.down_machines = {w["machine_id"] for w in self.maintenances
                                     if w["_applied"] and w["end_time"] > end}

    def next_maintenance(self, machine_id: int, now: float) -> dict[str, Any] | None:
        """The machine's next maintenance window not over at ``now`` (the earliest), or None."""
        rows = [w for w in self.maintenances if w["machine_id"] == machine_id and w["end_time"] > now]
        return min(rows, key=lambda w: w["start_time"]) if rows else None

    def schedule_maintenance(self, machine_id: int, start: float, hours: float, category: str = "other",
                             *, now: float | None = None) -> dict[str, Any]:
        """A maintenance window on ``machine_id`` from ``start`` (Unix time) for ``hours``; returns its row."""
        with self._lock:
            if hours <= 0:
                raise ValueError(f"duration_hours must be > 0, got {hours}")
            at = self.tick() if now is None else now
            if start < at:
                raise ValueError(f"start_time {start} is in the past (now {at:.0f})")
            row = {"machine_id": int(machine_id), "start_time": float(start),
                   "end_time": float(start) + float(hours) * 3600.0, "duration_hours": round(float(hours), 2),
                   "maintenance_category": str(category), "_announced": float(at), "_applied": False}
            self.maintenances.append(row)
            return self.public_maintenance(row)

    @staticmethod
    def public_maintenance(row: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in row.items() if not k.startswith("_")}

    def maintenances_for(self, machine_ids: list[int] | None, now: float) -> list[dict[str, Any]]:
        """GET /machines/maintenances: the windows not over yet, of ``machine_ids`` (all when None)."""
        wanted = None if machine_ids is None else {int(m) for m in machine_ids}
        return [self.public_maintenance(w) for w in sorted(self.maintenances, key=lambda w: (w["start_time"],
                                                                                            w["machine_id"]))
                if w["end_time"] > now and (wanted is None or w["machine_id"] in wanted)]

    def _open_increase(self, iid: int) -> dict[str, Any] | None:
        return next((r for r in self.price_increases.values()
                     if r["contract_id"] == iid and r["_status"] == "pending"), None)

    def _ask_increase(self, inst: Instance, multiplier: float, end_date: float, now: float) -> dict[str, Any]:
        pid = 900_000 + len(self.price_increases) + 1
        old = float(inst["dph_base"]) / 3600.0
        disk = instances.storage_per_h(inst) / 3600.0
        row = {"pending_price_increase_id": pid, "contract_id": inst["id"], "host_id": inst["host_id"],
               "new_gpu_costpersec": old * multiplier, "old_gpu_costpersec": old,
               "new_disk_ram_costpersec": None, "old_disk_ram_costpersec": round(disk, 9),
               "new_bwu_cost": None, "old_bwu_cost": inst.get("inet_up_cost"),
               "new_bwd_cost": None, "old_bwd_cost": inst.get("inet_down_cost"),
               "new_platform_fee": None, "old_platform_fee": None,
               "contract_end_date": float(end_date), "ask_end_date": float(end_date) + 30 * 86400.0,
               "created_at": float(now), "_status": "pending", "_applied": False}
        self.price_increases[pid] = row
        return row

    def raise_price(self, instance_id: int, multiplier: float, in_s: float = 3600.0) -> dict[str, Any]:
        """The host of ``instance_id`` asks ``multiplier`` x its GPU price from ``in_s`` seconds on (its contract's
        end date): a pending price increase the renter accepts or rejects; returns the row."""
        with self._lock:
            now = self.tick()
            inst = self.instances.get(int(instance_id))
            if inst is None:
                raise LookupError(f"no instance {instance_id}")
            if multiplier <= 1.0:
                raise ValueError(f"multiplier must be > 1 (an increase), got {multiplier}")
            if self._open_increase(inst["id"]) is not None:
                raise ValueError(f"instance {instance_id} already has a pending price increase")
            return self._public_increase(self._ask_increase(inst, float(multiplier), now + float(in_s), now))

    @staticmethod
    def _public_increase(row: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in row.items() if not k.startswith("_")}

    def pending_increases(self) -> list[dict[str, Any]]:
        """The rows GET /instances/pending-price-increases/ lists: pending, on live instances."""
        return [self._public_increase(r) for _, r in sorted(self.price_increases.items())
                if r["_status"] == "pending" and r["contract_id"] in self.instances]

    def answer_increase(self, body: dict[str, Any], accept: bool) -> dict[str, Any]:
        """PUT /instances/accept-price-increase/ or reject-price-increase/: body exactly
        {"pending_price_increase_id": int}; a stale row answers 404 no_pending_price_increase."""
        if set(body) != {"pending_price_increase_id"}:
            raise ApiError(400, "invalid_args", "body must be exactly {\"pending_price_increase_id\": <int>}")
        pid = body["pending_price_increase_id"]
        if not isinstance(pid, int) or isinstance(pid, bool):
            raise ApiError(400, "invalid_args", "pending_price_increase_id must be an integer")
        row = self.price_increases.get(pid)
        if row is None or row["_status"] != "pending" or row["contract_id"] not in self.instances:
            raise ApiError(404, "no_pending_price_increase", f"no pending price increase {pid}")
        row["_status"] = "accepted" if accept else "rejected"
        return {"success": True, "pending_price_increase_id": pid, "contract_id": row["contract_id"]}

    def _resumes(self, inst: Instance, t: float) -> bool:
        """An outbid instance whose bid holds its GPU again at ``t``: at or above the market's min_bid, past any
        outbid held until the end of its market hour (``outbid``), still meant to run, and credit left."""
        return (inst["actual_status"] == "stopped" and inst.get("_outbid_at") is not None
                and inst.get("intended_status") == "running" and not inst.get("_expired")
                and not inst.get("_credit_stop") and self.balance > 0
                and t >= float(inst.get("_outbid_hold") or 0.0)
                and inst["dph_total"] >= float(inst["min_bid"]) - 1e-9)

    def _resume(self, inst: Instance, t: float, msg: str) -> None:
        inst.pop("_outbid_at", None)
        inst.pop("_outbid_hold", None)
        inst.pop("_outbid_bid", None)
        instances.restart(self.seed, inst, t, msg)

    def change_bid(self, iid: int, body: dict[str, Any], now: float) -> dict[str, Any]:
        """PUT /instances/bid_price/{id}/ {"client_id": "me", "price": $}: an interruptible instance's new bid;
        one stopped by an outbid starts again when the new bid holds the GPU."""
        inst = self._get(iid)
        if not inst.get("is_bid"):
            raise ApiError(400, "invalid_args", f"Instance {iid} is on-demand; it has no bid to change.")
        try:
            price = float(body.get("price"))  # type: ignore[arg-type]
        except (TypeError, ValueError) as e:
            raise ApiError(400, "invalid_args", "price must be a number") from e
        offer = self.offers.get(inst["_offer_id"])
        floor = self.market.min_bid(offer, now) if offer is not None else float(inst["min_bid"])
        if price < floor:
            raise ApiError(400, "invalid_args", f"bid price {price} is below the min_bid {floor}")
        inst["dph_total"] = round(price, 4)
        rival = inst.get("_outbid_bid")  # an outbid held (admin): the bid that took the GPU until the hour ends
        if rival is not None and price > float(rival) + 1e-9:
            inst["_outbid_hold"] = now
        if self._resumes(inst, now):
            self._resume(inst, now, "starting container: the new bid holds the GPU")
        return {"success": True, "msg": f"bid of instance {iid} set to ${price:.4f}/h"}

    def set_credit(self, amount: float) -> None:
        """Set the account's credit now (a top-up, or a run-out). At $0 or less every instance stops at
        the next step; instances stopped for credit stay stopped after a top-up until started."""
        with self._lock:
            self.tick()
            self.balance = float(amount)
            if self.balance <= 0:
                for inst in self.instances.values():
                    if inst["actual_status"] in ("running", "loading", "created", "rebooting", None):
                        instances.credit_stop(inst)

    def _bill(self, t: float, cost: float) -> None:
        day, billed = self._billed_day
        today = int(t // 86400)
        self._billed_day = (today, cost) if today != day else (day, billed + cost)

    def billed_today(self, now: float) -> float:
        """Charges billed since the start of the UTC day of ``now`` (the invoice balance, unsigned)."""
        day, billed = self._billed_day
        return billed if day == int(now // 86400) else 0.0

    # -- market and demand ----------------------------------------------------------------

    def find_offer(self, gpu_name: str | None = None, *, good: bool = True, num_gpus: int | None = 1,
                   behaviour: str | None = None) -> dict[str, Any]:
        """The cheapest unrented offer matching; `good=False` picks one on a bad host."""
        with self._lock:
            return self.market.find_offer(gpu_name, good=good, num_gpus=num_gpus, behaviour=behaviour)

    def arrival_rate(self, t: float) -> float:
        """Jobs per hour arriving at simulated time t: the shape set from outside, else the seeded one."""
        return self.shape.at(t) if self.shape is not None else arrival_rate(self.seed, t)

    def demand(self) -> dict[str, Any]:
        with self._lock:
            now = self.tick()
            gpus = sum(i["num_gpus"] for i in self.instances.values() if i["actual_status"] == "running")
            return self.queue.snapshot(now, gpus, self.arrival_rate(now))

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

    def reserve_ids(self, above: int) -> None:
        """New instances get ids above ``above`` (a simulator seeded with instances it did not create)."""
        with self._lock:
            self._next_id = max(self._next_id, int(above) + 1)
    def _new_id(self, now: float) -> int:
        """The next instance id: above every id handed out, and above the floor simulated time sets."""
        iid = max(self._next_id, ID_BASE + int(max(0.0, now - ID_EPOCH) * ID_PER_S))
        self._next_id = iid + 1 + instances.irng(self.seed, iid, "id").randrange(0, MAX_ID_STEP)
        return iid

    def _create_instance(self, offer: dict[str, Any], body: dict[str, Any], now: float) -> Instance:
        iid = self._new_id(now)
        behaviour = self.bad_hosts.get(offer["host_id"], "good")
        quick = self.quick
        stuck = not quick and self._sched_rng.random() < self.realism.stuck_scheduling
        inst = instances.new_instance(self.seed, iid, offer, body, now, behaviour, quick=quick, stuck=stuck,
                                      traffic_scale=self.traffic_scale)
        inst["_pull_s"] = 0.0 if quick else self.realism.image_pull  # realism.image_pull: a large image
        self.instances[iid] = inst
        offer["rented"] = True
        return inst

    def _rent(self, offer_id: int, body: dict[str, Any], now: float) -> Reply:
        """PUT /asks/{id}/: rent an offer (possibly answered by an ambiguous-rent fault).

        The new instance is listed only ``realism.listing_lag`` simulated seconds later. When the
        machine cannot be scheduled, ``cancel_unavail: true`` refuses the rent; false (the CLI's
        default) creates the instance *stopped*, billing storage, and answers success."""
        offer = self.market.check_rent(offer_id, body, now)
        if self.balance <= 0:
            raise ApiError(402, "insufficient_credit", "Your account balance is too low to rent.")
        if not isinstance(body.get("env") or {}, dict):
            raise ApiError(400, "invalid_args", "env must be an object")
        unavailable = (not self.quick and bool(self.realism.unschedulable)
                       and self._sched_rng.random() < self.realism.unschedulable)
        if unavailable and body.get("cancel_unavail"):
            raise ApiError(400, "unavailable", f"Offer {offer_id}: the machine cannot schedule the instance "
                           "right now; cancelled (cancel_unavail)")
        inst = self._create_instance(offer, body, now)
        inst["_listed_at"] = now + self.realism.listing_lag
        if unavailable:
            instances.stop(inst, "Unable to schedule: the machine is unavailable; instance created stopped",
                           intended=False)
        fault = ambiguous_rent(self.faults, self._fault_rng, inst["id"])
        return fault or json_reply(200, {"success": True, "new_contract": inst["id"]})

    def _is_listed(self, inst: Instance, now: float) -> bool:
        return float(inst.get("_listed_at") or 0.0) <= now

    def _listed_instances(self, now: float) -> list[Instance]:
        """The instances listings show at ``now``: new ones only after the listing lag."""
        return [i for i in self._sorted_instances() if self._is_listed(i, now)]

    def set_status(self, instance_id: int, status: str | None, msg: str | None = None) -> None:
        """Make vast.ai report ``status`` for an instance (any actual_status vast.ai reports)."""
        status = None if status in (None, "None", "null") else status
        if status not in STATUSES:
            raise ValueError(f"unknown status {status!r}; one of {', '.join(str(s) for s in STATUSES)}")
        with self._lock:
            now = self.tick()
            inst = self.instances.get(int(instance_id))
            if inst is None:
                raise LookupError(f"no instance {instance_id}")
            instances.force_status(inst, status, msg, now)

    def _get(self, iid: int) -> Instance:
        inst = self.instances.get(iid)
        if inst is None and iid in self.destroyed:
            # What vast.ai answers for an instance already destroyed: not a 404.
            raise ApiError(400, "no_such_instance", f"Instance {iid} has been destroyed.")
        if inst is None:
            raise ApiError(404, "no_such_instance", f"Instance {iid} not found.")
        return inst

    def billing(self) -> dict[int, float]:
        """Dollars charged so far per instance, live and destroyed (running at dph_total, the rest at
        the storage rate), as of the clock's now: what the account's invoice would list."""
        with self._lock:
            self.tick()
            return {iid: float(i["_cost"]) for iid, i in sorted({**self.destroyed, **self.instances}.items())}

    def _destroy(self, iid: int, now: float) -> None:
        inst = self._get(iid)
        del self.instances[iid]
        inst["_destroyed_at"] = now
        self.destroyed[iid] = inst
        offer = self.offers.get(inst["_offer_id"])
        if offer is not None:
            offer["rented"] = False
        self._planted.pop(iid, None)

    def outbid(self, instance_id: int) -> None:
        """An interruptible (bid) instance loses its GPU to a higher bid: stopped, not destroyed; storage still
        bills. The rival holds the GPU until the market hour ends (then the instance starts again by itself if
        its bid holds), unless the owner outbids it first (a higher bid through the change-bid endpoint)."""
        with self._lock:
            now = self.tick()
            inst = self.instances.get(int(instance_id))
            if inst is None:
                raise LookupError(f"no instance {instance_id}")
            if not inst.get("is_bid"):
                raise ValueError(f"instance {instance_id} is on-demand: vast.ai never outbids one (only an "
                                 "interruptible instance, rented with a bid, loses its GPU to a higher bid); "
                                 "POST /_sim/stop stops an instance without its owner asking")
            instances.stop(inst, "outbid: stopped by a higher bid", intended=False)
            inst["_outbid_at"] = now
            inst["_outbid_hold"] = (int(now // 3600) + 1) * 3600.0
            inst["_outbid_bid"] = inst["dph_total"]

    def host_stop(self, instance_id: int, msg: str | None = None) -> None:
        """The instance stops without its owner asking, as vast.ai shows it when the host's side stops the
        container (the machine restarted, its daemon stopped it): ``stopped``, ``intended_status`` still
        ``running``, the disk kept and its storage billed, the GPU no longer billed, no outbid message. It does
        not start again by itself; its owner may start it (PUT state running) or destroy it."""
        with self._lock:
            self.tick()
            inst = self.instances.get(int(instance_id))
            if inst is None:
                raise LookupError(f"no instance {instance_id}")
            if inst["actual_status"] in ("exited", "offline"):
                raise ValueError(f"instance {instance_id} is {inst['actual_status']}: it is not running to stop")
            instances.stop(inst, msg or "", intended=False)
            inst["status_msg"] = msg or None

    def _public(self, inst: Instance) -> dict[str, Any]:
        now = self._clock()
        out = instances.public(self.seed, inst, now, busy=self.pending >= 1)
        flap = self.flaps.get(inst["id"])
        if flap is not None and out.get("uptime_mins") is not None:
            # What the machine itself reports: uptime since the last restart, utilisation over the period.
            up = flap.up_since(now)
            out["uptime_mins"] = round((now - up) / 60.0, 2) if up is not None else 0.0
            out["gpu_util"] = round(float(out["gpu_util"] or 0.0) * flap.up_fraction(), 1)
        return out

    def _sorted_instances(self) -> list[Instance]:
        return [self.instances[i] for i in sorted(self.instances)]

    # -- logs ---------------------------------------------------------------------------

    def plant_logs(self, instance_id: int, text: str) -> None:
        with self._lock:
            self._planted[int(instance_id)] = text

    def _request_logs(self, iid: int, body: dict[str, Any], base_url: str, now: float) -> dict[str, Any]:
        inst = self._get(iid)
        try:
            tail = int(body.get("tail") or 1000)
        except (TypeError, ValueError) as e:
            raise ApiError(400, "invalid_args", "tail must be a number") from e
        text = self._planted.get(iid)
        if text is None:
            text = synthetic_logs(self.seed, inst, now)
        token = self._results.put(iid, tail_lines(text, tail), ready_at=self.wall() + self.realism.logs_delay)
        return {"success": True, "result_url": f"{base_url}/results/{token}.txt",
                "msg": "Logs requested; fetch result_url when ready."}

    def _result(self, path: str) -> Reply:
        token = path.rsplit("/", 1)[-1].removesuffix(".txt")
        with self._lock:
            return self._results.fetch(token, self.wall())

    # -- faults, HTTP, persistence --------------------------------------------------------

    def _draw_fault(self, path: str) -> Reply | None:
        return draw_fault(self.faults, self._fault_rng, path, self._clock)

    def _after_action(self, method: str, path: str) -> str | None:
        return after_action(self.faults, self._fault_rng, method, path)

    def handle(self, method: str, target: str, headers: dict[str, str], body: bytes,
               base_url: str) -> Reply:
        """Answer one HTTP request. Thread-safe; delays are returned, not slept."""
        return api.handle(self, method, target, headers, body, base_url)

    def state(self) -> dict[str, Any]:
        """Everything a test or an operator may want to see, as of now (GET /_sim/state)."""
        with self._lock:
            return state.snapshot(self, self.tick())

    def save(self, path: str | None = None) -> None:
        """Write the state as JSON, atomically (temp file + rename)."""
        path = path or self.state_file
        if not path:
            return
        with self._lock:
            data = state.to_saved(self, self.tick())
        state.write(path, data)
