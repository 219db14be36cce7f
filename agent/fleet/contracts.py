"""Contract end dates: every vast.ai offer runs until its host's listing ends (``duration``, seconds from now)
and a contract rented from it ends then (the instance's ``end_date``). At that date vast.ai stops the instance
for good: it can never start again, and its disk bills storage until destroyed. The fleet neither rents an
offer that ends within ``policy.contract_min_hours`` nor counts an instance ending that soon as capacity.
"""

from __future__ import annotations

from typing import Any

from agent.clients.vast import Instance, Offer


def horizon_s(policy: Any) -> float:
    """``policy.contract_min_hours`` in seconds (0: contract ends are not looked at)."""
    return float(policy.contract_min_hours) * 3600.0


def offer_left(offer: Offer) -> float | None:
    """Seconds until ``offer``'s contract would end, or None when vast.ai sends no duration."""
    return offer.duration


def instance_left(inst: Instance, now: float) -> float | None:
    """Seconds until ``inst``'s contract ends (negative once it has), or None when it has no end date."""
    return None if inst.end_date is None else inst.end_date - now


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


def hours(policy: Any) -> str:
    return f"{float(policy.contract_min_hours):g} h"


__all__ = ["ends_in", "horizon_s", "hours", "instance_left", "offer_left", "too_short"]
