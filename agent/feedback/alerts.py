"""Alerts: raised by the model or by code, deduplicated by key, acked by operators, resolved when their
condition clears.

An alert is live while it is open, and also after an operator acked it until its condition clears
(``alert.resolved``): an ack silences a condition, it does not re-arm it. A new sighting of a live alert
appends ``alert.repeated`` (count + 1) instead of a new alert. Each change is checked and appended in one
``BEGIN IMMEDIATE`` transaction, so the operator CLI can use this while the daemon runs.
"""

from __future__ import annotations

import fnmatch
import functools
from collections import defaultdict
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from agent.errors import FleetAgentError
from agent.feedback.notes import MAX_NOTE_CHARS, operator_name, utf8_text
from agent.times import utc_ts

if TYPE_CHECKING:
    from agent.events import Event
    from agent.store.log import EventLog, Transaction
    from agent.store.queries import Alert, Silence

SEVERITIES = ("info", "warning", "critical")
_SOURCE_OF = {"model": "tool", "operator": "operator"}

def live_alerts(tx: Transaction, *, key: str | None = None, prefix: str | None = None) -> list[Alert]:
    """Live alerts (open, or acked while their condition persists) by exact key or key prefix."""
    return _live(tx.log, key, prefix)


def _live(log: EventLog, key: str | None, prefix: str | None) -> list[Alert]:
    """``Store.live_alerts(key=, prefix=)``, picked from every live alert."""
    every = log.store.every_live_alert()
    if key is not None:
        return [a for a in every if a.dedup_key == key]
    if prefix is None:
        raise ValueError("live_alerts needs a key or a prefix")
    last = prefix + "\U0010ffff"  # the bounds the query's index range takes, then the prefix itself
    return [a for a in every if prefix <= a.dedup_key <= last and a.dedup_key.startswith(prefix)]


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
        if title.strip() != a.title:  # a value it tracks moved (balance, blocks): the title says the new one
            tx.append("alert.retitled", {"alert_id": a.id, "title": title.strip(), "previous": a.title}, source,
                      tick)
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
        dispatch_notifications(log, settings, tick=tick)
    return alert_id, event is not None


def resolve_alert(log: EventLog, key: str, reason: str, tick: int | None = None) -> bool:
    """Resolve the live alert with ``key``; False when there is none (then, outside a transaction, without
    opening one: the usual case, after every model reply)."""
    if not log.in_transaction and not _live(log, key, None):
        return False
    with log.transaction() as tx:
        live = live_alerts(tx, key=key)
        for a in live:
            resolve_in(tx, a, reason, tick)
    return bool(live)


def resolve_absent(log: EventLog, prefix: str, still_present: set[str], tick: int | None = None,
                   reason: str = "condition cleared") -> list[int]:
    """Resolve live alerts whose key starts with ``prefix`` and is not in ``still_present`` (outside a
    transaction, opening one only when there is one to resolve)."""
    if not log.in_transaction and all(a.dedup_key in still_present for a in _live(log, None, prefix)):
        return []
    with log.transaction() as tx:
        return resolve_absent_in(tx, prefix, still_present, reason, tick)


def ack(log: EventLog, alert_id: int, by: str, note: str | None) -> Event | None:
    """Acknowledge open alert ``alert_id``; None (writing nothing) when it is already acked; refuses
    (writing nothing) an unknown or resolved alert."""
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
            return None  # acking twice changes nothing: the caller says so and succeeds
        if a.status != "open":
            raise FleetAgentError(f"alert #{alert_id} is {a.status} (its condition cleared); nothing to ack")
        return tx.append("alert.acked", {"alert_id": alert_id, "by": by, "title": a.title, "note": note},
                         "operator")


# ------------------------------------------------------------------ silences

MAX_PATTERN_CHARS = 200
DEFAULT_REPEAT_AFTER_S = 4 * 3600.0


def silenced_by(silences: list[Silence], a: Alert) -> Silence | None:
    """The silence in force (from ``silences``, all in force) that covers alert ``a``, if any."""
    for s in silences:
        if s.alert_id == a.id or (s.key_pattern is not None and fnmatch.fnmatchcase(a.dedup_key, s.key_pattern)):
            return s
    return None


def silence(log: EventLog, *, by: str, reason: str, seconds: float, alert_id: int | None = None,
            key_pattern: str | None = None) -> Event:
    """Silence alert ``alert_id``, or every alert whose key matches the glob ``key_pattern``, for
    ``seconds``: they notify nobody until then; the model still sees them, marked silenced."""
    by = operator_name(by)
    reason = utf8_text("--reason", (reason or "").strip())
    if not reason:
        raise FleetAgentError("a silence needs --reason: say why, for whoever sees the alert next")
    if len(reason) > MAX_NOTE_CHARS:
        raise FleetAgentError(f"the reason is {len(reason)} characters; the limit is {MAX_NOTE_CHARS}")
    if (alert_id is None) == (key_pattern is None):
        raise FleetAgentError("silence one alert (ID) or the alerts whose key matches --key PATTERN, not both")
    if key_pattern is not None:
        key_pattern = utf8_text("--key", key_pattern.strip())
        if not key_pattern or len(key_pattern) > MAX_PATTERN_CHARS:
            raise FleetAgentError(f"--key needs a pattern of 1 to {MAX_PATTERN_CHARS} characters, e.g. 'stuck:*'")
    with log.transaction() as tx:
        if alert_id is not None:
            a = tx.store.alert(alert_id)
            if a is None:
                raise FleetAgentError(f"no alert #{alert_id}; 'fleet-agent alerts list --all' shows every alert")
            if a.status == "resolved":
                raise FleetAgentError(f"alert #{alert_id} is resolved; nothing to silence")
        until = utc_ts(log.clock() + timedelta(seconds=seconds))
        payload: dict[str, Any] = {"by": by, "reason": reason, "until": until}
        payload.update({"alert_id": alert_id} if alert_id is not None else {"key_pattern": key_pattern})
        return tx.append("alert.silenced", payload, "operator")


def unsilence(log: EventLog, silence_id: int, by: str) -> Event:
    """Lift silence ``silence_id`` now; refuses (writing nothing) one unknown, lifted or expired."""
    by = operator_name(by)
    with log.transaction() as tx:
        s = tx.store.silence(silence_id)
        if s is None:
            raise FleetAgentError(f"no silence #{silence_id}; 'fleet-agent alerts silences --all' lists them")
        if s.lifted_seq is not None:
            raise FleetAgentError(f"silence #{silence_id} was already lifted (event #{s.lifted_seq}); nothing to do")
        if s.until_ts <= utc_ts(log.clock()):
            raise FleetAgentError(f"silence #{silence_id} expired at {s.until_ts[:16].replace('T', ' ')} UTC; "
                                  "nothing to lift")
        return tx.append("alert.unsilenced", {"silence_id": silence_id, "by": by}, "operator")


def alert_lines(log: EventLog) -> list[str]:
    """The open alerts as the observation lists them; a silenced one says until when and by whom."""
    silences = log.store.silences(now_ts=utc_ts(log.clock()))
    out = []
    for a in log.store.open_alerts():
        s = silenced_by(silences, a)
        quiet = f" (silenced until {s.until_ts[:16].replace('T', ' ')} UTC by {s.by})" if s else ""
        out.append(f"#{a.id} {a.severity}: {a.title} (x{a.count}){quiet}")
    return out


# ------------------------------------------------------------------ notifications

_RANK = {s: i for i, s in enumerate(SEVERITIES)}


def key_group(key: str) -> str:
    """The prefix alerts are grouped by in one notification: the key up to its first ':'."""
    return key.split(":", 1)[0]


def _due(a: Alert, repeat_before: str) -> str | None:
    """Why a notification about ``a`` is due (opened | repeat | resolved), or None."""
    if a.status == "resolved":
        return "resolved"
    if a.notified_reason is None:
        return "opened"
    if a.notified_ts is not None and a.notified_ts <= repeat_before:
        return "repeat"
    return None


def _notice(reason: str, group: str, alerts: list[Alert], silenced: bool) -> dict[str, Any]:
    first = alerts[0]
    title = first.title if len(alerts) == 1 else f"{len(alerts)} alerts ({group}): {first.title}, ..."
    return {"reason": reason, "group": group, "alert_id": first.id, "dedup_key": first.dedup_key, "title": title,
            "silenced": silenced,
            "severity": max((a.severity for a in alerts), key=lambda s: _RANK.get(s, 0)),
            "alerts": [{"alert_id": a.id, "severity": a.severity, "title": a.title, "dedup_key": a.dedup_key,
                        "status": a.status, "detail": a.detail} for a in alerts]}


def pending_notifications(tx: Transaction, now: datetime, repeat_after_s: float) -> list[dict[str, Any]]:
    """The notifications due now, as ``alert.notified`` payloads: one per (reason, key group); silenced
    alerts are left out (a silenced one that resolved is recorded, ``silenced``, and notifies nobody)."""
    silences = tx.store.silences(now_ts=utc_ts(now))
    repeat_before = utc_ts(now - timedelta(seconds=repeat_after_s))
    batches: dict[tuple[str, str, bool], list[Alert]] = defaultdict(list)
    for a in tx.store.alerts_to_notify():
        reason = _due(a, repeat_before)
        if reason is None:
            continue
        quiet = silenced_by(silences, a) is not None
        if quiet and reason != "resolved":
            continue
        batches[(reason, key_group(a.dedup_key), quiet)].append(a)
    return [_notice(r, g, alerts, q) for (r, g, q), alerts in batches.items()]


def dispatch_notifications(log: EventLog, settings: Any, *, tick: int | None = None) -> list[Event]:
    """Log and send the notifications due now, by the log's clock (``alerts.notify_command``; nothing
    when unset).

    Decided and logged in one transaction (two processes never send the same one twice); the command
    runs afterwards, off the caller's path."""
    alerts_cfg = getattr(settings, "alerts", None)
    if alerts_cfg is None or not getattr(alerts_cfg, "notify_command", None):
        return []
    repeat_after = float(getattr(alerts_cfg, "repeat_after", DEFAULT_REPEAT_AFTER_S))
    with log.transaction() as tx:
        due = pending_notifications(tx, log.clock(), repeat_after)
        events = [tx.append("alert.notified", p, "system", tick) for p in due]
    sending = [e for e in events if not e.payload.get("silenced")]
    if sending:
        from agent.feedback.alert_hook import submit_notification  # subprocess, tempfile: only to send one
    for e in sending:
        log.after_commit(functools.partial(submit_notification, settings, e))  # once it committed
    return events
