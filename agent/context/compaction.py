"""Compaction: fold the oldest span of the thread into the rolling summary.

When the projected request passes the high-water mark, the thread is cut at a
tick boundary (never between a tool call and its result, never past the newest
event of a request the model answered, so nothing it has not seen is evicted) so the kept part, with the system prompt, the pinned block and a
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
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from agent import logsetup
from agent.config import ContextSettings
from agent.context import (
    MARKER_COST,
    PINNED_KINDS,
    Inputs,
    Meter,
    Projection,
    ProjectionCache,
    View,
    assemble,
    budget_fields,
    empty_pinned,
    fold_pinned,
    load,
    make_view,
    meter_for,
    model_params,
    needs_compaction,
    params_hash,
    render_pinned,
    request_hash,
    sha256_text,
    tools_hash,
)
from agent.context.facts import fold_facts
from agent.context.inputs import record_inputs
from agent.context.pinned import current as pinned_current
from agent.context.prompts import Prompts, render_summarize
from agent.context.seen import seen_to
from agent.context.shares import low_target
from agent.context.thread import build_thread, maskable
from agent.events import KINDS, Event, data, fence, inline, render, render_observation
from agent.events.canonical import canonical
from agent.store.log import EventLog
from agent.tokens import MESSAGE_OVERHEAD

logger = logsetup.get_logger(__name__)

SECTION_TITLES = (
    "Fleet state and commitments",
    "Decisions and why",
    "Open problems",
    "Operator directives",
    "Completed actions",
)
SUMMARY_HEADER_COST = 40   # tokens of the "[summary of #A–#B]" line around the summary
LINE_CHARS = 240           # longest single line the fallback summary quotes from an event


class Summarizer(Protocol):
    """A chat model that can write the summary (the tick's provider, when it can summarise)."""

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any: ...


@dataclass(frozen=True)
class Cut:
    first_kept_seq: int
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


def cut_candidates(v: View) -> list[int]:
    """Where a cut may fall: tick boundaries up to the newest event the model has seen (in a request
    it answered), then, as a last resort, just past that event; never inside the newest tick. Nothing
    the model has not seen is ever evicted, so unseen operator feedback wins over older, seen context."""
    ticks = [e.seq for e in v.events if e.kind == "tick.started"]
    limit = seen_to(v.events, v.covered_to) + 1
    if ticks:
        limit = min(limit, ticks[-1])   # never inside the newest tick: its observation stays
    out = [c for c in ticks if c <= limit]
    if limit > v.covered_to + 1 and (not out or out[-1] != limit):
        out.append(limit)
    return out


def choose_cut(v: View, settings: ContextSettings, sizes: dict[int, int] | None = None,
               pinned_version: int | None = None, shares: bool = True) -> Cut | None:
    """The earliest allowed boundary whose kept thread fits under low water (else the latest valid one);
    ``sizes``: tool results' tokens once masked, when the compaction masks old outputs; ``pinned_version``:
    the rendering of the pinned block the request was planned with (an older one when replaying; None: the
    current one);
    ``shares``: low water is a share of the room the fixed blocks leave (agent.context.shares), not of the
    whole budget (as summary requests before v2 were planned, and as a forced compaction still cuts: the
    provider refused the request, so it sheds all it can)."""
    sizes = sizes or {}
    ticks = cut_candidates(v)
    spans = _call_spans(v.events)
    base = (v.compaction.payload.get("pinned") if v.compaction else None) or empty_pinned()
    # system, summary and pinned messages, each with its overhead
    fixed = (3 * MESSAGE_OVERHEAD + v.meter.count(v.system) + v.tools_tokens + settings.summary_max_tokens
             + SUMMARY_HEADER_COST + settings.facts_max_tokens)
    target = settings.low_water * settings.budget_tokens
    best: Cut | None = None
    for c in ticks:
        if not any(e.seq < c for e in v.thread):
            continue
        if any(r < c <= t for r, t in spans):
            continue  # would split a tool call from its result
        pinned = fold_pinned(base, (e for e in v.events if e.seq < c and e.kind in PINNED_KINDS))
        ptext = render_pinned(pinned, c - 1, settings, v.meter, pinned_version)
        kept = sum(sizes.get(e.seq, e.tokens) if e.kind == "tool.result" else e.tokens
                   for e in v.thread if e.seq >= c)
        ptokens = v.meter.text_message(ptext) if ptext else 0
        total = fixed + kept + ptokens
        if shares:
            target = low_target(settings, fixed + ptokens)
        ok = v.calibration.calibrated(total) <= target
        best = Cut(c, pinned, ok)
        if ok:
            return best
    return best


# ------------------------------------------------------------------ the evicted span as text


def _one_line(text: str, n: int = LINE_CHARS) -> str:
    t = " ".join((text or "").split())
    return t if len(t) <= n else t[: n - 1] + "…"


def _transcript_line(e: Event) -> str | None:
    """One event of the evicted span as the summariser reads it. Text the model, vast.ai or a tool wrote
    (the assistant's words, call names and arguments, policy details, alert titles) is written ``inline``:
    it cannot start a line, spell a source tag or open a fence; rendered messages are already escaped."""
    p = e.payload
    if e.kind == "model.response":
        parts = [f"[assistant] {inline(p.get('text') or '')}".rstrip()]
        parts.extend(f"→ call {inline(c['name'])}({inline(c['arguments'])}) id={inline(c['id'])}"
                     for c in p.get("tool_calls") or [])
        return "\n".join(parts)
    if e.kind == "policy.blocked":
        return f"[policy blocked {inline(p['name'])}] {inline(p['rule'])} {inline(p.get('detail', ''))}".rstrip()
    if e.kind == "alert.raised" and p.get("raised_by") == "model":
        return f"[alert #{p['alert_id']} raised · model] {inline(p['severity'])}: {inline(p['title'])}"
    if e.kind == "model.failed":
        return f"[model call failed] {inline(p['error_kind'])}"
    msg = render(e)
    if msg is not None and msg.get("content"):
        return str(msg["content"])
    return None


def transcript(events: list[Event]) -> list[tuple[int, str]]:
    """(seq, text) for every event worth summarising, from the full payloads."""
    out = []
    for e in events:
        line = _transcript_line(e)
        if line is not None:
            out.append((e.seq, line))
    return out


_FENCE_LINE = re.compile(r"^(`{3,})[A-Za-z]*$")


def _close_fence(text: str) -> str:
    """``text`` with the closing line of a fence it opened and a cut left open."""
    width = 0
    for line in text.split("\n"):
        m = _FENCE_LINE.match(line)
        if width == 0 and m is not None:
            width = len(m.group(1))
        elif width and set(line) == {"`"} and len(line) >= width:
            width = 0
    return f"{text}\n{'`' * width}" if width else text


def _fit_transcript(lines: list[tuple[int, str]], budget: int, meter: Meter) -> str:
    sizes = [meter.count(t) for _, t in lines]
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
            kept, _, full = meter.cut(text, cap)
            text = f"{_close_fence(kept)}\n[... {full - cap} more tokens in event #{seq}]"
        parts.append(f"#{seq} {text}")
    return "\n".join(parts)


# ------------------------------------------------------------------ checking a summary


@dataclass(frozen=True)
class MustMention:
    """What a summary has to name: open alerts, owned instances, pinned directives (by their #id) and the
    operator inputs it folds (notes, acks, unpins, by their #seq). With ``claims`` (summary requests from
    v2) also what it may not get wrong: the overrides and pause (by #id) and excluded hosts and machines (by
    number) in force, no statement that none of those exist when they do, every line of its operator
    section citing an operator input it was given (``known``), and the numbers it quotes (instance count,
    balance, $/h) being ones the log shows (``counts``, ``balances``, ``rates``)."""

    alerts: tuple[int, ...] = ()
    instances: tuple[int, ...] = ()
    directives: tuple[int, ...] = ()
    operator: tuple[int, ...] = ()
    claims: bool = False
    overrides: tuple[int, ...] = ()
    hosts: tuple[int, ...] = ()
    machines: tuple[int, ...] = ()
    known: tuple[int, ...] = ()
    counts: tuple[int, ...] = ()
    balances: tuple[float, ...] = ()
    rates: tuple[float, ...] = ()
    keep: bool = False   # from v3 the request also names the inputs cited before, which the check holds it to

    @property
    def cited_before(self) -> tuple[int, ...]:
        """Inputs the check holds the operator section to that the request names nowhere else: those the
        previous summary cites and the pinned block's, not folded now."""
        named = set(self.directives) | set(self.operator) | set(self.overrides)
        return tuple(n for n in self.known if n not in named)


# Up to this many owned instances a summary names each; beyond, their count (eight-digit ids of a large
# fleet would take more than the summary's cap: 500 ids are about 2,500 tokens).
NAMED_INSTANCES_MAX = 20


def _counted(text: str, n: int) -> bool:
    """Whether a line of ``text`` gives ``n`` as the number of instances."""
    return any(re.search(rf"(?<![\d.]){n}(?![\d.])", ln) and re.search(r"instance", ln, flags=re.IGNORECASE)
               for ln in text.splitlines())


def _owned_text(owned: list[int]) -> str:
    """The owned instances as a summary carries them: each id, or for a large fleet the count and range."""
    if not owned:
        return "none"
    if len(owned) <= NAMED_INSTANCES_MAX:
        return ", ".join(str(i) for i in owned)
    return f"{len(owned)} instances (ids {min(owned)}–{max(owned)})"


def _missing(text: str, must: MustMention) -> list[str]:
    def cited(n: int) -> bool:
        return re.search(rf"#{n}(?!\d)", text) is not None

    out = []
    alerts = [a for a in must.alerts if not re.search(rf"(?:#|alert\s+)#?{a}(?!\d)", text, flags=re.IGNORECASE)]
    if alerts:
        out.append("missing open alerts " + ", ".join(f"#{a}" for a in alerts))
    if len(must.instances) > NAMED_INSTANCES_MAX:
        if not _counted(text, len(must.instances)):
            out.append(f"missing the count of owned instances: write '{len(must.instances)} instances' "
                       "(grouped by GPU model; ids only for those with problems)")
    else:
        insts = [i for i in must.instances if not re.search(rf"(?<!\d){i}(?!\d)", text)]
        if insts:
            out.append("missing owned instances " + ", ".join(str(i) for i in insts))
    directives = [d for d in must.directives if not cited(d)]
    if directives:
        out.append("missing pinned directives " + ", ".join(f"#{d}" for d in directives))
    operator = [o for o in must.operator if not cited(o)]
    if operator:
        out.append("missing operator inputs " + ", ".join(f"#{o}" for o in operator))
    return out


_NONE = r"(?:none|nothing|n/a|no(?:ne)? (?:given|recorded|active|in force|issued))"
# (what exists, statements saying it does not)
_NEGATIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("directives", (r"\bno (?:standing |active |pinned |operator |current )*(?:directives?|orders?|instructions?)\b",
                    r"\bdirectives? (?:were|was|have been|has been) (?:never |not )(?:given|issued|set)",
                    rf"\b(?:operator |standing |pinned )?directives?\s*[:=-]\s*{_NONE}\b")),
    ("overrides", (r"\bno (?:policy |active |operator )*overrides?\b",
                   rf"\boverrides?\s*[:=-]\s*{_NONE}\b")),
    ("alerts", (r"\bno (?:open |active |outstanding )*alerts?\b", rf"\b(?:open )?alerts?\s*[:=-]\s*{_NONE}\b")),
    ("instances", (r"\bno (?:owned |running |active )*instances?\b", r"\bowns? no instances?\b",
                   rf"\b(?:owned )?instances?\s*[:=-]\s*{_NONE}\b")),
)
_NONE_WORDS = {"none", "nothing", "n/a", "no", "recorded", "given", "active", "in", "force", "issued", "standing",
               "inputs", "input", "directives", "directive", "operator", "pinned", "notes", "yet", "so", "far"}


def _says_none(line: str) -> bool:
    """Whether an operator-section line only says there is nothing ("- none", "standing: none; inputs: none")."""
    words = re.findall(r"[a-z/]+", line.lower())
    return "#" not in line and bool(words) and set(words) <= _NONE_WORDS and bool({"none", "nothing", "n/a", "no"} & set(words))
_COUNT = re.compile(r"(?<![\d.#$])(\d+)\s+(?:[\w-]+\s+){0,2}instances?\b", flags=re.IGNORECASE)
_BALANCE = re.compile(r"balance\D{0,12}?(-?\d[\d,]*(?:\.\d+)?)", flags=re.IGNORECASE)
_RATE = re.compile(r"\$\s*(\d[\d,]*(?:\.\d+)?)\s*(?:/\s*h(?:our|r)?\b|per hour)|(\d[\d,]*(?:\.\d+)?)\s*(?:\$/h|dph)\b",
                   flags=re.IGNORECASE)


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def _near(x: float, seen: tuple[float, ...], rel: float) -> bool:
    return any(abs(x - y) <= max(0.01, rel * abs(y)) for y in seen)


def _negations(text: str, must: MustMention) -> list[str]:
    """Statements that something does not exist when the log says it does."""
    exists = {"directives": must.directives, "overrides": must.overrides, "alerts": must.alerts,
              "instances": must.instances}
    out = []
    for what, patterns in _NEGATIONS:
        if not exists[what]:
            continue
        for pat in patterns:
            m = re.search(pat, text, flags=re.IGNORECASE)
            if m:
                out.append(f"it says '{m.group(0)}' but {len(exists[what])} {what} are in force or open")
                break
    return out


def _unsourced(text: str, must: MustMention) -> list[str]:
    """Lines of the operator section that cite no operator input: orders nobody gave ("Rent nothing ever
    again"), or "none" while there are some."""
    known = set(must.known) | set(must.directives) | set(must.operator) | set(must.overrides)
    out = []
    for line in _sections_of(text)["Operator directives"]:
        if _says_none(line):
            if known:
                out.append(f"the operator section says '{line.strip()}' but operator inputs "
                           + ", ".join(f"#{n}" for n in sorted(known)[:8]) + " exist")
            continue
        cited = {int(n) for n in re.findall(r"#(\d+)", line)}
        if not cited & known:
            out.append(f"the operator section line '{_one_line(line, 80)}' cites no operator input (cite its #number;"
                       " do not state orders no operator gave)")
    return out


def _wrong_numbers(text: str, must: MustMention) -> list[str]:
    """Numbers the summary quotes that the log does not show: the instance count in its fleet section, a
    balance, a spend rate."""
    out = []
    if must.counts:
        for ln in _sections_of(text)["Fleet state and commitments"]:
            found = [int(n) for n in _COUNT.findall(ln)]
            if found and not (set(found) & set(must.counts) or sum(found) in must.counts):
                out.append(f"it gives {'/'.join(map(str, found))} instances; the log shows "
                           + " or ".join(str(c) for c in sorted(set(must.counts))[:4]))
    if must.balances:
        for m in _BALANCE.finditer(text):
            if not _near(_num(m.group(1)), must.balances, 0.005):
                out.append(f"it gives a balance of {m.group(1)}; the observations show "
                           + ", ".join(f"{b:.2f}" for b in must.balances[-3:]))
    if must.rates:
        for m in _RATE.finditer(text):
            x = _num(m.group(1) or m.group(2))
            if not _near(x, must.rates, 0.02):
                out.append(f"it gives a spend of ${x:g}/h; the observations show "
                           + ", ".join(f"${r:.2f}/h" for r in must.rates[-3:]))
    return out


def _untrue(text: str, must: MustMention) -> list[str]:
    """What the summary gets wrong against the log (summary requests from v2)."""
    out = []
    overrides = [o for o in must.overrides if not re.search(rf"#{o}(?!\d)", text)]
    if overrides:
        out.append("missing overrides and pauses in force " + ", ".join(f"#{o}" for o in overrides))
    for what, ids in (("hosts", must.hosts), ("machines", must.machines)):
        gone = [i for i in ids if not re.search(rf"(?<!\d){i}(?!\d)", text)]
        if gone:
            out.append(f"missing excluded {what} " + ", ".join(str(i) for i in gone))
    return out + _negations(text, must) + _unsourced(text, must) + _wrong_numbers(text, must)


def _empty_sections(text: str) -> list[str]:
    """The required sections that are absent or hold no line of content."""
    found = _sections_of(text)
    heads = {ln[3:].strip() for ln in text.splitlines() if ln.startswith("## ")}
    return [t for t in SECTION_TITLES if t not in heads or not found[t]]


def _norm(line: str) -> str:
    return " ".join(line.strip().lstrip("-*").split()).lower()


ECHO_SHARE = 0.5   # a summary whose content lines are at least this share of the prompt's own is an echo


def is_echo(text: str, prompt: str) -> bool:
    """Whether ``text`` repeats the instructions it was given instead of summarising: most of its content
    lines (headings aside) are lines of ``prompt``, or it holds the prompt's longest line."""
    if not prompt:
        return False
    plines = {_norm(ln) for ln in prompt.splitlines() if len(_norm(ln)) >= 12 and not ln.startswith("## ")}
    lines = [_norm(ln) for ln in text.splitlines() if _norm(ln) and not ln.startswith("## ")]
    if not lines or not plines:
        return False
    copied = sum(1 for ln in lines if ln in plines)
    longest = max(plines, key=len)
    return copied / len(lines) >= ECHO_SHARE or (len(longest) >= 40 and longest in _norm(text))


def check_summary(text: str, *, cap: int, meter: Meter, open_alert_ids: list[int],
                  owned_instance_ids: list[int], must: MustMention | None = None, prompt: str = "") -> str | None:
    """Why ``text`` is not an acceptable summary, or None when it is: it must be within the cap, carry every
    required section with content, name every open alert, owned instance, pinned directive and operator
    input it folds, and not echo ``prompt`` (the instructions it was given). With ``must.claims`` it must also
    be true to the log as far as code can tell (``_untrue``): overrides and exclusions named, nothing in
    force denied, no order without its source, no number the log does not show."""
    if not text.strip():
        return "empty summary"
    if is_echo(text, prompt):
        return "the summary repeats the instructions instead of summarising"
    n = meter.count(text)
    if n > cap:
        return f"summary has {n} tokens, over the cap of {cap}"
    must = must or MustMention()
    must = replace(must, alerts=tuple(open_alert_ids), instances=tuple(owned_instance_ids))
    reasons = []
    empty = _empty_sections(text)
    if empty:
        reasons.append("sections missing or empty: " + ", ".join(empty))
    reasons += _missing(text, must)
    if must.claims:
        reasons += _untrue(text, must)
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


@dataclass
class _Digest:
    """What the fallback summary gathers from the evicted events."""

    lines: dict[str, list[str]]
    calls: dict[str, tuple[str, str]]
    titles: dict[int, str]
    latest_obs: Event | None = None

    def add(self, section: str, line: str) -> None:
        self.lines[section].append(line)


def _on_response(d: _Digest, e: Event) -> None:
    p = e.payload
    for c in p.get("tool_calls") or []:
        d.calls[c["id"]] = (c["name"], c["arguments"])
    if (p.get("text") or "").strip():
        d.add("Decisions and why", f"- {_one_line(p['text'])} (#{e.seq})")


def _on_result(d: _Digest, e: Event) -> None:
    p = e.payload
    name, args = d.calls.get(p["call_id"], (p["name"], ""))
    status = "ok" if p["ok"] else "error"
    out = p.get("output") if p["ok"] else (p.get("error") or p.get("output"))
    d.add("Completed actions", f"- {name}({_one_line(args, 100)}) -> {status}: {_one_line(out or '', 140)} (#{e.seq})")


def _on_note(d: _Digest, e: Event) -> None:
    p = e.payload
    what = f"standing directive #{e.seq}" if p.get("pin") else "note"
    d.add("Operator directives", f"- {what} from {p['by']}: {_one_line(p['text'])} (#{e.seq})")


def _on_ack(d: _Digest, e: Event) -> None:
    p = e.payload
    note = f": {_one_line(p['note'], 160)}" if p.get("note") else ""
    d.add("Operator directives", f"- alert #{p['alert_id']} acked by {p['by']}{note} (#{e.seq})")


def _on_alert(d: _Digest, e: Event) -> None:
    p = e.payload
    d.titles[p["alert_id"]] = p["title"]
    d.add("Completed actions",
          f"- alert #{p['alert_id']} raised by {p['raised_by']}: {_one_line(p['title'], 120)} (#{e.seq})")


def _on_tick(d: _Digest, e: Event) -> None:
    d.latest_obs = e


Rule = Callable[[_Digest, Event], None]


def _simple(section: str, fmt: Callable[[Event], str]) -> Rule:
    """A digest rule adding one line ``fmt(event)`` to ``section``."""
    def rule(d: _Digest, e: Event) -> None:
        d.add(section, fmt(e) + f" (#{e.seq})")
    return rule


def _ends(p: dict[str, Any], open_ended: str) -> str:
    until = p.get("until")
    return f"until {str(until)[:16].replace('T', ' ')} UTC" if until else open_ended


def _steer(fmt: Callable[[dict[str, Any], Event], str]) -> Rule:
    """A digest rule for operator steering (overrides, pauses, exclusions, config changes, accepted
    constraints): one line in the operator section, so a fallback summary keeps what binds."""
    return _simple("Operator directives", lambda e: fmt(e.payload, e))


def _value_text(v: Any) -> str:
    return ", ".join(str(x) for x in v) if isinstance(v, list) else str(v)


def _on_config_changed(d: _Digest, e: Event) -> None:
    for c in e.payload.get("changes") or []:
        d.add("Operator directives", f"- config change: {c.get('key')} {_value_text(c.get('old'))} -> "
              f"{_value_text(c.get('new'))} (#{e.seq})")


_STEERING_RULES: dict[str, Rule] = {
    "policy.overridden": _steer(lambda p, e: f"- policy override #{e.seq} by {p['by']}: {p['key']} "
                                f"{_value_text(p['value'])} {_ends(p, 'until reset')} ({_one_line(p['reason'], 120)})"),
    "policy.override_ended": _steer(lambda p, e: f"- policy override #{p['override_id']} of {p['key']} ended "
                                    f"({p['how']}, by {p['by']})"),
    "fleet.paused": _steer(lambda p, e: f"- fleet paused (#{e.seq}) by {p['by']} {_ends(p, 'until resumed')}: "
                           f"{_one_line(p['reason'], 120)}"),
    "fleet.resumed": _steer(lambda p, e: f"- pause #{p['pause_id']} ended ({p['how']}, by {p['by']})"),
    "host.excluded": _steer(lambda p, e: f"- host {p['host_id']} excluded by {p['by']} ({p['source']}) "
                            f"{_ends(p, 'until included')}: {_one_line(p['reason'], 120)}"),
    "host.included": _steer(lambda p, e: f"- host {p['host_id']} included again ({p['how']}, by {p['by']})"),
    "constraint.accepted": _steer(lambda p, e: f"- constraint #{p['proposal_id']} accepted by {p['by']}: "
                                  f"{p['constraint']} {_value_text(p['value'])} {_ends(p, 'until ended')}"),
    "config.changed": _on_config_changed,
}


_RULES: dict[str, Rule] = {
    "tick.started": _on_tick,
    "model.response": _on_response,
    "tool.result": _on_result,
    "memory.written": _simple("Decisions and why",
                              lambda e: f"- remembered {e.payload['key']}: {_one_line(e.payload['text'], 160)}"),
    "memory.deleted": _simple("Decisions and why", lambda e: f"- forgot {e.payload['key']}"),
    "operator.note": _on_note,
    "directive.unpinned": _simple("Operator directives", lambda e: f"- directive #{e.payload['directive_id']} "
                                  f"withdrawn by {e.payload['by']}"),
    "alert.acked": _on_ack,
    "knowledge.changed": _simple("Operator directives",
                                 lambda e: f"- knowledge file {e.payload['name']} {e.payload['change']}"),
    "alert.raised": _on_alert,
    "alert.resolved": _simple("Completed actions", lambda e: f"- alert #{e.payload['alert_id']} resolved"),
    "tick.failed": _simple("Open problems", lambda e: f"- tick {e.tick} failed: {_one_line(e.payload['reason'], 160)}"),
    "policy.blocked": _simple("Open problems",
                              lambda e: f"- policy blocked {e.payload['name']}: {e.payload['rule']}"),
    **_STEERING_RULES,
}


def _digest(events: list[Event]) -> _Digest:
    d = _Digest({t: [] for t in SECTION_TITLES}, {}, {})
    for e in events:
        rule = _RULES.get(e.kind)
        if rule is not None:
            rule(d, e)
    return d


def _mandatory(d: _Digest, open_alert_ids: list[int], owned_instance_ids: list[int]) -> list[str]:
    """The lines every summary carries: owned instances, open alerts, the latest observation."""
    alerts = ", ".join(f"alert #{a}" + (f" ({_one_line(d.titles[a], 60)})" if a in d.titles else "")
                       for a in open_alert_ids)
    out = ["- Owned instances: " + _owned_text(owned_instance_ids),
           "- Open alerts: " + (alerts or "none")]
    if d.latest_obs is not None:
        o = d.latest_obs
        obs = render_observation(o.tick, o.ts, o.payload["observation"])
        out.append(f"- Latest observation (#{o.seq}): " + _one_line(" · ".join(obs.splitlines()[:3])))
    return out


def _compose(mandatory: list[str], chosen: dict[str, list[str]]) -> str:
    blocks = ["## Fleet state and commitments", *mandatory]
    for t in SECTION_TITLES[1:]:
        blocks.append(f"## {t}")
        blocks.extend(chosen[t] or ["- none recorded"])
    return "\n".join(blocks)


# Newest lines are worth most; directives and problems before decisions and actions.
PRIORITY = ("Operator directives", "Open problems", "Decisions and why", "Completed actions")


def _take_newest(chosen: list[str], lines: list[str], share: int, meter: Meter) -> int:
    """Prepend the newest of ``lines`` not yet in ``chosen`` while they fit ``share``; the tokens spent."""
    spent = 0
    while len(chosen) < len(lines):
        ln = lines[-1 - len(chosen)]
        n = meter.count(ln) + 1
        if spent + n > share:
            break
        chosen.insert(0, ln)
        spent += n
    return spent


def _choose(lines: dict[str, list[str]], used: int, cap: int, meter: Meter) -> dict[str, list[str]]:
    """First pass: a fair share per section; second pass: what is left, in priority order."""
    chosen: dict[str, list[str]] = {t: [] for t in SECTION_TITLES}
    for second in (False, True):
        for i, t in enumerate(PRIORITY):
            share = cap - used if second else (cap - used) // (len(PRIORITY) - i)
            used += _take_newest(chosen[t], lines[t], share, meter)
    return chosen


def _trim(mandatory: list[str], chosen: dict[str, list[str]], cap: int, meter: Meter) -> str:
    """Drop the oldest lowest-priority lines until the text fits ``cap``."""
    text = _compose(mandatory, chosen)
    while meter.count(text) > cap and any(chosen[t] for t in PRIORITY):
        t = next(t for t in reversed(PRIORITY) if chosen[t])
        chosen[t].pop(0)
        text = _compose(mandatory, chosen)
    return text


_REPEAT = re.compile(r"^- ×(\d+) ")
_SEQS = re.compile(r" \(#(\d+)(?:–#(\d+))?\)$")
_TICK = re.compile(r"\btick \d+")


def group_repeats(lines: list[str]) -> list[str]:
    """Lines that say the same thing but for their seq and tick become one, where the newest stood:
    ``- ×13 tick N: renting 0 of 4 needed (#120–#410)``. Operator lines are never grouped: each is cited
    by its number."""
    groups: dict[str, list[Any]] = {}  # text -> [count, first seq, last seq, newest index]
    for i, ln in enumerate(lines):
        m = _REPEAT.match(ln)
        n, body = (int(m.group(1)), "- " + ln[m.end():]) if m else (1, ln)
        seqs = _SEQS.search(body)
        first = last = None
        if seqs:
            first, last = int(seqs.group(1)), int(seqs.group(2) or seqs.group(1))
            body = body[:seqs.start()]
        key = _TICK.sub("tick N", body)
        g = groups.setdefault(key, [0, first, last, i])
        g[0] += n
        g[1] = first if g[1] is None else min(g[1], first or g[1])
        g[2] = last if g[2] is None else max(g[2], last or g[2])
        g[3] = i
    out: list[tuple[int, str]] = []
    for key, (n, first, last, at) in groups.items():
        if n == 1:
            out.append((at, lines[at]))
            continue
        where = f" (#{first}–#{last})" if first is not None and last != first else f" (#{first})" if first else ""
        out.append((at, f"- ×{n} {key[2:]}{where}"))
    return [ln for _, ln in sorted(out)]


def fallback_summary(previous: str, events: list[Event], *, cap: int, meter: Meter,
                     open_alert_ids: list[int], owned_instance_ids: list[int]) -> str:
    """A summary built from the events alone, in the fixed sections, within ``cap`` tokens."""
    old = _sections_of(previous)
    d = _digest(events)
    mandatory = _mandatory(d, open_alert_ids, owned_instance_ids)
    lines = {t: [ln for ln in old[t] + d.lines[t] if ln.strip() != "- none recorded"] for t in PRIORITY}
    lines = {t: ls if t == "Operator directives" else group_repeats(ls) for t, ls in lines.items()}
    used = meter.count(_compose(mandatory, {t: [] for t in SECTION_TITLES}))
    return _trim(mandatory, _choose(lines, used, cap, meter), cap, meter)


# ------------------------------------------------------------------ compaction


@dataclass
class Plan:
    """A compaction decided from the log's inputs alone: where to cut, what to mask and what to ask the
    summariser. ``cut`` is None for a masking-only compaction (old tool outputs become stubs, nothing is
    summarised and no model is called): logs hold them from before masking waited for a summary, and
    ``compaction_payload`` still writes one for such a plan, but ``plan`` no longer makes them."""

    view: View
    before: Projection
    cut: Cut | None
    evicted: list[Event]
    previous: dict[str, Any] | None
    messages: list[dict[str, Any]]
    alerts: list[int]
    owned: list[int]
    must: MustMention = MustMention()
    prompt: str = ""                                          # the instructions (an echo of them is rejected)
    tools: list[dict[str, Any]] = field(default_factory=list)  # sent with the summariser's request
    masked_to: int | None = None
    continuation: bool = False   # the request is the agent's own request plus one instruction

    @property
    def previous_summary(self) -> str:
        return self.previous["summary"] if self.previous else ""

    @property
    def covered_to(self) -> int:
        return self.cut.first_kept_seq - 1 if self.cut is not None else self.view.covered_to


def _to_mention(alerts: list[int], owned: list[int], must: MustMention, evicted: list[Event]) -> list[str]:
    ops = {e.seq: e for e in evicted if e.seq in must.operator}
    return [
        "Open alerts to mention: " + (", ".join(f"alert #{a}" for a in alerts) or "none"),
        "Instances the agent owns, to mention: " + (_owned_text(owned) if len(owned) <= NAMED_INSTANCES_MAX else
                                                    f"{_owned_text(owned)}; write '{len(owned)} instances' "
                                                    "grouped by GPU model, ids only for those with problems"),
        "Pinned operator directives to mention by number: " + (", ".join(f"#{d}" for d in must.directives) or "none"),
        "Operator inputs being folded, to mention by number: " + (", ".join(
            f"#{n} ({ops[n].kind} by {inline(ops[n].payload.get('by', '?'))})" for n in must.operator) or "none"),
        *(_claim_lines(must) if must.claims else []),
        *([_keep_line(must)] if must.keep else []),
    ]


def _keep_line(must: MustMention) -> str:
    """What a summary request from v3 adds: the inputs the summary cited before. Without it a summariser that
    folds a span with no operator input was told "none" while the check rejected an operator section that
    said so (500 instances: 1 summary in 37 went to the fallback)."""
    return ("Operator inputs the summary cites so far, to keep citing by number: "
            + (", ".join(f"#{n}" for n in must.cited_before) or "none"))


def _claim_lines(must: MustMention) -> list[str]:
    """What a summary request from v2 adds: the steering to name, and the rules the check enforces."""
    excluded = [f"host {h}" for h in must.hosts] + [f"machine {m}" for m in must.machines]
    return [
        "Overrides and pause in force, to mention by number: " + (", ".join(f"#{o}" for o in must.overrides)
                                                                  or "none"),
        "Excluded hosts and machines, to mention: " + (", ".join(excluded) or "none"),
        "The operator's words stay verbatim in the pinned block: in the operator section cite each input by its "
        "#number, state no order without one, and never write that none exist when they do; quote instance "
        "counts, balances and $/h only as the events give them.",
    ]


SUMMARY_VERSION = 3
"""Summary requests (``summary.request``) of this version are planned with the current pinned block, the
claim check (``MustMention.claims``, from v2) and the inputs cited before named in the request (``keep``, from
v3); older ones re-plan as they were (v1: pinned v4, no claims; v2: no such line)."""


def _observed(evicted: list[Event]) -> tuple[tuple[int, ...], tuple[float, ...], tuple[float, ...]]:
    """Instance counts, balances and $/h totals the span's observations show."""
    counts, balances, rates = [], [], []
    for e in evicted:
        if e.kind != "tick.started":
            continue
        obs = e.payload.get("observation") or {}
        insts = [i for i in obs.get("instances") or [] if isinstance(i, dict)]
        counts.append(len(insts))
        if isinstance(obs.get("balance"), int | float):
            balances.append(float(obs["balance"]))
        dph = [float(i["dph"]) for i in insts if isinstance(i.get("dph"), int | float)]
        if dph:
            rates.append(round(sum(dph), 4))
    return tuple(counts), tuple(balances), tuple(rates)


def _must(cut: Cut, evicted: list[Event], alerts: list[int], owned: list[int], previous: str,
          claims: bool, keep: bool = False) -> MustMention:
    """What the summary of ``evicted`` must name and (``claims``) may not get wrong."""
    must = MustMention(tuple(alerts), tuple(owned), tuple(int(d["id"]) for d in cut.pinned.get("directives") or []),
                       tuple(e.seq for e in evicted if e.kind in OPERATOR_INPUTS))
    if not claims:
        return must
    st = cut.pinned.get("steering") or {}
    overrides = [int(k) for k in st.get("overrides") or {}] + ([int(st["pause"]["id"])] if st.get("pause") else [])
    known = {e.seq for e in evicted if e.kind in PINNED_KINDS or e.kind in STEERING_EXTRA}
    known |= {int(w["id"]) for w in cut.pinned.get("operator") or []}
    known |= {int(h["id"]) for h in (st.get("hosts") or {}).values()}
    known |= {int(m["id"]) for m in (st.get("machines") or {}).values()}
    known |= {int(n) for ln in _sections_of(previous)["Operator directives"] for n in re.findall(r"#(\d+)", ln)}
    counts, balances, rates = _observed(evicted)
    return replace(must, claims=True, overrides=tuple(sorted(overrides)),
                   hosts=tuple(sorted(int(h) for h in st.get("hosts") or {})),
                   machines=tuple(sorted(int(m) for m in st.get("machines") or {})), known=tuple(sorted(known)),
                   counts=tuple(sorted({len(owned), *counts})), balances=balances, rates=rates, keep=keep)


STEERING_EXTRA = ("config.changed", "constraint.proposed", "constraint.rejected", "operator.drain")


def _summary_request(v: View, cut: Cut, previous: dict[str, Any] | None, evicted: list[Event], *,
                     prompts: Prompts, settings: ContextSettings, alerts: list[int], owned: list[int],
                     must: MustMention) -> list[dict[str, Any]]:
    cap = settings.summary_max_tokens
    sys_text = render_summarize(prompts, cap)
    head = [
        f"Previous summary (covers #{previous.get('covered_from') or 1}–#{previous['covered_to']}):\n"
        f"{fence(data(previous['summary']), 'summary')}" if previous else "There is no previous summary.",
        *_to_mention(alerts, owned, must, evicted),
        f"Events #{v.covered_to + 1}–#{cut.first_kept_seq - 1} to fold into the summary:",
    ]
    head_text = "\n\n".join(head)
    room = (settings.budget_tokens - settings.output_reserve - cap - v.meter.count(sys_text)
            - v.meter.count(head_text) - 64)
    body = head_text + "\n" + _fit_transcript(transcript(evicted), max(256, room), v.meter)
    return [{"role": "system", "content": sys_text}, {"role": "user", "content": body}]


CONTINUATION_HEAD = "[compaction] Stop acting for a moment and write the rolling summary."


def _where_kept(v: View, cut: Cut) -> str:
    first = next((e for e in v.events if e.seq >= cut.first_kept_seq), None)
    if first is not None and first.kind == "tick.started":
        return (f"everything above before the observation of tick {first.tick} (those messages stay in the "
                "conversation as they are)")
    return "everything above (the newest messages stay in the conversation as they are)"


def continuation_instruction(v: View, cut: Cut, evicted: list[Event], *, prompts: Prompts,
                             settings: ContextSettings, alerts: list[int], owned: list[int],
                             must: MustMention) -> str:
    """The one message appended to the agent's own request to ask for the summary: the summarise prompt,
    what to fold and what must be mentioned. Only the renderer writes it; it quotes no untrusted text."""
    return "\n\n".join([
        CONTINUATION_HEAD,
        render_summarize(prompts, settings.summary_max_tokens),
        f"Fold into one summary the previous summary (if there is one) and {_where_kept(v, cut)}; they are "
        f"events up to #{cut.first_kept_seq - 1}. Do not call any tool: answer with the summary only.",
        *_to_mention(alerts, owned, must, evicted),
    ])


def summary_input(p: Plan, *, prompts: Prompts, settings: ContextSettings) -> list[dict[str, Any]]:
    """The summariser's request of its own for ``p``: its instructions, then the previous summary and the
    evicted span as a transcript, every untrusted string escaped (used when the continuation of the agent's
    request would not fit)."""
    assert p.cut is not None
    return _summary_request(p.view, p.cut, p.previous, p.evicted, prompts=prompts, settings=settings,
                            alerts=p.alerts, owned=p.owned, must=p.must)


# ------------------------------------------------------------------ masking old tool outputs


def mask_point(v: View, settings: ContextSettings) -> int | None:
    """The seq up to which tool outputs become stubs at this compaction: everything before the newest
    ``mask_after_ticks`` ticks that the model has seen; None when that masks nothing new."""
    k = settings.mask_after_ticks
    ticks = [e.seq for e in v.events if e.kind == "tick.started"]
    if k <= 0 or len(ticks) <= k:
        return None
    m = min(ticks[-k] - 1, seen_to(v.events, v.covered_to))
    prev = v.compaction.payload.get("masked_to") if v.compaction is not None and v.compaction.version >= 3 else None
    floor = max(v.covered_to, int(prev or 0))
    if not any(e.kind == "tool.result" and floor < e.seq <= m
               and maskable(e.payload["name"], v.meter.event_tokens(e) or 0) for e in v.events):
        return None
    return m


def _masked_sizes(v: View, settings: ContextSettings, masked_to: int | None) -> dict[int, int]:
    """seq -> tokens of each thread entry once tool outputs up to ``masked_to`` are stubs."""
    thread = v.thread if masked_to is None else build_thread(v.events, settings, v.meter, masked_to)
    return {e.seq: e.tokens for e in thread if e.kind == "tool.result"}


# ------------------------------------------------------------------ the plan


def _request(v: View, before: Projection, cut: Cut, evicted: list[Event], *, prompts: Prompts,
             settings: ContextSettings, tools: list[dict[str, Any]], alerts: list[int], owned: list[int],
             must: MustMention, force: bool) -> tuple[list[dict[str, Any]], str, list[dict[str, Any]], bool]:
    """(messages, instructions, tools, continuation): the agent's request plus one instruction when that
    fits the budget with room for the summary (the provider's cache already holds all but the instruction),
    else, and always after the provider refused the request as too long (``force``), a request of its own
    with the evicted span as a transcript."""
    instruction = continuation_instruction(v, cut, evicted, prompts=prompts, settings=settings, alerts=alerts,
                                           owned=owned, must=must)
    need = v.calibration.calibrated(before.tokens + v.meter.text_message(instruction)) + settings.summary_max_tokens
    if not force and need <= settings.budget_tokens:
        return [*before.messages, {"role": "user", "content": instruction}], instruction, tools, True
    messages = _summary_request(v, cut, v.compaction.payload if v.compaction else None, evicted, prompts=prompts,
                                settings=settings, alerts=alerts, owned=owned, must=must)
    return messages, str(messages[0]["content"]), [], False


OPERATOR_INPUTS = ("operator.note", "alert.acked", "directive.unpinned")


def plan(inputs: Inputs, *, prompts: Prompts, settings: ContextSettings, policy: dict[str, Any],
         tools: list[dict[str, Any]], meter: Meter, open_alert_ids: list[int], owned_instance_ids: list[int],
         model_name: str = "", force: bool = False, version: int = SUMMARY_VERSION) -> Plan | str | None:
    """The compaction to make (pure): a Plan, None when the request is under high water (and not
    ``force``), or the reason no cut is possible. Old tool outputs are masked only together with a summary,
    and only after it: a new summary changes the request from its own place on, so every byte it is followed
    by is sent uncached anyway, and stubbing outputs there costs the prompt cache nothing. Masking alone would
    rewrite the thread in the middle of a request whose head the provider holds, for a few ticks' room.
    ``version``: that of the ``summary.request`` being planned (replay passes a logged one's)."""
    v = make_view(inputs, prompts=prompts, settings=settings, policy=policy, tools=tools, meter=meter)
    before = assemble(v, settings, model=model_name, tools=tools, prompts=prompts, policy=policy)
    if not force and not needs_compaction(before, settings):
        return None
    prev = v.compaction.payload if v.compaction else None
    alerts, owned = sorted(set(open_alert_ids)), sorted(set(owned_instance_ids))
    masked_to = mask_point(v, settings)
    sizes = _masked_sizes(v, settings, masked_to)
    # the cut is chosen on the thread as the budget check left it (shrunk, when it had to be)
    cut = choose_cut(v, settings, sizes, pinned_current() if version >= 2 else 4,
                     shares=version >= 2 and not force)
    if cut is None:
        return "no tick boundary to cut at"
    evicted = [e for e in v.events if e.seq < cut.first_kept_seq]
    must = _must(cut, evicted, alerts, owned, prev["summary"] if prev else "", version >= 2, version >= 3)
    messages, prompt, sent_tools, cont = _request(v, before, cut, evicted, prompts=prompts, settings=settings,
                                                  tools=tools, alerts=alerts, owned=owned, must=must,
                                                  force=force)
    kept_mask = masked_to if masked_to is not None and masked_to >= cut.first_kept_seq else None
    return Plan(v, before, cut, evicted, prev, messages, alerts, owned, must, prompt, sent_tools, kept_mask, cont)


def _attempt_llm(summarizer: Summarizer, messages: list[dict[str, Any]],
                 tools: list[dict[str, Any]]) -> tuple[str | None, str | None]:
    """(summary text, failure reason) from one summariser call (the model client's module loads with it:
    projecting a context, as ``context`` and replay do, loads none)."""
    from agent.model.llm import LLMError

    try:
        reply = summarizer.complete(messages, tools)
    except LLMError as e:
        return None, f"llm error: {e.kind}"
    except Exception as e:  # noqa: BLE001 - any summariser failure must end in the fallback, never block a tick
        return None, f"summariser failed: {type(e).__name__}"
    text = (getattr(reply, "text", "") or "").strip()
    return text, None


RETRY_INSTRUCTION = "That summary was rejected: {reason}. Write it again, following the rules."


def retry_messages(base: list[dict[str, Any]], rejected: str, reason: str) -> list[dict[str, Any]]:
    """The retry of a rejected summary: the first request, the rejected answer, and why it was rejected."""
    return [*base, {"role": "assistant", "content": rejected},
            {"role": "user", "content": RETRY_INSTRUCTION.format(reason=reason)}]


def _llm_summary(p: Plan, summarizer: Summarizer, cap: int, attempts: list[dict[str, Any]]) -> str | None:
    """The summariser's text if it passes the check within two tries (each try noted in ``attempts``)."""
    messages = p.messages
    for _ in range(2):
        text, err = _attempt_llm(summarizer, messages, p.tools)
        reason = err or check_summary(text or "", cap=cap, meter=p.view.meter, open_alert_ids=p.alerts,
                                      owned_instance_ids=p.owned, must=p.must, prompt=p.prompt)
        attempts.append({"method": "llm", "ok": reason is None, "reason": reason or "accepted"})
        if reason is None:
            return text or ""
        if text:
            note = getattr(summarizer, "retrying", None)
            if note is not None:
                note(reason)
            messages = retry_messages(p.messages, text, reason)
    return None


def summarise(p: Plan, summarizer: Summarizer | None, cap: int) -> tuple[str, str, list[dict[str, Any]]]:
    """(summary, method, attempts): the summariser's text if it passes the check within two tries,
    else the deterministic fallback."""
    attempts: list[dict[str, Any]] = []
    if p.cut is None:   # masking only: the summary stays as it is
        return p.previous_summary, "masked", attempts
    if summarizer is not None:
        text = _llm_summary(p, summarizer, cap, attempts)
        if text is not None:
            return text, "llm", attempts
    summary = fallback_summary(p.previous_summary, p.evicted, cap=cap, meter=p.view.meter, open_alert_ids=p.alerts,
                               owned_instance_ids=p.owned)
    attempts.append({"method": "fallback", "ok": True,
                     "reason": "no summariser" if summarizer is None else "llm summary rejected or failed"})
    return summary, "fallback", attempts


def compaction_payload(p: Plan, summary: str, method: str, attempts: list[dict[str, Any]], *, prompts: Prompts,
                       settings: ContextSettings, policy: dict[str, Any], tools: list[dict[str, Any]],
                       model_name: str = "") -> dict[str, Any]:
    """The ``context.compacted`` payload (pure); ``tokens_after`` is the estimate of the next projection."""
    prev = p.previous
    payload: dict[str, Any] = {
        "summary": summary,
        "covered_from": (prev.get("covered_from") or 1) if prev else 1,
        "covered_to": p.covered_to,
        "first_kept_seq": p.cut.first_kept_seq if p.cut else p.covered_to + 1,
        "tokens_before": p.before.tokens,
        "tokens_after": 0,
        "method": method,
        "model": model_name if method == "llm" else None,
        "prompt_hash": prompts.hashes.get("summarize.md", ""),
        "pinned": p.cut.pinned if p.cut else (prev or {}).get("pinned") or empty_pinned(),
        "attempts": attempts,
        "masked_to": p.masked_to,
        "summarised": p.cut is not None,
        "facts": fold_facts((prev or {}).get("facts"), p.evicted),
    }
    v = p.view
    compacted = Event(seq=v.end + 1, id="", ts="", kind="context.compacted", source="system", tick=None,
                      payload=payload, version=KINDS["context.compacted"].version)
    after = make_view(Inputs(end=v.end, compaction=compacted,
                             events=[e for e in v.events if e.seq > p.covered_to],
                             ratio=v.calibration.ratio, ratio_seq=v.calibration.seq),
                      prompts=prompts, settings=settings, policy=policy, tools=tools, meter=v.meter)
    payload["tokens_after"] = after.fixed_tokens() + after.thread_tokens()
    return payload


def summary_manifest(p: Plan, *, prompts: Prompts, settings: ContextSettings, policy: dict[str, Any],
                     tools: list[dict[str, Any]], model_name: str, force: bool,
                     params: dict[str, Any] | None = None) -> dict[str, Any]:
    """What replay needs to re-plan this compaction: the log position, the ids it was told to mention, and
    the hashes of its inputs (agent.context.inputs), the model parameters' included."""
    m = {"end": p.view.end, "force": force, "model": model_name, "open_alert_ids": p.alerts,
         "owned_instance_ids": p.owned, "prompt_hashes": dict(prompts.hashes),
         "policy_hash": sha256_text(canonical(policy)), "tools_hash": tools_hash(tools),
         "settings": budget_fields(settings), "base_hash": request_hash(model_name, p.messages, p.tools, params),
         "continuation": p.continuation}
    if params is not None:
        m["params_hash"] = params_hash(params)
    return m


@dataclass
class RecordedSummarizer:
    """A summariser whose every call is logged like the agent's: ``summary.request`` (the request's hash
    and the manifest replay re-plans it from) before, ``summary.response`` after. A retry's manifest adds
    the seq of the rejected answer (``retry_of``) and the reason, so replay rebuilds the retry's request
    from what is logged."""

    inner: Summarizer
    log: EventLog
    tick: int | None
    manifest: dict[str, Any]
    params: dict[str, Any] | None = None
    last_response: int | None = None
    reason: str | None = None

    def retrying(self, reason: str) -> None:
        """The next call retries the last answer, rejected for ``reason``."""
        self.reason = reason

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        model = str(self.manifest["model"])
        manifest = dict(self.manifest)
        if self.reason is not None:
            manifest.update({"retry_of": self.last_response, "reason": self.reason})
        self.reason = None
        req = self.log.append("summary.request", {"request_hash": request_hash(model, messages, tools, self.params),
                                                  "manifest": manifest}, "system", self.tick)
        try:
            reply = self.inner.complete(messages, tools)
        except Exception as e:
            self.log.append("summary.response", {"request_seq": req.seq, "text": None,
                                                 "error": f"{type(e).__name__}: {str(e)[:300]}"}, "model", self.tick)
            raise
        answer: dict[str, Any] = {"request_seq": req.seq, "text": getattr(reply, "text", "") or ""}
        usage = getattr(reply, "usage", None)
        if usage is not None:   # priced like the agent's calls (agent.fleet.spend.model_cost)
            answer["usage"] = {k: int(getattr(usage, k, 0) or 0)
                               for k in ("prompt_tokens", "completion_tokens", "cached_tokens")}
        self.last_response = self.log.append("summary.response", answer, "model", self.tick).seq
        return reply


def compact(log: EventLog, prompts: Prompts, settings: ContextSettings, *, policy: dict[str, Any],
            tools: list[dict[str, Any]], summarizer: Summarizer | None, tick: int | None, open_alert_ids: list[int],
            owned_instance_ids: list[int], model_name: str = "", force: bool = False,
            cache: ProjectionCache | None = None, params: dict[str, Any] | None = None) -> Event | None:
    """Compact when the projected request passes high water (or always, with ``force``). ``params``: the
    model parameters the summariser sends (logged and hashed with its requests).
    Returns the appended ``context.compacted`` event, or None when nothing was done."""
    p = plan(load(log), prompts=prompts, settings=settings, policy=policy, tools=tools,
             meter=meter_for(settings, cache), open_alert_ids=open_alert_ids, owned_instance_ids=owned_instance_ids,
             model_name=model_name, force=force)
    if p is None:
        return None
    if isinstance(p, str):
        logger.warning("context.compaction_skipped", reason=p)
        return None
    if p.cut is None:
        summarizer = None   # masking only: no model call
    if summarizer is not None and params is None:
        params = model_params(summarizer, p.tools)   # what the provider sends with these tools
    if summarizer is not None:
        summarizer = RecordedSummarizer(summarizer, log, tick, summary_manifest(
            p, prompts=prompts, settings=settings, policy=policy, tools=tools, model_name=model_name, force=force,
            params=params), params)
        record_inputs(log, prompts, policy, tools, tick, params)
    summary, method, attempts = summarise(p, summarizer, settings.summary_max_tokens)
    payload = compaction_payload(p, summary, method, attempts, prompts=prompts, settings=settings, policy=policy,
                                 tools=tools, model_name=model_name)
    event = log.append("context.compacted", payload, "system", tick)
    logger.info("context.compacted", seq=event.seq, covered_to=p.covered_to, method=method,
                tokens_before=p.before.tokens, tokens_after=payload["tokens_after"], masked_to=p.masked_to,
                attempts=len(attempts), fits_low_water=p.cut.fits_low_water if p.cut else True,
                continuation=p.continuation)
    return event


WARNING_TOKENS = 120   # room the memory-pressure message needs in the request


def warn_pressure(log: EventLog, prompts: Prompts, settings: ContextSettings, *, policy: dict[str, Any],
                  tools: list[dict[str, Any]], tick: int | None, open_alert_ids: list[int],
                  owned_instance_ids: list[int], model_name: str = "", cache: ProjectionCache | None = None
                  ) -> Event | None:
    """Before a compaction that will summarise, warn the model once: a ``context.pressure`` event naming
    how many of the oldest ticks go and up to which event, so it can ``remember`` what it needs in one step.
    None (and nothing appended) when it already had its warning since the last compaction, when the coming
    compaction only masks, or when the warning would not fit the budget."""
    last_warn = next(iter(log.read(0, kinds=["context.pressure"], newest_first=True, limit=1)), None)
    last_comp = next(iter(log.read(0, kinds=["context.compacted"], newest_first=True, limit=1)), None)
    if last_warn is not None and (last_comp is None or last_warn.seq > last_comp.seq):
        return None
    p = plan(load(log), prompts=prompts, settings=settings, policy=policy, tools=tools,
             meter=meter_for(settings, cache), open_alert_ids=open_alert_ids, owned_instance_ids=owned_instance_ids,
             model_name=model_name)
    if not isinstance(p, Plan) or p.cut is None:
        return None
    if p.before.calibrated_tokens + WARNING_TOKENS > settings.budget_tokens - settings.output_reserve:
        return None
    ticks = sum(1 for e in p.evicted if e.kind == "tick.started")
    return log.append("context.pressure", {"ticks": ticks, "covered_to": p.covered_to,
                                           "tokens": p.before.calibrated_tokens}, "system", tick)


def compact_for_overflow(log: EventLog, prompts: Prompts, settings: ContextSettings, *, policy: dict[str, Any],
                         tools: list[dict[str, Any]], summarizer: Summarizer | None, tick: int | None,
                         open_alert_ids: list[int], owned_instance_ids: list[int],
                         model_name: str = "", cache: ProjectionCache | None = None) -> Event | None:
    """The provider said the context is too long: compact now (even below high water), once;
    the caller projects again and retries the request once."""
    return compact(log, prompts, settings, policy=policy, tools=tools, summarizer=summarizer, tick=tick,
                   open_alert_ids=open_alert_ids, owned_instance_ids=owned_instance_ids, model_name=model_name,
                   force=True, cache=cache)
