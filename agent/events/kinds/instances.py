"""Kinds of instances: adopted, gone, a pending rent settled, and the system's own destroy of a stopped one."""

from __future__ import annotations

from dataclasses import dataclass

from agent.events.event import Event, JsonArray, Message
from agent.events.kinds.base import VOCABULARY
from agent.events.payload import Payload
from agent.events.rendering import (
    inline,
    user,
)
from agent.events.vocabulary import Version

_define = VOCABULARY.define


# ---------------------------------------------------------------- instances


@dataclass(frozen=True, kw_only=True)
class InstanceAdoptedV1(Payload):
    instance_id: int
    label: str
    idem_key: str | None = None
    gpu_name: str | None = None
    dph: float | None = None
    storage_dph: float | None = None  # its disk's $/h, billed while it does not run (spend counts it)


@dataclass(frozen=True, kw_only=True)
class InstanceGoneV1(Payload):
    instance_id: int
    last_status: str | None = None


_define("instance.adopted", "An instance carrying one of our idempotency keys was found and recorded as ours.",
        Version(1, InstanceAdoptedV1))
_define("instance.gone", "An instance we owned is no longer listed by vast.ai.", Version(1, InstanceGoneV1))


@dataclass(frozen=True, kw_only=True)
class RentSettledV1(Payload):
    call_id: str
    label: str
    created: bool
    reason: str
    idem_key: str | None = None
    instance_id: int | None = None


def _r_rent_settled_v1(e: Event, p: RentSettledV1) -> Message:
    """``[system · rent settled] call ID (label L): created as instance N | not created — reason``."""
    what = f"created as instance {p.instance_id}" if p.created else "not created"
    return user(f"[system · rent settled] call {p.call_id} (label {p.label}): {what} — {p.reason}")


_define("rent.settled", "A rent whose outcome was unknown (pending) was settled by looking.",
        Version(1, RentSettledV1, _r_rent_settled_v1))



# ---------------------------------------------------------------- the system's destroy of a stopped instance

# The system's own destroy of an instance of ours that vast.ai shows stopped (agent.runtime.tick).
#
# fleet-agent never stops an instance, so one of ours that shows ``stopped`` is a failure that still bills
# storage: the tick destroys it through the tool pipeline whatever the model does. ``system.destroy`` (why)
# is logged first, then the intent (``tool.called`` with its idempotency key), the call and the result, as
# for an operator's destroy (``operator.destroy``).


@dataclass(frozen=True, kw_only=True)
class SystemDestroyV1(Payload):
    instance_id: int
    status: str
    reason: str


def _r_system_destroy_v1(e: Event, p: SystemDestroyV1) -> Message:
    """``[system destroy] instance N (status) — reason``; the call's result follows."""
    return user(f"[system destroy] instance {p.instance_id} ({inline(p.status)}) — {inline(p.reason)}")


VOCABULARY.define("system.destroy", "The tick destroyed an instance of ours that vast.ai shows stopped (the tool "
                  "call and result follow).", Version(1, SystemDestroyV1, _r_system_destroy_v1))


# ---------------------------------------------------------------- drain (agent/fleet/drain.py)
#
# An instance being retired (its contract ends, or its machine's maintenance window starts, within
# policy.retire_ahead_hours) is drained first: labelled ``<label>-draining``, so the workers finish the job in hand
# and take no new one, then destroyed once idle or 30 min before it would stop (``system.destroy``, status
# ``draining``). Labelling is idempotent: ``system.drain`` is logged after the call, with its outcome.


@dataclass(frozen=True, kw_only=True)
class SystemDrainV1(Payload):
    instance_id: int
    label: str
    reason: str
    ok: bool
    error: str | None = None
    dry_run: bool | None = None


def _r_system_drain_v1(e: Event, p: SystemDrainV1) -> Message:
    """``[system drain] instance N labelled L — reason`` and the outcome."""
    if p.dry_run:
        outcome = "dry run: not sent"
    else:
        outcome = "no new work goes to it" if p.ok else f"not labelled: {inline(p.error or 'failed')}"
    return user(f"[system drain] instance {p.instance_id} labelled {inline(p.label)} — {inline(p.reason)}: {outcome}")


VOCABULARY.define("system.drain", "The tick labelled an instance of ours being retired ``<label>-draining``: it "
                  "finishes its job and takes no new one (the label call is idempotent: logged after, with its "
                  "outcome).", Version(1, SystemDrainV1, _r_system_drain_v1))


# ---------------------------------------------------------------- credit (agent/feedback/credit.py)
#
# At $0 vast.ai stops every instance, keeping the disks (storage still bills), refuses rents and starts
# with HTTP 402, and starts nothing by itself after a top-up. A credit stop is a money event: the instances
# are kept, and started again (``system.start``) once the credit is above ``policy.credit_reserve``.


@dataclass(frozen=True, kw_only=True)
class CreditStoppedV1(Payload):
    instance_ids: JsonArray
    reserve: float
    credit: float | None = None


def _r_credit_stopped_v1(e: Event, p: CreditStoppedV1) -> Message:
    """``[system credit] vast.ai stopped instances #1, #2 for lack of credit (credit $-0.12) ...``."""
    ids = ", ".join(f"#{i}" for i in p.instance_ids)
    credit = f"credit ${p.credit:,.2f}" if p.credit is not None else "credit unknown"
    return user(f"[system credit] vast.ai stopped instances {ids} for lack of credit ({credit}). They are kept "
                "(disks kept, storage billed), not failures: do not destroy or replace them. No rent is possible "
                f"at or below the credit reserve ${p.reserve:,.2f}; they are started again after a top-up.")


@dataclass(frozen=True, kw_only=True)
class SystemStartV1(Payload):
    instance_id: int
    reason: str
    ok: bool
    error: str | None = None
    dry_run: bool | None = None


def _r_system_start_v1(e: Event, p: SystemStartV1) -> Message:
    """``[system start] instance N — reason`` and the outcome."""
    if p.dry_run:
        outcome = "dry run: not sent"
    else:
        outcome = "started" if p.ok else f"not started: {inline(p.error or 'failed')}"
    return user(f"[system start] instance {p.instance_id} — {inline(p.reason)}: {outcome}")


_define("credit.stopped", "vast.ai stopped instances of ours for lack of credit; they are kept, not failures.",
        Version(1, CreditStoppedV1, _r_credit_stopped_v1))
_define("system.start", "The tick started an instance of ours that vast.ai had stopped for lack of credit, after "
        "a top-up (start is idempotent: logged after the call, with its outcome).",
        Version(1, SystemStartV1, _r_system_start_v1))


# ---------------------------------------------------------------- the market: traffic, outbids, price increases
#
# vast.ai bills bandwidth per GB on top of dph_total; the tick notes each instance's billed traffic (cumulative
# GB and its $/GB prices) so spend counts it (agent/fleet/market.py). An interruptible instance whose bid falls
# below the market's min_bid is stopped by vast.ai (outbid): its work is lost; it is rebid, kept until the market
# falls back, or replaced. Each change of a bid (raised after an outbid, lowered when the market fell) is an
# ``instance.bid``, which spend counts. A host may ask a price increase on a running contract: accepted within
# ``policy.max_price_increase``, else rejected and replaced.


@dataclass(frozen=True, kw_only=True)
class InstanceTrafficV1(Payload):
    instance_id: int
    up_gb: float
    down_gb: float
    up_cost: float
    down_cost: float


@dataclass(frozen=True, kw_only=True)
class InstanceOutbidV1(Payload):
    instance_id: int
    bid: float | None = None
    min_bid: float | None = None
    action: str  # destroyed | rebid | kept | dry_run
    new_bid: float | None = None  # rebid: the bid placed to keep the instance (its $/h from then on)


def _r_instance_outbid_v1(e: Event, p: InstanceOutbidV1) -> Message:
    """``[system outbid] instance N lost its GPU: bid $x/h < min_bid $y/h; its work is lost; ...``."""
    bid = f"${p.bid:.4f}/h" if p.bid is not None else "?"
    floor = f"${p.min_bid:.4f}/h" if p.min_bid is not None else "?"
    raised = f"bid raised to ${p.new_bid:.4f}/h to keep it (its disk kept; it starts again)" if p.new_bid else ""
    then = {"destroyed": "destroyed, to be replaced", "rebid": raised or "bid raised to keep it",
            "kept": "kept stopped with its disk: vast.ai starts it again when the market falls back under its bid; "
                    "not capacity until then",
            "dry_run": "dry run: nothing sent"}.get(p.action, inline(p.action))
    return user(f"[system outbid] interruptible instance {p.instance_id} lost its GPU (bid {bid} < market min_bid "
                f"{floor}); the work in flight on it is lost; {then}")


@dataclass(frozen=True, kw_only=True)
class InstanceBidV1(Payload):
    instance_id: int
    bid: float  # the instance's bid, its $/h, from this event on
    old_bid: float | None = None
    min_bid: float | None = None  # the market's min_bid when it was placed
    why: str  # outbid (raised to keep it) | market_fell (lowered to the bid rule's)


def _r_instance_bid_v1(e: Event, p: InstanceBidV1) -> Message:
    """``[system bid] instance N: bid $x/h -> $y/h (market min_bid $z/h); <why>``."""
    old = f"${p.old_bid:.4f}/h" if p.old_bid is not None else "?"
    floor = f" (market min_bid ${p.min_bid:.4f}/h)" if p.min_bid is not None else ""
    why = {"outbid": "raised to hold the GPU after an outbid",
           "market_fell": "lowered to the bid rule's: the market fell"}.get(p.why, inline(p.why))
    return user(f"[system bid] interruptible instance {p.instance_id}: bid {old} -> ${p.bid:.4f}/h{floor}; {why}")


@dataclass(frozen=True, kw_only=True)
class PriceIncreaseV1(Payload):
    instance_id: int
    pending_id: int
    old_dph: float | None = None
    new_dph: float | None = None
    share: float | None = None
    cap: float
    decision: str  # accepted | rejected
    ok: bool
    error: str | None = None
    effective: str | None = None  # when the new price applies (the contract's end date), UTC


def _r_price_increase_v1(e: Event, p: PriceIncreaseV1) -> Message:
    """``[system price] the host of instance N asks +32 % ($0.40 -> $0.53/h GPU) from T: accepted | rejected``."""
    share = f"+{p.share:.0%}" if p.share is not None else "an increase"
    prices = f" (${p.old_dph:.3f} -> ${p.new_dph:.3f}/h GPU)" if p.old_dph is not None and p.new_dph is not None else ""
    when = f" from {p.effective[:16].replace('T', ' ')} UTC" if p.effective else ""
    if p.decision == "accepted":
        what = f"accepted (within policy.max_price_increase +{p.cap:.0%})"
    else:
        what = f"rejected (above policy.max_price_increase +{p.cap:.0%}); the instance is replaced"
    if not p.ok:
        what += f" — not sent: {inline(p.error or 'failed')}"
    return user(f"[system price] the host of instance {p.instance_id} asks {share}{prices}{when}: {what}")


_define("instance.traffic", "Traffic vast.ai billed an instance of ours so far (GB up and down, $/GB); spend "
        "counts it. Not rendered.", Version(1, InstanceTrafficV1))
_define("instance.outbid", "An interruptible instance of ours lost its GPU to a higher bid; its work is lost.",
        Version(1, InstanceOutbidV1, _r_instance_outbid_v1))
_define("instance.bid", "An interruptible instance of ours got a new bid (its $/h from then on): raised after an "
        "outbid, or lowered when the market fell; spend counts it.", Version(1, InstanceBidV1, _r_instance_bid_v1))
_define("price.increase", "A host's pending price increase on an instance of ours, accepted within "
        "policy.max_price_increase or rejected (the instance is then replaced).",
        Version(1, PriceIncreaseV1, _r_price_increase_v1))
