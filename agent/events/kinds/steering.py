"""Event kinds of the operator's steering and of money: policy overrides, pause, host exclusion,
manual destroys, spend budgets.

Every operator action here is an event naming who, when (the event's ts) and why, and renders as a
tagged operator message. Only these renderers write the tags; every string in a payload (the operator's
reason included, which may quote vast.ai) is written ``inline``, so none can spell a tag or start a line.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.events.event import Event, JsonArray, JsonObject, Message
from agent.events.kinds.base import VOCABULARY
from agent.events.payload import Payload
from agent.events.rendering import (
    inline,
    ts_minute,
    user,
)
from agent.events.vocabulary import Version

_define = VOCABULARY.define


def _until(until: str | None, open_ended: str) -> str:
    return f"until {ts_minute(until)}" if until else open_ended


def _why(reason: str | None) -> str:
    return f" — {inline(reason)}" if reason else ""


def _value(v: object) -> str:
    if v is None:
        return "off"
    if isinstance(v, list):
        return ", ".join(inline(x) for x in v)
    if isinstance(v, float):
        return f"{v:g}"
    return inline(v)


# ---------------------------------------------------------------- policy overrides


@dataclass(frozen=True, kw_only=True)
class PolicyOverriddenV1(Payload):
    key: str
    value: object
    by: str
    reason: str
    config_value: object | None = None
    until: str | None = None


def _r_overridden_v1(e: Event, p: PolicyOverriddenV1) -> Message:
    """``[policy override #seq · by] key value until TIME UTC — reason`` (no expiry: ``until reset``)."""
    return user(f"[policy override #{e.seq} · {inline(p.by)}] {inline(p.key)} {_value(p.value)} "
                f"{_until(p.until, 'until reset')}{_why(p.reason)}")


@dataclass(frozen=True, kw_only=True)
class PolicyOverrideEndedV1(Payload):
    override_id: int
    key: str
    how: str  # reset | expired | replaced
    by: str
    config_value: object | None = None
    reason: str | None = None


def _r_override_ended_v1(e: Event, p: PolicyOverrideEndedV1) -> Message:
    """``[policy override #N ended · by] key back to VALUE (how)`` — the config value is in force again."""
    back = f" back to {_value(p.config_value)}" if p.how != "replaced" else " replaced"
    return user(f"[policy override #{p.override_id} ended · {inline(p.by)}] {inline(p.key)}{back} "
                f"({inline(p.how)}){_why(p.reason)}")


_define("policy.overridden", "An operator tightened a policy value (until a time or until reset).",
        Version(1, PolicyOverriddenV1, _r_overridden_v1))
_define("policy.override_ended", "A policy override was reset by an operator, expired or was replaced.",
        Version(1, PolicyOverrideEndedV1, _r_override_ended_v1))



# ---------------------------------------------------------------- pause


@dataclass(frozen=True, kw_only=True)
class FleetPausedV1(Payload):
    by: str
    reason: str
    until: str | None = None


def _r_paused_v1(e: Event, p: FleetPausedV1) -> Message:
    """``[operator pause · by] paused until TIME|until resumed: no rent, destroy or reboot runs — reason``."""
    return user(f"[operator pause · {inline(p.by)}] paused {_until(p.until, 'until resumed')}: no rent, destroy "
                f"or reboot runs; keep observing and report{_why(p.reason)}")


@dataclass(frozen=True, kw_only=True)
class FleetResumedV1(Payload):
    by: str
    pause_id: int
    how: str  # resumed | expired
    reason: str | None = None


def _r_resumed_v1(e: Event, p: FleetResumedV1) -> Message:
    """``[operator resume · by] the pause #N ended (how): actions run again — reason``."""
    tag = "operator resume" if p.how == "resumed" else "pause expired"
    return user(f"[{tag} · {inline(p.by)}] the pause #{p.pause_id} ended ({inline(p.how)}): actions run "
                f"again within policy{_why(p.reason)}")


_define("fleet.paused", "An operator paused every side-effecting call (ticks still observe and talk).",
        Version(1, FleetPausedV1, _r_paused_v1))
_define("fleet.resumed", "A pause ended: an operator resumed, or its time ran out.",
        Version(1, FleetResumedV1, _r_resumed_v1))



# ---------------------------------------------------------------- hosts


@dataclass(frozen=True, kw_only=True)
class HostExcludedV1(Payload):
    host_id: int
    by: str
    reason: str
    source: str  # operator | model | system
    until: str | None = None


def _r_host_excluded_v1(e: Event, p: HostExcludedV1) -> Message | None:
    """``[host excluded #seq · by] host H until TIME|until included: rents on it are refused — reason``;
    nothing when the model excluded it (its own tool call and result say so)."""
    if p.source == "model":
        return None
    return user(f"[host excluded #{e.seq} · {inline(p.by)}] host {p.host_id} "
                f"{_until(p.until, 'until included')}: rents on it are refused{_why(p.reason)}")


@dataclass(frozen=True, kw_only=True)
class HostIncludedV1(Payload):
    host_id: int
    by: str
    how: str  # included | expired
    reason: str | None = None


def _r_host_included_v1(e: Event, p: HostIncludedV1) -> Message:
    """``[host included · by] host H may be rented again (how) — reason``."""
    return user(f"[host included · {inline(p.by)}] host {p.host_id} may be rented again ({inline(p.how)})"
                f"{_why(p.reason)}")


@dataclass(frozen=True, kw_only=True)
class HostFailedV1(Payload):
    host_id: int
    instance_id: int
    status: str
    detail: str | None = None


_define("host.excluded", "A host was excluded from rents (by an operator, the model, or automatically).",
        Version(1, HostExcludedV1, _r_host_excluded_v1))
_define("host.included", "A host exclusion ended: an operator included it again, or it expired.",
        Version(1, HostIncludedV1, _r_host_included_v1))
_define("host.failed", "An instance of ours failed on a host (it counts toward automatic exclusion).",
        Version(1, HostFailedV1))



# ---------------------------------------------------------------- manual actions


@dataclass(frozen=True, kw_only=True)
class OperatorDestroyV1(Payload):
    instance_id: int
    by: str
    reason: str
    force: bool | None = None


def _r_operator_destroy_v1(e: Event, p: OperatorDestroyV1) -> Message:
    """``[operator destroy · by] instance N (forced) — reason``; the call's result follows."""
    forced = " (forced: not ours)" if p.force else ""
    return user(f"[operator destroy · {inline(p.by)}] instance {p.instance_id}{forced}{_why(p.reason)}")


@dataclass(frozen=True, kw_only=True)
class OperatorDrainV1(Payload):
    by: str
    reason: str
    instance_ids: JsonArray


def _r_operator_drain_v1(e: Event, p: OperatorDrainV1) -> Message:
    """``[operator drain · by] destroying N instances of ours (ids), then pausing — reason``."""
    ids = ", ".join(str(i) for i in p.instance_ids) or "none"
    return user(f"[operator drain · {inline(p.by)}] destroying {len(p.instance_ids)} instances of ours ({ids}), "
                f"then pausing{_why(p.reason)}")


_define("operator.destroy", "An operator asked to destroy an instance (the tool call and result follow).",
        Version(1, OperatorDestroyV1, _r_operator_destroy_v1))
_define("operator.drain", "An operator drained the fleet: every instance of ours destroyed, then a pause.",
        Version(1, OperatorDrainV1, _r_operator_drain_v1))



# ---------------------------------------------------------------- what binds, restated each tick


@dataclass(frozen=True, kw_only=True)
class SteeringInForceV1(Payload):
    paused: JsonObject | None = None  # {"id", "by", "reason", "since", "until"}
    overrides: JsonArray | None = None  # of {"id", "key", "value", "by", "until"}


def _r_steering_v1(e: Event, p: SteeringInForceV1) -> Message:
    """``[system · steering in force]`` then one line for the pause (who, since, until, why) and one
    ``[policy override #N · by] key value until TIME UTC`` line per override in force."""
    lines = ["[system · steering in force] operator steering that binds this tick, enforced in code:"]
    if p.paused:
        x = p.paused
        lines.append(f"- PAUSED (#{x.get('id')} · {inline(x.get('by'))}) since {ts_minute(str(x.get('since')))} "
                     f"{_until(x.get('until'), 'until resumed')}: no rent, destroy or reboot runs"
                     f"{_why(x.get('reason'))}")
    for o in p.overrides or []:
        lines.append(f"- [policy override #{o.get('id')} · {inline(o.get('by'))}] {inline(o.get('key'))} "
                     f"{_value(o.get('value'))} {_until(o.get('until'), 'until reset')}")
    return user("\n".join(lines))


_define("steering.in_force", "At a tick's start: the pause and the policy overrides in force, restated so the "
        "agent sees them whatever compaction summarised.", Version(1, SteeringInForceV1, _r_steering_v1))
