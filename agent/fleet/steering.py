"""Steering that binds: policy overrides, pause and host exclusion, all read from the log.

The log is the only state. An override, a pause or an exclusion is an event (who, when, why,
until when); its end is an event too (an operator's reset, resume or include, or an expiry
written at the next tick). What is in force at a moment is computed from those events and the
clock, so an expired override stops binding at its time even before its expiry is logged.

Overrides only tighten what the config allows (``OVERRIDABLE`` says, per key, which way is
tighter); loosening needs a config change. ``effective_policy`` is the config's policy with the
overrides in force applied; the tool pipeline checks every call against it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from agent.config import PolicySettings, Settings
from agent.errors import UsageError
from agent.events import Event
from agent.feedback.conditions import is_outbid
from agent.fleet.block import norm_gpu
from agent.store.log import EventLog
from agent.times import parse_duration, parse_operator_time, utc_ts

_OVERRIDE_KINDS = ("policy.overridden", "policy.override_ended")
_PAUSE_KINDS = ("fleet.paused", "fleet.resumed")
_EXCLUSION_KINDS = ("host.excluded", "host.included")


def until_ts(log: EventLog, for_: str | None, until: str | None) -> str | None:
    """The end of an operator action from ``--for`` or ``--until`` (None: open-ended); it must be in
    the future."""
    if for_ and until:
        raise UsageError("give --for or --until, not both")
    if for_:
        try:
            return utc_ts(log.clock() + parse_duration(for_))
        except UsageError as e:
            raise UsageError(f"--for {e}") from None
    if until:
        try:
            ts = utc_ts(parse_operator_time(until, log.clock()))
        except UsageError as e:
            raise UsageError(f"--until {e}") from None
        if ts <= utc_ts(log.clock()):
            raise UsageError(f"--until {until!r} is not in the future; give a later time or use --for")
        return ts
    return None


def _active(until: str | None, now: str) -> bool:
    return until is None or until > now


# ------------------------------------------------------------------ overrides

Parse = Callable[[str], Any]


def _pos_int(v: str) -> int:
    if not v.strip().isdigit():
        raise ValueError("a whole number of 0 or more")
    return int(v)


def _pos_float(v: str) -> float:
    x = float(v)
    if not x >= 0 or x == float("inf"):
        raise ValueError("a number of 0 or more")
    return x


def _share(v: str) -> float:
    x = float(v)
    if not 0 <= x <= 1:
        raise ValueError("a share between 0 and 1")
    return x


def _gpus(v: str) -> list[str]:
    out = [g.strip() for g in v.split(",") if g.strip()]
    if not out:
        raise ValueError("a comma-separated list of GPU models")
    return out


def _lower(new: Any, cfg: Any) -> bool:
    return cfg is None or bool(new <= cfg)


def _higher(new: Any, cfg: Any) -> bool:
    return bool(new >= cfg)


def _subset(new: list[str], cfg: list[str]) -> bool:
    return {norm_gpu(g) for g in new} <= {norm_gpu(g) for g in cfg}


@dataclass(frozen=True)
class Rule:
    """How one policy key parses, and which direction is tighter."""

    parse: Parse
    tighter: Callable[[Any, Any], bool]
    means: str  # what "tighter" is, for the refusal


OVERRIDABLE: dict[str, Rule] = {
    "max_instances": Rule(_pos_int, _lower, "a lower number"),
    "max_total_dph": Rule(_pos_float, _lower, "a lower $/h"),
    "max_dph_per_instance": Rule(_pos_float, _lower, "a lower $/h"),
    "max_rents_per_hour": Rule(_pos_int, _lower, "a lower number"),
    "max_destroys_per_hour": Rule(_pos_int, _lower, "a lower number"),
    "min_reliability": Rule(_share, _higher, "a higher share"),
    "allowed_gpus": Rule(_gpus, _subset, "a subset of the configured models"),
    "max_daily_spend": Rule(_pos_float, _lower, "a lower amount"),
    "max_monthly_spend": Rule(_pos_float, _lower, "a lower amount"),
}


@dataclass(frozen=True)
class Override:
    id: int  # the seq of its policy.overridden
    key: str
    value: Any
    by: str
    reason: str
    ts: str
    until: str | None

    def describe(self) -> str:
        v = ", ".join(self.value) if isinstance(self.value, list) else f"{self.value:g}" \
            if isinstance(self.value, float) else str(self.value)
        end = f"until {self.until[:16].replace('T', ' ')} UTC" if self.until else "until reset"
        return f"#{self.id} {self.key} {v} {end} (by {self.by}: {self.reason})"


def check_override(policy: PolicySettings, key: str, raw: str) -> Any:
    """The value of ``policy set KEY RAW`` when it tightens the config; a UsageError saying why not."""
    rule = OVERRIDABLE.get(key)
    if rule is None:
        raise UsageError(f"policy key {key!r} cannot be overridden; one of: {', '.join(sorted(OVERRIDABLE))}")
    try:
        value = rule.parse(raw)
    except ValueError as e:
        why = str(e) if "could not convert" not in str(e) else "a number"
        raise UsageError(f"policy {key}: {raw!r} is not valid; write {why}") from None
    cfg = getattr(policy, key)
    if not rule.tighter(value, cfg):
        shown = ", ".join(cfg) if isinstance(cfg, list) else cfg
        raise UsageError(f"policy {key} {raw}: an override may only tighten the config ({key} is {shown} in "
                         f"the config; use {rule.means}); to loosen it, change the config file and reload")
    return value


def _overrides(log: EventLog) -> dict[int, Override]:
    """Every override not ended by an event, by id (expiry by time is applied by the caller)."""
    return _read_overrides(log)


def open_overrides(log: EventLog) -> list[Override]:
    """Every override not ended by an event, oldest first (some may have expired by time)."""
    return sorted(_overrides(log).values(), key=lambda o: o.id)


def _read_overrides(log: EventLog) -> dict[int, Override]:
    out: dict[int, Override] = {}
    for e in log.read(0, kinds=_OVERRIDE_KINDS):
        p = e.payload
        if e.kind == "policy.overridden":
            out[e.seq] = Override(e.seq, p["key"], p["value"], p["by"], p["reason"], e.ts, p.get("until"))
        else:
            out.pop(int(p["override_id"]), None)
    return out


def active_overrides(log: EventLog) -> dict[str, Override]:
    """key -> the override in force now (the newest for its key, unexpired)."""
    now = utc_ts(log.clock())
    out: dict[str, Override] = {}
    for o in sorted(_overrides(log).values(), key=lambda o: o.id):
        if _active(o.until, now):
            out[o.key] = o
    return out


def effective_policy(settings: Settings, log: EventLog) -> PolicySettings:
    """The config's policy with every override in force applied."""
    changes = {k: o.value for k, o in active_overrides(log).items() if k in OVERRIDABLE}
    return replace(settings.policy, **changes) if changes else settings.policy


def set_override(log: EventLog, settings: Settings, key: str, raw: str, *, by: str, reason: str,
                 until: str | None) -> Event:
    value = check_override(settings.policy, key, raw)
    cfg = getattr(settings.policy, key)
    items: list[tuple[str, dict[str, Any], str, int | None]] = [
        ("policy.override_ended", {"override_id": o.id, "key": key, "how": "replaced", "by": by,
                                   "config_value": cfg}, "operator", None)
        for o in _overrides(log).values() if o.key == key]
    items.append(("policy.overridden", {"key": key, "value": value, "by": by, "reason": reason, "until": until,
                                        "config_value": cfg}, "operator", None))
    return log.append_many(items)[-1]


def reset_override(log: EventLog, settings: Settings, key: str, *, by: str, reason: str | None) -> list[Event]:
    ended = [o for o in _overrides(log).values() if o.key == key]
    if key not in OVERRIDABLE:
        raise UsageError(f"policy key {key!r} cannot be overridden; one of: {', '.join(sorted(OVERRIDABLE))}")
    if not ended:
        raise UsageError(f"no override of {key} is in force; 'fleet-agent policy show' lists them")
    return log.append_many([("policy.override_ended", {"override_id": o.id, "key": key, "how": "reset", "by": by,
                                                        "config_value": getattr(settings.policy, key),
                                                        "reason": reason}, "operator", None) for o in ended])


# ------------------------------------------------------------------ pause


@dataclass(frozen=True)
class Pause:
    id: int
    by: str
    reason: str
    ts: str
    until: str | None

    def describe(self) -> str:
        end = f"until {self.until[:16].replace('T', ' ')} UTC" if self.until else "until resumed"
        return f"paused by {self.by} since {self.ts[:16].replace('T', ' ')} UTC, {end}: {self.reason}"


def _latest_pause(log: EventLog) -> Pause | None:
    """The newest pause not ended by an event (its expiry by time is the caller's to apply)."""
    return _read_latest_pause(log)


def _read_latest_pause(log: EventLog) -> Pause | None:
    current: Pause | None = None
    for e in log.read(0, kinds=_PAUSE_KINDS):
        p = e.payload
        if e.kind == "fleet.paused":
            current = Pause(e.seq, p["by"], p["reason"], e.ts, p.get("until"))
        elif current is not None and int(p["pause_id"]) == current.id:
            current = None
    return current


def paused(log: EventLog) -> Pause | None:
    """The pause in force now, or None."""
    p = _latest_pause(log)
    return p if p is not None and _active(p.until, utc_ts(log.clock())) else None


def pause(log: EventLog, *, by: str, reason: str, until: str | None) -> Event:
    return log.append("fleet.paused", {"by": by, "reason": reason, "until": until}, "operator")


def resume(log: EventLog, *, by: str, reason: str | None) -> Event:
    p = paused(log)
    if p is None:
        raise UsageError("the fleet is not paused; 'fleet-agent status' shows its state")
    return log.append("fleet.resumed", {"by": by, "pause_id": p.id, "how": "resumed", "reason": reason}, "operator")


# ------------------------------------------------------------------ hosts


@dataclass(frozen=True)
class Exclusion:
    host_id: int
    by: str
    reason: str
    source: str  # config | operator | model | system
    since: str | None
    until: str | None
    id: int | None = None


def _exclusions(log: EventLog) -> dict[int, Exclusion]:
    """host id -> its exclusion not ended by an event (expiry by time is the caller's to apply)."""
    return _read_exclusions(log)


def _read_exclusions(log: EventLog) -> dict[int, Exclusion]:
    out: dict[int, Exclusion] = {}
    for e in log.read(0, kinds=_EXCLUSION_KINDS):
        p = e.payload
        hid = int(p["host_id"])
        if e.kind == "host.excluded":
            out[hid] = Exclusion(hid, p["by"], p["reason"], p["source"], e.ts, p.get("until"), e.seq)
        else:
            out.pop(hid, None)
    return out


def excluded_hosts(settings: Settings, log: EventLog) -> dict[int, Exclusion]:
    """host id -> why it is excluded now: the config's list, then the log's unexpired exclusions."""
    now = utc_ts(log.clock())
    out = {h: Exclusion(h, "config", "policy.excluded_hosts", "config", None, None)
           for h in settings.policy.excluded_hosts}
    for hid, x in _exclusions(log).items():
        if _active(x.until, now) and hid not in out:
            out[hid] = x
    return out


def exclude_host(log: EventLog, host_id: int, *, by: str, reason: str, source: str, until: str | None,
                 tick: int | None = None) -> Event:
    return log.append("host.excluded", {"host_id": host_id, "by": by, "reason": reason, "source": source,
                                        "until": until}, source, tick)


def include_host(log: EventLog, settings: Settings, host_id: int, *, by: str, reason: str | None) -> Event:
    if host_id in settings.policy.excluded_hosts:
        raise UsageError(f"host {host_id} is excluded by the config (policy.excluded_hosts); remove it there "
                         "and reload")
    x = excluded_hosts(settings, log).get(host_id)
    if x is None:
        raise UsageError(f"host {host_id} is not excluded; 'fleet-agent hosts list' shows the excluded hosts")
    return log.append("host.included", {"host_id": host_id, "by": by, "how": "included", "reason": reason},
                      "operator")


# ------------------------------------------------------------------ expiry, at each tick


def expire(log: EventLog, settings: Settings, tick: int | None) -> list[Event]:
    """Log the end of every override, pause and exclusion whose time ran out (once each)."""
    now = utc_ts(log.clock())
    items: list[tuple[str, dict[str, Any], str, int | None]] = []
    for o in sorted(_overrides(log).values(), key=lambda o: o.id):
        if not _active(o.until, now):
            items.append(("policy.override_ended", {"override_id": o.id, "key": o.key, "how": "expired",
                                                    "by": "system", "config_value": getattr(settings.policy, o.key,
                                                                                            None)},
                          "system", tick))
    p = _latest_pause(log)
    if p is not None and not _active(p.until, now):
        items.append(("fleet.resumed", {"by": "system", "pause_id": p.id, "how": "expired"}, "system", tick))
    for x in _exclusions(log).values():
        if not _active(x.until, now):
            items.append(("host.included", {"host_id": x.host_id, "by": "system", "how": "expired"}, "system", tick))
    return log.append_many(items) if items else []


def since(log: EventLog, hours: float) -> str:
    return utc_ts(log.clock() - timedelta(hours=hours))


def now_dt(log: EventLog) -> datetime:
    return log.clock()


# ------------------------------------------------------------------ host failures

# fleet-agent never stops an instance: one of ours that shows "stopped" could not be scheduled (or its host
# stopped it), a failure like the others.
FAILED_STATUSES = ("stopped", "exited", "offline", "frozen")


def _failure(i: dict[str, Any]) -> str | None:
    """The failure an observed instance of ours shows, or None."""
    st = str(i.get("status") or "")
    if is_outbid(i):
        return None  # a higher bid took the GPU: the market, not the host (agent/fleet/market.py); never on-demand
    ends = i.get("ends_s")
    if st == "stopped" and isinstance(ends, int | float) and not isinstance(ends, bool) and ends <= 0:
        return None  # its contract reached its end date (agent/fleet/contracts.py): not the host's failure
    if st in FAILED_STATUSES:
        return st
    if st == "created" and "error" in str(i.get("status_msg") or "").lower():
        return "created_error"
    return None


def note_host_failures(log: EventLog, settings: Settings, obs: dict[str, Any], tick: int | None) -> list[int]:
    """Log each new failure of an instance of ours (once per instance and status) against its host; a
    host with two failures within a day is excluded for ``policy.host_failure_exclusion``, with an
    alert. Returns the hosts excluded now."""
    from agent import feedback

    hold = float(settings.policy.host_failure_exclusion)
    excluded: list[int] = []
    kept = set(obs.get("credit_stopped") or [])  # stopped for lack of credit: no fault of the host
    for i in obs.get("instances") or []:
        status = _failure(i)
        hid = i.get("host_id")
        if not i.get("ours") or status is None or not isinstance(hid, int) or i.get("id") in kept:
            continue
        if log.store.host_failure_logged(int(i["id"]), status):
            continue
        log.append("host.failed", {"host_id": hid, "instance_id": int(i["id"]), "status": status,
                                   "detail": (i.get("status_msg") or None)}, "system", tick)
        n = log.store.host_failures_since(hid, since(log, 24))
        if n < 2 or hold <= 0 or hid in excluded_hosts(settings, log):
            continue
        until = utc_ts(log.clock() + timedelta(seconds=hold))
        why = f"{n} instances of ours failed on it within a day (latest: instance {i['id']} {status})"
        exclude_host(log, hid, by="system", reason=why, source="system", until=until, tick=tick)
        feedback.raise_alert(log, key=f"host:excluded:{hid}", severity="warning",
                             title=f"host {hid} excluded automatically until {until[:16].replace('T', ' ')} UTC",
                             detail=why, tick=tick, settings=settings)
        excluded.append(hid)
    return excluded


def note_in_force(log: EventLog, tick: int | None) -> Event | None:
    """At a tick's start, while a pause or an override is in force, restate them to the agent."""
    p = paused(log)
    ovs = active_overrides(log)
    if p is None and not ovs:
        return None
    payload: dict[str, Any] = {
        "paused": None if p is None else {"id": p.id, "by": p.by, "reason": p.reason, "since": p.ts,
                                          "until": p.until},
        "overrides": [{"id": o.id, "key": o.key, "value": o.value, "by": o.by, "until": o.until}
                      for o in sorted(ovs.values(), key=lambda o: o.id)],
    }
    return log.append("steering.in_force", payload, "system", tick)
