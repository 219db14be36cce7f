"""How the rules provider uses interruptible (bid) instances, with ``policy.interruptible`` on.

The bid itself is one rule, shared by renting and re-bidding (``agent.fleet.market.bid_rule``: the market's
min_bid +5 %, capped at ``policy.max_bid_share`` of the on-demand price). Around it, three decisions:

- **Cover a gap with bids when the bid market can.** The sizing search prefers a bid wherever the rule gives
  one (tools/fleet.py); offers whose min_bid is above the cap come on-demand, so a thin bid market never
  leaves the fleet short.
- **Swap on-demand for bids.** An on-demand instance running for over ``SWAP_AGE_S`` is replaced by bid
  instances covering what it delivers for under ``SWAP_SHARE`` of its $/h; once they count, it is surplus.
- **Headroom for outbids.** An outbid instance is out of work from the moment vast.ai stops it until a re-bid
  or a replacement delivers, so the fleet keeps extra capacity for the outbid rate the recent observations
  show (outbids per bid instance and tick, times the ticks that recovery takes), at most ``MAX_HEADROOM`` of
  what it must deliver: outbids then do not leave jobs waiting.

An outbid instance the tick keeps (stopped, its disk kept, vast.ai starts it again when the market falls back)
is neither dead nor capacity here (``is_outbid``): the gap is covered meanwhile, and once it runs again the
dearest instance the rest can do without goes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

MAX_HEADROOM = 0.2  # at most this share of need added for outbids
SWAP_AGE_S = 3600.0  # an on-demand instance running this long may be swapped for bids...
SWAP_SHARE = 0.85  # ...covering what it delivers for under this share of its $/h
HEADROOM_TICKS = 72  # observations the outbid rate is measured over (6 h at 5 min a tick)
RECOVERY_TICKS = 6  # ticks an outbid leaves capacity missing: seen, a replacement rented and started, the backlog drained


def is_bid(i: dict[str, Any]) -> bool:
    """An interruptible instance in an observation (it carries its ``bid``)."""
    return i.get("bid") is not None


def is_outbid(i: dict[str, Any]) -> bool:
    """Stopped by vast.ai for a higher bid: out of work until its bid holds again; not dead, not its host's fault."""
    return i.get("status") == "stopped" and "outbid" in str(i.get("status_msg") or "").lower()


def outbid_share(observations: Iterable[dict[str, Any]]) -> float:
    """The share of bid capacity an outbid takes before the fleet has made up for it: outbids per sighting of our
    bid instances in ``observations`` (oldest first; an outbid counted when an instance is first seen outbid), times
    the ``RECOVERY_TICKS`` a replacement or a re-bid takes to deliver. Outbid instances kept stopped are not counted
    on: the fleet does not count them as capacity, so it covers them."""
    seen = new = 0
    before: set[int] = set()
    for obs in observations:
        now = set()
        for i in obs.get("instances") or []:
            if i.get("ours") and (is_bid(i) or is_outbid(i)):
                seen += 1
                if is_outbid(i):
                    now.add(i["id"])
        new += len(now - before)
        before = now
    return RECOVERY_TICKS * new / seen if seen else 0.0


def headroom(need: float, bid_capacity: float, share: float) -> float:
    """Jobs/h to keep above ``need`` for outbids: ``share`` of the bid capacity, at most ``MAX_HEADROOM`` x need."""
    return min(MAX_HEADROOM * need, max(0.0, share) * max(0.0, bid_capacity))


def swap_candidate(live: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The dearest on-demand instance running for over ``SWAP_AGE_S``, to swap for bids; None if there is none."""
    old = [i for i in live if not is_bid(i) and i.get("status") == "running"
           and float(i.get("age_s") or 0.0) > SWAP_AGE_S and float(i.get("dph") or 0.0) > 0]
    return max(old, key=lambda i: (float(i["dph"]), i["id"])) if old else None


def swap_search(max_gpus: int) -> dict[str, Any]:
    """The search for bids to replace an on-demand instance: bid offers only, cheapest per job first."""
    return {"limit": 25, "order": "per_job", "max_gpus": max_gpus, "interruptible": True}
