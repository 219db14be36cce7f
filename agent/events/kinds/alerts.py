"""Kinds of alerts: raised, repeated, acked, resolved, silenced, notified, retitled, severity_changed."""

from __future__ import annotations

from dataclasses import dataclass

from agent.events.event import Event, JsonArray, Message
from agent.events.kinds.base import VOCABULARY, same_shape
from agent.events.payload import Payload
from agent.events.rendering import (
    inline,
    ts_minute,
    user,
)
from agent.events.vocabulary import Version

_define = VOCABULARY.define


# ---------------------------------------------------------------- alerts


@dataclass(frozen=True, kw_only=True)
class AlertRaisedV1(Payload):
    alert_id: int
    severity: str
    title: str
    dedup_key: str
    raised_by: str
    detail: str | None = None


def _r_alert_raised_v1(e: Event, p: AlertRaisedV1) -> Message | None:
    """``[alert #N raised · system] severity: title — detail``; nothing when the model raised it (its own
    tool call and result already say so)."""
    if p.raised_by == "model":
        return None
    detail = f" — {p.detail}" if p.detail else ""
    return user(f"[alert #{p.alert_id} raised · system] {p.severity}: {p.title}{detail}")


@dataclass(frozen=True, kw_only=True)
class AlertRepeatedV1(Payload):
    alert_id: int
    count: int


@dataclass(frozen=True, kw_only=True)
class AlertAckedV1(Payload):
    alert_id: int
    by: str
    title: str
    note: str | None = None


def _r_alert_acked_v1(e: Event, p: AlertAckedV1) -> Message:
    """``[alert #N acked · by] title — note: note``."""
    note = f" — note: {p.note}" if p.note else ""
    return user(f"[alert #{p.alert_id} acked · {p.by}] {p.title}{note}")


@dataclass(frozen=True, kw_only=True)
class AlertResolvedV1(Payload):
    alert_id: int
    title: str
    reason: str | None = ""  # absent renders as nothing; an explicit null has always rendered as 'None'


def _r_alert_resolved_v1(e: Event, p: AlertResolvedV1) -> Message:
    """``[alert #N resolved · system] title — reason`` (the dash goes when there is no reason)."""
    return user(f"[alert #{p.alert_id} resolved · system] {p.title} — {p.reason}".rstrip(" —"))


def _r_alert_raised_v2(e: Event, p: AlertRaisedV1) -> Message | None:
    """As v1 with severity, title and detail written ``inline``."""
    if p.raised_by == "model":
        return None
    detail = f" — {inline(p.detail)}" if p.detail else ""
    return user(f"[alert #{p.alert_id} raised · system] {inline(p.severity)}: {inline(p.title)}{detail}")


_define("alert.raised", "An alert opened.", Version(1, AlertRaisedV1, _r_alert_raised_v1),
        Version(2, AlertRaisedV1, _r_alert_raised_v2, upcast=same_shape))
_define("alert.repeated", "An open alert's condition was seen again (dedup: count, last seen).",
        Version(1, AlertRepeatedV1))
def _r_alert_acked_v2(e: Event, p: AlertAckedV1) -> Message:
    """As v1, the title (which the model may have written) ``inline``; the note is the operator's own text."""
    note = f" — note: {p.note}" if p.note else ""
    return user(f"[alert #{p.alert_id} acked · {p.by}] {inline(p.title)}{note}")


def _r_alert_resolved_v2(e: Event, p: AlertResolvedV1) -> Message:
    """As v1 with title and reason written ``inline``."""
    return user(f"[alert #{p.alert_id} resolved · system] {inline(p.title)} — {inline(p.reason)}".rstrip(" —"))


_define("alert.acked", "An operator acknowledged an alert.", Version(1, AlertAckedV1, _r_alert_acked_v1),
        Version(2, AlertAckedV1, _r_alert_acked_v2, upcast=same_shape))
_define("alert.resolved", "An alert's condition cleared.", Version(1, AlertResolvedV1, _r_alert_resolved_v1),
        Version(2, AlertResolvedV1, _r_alert_resolved_v2, upcast=same_shape))



# ---------------------------------------------------------------- silences


@dataclass(frozen=True, kw_only=True)
class AlertSilencedV1(Payload):
    by: str
    reason: str
    until: str  # the log's timestamp form, UTC
    alert_id: int | None = None
    key_pattern: str | None = None


def _r_silenced_v1(e: Event, p: AlertSilencedV1) -> Message:
    """``[alert silence #seq · by] alert #N silenced until 2026-12-01 05:00 UTC — reason`` (or the
    alerts whose key matches a pattern). The operator's own reason keeps its words; the pattern is data."""
    what = f"alert #{p.alert_id}" if p.alert_id is not None else f"alerts with key {inline(p.key_pattern)}"
    return user(f"[alert silence #{e.seq} · {p.by}] {what} silenced until {ts_minute(p.until)} — {p.reason}")


@dataclass(frozen=True, kw_only=True)
class AlertUnsilencedV1(Payload):
    silence_id: int
    by: str


def _r_unsilenced_v1(e: Event, p: AlertUnsilencedV1) -> Message:
    """``[alert silence #N lifted · by]``."""
    return user(f"[alert silence #{p.silence_id} lifted · {p.by}]")


_define("alert.silenced", "An operator silenced an alert, or the alerts whose key matches a pattern, until a "
        "time: they notify nobody; the model still sees them, marked silenced.",
        Version(1, AlertSilencedV1, _r_silenced_v1))
_define("alert.unsilenced", "An operator lifted a silence before it expired.",
        Version(1, AlertUnsilencedV1, _r_unsilenced_v1))



# ---------------------------------------------------------------- notifications and titles


@dataclass(frozen=True, kw_only=True)
class AlertNotifiedV1(Payload):
    reason: str  # opened | repeat | resolved
    group: str  # the dedup-key prefix the alerts share (up to the first ':')
    alerts: JsonArray  # [{alert_id, severity, title, dedup_key, status}]
    alert_id: int  # the first alert's: what the hook's FLEET_AGENT_ALERT_ID names
    dedup_key: str  # the first alert's
    severity: str  # the highest of the group
    title: str
    silenced: bool | None = None  # true: a silenced alert resolved: recorded so, nobody was notified


_define("alert.notified", "Operators were notified (alerts.notify_command) about alerts that opened together, "
        "stayed unacked past alerts.repeat_after, or resolved. Not shown to the model.",
        Version(1, AlertNotifiedV1))


@dataclass(frozen=True, kw_only=True)
class AlertRetitledV1(Payload):
    alert_id: int
    title: str
    previous: str


_define("alert.retitled", "A live alert that tracks a value (balance, policy blocks) was seen with a new value; "
        "its title now says so. The observation shows the current title; not rendered on its own.",
        Version(1, AlertRetitledV1))


@dataclass(frozen=True, kw_only=True)
class AlertSeverityChangedV1(Payload):
    alert_id: int
    severity: str
    previous: str


def _r_alert_severity_changed_v1(e: Event, p: AlertSeverityChangedV1) -> Message:
    """``[alert #N severity · system] warning -> critical``."""
    return user(f"[alert #{p.alert_id} severity · system] {inline(p.previous)} -> {inline(p.severity)}")


_define("alert.severity_changed", "A live alert's condition grew worse or eased (the low-credit alert is "
        "critical at the credit reserve and at $0): its severity changed in place.",
        Version(1, AlertSeverityChangedV1, _r_alert_severity_changed_v1))
