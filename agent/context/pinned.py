"""The pinned block (directives, memory, knowledge) and the summary block, rendered within their caps."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agent.config import ContextSettings
from agent.context.cache import Meter
from agent.events import KINDS, Event, data, fence, inline
from agent.times import parse_ts

SHRINK_FLOOR = 48          # never truncate a message's text below this many tokens
MARKER_COST = 40           # tokens a truncation marker may add
STEERING_KINDS = ("policy.overridden", "policy.override_ended", "fleet.paused", "fleet.resumed", "host.excluded",
                  "host.included", "constraint.accepted")
# Operator words the pinned block carries verbatim from v5 (notes, acks, withdrawals), and what ends them.
OPERATOR_WORD_KINDS = ("operator.note", "alert.acked", "directive.unpinned")
PINNED_KINDS = ("knowledge.changed", "operator.note", "directive.unpinned", "memory.written", "memory.deleted",
                *STEERING_KINDS, "alert.acked", "alert.resolved")
OPERATOR_WORDS_HOURS = 24   # a note, ack or withdrawal stays in the pinned block this long after it was given


def current() -> int:
    """The version new ``context.compacted`` events record (looked up when asked: projecting a context that
    names its compaction's version loads no kind module for it).

    The rendering of the pinned block and the summary follows the version of the ``context.compacted`` event
    that carries them. v1: as first released. v2: the agent's memory under ``[memory · written by the agent]``
    with key and text written ``inline``, knowledge file names ``inline``, the summary (model-written) through
    ``data`` inside a fence: nothing the model or vast.ai wrote can spell a source tag there. v3: knowledge
    files most recently changed first (by the seq of each file's last ``knowledge.changed``, then by name),
    so what fits the cap is what the operator touched last. v4: the steering in force as of the block (policy
    overrides, the pause, host exclusions, accepted machine exclusions), each with who set it and when it ends,
    under ``## In force now``, so the model sees what binds after any compaction. v5: every operator note, ack
    and directive withdrawal of the folded span, verbatim (each within the block's cap), under ``## Operator
    words``, until it is older than ``OPERATOR_WORDS_HOURS`` or superseded (an ack by its alert's resolution, a
    note by its withdrawal): the summary may cite them, it never replaces them."""
    return KINDS["context.compacted"].version


def empty_pinned() -> dict[str, Any]:
    return {"knowledge": {}, "directives": [], "memory": {}}


def _fold_knowledge(knowledge: dict[str, str], kseq: dict[str, int], e: Event) -> None:
    p = e.payload
    if p["change"] == "removed":
        knowledge.pop(p["name"], None)
        kseq.pop(p["name"], None)
        return
    kseq[p["name"]] = e.seq
    if p.get("text") is not None:
        knowledge[p["name"]] = p["text"]
    else:
        prev = knowledge.get(p["name"], "")
        knowledge[p["name"]] = (prev + f"\n[changed at #{e.seq}; read_knowledge('{p['name']}') "
                                "has the current text]").lstrip("\n")


def _fold_steering(steering: dict[str, Any], e: Event) -> None:
    """Apply one steering event to the snapshot of what binds (overrides, pause, hosts, machines)."""
    p = e.payload
    ovs, hosts, machines = steering["overrides"], steering["hosts"], steering["machines"]
    if e.kind == "policy.overridden":
        ovs[str(e.seq)] = {"key": p["key"], "value": p["value"], "by": p["by"], "until": p.get("until"),
                           "reason": p["reason"]}
    elif e.kind == "policy.override_ended":
        ovs.pop(str(p["override_id"]), None)
    elif e.kind == "fleet.paused":
        steering["pause"] = {"id": e.seq, "by": p["by"], "since": e.ts, "until": p.get("until"), "reason": p["reason"]}
    elif e.kind == "fleet.resumed":
        if (steering.get("pause") or {}).get("id") == p["pause_id"]:
            steering["pause"] = None
    elif e.kind == "host.excluded":
        hosts[str(p["host_id"])] = {"id": e.seq, "by": p["by"], "source": p["source"], "until": p.get("until"),
                                    "reason": p["reason"]}
    elif e.kind == "host.included":
        hosts.pop(str(p["host_id"]), None)
    elif e.kind == "constraint.accepted" and p["constraint"] == "exclude_machine":
        machines[str(p["value"])] = {"id": p["proposal_id"], "by": p["by"], "until": p.get("until")}


def _operator_word(e: Event) -> dict[str, Any] | None:
    """One operator input as the v5 block carries it: its seq, kind, author, time and exact words."""
    p = e.payload
    if e.kind == "operator.note" and not p.get("pin"):
        return {"id": e.seq, "kind": "note", "by": p["by"], "ts": e.ts, "text": p["text"]}
    if e.kind == "alert.acked":
        return {"id": e.seq, "kind": "ack", "by": p["by"], "ts": e.ts, "alert_id": p["alert_id"],
                "text": p.get("note") or ""}
    if e.kind == "directive.unpinned":
        return {"id": e.seq, "kind": "unpin", "by": p["by"], "ts": e.ts, "directive_id": p["directive_id"],
                "text": f"directive #{p['directive_id']} withdrawn"}
    return None


def _fold_words(words: list[dict[str, Any]], e: Event) -> list[dict[str, Any]]:
    """``words`` with ``e`` applied: a new operator input appended, an ack dropped when its alert resolves."""
    if e.kind == "alert.resolved":
        return [w for w in words if not (w["kind"] == "ack" and w.get("alert_id") == e.payload["alert_id"])]
    w = _operator_word(e)
    return words if w is None else [*words, w]


def _expire_words(words: list[dict[str, Any]], newest_ts: str | None) -> list[dict[str, Any]]:
    """The words given within ``OPERATOR_WORDS_HOURS`` of ``newest_ts`` (the newest event folded)."""
    if not newest_ts:
        return words
    newest = parse_ts(newest_ts)
    return [w for w in words if (newest - parse_ts(w["ts"])).total_seconds() < OPERATOR_WORDS_HOURS * 3600]


def fold_pinned(pinned: dict[str, Any], events: Iterable[Event]) -> dict[str, Any]:
    """Apply knowledge, directive, memory and steering events to a pinned snapshot (a new dict); operator
    notes, acks and withdrawals are kept verbatim under ``operator`` (rendered from v5) until they expire or
    are superseded."""
    knowledge = dict(pinned.get("knowledge") or {})
    directives = [dict(d) for d in pinned.get("directives") or []]
    memory = dict(pinned.get("memory") or {})
    kseq = {k: int(v) for k, v in (pinned.get("knowledge_seq") or {}).items()}
    changed = int(pinned.get("changed_seq") or 0)
    prev = pinned.get("steering") or {}
    steering: dict[str, Any] = {"overrides": dict(prev.get("overrides") or {}), "pause": prev.get("pause"),
                                "hosts": dict(prev.get("hosts") or {}), "machines": dict(prev.get("machines") or {})}
    words = [dict(w) for w in pinned.get("operator") or []]
    words_seq = int(pinned.get("operator_seq") or 0)
    newest_ts = pinned.get("operator_ts")
    for e in events:
        if e.kind in OPERATOR_WORD_KINDS or e.kind == "alert.resolved":
            before = len(words)
            words = _fold_words(words, e)
            if len(words) != before:
                words_seq = max(words_seq, e.seq)
            newest_ts = e.ts if not newest_ts or e.ts > newest_ts else newest_ts
            if e.kind not in ("operator.note", "directive.unpinned"):
                continue
        if e.kind in STEERING_KINDS:
            changed = max(changed, e.seq)
            _fold_steering(steering, e)
            continue
        p = e.payload
        if e.kind in PINNED_KINDS and (e.kind != "operator.note" or p.get("pin")):
            changed = max(changed, e.seq)
        if e.kind == "knowledge.changed":
            _fold_knowledge(knowledge, kseq, e)
        elif e.kind == "operator.note" and p.get("pin"):
            directives.append({"id": e.seq, "by": p["by"], "text": p["text"]})
        elif e.kind == "directive.unpinned":
            directives = [d for d in directives if d["id"] != p["directive_id"]]
        elif e.kind == "memory.written":
            memory[p["key"]] = p["text"]
        elif e.kind == "memory.deleted":
            memory.pop(p["key"], None)
    out = {"knowledge": dict(sorted(knowledge.items())), "directives": directives,
           "memory": dict(sorted(memory.items())), "changed_seq": changed,
           "knowledge_seq": {k: kseq.get(k, 0) for k in sorted(knowledge)}}
    if any(steering.values()):  # snapshots without steering keep the shape they always had
        out["steering"] = steering
    kept = _expire_words(words, newest_ts)
    if kept or words_seq:  # nor do those without operator words
        out.update({"operator": kept, "operator_seq": words_seq, "operator_ts": newest_ts})
    return out


def _word_line(w: dict[str, Any]) -> str:
    """One operator input, its words exactly as given (the operator's own text, as the thread showed it)."""
    when = str(w["ts"])[:16].replace("T", " ")
    if w["kind"] == "ack":
        note = f" — note: {w['text']}" if w["text"] else ""
        return f"- [alert #{w['alert_id']} acked #{w['id']} · {w['by']} · {when} UTC]{note}"
    if w["kind"] == "unpin":
        return f"- [operator #{w['id']} · {w['by']} · {when} UTC] {w['text']}"
    return f"- [operator note #{w['id']} · {w['by']} · {when} UTC] {w['text']}"


def _ends(until: Any, open_ended: str) -> str:
    return f"until {str(until)[:16].replace('T', ' ')} UTC" if until else open_ended


def _steering_lines(steering: dict[str, Any]) -> list[str]:
    """One line per thing in force, each with who set it and when it ends (strings written ``inline``)."""
    lines = []
    x = steering.get("pause")
    if x:
        lines.append(f"- [pause #{x['id']} · {inline(x['by'])}] PAUSED since {str(x['since'])[:16].replace('T', ' ')} "
                     f"UTC {_ends(x.get('until'), 'until resumed')}: no rent, destroy or reboot runs — "
                     f"{inline(x['reason'])}")
    for oid, o in sorted((steering.get("overrides") or {}).items(), key=lambda kv: int(kv[0])):
        v = o["value"]
        shown = ", ".join(inline(g) for g in v) if isinstance(v, list) else inline(f"{v:g}" if isinstance(v, float)
                                                                                   else v)
        lines.append(f"- [policy override #{oid} · {inline(o['by'])}] {inline(o['key'])} {shown} "
                     f"{_ends(o.get('until'), 'until reset')} — {inline(o['reason'])}")
    for hid, h in sorted((steering.get("hosts") or {}).items(), key=lambda kv: int(kv[0])):
        lines.append(f"- [host excluded #{h['id']} · {inline(h['by'])}] host {int(hid)} "
                     f"{_ends(h.get('until'), 'until included')}: rents on it are refused — {inline(h['reason'])}")
    for mid, m in sorted((steering.get("machines") or {}).items(), key=lambda kv: int(kv[0])):
        lines.append(f"- [constraint #{m['id']} accepted · {inline(m['by'])}] machine {int(mid)} excluded "
                     f"{_ends(m.get('until'), 'until an operator ends it')}: rents on it are refused")
    return lines


def knowledge_order(pinned: dict[str, Any]) -> list[str]:
    """The knowledge file names most recently changed first (a file's last change seq, then its name;
    files folded before changes were tracked count as oldest)."""
    kseq = pinned.get("knowledge_seq") or {}
    return sorted(pinned.get("knowledge") or {}, key=lambda n: (-int(kseq.get(n, 0)), n))


def _knowledge_text(text: str, knowledge: dict[str, str], settings: ContextSettings, meter: Meter,
                    version: int, order: list[str]) -> str:
    """The knowledge files within what is left of ``pinned_max_tokens``. From v2: full (each cut at
    ``knowledge_max_tokens``) while there is room, then by name only while names fit, then a count of the
    rest, names written ``inline``; in name order (v2) or most recently changed first (v3, ``order``).
    v1 (as first released) listed every name past the room."""
    if version < 2:
        return _knowledge_text_v1(text, knowledge, settings, meter)
    cap = settings.pinned_max_tokens
    text += "\n## Knowledge files" + (" (most recently changed first)" if version >= 3 else "")
    used = meter.count(text)
    names = order if version >= 3 else list(knowledge)
    for i, raw in enumerate(names):
        name = inline(raw)
        room = min(settings.knowledge_max_tokens, cap - used - MARKER_COST)
        if room < SHRINK_FLOOR:
            return text + _names_only([inline(n) for n in names[i:]], cap - used - MARKER_COST, meter)
        kept, n, full = meter.cut(knowledge[raw], room)
        part = f"\n### {name}\n{fence(kept, 'text')}"
        if n < full:
            part += f"\n[... truncated at {n} of {full} tokens; read_knowledge('{name}') has the full text]"
        text += part
        used += meter.count(part)
    return text


def _knowledge_text_v1(text: str, knowledge: dict[str, str], settings: ContextSettings, meter: Meter) -> str:
    cap = settings.pinned_max_tokens
    text += "\n## Knowledge files"
    for name, body in knowledge.items():
        room = min(settings.knowledge_max_tokens, cap - meter.count(text) - MARKER_COST)
        if room < SHRINK_FLOOR:
            text += f"\n### {name}\n[not shown for space; read_knowledge('{name}') has the full text]"
            continue
        kept, n, full = meter.cut(body, room)
        text += f"\n### {name}\n{fence(kept, 'text')}"
        if n < full:
            text += f"\n[... truncated at {n} of {full} tokens; read_knowledge('{name}') has the full text]"
    return text


def _names_only(names: list[str], room: int, meter: Meter) -> str:
    """``names`` listed while they fit ``room`` tokens, then one marker for the rest."""
    out = ""
    used = 0
    for i, name in enumerate(names):
        line = f"\n### {name}\n[not shown for space; read_knowledge('{name}') has the full text]"
        n = meter.count(line)
        if used + n > room:
            return out + (f"\n[... {len(names) - i:,} more knowledge files not listed for space; "
                          "`fleet-agent knowledge status` lists every file, read_knowledge(name) reads one]")
        out += line
        used += n
    return out


def _memory_lines(memory: dict[str, str], version: int) -> list[str]:
    if version >= 2:
        return ["## Your memory (remember / forget; your own words, not an operator's)",
                *(f"- [memory · written by the agent] {inline(k)}: {inline(v)}" for k, v in memory.items())]
    return ["## Your memory (remember / forget)", *(f"- {k}: {v}" for k, v in memory.items())]


def _capped(lines: list[str], cap: int, meter: Meter, what: str, where: str) -> list[str]:
    """``lines`` while they fit ``cap`` tokens (from v3, each block of the pinned block has its own cap),
    then one marker saying how many are left out and where they are."""
    used = 0
    for n, line in enumerate(lines):
        used += meter.count(line) + 1
        if used > cap - MARKER_COST:
            return [*lines[:n], f"[... {len(lines) - n:,} more {what} not shown for space (block cap {cap:,} "
                                f"tokens); {where}]"]
    return lines


BLOCK_HEADS = {"directives": "## Operator directives", "operator": "## Operator words", "memory": "## Your memory",
               "knowledge": "## Knowledge files",
               "facts": "## Facts from the summarised events"}


def block_tokens(pinned: str | None, summary: str | None, meter: Meter) -> dict[str, int]:
    """Tokens of each block: directives, memory and knowledge in the pinned text, facts after the summary
    (split at the renderer's own block headings; a summary's own headings are inside its fence)."""
    out = dict.fromkeys(BLOCK_HEADS, 0)
    for text, blocks in ((pinned, ("directives", "operator", "memory", "knowledge")), (summary, ("facts",))):
        current: str | None = None
        chunk: list[str] = []
        for line in [*(text or "").split("\n"), "## end"]:
            block = next((k for k in blocks if line.startswith(BLOCK_HEADS[k])), None)
            if block is not None or line == "## end":
                if current is not None:
                    out[current] += meter.count("\n".join(chunk))
                current, chunk = block, []
            if current is not None:
                chunk.append(line)
    return out


def render_pinned(pinned: dict[str, Any], as_of: int, settings: ContextSettings, meter: Meter,
                  version: int | None = None) -> str | None:
    """The pinned block's text, or None when it has nothing in it. Directives and memory
    come first; knowledge files share what is left of ``pinned_max_tokens``. ``version``: that of the
    ``context.compacted`` event carrying the block (None: the current one)."""
    version = current() if version is None else version
    directives = pinned.get("directives") or []
    memory = pinned.get("memory") or {}
    knowledge = pinned.get("knowledge") or {}
    steering = _steering_lines(pinned.get("steering") or {}) if version >= 4 else []
    words = (pinned.get("operator") or []) if version >= 5 else []
    if not (directives or memory or knowledge or steering or words):
        return None
    # Cite the last event that changed the block, not the compaction: the block's bytes then stay
    # the same across compactions that change nothing pinned, and the prompt cache keeps it.
    changed = pinned.get("changed_seq") or 0
    if version >= 5:
        changed = max(changed, int(pinned.get("operator_seq") or 0))
    head = f"[pinned · knowledge, directives, memory as of #{changed or as_of}]"
    parts = [head]
    if directives:
        lines = [f"- [operator directive #{d['id']} · {d['by']}] {d['text']}" for d in directives]
        if version >= 3:
            lines = _capped(lines, settings.directives_max_tokens, meter, "directives",
                            "`fleet-agent directives` lists them; search_history finds each")
        parts.append("## Operator directives (standing orders until withdrawn)")
        parts.extend(lines)
    if steering:
        parts.append("## In force now (operator steering, enforced in code: calls that break it are refused)")
        parts.extend(_capped(steering, settings.directives_max_tokens, meter, "steering entries",
                             "`fleet-agent policy show`, `hosts list` and `status` list them"))
    if words:
        parts.append(f"## Operator words (notes, acks and withdrawals of the last {OPERATOR_WORDS_HOURS} h, "
                     "verbatim, oldest first)")
        parts.extend(_capped([_word_line(w) for w in words], settings.directives_max_tokens, meter,
                             "operator inputs", "`fleet-agent thread show --kind operator.note` lists them; "
                             "search_history finds each"))
    if memory:
        lines = _memory_lines(memory, version)
        if version >= 3:
            lines = lines[:1] + _capped(lines[1:], settings.memory_max_tokens, meter, "memories",
                                        "search_history finds each")
        parts.extend(lines)
    text = "\n".join(parts)
    cap = settings.pinned_max_tokens
    if meter.count(text) > cap:
        kept, _, full = meter.cut(text, max(0, cap - MARKER_COST))
        text = kept + (f"\n[... pinned block truncated at {cap} of {full} tokens; search_history finds every "
                       "directive and memory]")
    if knowledge:
        text = _knowledge_text(text, knowledge, settings, meter, version, knowledge_order(pinned))
    return text


def render_summary(payload: dict[str, Any], settings: ContextSettings, meter: Meter,
                   version: int | None = None) -> str:
    """``[summary of #a–#b]`` and the summary cut at ``summary_max_tokens``. From v2 the summary (the
    summariser's words, which quote untrusted text) is fenced and goes through ``data``: it cannot spell a
    source tag, and no fence it opens or closes reaches outside the renderer's. ``version``: that of the
    ``context.compacted`` event carrying it (None: the current one)."""
    version = current() if version is None else version
    a = payload.get("covered_from") or 1
    b = payload["covered_to"]
    kept, n, full = meter.cut(payload["summary"], settings.summary_max_tokens)
    if version >= 2:
        text = f"[summary of #{a}–#{b}]\n{fence(data(kept), 'summary')}"
    else:
        text = f"[summary of #{a}–#{b}]\n{kept}"
    if n < full:
        text += f"\n[... summary truncated at {n} of {full} tokens; search_history finds the events it covers]"
    return text
