"""A projection through a ProjectionCache extends the inputs the last one loaded instead of reading the thread
again; the request it builds is always exactly the one a projection without a cache builds from the log as it
is: after appends, after another connection changed a row, after an append this connection rolled back, and
across a compaction."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.context import ContextSettings, ProjectionCache, project
from agent.context.load import load
from agent.context.prompts import load_prompts
from agent.store.log import EventLog
from tests.tamper import Tamper
from tests.test_context import POLICY, TOOLS, Clock, simple_tick, tick_start, tool_step

SETTINGS = ContextSettings(budget_tokens=30_000, output_reserve=500, tool_output_max_tokens=300)


def _project(log: EventLog, cache: ProjectionCache | None) -> Any:
    return project(log, load_prompts(None), SETTINGS, policy=POLICY, tools=TOOLS, cache=cache)


def _same_as_afresh(log: EventLog, cache: ProjectionCache) -> Any:
    """The projection through ``cache``, checked against one without a cache (messages and manifest)."""
    cached, fresh = _project(log, cache), _project(log, None)
    assert cached.messages == fresh.messages
    assert cached.manifest == fresh.manifest
    return cached


@pytest.fixture
def log(tmp_path: Path) -> EventLog:
    log = EventLog(tmp_path / "a.db", clock=Clock())
    for n in range(1, 4):
        simple_tick(log, n)
    return log


def test_appends_extend_the_loaded_inputs_and_the_request_is_exact(log: EventLog) -> None:
    """After the first projection, the next loads only what was appended since (the inputs it returns hold the
    very Event objects loaded before), and each request equals a projection from scratch."""
    cache = ProjectionCache()
    first = _same_as_afresh(log, cache)
    loaded = cache.loaded[2]
    simple_tick(log, 4)
    second = _same_as_afresh(log, cache)
    again = cache.loaded[2]
    assert again.events[: len(loaded.events)] == loaded.events
    assert all(a is b for a, b in zip(again.events, loaded.events, strict=False))
    assert again.end == log.last_seq() > loaded.end
    assert second.messages[: len(first.messages)] == first.messages


def test_a_row_changed_by_another_connection_is_seen(log: EventLog) -> None:
    """A row of the thread rewritten through another connection (data_version moves) is read again: the request
    shows the row as it now is, as a projection from scratch does."""
    cache = ProjectionCache()
    before = _same_as_afresh(log, cache)
    seq = next(e.seq for e in log.read(0, kinds=["tool.result"]))
    text = log.get(seq).payload["output"].split()[0]  # type: ignore[union-attr]
    with Tamper(log.path) as t:  # type: ignore[arg-type]
        t.replace_in_payload(seq, text, "REWRITTEN")
    after = _same_as_afresh(log, cache)
    assert after.messages != before.messages
    assert any("REWRITTEN" in str(m.get("content")) for m in after.messages)


def test_an_append_rolled_back_after_a_projection_saw_it_is_not_kept(log: EventLog) -> None:
    """A projection inside a transaction sees what it appended; when that rolls back, the next projection
    does not keep the row it saw (a different event now has its seq) and equals one from scratch."""
    cache = ProjectionCache()
    _same_as_afresh(log, cache)
    with pytest.raises(RuntimeError), log.transaction():
        tick_start(log, 9)
        inside = _project(log, cache)
        assert "[tick 9 · " in inside.messages[-1]["content"]
        raise RuntimeError("rolled back")
    tick_start(log, 5)
    after = _same_as_afresh(log, cache)
    assert "[tick 5 · " in after.messages[-1]["content"]
    assert not any("[tick 9 · " in str(m.get("content")) for m in after.messages)


def test_a_compaction_or_a_calibration_appended_since_is_taken_in(log: EventLog) -> None:
    """A calibration appended after the loaded inputs moves the ratio the next request is built with, and a
    compaction appended after them makes the next load read the thread from the compaction on."""
    cache = ProjectionCache()
    _same_as_afresh(log, cache)
    log.append("context.calibrated", {"ratio": 1.25}, "system", 3)
    p = _same_as_afresh(log, cache)
    assert p.manifest["calibration"] == 1.25
    cut = log.last_seq()
    log.append("context.compacted", {"summary": "earlier ticks: steady", "covered_to": cut, "method": "fallback",
                                     "pinned": {}, "tokens_before": 1, "tokens_after": 1}, "system", 3)
    tick_start(log, 4)
    tool_step(log, 4, [50])
    p = _same_as_afresh(log, cache)
    assert p.manifest["covered_to"] == cut
    assert cache.loaded[2].compaction.seq == cut + 1
    assert [e.seq for e in cache.loaded[2].events] == [e.seq for e in load(log).events]


def test_the_request_hash_is_the_hash_of_the_canonical_request(log: EventLog) -> None:
    """The manifest's request and tools hashes (the tools encoded once for both) are those of the canonical JSON
    of what is sent, with and without model parameters, for tools whose text is not ASCII."""
    from agent.context import request_hash
    from agent.context.build import tools_hash

    tools = [*TOOLS, {"type": "function", "function": {"name": "note", "description": "Écrit une note « ici ».",
                                                       "parameters": {"type": "object", "properties": {}}}}]
    for params in (None, {"temperature": 0.2, "tool_choice": "auto", "max_tokens": 512}):
        p = project(log, load_prompts(None), SETTINGS, policy=POLICY, tools=tools, model="m-1", params=params)
        assert p.request_hash == request_hash("m-1", p.messages, tools, params)
        assert p.manifest["tools_hash"] == tools_hash(tools)


def _knowledge(log: EventLog, name: str, tick: int) -> None:
    log.append("knowledge.changed", {"name": name, "change": "added", "hash": f"h{name}", "size": 5, "diff": "",
                                     "text": "hello"}, "operator", tick)


def test_the_kept_pass_over_the_thread_goes_on_exactly_where_it_stopped(log: EventLog) -> None:
    """The pass over the thread the cache keeps is fed only what was appended since: calls still waiting for
    their results (placeholders now, results later), a run of knowledge changes that grows past the size at
    which it becomes one message across two projections; every request equals a projection from scratch, and
    the pass is resumed (not rebuilt) each time."""
    cache = ProjectionCache()
    _same_as_afresh(log, cache)
    tick_start(log, 4)
    waiting = tool_step(log, 4, [40, 40], with_results=False)
    p = _same_as_afresh(log, cache)
    assert sum("interrupted: no result recorded yet" in str(m.get("content")) for m in p.messages) == 2
    for n, c in enumerate(waiting[0].payload["tool_calls"]):
        log.append("tool.result", {"call_id": c["id"], "name": c["name"], "ok": True, "output": f"out {n}"},
                   "tool", 4)
    p = _same_as_afresh(log, cache)
    assert not any("interrupted" in str(m.get("content")) for m in p.messages)
    tick_start(log, 5)
    for n in range(5):
        _knowledge(log, f"k{n}.md", 5)
    p = _same_as_afresh(log, cache)
    assert sum("[knowledge edit · k" in str(m.get("content")) for m in p.messages) == 5
    for n in range(5, 10):
        _knowledge(log, f"k{n}.md", 5)
    fed = []
    for pass_ in cache._threads.values():  # noqa: SLF001 - the pass kept, to see it is the one resumed
        fed.append(len(pass_.fed))
    p = _same_as_afresh(log, cache)
    assert sum("[knowledge edit · 10 files]" in str(m.get("content")) for m in p.messages) == 1
    assert [len(b.fed) for b in cache._threads.values()][0] > fed[0]  # noqa: SLF001


def test_a_budget_cut_does_not_reach_the_kept_pass(log: EventLog) -> None:
    """A request cut to fit a small budget (tool outputs truncated behind a marker) equals one from scratch,
    and the next request at the full budget, through the same cache, is the uncut one again, as a
    projection from scratch is: the cut changed copies, not the entries the kept pass shares."""
    from dataclasses import replace

    cache = ProjectionCache()
    whole = _same_as_afresh(log, cache)
    full = whole.manifest["estimated_tokens"]
    tight = replace(SETTINGS, budget_tokens=SETTINGS.output_reserve + full - 150)
    cut = project(log, load_prompts(None), tight, policy=POLICY, tools=TOOLS, cache=cache)
    assert cut.shrink_notes and cut.manifest == project(log, load_prompts(None), tight, policy=POLICY,
                                                         tools=TOOLS).manifest
    assert cut.messages != whole.messages
    again = _same_as_afresh(log, cache)
    assert again.messages == whole.messages and again.request_hash == whole.request_hash


def test_a_policy_or_tools_changed_in_place_are_seen(log: EventLog) -> None:
    """The cache keeps the system prompt and the tools' encodings made for the very policy and tools objects it
    was given; the same objects changed in place since (a value of the policy, a tool's description) give the
    request a projection from scratch gives, not the one kept."""
    import copy

    policy, tools = copy.deepcopy(POLICY), copy.deepcopy(TOOLS)
    cache = ProjectionCache()

    def both() -> tuple[Any, Any]:
        a = project(log, load_prompts(None), SETTINGS, policy=policy, tools=tools, cache=cache)
        b = project(log, load_prompts(None), SETTINGS, policy=copy.deepcopy(policy), tools=copy.deepcopy(tools))
        assert a.messages == b.messages and a.manifest == b.manifest
        return a, b

    before, _ = both()
    key = sorted(policy)[0]
    policy[key] = "changed in place"
    after, _ = both()
    assert after.messages[0] != before.messages[0]
    assert after.manifest["policy_hash"] != before.manifest["policy_hash"]
    tools[0]["function"]["description"] = "changed in place"
    last, _ = both()
    assert last.manifest["tools_hash"] != after.manifest["tools_hash"]
    assert last.request_hash != after.request_hash


def test_stable_hands_back_the_kept_object_only_while_equal() -> None:
    """``stable`` returns the object kept under a name while the new value equals it, so successive ticks
    share one object; an unequal value (or one of another type) replaces it."""
    cache = ProjectionCache()
    first = [{"a": 1}]
    assert cache.stable("tools", first) is first
    assert cache.stable("tools", [{"a": 1}]) is first
    other = [{"a": 2}]
    assert cache.stable("tools", other) is other
    assert cache.stable("tools", ({"a": 2},)) == ({"a": 2},)
