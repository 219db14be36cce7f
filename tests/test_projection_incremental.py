"""A projection through a ProjectionCache that is fed one event at a time (the kept pass over the thread
resumed, the loaded inputs extended, the request hashed on from the last one's state, its inputs compared once)
gives, at every event of a varied history, exactly the projection a fresh cache builds from the log: messages,
manifest, request hash, token sections. The history holds compactions that summarise and mask, late tool
results, calls left without results, outputs cut at their cap, floods of knowledge changes, calibrations and a
budget so tight that some requests are cut and lose their oldest messages."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from agent.context import ContextSettings, ProjectionCache, project
from agent.context.prompts import load_prompts
from agent.store.log import EventLog
from tests.test_context import POLICY, TOOLS, Clock, final_text, simple_tick, tick_start, tool_step

SETTINGS = ContextSettings(budget_tokens=30_000, output_reserve=500, tool_output_max_tokens=300)
PROMPTS = load_prompts(None)


def _compacted(log: EventLog, tick: int, *, masked_to: int | None, summary: str) -> None:
    starts = [e.seq for e in log.read(0, kinds=["tick.started"])]
    first_kept = starts[-2]
    log.append("context.compacted", {"summary": summary, "covered_to": first_kept - 1, "method": "llm",
                                     "covered_from": 1, "first_kept_seq": first_kept, "masked_to": masked_to,
                                     "summarised": True, "pinned": {"knowledge": {"a.md": "keep four"},
                                                                    "knowledge_seq": {"a.md": 3}}},
               "system", tick)


def _late_result_tick(log: EventLog, n: int) -> None:
    """A tick whose calls get no result before it ends; their results arrive at the start of the next."""
    tick_start(log, n)
    calls = tool_step(log, n, [50, 50], with_results=False)[0].payload["tool_calls"]
    log.append("operator.note", {"text": f"note while waiting {n}", "by": "alice"}, "operator", n)
    final_text(log, n)
    log.append("tick.completed", {"steps": 1}, "scheduler", n)
    tick_start(log, n + 1)
    for c in calls:
        log.append("tool.result", {"call_id": c["id"], "name": c["name"], "ok": True, "output": f"late {c['id']}"},
                   "tool", n + 1)
    final_text(log, n + 1)


def _history(log: EventLog) -> None:
    for n in range(1, 4):
        simple_tick(log, n)
    simple_tick(log, 4, outputs=(900, 40))   # an output over its cap: cut behind a marker
    _late_result_tick(log, 5)
    log.append("context.calibrated", {"ratio": 1.12}, "system", 6)
    tick_start(log, 7)
    for k in range(12):   # a flood: one message once it passes the size at which it collapses
        log.append("knowledge.changed", {"name": f"k{k}.md", "change": "added", "hash": f"h{k}", "size": 5,
                                         "diff": "", "text": "hello"}, "operator", 7)
    final_text(log, 7)
    _compacted(log, 7, masked_to=None, summary="## Completed actions\n- rented #103")
    for n in range(8, 11):
        simple_tick(log, n, outputs=(400, 150))
    _compacted(log, 10, masked_to=log.last_seq() - 3, summary="## Completed actions\n- rented #104")
    simple_tick(log, 11, outputs=(700, 700))
    _late_result_tick(log, 12)


def _fields(p: Any) -> tuple[Any, ...]:
    return (p.messages, p.manifest, p.tokens, p.sections, p.shrink_notes)


def _walk(log: EventLog, settings: ContextSettings) -> tuple[int, int, set[str]]:
    """Project at every seq through one cache, each against a fresh one; (requests compared, those cut, what
    was seen: 'masked' stubs, 'late' results, 'dropped' oldest messages)."""
    cache = ProjectionCache()
    compared = cut = 0
    seen: set[str] = set()
    for seq in range(1, log.last_seq() + 1):
        kw: dict[str, Any] = {"policy": POLICY, "tools": TOOLS, "until_seq": seq, "model": "m",
                              "params": {"temperature": 0.2}}
        kept = project(log, PROMPTS, settings, cache=cache, **kw)
        fresh = project(log, PROMPTS, settings, cache=ProjectionCache(), **kw)
        assert _fields(kept) == _fields(fresh), f"the request as of #{seq} differs when built on the kept pass"
        compared += 1
        cut += bool(fresh.shrink_notes)
        text = "\n".join(str(m.get("content")) for m in fresh.messages)
        seen |= {w for w, mark in (("masked", "(output masked at compaction"), ("late", "[late tool result"),
                                   ("dropped", "not shown for space")) if mark in text}
    return compared, cut, seen


def test_an_incremental_build_equals_a_full_build_event_by_event(tmp_path: Path) -> None:
    """At every seq of a history with compactions (summarising and masking), late results, cut outputs, a
    knowledge flood and a calibration, the projection built on the kept pass equals the one built from
    scratch, field by field."""
    log = EventLog(tmp_path / "a.db", clock=Clock())
    _history(log)
    kinds = {e.kind for e in log.read(0)}
    assert {"context.compacted", "context.calibrated", "knowledge.changed", "operator.note"} <= kinds
    compared, _, seen = _walk(log, SETTINGS)
    assert compared == log.last_seq() and {"masked", "late"} <= seen


def test_requests_cut_to_fit_are_the_same_built_either_way(tmp_path: Path) -> None:
    """Under a budget so tight that many requests are cut (outputs truncated, the oldest messages left out),
    every request built on the kept pass still equals the one built from scratch, and the cut does not
    reach the requests after it."""
    log = EventLog(tmp_path / "b.db", clock=Clock())
    _history(log)
    full = project(log, PROMPTS, SETTINGS, policy=POLICY, tools=TOOLS).manifest["estimated_tokens"]
    tight = replace(SETTINGS, budget_tokens=SETTINGS.output_reserve + full // 2)
    compared, cut, seen = _walk(log, tight)
    assert compared == log.last_seq() and cut > 0 and "dropped" in seen


def test_inputs_changed_in_place_within_a_run_of_projections_are_seen(tmp_path: Path) -> None:
    """The policy and tools a run of projections shares, changed in place between two of them, give the
    request a fresh cache gives: a projection compares each input with its kept copy once, and the next one
    compares again."""
    import copy

    log = EventLog(tmp_path / "c.db", clock=Clock())
    _history(log)
    policy, tools = copy.deepcopy(POLICY), copy.deepcopy(TOOLS)
    cache = ProjectionCache()
    hashes: list[str] = []
    for step in range(4):
        if step == 1:
            tools[0]["function"]["description"] = "changed in place"
        if step == 2:
            policy[sorted(policy)[0]] = "changed in place"
        kept = project(log, PROMPTS, SETTINGS, policy=policy, tools=tools, cache=cache)
        fresh = project(log, PROMPTS, SETTINGS, policy=copy.deepcopy(policy), tools=copy.deepcopy(tools))
        assert _fields(kept) == _fields(fresh)
        hashes.append(kept.request_hash)
    assert hashes[0] != hashes[1] != hashes[2] == hashes[3]
