"""The built-in rules provider: a deterministic fleet policy behind the model interface.

Not a language model. It reads the latest observation and this tick's tool
results from the log, and scales the fleet to demand within policy: destroy
our dead, stuck or flapping instances; size the fleet on throughput (the jobs/h
each GPU model delivers, agent/fleet/throughput.py) to serve the arrivals plus
the backlog cleared within ``policy.drain_within``, counting instances still
starting (but not one loading well past the time the fleet's own rents took to start, agent/model/loading.py: cover is
rented for it, on another host, and the surplus rule trims once it runs); when under 0.95× that (or short at all while a backlog keeps every
instance busy, that sliver only under 1.5× the fleet's cheapest per job), rent offers within ``NEAR_BEST`` of the best $ per job on offer
that cover the gap (a multi-GPU box among them), at most twice the $/h of the
cheapest cover (failing that, the offers that cover it for the fewest $ per job,
capacity beyond the gap counted at half its worth, no multi-GPU box bigger than
the gap unless the cheapest cover needs it; the last sliver left when covering it costs 1.5× the cover's $ per job) on hosts no knowledge file, directive
or recent operator note blacklists; replace an instance of a GPU model they no
longer allow as one whose contract ends (below), and destroy it while short once the search finds no offer
they allow and nothing of ours is starting (no replacement is coming); destroy an instance the rest
can do without (the dearest an hour first), but never one a backlog keeps busy;
replace one the fleet needs for under half of what it delivers when smaller
offers cover that for under half its $/h, and one costing 1.5× the fleet's cheapest per job when offers cover
what the fleet needs of it (at its need, whatever backlog keeps it busy) for under 0.6× its $/h; an instance whose contract ends (or machine's maintenance starts)
within ``policy.retire_ahead_hours`` stops counting as capacity (so its replacement is rented) and is destroyed once
the running rest cover the need; at the instance cap no replacement fits, so it runs to its end date and is
replaced once vast.ai stops it. It answers through the same tool calls a model would, so every
guardrail, event and replay path is exercised the same way. Used by the demo
and selectable with ``model.provider: rules``.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from agent.model import bidding, loading
from agent.model.llm import ModelReply, ToolCall, Usage
from agent.times import utc_ts

RENT_UP_TO = 1.0  # rent until the fleet delivers what it needs (the last rent overshoots by up to one instance)
RENT_BELOW = 0.95  # ...but only once it delivers less than this share of the need: no rent for a sliver of a gap
SURPLUS_OVER = 1.0  # an instance the rest of the fleet can do without is surplus: vast.ai bills it by the second
SWAP_USED = 0.5  # an instance the fleet needs for less than this share of what it delivers may be replaced...
SWAP_SAVING = 0.5  # ...by offers covering that share for less than this share of its $/h (a clear saving)
DEAR_PER_JOB = 1.5  # an instance costing this many times the fleet's cheapest per job may be replaced...
DEAR_SAVING = 0.6  # ...by offers covering what the fleet needs of it for less than this share of its $/h
DEAR_EVERY_S = 1800.0  # ...looked for on the first tick of each half hour of the clock, not every tick
FLAP_RESTARTS = 3  # an instance that stopped running this often since rent is replaced, its host avoided
DEAD = ("exited", "offline", "unknown", "stopped")  # we never stop an instance: stopped is a failure
FAILED_HOST_TICKS = 48  # observations scanned for hosts where one of our instances died...
FAILED_HOST_S = 86400.0  # ...and hosts with a host.failed logged within this long (a day) are avoided too
MASS_EVENT_MIN = 3  # this many of ours dead in one observation, and half the fleet or more: not the hosts
MAX_GPUS = 8  # the search compares offers of 1 up to this many GPUs per job (policy caps the $/h of each)
SCHEDULING_LIMIT = 600.0  # s: a rent still waiting in scheduling after this is replaced (vast.ai: 0.5-4 min)
SCHEDULING_HOST_FAILURES = 2  # a host whose machine failed to schedule this many of our rents is avoided
DRAINING = "-draining"  # agent/fleet/drain.py's label: the tick retires that instance once its job is done
ADVICE_SHOWN = 2  # advice the rules cannot parse, quoted in the decision text (the rest counted)


class RulesProvider:
    """Deterministic rules behind the ChatProvider interface (``name`` says what it is)."""

    can_summarise = False

    def __init__(self, app: Any) -> None:
        self.app = app
        self.name = "rules-provider"

    def list_models(self) -> list[str]:
        return [self.name]

    # -------------------------------------------------------------- state from the log

    def _state(self) -> tuple[Any, list[Any]]:
        log = self.app.log
        start = next(log.read(0, kinds=["tick.started"], newest_first=True, limit=1))
        since = list(log.read(start.seq, kinds=["model.response", "tool.result"]))
        return start, since

    def _recent(self) -> list[dict[str, Any]]:
        """The last ``FAILED_HOST_TICKS`` observations, newest first (this tick's among them)."""
        return [e.payload["observation"] for e in self.app.log.read(0, kinds=["tick.started"], newest_first=True,
                                                                     limit=FAILED_HOST_TICKS)]

    def _failed_hosts(self, recent: list[dict[str, Any]], stuck_after: float) -> set[int]:
        """Hosts where one of our instances was seen dead in the ``recent`` observations: renting there
        again would only repeat the failure (and spend the hourly rent budget)."""
        out: set[int] = set()
        for obs in recent:
            kept = set(obs.get("credit_stopped") or [])
            ours = [i for i in obs.get("instances") or [] if i.get("ours")]
            dead = [i for i in ours if i.get("host_id") is not None and i["id"] not in kept and _is_dead(i, stuck_after)
                    and "outbid" not in (i.get("status_msg") or "")  # a higher bid took it: not the host's fault
                    and not _scheduling_failure(i)]  # counted apart: _scheduling_failed_hosts
            if len(dead) >= MASS_EVENT_MIN and 2 * len(dead) >= len(ours):
                continue  # most of the fleet at once (outbid, maintenance, the account): no host's fault
            out.update(int(i["host_id"]) for i in dead)
        return out | self._hosts_failed_today()

    def _hosts_failed_today(self) -> set[int]:
        """Hosts with a ``host.failed`` logged within ``FAILED_HOST_S``, however many ticks ago: a host whose
        container exited or that went offline under us hours ago is no better now (bad hosts stay bad), and renting
        it again only repeats the failure; the observations ``_failed_hosts`` reads cover a few hours. Not failures
        to schedule (``_scheduling_failed_hosts`` counts those) nor ``MASS_EVENT_MIN`` or more logged in one tick
        (the account, maintenance: no host's fault)."""
        log = self.app.log
        since = utc_ts(log.clock() - timedelta(seconds=FAILED_HOST_S))
        by_tick: dict[int | None, list[int]] = {}
        # from the seq at ``since`` (one lookup by time), so the read walks the day's host failures by kind, not
        # every event of the day nor every failure ever
        for e in log.read(log.store.last_seq_before(since), kinds=["host.failed"], since_ts=since):
            if "unable to schedule" not in str(e.payload.get("detail") or "").lower():
                by_tick.setdefault(e.tick, []).append(int(e.payload["host_id"]))
        return {h for hosts in by_tick.values() if len(hosts) < MASS_EVENT_MIN for h in hosts}

    def _scheduling_failed_hosts(self, recent: list[dict[str, Any]]) -> set[int]:
        """Hosts whose machine failed to schedule ``SCHEDULING_HOST_FAILURES`` or more of our rents (stuck in
        scheduling past ``SCHEDULING_LIMIT``, or created stopped as unschedulable) in the ``recent``
        observations. One such failure is the market's luck (vast.ai fails a few rents anywhere); a second on
        the same host is the host."""
        return _scheduling_failed(recent)

    # -------------------------------------------------------------- the policy

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
        t0 = time.monotonic()
        start, since = self._state()
        tick = start.tick
        plan = self._plan(start.payload["observation"])
        responses = [e for e in since if e.kind == "model.response"]
        results = [e for e in since if e.kind == "tool.result"]
        if not responses:
            calls, text = _first_step(plan)
        else:
            calls, text = _rent_step(plan, results)
        tool_calls = tuple(ToolCall(id=f"rules_{tick}_{len(responses)}_{n}", name=name,
                                    arguments=json.dumps(args, sort_keys=True))
                           for n, (name, args) in enumerate(calls))
        return ModelReply(text=text, tool_calls=tool_calls, usage=Usage(0, 0, 0),
                          finish_reason="tool_calls" if tool_calls else "stop",
                          latency_ms=(time.monotonic() - t0) * 1000, model=self.name)

    def _plan(self, obs: dict[str, Any]) -> _Plan:
        """The fleet as observed at the tick's start, sorted into dead and live, and what it must deliver:
        jobs/h for the arrivals plus the backlog cleared within ``policy.drain_within``, against what the
        live instances deliver (each GPU model's jobs/h as the fleet measured it, else the prior). What binds
        (policy, overrides, exclusions, accepted constraints) and what the directives and knowledge files say
        come from the one parser of operators' words (``App.steering_view``)."""
        s = self.app.settings
        view = self.app.steering_view()
        banned = set(view.excluded_hosts) | {int(c.value) for c in view.words.constraints
                                             if c.kind == "exclude_host"}
        cap = view.max_instances()
        ours = [i for i in obs["instances"] if i["ours"]]
        stuck_after = s.alerts.stuck_after
        kept = set(obs.get("credit_stopped") or [])  # stopped for lack of credit: kept for the top-up, not dead
        # Outbid (interruptible, stopped by vast.ai for a higher bid): kept until the market falls back under its
        # bid (agent/fleet/market.py); neither dead nor capacity meanwhile.
        outbid = tuple(i for i in ours if i["id"] not in kept and bidding.is_outbid(i))
        kept |= {i["id"] for i in outbid}
        flapping = {i["id"] for i in ours if i["id"] not in kept and int(i.get("restarts") or 0) >= FLAP_RESTARTS}
        dead = [i for i in ours if i["id"] not in kept
                and (_is_dead(i, stuck_after) or i["host_id"] in banned or i["id"] in flapping)]
        recent = self._recent()
        live = [i for i in ours if i not in dead and i not in outbid]
        # loading well past the fleet's own loads: kept (stuck_after decides), not counted, its host not rented
        limit, rented = loading.of_log(self.app.log, recent[::-1])
        slow = tuple(i for i in live if loading.slow_loading(i, float(obs["time"]), limit, rented))
        avoid = banned | self._failed_hosts(recent, stuck_after) | self._scheduling_failed_hosts(recent) | {
            int(i["host_id"]) for i in ours if (i["id"] in flapping or i in slow) and i["host_id"] is not None}
        # a GPU model the operators no longer allow: replaced like an instance whose contract ends, not dropped
        # before its replacement runs (that would only make the jobs wait)
        barred = {i["id"]: why for i in live if (why := view.offer_refusal(str(i["gpu_name"]), 0.0, None))}
        ending = tuple(i for i in live if i["id"] in barred or i in _ending(live, s.retire_ahead_s()))
        live = [i for i in live if i not in ending]
        tp = _Rates.of(obs, s.policy.jobs_per_hour, s.policy.jobs_per_hour_by_gpu)
        d = obs.get("demand") or {}
        pending = d.get("pending") or 0
        rate = d.get("arrival_rate_per_h") or 0.0
        capacity = sum(tp.per_instance(str(i["gpu_name"]), i.get("num_gpus")) for i in live if i not in slow)
        tick_h = float(s.schedule.interval) / 3600.0
        full_h = float(s.policy.drain_within) / 3600.0
        drain_h = bidding.drain_hours(full_h, interruptible=s.policy.interruptible, outbid=bool(outbid),
                                      pending=pending, capacity=capacity, tick_h=tick_h)  # bids: a backlog sooner
        # Without a demand reading the fleet stays as it is: what it delivers now is what it must.
        need = rate + pending / drain_h if d else capacity
        log = self.app.log
        hour_ago = utc_ts(log.clock() - timedelta(hours=1))  # as the policy counts them (refusals, outbids not)
        rents_left = max(0, s.policy.max_rents_per_hour - log.store.counted_rents_since(hour_ago,
                                                                                        s.policy.max_rents_per_hour))
        credit = obs.get("balance")
        # no rent at or below the credit reserve: hold until a top-up (vast.ai would refuse it with a 402)
        held = isinstance(credit, int | float) and credit <= s.policy.credit_reserve
        # While a backlog waits every running instance is busy, each job at its own $/job: one is surplus
        # only if the rest would also clear the backlog before the next tick, i.e. it would sit idle.
        keep = _keep(need, rate, pending, capacity, tick_h) if d else capacity
        return _Plan(banned, avoid, cap, dead, live, pending, rate, need, capacity, drain_h, tp, flapping,
                     rents_left, s.policy.max_total_dph, view, _advice_text(view.advice), held, keep, ending,
                     outbid, s.policy.interruptible, barred, slow, limit, drain_h < full_h,
                     _first_of(DEAR_EVERY_S, recent), self.app.traffic_dph(i["id"] for i in ours))


def _first_of(period_s: float, recent: list[dict[str, Any]]) -> bool:
    """This tick (``recent[0]``, newest first) is the first observed in its ``period_s`` of the clock, whatever the
    schedule (an interval or a cron expression): the one before it fell in an earlier period, or there is none."""
    times = [float(o["time"]) for o in recent[:2] if isinstance(o.get("time"), int | float)]
    return len(times) < 2 or times[0] // period_s != times[1] // period_s


def _advice_text(advice: tuple[str, ...]) -> str:
    """The decision text's word on operator advice the rules cannot turn into a rule."""
    if not advice:
        return ""
    quoted = "; ".join(repr(a[:60]) for a in advice[:ADVICE_SHOWN])
    more = f" and {len(advice) - ADVICE_SHOWN} more" if len(advice) > ADVICE_SHOWN else ""
    return f"; operator advice the rules provider cannot parse into a rule, not followed: {quoted}{more}"


@dataclass(frozen=True)
class _Rates:
    """Jobs/h per GPU by model, as the tick's observation states them (``gpu_models``: learned from the
    fleet's completions, else the prior); a model it does not name gets the configured prior."""

    default: float
    by_gpu: dict[str, float]
    learned: frozenset[str]
    informed: bool = False  # a model's figure rests on more than the flat policy.jobs_per_hour: offers compare

    @classmethod
    def of(cls, obs: dict[str, Any], default: float, priors: dict[str, float]) -> _Rates:
        rates = dict(priors)
        learned = set()
        informed = bool(priors)
        for gpu, m in (obs.get("gpu_models") or {}).items():
            if isinstance(m, dict) and isinstance(m.get("jobs_per_h"), int | float) and m["jobs_per_h"] > 0:
                rates[gpu] = float(m["jobs_per_h"])
                if (m.get("measured_gpu_h") or 0) >= 1:
                    learned.add(gpu)
                informed = informed or m.get("basis") in ("measured", "dlperf", "configured")
        return cls(default, rates, frozenset(learned), informed)

    def per_gpu(self, gpu: str) -> float:
        return self.by_gpu.get(gpu, self.default)

    def per_instance(self, gpu: str, num_gpus: int | None) -> float:
        return self.per_gpu(gpu) * max(1, int(num_gpus or 1))


@dataclass(frozen=True)
class _Plan:
    banned: set[int]
    avoid: set[int]  # blacklisted hosts and hosts where one of ours died
    cap: int
    dead: list[dict[str, Any]]
    live: list[dict[str, Any]]
    pending: int
    rate: float
    need: float  # jobs/h the fleet must deliver: arrivals plus the backlog over the drain horizon
    capacity: float  # jobs/h the live instances deliver
    drain_h: float
    tp: _Rates
    flapping: set[int]
    rents_left: int  # rents policy.max_rents_per_hour still allows
    max_dph: float
    view: Any = None  # agent.fleet.constraints.InForce: what binds, and the operators' words
    advice: str = ""  # operator advice the rules cannot parse, for the decision text
    credit_held: bool = False  # credit at or below policy.credit_reserve: no rent until a top-up
    keep: float = 0.0  # jobs/h below which nothing is surplus: arrivals plus the backlog cleared by the next tick
    ending: tuple[dict[str, Any], ...] = ()  # ending within policy.retire_ahead_hours: not capacity
    outbid: tuple[dict[str, Any], ...] = ()  # outbid, kept until the market falls back: not capacity, not dead
    interruptible: bool = False  # policy.interruptible: bids cover gaps and replace old dear instances
    barred: dict[int, str] = field(default_factory=dict)  # ending: id -> why its GPU model is no longer allowed
    slow: tuple[dict[str, Any], ...] = ()  # live but loading past loading_limit: not capacity until it runs
    loading_limit: float | None = None  # s after the rent: loading.loading_limit of the recent observations
    drain_sooner: bool = False  # drain_h is bidding.BID_DRAIN of policy.drain_within (bidding.drain_hours)
    dear_due: bool = True  # this tick is the first of its DEAR_EVERY_S: _dear may look for a cheaper cover
    traffic: dict[int, float] = field(default_factory=dict)  # id -> the traffic $/h its counters measured

    def jph(self, i: dict[str, Any]) -> float:
        return self.tp.per_instance(str(i["gpu_name"]), i.get("num_gpus"))

    def cost(self, i: dict[str, Any]) -> float:
        """What an instance costs an hour: its $/h and the traffic vast.ai bills it on top, as measured."""
        return float(i["dph"] or 0.0) + self.traffic.get(int(i["id"]), 0.0)

    def why(self) -> str:
        """The numbers the decision rests on, in a sentence."""
        models = sorted({str(i["gpu_name"]) for i in self.live})
        rates = ", ".join(f"{g} {self.tp.per_gpu(g):.1f}/h/GPU {'measured' if g in self.tp.learned else 'assumed'}"
                          for g in models)
        return (f"need {self.need:.1f} jobs/h (arriving ~{self.rate:.0f}/h + {self.pending} pending over "
                f"{self.drain_h:g}h); {len(self.live)} live deliver {self.capacity:.1f} jobs/h"
                + (f" ({rates})" if rates else "")
                + (f"; {len(self.slow)} still loading over {(self.loading_limit or 0) / 60:.1f} min after the rent "
                   "(well past the fleet's own starts) not counted" if self.slow else "")
                + (f"; {len(self.outbid)} outbid, waiting for the market to fall back" if self.outbid else ""))


Calls = list[tuple[str, dict[str, Any]]]


def _first_step(plan: _Plan) -> tuple[Calls, str]:
    """Destroy the dead and the surplus, search when short."""
    calls: Calls = []
    cap = plan.cap
    for i in plan.dead:
        why = "its host is blacklisted by the operators" if i["host_id"] in plan.banned else \
            f"it stopped running {i.get('restarts')} times since rent" if i["id"] in plan.flapping else \
            _scheduling_why(i) or f"it is {i['status']} after {int(i['age_s']) // 60} min"
        calls.append(("destroy_instance", {"instance_id": i["id"], "reason": f"replace: {why}"}))
    for i, why in _retire(plan):
        calls.append(("destroy_instance", {"instance_id": i["id"], "reason": why}))
    surplus = _surplus(plan)
    for i in surplus:
        calls.append(("destroy_instance", {"instance_id": i["id"], "reason":
                                           f"scale down: need {plan.need:.1f} jobs/h, {plan.capacity:.1f} live "
                                           f"(cap {cap}); #{i['id']} delivers {plan.jph(i):.1f} jobs/h"}))
    short = _short(plan)
    swap = None if short or surplus or plan.dead else _swap(plan)
    if short or swap:
        calls.append(("search_offers", swap.search if swap else _sizing_search()))
    swap_text = ""
    if swap:
        x, used = swap.x, swap.used
        traffic = plan.traffic.get(int(x["id"]), 0.0)
        swap_text = (f"; #{x['id']} costs ${plan.cost(x):.3f}/h"
                     + (f" (${traffic:.3f}/h of it traffic)" if traffic >= 0.0005 else "")
                     + f" for the {used:.1f} of its "
                     f"{plan.jph(x):.1f} jobs/h the fleet needs: searching for that for under "
                     f"${swap.limit:.3f}/h ({swap.why}), to replace it")
    text = (f"rules provider: {plan.why()}; cap {cap}; "
            + (f"{len(plan.dead)} to replace; " if plan.dead else "")
            + (f"{len(surplus)} surplus to destroy (over {SURPLUS_OVER:g}× need); " if surplus else "")
            + _held_text(plan, surplus)
            + (f"searching for {short:.1f} jobs/h more (up to {RENT_UP_TO:g}× need)" if short
               else _why_no_rent(plan)) + swap_text + plan.advice)
    return calls, text


# -------------------------------------------------------------- sizing: what to keep, what to search


def _keep(need: float, rate: float, pending: int, capacity: float, tick_h: float) -> float:
    """Jobs/h below which nothing is surplus. While a backlog keeps the fleet busy through the next tick, an
    instance working it off is not surplus: the arrivals plus the backlog cleared by the next tick. A queue
    that is dry relative to the fleet (what waits, the live fleet finishes within a tick: every job finds a
    free GPU) keeps nothing busy, so the fleet is sized on ``need`` alone and the idle rest goes, however
    many jobs (a handful) still wait."""
    if pending <= capacity * tick_h:
        return need
    return max(need, rate + pending / tick_h)


def _sizing_search() -> dict[str, Any]:
    """The one search a short fleet makes: single and multi-GPU offers (up to ``MAX_GPUS``) side by side,
    cheapest per job of capacity first, so an 8-GPU box cheaper per job than eight single GPUs is seen."""
    return {"limit": 25, "order": "per_job", "max_gpus": MAX_GPUS}


def _ending(live: list[dict[str, Any]], ahead_s: float) -> tuple[dict[str, Any], ...]:
    """Instances being retired: their ``ends_s`` (shown within policy.contract_min_hours) is under ``ahead_s``
    (``Settings.retire_ahead_s``). vast.ai stops them at that date (for good, or for the maintenance window's
    hours), so they stop counting as capacity (a replacement is rented) and stay until ``_retire`` lets them go.
    Before that they work and count: a window announced a day ahead costs no day of a machine rented for its
    price."""
    return tuple(i for i in live if isinstance(i.get("ends_s"), int | float) and float(i["ends_s"]) < ahead_s)


def _retire(plan: _Plan) -> list[tuple[dict[str, Any], str]]:
    """Instances ending soon, destroyed once the running rest of the fleet covers what it must deliver (their
    replacements run) to within ``RENT_BELOW`` of it (a market that has nothing left to close the last sliver
    would otherwise keep them for good, while a backlog of a few jobs lasts); until then they keep working, and
    at their end date vast.ai stops them (then dead)."""
    running = sum(plan.jph(i) for i in plan.live if i["status"] == "running")
    if not plan.ending or running < RENT_BELOW * plan.need:  # as near need as a dry queue rents to
        return []
    return [(i, f"retire: {_stop(i) if i['id'] not in plan.barred else plan.barred[i['id']]}; the running rest "
             f"deliver {running:.1f} of the {plan.need:.1f} jobs/h needed")
            for i in plan.ending
            if not str(i.get("label") or "").endswith(DRAINING)]  # being drained: the tick destroys it once idle


def _unreplaced(plan: _Plan) -> list[tuple[dict[str, Any], str]]:
    """Instances of a GPU model the operators no longer allow, destroyed when the fleet is short, the search
    found nothing it may rent and nothing of ours is still starting: no replacement is on its way, and keeping
    them until the market has one would break the order for as long as it has none (the demand:unmet alert
    then names the restriction). While a replacement starts, or until rents free up, they keep working
    (``_retire``)."""
    if not plan.barred or any(i["status"] != "running" for i in plan.live):
        return []
    running = sum(plan.jph(i) for i in plan.live if i["status"] == "running")
    return [(i, f"retire: {plan.barred[i['id']]}; no offer it allows is left to replace it, and the running rest "
             f"deliver {running:.1f} of the {plan.need:.1f} jobs/h needed")
            for i in plan.ending if i["id"] in plan.barred and not str(i.get("label") or "").endswith(DRAINING)]


def _stop(i: dict[str, Any]) -> str:
    """Why an ending instance stops: its machine's maintenance when the observation's ``maint_s`` says that comes
    first, else its contract's end."""
    left, maint = float(i["ends_s"]), i.get("maint_s")
    if isinstance(maint, int | float) and not isinstance(maint, bool) and maint <= left:
        return f"its machine's maintenance starts in {left / 3600:.1f} h (the host takes it down for hours)"
    return f"its contract ends in {left / 3600:.1f} h (vast.ai then stops it for good)"


@dataclass(frozen=True)
class _Swap:
    """An instance to replace: the jobs/h it is needed for, the $/h the offers replacing it must stay under,
    the search that finds them, and why. A swap for bids may replace the first few candidates together
    (``group``: all it replaces, ``x`` first)."""

    x: dict[str, Any]
    used: float
    limit: float
    search: dict[str, Any]
    why: str
    group: tuple[dict[str, Any], ...] = ()
    others: tuple[_Swap, ...] = ()  # the next dear instances, dearest per job first: tried when this one has no cover


def _swap(plan: _Plan) -> _Swap | None:
    """The running instance costing the most an hour, when the fleet needs less than ``SWAP_USED`` of what
    it delivers (the rest cover the others), with the jobs/h it is needed for: a smaller offer covering
    those for under ``SWAP_SAVING``× its $/h replaces it (rented now, it becomes surplus once it counts).
    Else, with ``policy.interruptible``, an instance running for over an hour (on-demand first, else the bid
    dearest per job: ``bidding.swap_candidates``), replaced by bids covering what the fleet needs of it for under
    ``bidding.SWAP_SHARE`` of its $/h (or with the next candidates: ``_swap_groups``)."""
    if _short(plan) or plan.rents_left <= 0 or len(plan.live) >= plan.cap or plan.credit_held:
        return None
    running = [i for i in plan.live if i["status"] == "running"]
    if not running:
        return None
    x = max(running, key=lambda i: (plan.cost(i), i["id"]))
    used = max(plan.need, plan.keep) - (plan.capacity - plan.jph(x))
    if 0 < used <= SWAP_USED * plan.jph(x):
        return _Swap(x, used, SWAP_SAVING * plan.cost(x), _sizing_search(),
                     f"{SWAP_SAVING:g}× its $/h for the share the fleet uses")
    groups = _swap_groups(plan)
    return groups[0] if groups else _dear(plan, running)


def _dear(plan: _Plan, running: list[dict[str, Any]]) -> _Swap | None:
    """An on-demand fleet's instance costing ``DEAR_PER_JOB``× its cheapest per job or more (rented when the
    market, the rents left this hour or a stop left nothing better), with the jobs/h the fleet needs of it at its
    need: offers covering those for under ``DEAR_SAVING``× its $/h replace it. The dearest per job first, the others
    that dear with it (``others``): the search finds no cover for one (a big box the fleet needs most of) while
    another as dear, smaller, has one, and the swap saving the most $/h is rented. A backlog keeping every instance busy
    (``keep``) does not make all of it needed: a few jobs waiting would then bar every smaller cover, and
    ``_surplus`` keeps it working the backlog until that is worked off anyway. Not while every model's jobs/h is the
    flat guess (not ``informed``): the $ per job of one GPU against another is then a guess. Looked for on the
    first tick of each ``DEAR_EVERY_S`` only: the market seldom changes within it, and a search each tick would
    fill the log with the same answer."""
    per_job = _priced_per_job(plan, running)
    if plan.interruptible or not plan.tp.informed or len(per_job) < 2 or not plan.dear_due:
        return None
    best = min(per_job.values())
    swaps = []
    for x in sorted((i for i in running if i["id"] in per_job), key=lambda i: (-per_job[i["id"]], -i["id"])):
        if per_job[x["id"]] < DEAR_PER_JOB * best:
            break
        used = min(plan.jph(x), plan.need - (plan.capacity - plan.jph(x)))  # at the need: a backlog keeps it
        if used > 0:                                                        # (_surplus)
            swaps.append(_Swap(x, used, DEAR_SAVING * plan.cost(x), _sizing_search(),
                               f"{DEAR_SAVING:g}× its $/h: it costs {per_job[x['id']] / best:.1f}× the fleet's "
                               "cheapest per job"))
    return replace(swaps[0], others=tuple(swaps[1:])) if swaps else None


def _priced_per_job(plan: _Plan, instances: list[dict[str, Any]]) -> dict[int, float]:
    """The $ per job of each running instance among ``instances`` whose $/h and jobs/h are known, its measured
    traffic included: one with no price shown (vast.ai's ``dph_total`` missing) compares nothing, rather than
    counting as $0 a job."""
    return {i["id"]: plan.cost(i) / plan.jph(i) for i in instances
            if i["status"] == "running" and float(i["dph"] or 0.0) > 0 and plan.jph(i) > 0}


def _swap_groups(plan: _Plan) -> list[_Swap]:
    """With ``policy.interruptible``, the swaps for bids: the first candidate (``bidding.swap_candidates``), the
    first two together, and so on, each with the jobs/h the fleet needs of the group (what it delivers less
    what the rest deliver beyond the need) and ``bidding.SWAP_SHARE`` of its $/h; none the rest can do without
    (that is surplus, not a swap). The first alone while every model's jobs/h is the flat
    ``policy.jobs_per_hour`` (not ``informed``): a cover of several instances would rest on a guess."""
    if not plan.interruptible:
        return []
    old = bidding.swap_candidates(plan.live, plan.jph)
    if not plan.tp.informed:  # every jobs/h the flat guess: an RTX 3090 box as good as an RTX 4090 one
        old = old[:1]
    out = []
    for k in range(1, len(old) + 1):
        group = tuple(old[:k])
        jph = sum(plan.jph(i) for i in group)
        used = min(jph, max(plan.need, plan.keep) - (plan.capacity - jph))  # the rest's spare counts
        if used <= 0:
            continue
        dph = sum(plan.cost(i) for i in group)
        what = "the bid dearest per job" if bidding.is_bid(group[0]) else "on-demand"
        out.append(_Swap(group[0], used, bidding.SWAP_SHARE * dph, bidding.swap_search(MAX_GPUS),
                         f"{what} for over {bidding.SWAP_AGE_S / 3600:g} h: bids under {bidding.SWAP_SHARE:g}× its "
                         f"$/h", group))
    return out


def _surplus(plan: _Plan) -> list[dict[str, Any]]:
    """Instances to destroy: over the cap (those not running yet first), then, while the fleet delivers more
    than ``SURPLUS_OVER``× need, the instance costing the most an hour among those the rest can do without,
    need here counting the backlog as cleared by the next tick (``keep``): an instance working off a backlog
    is busy, not surplus, and destroying it only makes the jobs wait longer.
    The jobs are the same whoever does them, so what a surplus costs is its $/h: an H100 kept for 10 jobs/h
    the A100 beside it covers is dearer than the A100, however cheap the H100 is per job. One still starting
    is not surplus (it was rented for a reason a tick ago, and destroying it wastes the rent). With
    ``policy.interruptible`` (bidding.py): no bid running is surplus while a job or more waits (an on-demand
    instance is, when the rest covers the need: the stopgap for an outbid goes once the bids are back); nothing running
    goes for an instance still starting (an outbid or a stalled start would leave the gap); and several bids go
    instead of the dearest an hour where together they save more (the small bids a box was rented to replace,
    rather than the box)."""
    order = sorted(plan.live, key=lambda i: (i["status"] == "running",
                                             -(plan.cost(i) / max(plan.jph(i), 1e-9)), -i["id"]))
    out = order[:max(0, len(plan.live) - plan.cap)]
    held = plan.interruptible and plan.pending >= 1  # bidding.py: jobs wait (an outbid's backlog): bids stay
    spare = [i for i in order[len(out):] if i["status"] == "running"]
    # with bids, what runs, not what still loads: an instance goes once what replaces it works (bidding.py)
    kept = (sum(plan.jph(i) for i in spare) if plan.interruptible
            else plan.capacity - sum(plan.jph(i) for i in out if i not in plan.slow))
    floor = SURPLUS_OVER * max(plan.need, plan.keep)

    def let_go(key: Callable[[dict[str, Any]], Any]) -> list[dict[str, Any]]:
        left, gone, rest = kept, [], list(spare)
        while can_go := [i for i in rest if left - plan.jph(i) >= floor and not (held and bidding.is_bid(i))]:
            i = max(can_go, key=key)
            gone.append(i)
            rest.remove(i)
            left -= plan.jph(i)
        return gone

    # the dearest an hour first; with bids, the dearest per job first when that lets more $/h go (the small
    # bids a bigger box was rented to replace, rather than the box)
    ways = [let_go(lambda i: (plan.cost(i), -plan.jph(i), i["id"]))]
    if plan.interruptible:
        ways.append(let_go(lambda i: (plan.cost(i) / max(plan.jph(i), 1e-9), i["id"])))
    return out + max(ways, key=lambda g: sum(plan.cost(i) for i in g))


def _held_text(plan: _Plan, surplus: list[dict[str, Any]]) -> str:
    """With ``policy.interruptible``, the instances an on-demand fleet would let go that ``_surplus`` keeps, and
    why (bidding.py), for the decision text: an operator who sees the fleet over its need reads what holds it."""
    starting = [f"#{i['id']}" for i in plan.live if i["status"] != "running"]
    if not plan.interruptible or not (plan.pending >= 1 or starting):
        return ""
    held = [i for i in _surplus(replace(plan, interruptible=False)) if i not in surplus]
    if not held:
        return ""
    why = (f"bids stay while {plan.pending} {'job waits' if plan.pending == 1 else 'jobs wait'}" if plan.pending >= 1
           else f"nothing running goes while {', '.join(starting)} {'starts' if len(starting) == 1 else 'start'}")
    ids = ", ".join(f"#{i['id']}" for i in held)
    return f"{ids} kept over need ({why}); "


def _why_no_rent(plan: _Plan) -> str:
    if plan.capacity >= plan.need:
        return "no rentals needed"
    if plan.capacity >= _rent_below(plan) * plan.need:
        return (f"no rentals needed: short {plan.need - plan.capacity:.1f} jobs/h, within {1 - RENT_BELOW:.0%} "
                "of need")
    if plan.credit_held:
        return (f"short {plan.need - plan.capacity:.1f} jobs/h but credit is at or below policy.credit_reserve; "
                "holding rents until a top-up")
    if len(plan.live) >= plan.cap:
        return f"short {plan.need - plan.capacity:.1f} jobs/h but at the instance cap"
    return f"short {plan.need - plan.capacity:.1f} jobs/h but no rents left this hour (policy.max_rents_per_hour)"


def _rent_below(plan: _Plan) -> float:
    """The share of need under which the fleet rents: ``RENT_BELOW`` while the queue is dry relative to the fleet
    (``keep`` is the need alone), 1.0 while a backlog keeps every instance busy past the next tick (the gap
    is then jobs waiting, not rounding)."""
    return RENT_BELOW if plan.keep <= plan.need else 1.0


def _short(plan: _Plan) -> float:
    """Jobs/h to rent: none while capacity covers ``RENT_BELOW``× need (no rent for a rounding-sized gap),
    else up to ``RENT_UP_TO``× need; nothing at the cap."""
    if plan.capacity >= _rent_below(plan) * plan.need or len(plan.live) >= plan.cap or plan.rents_left <= 0 \
            or plan.credit_held:
        return 0.0
    return RENT_UP_TO * plan.need - plan.capacity


def _rent_step(plan: _Plan, results: list[Any]) -> tuple[Calls, str]:
    """After a search (and no rent yet this tick): rent the offers cheapest per job on hosts not avoided,
    until capacity reaches ``RENT_UP_TO``× need, within the instance cap, the rents left this hour and the
    fleet's $/h cap."""
    searched = [e for e in results if e.payload["name"] == "search_offers" and e.payload["ok"]]
    rented_already = any(e.payload["name"] == "rent_instance" for e in results)
    short = _short(plan)
    swap = None if short else _swap(plan)
    if swap:
        short = swap.used
    if not (searched and not rented_already and short > 0):
        return [], "rules provider: done for this tick"
    offers = _parse_offers(searched[-1].payload.get("output", ""))
    for o in offers:
        o["jph"] = o.get("jph") or plan.tp.per_instance(o["gpu"].rsplit(" x", 1)[0], 1)
        o["per_job"] = o.get("per_job") or _cost(o) / max(o["jph"], 1e-9)
    refused = {o["id"]: plan.view.offer_refusal(o["gpu"], o["dph"], o["host"]) for o in offers} if plan.view else {}
    ok = sorted((o for o in offers if o["host"] not in plan.avoid and not refused.get(o["id"])),
                key=lambda o: (o["per_job"], o["dph"], o["id"]))
    ok, outbid_text = (ok, "") if swap else _outbid_gap(plan, ok, short)
    ok, none_fair = (ok, "") if swap else _sliver_offers(plan, ok, short)
    if none_fair:
        return [], none_fair
    fleet_dph = sum(float(i["dph"] or 0.0) for i in plan.live)
    room = max(0, min(plan.cap - len(plan.live), plan.rents_left))

    def choose(short: float, group: tuple[dict[str, Any], ...] = ()) -> tuple[list[dict[str, Any]] | None, str]:
        def cover(pool: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
            return _cheapest_cover(pool, short, room, plan.max_dph - fleet_dph) if swap else \
                _best_cover(pool, short, room, plan.max_dph - fleet_dph, plan.tp.informed,
                            (1 - RENT_BELOW) * plan.need)

        picks = cover(ok)
        for pool in _spread(plan, ok, group)[:-1]:  # spread where it costs little: one outbid, failed rent or bad
            spread = cover(pool)                    # host does not take most of the fleet
            if spread and (not picks or _per_job(spread) <= (1 + bidding.SPREAD_COST) * _per_job(picks)):
                text = ""
                if picks and {o["id"] for o in spread} != {o["id"] for o in picks}:
                    text = (f"; spread (no instance over {bidding.MAX_INSTANCE_SHARE:.0%} of need, "
                            f"no GPU model's bids over {bidding.MAX_MODEL_SHARE:.0%} where the offers allow) for "
                            f"{_per_job(spread) / _per_job(picks) - 1:+.0%} per job")
                return spread, text
        return picks, ""

    if swap:
        return _swap_rent(plan, swap, choose)
    picks, spread_text = choose(short)
    if picks is None:  # nothing within the caps covers the gap: as much as they allow, cheapest per job first
        picks = _as_far_as_allowed(ok, room, plan.max_dph - fleet_dph)
    added = sum(o["jph"] for o in picks)
    calls: Calls = [("rent_instance", {"offer_id": o["id"], "reason":
                                       f"need {plan.need:.1f} jobs/h, have {plan.capacity:.1f}; {o['gpu']} at "
                                       f"${o['dph']:.3f}/h" + (f" + ${o['traffic']:.3f}/h traffic" if
                                                               o.get("traffic") else "")
                                       + f" delivers {o['jph']:.1f} jobs/h: "
                                       f"${o['per_job']:.4f}/job"})
                    for o in picks]
    if any(e.payload["name"] == "destroy_instance" for e in results[results.index(searched[-1]) + 1:]):
        return [], "rules provider: done for this tick"  # the barred already retired this tick (_unreplaced)
    unreplaced = [] if picks else _unreplaced(plan)
    calls += [("destroy_instance", {"instance_id": i["id"], "reason": why}) for i, why in unreplaced]
    skipped = len([o for o in offers if o["host"] in plan.avoid or refused.get(o["id"])])
    best = f"; best on offer ${ok[0]['per_job']:.4f}/job" if ok else ""
    text = (f"rules provider: renting {len(picks)} for {added:.1f} of {short:.1f} jobs/h short{best}"
            + (f"; skipped {skipped} offers on excluded or failed hosts or outside what binds" if skipped else "")
            + spread_text + outbid_text
            + (f"; {len(unreplaced)} of a GPU model the operators no longer allow retired: nothing they allow is "
               "left to replace it" if unreplaced else ""))
    return calls, text


def _as_far_as_allowed(offers: list[dict[str, Any]], room: int, budget: float) -> list[dict[str, Any]]:
    """The first ``room`` offers, in their order, whose $/h fit in ``budget`` together."""
    picks: list[dict[str, Any]] = []
    for o in offers:
        if len(picks) >= room:
            break
        if o["dph"] <= budget:
            picks.append(o)
            budget -= o["dph"]
    return picks


def _sliver_offers(plan: _Plan, offers: list[dict[str, Any]], short: float) -> tuple[list[dict[str, Any]], str]:
    """The offers a gap may be covered from (``_sliver_price``), and when that leaves none, why nothing is
    rented."""
    fair = _sliver_price(plan)
    if fair is None:
        return offers, ""
    ok = [o for o in offers if o["per_job"] < fair]
    return ok, "" if ok else (
        f"rules provider: short {short:.1f} jobs/h, within {1 - RENT_BELOW:.0%} of need, rented for only because a "
        f"backlog keeps every instance busy: no offer under ${fair:.4f}/job ({DEAR_PER_JOB:g}× the fleet's cheapest "
        "per job, the price the fleet would swap out); renting nothing for it")


def _sliver_price(plan: _Plan) -> float | None:
    """The $ per job a sliver of a gap may be rented under, None when any price goes. A gap within
    ``RENT_BELOW`` of the need is rented for only because a backlog keeps every instance busy (``_rent_below``);
    an offer at ``DEAR_PER_JOB``× the fleet's cheapest per job or more would run for hours for that sliver, the
    very instance ``_dear`` replaces. The backlog then waits until the gap is more than a sliver (or clears by
    itself), and a gap that large is covered at whatever the market asks. Not for bid fleets (bidding.py sizes
    those), nor while every model's jobs/h is the flat guess (``informed``)."""
    if plan.capacity < RENT_BELOW * plan.need or not plan.tp.informed or plan.interruptible:
        return None
    # by the fleet's $/h alone, while the offers' $/job carry their traffic: a bound no looser than before (the
    # fleet's measured traffic raising it let a 4-GPU box be rented for a 1.1 jobs/h sliver, seed 11 massstop)
    per_job = _priced_per_job(replace(plan, traffic={}), plan.live)
    return DEAR_PER_JOB * min(per_job.values()) if per_job else None


def _outbid_gap(plan: _Plan, offers: list[dict[str, Any]], short: float) -> tuple[list[dict[str, Any]], str]:
    """The offers a gap may be covered from, and a word for the decision text: with ``policy.interruptible``, bid
    offers only while the gap is within what the outbid instances deliver plus what clearing the backlog within
    ``bidding.BID_DRAIN`` of the horizon adds (outbid instances start again by themselves when the market falls
    back, and bidding.py says why on-demand is not worth renting for that; the sooner drain is worth a bid's
    price, not on-demand's), unless no bid offer is in reach and what runs is short of the arrivals: the queue
    would grow for as long as the market stays up, so the gap is covered on-demand, a stopgap ``_surplus`` lets
    go once the bids cover the need again."""
    if not plan.interruptible:
        return offers, ""
    outbid = sum(plan.jph(i) for i in plan.outbid)
    sooner = plan.pending / plan.drain_h * (1 - bidding.BID_DRAIN) if plan.drain_sooner else 0.0  # what it adds
    if short > outbid + sooner:
        return offers, ""
    bids = [o for o in offers if o.get("type") == "bid"]
    if not bids and plan.outbid and plan.capacity < plan.rate:
        return offers, "; no bid offer in reach and the backlog grows: on-demand until the outbid instances run"
    if not plan.outbid:
        return bids, (f"; short by no more than the {sooner:.1f} jobs/h clearing the backlog within "
                      f"{plan.drain_h * 60:.0f} min adds: bid offers only")
    return bids, (
        f"; short by no more than the {outbid:.1f} jobs/h the outbid instances deliver once the market falls "
        "back: bid offers only, nothing rented on-demand for it")


Chooser = Callable[[float, tuple[dict[str, Any], ...]], tuple[list[dict[str, Any]] | None, str]]


def _swap_rent(plan: _Plan, swap: _Swap, choose: Chooser) -> tuple[Calls, str]:
    """The rents replacing ``swap``'s instance for less an hour. A swap for bids tries the first candidate alone,
    then with the next ones (``_swap_groups``): one cover of them all may cost less than each one's own, and the
    group saving the most $/h is taken."""
    found: list[tuple[float, int, _Swap, list[dict[str, Any]]]] = []
    for g in _swap_groups(plan) if swap.group else [swap, *swap.others]:
        got, _ = choose(g.used, g.group)
        if got is not None and sum(_cost(o) for o in got) < g.limit:
            found.append((sum(plan.cost(i) for i in g.group or (g.x,)) - sum(_cost(o) for o in got),
                          -len(found), g, got))
    if not found:
        return [], (f"rules provider: no offer covers the {swap.used:.1f} jobs/h #{swap.x['id']} is needed for under "
                    f"${swap.limit:.3f}/h; keeping it")
    _, _, g, got = max(found, key=lambda f: (f[0], f[1]))
    old = g.group or (g.x,)
    ids = ", ".join(f"#{i['id']}" for i in old)
    dph = sum(plan.cost(i) for i in old)
    jph = sum(plan.jph(i) for i in old)
    return [("rent_instance", {"offer_id": o["id"], "reason":
                               f"replace {ids} (${dph:.3f}/h, {jph:.1f} jobs/h, {g.used:.1f} needed): "
                               f"{o['gpu']} at ${o['dph']:.3f}/h delivers {o['jph']:.1f} jobs/h"}) for o in got], \
        f"rules provider: renting {len(got)} to replace {ids}, which go{'es' if len(old) < 2 else ''} once they count"


def _spread(plan: _Plan, offers: list[dict[str, Any]],
            without: tuple[dict[str, Any], ...] = ()) -> list[list[dict[str, Any]]]:
    """The offers to cover a gap from, most spread first (``bidding.spread``): no instance rented carrying most of
    the need (one failed rent or bad host would take it) and, with ``policy.interruptible``, no GPU model's bids
    carrying most of it (the fleet's own counted, but for those being replaced: ``without``), where the offers
    allow."""
    fleet: dict[str, float] = {}
    for i in [*plan.live, *plan.outbid]:
        if (bidding.is_bid(i) or bidding.is_outbid(i)) and i not in without:
            fleet[str(i["gpu_name"])] = fleet.get(str(i["gpu_name"]), 0.0) + plan.jph(i)
    return bidding.spread(offers, plan.need, fleet, on_demand=True)


def _cost(o: dict[str, Any]) -> float:
    """What an offer would cost an hour: its $/h and the traffic vast.ai bills on top (search_offers' traffic $/h,
    at the host's $/GB and the fleet's GB/h)."""
    return float(o["dph"]) + float(o.get("traffic") or 0.0)


def _per_job(picks: list[dict[str, Any]]) -> float:
    """What a set of offers costs per job of the capacity it brings, traffic included."""
    return sum(_cost(o) for o in picks) / max(float(sum(o["jph"] for o in picks)), 1e-9)


COVER_STEP = 0.1  # jobs/h: the grain the covers sum capacity in
EXTRA_WORTH = 0.5  # a job/h bought beyond the gap counts for this much of one in the gap (spare, not needed)
BARGAIN_SPEND = 2.0  # a cover chosen per job costs at most this many times the cheapest cover an hour
NEAR_BEST = 0.10  # an offer within this share of the best $ per job on offer is as good as the best
NEAR_PART = 0.5  # ...and rented for this share of the gap or more when too few of them cover all of it


def _sets(offers: list[dict[str, Any]], room: int, limit: float, target: int | None,
          cost_limit: float = math.inf) -> dict[tuple[int, int], tuple[float, tuple[int, ...]]]:
    """For each (offers taken, capacity reached in ``COVER_STEP`` units, capped at ``target`` when given), the
    fewest $/h with traffic (``_cost``) reaching it and the offers' indexes: at most ``room`` offers, ``limit``
    $/h (the caps count $/h) and ``cost_limit`` $/h with traffic in all."""
    best: dict[tuple[int, int], tuple[float, tuple[int, ...]]] = {(0, 0): (0.0, ())}
    for n, o in enumerate(offers):
        units = int(o["jph"] / COVER_STEP + 1e-9)
        if units <= 0 or o["dph"] > limit + 1e-9 or _cost(o) > cost_limit + 1e-9:
            continue
        for (k, c), (cost, idx) in list(best.items()):
            if k >= room or (target is not None and c >= target) or cost + _cost(o) > cost_limit + 1e-9 \
                    or sum(offers[i]["dph"] for i in idx) + o["dph"] > limit + 1e-9:
                continue
            key = (k + 1, c + units if target is None else min(target, c + units))
            new = (cost + _cost(o), idx + (n,))
            if key not in best or new[0] < best[key][0] - 1e-12:
                best[key] = new
    return best


def _gpus(o: dict[str, Any]) -> int:
    """The GPUs of a search_offers row ("RTX 4090 x4": 4)."""
    n = o["gpu"].rsplit(" x", 1)
    return int(n[1]) if len(n) == 2 and n[1].isdigit() else 1


def _in_order(offers: list[dict[str, Any]], idx: tuple[int, ...]) -> list[dict[str, Any]]:
    return sorted((offers[i] for i in idx), key=lambda o: (o["per_job"], o["dph"], o["id"]))


def _cheapest_cover(offers: list[dict[str, Any]], short: float, room: int,
                    budget: float) -> list[dict[str, Any]] | None:
    """The offers that together deliver at least ``short`` jobs/h for the fewest $/h with traffic, at most
    ``room`` of them and ``budget`` $/h in all; None when no such set exists."""
    if short <= 0 or room <= 0:
        return [] if short <= 0 else None
    target = math.ceil(short / COVER_STEP - 1e-9)
    done = [v for (k, c), v in _sets(offers, room, budget, target).items() if c >= target]
    if not done:
        return None
    cost, idx = min(done, key=lambda v: (v[0], -sum(offers[i]["jph"] for i in v[1]), v[1]))
    return _in_order(offers, idx)


def _best_cover(offers: list[dict[str, Any]], short: float, room: int, budget: float, informed: bool = True,
                sliver: float = 0.0) -> list[dict[str, Any]] | None:
    """``_cover_per_job`` for the gap, unless covering its last ``sliver`` of jobs/h (the rounding ``RENT_BELOW``
    leaves unrented) costs over ``DEAR_PER_JOB``× that cover's own $ per job for the jobs/h it adds: then the cover
    of the rest. With the rents of the hour spent down, the whole gap can take a GPU far dearer per job than the
    others in place of one a little short of it; the sliver is rented once rents free up (a backlog keeping every
    instance busy is short at all), not bought for as long as that GPU runs."""
    whole = _cover_per_job(offers, short, room, budget, informed)
    if not whole or short - sliver <= 0 or not informed:
        return whole
    rest = _cover_per_job(offers, short - sliver, room, budget, informed)
    if not rest:
        return whole
    dph, jph = sum(_cost(o) for o in whole), sum(o["jph"] for o in whole)
    extra_dph, extra_jph = dph - sum(_cost(o) for o in rest), jph - sum(o["jph"] for o in rest)
    if extra_dph > 0 and (extra_jph <= 0 or extra_dph / extra_jph > DEAR_PER_JOB * dph / max(jph, 1e-9)):
        return rest
    return whole


def _cover_per_job(offers: list[dict[str, Any]], short: float, room: int,
                   budget: float, informed: bool = True) -> list[dict[str, Any]] | None:
    """The offers to rent for a gap of ``short`` jobs/h, at most ``room`` of them and ``budget`` $/h in all, never
    costing more than ``BARGAIN_SPEND``× the cheapest cover an hour. Offers within ``NEAR_BEST`` of the best $
    per job on offer cover it when they can (a multi-GPU box among them however far it overshoots), or
    ``NEAR_PART`` of it or more when too few of them are left for all of it; not while every model's jobs/h is
    the flat ``policy.jobs_per_hour`` (not ``informed``: the $ per job of one offer against another is then a
    guess, an RTX 3090 box as good as an RTX 4090 one). Failing that, the set that covers
    it for the fewest $ per job: $/h over the jobs/h in the gap plus ``EXTRA_WORTH`` of each job/h beyond it
    (capacity bought at a bargain is worth having, if not as much as what is needed), no multi-GPU box
    delivering more than the whole gap unless the cheapest cover has it. None when nothing covers the gap. The
    jobs are the same whoever does them: a small gap is not covered by the fewest $/h when a little more buys a
    GPU that does each job for less."""
    cheapest = _cheapest_cover(offers, short, room, budget)
    if not cheapest:
        return cheapest
    limit = BARGAIN_SPEND * sum(_cost(o) for o in cheapest)
    target = math.ceil(short / COVER_STEP - 1e-9)

    def per_job(v: tuple[float, tuple[int, ...]], c: int) -> float:
        return v[0] / (min(c, target) + EXTRA_WORTH * max(0, c - target))

    def pick(among: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        done = [(per_job(v, c), v[0], v[1]) for (k, c), v in _sets(among, room, budget, None, limit).items()
                if c >= target]
        return _in_order(among, min(done)[2]) if done else None

    # The gap covered by offers as good per job as the best on offer, when that costs at most BARGAIN_SPEND x
    # the cheapest cover an hour: a multi-GPU box among them too, however far it overshoots the gap (what it
    # brings beyond lets the fleet's dearer instances go: _surplus). Offers a fifth
    # dearer per job would do each of those jobs for a fifth more for as long as they run.
    best = min((o["per_job"] for o in offers if o["dph"] <= budget + 1e-9 and _cost(o) <= limit + 1e-9),
               default=None)
    if best is not None and informed:
        good = [o for o in offers if o["per_job"] <= (1 + NEAR_BEST) * best + 1e-12]
        near = pick(good)
        if near:
            return near
        # Too few of them for the whole gap within the rents and $/h left: as much of it as they cover, when that
        # is NEAR_PART of it or more, and the rest from the other offers as far as the rents left allow (else once
        # rents free up), rather than the whole of it dearer per job for as long as that runs.
        part = max(((c, -v[0], v[1]) for (k, c), v in _sets(good, room, budget, None, limit).items() if c > 0),
                   default=None)
        if part is not None and part[0] >= NEAR_PART * target:
            took = _in_order(good, part[2])
            rest = short - sum(o["jph"] for o in took)
            more = _cover_per_job([o for o in offers if o not in took], rest, room - len(took),
                                  budget - sum(o["dph"] for o in took), informed) if rest > 0 else []
            return took + (more or [])
    # else: a multi-GPU box delivering more than the whole gap is a bet of that much capacity on one host, taken
    # when the cheapest cover needs it, never as a bargain dearer per job than the best
    return pick([o for o in offers if o in cheapest or _gpus(o) == 1 or o["jph"] <= short]) or cheapest


def _is_dead(i: dict[str, Any], stuck_after: float) -> bool:
    """An observed instance that will not work: exited/offline/unknown, stopped without our asking, a
    container that cannot start, waiting in scheduling longer than ``SCHEDULING_LIMIT``, or in a status other
    than running for longer than ``stuck_after`` since that status was first observed."""
    return (i["status"] in DEAD or "OCI runtime" in (i.get("status_msg") or "")
            or _stuck_scheduling(i) or (i["status"] != "running" and i["age_s"] > stuck_after))


# -------------------------------------------------------------- scheduling failures


def _in_scheduling(i: dict[str, Any]) -> bool:
    """vast.ai has not placed the rent on its machine yet: no status, a ``scheduling`` message."""
    return i["status"] == "provisioning" and "scheduling" in str(i.get("status_msg") or "").lower()


def _stuck_scheduling(i: dict[str, Any]) -> bool:
    """Waiting in scheduling for longer than ``SCHEDULING_LIMIT`` (vast.ai schedules in 0.5-4 min): the
    machine will not take it; it is replaced."""
    return _in_scheduling(i) and float(i.get("age_s") or 0.0) > SCHEDULING_LIMIT


def _unschedulable(i: dict[str, Any]) -> bool:
    """Created stopped because the machine could not schedule it (vast.ai's answer without cancel_unavail)."""
    return i["status"] == "stopped" and "unable to schedule" in str(i.get("status_msg") or "").lower()


def _scheduling_failure(i: dict[str, Any]) -> bool:
    return _stuck_scheduling(i) or _unschedulable(i)


def _scheduling_why(i: dict[str, Any]) -> str:
    if _stuck_scheduling(i):
        return (f"it waited in scheduling {int(i['age_s']) // 60} min (over {SCHEDULING_LIMIT / 60:g}); its "
                "machine is not taking it")
    if _unschedulable(i):
        return "its machine could not schedule it (created stopped)"
    return ""


def _scheduling_failed(observations: Any) -> set[int]:
    """Hosts with ``SCHEDULING_HOST_FAILURES`` or more distinct instances of ours that failed to schedule."""
    failed: dict[int, set[int]] = {}
    for obs in observations:
        for i in obs.get("instances") or []:
            if i.get("ours") and i.get("host_id") is not None and _scheduling_failure(i):
                failed.setdefault(int(i["host_id"]), set()).add(int(i["id"]))
    return {h for h, ids in failed.items() if len(ids) >= SCHEDULING_HOST_FAILURES}


def _parse_offers(table: str) -> list[dict[str, Any]]:
    """search_offers' rows: id, GPU, $/h, reliability, host, and jobs/h, $/job, type (bid or on-demand) and traffic
    $/h when the table has them (found by the header's names)."""
    out = []
    lines = table.splitlines()
    col = {name.strip(): n for n, name in enumerate(lines[0].split("|"))} if lines else {}
    jph_at, per_at, type_at = col.get("jobs/h", 6), col.get("$/job", 7), col.get("type", 10)
    traffic_at = col.get("traffic $/h")
    for line in lines[1:]:
        parts = [p.strip() for p in line.split("|")]
        if len(parts) < 5 or not parts[0].isdigit():
            continue
        try:
            o = {"id": int(parts[0]), "gpu": parts[1], "dph": float(parts[2]), "rel": float(parts[3]),
                 "host": int(parts[4]) if parts[4].isdigit() else -1}
        except ValueError:
            continue
        if len(parts) > max(jph_at, per_at):
            o["jph"], o["per_job"] = _number(parts[jph_at]), _number(parts[per_at])
        if len(parts) > type_at and parts[type_at] in ("bid", "on-demand"):  # with bids: how a rent of it places it
            o["type"] = parts[type_at]
        if traffic_at is not None and len(parts) > traffic_at:
            o["traffic"] = _number(parts[traffic_at]) or 0.0
        out.append(o)
    return out


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None
