"""What each GPU model delivers, in jobs an hour per GPU, learned from the fleet's own instances.

The demand source reports the jobs each worker has completed (``workers`` in its answer); every tick's
observation records them per instance (``jobs``). Between two observations in which the queue kept every
running GPU of ours busy (jobs pending at both), an instance that was running at the first did
``jobs_b - jobs_a`` jobs in ``num_gpus × (t_b - t_a)`` GPU-hours. Summed per GPU model over the recent
observations, that is what the model delivers: downtime between ticks, slow starts and restarts included,
which is what sizing needs. Intervals where the queue ran dry cannot say how much more a GPU could have done,
but they do say it did at least what it did: summed per model they are a floor under the estimate, so a
prior that undersells a GPU is corrected even by a fleet that never falls behind (and would otherwise be
kept too large for ever, its surplus never seen).

Until a model has been measured, the configured prior stands in (``policy.jobs_per_hour_by_gpu``, else
``policy.jobs_per_hour``); measurement and prior are blended as if the prior were ``PRIOR_GPU_HOURS`` of
observation, so one short interval cannot swing the estimate. Everything is computed from the log's
observations, so a replay sees the same figures.

A GPU model not yet measured and with no configured prior of its own is not assumed to do the flat
``policy.jobs_per_hour``: vast.ai rates every offer and instance with ``dlperf`` (its deep-learning
performance score), and the jobs an hour per dlperf point the measured models deliver (each with at least
``DLPERF_MIN_GPU_HOURS`` GPU-hours measured, its estimate blended with the flat prior as above, weighed by its
GPU-hours) times the model's dlperf per GPU is its prior. An H100 is then not counted as a quarter of what it
does, nor an RTX A6000 as an RTX 4090, as soon as one model has run busy for a quarter of a GPU-hour: the offers
are ranked per job by what they do from then on, not by a flat guess.

Before any model is measured (and once the measured ones have left the window), ``policy.jobs_per_hour`` is
read as the figure for a GPU of ``policy.jobs_per_hour_dlperf`` dlperf points (about an RTX 4090 by default):
jobs/h per dlperf point is their ratio, so an RTX 3090 is not counted as doing what a GPU twice its dlperf does
(nor an H100 a quarter of what it does) before the fleet has seen either. A model with no dlperf known keeps
the flat figure; 0 turns the scaling off.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from agent.config import Settings
from agent.model import bidding, loading

WINDOW_TICKS = 48
"""Recent observations learned from (4 h at the default 5-minute interval)."""
MAX_GAP_S = 2 * 3600.0
"""Two observations further apart than this are not compared (the daemon was down)."""
PRIOR_GPU_HOURS = 0.25
"""The weight of the prior, in GPU-hours of observation (three ticks of one GPU at the default interval)."""
LEARNED_GPU_HOURS = 1.0
"""GPU-hours measured before a model's figure counts as learned rather than assumed."""
FLOOR_GPU_HOURS = 0.5
"""GPU-hours of intervals with the queue dry before what a model did in them is a floor under its estimate."""
DLPERF_MIN_GPU_HOURS = 0.25
"""GPU-hours a measured model needs before its estimate calibrates the jobs an hour per dlperf point."""


@dataclass(frozen=True)
class Rate:
    """One GPU model's estimate: jobs an hour per GPU, and how many GPU-hours measured it."""

    gpu: str
    jobs_per_h: float
    measured_gpu_h: float = 0.0
    measured_jobs: float = 0.0

    @property
    def learned(self) -> bool:
        return self.measured_gpu_h >= LEARNED_GPU_HOURS


@dataclass(frozen=True)
class Throughput:
    """Jobs an hour per GPU for every model: measured ones blended with the prior, the rest the prior."""

    default: float
    by_gpu: Mapping[str, float] = field(default_factory=dict)  # configured priors
    measured: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # gpu -> (jobs, GPU-hours)
    floor: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # the same, with the queue dry
    dlperf: Mapping[str, float] = field(default_factory=dict)  # gpu -> vast.ai's dlperf per GPU, where known
    reference_dlperf: float = 0.0  # policy.jobs_per_hour_dlperf: the dlperf ``default`` is for; 0: flat

    def _unmeasured(self, gpu: str) -> float:
        """``gpu``'s figure before any measurement: configured, else the flat prior at its dlperf, else flat."""
        if gpu in self.by_gpu:
            return float(self.by_gpu[gpu])
        d = self.dlperf.get(gpu)
        return self.default * d / self.reference_dlperf if d and d > 0 and self.reference_dlperf > 0 \
            else float(self.default)

    def per_dlperf(self, without: str | None = None) -> float | None:
        """Jobs an hour per dlperf point, from the measured models whose dlperf is known (but ``without``: a
        model's own prior is not drawn from its own measurement, which its estimate blends in already); without
        one, the flat prior over the dlperf it is for (``reference_dlperf``), else None."""
        jobs = points = 0.0
        for gpu, (j, h) in self.measured.items():
            d = self.dlperf.get(gpu)
            if d and d > 0 and h >= DLPERF_MIN_GPU_HOURS and gpu != without:
                flat = self._unmeasured(gpu)  # its estimate, over the prior before any measurement, not this one
                jobs += (flat * PRIOR_GPU_HOURS + j) / (PRIOR_GPU_HOURS + h) * h
                points += h * d
        if points > 0:
            return jobs / points
        return self.default / self.reference_dlperf if self.reference_dlperf > 0 else None

    def calibrated(self) -> bool:
        """Whether ``per_dlperf`` comes from measured models (else from ``reference_dlperf``, or nothing)."""
        return any(h >= DLPERF_MIN_GPU_HOURS and (self.dlperf.get(g) or 0) > 0 for g, (_, h) in self.measured.items())

    def basis(self, gpu: str) -> str:
        """What ``gpu``'s figure rests on: measured, configured (policy.jobs_per_hour_by_gpu), dlperf (scaled
        from the measured models) or assumed (policy.jobs_per_hour)."""
        if self.rate(gpu).learned:
            return "measured"
        if gpu in self.by_gpu:
            return "configured"
        return "dlperf" if self.per_dlperf(gpu) is not None and self.dlperf.get(gpu) else "assumed"

    def prior(self, gpu: str) -> float:
        if gpu in self.by_gpu:
            return float(self.by_gpu[gpu])
        k, d = self.per_dlperf(gpu), self.dlperf.get(gpu)
        return k * d if k is not None and d else float(self.default)

    def with_dlperf(self, more: Mapping[str, float]) -> Throughput:
        """The same with dlperf per GPU for models it does not know yet (what an offer search shows)."""
        return replace(self, dlperf={**more, **self.dlperf})

    def rate(self, gpu: str) -> Rate:
        jobs, hours = self.measured.get(gpu, (0.0, 0.0))
        p = self.prior(gpu)
        est = (p * PRIOR_GPU_HOURS + jobs) / (PRIOR_GPU_HOURS + hours)
        low_jobs, low_hours = self.floor.get(gpu, (0.0, 0.0))
        if low_hours >= FLOOR_GPU_HOURS:
            est = max(est, low_jobs / low_hours)  # it did this much without being kept busy
        return Rate(gpu, est, hours, jobs)

    def per_gpu(self, gpu: str) -> float:
        return self.rate(gpu).jobs_per_h

    def per_instance(self, gpu: str, num_gpus: int | None) -> float:
        """Jobs an hour one instance of ``num_gpus`` GPUs of model ``gpu`` delivers."""
        return self.per_gpu(gpu) * max(1, int(num_gpus or 1))

    def usd_per_job(self, dph: float | None, gpu: str, num_gpus: int | None) -> float | None:
        """Dollars per job at ``dph`` $/h; None when unknown (no price, or a model that delivers nothing)."""
        jph = self.per_instance(gpu, num_gpus)
        return None if dph is None or jph <= 0 else float(dph) / jph


def dlperf_of(rows: Iterable[tuple[str | None, int | None, float | None]]) -> dict[str, float]:
    """dlperf per GPU by GPU model from (gpu_name, num_gpus, dlperf) rows (offers or instances), the median
    over each model's rows; rows without a positive dlperf are left out."""
    seen: dict[str, list[float]] = {}
    for gpu, n, d in rows:
        if gpu and isinstance(d, int | float) and d > 0:
            seen.setdefault(gpu, []).append(float(d) / max(1, int(n or 1)))
    return {g: round(statistics.median(v), 2) for g, v in seen.items()}


def prior_only(settings: Settings) -> Throughput:
    p = settings.policy
    return Throughput(p.jobs_per_hour, dict(p.jobs_per_hour_by_gpu), reference_dlperf=p.jobs_per_hour_dlperf)


def measure(observations: Iterable[Mapping[str, Any]], *, busy: bool = True) -> dict[str, tuple[float, float]]:
    """Per GPU model (jobs done, GPU-hours) over consecutive ``observations`` (oldest first) in which the
    queue kept every running GPU of ours busy (``busy``), or in which it did not (``busy=False``: what the
    GPUs did then is less than they could, a floor)."""
    out: dict[str, tuple[float, float]] = {}
    prev: Mapping[str, Any] | None = None
    for obs in observations:
        if prev is not None:
            for gpu, jobs, hours in _interval(prev, obs, busy):
                j, h = out.get(gpu, (0.0, 0.0))
                out[gpu] = (j + jobs, h + hours)
        prev = obs
    return out


def _interval(a: Mapping[str, Any], b: Mapping[str, Any], busy: bool = True) -> list[tuple[str, float, float]]:
    ta, tb = a.get("time"), b.get("time")
    if not isinstance(ta, int | float) or not isinstance(tb, int | float) or not 0 < tb - ta <= MAX_GAP_S:
        return []
    before = {i.get("id"): i for i in a.get("instances") or [] if i.get("ours") and i.get("status") == "running"}
    busy_gpus = sum(int(i.get("num_gpus") or 1) for i in before.values())
    if (_pending(a) >= max(1, busy_gpus) and _pending(b) >= 1) != busy:
        return []  # busy: the queue ran dry, idle GPUs say nothing about what they can do (and vice versa)
    out = []
    for i in b.get("instances") or []:
        x = before.get(i.get("id"))
        ja, jb = (x or {}).get("jobs"), i.get("jobs")
        if x is None or not isinstance(ja, int) or not isinstance(jb, int) or jb < ja:
            continue
        gpus = int(x.get("num_gpus") or 1)
        out.append((str(x.get("gpu_name") or "?"), float(jb - ja), gpus * (tb - ta) / 3600.0))
    return out


def _pending(obs: Mapping[str, Any]) -> int:
    d = obs.get("demand")
    p = d.get("pending") if isinstance(d, dict) else None
    return p if isinstance(p, int) else 0


def recent_observations(log: Any, limit: int = WINDOW_TICKS) -> list[dict[str, Any]]:
    """The last ``limit`` ticks' observations, oldest first."""
    rows = list(log.read(0, kinds=["tick.started"], newest_first=True, limit=limit))
    return [e.payload["observation"] for e in reversed(rows) if isinstance(e.payload.get("observation"), dict)]


def from_observations(settings: Settings, observations: Iterable[Mapping[str, Any]]) -> Throughput:
    """Each GPU model's jobs/h from ``observations`` (oldest first), over the configured prior."""
    base = prior_only(settings)
    seen = list(observations)
    dlperf: dict[str, float] = {}
    for obs in seen:  # oldest first: the newest reading of a model's dlperf stands
        for gpu, m in (obs.get("gpu_models") or {}).items():
            if isinstance(m, dict) and isinstance(m.get("dlperf"), int | float) and m["dlperf"] > 0:
                dlperf[str(gpu)] = float(m["dlperf"])
    return replace(base, measured=measure(seen), floor=measure(seen, busy=False), dlperf=dlperf)


def estimate(log: Any, settings: Settings) -> Throughput:
    """Each GPU model's jobs/h from the recent observations in ``log``."""
    return from_observations(settings, recent_observations(log))


# ------------------------------------------------------------------ what the fleet needs now

DEAD_STATUSES = ("exited", "offline", "unknown", "stopped")
"""Statuses in which an instance of ours delivers nothing and will not by itself (the rules provider's ``DEAD``)."""
FLAP_RESTARTS = 3
"""An instance that stopped running this often since rent is failing between ticks (the rules provider's)."""
RENT_BELOW = 0.95
"""Short only below this share of the need: no rent for a rounding-sized gap (the rules provider's)."""


def _dead(i: Mapping[str, Any], stuck_after: float) -> bool:
    status = i.get("status") or "provisioning"
    return (status in DEAD_STATUSES or int(i.get("restarts") or 0) >= FLAP_RESTARTS
            or (status != "running" and float(i.get("age_s") or 0.0) > stuck_after))


def fleet_need(obs: Mapping[str, Any], tp: Throughput, *, drain_h: float, tick_h: float,
               stuck_after: float, loading_limit: float | None = None,
               rented: Mapping[int, float] | None = None, barred: Mapping[int, str] | None = None,
               destroys: Iterable[int] = (), interruptible: bool = False) -> dict[str, Any] | None:
    """What the fleet must deliver now against what ours deliver, sized as the rules provider sizes it: the
    arrivals plus the backlog cleared within ``drain_h`` hours (a bid fleet's sooner while it has a backlog or an
    instance outbid, ``interruptible``: agent.model.bidding.drain_hours), in jobs an hour, against the jobs an hour of our
    instances that run or are starting (not one still loading ``loading_limit`` s after its rent at ``rented``,
    ``agent.model.loading``; each GPU model's rate from ``tp``); None without a demand reading.

    ``gap`` is what to rent (jobs/h; 0 while ours cover ``RENT_BELOW`` of the need); ``surplus`` the instances
    of ours the rest can do without (the dearest per job first), only while the queue is dry relative to the
    fleet (what waits, ours finish within ``tick_h``): an instance working a backlog off is not surplus;
    ``dead`` the instances of ours that deliver nothing (dead, stuck past ``stuck_after`` or restarting over and
    over), to destroy and replace. The need counts them out, so their replacements are in ``gap``."""
    d = obs.get("demand")
    if not isinstance(d, dict):
        return None
    p = d.get("pending")
    pending = p if isinstance(p, int) else 0
    rate = d.get("arrival_rate_per_h")
    rate = float(rate) if isinstance(rate, int | float) else 0.0
    ours = [i for i in obs.get("instances") or [] if i.get("ours")]
    dead = [i for i in ours if _dead(i, stuck_after)]
    bar = {int(k): v for k, v in (barred or {}).items()}
    held = [i for i in ours if i not in dead and i.get("id") in bar]
    live = [i for i in ours if i not in dead and i not in held]

    def jph(i: Mapping[str, Any]) -> float:
        return tp.per_instance(str(i.get("gpu_name") or "?"), i.get("num_gpus"))

    now = float(obs.get("time") or 0.0)
    capacity = sum(jph(i) for i in live if not loading.slow_loading(i, now, loading_limit, rented or {}))
    drain_h = bidding.drain_hours(drain_h, interruptible=interruptible, outbid=any(bidding.is_outbid(i) for i in ours),
                                  pending=pending, capacity=capacity, tick_h=tick_h)
    need = rate + pending / drain_h
    gap = need - capacity if capacity < RENT_BELOW * need else 0.0
    surplus: list[int] = []
    if pending <= capacity * tick_h:  # the queue is dry relative to the fleet: idle capacity is surplus
        left = capacity
        for i in sorted(live, key=lambda x: (-(float(x.get("dph") or 0.0) / max(jph(x), 1e-9)), x.get("id") or 0)):
            if i.get("status") == "running" and left - jph(i) >= need:
                left -= jph(i)
                surplus.append(int(i["id"]))
    out = {"jobs_per_h": round(need, 1), "arriving_per_h": round(rate, 1), "pending": pending,
           "drain_h": round(drain_h, 2), "capacity": round(capacity, 1), "gap": round(gap, 1),
           "surplus": surplus, "dead": [int(i["id"]) for i in dead]}
    gone = sorted(set(destroys) & {int(i["id"]) for i in dead})
    if gone:
        out["destroying"] = gone
    if held:
        out["barred"] = [{"id": int(i["id"]), "why": bar[int(i["id"])]} for i in held]
        out["barred_jobs_per_h"] = round(sum(jph(i) for i in held), 1)
    return out
