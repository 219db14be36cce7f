"""Noticing a model that has stopped acting.

A tick in which the model called no tool while there was work (demand pending and the fleet below
``policy.max_instances``, or an alert open that the model can act on) is an idle tick. An alert counts
only while it is still open (one resolved since does not) and only when a tool call can answer it: an
instance stuck, dead, an orphan or failing between ticks (``ACTIONABLE``). Alerts about the model itself,
credit, spend, failed ticks, knowledge files, unmet demand (counted by the demand rule above), the ones
an operator raised and the model's own (it raised them for the operators, and may resolve them) do not. ``alerts.idle_ticks`` idle ticks in a
row open the alert ``model:idle`` ("the model has not acted for N ticks"), naming what the model did
instead: empty replies, the same text again, plain text, tool calls written as text. A tick in which
the model calls a tool resolves it.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from agent import feedback, logsetup
from agent.events import Event
from agent.store.log import EventLog

log_ = logsetup.get_logger(__name__)

KEY_IDLE = "model:idle"
IDLE_TITLE = "the model has not acted"


@dataclass(frozen=True)
class TickConduct:
    """What the model did in one tick."""

    tick: int
    acted: bool          # at least one tool call
    work: bool           # demand pending with room in the fleet, or an alert open the model can act on
    doings: Counter[str]  # empty reply, same text again, text only, tool call written as text


ACTIONABLE = ("stuck:", "dead:", "orphan:", "instance:underperforming:")
_ALERT_ID = re.compile(r"#(\d+) ")


def actionable_alerts(log: EventLog, lines: list[Any]) -> list[int]:
    """The ids among an observation's ``open_alerts`` lines of alerts still open that the model can act on."""
    out = []
    for line in lines:
        m = _ALERT_ID.match(str(line))
        a = log.store.alert(int(m.group(1))) if m else None
        if a is not None and a.status == "open" and a.raised_by == "system" and a.dedup_key.startswith(ACTIONABLE):
            out.append(a.id)
    return out


def _work(log: EventLog, obs: dict[str, Any], max_instances: int) -> bool:
    demand = obs.get("demand") or {}
    ours = sum(1 for i in obs.get("instances") or [] if i.get("ours"))
    if int(demand.get("pending") or 0) > 0 and ours < max_instances:
        return True
    return bool(actionable_alerts(log, obs.get("open_alerts") or []))


def _text_before(log: EventLog, seq: int) -> str:
    """The text of the newest model reply before ``seq`` ("" when none)."""
    e = next(iter(log.read(0, until_seq=seq, kinds=["model.response"], newest_first=True, limit=1)), None)
    return "" if e is None else (e.payload.get("text") or "").strip()


def conduct(log: EventLog, started: Event, max_instances: int) -> TickConduct:
    """What the model did in the tick ``started`` began (one read of the tick's model events)."""
    tick = int(started.tick or 0)
    obs = started.payload.get("observation") or {}
    doings: Counter[str] = Counter()
    acted = False
    previous = _text_before(log, started.seq)
    for e in log.read(started.seq, tick=tick, kinds=["model.response", "model.text_tool_calls"]):
        p = e.payload
        if e.kind == "model.text_tool_calls":
            doings["tool calls written as text"] += 1
            continue
        text = (p.get("text") or "").strip()
        if p.get("tool_calls"):
            acted = True
        elif not text:
            doings["empty replies"] += 1
        elif text == previous:
            doings["the same text again"] += 1
        else:
            doings["text without a tool call"] += 1
        previous = text or previous
    return TickConduct(tick, acted, _work(log, obs, max_instances), doings)


def check_idle(log: EventLog, settings: Any, tick: int) -> bool:
    """Open (or count again) ``model:idle`` after ``alerts.idle_ticks`` idle ticks in a row; resolve it when
    the model acts. Returns True when the alert is live after this tick."""
    limit = int(settings.alerts.idle_ticks)
    max_instances = int(settings.policy.max_instances)
    streak: list[TickConduct] = []
    for started in log.read(0, kinds=["tick.started"], newest_first=True, limit=limit):
        c = conduct(log, started, max_instances)
        if c.acted:
            if c.tick == tick:
                feedback.resolve_alert(log, KEY_IDLE, "the model called a tool again", tick)
            break
        if not c.work:
            break
        streak.append(c)
    if len(streak) < limit:
        return False
    total: Counter[str] = Counter()
    for c in streak:
        total.update(c.doings)
    did = ", ".join(f"{what} x{n}" for what, n in total.most_common()) or "no reply"
    feedback.raise_alert(log, key=KEY_IDLE, severity="warning", title=f"{IDLE_TITLE} for {limit} ticks",
                         detail=f"no tool call in ticks {streak[-1].tick}-{tick} while there was work; instead: {did}",
                         tick=tick, settings=settings)
    log_.warning("model.idle", ticks=limit, did=did)
    return True
