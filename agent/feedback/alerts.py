"""Alerts: raised by the model or by code, deduplicated by key, acked by operators, resolved when their
condition clears.

An alert is live while it is open, and also after an operator acked it until its condition clears
(``alert.resolved``): an ack silences a condition, it does not re-arm it. A new sighting of a live alert
appends ``alert.repeated`` (count + 1) instead of a new alert. Each change is checked and appended in one
``BEGIN IMMEDIATE`` transaction, so the operator CLI can use this while the daemon runs.
"""

from __future__ import annotations

from typing import Any

from agent.errors import FleetAgentError
from agent.events import Event
from agent.feedback.alert_hook import notify_alert
from agent.feedback.notes import MAX_NOTE_CHARS, operator_name, utf8_text
from agent.store.log import EventLog, Transaction
from agent.store.queries import Alert

SEVERITIES = ("info", "warning", "critical")
_SOURCE_OF = {"model": "tool", "operator": "operator"}

def live_alerts(tx: Transaction, *, key: str | None = None, prefix: str | None = None) -> list[Alert]:
    """Live alerts (open, or acked while their condition persists) by exact key or key prefix."""
    return tx.store.live_alerts(key=key, prefix=prefix)


def raise_in(tx: Transaction, *, key: str, severity: str, title: str, detail: str, raised_by: str,
              tick: int | None) -> tuple[int, Event | None]:
    """Inside a transaction: repeat the live alert for ``key``, or raise a new one (returned)."""
    if severity not in SEVERITIES:
        raise FleetAgentError(f"alert severity {severity!r} is not one of {', '.join(SEVERITIES)}")
    if not key or not key.strip():
        raise FleetAgentError("an alert needs a non-empty dedup key")
    if not title or not title.strip():
        raise FleetAgentError(f"alert {key!r} needs a non-empty title")
    live = live_alerts(tx, key=key)
    source = _SOURCE_OF.get(raised_by, "system")
    if live:
        a = live[-1]
        tx.append("alert.repeated", {"alert_id": a.id, "count": a.count + 1}, source, tick)
        return a.id, None
    new_id = tx.store.next_alert_id()
    payload: dict[str, Any] = {"alert_id": new_id, "severity": severity, "title": title.strip(),
                               "dedup_key": key, "raised_by": raised_by}
    if detail:
        payload["detail"] = detail
    return new_id, tx.append("alert.raised", payload, source, tick)


def resolve_in(tx: Transaction, a: Alert, reason: str, tick: int | None) -> Event:
    return tx.append("alert.resolved", {"alert_id": a.id, "title": a.title, "reason": reason}, "system", tick)


def resolve_absent_in(tx: Transaction, prefix: str, still_present: set[str], reason: str,
                       tick: int | None) -> list[int]:
    done = []
    for a in live_alerts(tx, prefix=prefix):
        if a.dedup_key not in still_present:
            resolve_in(tx, a, reason, tick)
            done.append(a.id)
    return done


def raise_alert(log: EventLog, *, key: str, severity: str, title: str, detail: str = "",
                raised_by: str = "system", tick: int | None = None, settings: Any = None) -> tuple[int, bool]:
    """Raise the alert ``key``, or count another sighting of it if it is live.

    Returns (alert id, True when a new alert was opened). A new alert runs
    ``settings.alerts.notify_command`` (when set) after the event committed.
    """
    with log.transaction() as tx:
        alert_id, event = raise_in(tx, key=key, severity=severity, title=title, detail=detail,
                                    raised_by=raised_by, tick=tick)
    if event is not None and settings is not None:
        notify_alert(settings, event)
    return alert_id, event is not None


def resolve_alert(log: EventLog, key: str, reason: str, tick: int | None = None) -> bool:
    """Resolve the live alert with ``key``; False when there is none."""
    with log.transaction() as tx:
        live = live_alerts(tx, key=key)
        for a in live:
            resolve_in(tx, a, reason, tick)
    return bool(live)


def resolve_absent(log: EventLog, prefix: str, still_present: set[str], tick: int | None = None,
                   reason: str = "condition cleared") -> list[int]:
    """Resolve live alerts whose key starts with ``prefix`` and is not in ``still_present``."""
    with log.transaction() as tx:
        return resolve_absent_in(tx, prefix, still_present, reason, tick)


def ack(log: EventLog, alert_id: int, by: str, note: str | None) -> Event:
    """Acknowledge open alert ``alert_id``; refuses (writing nothing) if it is unknown or not open."""
    by = operator_name(by)
    note = utf8_text("--note", (note or "").strip()) or None
    if note is not None and len(note) > MAX_NOTE_CHARS:
        raise FleetAgentError(f"the ack note is {len(note)} characters; the limit is {MAX_NOTE_CHARS} "
                              "(put long material in a knowledge file)")
    with log.transaction() as tx:
        a = tx.store.alert(alert_id)
        if a is None:
            raise FleetAgentError(f"no alert #{alert_id}; 'fleet-agent alerts list --all' shows every alert")
        if a.status == "acked":
            raise FleetAgentError(f"alert #{alert_id} was already acked by {a.acked_by}; nothing to do")
        if a.status != "open":
            raise FleetAgentError(f"alert #{alert_id} is {a.status} (its condition cleared); nothing to ack")
        return tx.append("alert.acked", {"alert_id": alert_id, "by": by, "title": a.title, "note": note},
                         "operator")
