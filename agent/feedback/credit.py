"""Credit as vast.ai runs it: a run-out is a money event, not a host failure.

When the account's credit reaches $0 vast.ai stops every instance (the disks are kept and their storage
still bills), refuses rents and starts with HTTP 402, and starts nothing by itself after a top-up. So:

- an instance of ours is *stopped for credit* when it shows ``stopped`` with a status message about credit,
  or when it shows ``stopped`` while the credit is at or below $0 and at least half of our listed instances
  are stopped (a run-out stops all of them at once; one unschedulable rent does not);
- the first sighting is logged (``credit.stopped``, the ids new to it): those instances are *kept*: not
  destroyed, no ``host.failed`` against their hosts, no ``dead:`` alert; one ``credit:stopped`` alert says
  why, until none is left stopped;
- a kept instance stays kept until it is started again (``system.start``, agent/fleet/stopped.py, once the
  credit is above ``policy.credit_reserve``) or is no longer listed;
- the low-credit alert (``balance:low``) is critical at or below the reserve (and so at $0) and a warning
  above it, its severity changed in place (``alert.severity_changed``), and its title states the runway;
- rents are refused in code at or below the reserve (``known_credit`` is what agent/fleet/policy.py checks):
  the tick's observed credit, or $0 once vast.ai answered a rent of this tick with HTTP 402.
"""

from __future__ import annotations

from typing import Any

from agent.feedback.alerts import live_alerts, resolve_absent_in
from agent.store.log import EventLog, Transaction

KEY_CREDIT = "credit:stopped"
HTTP_402 = "HTTP 402"
STOPPED = "stopped"
NOT_BURNING = ("stopped", "exited", "offline")  # what vast.ai bills at the storage rate only


def _ours(obs: dict[str, Any]) -> list[dict[str, Any]]:
    return [i for i in obs.get("instances") or [] if i.get("ours") and i.get("status") != "unlisted"]


def _credit_msg(i: dict[str, Any]) -> bool:
    msg = str(i.get("status_msg") or "").lower()
    return "credit" in msg or "balance" in msg


def stopped_for_credit(obs: dict[str, Any], kept: set[int]) -> list[int]:
    """The ids of our instances the observation shows stopped for credit (``kept``: those already known so)."""
    ours = _ours(obs)
    stopped = [i for i in ours if i.get("status") == STOPPED]
    credit = obs.get("balance")
    run_out = isinstance(credit, int | float) and credit <= 0 and 2 * len(stopped) >= max(1, len(ours))
    return sorted(int(i["id"]) for i in stopped if run_out or _credit_msg(i) or int(i["id"]) in kept)


def kept_ids(log: EventLog) -> set[int]:
    """Instances logged as stopped for credit and not started since (``system.start`` that succeeded)."""
    kept: dict[int, int] = {}
    for e in log.read(0, kinds=["credit.stopped", "system.start"]):
        if e.kind == "credit.stopped":
            kept.update((int(i), e.seq) for i in e.payload["instance_ids"])
        elif e.payload.get("ok"):
            kept.pop(int(e.payload["instance_id"]), None)
    return set(kept)


def known_credit(log: EventLog) -> float | None:
    """The credit a rent is judged by: the latest observation's, or $0 once vast.ai refused a rent of this
    tick for lack of credit (HTTP 402). None when no observation gave one."""
    start = next(log.read(0, kinds=["tick.started"], newest_first=True, limit=1), None)
    if start is None:
        return None
    for e in log.read(start.seq, kinds=["tool.result"]):
        if e.payload.get("name") == "rent_instance" and HTTP_402 in str(e.payload.get("error") or ""):
            return 0.0
    credit = start.payload["observation"].get("balance")
    return float(credit) if isinstance(credit, int | float) else None


def burn_rate(obs: dict[str, Any]) -> float:
    """$/h our instances cost while they run (stopped ones bill storage only, left out), and the traffic vast.ai
    bills them per GB on top, as measured (the observation's ``traffic_dph``)."""
    return sum(float(i.get("dph") or 0.0) for i in _ours(obs) if i.get("status") not in NOT_BURNING) \
        + float(obs.get("traffic_dph") or 0.0)


def _duration(hours: float) -> str:
    minutes = int(round(hours * 60))
    if minutes >= 48 * 60:
        return f"{minutes // 1440} d {(minutes % 1440) // 60} h"
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"


def runway(credit: float, dph: float) -> str:
    """``credit lasts 2 h 40 min at $4.10/h``; what a credit at or below $0 means instead; "" when nothing of
    ours runs (no runway to state)."""
    if credit <= 0:
        return "credit exhausted: vast.ai stops every instance and refuses rents until a top-up"
    if dph <= 0:
        return ""
    return f"credit lasts {_duration(credit / dph)} at ${dph:,.2f}/h"


def low_severity(credit: float, reserve: float) -> str:
    return "critical" if credit <= max(reserve, 0.0) else "warning"


def set_severity(tx: Transaction, key: str, severity: str, tick: int | None) -> None:
    """Give the live alert ``key`` the severity ``severity`` (an ``alert.severity_changed`` when it differs)."""
    for a in live_alerts(tx, key=key):
        if a.severity != severity:
            tx.append("alert.severity_changed", {"alert_id": a.id, "severity": severity, "previous": a.severity},
                      "system", tick)


def check_credit(tx: Transaction, settings: Any, obs: dict[str, Any], kept: list[int], tick: int | None,
                 up: Any, key_balance: str) -> None:
    """Inside the tick's conditions transaction: the low-credit alert (severity, runway) and the credit-stop
    alert. ``up(tx, key, severity, title, detail)`` raises or repeats one."""
    reserve = float(settings.policy.credit_reserve)
    low = float(settings.alerts.low_balance)
    credit = obs.get("balance")
    if isinstance(credit, int | float):
        if credit < low or credit <= reserve:
            sev = low_severity(credit, reserve)
            burn = burn_rate(obs)
            left = runway(credit, burn)
            traffic = float(obs.get("traffic_dph") or 0.0)
            up(tx, key_balance, sev, f"credit ${credit:,.2f} is below ${max(low, reserve):,.2f}"
               + (f": {left}" if left else ""),
               f"fleet spends ${burn:,.2f}/h" + (f" (${traffic:,.2f}/h of it traffic)" if traffic else "")
               + f"; rents are refused at or below policy.credit_reserve ${reserve:,.2f}")
            set_severity(tx, key_balance, sev, tick)
        else:
            resolve_absent_in(tx, key_balance, set(), f"balance back to ${credit:,.2f}", tick)
    if kept:
        where = f"credit ${credit:,.2f}" if isinstance(credit, int | float) else "credit unknown"
        what = f"{len(kept)} instance{'s' if len(kept) != 1 else ''} of ours"
        if isinstance(credit, int | float) and credit > reserve:  # topped up: started as far as policy wants
            sev, title = "warning", (f"{what} stopped by vast.ai for lack of credit, kept: started again as far "
                                     "as the policy in force wants them")
        else:
            sev, title = "critical", (f"vast.ai stopped {what} for lack of credit; kept (disks kept, storage "
                                      "billed) until a top-up")
        up(tx, KEY_CREDIT, sev, title,
           f"{where}; instances {', '.join(f'#{i}' for i in kept)}. Top up the account: they are started again "
           f"once the credit is above policy.credit_reserve ${reserve:,.2f}; no rent until then")
        set_severity(tx, KEY_CREDIT, sev, tick)
    else:
        resolve_absent_in(tx, KEY_CREDIT, set(), "no instance of ours is stopped for credit", tick)


def note_stop(tx: Transaction, obs: dict[str, Any], kept: list[int], known: set[int], reserve: float,
              tick: int | None) -> None:
    """Log ``credit.stopped`` for the instances newly seen stopped for credit."""
    new = [i for i in kept if i not in known]
    if new:
        credit = obs.get("balance")
        tx.append("credit.stopped", {"instance_ids": new,
                                     "credit": float(credit) if isinstance(credit, int | float) else None,
                                     "reserve": reserve}, "system", tick)
