"""Rendering helpers shared by the kinds' renderers and by the context projection.

Everything here is deterministic: the same input renders to the same bytes. A
change to any of these functions changes the rendering of every event version
that uses it, which the golden files (tests/golden/) catch; freeze the old
behaviour for old versions before changing one.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TypeGuard

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


# Characters escaped in text the agent does not author (the model's, vast.ai's, the demand source's, a
# tool's): brackets (no source tag can be spelled), every control and format character (ANSI escapes,
# zero-width and direction marks), and the Unicode line and paragraph separators (U+0085, U+2028,
# U+2029), which some readers take for a line break. Non-ASCII characters are tested one by one.
_SUSPECT = re.compile(r"[\x00-\x1f\x7f\[\]]|[^\x00-\x7f]")
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(c: str) -> str:
    if c in _NAMED:
        return _NAMED[c]
    n = ord(c)
    return f"\\u{n:04x}" if n <= 0xFFFF else f"\\U{n:08x}"


def _escaper(keep: str) -> Callable[[re.Match[str]], str]:
    def sub(m: re.Match[str]) -> str:
        c = m.group(0)
        if c in keep:
            return c
        if c in "[]" or ord(c) < 0x80 or unicodedata.category(c) in _UNSAFE_CATEGORIES:
            return _escape_char(c)
        return c
    return sub


_INLINE_SUB = _escaper("")
_DATA_SUB = _escaper("\n\t")


def inline(value: object) -> str:
    """``value`` as one line of data inside a renderer-written line: newlines, every control, format and
    separator character and both brackets written as escapes (``\\n``, ``\\u005b``), so it cannot start
    a line, spell a source tag or open or close a fence. Text without such characters is unchanged."""
    return _SUSPECT.sub(_INLINE_SUB, str(value))


def data(text: str) -> str:
    """``text`` as lines of data inside a fence: like ``inline`` but line breaks (``\\n``) and tabs kept."""
    return _SUSPECT.sub(_DATA_SUB, text)


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


Quote = Callable[[object], str]
"""How a renderer writes a value it did not author: ``str`` (version 1 renderings) or ``inline``."""


def _instance_line(i: JsonObject, q: Quote = str, detail: bool = False, ends: bool = False) -> str:
    """One instance. A record whose ``bid`` is set (an interruptible instance: its $/h is its bid) says ``bid``
    after its $/h; records without it (on-demand, or written before it existed) render as they always did."""
    flag = "" if i.get("ours", True) else " NOT-OURS"
    msg = f" — {q(i['status_msg'])}" if i.get("status_msg") else ""
    end = _ends(i) if ends else None
    return (f"  #{q(i.get('id'))} {q(i.get('gpu_name'))} x{q(i.get('num_gpus', 1))} "
            f"{q(i.get('status') or 'provisioning')} {age(i.get('age_s'))} {money(i.get('dph'))}/h "
            f"{'bid ' if i.get('bid') is not None else ''}host {q(i.get('host_id'))}{flag}{_health(i, q) if detail else ''}{f' · {end}' if end else ''}{msg}")


def _number(x: object) -> TypeGuard[int | float]:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _ends(i: JsonObject) -> str | None:
    """``contract ends in 5 h`` (v7): an instance whose contract ends soon (the observation sets ``ends_s`` only
    for those, within policy.contract_min_hours); vast.ai stops it for good then. ``ends_s`` is the earlier of the
    contract's end and its machine's next maintenance window; a record that also carries ``maint_s`` (the
    window's start, set within the same horizon) says which: ``maintenance in 5 h`` when the window comes first.
    A record without ``maint_s`` (written before it existed) renders as it always did."""
    left, maint = i.get("ends_s"), i.get("maint_s")
    if not _number(left):
        return None
    if _number(maint) and maint <= left:
        if left <= 0:
            return "in maintenance"
        if left >= 3600:
            return f"maintenance in {left / 3600:.0f} h"
        return f"maintenance in {max(1, int(left // 60))} min"
    if left <= 0:
        return "contract ended"
    if left >= 3600:
        return f"contract ends in {left / 3600:.0f} h"
    return f"contract ends in {max(1, int(left // 60))} min"


def _health(i: JsonObject, q: Quote) -> str:
    """`` · util 93% · up 2h10m · 1 restart · 41 jobs`` (v6): what the instance did between ticks, from
    the fields it has."""
    parts = []
    util = i.get("gpu_util")
    if isinstance(util, int | float) and not isinstance(util, bool):
        parts.append(f"util {util:.0f}%")
    if isinstance(i.get("up_s"), int | float):
        parts.append(f"up {age(i.get('up_s'))}")
    n = i.get("restarts")
    if isinstance(n, int) and n:
        parts.append(f"{n} restart{'s' if n != 1 else ''}")
    if isinstance(i.get("jobs"), int):
        parts.append(f"{q(i.get('jobs'))} jobs")
    return "".join(f" · {p}" for p in parts)


def _hours(h: float) -> str:
    return f"{h / 24:.1f} days" if h >= 48 else age(h * 3600)


def _per_job(x: object) -> str:
    return f"${x:.3f}/job" if isinstance(x, int | float) and not isinstance(x, bool) else "$?/job"


def _basis(m: JsonObject, hours: object) -> str:
    """What a GPU model's jobs/h rests on. A record with ``basis`` (the observation's, from agent/fleet/throughput.py)
    says it: ``measured 3.2 GPU-h``, ``configured, not yet measured`` (policy.jobs_per_hour_by_gpu), ``scaled from
    dlperf 35.1, not yet measured`` (from the measured models' jobs/h per dlperf point) or ``assumed, not yet
    measured`` (policy.jobs_per_hour). A record without it (written before it existed) renders as it always did:
    measured from 1 GPU-h, else assumed."""
    basis = m.get("basis")
    if basis == "configured":
        return "configured, not yet measured"
    if basis == "dlperf":
        d = m.get("dlperf")
        return f"scaled from dlperf {d:.1f}, not yet measured" if _number(d) else "scaled from dlperf, not yet measured"
    if basis == "assumed":
        return "assumed, not yet measured"
    if basis == "measured" and _number(hours):
        return f"measured {hours:.1f} GPU-h"
    return (f"measured {hours:.1f} GPU-h" if isinstance(hours, int | float) and hours >= 1
            else "assumed, not yet measured")


def _models_line(obs: JsonObject, q: Quote) -> str | None:
    """``per GPU model: RTX 4090 ×3 7.9 jobs/h/GPU (measured 3.2 GPU-h) $0.048/job; ...`` (v6)."""
    models = obs.get("gpu_models")
    if not isinstance(models, dict) or not models:
        return None
    parts = []
    for gpu, m in models.items():
        if not isinstance(m, dict):
            continue
        jph, hours = m.get("jobs_per_h"), m.get("measured_gpu_h")
        rate = f"{jph:.1f} jobs/h/GPU" if isinstance(jph, int | float) else "? jobs/h/GPU"
        basis = _basis(m, hours)
        parts.append(f"{q(gpu)} ×{q(m.get('instances', '?'))} {rate} ({basis}) {_per_job(m.get('usd_per_job'))}")
    return "per GPU model: " + "; ".join(parts) if parts else None


TODO_IDS_SHOWN = 8
"""Instances a ``to do:`` line names by id per kind (dead, surplus); the rest are counted."""


def _ids(ids: list[int]) -> str:
    """``#1, #2`` up to ``TODO_IDS_SHOWN``, then ``and 12 more``: the next tick names the rest."""
    shown = ", ".join(f"#{i}" for i in ids[:TODO_IDS_SHOWN])
    rest = len(ids) - TODO_IDS_SHOWN
    return shown + (f" and {rest} more (named next tick)" if rest > 0 else "")


def need_lines(obs: JsonObject, q: Quote = str, words: bool = False) -> list[str]:
    """v9: what the fleet needs now and what that asks of this tick, in the terms of the tools (``need``, sized
    by agent/fleet/throughput.py as the rules provider sizes the fleet)::

        need now: 40.1 jobs/h (arriving 31/h + 61 pending cleared within 1h) · ours deliver 27.8 jobs/h
        to do: rent 12.3 jobs/h more: search_offers with order per_job, then rent_instance the offers its last line names

    Only numbers the observation computed are written (no value from vast.ai or the queue as text).

    With ``words`` (v10), the operators' words in force first (``operators' words in force: exclude host 5; allow
    only GPU models RTX 4090 until ...``), and the instances of ours they bar (``need.barred``) counted out of what
    ours deliver and named in ``to do:`` to destroy, why beside them (their replacement is in the gap); the dead the
    tick destroys itself (``need.destroying``) are not asked of the model. Those texts are written through ``q``."""
    said = [str(w) for w in obs.get("operators_words") or []] if words else []
    n = obs.get("need")
    if not isinstance(n, dict) or not _number(n.get("jobs_per_h")):  # no demand reading: the words all the same
        return [f"operators' words in force: {'; '.join(q(w) for w in said)}"] if said else []
    drain = n.get("drain_h")
    drain_txt = f"{drain:g}h" if _number(drain) else "?"
    barred = [b for b in n.get("barred") or [] if isinstance(b, dict) and _number(b.get("id"))] if words else []
    held = n.get("barred_jobs_per_h")
    held_txt = (f", not counting {float(held):.1f} jobs/h from {len(barred)} instance{'s' if len(barred) != 1 else ''}"
                " barred below" if barred and _number(held) else "")
    lines = [f"operators' words in force: {'; '.join(q(w) for w in said)}"] if said else []
    lines.append(f"need now: {n['jobs_per_h']:.1f} jobs/h (arriving {float(n.get('arriving_per_h') or 0):.0f}/h + "
                 f"{int(n.get('pending') or 0)} pending cleared within {drain_txt}) · ours deliver "
                 f"{float(n.get('capacity') or 0):.1f} jobs/h{held_txt}")
    todo = []
    going = {int(i) for i in n.get("destroying") or [] if _number(i)} if words else set()  # the tick destroys them
    dead = [int(i) for i in n.get("dead") or [] if _number(i) and int(i) not in going]
    surplus = [int(i) for i in n.get("surplus") or [] if _number(i)]
    if dead:
        todo.append("destroy_instance " + _ids(dead) + " (delivering nothing)")
    if barred:
        why: dict[str, list[int]] = {}
        for b in barred:
            why.setdefault(str(b.get("why") or "?"), []).append(int(b["id"]))
        todo.append("destroy_instance " + ", ".join(f"{_ids(ids)} (barred: {q(w)})" for w, ids in why.items()))
    gap = n.get("gap")
    if _number(gap) and gap > 0:
        todo.append(f'rent {gap:.1f} jobs/h more: search_offers with {{"order": "per_job"}} and no other argument, '
                    "then rent_instance the offers its last line names")
    if surplus:
        todo.append("destroy_instance " + _ids(surplus) + " (surplus: the rest cover the need)")
    lines.append("to do: " + ("; ".join(todo) if todo else
                              "nothing to rent or destroy; say so in one sentence and call no tool"))
    return lines


def _demand_line(obs: JsonObject, q: Quote = str, detail: bool = False) -> str | None:
    d = obs.get("demand")
    if isinstance(d, dict):
        rate = d.get("arrival_rate_per_h")
        rate_txt = f", arriving ~{rate:.0f}/h" if isinstance(rate, int | float) else ""
        delta = d.get("pending_delta")
        delta_txt = f" ({delta:+d} since last tick)" if isinstance(delta, int) else ""
        trend = d.get("trend_per_h") if detail else None
        trend_txt = f", queue trend {trend:+.0f}/h over the last hour" if isinstance(trend, int | float) else ""
        return (f"demand: {q(d.get('pending', '?'))} pending{delta_txt}, {q(d.get('running', 0))} running, "
                f"{q(d.get('completed', '?'))} completed{rate_txt}{trend_txt}")
    if d is None and "demand_error" in obs:
        return f"demand: unavailable ({q(obs['demand_error'])})"
    return None


def _group_health(members: list[JsonObject]) -> str:
    """`` · util 85-99% · 1,234 jobs`` (v6): a group's utilisation range and jobs done."""
    utils = [u for i in members if isinstance(u := i.get("gpu_util"), int | float) and not isinstance(u, bool)]
    jobs = [j for i in members if isinstance(j := i.get("jobs"), int)]
    parts = []
    if utils:
        lo, hi = min(utils), max(utils)
        parts.append(f"util {lo:.0f}%" if round(lo) == round(hi) else f"util {lo:.0f}-{hi:.0f}%")
    if jobs:
        parts.append(f"{sum(jobs):,} jobs")
    return "".join(f" · {p}" for p in parts)


def _member(i: JsonObject, q: Quote, detail: bool, ends: bool = False) -> str:
    """``#id``, and in v6 ``(N restarts)`` after one that restarted: the member that is failing stands out; in
    v7 ``(contract ends in 5 h)`` after one whose contract ends soon."""
    n = i.get("restarts") if detail else None
    end = _ends(i) if ends else None
    return (f"#{q(i.get('id'))}" + (f" ({n} restart{'s' if n != 1 else ''})" if isinstance(n, int) and n else "")
            + (f" ({end})" if end else ""))


def _grouped_lines(insts: list[JsonObject], q: Quote, detail: bool = False, ends: bool = False) -> list[str]:
    """A large fleet's instance lines: the instances alike (GPU, count, status, price, status message) on one
    line, ``N × GPU xC status $/h — message:`` then their ids by host and age (``h16527 10m #a #b; h25295 2h00m
    #c``), in the order the first of each appears. One not ours keeps a line of its own, as does a group of
    one."""
    slots: list[JsonObject | str] = []   # an instance on its own line, or a group's head
    groups: dict[str, list[JsonObject]] = {}
    for i in insts:
        if not i.get("ours", True):
            slots.append(i)
            continue
        msg = f" — {q(i['status_msg'])}" if i.get("status_msg") else ""
        head = (f"{q(i.get('gpu_name'))} x{q(i.get('num_gpus', 1))} {q(i.get('status') or 'provisioning')} "
                f"{money(i.get('dph'))}/h{msg}")   # alike: the same text, whatever the values' types
        if head not in groups:
            groups[head] = []
            slots.append(head)
        groups[head].append(i)
    lines = []
    for x in slots:
        members = [x] if isinstance(x, dict) else groups[x]
        if len(members) == 1:
            lines.append(_instance_line(members[0], q, detail, ends))
            continue
        where: dict[tuple[str, str], list[str]] = {}
        for i in members:
            where.setdefault((q(i.get("host_id")), age(i.get("age_s"))), []).append(_member(i, q, detail, ends))
        extra = _group_health(members) if detail else ""
        lines.append(f"  {len(members)} × {x}{extra}: "
                     + "; ".join(f"h{h} {a} " + " ".join(ids) for (h, a), ids in where.items()))
    return lines


PROBLEMS_SHOWN = 40
"""v8: at most this many instances needing attention are listed by id; the rest are counted alike."""
CHANGES_SHOWN = 40
"""v8: at most this many changes since the last tick are listed by id; the rest are counted alike."""


def needs_attention(i: JsonObject) -> bool:
    """An instance the v8 observation names by id: not ours, not running, with a message from vast.ai, restarted
    since rent, or with a contract that ends soon. The others are healthy and counted in their group."""
    return (not i.get("ours", True) or (i.get("status") or "provisioning") != "running" or bool(i.get("status_msg"))
            or bool(i.get("restarts")) or _ends(i) is not None)


def _rank(i: JsonObject) -> int:
    """Which instances needing attention are listed first: not running or with a message, then restarted, then
    ending, then not ours."""
    if (i.get("status") or "provisioning") != "running" or i.get("status_msg"):
        return 0
    if i.get("restarts"):
        return 1
    return 2 if _ends(i) is not None else 3


def _span(lo: float, hi: float, fmt: Callable[[float], str], sep: str = "-") -> str:
    a, b = fmt(lo), fmt(hi)
    return a if a == b else f"{a}{sep}{b}"


def _healthy_lines(insts: list[JsonObject], q: Quote, detail: bool) -> list[str]:
    """v8: the healthy instances, one line per GPU model, count and status: how many, their price range and $/h
    together, how many hosts, the range of time in that status, utilisation and jobs, in the order the first of
    each appears; no ids (``list_fleet`` with ``gpu_name`` and ``status`` gives them)."""
    groups: dict[tuple[str, str, str], list[JsonObject]] = {}
    for i in insts:
        key = (q(i.get("gpu_name")), q(i.get("num_gpus", 1)), q(i.get("status") or "provisioning"))
        groups.setdefault(key, []).append(i)
    lines = []
    for (gpu, count, status), members in groups.items():
        prices = [float(p) for i in members if isinstance(p := i.get("dph"), int | float)]
        ages = [float(a) for i in members if isinstance(a := i.get("age_s"), int | float)]
        hosts = {q(i.get("host_id")) for i in members}
        parts = [f"{len(members)} × {gpu} x{count} {status}"]
        if prices:
            parts.append(_span(min(prices), max(prices), lambda x: f"${x:,.2f}") + f"/h each, {money(sum(prices))}/h")
        parts.append(f"{len(hosts)} host{'s' if len(hosts) != 1 else ''}")
        if ages:
            parts.append(f"for {_span(min(ages), max(ages), age)}")
        lines.append("  " + " · ".join(parts) + (_group_health(members) if detail else ""))
    return lines


def _attention_lines(insts: list[JsonObject], q: Quote, detail: bool, ends: bool) -> list[str]:
    """v8: the instances needing attention, one line each by id (the most pressing first, at most
    ``PROBLEMS_SHOWN``), then the rest of them counted alike (GPU, count, status and message)."""
    ranked = sorted(insts, key=_rank)
    lines = [_instance_line(i, q, detail, ends) for i in ranked[:PROBLEMS_SHOWN]]
    rest = ranked[PROBLEMS_SHOWN:]
    if rest:
        alike: dict[str, int] = {}
        for i in rest:
            msg = f" — {q(i['status_msg'])}" if i.get("status_msg") else ""
            flag = "" if i.get("ours", True) else " NOT-OURS"
            head = (f"{q(i.get('gpu_name'))} x{q(i.get('num_gpus', 1))} {q(i.get('status') or 'provisioning')}"
                    f"{flag}{msg}")
            alike[head] = alike.get(head, 0) + 1
        lines.append(f"  and {len(rest)} more, not listed by id (list_fleet shows them):")
        lines.extend(f"    {n} × {head}" for head, n in alike.items())
    return lines


_CHANGE = re.compile(r"#(\S+) (.*)")


def _change_lines(items: list[object], urgent: set[str], q: Quote) -> list[str]:
    """v8: the changes since the last tick, at most ``CHANGES_SHOWN`` by id: those of an instance needing
    attention (``urgent``: their ids) or gone first, then the others in order; the rest counted alike (``412 ×
    new (running)``)."""
    def first(x: object) -> bool:
        m = _CHANGE.fullmatch(str(x))
        return m is not None and (m.group(1) in urgent or m.group(2) == "gone")

    ordered = [x for x in items if first(x)] + [x for x in items if not first(x)]
    lines = [f"  {q(x)}" for x in ordered[:CHANGES_SHOWN]]
    rest = ordered[CHANGES_SHOWN:]
    if rest:
        alike: dict[str, int] = {}
        for x in rest:
            m = _CHANGE.fullmatch(str(x))
            what = m.group(2) if m else str(x)
            alike[what] = alike.get(what, 0) + 1
        lines.append(f"  and {len(rest)} more: " + ", ".join(f"{n} × {q(w)}" for w, n in alike.items()))
    return lines


def _compact_lines(insts: list[JsonObject], q: Quote, detail: bool, ends: bool) -> list[str]:
    """v8: a large fleet's instances: the healthy ones counted by GPU model and status, the ones needing
    attention by id."""
    healthy = [i for i in insts if not needs_attention(i)]
    attention = [i for i in insts if needs_attention(i)]
    lines = []
    if healthy:
        lines.append(f"healthy instances of ours ({len(healthy)}; by GPU model, count and status; their ids: "
                     "list_fleet with gpu_name and status):")
        lines.extend(_healthy_lines(healthy, q, detail))
    if attention:
        ending = "contract or maintenance ending" if any("maint_s" in i for i in insts) else "contract ending"
        lines.append(f"instances needing attention ({len(attention)}: not running, a message, restarted, {ending}, "
                     "or not ours):")
        lines.extend(_attention_lines(attention, q, detail, ends))
    return lines


def render_observation(tick: int | None, ts: str, obs: JsonObject, q: Quote = str, *,
                       group_over: int | None = None, detail: bool = False, ends: bool = False,
                       compact: bool = False, need: bool = False, words: bool = False) -> str:
    """The compact, deterministic text of one tick's observation. ``q`` writes every value that came from
    vast.ai, the demand source or the log (``str`` in version 1; ``inline`` from version 2 on). With
    ``group_over`` (version 5 on), a fleet of more instances than that lists alike ones on one line. With
    ``detail`` (version 6 on): each instance's utilisation, uptime, restarts and jobs done, each GPU model's
    jobs/h and $/job, the credit runway and the queue's trend, from the fields the observation has. With
    ``ends`` (version 7 on): ``contract ends in 5 h`` after an instance whose contract ends soon. With ``compact``
    (version 8 on), a fleet of more than ``group_over`` instances gives its healthy instances as counts and ranges
    by GPU model and status and names only those needing attention, and a long list of changes is cut to
    ``CHANGES_SHOWN`` with the rest counted. With ``need`` (version 9 on), what the fleet needs now and what that
    asks of the tick (``need now:`` and ``to do:``), after the per GPU model line. With ``words`` (version 10 on), the
    operators' words in force before it and the instances they bar in ``to do:``."""
    when = epoch_minute(obs["time"]) if isinstance(obs.get("time"), int | float) else ts_minute(ts)
    lines = [f"[tick {tick} · {when}] observation"]
    insts = obs.get("instances") or []
    states: dict[str, int] = {}
    for i in insts:
        states[i.get("status") or "provisioning"] = states.get(i.get("status") or "provisioning", 0) + 1
    state_txt = ", ".join(f"{n} {q(s)}" for s, n in sorted(states.items())) or "none"
    runway = obs.get("runway_h") if detail else None
    runway_txt = f" (runway {_hours(runway)} at this burn)" if isinstance(runway, int | float) else ""
    lines.append(
        f"balance {money(obs.get('balance'))}{runway_txt} · fleet {len(insts)} instances ({state_txt}) · "
        f"{money(obs.get('fleet_dph', 0.0))}/h"
        + (f" + {money(obs['traffic_dph'])}/h traffic" if obs.get("traffic_dph") else "")
    )
    demand = _demand_line(obs, q, detail)
    if demand is not None:
        lines.append(demand)
    models = _models_line(obs, q) if detail else None
    if models is not None:
        lines.append(models)
    if need:
        lines.extend(need_lines(obs, q, words))
    large = insts and group_over is not None and len(insts) > group_over
    if large and compact:
        lines.extend(_compact_lines(insts, q, detail, ends))
    elif large:
        lines.append("instances (alike ones on one line: how many × GPU, count, status, price and message, then "
                     "their ids by host and age):")
        lines.extend(_grouped_lines(insts, q, detail, ends))
    elif insts:
        lines.append("instances:")
        lines.extend(_instance_line(i, q, detail, ends) for i in insts)
    for key, title in (("changes", "changes since last tick"), ("open_alerts", "open alerts"), ("errors", "errors")):
        items = obs.get(key) or []
        if items:
            lines.append(f"{title}:")
            if compact and key == "changes":
                lines.extend(_change_lines(items, {str(i.get("id")) for i in insts if needs_attention(i)}, q))
            else:
                lines.extend(f"  {q(x)}" for x in items)
    return "\n".join(lines)


def render_tool_content(name: str, ok: bool, output: str, recovered: bool = False, version: int = 1) -> str:
    """``[tool result · name · ok|error]`` and the output fenced as data. From version 2 on the name is
    written ``inline`` and the output through ``data``: nothing in it can spell a tag or break a line."""
    status = "ok" if ok else "error"
    if recovered:
        status += " · recovered after restart"
    if version >= 2:
        return f"[tool result · {inline(name)} · {status}]\n{fence(data(output))}"
    return f"[tool result · {name} · {status}]\n{fence(output)}"
