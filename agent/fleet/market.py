"""What the market does to instances already rented, handled in code each tick whatever the model provider.

- Traffic: vast.ai bills bandwidth per GB (the host's ``inet_up_cost`` / ``inet_down_cost``) on top of
  ``dph_total``. Each instance's billed counters are noted (``instance.traffic``, cumulative) when its traffic
  cost grew by ``TRAFFIC_STEP`` dollars or more since the last note, or at all once it stopped, so spend,
  budgets and caps count it (agent/fleet/spend.py). What the fleet's own instances moved per hour since their
  rent (``traffic_gbph``) prices the traffic an offer would bill at its host's $/GB (``offer_traffic_dph``):
  search_offers counts it in an offer's $/job, so a host cheap by the hour but dear by the GB is not the best
  buy it looks.
- Bids: one rule (``bid_rule``) prices every bid, on renting (tools/fleet.py) and on re-bidding here: the
  market's ``min_bid`` +``BID_MARGIN``, capped at ``policy.max_bid_share`` of the on-demand price; none when
  the min_bid is above that cap. Each bid change is logged as ``instance.bid``, which spend counts.
- Outbids: an interruptible instance whose bid is below the market's ``min_bid`` is stopped by vast.ai. Its
  work is lost. When the rule's bid fits the cap, the bid is raised (``PUT /instances/bid_price/{id}/``) and the
  instance starts again with its disk. Otherwise it is kept, stopped (only its storage bills): vast.ai starts
  it again by itself once the market falls back under its bid, while the fleet covers the gap (the rules
  provider does not count it as capacity); still stopped after ``OUTBID_KEEP_S`` it is destroyed.
  ``instance.outbid`` says which, a warning alert tells the operator. No ``host.failed``: the host did
  nothing wrong.
- When the market falls, a bid well above the rule's is lowered to it (``lower_bids``), but not within
  ``REBID_QUIET_S`` of an outbid of that instance: the market that just outbid it may rise again.
- Price increases: a host may ask more for a running contract (``GET /instances/pending-price-increases/``).
  Within ``policy.max_price_increase`` it is accepted; above it, rejected, the operator told (a warning alert),
  and the instance destroyed so the fleet is sized again without it (a rejected contract ends anyway at its end
  date). ``price.increase`` records each decision once.
"""

from __future__ import annotations

from collections.abc import Iterable

from agent import logsetup
from agent.clients.vast import Instance, PriceIncrease, VastError
from agent.fleet import steering
from agent.fleet.pipeline import system_destroy
from agent.fleet.spend import storage_dph
from agent.fleet.toolkit import Outcome, ToolContext
from agent.store.log import EventLog
from agent.times import parse_ts, utc_ts

log_ = logsetup.get_logger(__name__)

BID_MARGIN = 0.05
"""A bid goes this far above the offer's min_bid now (the market moves; a bid at min_bid is outbid at once)."""
LOWER_OVER = 0.02  # a running bid this share above the rule's is lowered to it
REBID_QUIET_S = 3600.0  # no lowering of an instance's bid within this long after it was outbid
OUTBID_KEEP_S = 2 * 3600.0  # an outbid instance kept stopped this long without starting again is destroyed


def bid_rule(min_bid: float | None, on_demand: float | None, max_bid_share: float) -> float | None:
    """The bid fleet-agent places, renting or re-bidding: ``min_bid`` x (1 + ``BID_MARGIN``), at most
    ``max_bid_share`` x the on-demand $/h; None when the min_bid itself is above that cap (or either is unknown)."""
    if min_bid is None or on_demand is None or on_demand <= 0 or min_bid <= 0:
        return None
    cap = round(max_bid_share * on_demand, 4)
    if min_bid > cap + 1e-9:
        return None
    return round(min(cap, min_bid * (1 + BID_MARGIN)), 4)


def on_demand_dph(inst: Instance) -> float | None:
    """An instance's on-demand $/h: its GPU price (vast.ai's ``dph_base``) plus the storage it rented."""
    base = inst.raw.get("dph_base")
    if not isinstance(base, int | float) or isinstance(base, bool) or base <= 0:
        return None
    return float(base) + (storage_dph(inst.raw.get("disk_space"), inst.raw.get("storage_cost")) or 0.0)


def note_bid(ctx: ToolContext, inst: Instance, new_bid: float, why: str) -> None:
    """``instance.bid``: the instance's bid (its $/h) from now on; spend counts it (agent/fleet/spend.py)."""
    ctx.log.append("instance.bid", {"instance_id": inst.id, "old_bid": _r(inst.dph_total), "bid": new_bid,
                                    "min_bid": _r(inst.min_bid), "why": why}, "system", ctx.tick)
TRAFFIC_STEP = 0.01  # dollars of traffic between two notes of one instance
OUTBID_REASON = "outbid: vast.ai stopped this interruptible instance for a higher bid; its work is lost"
PRICE_REASON = "rejected a price increase above policy.max_price_increase; replaced rather than kept at the new price"


def is_outbid(inst: Instance) -> bool:
    """An interruptible instance vast.ai stopped for a higher bid (we never stop one ourselves)."""
    return bool(inst.is_bid) and inst.actual_status == "stopped" and (
        "outbid" in (inst.status_msg or "").lower() or inst.intended_status == "running")


def traffic_cost(up_gb: float, down_gb: float, up_cost: float, down_cost: float) -> float:
    return up_gb * up_cost + down_gb * down_cost


TRAFFIC_MIN_AGE_S = 1800.0  # an instance counts in the fleet's traffic rate from this long after its rent


def traffic_gbph(instances: list[Instance], owned: set[int], now: float) -> tuple[float, float] | None:
    """GB up and down an instance of the fleet moves an hour: the traffic vast.ai billed the owned running
    instances, over the hours since their rent, of those rented ``TRAFFIC_MIN_AGE_S`` ago or more (the minutes
    an instance loads move little, so a young one reads low); None until one has counters. The hours since the
    rent include loading and any stop, so the rate reads a little low, never high."""
    gb_up = gb_down = hours = 0.0
    for i in instances:
        t = i.traffic_gb() if i.id in owned and i.actual_status == "running" else None
        if t is None or i.start_date is None or now - i.start_date < TRAFFIC_MIN_AGE_S:
            continue
        gb_up, gb_down, hours = gb_up + t[0], gb_down + t[1], hours + (now - i.start_date) / 3600.0
    return (gb_up / hours, gb_down / hours) if hours > 0 else None


def offer_traffic_dph(up_cost: float | None, down_cost: float | None, gbph: tuple[float, float] | None) -> float:
    """The $/h of traffic an instance of an offer would bill, at the host's $/GB and the fleet's GB/h (0 while
    the fleet has measured none)."""
    if gbph is None:
        return 0.0
    return traffic_cost(gbph[0], gbph[1], float(up_cost or 0.0), float(down_cost or 0.0))


def traffic_dph(log: EventLog, ids: Iterable[int]) -> dict[int, float]:
    """The traffic $/h of each of these instances between its last two ``instance.traffic`` notes (the notes
    come every ``TRAFFIC_STEP`` dollars while it runs); none for one with fewer (it has billed under a cent:
    a host that bills no traffic, or little)."""
    want = set(ids)
    rows = [r for r in (log.store.instance(i) for i in want) if r is not None]
    if not rows:
        return {}
    # newest first, from their rents on, until each has its last two: a month-old instance's notes are not all read
    last: dict[int, list[tuple[float, float]]] = {}
    left = {r.instance_id for r in rows}
    for e in log.read(min(r.rented_seq for r in rows), kinds=["instance.traffic"], newest_first=True):
        iid, p = int(e.payload["instance_id"]), e.payload
        if iid in left:
            points = last.setdefault(iid, [])
            points.append((parse_ts(e.ts).timestamp(),
                           traffic_cost(p["up_gb"], p["down_gb"], p["up_cost"], p["down_cost"])))
            if len(points) == 2:
                left.discard(iid)
                if not left:
                    break
    out: dict[int, float] = {}
    for iid, points in last.items():
        if len(points) == 2 and points[0][0] > points[1][0]:
            (b, cost_b), (a, cost_a) = points
            out[iid] = max(0.0, cost_b - cost_a) * 3600.0 / (b - a)
    return out


def last_traffic(log: EventLog, since_seq: int = 0) -> dict[int, dict[str, float]]:
    """The newest ``instance.traffic`` note per instance (from ``since_seq`` on)."""
    out: dict[int, dict[str, float]] = {}
    for e in log.read(since_seq, kinds=["instance.traffic"]):
        out[int(e.payload["instance_id"])] = dict(e.payload)
    return out


def note_traffic(log: EventLog, listing: list[Instance], owned: set[int], tick: int | None = None) -> int:
    """Log ``instance.traffic`` for each owned instance whose billed traffic cost grew by ``TRAFFIC_STEP`` or
    more since its last note (or that has none yet and some traffic), or grew at all while it is not running:
    a stopped instance moves no data, so its counters are final until it runs again and spend has them whole.
    Returns the notes logged."""
    seen: list[tuple[Instance, tuple[float, float]]] = []
    for i in listing:
        t = i.traffic_gb() if i.id in owned else None
        if t is not None and (t[0] > 0 or t[1] > 0):
            seen.append((i, t))
    if not seen:
        return 0
    # Notes of these instances come after their rents: read from the oldest of them, not the whole log.
    rows = [log.store.instance(i.id) for i, _ in seen]
    last = last_traffic(log, min((r.rented_seq for r in rows if r is not None), default=0))
    n = 0
    for inst, (up, down) in seen:
        up_cost, down_cost = float(inst.inet_up_cost or 0.0), float(inst.inet_down_cost or 0.0)
        cost = traffic_cost(up, down, up_cost, down_cost)
        prev = last.get(inst.id)
        if prev is not None:
            grown = cost - traffic_cost(prev["up_gb"], prev["down_gb"], prev["up_cost"], prev["down_cost"])
            if grown < TRAFFIC_STEP and (inst.actual_status == "running" or grown <= 0):
                continue
        log.append("instance.traffic", {"instance_id": inst.id, "up_gb": round(up, 6), "down_gb": round(down, 6),
                                        "up_cost": up_cost, "down_cost": down_cost}, "system", tick)
        n += 1
    return n


Rebids = dict[int, tuple[float | None, float | None, float]]  # id -> (old bid, market min_bid, new bid)


def _outbid_events(ctx: ToolContext, outbid: list[Instance]) -> dict[int, list[tuple[float, str]]]:
    """For each outbid instance of ours, the ``instance.outbid`` events (epoch, action) of its current outbid: logged
    since the observations first saw it stopped (none when they have not yet: a new outbid). An instance outbid
    again later, even at the same bid, is a new outbid."""
    states = ctx.log.instance_states()
    since = {}
    for i in outbid:
        st = states.get(i.id)
        since[i.id] = st.since - 1.0 if st is not None and st.status == "stopped" else float("inf")
    rows = [r for r in (ctx.log.store.instance(i.id) for i in outbid) if r is not None]
    out: dict[int, list[tuple[float, str]]] = {i.id: [] for i in outbid}
    for e in ctx.log.read(min((r.rented_seq for r in rows), default=0), kinds=["instance.outbid"]):
        iid, at = int(e.payload["instance_id"]), parse_ts(e.ts).timestamp()
        if iid in out and at >= since[iid]:
            out[iid].append((at, str(e.payload.get("action"))))
    return out


def _outbid_now(ctx: ToolContext) -> list[Instance]:
    """Outbid instances of ours whose current outbid is not handled yet; none while the fleet is paused."""
    outbid = sorted((i for i in ctx.ours() if is_outbid(i)), key=lambda i: i.id)
    if not outbid or steering.paused(ctx.log) is not None:
        return []
    seen = _outbid_events(ctx, outbid)
    return [i for i in outbid if not seen[i.id]]


def rebid_outbid(ctx: ToolContext, *, dry_run: bool) -> Rebids:
    """Before the tick's observation: raise the bid of each outbid instance of ours where the policy allows it
    (see ``_rebid``), then list again so the observation shows them starting. Logged by ``handle_outbid``."""
    if dry_run:
        return {}
    out: Rebids = {}
    for inst in _outbid_now(ctx):
        new_bid = _rebid(ctx, inst)
        if new_bid is not None:
            out[inst.id] = (inst.dph_total, inst.min_bid, new_bid)
            note_bid(ctx, inst, new_bid, "outbid")
            log_.warning("market.rebid", instance_id=inst.id, bid=new_bid)
    if out:
        try:
            ctx.refresh()
        except VastError as e:
            log_.warning("market.rebid_listing_failed", error=str(e))
    return out


def handle_outbid(ctx: ToolContext, *, dry_run: bool, rebids: Rebids | None = None) -> list[Outcome]:
    """Each outbid instance of ours: ``instance.outbid`` and a warning alert; rebid before the observation
    (``rebids``) or destroyed through the tool pipeline (``system.destroy`` first), once per instance and bid.
    Nothing while the fleet is paused."""
    from agent import feedback

    for iid, (bid, min_bid, new_bid) in sorted((rebids or {}).items()):
        ctx.log.append("instance.outbid", {"instance_id": iid, "bid": bid, "min_bid": min_bid, "action": "rebid",
                                           "new_bid": new_bid}, "system", ctx.tick)
    outcomes = []
    kept = ctx.settings.policy.interruptible and not dry_run
    for inst in _outbid_now(ctx):
        action = "dry_run" if dry_run else "kept" if kept else "destroyed"
        ctx.log.append("instance.outbid", {"instance_id": inst.id, "bid": inst.dph_total, "min_bid": inst.min_bid,
                                           "action": action}, "system", ctx.tick)
        then = ("kept stopped until the market falls back under its bid (vast.ai then starts it again); the fleet "
                "covers the gap meanwhile" if action == "kept" else "destroyed and replaced")
        feedback.raise_alert(ctx.log, key=f"outbid:{inst.id}", severity="warning",
                             title=f"interruptible instance {inst.id} was outbid; its work is lost",
                             detail=f"bid ${inst.dph_total or 0:.4f}/h < market min_bid ${inst.min_bid or 0:.4f}/h on "
                             f"{inst.gpu_name}; {then} (policy.max_bid_share bounds the bids)",
                             tick=ctx.tick, settings=ctx.settings)
        if action != "kept":
            outcomes.append(_destroy_outbid(ctx, inst, dry_run))
    for inst in _kept_too_long(ctx):
        outcomes.append(_destroy_outbid(ctx, inst, dry_run))
    feedback.resolve_absent(ctx.log, "outbid:", {f"outbid:{i.id}" for i in ctx.ours() if is_outbid(i)}, ctx.tick,
                            reason="the outbid instance runs again or is gone")
    return outcomes


def _kept_too_long(ctx: ToolContext) -> list[Instance]:
    """Outbid instances kept stopped (``instance.outbid`` kept) for ``OUTBID_KEEP_S`` or more: the market has not
    fallen back under their bid; they are destroyed (the fleet has covered the gap meanwhile)."""
    stopped = sorted((i for i in ctx.ours() if is_outbid(i)), key=lambda i: i.id)
    if not stopped or steering.paused(ctx.log) is not None:
        return []
    now = ctx.log.clock().timestamp()
    seen = _outbid_events(ctx, stopped)
    return [i for i in stopped
            if any(action == "kept" and now - at >= OUTBID_KEEP_S for at, action in seen[i.id])]


def _destroy_outbid(ctx: ToolContext, inst: Instance, dry_run: bool) -> Outcome:
    from agent import feedback

    outcome = system_destroy(ctx, inst.id, status="stopped", reason=OUTBID_REASON, dry_run=dry_run)
    log_.warning("market.outbid", instance_id=inst.id, ok=outcome.ok, dry_run=dry_run)
    if outcome.ok and not dry_run:
        feedback.resolve_alert(ctx.log, f"outbid:{inst.id}", "the outbid instance is destroyed", ctx.tick)
    return outcome


def _rebid(ctx: ToolContext, inst: Instance) -> float | None:
    """Raise an outbid instance's bid to the rule's (``bid_rule``) when the market's min_bid fits
    ``policy.max_bid_share`` of its on-demand price; the new bid, or None when it does not fit, is not allowed,
    or vast.ai refused it."""
    p = ctx.settings.policy
    bid = bid_rule(inst.min_bid, on_demand_dph(inst), p.max_bid_share) if p.interruptible else None
    if bid is None or bid <= (inst.dph_total or 0.0) + 1e-9:
        return None  # no bid fits, or the rule's is no higher: it starts again by itself when the market falls
    try:
        ctx.vast.change_bid(inst.id, bid)
    except VastError as e:
        log_.warning("market.rebid_refused", instance_id=inst.id, error=str(e))
        return None
    return bid


def lower_bids(ctx: ToolContext, *, dry_run: bool) -> list[tuple[int, float, float]]:
    """The market fell: each running interruptible instance of ours whose bid is over ``LOWER_OVER`` above the
    rule's for the market's min_bid now gets the rule's bid, unless it was outbid within ``REBID_QUIET_S``.
    Logged as ``instance.bid``; returns (id, old bid, new bid) for each lowered. Nothing in a dry run or while
    the fleet is paused."""
    p = ctx.settings.policy
    if dry_run or not p.interruptible or steering.paused(ctx.log) is not None:
        return []
    live = [i for i in ctx.ours() if i.is_bid and i.actual_status in ("running", "loading")]
    if not live:
        return []
    rows = [ctx.log.store.instance(i.id) for i in live]
    since = min((r.rented_seq for r in rows if r is not None), default=0)
    now = ctx.log.clock()
    recent = {int(e.payload["instance_id"]) for e in ctx.log.read(since, kinds=["instance.outbid"])
              if (now - parse_ts(e.ts)).total_seconds() < REBID_QUIET_S}
    out = []
    for inst in sorted(live, key=lambda i: i.id):
        bid = bid_rule(inst.min_bid, on_demand_dph(inst), p.max_bid_share)
        old = inst.dph_total or 0.0
        if bid is None or inst.id in recent or old <= bid * (1 + LOWER_OVER):
            continue
        try:
            ctx.vast.change_bid(inst.id, bid)
        except VastError as e:
            log_.warning("market.lower_bid_refused", instance_id=inst.id, error=str(e))
            continue
        note_bid(ctx, inst, bid, "market_fell")
        log_.info("market.bid_lowered", instance_id=inst.id, old=old, bid=bid)
        out.append((inst.id, old, bid))
    return out


def handle_price_increases(ctx: ToolContext, *, dry_run: bool) -> list[tuple[PriceIncrease, str]]:
    """Read the pending price increases; on instances of ours, accept those within ``policy.max_price_increase``
    and reject the rest (then destroy the instance: the fleet is sized again without it). Each decision is logged
    once (``price.increase``); a rejection raises a warning alert. Returns (row, decision) for the rows decided.
    A failed read is logged as a warning and retried next tick."""
    from agent import feedback

    if steering.paused(ctx.log) is not None:
        return []
    feedback.resolve_absent(ctx.log, "price:", {f"price:{i.id}" for i in ctx.ours()}, ctx.tick,
                            reason="the instance whose price rose is replaced")
    try:
        rows = ctx.vast.pending_price_increases()
    except VastError as e:
        log_.warning("market.price_increases_unavailable", error=str(e))
        return []
    owned = {i.id for i in ctx.ours()}
    rows = [r for r in rows if r.instance_id in owned]
    if not rows:
        return []
    decided = {int(e.payload["pending_id"]) for e in ctx.log.read(0, kinds=["price.increase"]) if e.payload.get("ok")}
    cap = float(ctx.settings.policy.max_price_increase)
    out: list[tuple[PriceIncrease, str]] = []
    for row in sorted(rows, key=lambda r: r.id):
        if row.id in decided:
            continue
        share = row.share()
        accept = share is not None and share <= cap + 1e-9
        decision = "accepted" if accept else "rejected"
        payload = {"instance_id": row.instance_id, "pending_id": row.id, "old_dph": _r(row.old_dph_gpu),
                   "new_dph": _r(row.new_dph_gpu), "share": None if share is None else round(share, 4), "cap": cap,
                   "decision": decision, "ok": not dry_run,
                   "effective": utc_ts_of(row.contract_end_date)}
        if dry_run:
            payload["error"] = "dry run"
        else:
            try:
                if not ctx.vast.answer_price_increase(row.id, accept=accept):
                    payload.update(ok=False, error="no longer pending")
            except VastError as e:
                payload.update(ok=False, error=str(e))
        ctx.log.append("price.increase", payload, "system", ctx.tick)
        out.append((row, decision))
        if accept:
            continue
        feedback.raise_alert(ctx.log, key=f"price:{row.instance_id}", severity="warning",
                             title=f"host of instance {row.instance_id} raised its price "
                             f"{'+' + format(share, '.0%') if share is not None else ''}; rejected",
                             detail=f"above policy.max_price_increase +{cap:.0%}; the instance is destroyed and "
                             "the fleet sized again without it", tick=ctx.tick, settings=ctx.settings)
        if payload["ok"]:
            system_destroy(ctx, row.instance_id, status="price_increase", reason=PRICE_REASON, dry_run=False)
    return out


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def utc_ts_of(epoch: float | None) -> str | None:
    from datetime import UTC, datetime

    return None if epoch is None else utc_ts(datetime.fromtimestamp(epoch, tz=UTC))
