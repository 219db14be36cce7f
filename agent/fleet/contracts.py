"""Contract end dates: every vast.ai offer runs until its host's listing ends (``duration``, seconds from now)
and a contract rented from it ends then (the instance's ``end_date``). At that date vast.ai stops the instance
for good: it can never start again, and its disk bills storage until destroyed. The fleet rents no offer that
ends within ``policy.contract_min_hours``, and an instance ending within ``policy.retire_ahead_hours`` is retired:
it no longer counts as capacity (its replacement is rented) and is drained. A host's maintenance window takes the
machine down for hours: an instance whose window starts first is treated as ending then.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agent import logsetup
from agent.clients.vast import Instance, Offer, VastClient, VastError

log_ = logsetup.get_logger(__name__)


def retiring(left: float | None, settings: Any) -> bool:
    """An instance with ``left`` seconds to run is being retired: drained, and replaced (``Settings.retire_ahead_s``).
    Until then it works and counts as capacity, however near its end the observation shows it."""
    return left is not None and left < settings.retire_ahead_s()


def horizon_s(policy: Any) -> float:
    """``policy.contract_min_hours`` in seconds (0: contract ends are not looked at)."""
    return float(policy.contract_min_hours) * 3600.0


def offer_left(offer: Offer) -> float | None:
    """Seconds until a contract rented from ``offer`` would stop working: the earlier of its end (the offer's
    ``duration``) and its machine's next maintenance window (``maint_in``); None when it has neither."""
    left = [t for t in (offer.duration, offer.maint_in) if t is not None]
    return min(left) if left else None


def instance_left(inst: Instance, now: float) -> float | None:
    """Seconds until ``inst`` stops working for good or for hours (negative once it has): the earlier of its
    contract's end and its machine's next maintenance window (``maint_start``, agent/fleet/drain.py); None when
    it has neither."""
    ends = [t for t in (inst.end_date, inst.maint_start) if t is not None]
    return min(ends) - now if ends else None


def too_short(left: float | None, policy: Any) -> bool:
    """A contract with ``left`` seconds to run ends within the horizon (one with no end date never does)."""
    h = horizon_s(policy)
    return h > 0 and left is not None and left < h


def ends_in(left: float | None) -> str:
    """``ends in 3 d`` / ``ends in 5 h`` / ``ends in 40 min`` / ``ended`` / ``no end date``."""
    if left is None:
        return "no end date"
    if left <= 0:
        return "ended"
    if left >= 2 * 86400:
        return f"ends in {left / 86400:.0f} d"
    if left >= 3600:
        return f"ends in {left / 3600:.0f} h"
    return f"ends in {max(1, int(left // 60))} min"


def maintenance_starts(vast: VastClient, machine_ids: list[int]) -> dict[int, float]:
    """machine id -> the start of its next maintenance window not over yet, for those of ``machine_ids`` that have
    one (one call: GET /machines/maintenances). On failure none, logged as a warning: the tick goes on."""
    if not machine_ids:
        return {}
    try:
        windows = vast.maintenances(sorted(set(machine_ids)))
    except VastError as e:
        log_.warning("contracts.maintenances_unavailable", error=str(e))
        return {}
    first: dict[int, float] = {}
    for w in windows:
        first[w.machine_id] = min(first.get(w.machine_id, w.start), w.start)
    return first


def offers_with_maintenance(vast: VastClient, offers: list[Offer], now: float) -> list[Offer]:
    """``offers`` with ``maint_in`` set where their machine has a maintenance window ahead: a contract rented
    there stops working when it starts."""
    first = maintenance_starts(vast, [o.machine_id for o in offers if o.machine_id is not None])
    return [replace(o, maint_in=first[o.machine_id] - now) if o.machine_id in first else o for o in offers]


def hours(policy: Any) -> str:
    return f"{float(policy.contract_min_hours):g} h"


__all__ = ["ends_in", "horizon_s", "hours", "instance_left", "maintenance_starts", "offer_left",
           "offers_with_maintenance", "too_short"]
