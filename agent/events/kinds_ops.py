"""The operator's alert controls and the config audit: silences, notifications, value-tracking titles,
configuration changes on reload."""

from __future__ import annotations

from agent.events.event import Event, JsonArray, JsonObject, Message
from agent.events.kinds import VOCABULARY
from agent.events.payload import Payload
from agent.events.rendering import inline, ts_minute, user
from agent.events.vocabulary import Version
from agent.record import record as dataclass  # a dataclass, defined without importing dataclasses

_define = VOCABULARY.define


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


# ---------------------------------------------------------------- config audit


@dataclass(frozen=True, kw_only=True)
class ConfigChangedV1(Payload):
    config_hash: str
    previous_hash: str
    changes: JsonArray  # [{key, old, new}], secrets never among them (the file holds none)
    path: str | None = None
    settings: JsonObject | None = None  # every dotted key now in force ('fleet-agent config diff' reads it)


@dataclass(frozen=True, kw_only=True)
class ConfigAppliedV1(Payload):
    config_hash: str
    settings: JsonObject  # every dotted key in force (no secrets: the file names where keys come from)
    path: str | None = None


_define("config.changed", "A reload (SIGHUP) put a new configuration in force: old -> new for each changed key.",
        Version(1, ConfigChangedV1))
_define("config.applied", "The daemon started with this effective configuration (every non-secret setting).",
        Version(1, ConfigAppliedV1))
