"""The alerts about how the fleet serves demand, checked once a tick after the observation is logged:
``demand:unmet`` (agent.feedback.unmet) and ``instance:underperforming:<id>``
(agent.feedback.underperforming).

This module gathers what those checks need from the fleet layer (the policy in force and who set it,
the pause, exclusions, spend budgets, one market search): the feedback layer below cannot reach it.
"""

from __future__ import annotations

from typing import Any

from agent import logsetup
from agent.clients.vast import VastError
from agent.config import Settings
from agent.feedback.underperforming import check_underperforming
from agent.feedback.unmet import MarketOffer, Situation, capacity_per_instance, check_unmet
from agent.fleet import spend, steering
from agent.fleet.block import norm_gpu
from agent.fleet.toolkit import ToolContext

log_ = logsetup.get_logger(__name__)

MARKET_LIMIT = 100
NOT_WORKING = ("exited", "offline", "stopped", "unknown")


def check_service(ctx: ToolContext, obs: dict[str, Any], tick: int) -> None:
    """Raise, retitle or resolve the unmet-demand and underperforming-instance alerts for this tick."""
    s = ctx.settings
    check_unmet(ctx.log, s, tick, lambda: situation(ctx, obs))
    check_underperforming(ctx.log, s, tick)


def _sources(log: Any) -> dict[str, str]:
    return {k: f"override #{o.id} by {o.by}: {o.reason}" for k, o in steering.active_overrides(log).items()}


def market(ctx: ToolContext, policy: Any) -> list[MarketOffer]:
    """The offers the config allows (its GPU models, price cap and reliability), each marked with the
    override or host exclusion in force that refuses it."""
    cfg = (ctx.configured or ctx.settings).policy
    query: dict[str, Any] = {"rentable": {"eq": True}, "rented": {"eq": False},
                             "disk_space": {"gte": ctx.settings.fleet.disk_gb},
                             "gpu_name": {"in": list(cfg.allowed_gpus)}, "num_gpus": {"eq": 1},
                             "dph_total": {"lte": cfg.max_dph_per_instance},
                             "reliability": {"gte": cfg.min_reliability}}
    offers = ctx.vast.search_offers(query, allocated_storage=ctx.settings.fleet.disk_gb, limit=MARKET_LIMIT,
                                    order=[("dph_total", "asc")])
    ctx.offers.update((o.id, o) for o in offers)  # a rent later in the tick takes its offer from here
    excluded = steering.excluded_hosts(ctx.settings, ctx.log)
    allowed = {norm_gpu(g) for g in policy.allowed_gpus}
    out = []
    for o in offers:
        dph = o.dph_total if o.dph_total is not None else float("inf")
        why: str | None = None
        if norm_gpu(o.gpu_name) not in allowed:
            why = "allowed_gpus"
        elif dph > policy.max_dph_per_instance:
            why = "max_dph_per_instance"
        elif (o.reliability or 0.0) < policy.min_reliability:
            why = "min_reliability"
        elif o.host_id is not None and o.host_id in excluded:
            why = "excluded_hosts"
        out.append(MarketOffer(o.gpu_name or "?", dph, o.host_id, why))
    return out


def situation(ctx: ToolContext, obs: dict[str, Any]) -> Situation:
    """What ``find_cause`` reads, gathered now (one market search)."""
    log, s = ctx.log, ctx.settings
    policy = steering.effective_policy(ctx.configured or s, log)
    d = obs.get("demand") or {}
    ours = [i for i in obs.get("instances") or [] if i.get("ours")]
    live = [i for i in ours if i.get("status") not in NOT_WORKING]
    pause = steering.paused(log)
    offers: list[MarketOffer] | None
    error = None
    try:
        offers = market(ctx, policy)
    except VastError as e:
        offers, error = None, str(e)[:200]
        log_.warning("unmet.market_unavailable", error=error)
    fitting = sorted(o.dph for o in offers or [] if o.refused_by is None)
    budget = spend.budget_block(log, policy, fitting[0]) if fitting else None
    excluded = steering.excluded_hosts(s, log)
    sources = _sources(log)
    if excluded:
        by = sorted({x.by for x in excluded.values()})
        sources["excluded_hosts"] = f"{len(excluded)} hosts, by {', '.join(by)}"
    balance = obs.get("balance")
    return Situation(
        pending=int(d.get("pending") or 0), rate_per_h=float(d.get("arrival_rate_per_h") or 0.0), live=len(live),
        starting=sum(1 for i in live if i.get("status") != "running"),
        fleet_dph=sum(float(i.get("dph") or 0.0) for i in live), policy=policy, sources=sources,
        paused=pause.describe() if pause is not None else None,
        balance=float(balance) if isinstance(balance, int | float) else None,
        rents_last_hour=ctx.policy.rents_last_hour(log), budget_block=budget.detail if budget else None,
        budget_rule=budget.rule if budget else "budget",
        offers=offers, market_error=error,
        decider="the rules provider" if s.model.provider == "rules" else "the model",
        per_instance=_per_instance(live, s, obs))


def _per_instance(live: list[dict[str, Any]], s: Settings, obs: dict[str, Any]) -> float:
    """Jobs/h an instance of this fleet delivers, on average over the live ones (each GPU model as measured,
    else its prior); the prior alone when nothing is live."""
    rates = [capacity_per_instance(str(i.get("gpu_name")), s, obs) * max(1, int(i.get("num_gpus") or 1))
             for i in live]
    return sum(rates) / len(rates) if rates else capacity_per_instance(None, s, obs)
