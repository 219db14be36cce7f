"""The pure build: plain values (events, prompts, settings, tools, calibration) -> messages + manifest.

Nothing here reads the log, the clock or the network, writes a log line or keeps
state between calls; the only thing passed in that outlives a call is the
``Meter``'s cache of token counts, which never changes a result.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from agent.config import ContextSettings
from agent.context.cache import Message, Meter
from agent.context.calibration import Calibration
from agent.context.facts import render_facts
from agent.context.pinned import MARKER_COST, SHRINK_FLOOR, empty_pinned, render_pinned, render_summary
from agent.context.prompts import Prompts, render_system
from agent.context.thread import Entry, build_thread, shrink_entry
from agent.events import Event, inline
from agent.events.canonical import canonical
from agent.events.kinds.model import split_manifest
from agent.tokens import REQUEST_OVERHEAD

BUDGET_FIELDS = ("budget_tokens", "output_reserve", "high_water", "low_water", "encoding", "summary_max_tokens",
                 "knowledge_max_tokens", "pinned_max_tokens", "tool_output_max_tokens", "calibration_margin",
                 "mask_after_ticks", "facts_max_tokens", "directives_max_tokens", "memory_max_tokens", "flood_keep")
# Budget fields a request recorded before the field existed ran without: replayed with these values.
ABSENT_MEANS = {"flood_keep": 0}


def budget_fields(settings: ContextSettings) -> dict[str, Any]:
    return {k: getattr(settings, k) for k in BUDGET_FIELDS}


def settings_from_manifest(settings: ContextSettings, manifest: dict[str, Any]) -> ContextSettings:
    """``settings`` with the budget fields a past request recorded (for faithful replay)."""
    fields = manifest.get("settings") or {}
    recorded = {k: v for k, v in fields.items() if k in BUDGET_FIELDS}
    if fields:   # a request that recorded its settings before a field existed ran without it
        recorded.update({k: v for k, v in ABSENT_MEANS.items() if k not in fields})
    return replace(settings, **recorded)


# ------------------------------------------------------------------ hashing


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def request_hash(model: str, messages: list[Message], tools: list[dict[str, Any]],
                 params: dict[str, Any] | None = None) -> str:
    """sha256 of the canonical JSON of exactly what is sent: model, messages, tools and, when known, the
    model parameters sent with them (temperature, max output tokens, tool choice). Requests logged before
    parameters were recorded hash without them."""
    body: dict[str, Any] = {"model": model, "messages": messages, "tools": tools}
    if params is not None:
        body["params"] = params
    return sha256_text(canonical(body))


def params_hash(params: dict[str, Any]) -> str:
    return sha256_text(canonical(params))


def model_params(provider: Any, tools: list[dict[str, Any]]) -> dict[str, Any]:
    """What a provider sends with a request besides the model, the messages and the tools (temperature,
    max output tokens, tool choice...): ``request_params`` minus those; {} for a provider without it."""
    fn = getattr(provider, "request_params", None)
    if fn is None:
        return {}
    return {k: v for k, v in fn([], tools).items() if k not in ("model", "messages", "tools")}


def tools_hash(tools: list[dict[str, Any]]) -> str:
    return sha256_text(canonical(tools))


# ------------------------------------------------------------------ inputs


@dataclass(frozen=True)
class Inputs:
    """What a projection as of ``end`` reads from the log, as plain values."""

    end: int
    compaction: Event | None     # the newest context.compacted with seq <= end
    events: list[Event]          # every event with covered_to < seq <= end, in seq order
    ratio: float = 1.0           # the newest context.calibrated ratio with seq <= end
    ratio_seq: int | None = None

    @property
    def covered_to(self) -> int:
        return int(self.compaction.payload["covered_to"]) if self.compaction else 0


def select(log_events: Sequence[Event], until_seq: int | None = None) -> Inputs:
    """The inputs of a projection as of ``until_seq`` (None = the last event), from every event of a log
    in seq order. The load step reads the same through the log's indexes."""
    end = (log_events[-1].seq if log_events else 0) if until_seq is None else until_seq
    upto = [e for e in log_events if e.seq <= end]
    comp = next((e for e in reversed(upto) if e.kind == "context.compacted"), None)
    cal = next((e for e in reversed(upto) if e.kind == "context.calibrated"), None)
    covered_to = comp.payload["covered_to"] if comp else 0
    return Inputs(end=end, compaction=comp, events=[e for e in upto if e.seq > covered_to],
                  ratio=float(cal.payload["ratio"]) if cal else 1.0, ratio_seq=cal.seq if cal else None)


# ------------------------------------------------------------------ the view


@dataclass
class Projection:
    messages: list[Message]
    manifest: dict[str, Any]
    tokens: int
    sections: dict[str, int] = field(default_factory=dict)
    shrink_notes: list[str] = field(default_factory=list)
    # The thread did not fit even with floods folded: texts were cut or old messages left out to fit. The
    # request is then due for compaction whatever high_water says (a budget under output_reserve /
    # (1 - high_water) trims before it reaches high water).
    overflowed: bool = False

    @property
    def calibrated_tokens(self) -> int:
        return int(self.manifest["calibrated_tokens"])

    @property
    def request_hash(self) -> str:
        return str(self.manifest["request_hash"])


@dataclass
class View:
    """Everything a projection is made of, before the budget check (compaction reads it too)."""

    end: int
    compaction: Event | None
    covered_to: int
    system: str
    pinned_text: str | None
    summary_text: str | None
    events: list[Event]
    thread: list[Entry]
    tools_tokens: int
    calibration: Calibration
    meter: Meter

    def fixed_tokens(self) -> int:
        """Request overhead + system + pinned + summary + tools."""
        n = REQUEST_OVERHEAD + self.meter.text_message(self.system) + self.tools_tokens
        if self.pinned_text is not None:
            n += self.meter.text_message(self.pinned_text)
        if self.summary_text is not None:
            n += self.meter.text_message(self.summary_text)
        return n

    def thread_tokens(self) -> int:
        return sum(e.tokens for e in self.thread)


def _compaction_texts(comp: Event | None, settings: ContextSettings, meter: Meter
                      ) -> tuple[str | None, str | None, int | None]:
    """(pinned text, summary text, masked_to) of the compaction a thread follows (all None without one)."""
    if comp is None:
        return None, None, None
    covered_to = int(comp.payload["covered_to"])
    summary_text = masked_to = None
    pinned_text = render_pinned(comp.payload.get("pinned") or empty_pinned(), covered_to, settings, meter,
                                version=comp.version)
    if covered_to > 0 or comp.version < 3:   # a masking-only compaction before any summary has none
        summary_text = render_summary(comp.payload, settings, meter, version=comp.version)
    if comp.version >= 3 and comp.payload.get("masked_to") is not None:
        masked_to = int(comp.payload["masked_to"])
    facts = render_facts(comp.payload.get("facts"), settings.facts_max_tokens, meter) if comp.version >= 3 else None
    if facts is not None and summary_text is not None:
        summary_text += "\n" + facts
    return pinned_text, summary_text, masked_to


def make_view(inputs: Inputs, *, prompts: Prompts, settings: ContextSettings, policy: dict[str, Any],
              tools: list[dict[str, Any]], meter: Meter) -> View:
    comp = inputs.compaction
    covered_to = inputs.covered_to
    pinned_text, summary_text, masked_to = _compaction_texts(comp, settings, meter)
    system = render_system(prompts, policy)
    return View(end=inputs.end, compaction=comp, covered_to=covered_to, system=system,
                pinned_text=pinned_text, summary_text=summary_text, events=inputs.events,
                thread=build_thread(inputs.events, settings, meter, masked_to), tools_tokens=meter.tools(tools),
                calibration=Calibration(inputs.ratio, settings.calibration_margin, inputs.ratio_seq), meter=meter)


# ------------------------------------------------------------------ the budget


def _water_fill(sizes: list[int], excess: int) -> int | None:
    """The largest cap T >= SHRINK_FLOOR with sum(size - T - MARKER_COST for size > T) >= excess."""
    def saved(t: int) -> int:
        return sum(s - t - MARKER_COST for s in sizes if s > t + MARKER_COST)

    if not sizes or saved(SHRINK_FLOOR) < excess:
        return None
    lo, hi = SHRINK_FLOOR, max(sizes)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if saved(mid) >= excess:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _is_tool_text(e: Entry) -> bool:
    return e.tool is not None and e.text is not None


def _is_user_text(e: Entry) -> bool:
    return e.tool is None and e.text is not None and not e.pinned_directive and not e.operator


def _is_operator_text(e: Entry) -> bool:
    return e.tool is None and e.text is not None and not e.pinned_directive and e.operator


FOLD_LINES_TOKENS = 300   # a digest names the messages it folds, one line each, within this many tokens
FOLD_LINE_CHARS = 110     # each line: the start of the message's text


def _foldable(e: Entry) -> str | None:
    """The flood an entry of the newest tick may be folded into (its kind; a late tool result's tool), or
    None: the observation, an operator's or pinned message, a tool result next to its call, a marker."""
    if e.message["role"] != "user" or e.operator or e.pinned_directive or e.text is None:
        return None
    if e.kind in ("tick.started", "omitted", "folded", "knowledge.collapsed"):
        return None
    return f"{e.kind} ({inline(e.tool[0])})" if e.tool is not None else e.kind


def _first_line(e: Entry) -> str:
    """The first line of ``e``'s text. A tool's output is what another system said, fenced as data in its own
    message: quoted here ``inline``, so it cannot spell a tag (a user message's text is a renderer's, whose
    untrusted values are already written so)."""
    first = next((ln.strip() for ln in (e.text or "").splitlines() if ln.strip() and not ln.startswith("```")), "")
    return inline(first) if e.tool is not None else first


def _cut(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[:chars] + "…"


def _digest(label: str, run: list[Entry], tick: int | None, meter: Meter) -> Entry:
    """One message for the folded ``run`` of one flood: how many, which events, the first one's line as the
    pattern, then one line per message while they fit, each with only its words that most of the others do
    not have (an instance, a host, a price; the whole line of one that follows another pattern)."""
    where = f"tick {tick}" if tick is not None else "this tick"
    words = [_first_line(e).split() for e in run]
    seen = Counter(w for ws in words for w in set(ws))
    common = {w for w, n in seen.items() if 2 * n > len(run)}   # the pattern most of them follow
    head = (f"[... {len(run):,} more {label} messages of {where} (#{run[0].seq}–#{run[-1].seq}) folded for space; "
            f"the first reads \"{_cut(' '.join(words[0]), 2 * FOLD_LINE_CHARS)}\", and each line below keeps only "
            "the words its message does not share with most of the others; `fleet-agent thread show` and "
            "search_history have each in full]")
    lines, used = [head], 0
    for e, w in zip(run, words, strict=True):
        line = f"- #{e.seq} " + (_cut(" ".join(x for x in w if x not in common), FOLD_LINE_CHARS) or "(the same)")
        n = meter.count(line) + 1
        if used + n > FOLD_LINES_TOKENS:
            lines.append(f"[... {len(run) - len(lines) + 1:,} more not listed]")
            break
        lines.append(line)
        used += n
    text = "\n".join(lines)
    msg: Message = {"role": "user", "content": text}
    return Entry(run[0].seq, "folded", tick, msg, meter.message(msg), text=text)


def _fold_floods(v: View, keep: int) -> str | None:
    """The budget's first resort: in the newest tick, past ``keep`` messages of one kind of system message,
    the rest become one digest at the place of the first folded one. Nothing the operator wrote, no tool
    result next to its call and not the observation. Deterministic: depends only on the view and ``keep``.
    Returns a note, or None when no flood was there."""
    newest = max((i for i, e in enumerate(v.thread) if e.kind == "tick.started"), default=-1)
    floods: dict[str, list[int]] = {}
    for i in range(newest + 1, len(v.thread)):
        label = _foldable(v.thread[i])
        if label is not None:
            floods.setdefault(label, []).append(i)
    folded = {label: at[keep:] for label, at in floods.items() if len(at) > keep}
    if keep <= 0 or not folded:
        return None
    tick = v.thread[newest].tick if newest >= 0 else None
    place = {at[0]: _digest(label, [v.thread[i] for i in at], tick, v.meter) for label, at in folded.items()}
    gone = {i for at in folded.values() for i in at}
    v.thread[:] = [place[i] if i in place else e for i, e in enumerate(v.thread) if i in place or i not in gone]
    return f"folded {len(gone):,} messages of {len(folded)} kind{'s' if len(folded) > 1 else ''}"


def _shrink(v: View, limit_raw: int) -> list[str]:
    """Truncate the thread's largest texts (tool outputs, then observations and the like, operator
    feedback last) until it fits ``limit_raw``. Deterministic: the result depends only on the view and
    the limit. Returns notes."""
    notes: list[str] = []
    for phase, pick in enumerate((_is_tool_text, _is_user_text, _is_operator_text)):
        for _ in range(6):
            excess = v.fixed_tokens() + v.thread_tokens() - limit_raw
            if excess <= 0:
                return notes
            at = [i for i, e in enumerate(v.thread) if pick(e)]
            sizes = [v.thread[i].shown(v.meter) for i in at]
            cap = _water_fill(sizes, excess)
            final = cap is None
            cap = SHRINK_FLOOR if cap is None else cap
            for i, n in zip(at, sizes, strict=True):
                if n > cap:   # cut a copy: the entry itself stays as the view's thread had it
                    e = v.thread[i].copy()
                    shrink_entry(e, cap, v.meter)
                    v.thread[i] = e
            notes.append(f"phase {phase} cap {cap}")
            if final:
                break
    return notes


def _droppable(thread: list[Entry]) -> int:
    """How many entries at the head of ``thread`` may go: everything before the newest tick's
    observation, never splitting a tool call from its results."""
    newest = max((i for i, e in enumerate(thread) if e.kind == "tick.started"), default=len(thread) - 1)
    n = 0
    for i in range(newest):
        if thread[i + 1].message["role"] != "tool":
            n = i + 1
    return n


def _drop_oldest(v: View, limit_raw: int) -> str:
    """The last resort when truncating every text is not enough: leave out the oldest thread messages
    (never the newest tick's) behind one marker naming them and where to read them."""
    room = _droppable(v.thread)
    dropped = 0
    marker: Entry | None = None
    while dropped < room:
        dropped += 1
        while dropped < room and v.thread[dropped].message["role"] == "tool":
            dropped += 1
        gone = v.thread[:dropped]
        text = (f"[... {len(gone):,} earlier messages (#{gone[0].seq}–#{gone[-1].seq}) not shown for space; "
                "`fleet-agent thread show` and search_history have them]")
        msg: Message = {"role": "user", "content": text}
        marker = Entry(gone[0].seq, "omitted", None, msg, v.meter.message(msg))
        kept = sum(e.tokens for e in v.thread[dropped:]) + marker.tokens
        if v.fixed_tokens() + kept <= limit_raw:
            break
    if marker is not None:
        v.thread[:dropped] = [marker]
    return f"dropped {dropped} oldest messages"


def assemble(v: View, settings: ContextSettings, *, model: str, tools: list[dict[str, Any]], prompts: Prompts,
             policy: dict[str, Any], params: dict[str, Any] | None = None) -> Projection:
    """Assemble the messages, enforce the budget, write the manifest. Shrinks ``v``'s thread in place."""
    limit_raw = v.calibration.raw_limit(settings.budget_tokens - settings.output_reserve)
    thread_tokens = v.thread_tokens()
    shrink_notes: list[str] = []
    overflowed = False
    if v.fixed_tokens() + thread_tokens > limit_raw:
        folded = _fold_floods(v, settings.flood_keep)
        shrink_notes = [folded] if folded else []
        overflowed = v.fixed_tokens() + v.thread_tokens() > limit_raw
        if overflowed:
            shrink_notes += _shrink(v, limit_raw)
        if v.fixed_tokens() + v.thread_tokens() > limit_raw:
            shrink_notes.append(_drop_oldest(v, limit_raw))
        thread_tokens = v.thread_tokens()
    messages: list[Message] = [{"role": "system", "content": v.system}]
    sections = {"system": v.meter.text_message(v.system), "pinned": 0, "summary": 0}
    if v.pinned_text is not None:
        messages.append({"role": "user", "content": v.pinned_text})
        sections["pinned"] = v.meter.text_message(v.pinned_text)
    if v.summary_text is not None:
        messages.append({"role": "user", "content": v.summary_text})
        sections["summary"] = v.meter.text_message(v.summary_text)
    messages += [dict(e.message) for e in v.thread]
    sections["thread"] = thread_tokens
    sections["tools"] = v.tools_tokens
    tokens = REQUEST_OVERHEAD + sum(sections.values())
    calibrated = v.calibration.calibrated(tokens)
    comp = v.compaction
    manifest = {
        "model": model,
        "covered_to": v.covered_to,
        "compaction_seq": comp.seq if comp else None,
        "thread_from": v.covered_to + 1,
        "thread_to": v.end,
        "thread_events": len(v.thread),
        "prompt_hashes": dict(prompts.hashes),
        "policy_hash": sha256_text(canonical(policy)),
        "tools_hash": tools_hash(tools),
        "settings": budget_fields(settings),
        "calibration": v.calibration.ratio,
        "calibration_seq": v.calibration.seq,
        "sections": dict(sections),
        "estimated_tokens": tokens,
        "calibrated_tokens": calibrated,
        "shrunk": bool(shrink_notes),
        "request_hash": request_hash(model, messages, tools, params),
    }
    if params is not None:
        manifest["params_hash"] = params_hash(params)
    return Projection(messages=messages, manifest=manifest, tokens=tokens, sections=sections,
                      shrink_notes=shrink_notes, overflowed=overflowed)


def build(inputs: Inputs, *, prompts: Prompts, settings: ContextSettings, policy: dict[str, Any],
          tools: list[dict[str, Any]], meter: Meter, model: str = "", params: dict[str, Any] | None = None
          ) -> Projection:
    """The request the model sees for ``inputs``, within the budget."""
    v = make_view(inputs, prompts=prompts, settings=settings, policy=policy, tools=tools, meter=meter)
    return assemble(v, settings, model=model, tools=tools, prompts=prompts, policy=policy, params=params)


def limit_tokens(settings: ContextSettings) -> int:
    return settings.budget_tokens - settings.output_reserve


def fits(projection: Projection, settings: ContextSettings) -> bool:
    """Calibrated tokens of messages and tool specs within budget minus output reserve."""
    return projection.calibrated_tokens <= limit_tokens(settings)


def needs_compaction(projection: Projection, settings: ContextSettings) -> bool:
    """Over high water, or over the budget before texts were cut to fit (``Projection.overflowed``)."""
    return projection.overflowed or projection.calibrated_tokens > settings.high_water * settings.budget_tokens


def request_payload(projection: Projection) -> dict[str, Any]:
    """The payload of the ``model.request`` event (v2) recording this projection: its hash and its manifest
    with what every request shares (model, input hashes, settings) named by the hash of ``request_bundle``,
    which is logged once as an ``input.recorded`` (agent.events.kinds.model)."""
    _, compact = split_manifest(projection.manifest, projection.request_hash)
    return {"request_hash": projection.request_hash, "manifest": compact}


def request_bundle(projection: Projection) -> dict[str, Any]:
    """What the manifest of ``request_payload`` names by hash: the model, the hashes of the prompt files,
    policy, tools and model parameters, and the budget settings."""
    return split_manifest(projection.manifest)[0]


