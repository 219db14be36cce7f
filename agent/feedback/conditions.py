"""Alerts raised by code from each tick's observation. Keys:

    stuck:<instance id>     one of ours in a status other than running for longer than alerts.stuck_after
                            since that status was first observed (a reboot restarts the clock)
    dead:<instance id>      one of ours exited / offline / unknown, stopped without our asking (fleet-agent
                            never stops an instance: vast.ai could not schedule it, or it was outbid), or
                            its container failed to start
    balance:low             credit under alerts.low_balance or at policy.credit_reserve (critical at the
                            reserve and at $0), with the runway (agent/feedback/credit.py)
    credit:stopped          vast.ai stopped instances of ours for lack of credit; they are kept
    ticks:failing           alerts.failed_ticks ticks failed in a row
    policy:blocks           alerts.policy_blocks tool calls blocked by policy in one tick
    model:unreachable       raised and resolved by the tick around the model call
    knowledge:bad:<name>    a knowledge file that cannot be used (binary, too large, symlink out)
"""

from __future__ import annotations

from typing import Any

from agent.events import Event
from agent.feedback import credit
from agent.feedback.alerts import (
    dispatch_notifications,
    raise_alert,
    raise_in,
    resolve_absent_in,
    resolve_alert,
)
from agent.store.log import EventLog, Transaction
from agent.store.queries import FailedRun

KEY_STUCK = "stuck:"
KEY_DEAD = "dead:"
KEY_BALANCE = "balance:low"
KEY_TICKS = "ticks:failing"
KEY_POLICY = "policy:blocks"
KEY_MODEL = "model:unreachable"
DEAD_STATUSES = ("exited", "offline", "unknown", "stopped")
# A stopped one of ours is destroyed by the tick itself (agent/fleet/stopped.py, not while paused): the alert says
# so, rather than asking whoever reads it (the model among them) to destroy an instance already gone.
UNASKED = {"stopped": "stopped without our asking (fleet-agent never stops an instance); the tick destroys it, "
                      "as it still bills storage (not while the fleet is paused)", "exited": "exited (its container died)"}
OCI_FAILURE = "OCI runtime create failed"

def is_outbid(i: dict[str, Any]) -> bool:
    """An interruptible instance of an observation (it carries its ``bid``) stopped for a higher bid: its message
    says so, or it is stopped while meant to run (as agent/fleet/market.py reads it, which raises its alert).
    vast.ai never outbids an on-demand one: stopped, whatever its message says, it stopped without our asking."""
    return (i.get("bid") is not None and i.get("status") == "stopped"
            and ("outbid" in str(i.get("status_msg") or "").lower() or i.get("intended") == "running"))


def _is_dead(i: dict[str, Any]) -> bool:
    if is_outbid(i):
        return False  # a higher bid took the GPU: its own alert (agent/fleet/market.py)
    return (i.get("status") in DEAD_STATUSES) or OCI_FAILURE in (i.get("status_msg") or "")


def _age_text(s: float) -> str:
    s = int(s)
    return f"{s // 60}m" if s < 3600 else f"{s // 3600}h{(s % 3600) // 60:02d}m"


def trailing_failed_ticks(tx: Transaction, cap: int = 1000) -> FailedRun:
    """How many ticks failed in a row at the end of the log, and the latest reason."""
    return tx.store.consecutive_failed_ticks(cap)


def check_conditions(log: EventLog, settings: Any, observation: dict[str, Any], tick: int) -> None:
    """Raise, repeat or resolve the code-raised alerts for one tick's observation (one transaction)."""
    a = settings.alerts
    new: list[Event] = []

    def up(tx: Transaction, key: str, severity: str, title: str, detail: str = "") -> None:
        _, e = raise_in(tx, key=key, severity=severity, title=title, detail=detail, raised_by="system", tick=tick)
        if e is not None:
            new.append(e)

    with log.transaction() as tx:
        stuck: set[str] = set()
        dead: set[str] = set()
        kept = [int(i) for i in observation.get("credit_stopped") or []]
        for i in observation.get("instances") or []:
            if not i.get("ours", True) or i.get("id") in kept:  # stopped for credit: kept, not dead
                continue
            iid = i.get("id")
            where = f"{i.get('gpu_name', '?')} x{i.get('num_gpus', 1)} on host {i.get('host_id', '?')}"
            msg = f"; status message: {i['status_msg']}" if i.get("status_msg") else ""
            if _is_dead(i):
                key = f"{KEY_DEAD}{iid}"
                dead.add(key)
                why = UNASKED.get(str(i.get("status")), str(i.get("status") or "failing"))
                severity = "critical"
                if i.get("status") not in DEAD_STATUSES:  # alive by its status ("created", "loading"): the OCI message
                    why = f"failing to start its container ({OCI_FAILURE}, status {i.get('status') or '?'})"
                elif i.get("ends_s") is not None and float(i["ends_s"]) <= 0:  # vast.ai stops it: expected, not a fault
                    maint, severity = i.get("maint_s"), "warning"
                    why = ("stopped for its machine's maintenance window; it is replaced"
                           if isinstance(maint, int | float) and maint <= float(i["ends_s"])
                           else "stopped at its contract's end (the host's offer ended); it is replaced")
                up(tx, key, severity, f"instance #{iid} is {why}",
                   f"{where}, costing ${i.get('dph', 0):.2f}/h{msg}")
            elif i.get("status") != "running" and float(i.get("age_s") or 0) > float(a.stuck_after):
                key = f"{KEY_STUCK}{iid}"
                stuck.add(key)
                up(tx, key, "warning",
                   f"instance #{iid} stuck in {i.get('status') or 'provisioning'} for "
                   f"{_age_text(float(i.get('age_s') or 0))}",
                   f"{where}; counted from when this status was first observed{msg}")
        resolve_absent_in(tx, KEY_STUCK, stuck, "the instance is running or gone", tick)
        resolve_absent_in(tx, KEY_DEAD, dead, "the instance recovered or is gone", tick)

        credit.check_credit(tx, settings, observation, kept, tick, up, KEY_BALANCE)

        if a.failed_ticks > 0:
            run = trailing_failed_ticks(tx, cap=max(a.failed_ticks, 1) * 4 + 100)
            if run.count >= a.failed_ticks:
                up(tx, KEY_TICKS, "critical", f"{run.count} ticks failed in a row",
                   f"latest: {run.latest_reason or '?'}")
            else:
                resolve_absent_in(tx, KEY_TICKS, set(), "a tick completed", tick)
    dispatch_notifications(log, settings, tick=tick)  # the new ones, grouped; resolved ones too


def note_policy_blocks(log: EventLog, settings: Any, count: int, tick: int | None) -> None:
    """At a tick's end: alert when ``count`` tool calls were blocked by policy, resolve when fewer."""
    threshold = settings.alerts.policy_blocks
    if threshold <= 0:
        return
    if count >= threshold:
        raise_alert(log, key=KEY_POLICY, severity="warning",
                    title=f"{count} tool calls blocked by policy in one tick",
                    detail="the agent keeps asking for what policy forbids; check its instructions and the policy",
                    tick=tick, settings=settings)
    else:
        resolve_alert(log, KEY_POLICY, f"{count} blocked in tick {tick}", tick)
