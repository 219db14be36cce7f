"""Facts: what the covered events say about hosts and GPU prices, extracted deterministically.

At each compaction the events it folds are read for facts a summary tends to lose: per host, how many of
our instances failed on it, how many rents of its offers were refused, and the last tick it was seen; per
GPU model, the range of prices seen (per GPU per hour, from observations and search results). The facts
ride on the ``context.compacted`` event (``facts``), are rendered compactly after the summary (so the
pinned block before it stays byte-stable for the prompt cache) within ``facts_max_tokens``, and the
``recall_facts`` tool answers from them and the events since.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from agent.context.cache import Meter
from agent.events import Event, inline

FAILED = frozenset({"exited", "error", "offline", "failed", "unknown"})
KEEP_IDS = 20   # failed instance ids remembered per host (to count each failure once)
KEEP_OFFERS = 500   # offer id -> host of the newest search results (a rent refused later finds its host)


def empty_facts() -> dict[str, Any]:
    return {"hosts": {}, "gpus": {}}


def _host(facts: dict[str, Any], host: object) -> dict[str, Any]:
    h: dict[str, Any] = facts["hosts"].setdefault(str(host), {"failures": 0, "refusals": 0,
                                                              "last_seen_tick": None, "failed_ids": []})
    return h


def _price(facts: dict[str, Any], gpu: object, dph: object, n: object) -> None:
    if not isinstance(dph, int | float) or dph <= 0:
        return
    per = round(float(dph) / max(1, int(n) if isinstance(n, int) else 1), 4)
    lo_hi = facts["gpus"].setdefault(str(gpu), [per, per])
    lo_hi[0], lo_hi[1] = min(lo_hi[0], per), max(lo_hi[1], per)


def _observation(facts: dict[str, Any], e: Event) -> None:
    for i in (e.payload.get("observation") or {}).get("instances") or []:
        if i.get("host_id") is None:
            continue
        h = _host(facts, i["host_id"])
        h["last_seen_tick"] = e.tick
        if str(i.get("status")) in FAILED and i.get("id") not in h["failed_ids"]:
            h["failures"] += 1
            h["failed_ids"] = [*h["failed_ids"], i.get("id")][-KEEP_IDS:]
        _price(facts, i.get("gpu_name"), i.get("dph"), i.get("num_gpus"))


def _offers(facts: dict[str, Any], offers: dict[str, str], output: str) -> None:
    """Rows of a search_offers table: ``offer_id | gpu xN | $/h | reliability | host | location``."""
    for row in output.splitlines()[1:]:
        cells = [c.strip() for c in row.split("|")]
        if len(cells) < 5:
            continue
        gpu, _, n = cells[1].rpartition(" x")
        try:
            _price(facts, gpu or cells[1], float(cells[2]), int(n) if n.isdigit() else 1)
        except ValueError:
            continue
        offers[cells[0]] = cells[4]


class _Folder:
    def __init__(self, facts: dict[str, Any]) -> None:
        self.facts = facts
        self.offers: dict[str, str] = facts["offers"]   # offer id -> host id, from search results
        self.rents: dict[str, str] = {}    # call id -> offer id

    def event(self, e: Event) -> None:
        p = e.payload
        if e.kind == "tick.started":
            _observation(self.facts, e)
        elif e.kind == "model.response":
            for c in p.get("tool_calls") or []:
                if c.get("name") == "rent_instance":
                    self.rents[c["id"]] = _offer_id(c.get("arguments"))
        elif e.kind == "tool.result" and p.get("name") == "search_offers" and p.get("ok"):
            _offers(self.facts, self.offers, str(p.get("output") or ""))
        elif (e.kind == "policy.blocked" or (e.kind == "tool.result" and not p.get("ok"))) \
                and p.get("call_id") in self.rents:
            host = self.offers.get(self.rents.pop(p["call_id"]))
            if host is not None:
                _host(self.facts, host)["refusals"] += 1


def _offer_id(arguments: object) -> str:
    try:
        args = json.loads(str(arguments or "{}"))
    except ValueError:
        return ""
    return str(args.get("offer_id", "")) if isinstance(args, dict) else ""


def fold_facts(facts: dict[str, Any] | None, events: Iterable[Event]) -> dict[str, Any]:
    """``facts`` (a snapshot, not changed) with what ``events`` add; a new dict."""
    base = facts or empty_facts()
    out: dict[str, Any] = {"hosts": {k: {**v, "failed_ids": list(v.get("failed_ids") or [])} for k, v in base["hosts"].items()},
           "gpus": {k: list(v) for k, v in base["gpus"].items()}, "offers": dict(base.get("offers") or {})}
    f = _Folder(out)
    for e in events:
        f.event(e)
    out["offers"] = dict(list(out["offers"].items())[-KEEP_OFFERS:])
    out["hosts"] = dict(sorted(out["hosts"].items()))
    out["gpus"] = dict(sorted(out["gpus"].items()))
    return out


def host_line(host: str, h: dict[str, Any]) -> str:
    seen = f", last seen tick {h['last_seen_tick']}" if h.get("last_seen_tick") is not None else ""
    return f"- host {inline(host)}: {h['failures']} failures, {h['refusals']} refusals{seen}"


def gpu_line(gpu: str, lo_hi: list[float]) -> str:
    return f"- {inline(gpu)}: ${lo_hi[0]:.3f}–${lo_hi[1]:.3f} per GPU-hour seen"


def render_facts(facts: dict[str, Any] | None, cap: int, meter: Meter) -> str | None:
    """The facts block within ``cap`` tokens: hosts with failures or refusals (most first), then GPU price
    ranges, then a marker naming what is left out and ``recall_facts``. None when there is nothing."""
    if not facts or cap <= 0:
        return None
    hosts = sorted(((k, v) for k, v in facts.get("hosts", {}).items() if v["failures"] or v["refusals"]),
                   key=lambda kv: (-(kv[1]["failures"] + kv[1]["refusals"]), kv[0]))
    lines = [host_line(k, v) for k, v in hosts] + [gpu_line(k, v) for k, v in facts.get("gpus", {}).items()]
    if not lines:
        return None
    text = "## Facts from the summarised events (recall_facts has every host and GPU)"
    used = meter.count(text)
    for n, line in enumerate(lines):
        c = meter.count(line) + 1
        if used + c > cap - 30:
            return text + f"\n[... {len(lines) - n:,} more facts not shown for space; recall_facts(host=...) or " \
                          "recall_facts(gpu=...) has them]"
        text += "\n" + line
        used += c
    return text
