"""Rendering helpers shared by the kinds' renderers and by the context projection.

Everything here is deterministic: the same input renders to the same bytes. A
change to any of these functions changes the rendering of every event version
that uses it, which the golden files (tests/golden/) catch; freeze the old
behaviour for old versions before changing one.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from agent.events.event import JsonObject, Message

KNOWLEDGE_DIFF_CHARS = 6000


def ts_minute(ts: str) -> str:
    """'2026-11-29T10:05:12.123456Z' -> '2026-11-29 10:05 UTC'."""
    return f"{ts[:10]} {ts[11:16]} UTC"


def epoch_minute(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M UTC")


def fence(text: str, info: str = "data") -> str:
    """Fence ``text`` so nothing inside can close the fence (CommonMark rule:
    the fence is longer than any backtick run in the text)."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{info}\n{text}\n{ticks}"


def user(text: str) -> Message:
    return {"role": "user", "content": text}


def money(x: object) -> str:
    return f"${x:,.2f}" if isinstance(x, int | float) else "?"


def age(seconds: object) -> str:
    if not isinstance(seconds, int | float):
        return "?"
    s = int(seconds)
    if s < 3600:
        return f"{s // 60}m"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def _instance_line(i: JsonObject) -> str:
    flag = "" if i.get("ours", True) else " NOT-OURS"
    msg = f" — {i['status_msg']}" if i.get("status_msg") else ""
    return (f"  #{i.get('id')} {i.get('gpu_name')} x{i.get('num_gpus', 1)} {i.get('status') or 'provisioning'} "
            f"{age(i.get('age_s'))} {money(i.get('dph'))}/h host {i.get('host_id')}{flag}{msg}")


def _demand_line(obs: JsonObject) -> str | None:
    d = obs.get("demand")
    if isinstance(d, dict):
        rate = d.get("arrival_rate_per_h")
        rate_txt = f", arriving ~{rate:.0f}/h" if isinstance(rate, int | float) else ""
        delta = d.get("pending_delta")
        delta_txt = f" ({delta:+d} since last tick)" if isinstance(delta, int) else ""
        return (f"demand: {d.get('pending', '?')} pending{delta_txt}, {d.get('running', 0)} running, "
                f"{d.get('completed', '?')} completed{rate_txt}")
    if d is None and "demand_error" in obs:
        return f"demand: unavailable ({obs['demand_error']})"
    return None


def render_observation(tick: int | None, ts: str, obs: JsonObject) -> str:
    """The compact, deterministic text of one tick's observation."""
    when = epoch_minute(obs["time"]) if isinstance(obs.get("time"), int | float) else ts_minute(ts)
    lines = [f"[tick {tick} · {when}] observation"]
    insts = obs.get("instances") or []
    states: dict[str, int] = {}
    for i in insts:
        states[i.get("status") or "provisioning"] = states.get(i.get("status") or "provisioning", 0) + 1
    state_txt = ", ".join(f"{n} {s}" for s, n in sorted(states.items())) or "none"
    lines.append(
        f"balance {money(obs.get('balance'))} · fleet {len(insts)} instances ({state_txt}) · "
        f"{money(obs.get('fleet_dph', 0.0))}/h"
    )
    demand = _demand_line(obs)
    if demand is not None:
        lines.append(demand)
    if insts:
        lines.append("instances:")
        lines.extend(_instance_line(i) for i in insts)
    for key, title in (("changes", "changes since last tick"), ("open_alerts", "open alerts"), ("errors", "errors")):
        items = obs.get(key) or []
        if items:
            lines.append(f"{title}:")
            lines.extend(f"  {x}" for x in items)
    return "\n".join(lines)


def render_tool_content(name: str, ok: bool, output: str, recovered: bool = False) -> str:
    status = "ok" if ok else "error"
    if recovered:
        status += " · recovered after restart"
    return f"[tool result · {name} · {status}]\n{fence(output)}"
