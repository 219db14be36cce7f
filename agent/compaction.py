"""Compaction: fold the oldest span of the thread into the rolling summary.

When the projected request passes the high-water mark, the thread is cut at a
tick boundary (never between a tool call and its result, never inside the
newest tick) so the kept part, with the system prompt, the pinned block and a
summary at its cap, fits under the low-water mark. The evicted span, rendered
from the full event payloads, is summarised together with the previous summary
by the model (prompts/summarize.md). The summary is checked mechanically: it
must mention every open alert and every owned instance and stay within its
cap. A failed check or a failed call is retried once; after that a
deterministic summary is built from the events themselves. Either way one
``context.compacted`` event is appended; nothing is deleted or rewritten, and a
tick is never blocked by the summariser.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import structlog

from agent.context import (
    MARKER_COST,
    PINNED_KINDS,
    Projection,
    View,
    _count,
    _truncate,
    build_thread,
    empty_pinned,
    finish,
    fold_pinned,
    needs_compaction,
    render_pinned,
    render_summary,
    view,
)
from agent.events import Event, render, render_observation
from agent.prompts import Prompts, render_summarize
from agent.store.log import EventLog

logger = structlog.get_logger(__name__)

SECTION_TITLES = (
    "Fleet state and commitments",
    "Decisions and why",
    "Open problems",
    "Operator directives",
    "Completed actions",
)
SUMMARY_HEADER_COST = 40   # tokens of the "[summary of #A–#B]" line around the summary
LINE_CHARS = 240           # longest single line the fallback summary quotes from an event


@dataclass(frozen=True)
class Cut:
    first_kept_seq: int
    kept_tokens: int
    pinned: dict[str, Any]
    fits_low_water: bool


# ------------------------------------------------------------------ choosing the cut


def _call_spans(events: list[Event]) -> list[tuple[int, int]]:
    """(response seq, result seq) for every tool call whose result is in ``events``."""
    calls: dict[str, int] = {}
    spans = []
    for e in events:
        if e.kind == "model.response":
            calls = {c["id"]: e.seq for c in e.payload.get("tool_calls") or []}
        elif e.kind == "tool.result" and e.payload["call_id"] in calls:
            spans.append((calls.pop(e.payload["call_id"]), e.seq))
    return spans


def choose_cut(v: View, settings: Any) -> Cut | None:
    """The earliest tick boundary whose kept thread fits under low water (else the latest valid one)."""
    ticks = [e.seq for e in v.events if e.kind == "tick.started"]
    spans = _call_spans(v.events)
    base = (v.compaction.payload.get("pinned") if v.compaction else None) or empty_pinned()
    fixed = 12 + _count(v.tok_key, v.system) + v.tools_tokens + settings.summary_max_tokens + SUMMARY_HEADER_COST
    target = settings.low_water * settings.budget_tokens
    best: Cut | None = None
    for c in ticks:
        if not any(e.seq < c for e in v.thread):
            continue
        if any(r < c <= t for r, t in spans):
            continue  # would split a tool call from its result
        pinned = fold_pinned(base, (e for e in v.events if e.seq < c and e.kind in PINNED_KINDS))
        ptext = render_pinned(pinned, c - 1, settings, v.tok_key)
        kept = sum(e.tokens for e in v.thread if e.seq >= c)
        total = fixed + kept + (4 + _count(v.tok_key, ptext) if ptext else 0)
        ok = v.calibration.calibrated(total) <= target
        best = Cut(c, kept, pinned, ok)
        if ok:
            return best
    return best


# ------------------------------------------------------------------ the evicted span as text


def _one_line(text: str, n: int = LINE_CHARS) -> str:
    t = " ".join((text or "").split())
    return t if len(t) <= n else t[: n - 1] + "…"


def transcript(events: list[Event]) -> list[tuple[int, str]]:
    """(seq, text) for every event worth summarising, from the full payloads."""
    out = []
    for e in events:
        p = e.payload
        if e.kind == "model.response":
            parts = [f"[assistant] {p.get('text') or ''}".rstrip()]
            parts.extend(f"→ call {c['name']}({c['arguments']}) id={c['id']}" for c in p.get("tool_calls") or [])
            out.append((e.seq, "\n".join(parts)))
        elif e.kind == "policy.blocked":
            out.append((e.seq, f"[policy blocked {p['name']}] {p['rule']} {p.get('detail', '')}".rstrip()))
        elif e.kind == "alert.raised" and p.get("raised_by") == "model":
            out.append((e.seq, f"[alert #{p['alert_id']} raised · model] {p['severity']}: {p['title']}"))
        elif e.kind == "model.failed":
            out.append((e.seq, f"[model call failed] {p['error_kind']}"))
        else:
            msg = render(e)
            if msg is not None and msg.get("content"):
                out.append((e.seq, msg["content"]))
    return out


def _fit_transcript(lines: list[tuple[int, str]], budget: int, tok_key: str) -> str:
    sizes = [_count(tok_key, t) for _, t in lines]
    cap = max(sizes, default=0)
    if sum(sizes) + 2 * len(sizes) > budget:
        lo, hi = 16, cap
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if sum(min(s, mid + MARKER_COST) for s in sizes) + 2 * len(sizes) <= budget:
                lo = mid
            else:
                hi = mid - 1
        cap = lo
    parts = []
    for (seq, text), n in zip(lines, sizes, strict=True):
        if n > cap:
            kept, _, full = _truncate(tok_key, text, cap)
            text = f"{kept}\n[... {full - cap} more tokens in event #{seq}]"
        parts.append(f"#{seq} {text}")
    return "\n".join(parts)


# ------------------------------------------------------------------ checking a summary


def check_summary(text: str, *, cap: int, tok_key: str, open_alert_ids: list[int],
                  owned_instance_ids: list[int]) -> str | None:
    """Why ``text`` is not an acceptable summary, or None when it is."""
    if not text.strip():
        return "empty summary"
    n = _count(tok_key, text)
    if n > cap:
        return f"summary has {n} tokens, over the cap of {cap}"
    missing_alerts = [a for a in open_alert_ids
                      if not re.search(rf"(?:#|alert\s+)#?{a}(?!\d)", text, flags=re.IGNORECASE)]
    missing_inst = [i for i in owned_instance_ids if not re.search(rf"(?<!\d){i}(?!\d)", text)]
    reasons = []
    if missing_alerts:
        reasons.append("missing open alerts " + ", ".join(f"#{a}" for a in missing_alerts))
    if missing_inst:
        reasons.append("missing owned instances " + ", ".join(str(i) for i in missing_inst))
    return "; ".join(reasons) or None


# ------------------------------------------------------------------ the deterministic summary


def _sections_of(summary: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {t: [] for t in SECTION_TITLES}
    current: str | None = None
    for line in (summary or "").splitlines():
        if line.startswith("## "):
            title = line[3:].strip()
            current = title if title in out else None
            continue
        if current and line.strip():
            out[current].append(line.rstrip())
    return out


def fallback_summary(previous: str, events: list[Event], *, cap: int, tok_key: str,
                     open_alert_ids: list[int], owned_instance_ids: list[int]) -> str:
    """A summary built from the events alone, in the fixed sections, within ``cap`` tokens."""
    old = _sections_of(previous)
    new: dict[str, list[str]] = {t: [] for t in SECTION_TITLES}
    calls: dict[str, tuple[str, str]] = {}
    titles: dict[int, str] = {}
    latest_obs: Event | None = None
    for e in events:
        p = e.payload
        k = e.kind
        if k == "tick.started":
            latest_obs = e
        elif k == "model.response":
            for c in p.get("tool_calls") or []:
                calls[c["id"]] = (c["name"], c["arguments"])
            if (p.get("text") or "").strip():
                new["Decisions and why"].append(f"- {_one_line(p['text'])} (#{e.seq})")
        elif k == "tool.result":
            name, args = calls.get(p["call_id"], (p["name"], ""))
            status = "ok" if p["ok"] else "error"
            out = p.get("output") if p["ok"] else (p.get("error") or p.get("output"))
            new["Completed actions"].append(
                f"- {name}({_one_line(args, 100)}) -> {status}: {_one_line(out or '', 140)} (#{e.seq})")
        elif k == "memory.written":
            new["Decisions and why"].append(f"- remembered {p['key']}: {_one_line(p['text'], 160)} (#{e.seq})")
        elif k == "memory.deleted":
            new["Decisions and why"].append(f"- forgot {p['key']} (#{e.seq})")
        elif k == "operator.note":
            what = f"standing directive #{e.seq}" if p.get("pin") else "note"
            new["Operator directives"].append(f"- {what} from {p['by']}: {_one_line(p['text'])} (#{e.seq})")
        elif k == "directive.unpinned":
            new["Operator directives"].append(
                f"- directive #{p['directive_id']} withdrawn by {p['by']} (#{e.seq})")
        elif k == "alert.acked":
            note = f": {_one_line(p['note'], 160)}" if p.get("note") else ""
            new["Operator directives"].append(f"- alert #{p['alert_id']} acked by {p['by']}{note} (#{e.seq})")
        elif k == "knowledge.changed":
            new["Operator directives"].append(f"- knowledge file {p['name']} {p['change']} (#{e.seq})")
        elif k == "alert.raised":
            titles[p["alert_id"]] = p["title"]
            new["Completed actions"].append(
                f"- alert #{p['alert_id']} raised by {p['raised_by']}: {_one_line(p['title'], 120)} (#{e.seq})")
        elif k == "alert.resolved":
            new["Completed actions"].append(f"- alert #{p['alert_id']} resolved (#{e.seq})")
        elif k == "tick.failed":
            new["Open problems"].append(f"- tick {e.tick} failed: {_one_line(p['reason'], 160)} (#{e.seq})")
        elif k == "policy.blocked":
            new["Open problems"].append(f"- policy blocked {p['name']}: {p['rule']} (#{e.seq})")

    mandatory = [
        "- Owned instances: " + (", ".join(str(i) for i in owned_instance_ids) or "none"),
        "- Open alerts: " + (", ".join(f"alert #{a}" + (f" ({_one_line(titles[a], 60)})" if a in titles else "")
                                      for a in open_alert_ids) or "none"),
    ]
    if latest_obs is not None:
        obs = render_observation(latest_obs.tick, latest_obs.ts, latest_obs.payload["observation"])
        mandatory.append(f"- Latest observation (#{latest_obs.seq}): " + _one_line(" · ".join(obs.splitlines()[:3])))

    def compose(chosen: dict[str, list[str]]) -> str:
        blocks = ["## Fleet state and commitments", *mandatory]
        for t in SECTION_TITLES[1:]:
            blocks.append(f"## {t}")
            blocks.extend(chosen[t] or ["- none recorded"])
        return "\n".join(blocks)

    # Newest lines are worth most; directives and problems before decisions and actions.
    priority = ("Operator directives", "Open problems", "Decisions and why", "Completed actions")
    pool = {t: old[t] + new[t] for t in SECTION_TITLES}
    chosen: dict[str, list[str]] = {t: [] for t in SECTION_TITLES}
    lines = {t: [ln for ln in pool[t] if ln.strip() != "- none recorded"] for t in priority}
    used = _count(tok_key, compose(chosen))
    # First pass: a fair share per section; second pass: what is left, in priority order.
    for second in (False, True):
        for i, t in enumerate(priority):
            share = cap - used if second else (cap - used) // (len(priority) - i)
            spent = 0
            while len(chosen[t]) < len(lines[t]):
                ln = lines[t][-1 - len(chosen[t])]
                n = _count(tok_key, ln) + 1
                if spent + n > share:
                    break
                chosen[t].insert(0, ln)
                spent += n
            used += spent
    text = compose(chosen)
    while _count(tok_key, text) > cap and any(chosen[t] for t in priority):
        for t in reversed(priority):
            if chosen[t]:
                chosen[t].pop(0)
                break
        text = compose(chosen)
    return text


# ------------------------------------------------------------------ compaction


def _attempt_llm(summarizer: Any, messages: list[dict[str, Any]]) -> tuple[str | None, str | None]:
    """(summary text, failure reason) from one summariser call."""
    from agent.llm import LLMError

    try:
        reply = summarizer.complete(messages, [])
    except LLMError as e:
        return None, f"llm error: {e.kind}"
    except Exception as e:  # noqa: BLE001 - any summariser failure must end in the fallback, never block a tick
        return None, f"summariser failed: {type(e).__name__}"
    text = (getattr(reply, "text", "") or "").strip()
    return text, None


def compact(log: EventLog, prompts: Prompts, settings: Any, *, policy: dict[str, Any], tools: list[dict[str, Any]],
            summarizer: Any | None, tick: int | None, open_alert_ids: list[int], owned_instance_ids: list[int],
            model_name: str = "", force: bool = False) -> Event | None:
    """Compact when the projected request passes high water (or always, with ``force``).
    Returns the appended ``context.compacted`` event, or None when nothing was done."""
    v = view(log, prompts, settings, policy=policy, tools=tools)
    before: Projection = finish(v, settings, model=model_name, tools=tools, prompts=prompts, policy=policy)
    if not force and not needs_compaction(before, settings):
        return None
    cut = choose_cut(v, settings)
    if cut is None:
        logger.warning("context.compaction_skipped", reason="no tick boundary to cut at", tokens=before.tokens)
        return None
    prev = v.compaction.payload if v.compaction else None
    evicted = [e for e in v.events if e.seq < cut.first_kept_seq]
    cap = settings.summary_max_tokens
    alerts = sorted(set(open_alert_ids))
    owned = sorted(set(owned_instance_ids))
    prev_summary = prev["summary"] if prev else ""
    sys_text = render_summarize(prompts, cap)
    head = [
        f"Previous summary (covers #{prev.get('covered_from') or 1}–#{prev['covered_to']}):\n{prev_summary}"
        if prev else "There is no previous summary.",
        "Open alerts to mention: " + (", ".join(f"alert #{a}" for a in alerts) or "none"),
        "Instances the agent owns, to mention: " + (", ".join(str(i) for i in owned) or "none"),
        f"Events #{v.covered_to + 1}–#{cut.first_kept_seq - 1} to fold into the summary:",
    ]
    head_text = "\n\n".join(head)
    room = (settings.budget_tokens - settings.output_reserve - cap - _count(v.tok_key, sys_text)
            - _count(v.tok_key, head_text) - 64)
    body = head_text + "\n" + _fit_transcript(transcript(evicted), max(256, room), v.tok_key)
    messages = [{"role": "system", "content": sys_text}, {"role": "user", "content": body}]
    attempts: list[dict[str, Any]] = []
    summary: str | None = None
    method = "fallback"
    if summarizer is not None:
        for _ in range(2):
            text, err = _attempt_llm(summarizer, messages)
            reason = err or check_summary(text or "", cap=cap, tok_key=v.tok_key, open_alert_ids=alerts,
                                          owned_instance_ids=owned)
            attempts.append({"method": "llm", "ok": reason is None, "reason": reason or "accepted"})
            if reason is None:
                summary, method = text, "llm"
                break
            if text:
                messages = [*messages[:2], {"role": "assistant", "content": text},
                            {"role": "user", "content": f"That summary was rejected: {reason}. "
                             "Write it again, following the rules."}]
    if summary is None:
        summary = fallback_summary(prev_summary, evicted, cap=cap, tok_key=v.tok_key, open_alert_ids=alerts,
                                   owned_instance_ids=owned)
        attempts.append({"method": "fallback", "ok": True,
                         "reason": "no summariser" if summarizer is None else "llm summary rejected or failed"})
    covered_to = cut.first_kept_seq - 1
    payload: dict[str, Any] = {
        "summary": summary,
        "covered_from": (prev.get("covered_from") or 1) if prev else 1,
        "covered_to": covered_to,
        "first_kept_seq": cut.first_kept_seq,
        "tokens_before": before.tokens,
        "tokens_after": 0,
        "method": method,
        "model": model_name if method == "llm" else None,
        "prompt_hash": prompts.hashes.get("summarize.md", ""),
        "pinned": cut.pinned,
        "attempts": attempts,
    }
    after = View(end=v.end, compaction=None, covered_to=covered_to, system=v.system,
                 pinned_text=render_pinned(cut.pinned, covered_to, settings, v.tok_key),
                 summary_text=render_summary(payload, settings, v.tok_key),
                 events=[], thread=build_thread([e for e in v.events if e.seq > covered_to], settings, v.tok_key),
                 tools_tokens=v.tools_tokens, calibration=v.calibration, tok_key=v.tok_key)
    payload["tokens_after"] = after.fixed_tokens() + after.thread_tokens()
    event = log.append("context.compacted", payload, "system", tick)
    logger.info("context.compacted", seq=event.seq, covered_to=covered_to, method=method,
                tokens_before=before.tokens, tokens_after=payload["tokens_after"],
                attempts=len(attempts), fits_low_water=cut.fits_low_water)
    return event


def compact_for_overflow(log: EventLog, prompts: Prompts, settings: Any, *, policy: dict[str, Any],
                         tools: list[dict[str, Any]], summarizer: Any | None, tick: int | None,
                         open_alert_ids: list[int], owned_instance_ids: list[int],
                         model_name: str = "") -> Event | None:
    """The provider said the context is too long: compact now (even below high water), once;
    the caller projects again and retries the request once."""
    return compact(log, prompts, settings, policy=policy, tools=tools, summarizer=summarizer, tick=tick,
                   open_alert_ids=open_alert_ids, owned_instance_ids=owned_instance_ids, model_name=model_name,
                   force=True)
