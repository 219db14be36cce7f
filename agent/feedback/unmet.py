"""Demand left unmet: the alert ``demand:unmet``, and the cause code finds for it.

A tick is *unmet* when jobs are waiting and the queue is not draining on course: it did not shrink since
the previous tick, or it shrinks too slowly to empty within ``DRAIN_TICKS`` ticks. ``alerts.unmet_after``
unmet ticks in a row open the alert, whoever decides (the rules provider or a model); it resolves when
the queue drains (nothing pending). Its title names the cause, found in code from a ``Situation`` the
runtime gathers (the policy in force and who set each value, the pause, credit, the market):

    pause        the fleet is paused: nothing is rented
    credit       the account's credit does not cover an hour of the cheapest fitting offer
    cap          max_instances reached, max_total_dph or a spend budget leaves no room, rents per hour used up
    restriction  an operator's override or host exclusion leaves too few offers while others would fit
    market       no offer (or too few) fits the policy at all
    decider      nothing in code stops renting: the decider has not rented enough

This module only reads the situation and the log it is given; ``agent.runtime.watch`` gathers it.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from agent.feedback.alerts import raise_alert, resolve_alert
from agent.store.log import EventLog

KEY_UNMET = "demand:unmet"
DRAIN_TICKS = 12  # a queue that shrinks fast enough to empty within this many ticks is being served
DRAIN_HOURS = 2.0  # the backlog a right-sized fleet should work off within this long
JOBS_PER_INSTANCE_H = 8.0  # the prior until the fleet's delivered throughput is known


def capacity_per_instance(gpu_name: str | None = None, settings: Any = None,
                          obs: dict[str, Any] | None = None) -> float:
    """Jobs an hour one GPU of ``gpu_name`` delivers: as the fleet measured it (the observation's
    ``gpu_models``, agent/fleet/throughput.py), else the configured prior for that model
    (``policy.jobs_per_hour_by_gpu``), else ``policy.jobs_per_hour`` (8 when no settings are given)."""
    models = (obs or {}).get("gpu_models") or {}
    m = models.get(gpu_name) if gpu_name else None
    if isinstance(m, dict) and isinstance(m.get("jobs_per_h"), int | float) and m["jobs_per_h"] > 0:
        return float(m["jobs_per_h"])
    policy = getattr(settings, "policy", None)
    by_gpu = getattr(policy, "jobs_per_hour_by_gpu", None) or {}
    if gpu_name in by_gpu:
        return float(by_gpu[gpu_name])
    prior = getattr(policy, "jobs_per_hour", None)
    return float(prior) if isinstance(prior, int | float) and prior > 0 else JOBS_PER_INSTANCE_H


def unmet_tick(obs: dict[str, Any]) -> bool | None:
    """Whether one observation shows demand unmet: True, False, or None when the queue was not seen."""
    d = obs.get("demand")
    if not isinstance(d, dict) or not isinstance(d.get("pending"), int):
        return None
    pending = int(d["pending"])
    if pending <= 0:
        return False
    delta = d.get("pending_delta")
    if isinstance(delta, int) and delta < 0 and pending <= -delta * DRAIN_TICKS:
        return False  # draining on course
    return True


def unmet_streak(log: EventLog, limit: int) -> int:
    """Unmet ticks in a row at the log's end (the newest ``tick.started`` first), up to ``limit``."""
    n = 0
    for e in log.read(0, kinds=["tick.started"], newest_first=True, limit=limit):
        if unmet_tick(e.payload.get("observation") or {}) is not True:
            break
        n += 1
    return n


# ------------------------------------------------------------------ the situation and its cause


@dataclass(frozen=True)
class MarketOffer:
    """One offer of a search the config allows (its GPUs, price and reliability), and what refuses it now."""

    gpu_name: str
    dph: float
    host_id: int | None
    refused_by: str | None = None  # an override or exclusion that refuses it (policy key or "excluded_hosts")


@dataclass(frozen=True)
class Situation:
    """What the runtime saw when demand went unmet: inputs to ``find_cause``, all plain values."""

    pending: int
    rate_per_h: float
    live: int                     # instances of ours that may work (not exited / offline)
    starting: int                 # of those, not running yet
    fleet_dph: float
    policy: Any                   # the PolicySettings in force (config with overrides applied)
    sources: dict[str, str] = field(default_factory=dict)  # policy key -> who set it, when not the config
    paused: str | None = None     # the pause in force, described
    balance: float | None = None
    rents_last_hour: int = 0
    budget_block: str | None = None  # why a spend budget refuses the cheapest fitting offer
    budget_rule: str = "budget"      # which budget (max_daily_spend, max_monthly_spend)
    offers: list[MarketOffer] | None = None  # None: the market could not be searched
    market_error: str | None = None
    decider: str = "the model"
    per_instance: float = JOBS_PER_INSTANCE_H


@dataclass(frozen=True)
class Cause:
    kind: str  # pause | credit | cap | restriction | market | decider
    key: str   # the policy key or condition named
    text: str  # what the title says: stable while the cause holds (a changed title is an alert.retitled)
    more: str = ""  # the figures that move every tick (queue, spend, credit): the alert's detail


def needed_instances(s: Situation) -> int:
    """Instances the queue needs at ``s.per_instance`` jobs/h: arrivals plus the backlog over DRAIN_HOURS."""
    return max(1, math.ceil((s.rate_per_h + s.pending / DRAIN_HOURS) / s.per_instance))


def _who(s: Situation, key: str) -> str:
    return s.sources.get(key) or "config"


def _gpus(v: Any) -> str:
    return "[" + ", ".join(v) + "]" if isinstance(v, list) else str(v)


def _fitting(s: Situation) -> list[MarketOffer]:
    return [o for o in (s.offers or []) if o.refused_by is None]


def find_cause(s: Situation) -> list[Cause]:
    """Why demand goes unmet, most binding first (never empty)."""
    p, need = s.policy, needed_instances(s)
    out: list[Cause] = []
    sizing = (f"the queue needs ~{need} instances ({s.rate_per_h:.0f} jobs/h arriving + {s.pending} waiting over "
              f"{DRAIN_HOURS:g} h, at {s.per_instance:g} jobs/h each), {s.live} live")
    if s.paused:
        out.append(Cause("pause", "paused", f"the fleet is {s.paused}"))
    fitting = sorted(_fitting(s), key=lambda o: o.dph)
    cheapest = fitting[0].dph if fitting else None
    if s.balance is not None and (s.balance <= 0 or (cheapest is not None and s.balance < cheapest)):
        out.append(Cause("credit", "credit", "credit does not cover an hour of the cheapest fitting offer"
                         + (f" (${cheapest:.3f}/h)" if cheapest is not None else "") + "; top up the account",
                         f"credit ${s.balance:,.2f}"))
    if s.live >= p.max_instances:
        out.append(Cause("cap", "max_instances", f"max_instances={p.max_instances} ({_who(s, 'max_instances')}) "
                         f"reached with {s.live} live", sizing))
    if cheapest is not None and s.fleet_dph + cheapest > p.max_total_dph + 1e-9:
        out.append(Cause("cap", "max_total_dph", f"max_total_dph=${p.max_total_dph:g}/h ({_who(s, 'max_total_dph')}) "
                         f"leaves no room for the cheapest fitting offer (${cheapest:.3f}/h)",
                         f"the fleet costs ${s.fleet_dph:.2f}/h; {sizing}"))
    if s.budget_block:
        out.append(Cause("cap", "budget", f"{s.budget_rule} ({_who(s, s.budget_rule)}) refuses the cheapest fitting "
                         "offer", s.budget_block))
    if s.rents_last_hour >= p.max_rents_per_hour:
        out.append(Cause("cap", "max_rents_per_hour", f"max_rents_per_hour={p.max_rents_per_hour} "
                         f"({_who(s, 'max_rents_per_hour')}) used up", f"{s.rents_last_hour} rents in the last hour"))
    market = _market_causes(s, need, fitting)
    if not out and (fitting or not market):  # offers fit and nothing in code stops renting them
        starting = f"; {s.starting} starting" if s.starting else ""
        out.append(Cause("decider", "decider", f"nothing in policy or the market stops renting: {s.decider} has not "
                         "rented enough", f"{sizing}{starting}; {len(fitting)} fitting offers"))
    return out + market


def _market_causes(s: Situation, need: int, fitting: list[MarketOffer]) -> list[Cause]:
    """A restriction that leaves too few offers while others would fit, or a market with too few."""
    if s.offers is None:
        return [Cause("market", "market", "the market could not be searched",
                      s.market_error or "no answer")] if s.live < need else []
    short = need - s.live
    if short <= 0 or len(fitting) >= short:
        return []
    p = s.policy
    refused = Counter(o.refused_by for o in s.offers if o.refused_by is not None)
    where = "1 offer" if len(fitting) == 1 else f"{len(fitting)} offers"
    out = []
    for key, _ in refused.most_common():
        would = Counter(o.gpu_name for o in s.offers if o.refused_by == key)
        models = ", ".join(f"{c} {g}" for g, c in sorted(would.items(), key=lambda kv: (-kv[1], kv[0])))
        if key == "allowed_gpus":
            what = f"allowed_gpus={_gpus(p.allowed_gpus)} ({_who(s, key)}) leaves {where} under " \
                   f"${p.max_dph_per_instance:g}/h"
        elif key == "excluded_hosts":
            what = f"host exclusions ({_who(s, key)}) leave {where}"
        else:
            what = f"{key}={getattr(p, key, '?')} ({_who(s, key)}) leaves {where}"
        fit = "offer would fit" if sum(would.values()) == 1 else "offers would fit"
        out.append(Cause("restriction", key, f"{what}; {models} {fit}", f"{short} more instances needed"))
    if not out:
        out.append(Cause("market", "market", f"the market has {where} that fit the policy (allowed_gpus="
                         f"{_gpus(p.allowed_gpus)}, at most ${p.max_dph_per_instance:g}/h, reliability at least "
                         f"{p.min_reliability:g})", f"{short} more instances needed"))
    return out


def title_of(streak: int, causes: list[Cause]) -> str:
    return f"jobs waiting {streak} ticks: {causes[0].text}"


def check_unmet(log: EventLog, settings: Any, tick: int | None, situation: Any) -> list[Cause]:
    """Open, retitle or resolve ``demand:unmet`` for the newest observation. ``situation`` is called (no
    arguments, returning a ``Situation``) only when the alert is due: it may search the market.
    Returns the causes found (empty when the alert is not due)."""
    after = int(settings.alerts.unmet_after)
    if after <= 0:
        return []
    newest = next(iter(log.read(0, kinds=["tick.started"], newest_first=True, limit=1)), None)
    obs = newest.payload.get("observation") or {} if newest is not None else {}
    now = unmet_tick(obs)
    if now is False and int((obs.get("demand") or {}).get("pending") or 0) <= 0:
        resolve_alert(log, KEY_UNMET, "the queue drained", tick)
        return []
    streak = unmet_streak(log, after)
    if streak < after:
        return []
    causes = find_cause(situation())
    also = "; ".join(f"{c.text} ({c.more})" if c.more else c.text for c in causes[1:])
    detail = "; ".join(x for x in (causes[0].more, f"also: {also}" if also else "") if x)
    raise_alert(log, key=KEY_UNMET, severity="warning", title=title_of(streak, causes), detail=detail, tick=tick,
                settings=settings)
    return causes
