"""How the rules provider uses interruptible (bid) instances, with ``policy.interruptible`` on.

The bid itself is one rule, shared by renting and re-bidding (``agent.fleet.market.bid_rule``: the market's
min_bid +5 %, capped at ``policy.max_bid_share`` of the on-demand price). Around it:

- **Cover a gap with bids when the bid market can.** The sizing search prefers a bid wherever the rule gives
  one (tools/fleet.py); offers whose min_bid is above the cap come on-demand, so a thin bid market never
  leaves the fleet short.
- **Swap for bids.** An on-demand instance running for over ``SWAP_AGE_S`` (else, with none, the bid instance
  dearest per job) is replaced by bid instances covering what the fleet needs of it (its jobs/h less what the
  rest deliver beyond the need) for under ``SWAP_SHARE`` of its $/h; once they count, it is surplus. A bid is
  no bargain in itself: one placed when its GPU model was cheapest per job stays dearer than the bids the
  market offers later, and the capacity the fleet carries beyond its need is not worth replacing. The next
  candidates (``swap_candidates``) are tried with it, together: no bid offer may cover the few jobs/h one small
  bid is needed for under its $/h, while one box cheaper per job covers it and its neighbours for less than
  they cost together (the swap saving the most $/h is taken). Not while every jobs/h figure is the flat
  ``policy.jobs_per_hour`` (nothing measured or configured): that trades instances that work for a box whose
  jobs/h is a guess (an RTX 3090 counted as an RTX 4090), and its backlog costs more than the saving.
- **Spread the bids** (and the on-demand rents: ``spread``'s ``on_demand``; a failed rent or a bad host takes a
  whole instance too). One outbid takes a whole instance, and a GPU model's bid market moves as one, so no
  bid instance is rented to carry more than ``MAX_INSTANCE_SHARE`` of what the fleet must deliver (unless no
  bid offer is smaller), nor one GPU model's bids more than ``MAX_MODEL_SHARE`` of it, where the offers allow:
  ``spread`` gives the rent choice its offers capped both ways, then by the instance cap alone; the first
  whose cover costs at most ``SPREAD_COST`` more per job than the cover from all offers is taken, else the
  latter. An outbid then costs the fleet a share of its capacity, not most of it, where that insurance is cheap.
- **No headroom for outbids; a backlog cleared sooner.** An outbid takes a bid instance's capacity until a
  re-bid or a replacement delivers, as an exited host takes an on-demand one's: the jobs it leaves waiting are in
  the need, so the fleet is sized on arrivals plus backlog as an on-demand one is, but for the horizon: a bid
  fleet clears its backlog within ``BID_DRAIN`` of ``policy.drain_within`` (15 min of the default hour; the
  observation's ``need`` says the same to a model) while an instance is outbid or more jobs wait than the fleet
  finishes within a tick (``drain_hours``). Capacity bought for a backlog costs a bid's price and goes
  once the queue is dry (billed by the second), and the jobs that piled up while the fleet started, or before an
  outbid's cover ran, would otherwise wait behind the arrivals for most of the hour. What the shorter horizon
  adds to the shortfall is covered with bids only (rules.py ``_outbid_gap``), as an outbid's gap is below. First only
  while an instance was outbid; for every backlog since, bench/interruptible.py's bid arm (seeds 0-31) waits 1.07
  min on average instead of 1.19 (on-demand: 1.07), and saves 36.0 % instead of 36.2 % (the first hour's wait
  0.50 -> 0.35 min, for 2.6 more rents in 12 h). Standing capacity kept above the need for the outbid rate seen
  bought its wait with the saving (need x 1.05: seed 0 saved 8.8 % instead of 27.7 %), not the same wait for less.

- **Wait out an outbid rather than pay on-demand for it, while the queue does not grow.** While the fleet's
  shortfall is within what its outbid instances deliver, it is covered from bid offers only: those instances
  start again by themselves when the market falls back (the market hour ends), and an on-demand instance rented
  for their gap costs on-demand's $/job for hours (it is swapped for bids only once a cheaper bid cover turns
  up) and outlasts them when it is bigger than they are: in bench/interruptible.py's seed 3, 15 % of the bid
  arm's spend for 11 % of its jobs. A shortfall beyond that (the backlog grown past it, a host lost too) is
  covered as any other, on-demand where the bid market cannot. And when no bid offer is in reach at all and
  what still runs is short of the arrivals, the queue grows for as long as the market stays up (seed 3: an
  hour at 22 of 30 jobs/h): the gap is covered on-demand then too, a stopgap that goes as soon as the bids
  cover the need again, jobs waiting or not (``_surplus`` holds bids only). Bid arm, seeds 0-15: mean wait
  1.40 -> 1.20 min (on-demand 0.97) for 0.9 points of the saving (37.4 % -> 36.5 %); seed 3 waits 3.89 min
  instead of 5.78 (on-demand 4.01).

- **Keep what runs while jobs wait.** No bid running is surplus while a job or more waits: the backlog an outbid
  leaves behind (the jobs that piled up before its cover ran) is cleared by the cover and whatever else runs, not
  by the arrivals' margin once the extra instance is trimmed (32 jobs/h for 30 arriving clears two jobs in an
  hour, every job arriving meanwhile waiting behind them). Once the queue is dry the surplus goes as before.
  With the shorter horizon above, bench/interruptible.py's bid arm (seeds 0-15) waits 1.88 min on average
  instead of 2.73 (on-demand: 1.10) for 1.3 points of the saving (38.8 % to 37.5 %): the tail of an outbid's
  backlog was the largest part of what outbids added to the wait.

- **Let go once the replacement runs.** Nothing running goes for an instance still starting. A swap's bids
  (one an hour as the market moves) were counted while they loaded, so the instances they replaced went the
  next tick; a replacement outbid or stuck in scheduling then left the fleet with neither (seed 5: no capacity
  for 15 minutes). And where several bids together save more an hour than the box rented to replace them, they
  go rather than the box: the dearest an hour alone is the box, and letting it go would start the swap again.
  bench/interruptible.py's bid arm waits 1.61 min on average instead of 2.20 over seeds 0-7 (on-demand: 1.09),
  1.40 instead of 1.90 over seeds 0-15 (0.97), for 0.9 and 0.1 points of the saving (33.1 % to 32.2 %, 37.5 %
  to 37.4 %). The on-demand rules keep the old way: held the same way, bench/outcomes.py's on-demand fleets
  waited less but paid more per job than the cron script in two more cells of 110.

An outbid instance the tick keeps (stopped, its disk kept, vast.ai starts it again when the market falls back)
is neither dead nor capacity here (``is_outbid``): the gap is covered meanwhile, and once it runs again the
dearest instance the rest can do without goes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

MAX_INSTANCE_SHARE = 0.4  # a bid instance rented carries at most this share of need...
MAX_MODEL_SHARE = 0.6  # ...and one GPU model's bids at most this share, where the offers allow
SPREAD_COST = 0.10  # the spread cover is taken when it costs at most this much more per job than the cheapest
SWAP_AGE_S = 3600.0  # an instance running this long may be swapped for bids...
SWAP_SHARE = 0.85  # ...covering what the fleet needs of it for under this share of its $/h
BID_DRAIN = 0.25  # a bid fleet clears its backlog within this share of policy.drain_within


def drain_hours(drain_h: float, *, interruptible: bool, outbid: bool, pending: float, capacity: float,
                tick_h: float) -> float:
    """The hours within which the fleet clears its backlog: ``drain_h`` (``policy.drain_within``), or ``BID_DRAIN``
    of it for a bid fleet (``interruptible``) while an instance of ours is ``outbid`` or more waits (``pending``)
    than the fleet's ``capacity`` (jobs/h) finishes within a tick (``tick_h``): a job or two that a free GPU picks
    up within the tick is no backlog to rent for. The rules provider and the observation's ``need`` both size on
    it."""
    sooner = interruptible and (outbid or pending > capacity * tick_h)
    return drain_h * (BID_DRAIN if sooner else 1.0)


def is_bid(i: dict[str, Any]) -> bool:
    """An interruptible instance in an observation (it carries its ``bid``)."""
    return i.get("bid") is not None


def is_outbid(i: dict[str, Any]) -> bool:
    """Stopped by vast.ai for a higher bid: out of work until its bid holds again; not dead, not its host's fault."""
    return i.get("status") == "stopped" and "outbid" in str(i.get("status_msg") or "").lower()


def swap_candidates(live: list[dict[str, Any]], jph: Callable[[dict[str, Any]], float]) -> list[dict[str, Any]]:
    """The instances that may be swapped for bids, among those running for over ``SWAP_AGE_S``, in the order they
    are given up: the on-demand ones dearest an hour first, then the bid ones dearest per job (``jph``: what an
    instance delivers, jobs/h). The swap replaces the first of them, or the first few together when one cover of
    what the fleet needs of them costs less than each one's own (one large bid box cheaper per job than three
    small bids: instances replaced one at a time never find it)."""
    old = [i for i in live if i.get("status") == "running" and float(i.get("age_s") or 0.0) > SWAP_AGE_S
           and float(i.get("dph") or 0.0) > 0]
    on_demand = sorted((i for i in old if not is_bid(i)), key=lambda i: (float(i["dph"]), i["id"]), reverse=True)
    bids = sorted((i for i in old if is_bid(i)), key=lambda i: (float(i["dph"]) / max(jph(i), 1e-9), i["id"]),
                  reverse=True)
    return on_demand + bids


def swap_search(max_gpus: int) -> dict[str, Any]:
    """The search for bids to replace an on-demand instance: bid offers only, cheapest per job first."""
    return {"limit": 25, "order": "per_job", "max_gpus": max_gpus, "interruptible": True}


def spread(offers: list[dict[str, Any]], need: float, fleet_bids: dict[str, float],
           on_demand: bool = False) -> list[list[dict[str, Any]]]:
    """The offers a gap is covered from, most spread first: bid offers (``type`` "bid" in a search_offers row),
    and on-demand ones too with ``on_demand``, delivering at most ``MAX_INSTANCE_SHARE`` of ``need`` jobs/h (or
    the smallest such offer's jobs/h, when none is that small) and, of each GPU model, only as many bid offers
    (cheapest per job first) as keep its bids, with the fleet's own (``fleet_bids``: jobs/h per model), within
    ``MAX_MODEL_SHARE`` of need; then the instance cap alone; then all of them. On-demand offers not capped are
    in every one. Each list keeps ``offers``' order; no list repeats the one before."""
    capped = [o for o in offers if on_demand or o.get("type") == "bid"]
    if not capped or need <= 0:
        return [offers]
    most = max(MAX_INSTANCE_SHARE * need, min(float(o["jph"]) for o in capped))
    small = [o for o in offers if o not in capped or float(o["jph"]) <= most + 1e-9]
    taken = dict(fleet_bids)
    per_model = []
    for o in sorted((o for o in small if o.get("type") == "bid"), key=lambda o: (o["per_job"], o["dph"], o["id"])):
        model = o["gpu"].rsplit(" x", 1)[0]
        if taken.get(model, 0.0) + float(o["jph"]) <= MAX_MODEL_SHARE * need + 1e-9:
            taken[model] = taken.get(model, 0.0) + float(o["jph"])
            per_model.append(o)
    both = [o for o in small if o.get("type") != "bid" or o in per_model]
    out: list[list[dict[str, Any]]] = []
    for pool in (both, small, offers):
        if not out or len(pool) != len(out[-1]):
            out.append(pool)
    return out
