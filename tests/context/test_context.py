"""The projection: log -> messages, sections, truncation, tool-call pairing, calibration, time travel.

The helpers at the top build synthetic logs shaped like real ticks; the other
context test modules import them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agent.config import PgTarget
from agent.context import (
    PLACEHOLDER,
    Calibration,
    ContextSettings,
    ProjectionCache,
    fits,
    needs_compaction,
    project,
    project_at,
    request_hash,
    update_calibration,
)
from agent.context.inputs import log_request
from agent.context.prompts import load_prompts, render_system
from agent.errors import ConfigError, UsageError
from agent.events import Event
from agent.store.log import EventLog
from agent.times import utc_ts
from tests.tamper import Tamper

POLICY = {"max_instances": 4, "allowed_gpus": ["RTX_4090", "A100"], "max_dph": 0.6}
TOOLS = [{"type": "function", "function": {"name": "search_offers", "description": "Search offers.",
                                           "parameters": {"type": "object", "properties": {}}}}]
SMALL = ContextSettings(budget_tokens=6000, output_reserve=500, tool_output_max_tokens=300,
                        summary_max_tokens=400, pinned_max_tokens=900, knowledge_max_tokens=200)


class Clock:
    """A clock that moves one second per reading."""

    def __init__(self, start: datetime | None = None) -> None:
        self.t = start or datetime(2026, 11, 29, 10, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.t += timedelta(seconds=1)
        return self.t


# Each test runs on SQLite and on PostgreSQL: open_log puts the log of ``path`` in the test's database then,
# one fleet per file name (two paths, two logs, as with files).
pytestmark = pytest.mark.usefixtures("backend")
_PG_URL: list[str | None] = [None]


@pytest.fixture(autouse=True)
def _logs_on_backend(storage_url: str | None) -> Iterator[None]:
    _PG_URL[0] = storage_url
    yield
    _PG_URL[0] = None


def open_log(path: Path) -> EventLog:
    if _PG_URL[0] is None:
        return EventLog(path, clock=Clock())
    return EventLog(PgTarget(_PG_URL[0], "t-" + path.stem, state_dir=path.parent), clock=Clock())


def words(n: int, k: int) -> str:
    return " ".join(f"gpu{(n * 7 + i) % 97}x{i % 13}" for i in range(k))


def observation(n: int, instances: int = 3) -> dict[str, Any]:
    return {"time": 1_795_000_000 + n * 300, "balance": 250.0 - n,
            "instances": [{"id": 1000 + i, "gpu_name": "RTX_4090", "num_gpus": 1, "status": "running",
                           "age_s": 600 * n, "dph": 0.41, "host_id": 7} for i in range(instances)],
            "demand": {"pending": 5 + n % 4, "running": 3, "completed": 10 * n}}


def tick_start(log: EventLog, n: int, **kw: Any) -> Event:
    return log.append("tick.started", {"observation": observation(n, **kw)}, "scheduler", n)


def tool_step(log: EventLog, n: int, outputs: list[int], *, text: str = "", with_results: bool = True) -> list[Event]:
    """One model response with len(outputs) tool calls and (optionally) their results."""
    calls = [{"id": f"call_{n}_{i}", "name": "search_offers", "arguments": json.dumps({"gpu": "RTX_4090", "i": i})}
             for i in range(len(outputs))]
    req = asked(log, n)
    items: list[tuple[str, dict[str, Any], str, int | None]] = [
        ("model.response", {"text": text, "tool_calls": calls, "request_seq": req.seq}, "model", n)]
    if with_results:
        for c, k in zip(calls, outputs, strict=True):
            items.append(("tool.called", {"call_id": c["id"], "name": c["name"], "arguments": c["arguments"]},
                          "tool", n))
            items.append(("tool.result", {"call_id": c["id"], "name": c["name"], "ok": True, "output": words(n, k)},
                          "tool", n))
    return log.append_many(items)


def asked(log: EventLog, n: int) -> Event:
    """The ``model.request`` a tick logs before each model step (its thread reaches the newest event);
    the one just logged, when the caller logged it."""
    last = log.get(log.last_seq())
    if last is not None and last.kind == "model.request":
        return last
    return log.append("model.request", {"request_hash": "", "manifest": {"thread_to": log.last_seq()}}, "system", n)


def final_text(log: EventLog, n: int, text: str | None = None) -> Event:
    req = asked(log, n)
    return log.append("model.response", {"text": text or f"Tick {n}: demand steady, fleet unchanged.",
                                         "tool_calls": [], "request_seq": req.seq}, "model", n)


def simple_tick(log: EventLog, n: int, outputs: tuple[int, ...] = (120, 120)) -> None:
    tick_start(log, n)
    tool_step(log, n, list(outputs))
    final_text(log, n)
    log.append("tick.completed", {"steps": 2}, "scheduler", n)


def proj(log: EventLog, settings: Any = SMALL, prompts: Any = None, **kw: Any):
    return project(log, prompts or load_prompts(None), settings, policy=POLICY, tools=TOOLS, **kw)


# ------------------------------------------------------------------ prompts


def test_prompts_load_with_hashes_and_render_policy_sorted():
    """Built-in prompts load with a sha256 each; the policy fills {policy} as a sorted listing."""
    p = load_prompts(None)
    assert set(p.hashes) == {"system.md", "summarize.md"}
    assert all(len(h) == 64 for h in p.hashes.values())
    text = render_system(p, {"zeta": 1, "alpha": {"b": 2, "a": [1, 2]}})
    assert "{policy}" not in text
    assert text.index("- alpha:") < text.index("- zeta: 1")
    assert text.index("  - a: [1, 2]") < text.index("  - b: 2")


def test_missing_prompt_file_names_path_and_fix(tmp_path):
    """A prompts dir without summarize.md is a ConfigError naming the file and the fix."""
    (tmp_path / "system.md").write_text("charter {policy}")
    with pytest.raises(ConfigError) as e:
        load_prompts(tmp_path)
    assert "summarize.md" in str(e.value) and str(tmp_path) in str(e.value) and "prompts_dir" in str(e.value)


# ------------------------------------------------------------------ shape


def test_sections_in_order_before_any_compaction(tmp_path):
    """Before any compaction the request is the system prompt then the whole thread, nothing pinned."""
    log = open_log(tmp_path / "a.db")
    simple_tick(log, 1)
    p = proj(log)
    assert p.messages[0]["role"] == "system" and "max_instances: 4" in p.messages[0]["content"]
    assert p.messages[1]["content"].startswith("[tick 1 · ")
    assert [m["role"] for m in p.messages[1:]] == ["user", "assistant", "tool", "tool", "assistant"]
    assert p.sections["pinned"] == 0 and p.sections["summary"] == 0
    m = p.manifest
    assert m["covered_to"] == 0 and m["compaction_seq"] is None and m["thread_to"] == log.last_seq()
    assert m["request_hash"] == request_hash("", p.messages, TOOLS)
    assert m["estimated_tokens"] == p.tokens == 3 + sum(p.sections.values())
    tok = log.tokenizer
    assert p.tokens == tok.count_messages(p.messages) + tok.count_tools(TOOLS)


def test_thread_uses_stored_tokens_and_matches_rendering(tmp_path):
    """Thread token counts equal a fresh count of the rendered messages."""
    log = open_log(tmp_path / "a.db")
    for n in range(1, 4):
        simple_tick(log, n)
    p = proj(log)
    thread = p.messages[1:]
    assert p.sections["thread"] == sum(log.tokenizer.count_message(m) for m in thread)


def test_long_tool_output_truncated_the_same_way_every_time(tmp_path):
    """A tool output over tool_output_max_tokens is cut with a marker naming the event, identically later."""
    log = open_log(tmp_path / "a.db")
    tick_start(log, 1)
    evs = tool_step(log, 1, [2000])
    result_seq = evs[-1].seq
    p1 = proj(log)
    tool_msg = p1.messages[-1]
    assert tool_msg["role"] == "tool"
    assert f"event #{result_seq}" in tool_msg["content"] and "search_history" in tool_msg["content"]
    assert log.tokenizer.count_message(tool_msg) < 400
    final_text(log, 1)
    simple_tick(log, 2)
    p2 = proj(log)
    assert p2.messages[: len(p1.messages)] == p1.messages


def test_interrupted_tool_call_gets_placeholder_and_nothing_dropped(tmp_path):
    """A tool call without a result gets a deterministic placeholder right after it; later events stay."""
    log = open_log(tmp_path / "a.db")
    tick_start(log, 1)
    tool_step(log, 1, [50, 50], with_results=False)
    log.append("operator.note", {"text": "restarted the box", "by": "alice"}, "operator", None)
    tick_start(log, 2)
    p = proj(log)
    roles = [m["role"] for m in p.messages]
    assert roles == ["system", "user", "assistant", "tool", "tool", "user", "user"]
    assert all(PLACEHOLDER in m["content"] for m in p.messages[3:5])
    assert [m["tool_call_id"] for m in p.messages[3:5]] == ["call_1_0", "call_1_1"]
    assert "[operator note · alice]" in p.messages[5]["content"]
    assert p.messages[6]["content"].startswith("[tick 2 · ")


def test_note_appended_between_call_and_result_waits_for_the_result(tmp_path):
    """An operator note logged while a tool call runs is shown after the call's results, never between."""
    log = open_log(tmp_path / "a.db")
    tick_start(log, 1)
    ev = tool_step(log, 1, [30], with_results=False)
    call = ev[0].payload["tool_calls"][0]
    log.append("operator.note", {"text": "hold rentals", "by": "bob"}, "operator", None)
    log.append("tool.result", {"call_id": call["id"], "name": call["name"], "ok": True, "output": "3 offers"},
               "tool", 1)
    p = proj(log)
    assert [m["role"] for m in p.messages[2:]] == ["assistant", "tool", "user"]
    assert "3 offers" in p.messages[3]["content"]


def test_late_result_after_placeholder_is_a_tagged_user_message(tmp_path):
    """A result recorded after its call was closed by a placeholder shows as a late-result user message."""
    log = open_log(tmp_path / "a.db")
    tick_start(log, 1)
    tool_step(log, 1, [30], with_results=False)
    tick_start(log, 2)
    log.append("tool.result", {"call_id": "call_1_0", "name": "search_offers", "ok": True, "output": "late",
                               "recovered": True}, "tool", 2)
    p = proj(log)
    last = p.messages[-1]
    assert last["role"] == "user" and last["content"].startswith("[late tool result · call call_1_0]")
    assert "recovered after restart" in last["content"]


def test_until_seq_projects_a_prefix_of_the_log(tmp_path):
    """until_seq limits the thread; a later projection extends the earlier one."""
    log = open_log(tmp_path / "a.db")
    simple_tick(log, 1)
    mid = log.last_seq()
    simple_tick(log, 2)
    early, late = proj(log, until_seq=mid), proj(log)
    assert early.manifest["thread_to"] == mid
    assert late.messages[: len(early.messages)] == early.messages
    assert len(late.messages) > len(early.messages)


# ------------------------------------------------------------------ calibration


def test_calibration_recorded_only_on_real_change_and_read_as_of_view(tmp_path):
    """update_calibration appends only when the smoothed ratio moves > 2%; projections use the ratio at their end."""
    log = open_log(tmp_path / "a.db")
    simple_tick(log, 1)
    before = log.last_seq()
    assert update_calibration(log, 1000, 1010) is None
    ev = update_calibration(log, 1000, 1300)
    assert ev is not None and ev.payload["ratio"] == pytest.approx(1.3)
    ev2 = update_calibration(log, 1000, 1500)
    assert ev2 is not None and ev2.payload["ratio"] == pytest.approx(1.4)
    assert update_calibration(log, 1000, 1410) is None
    assert proj(log, until_seq=before).manifest["calibration"] == 1.0
    p = proj(log)
    assert p.manifest["calibration"] == pytest.approx(1.4)
    cal = Calibration(1.4, SMALL.calibration_margin)
    assert p.manifest["calibrated_tokens"] == cal.calibrated(p.tokens)
    assert Calibration(0.7, 0.05).calibrated(100) == 105


def test_fits_and_needs_compaction_thresholds(tmp_path):
    """fits compares calibrated tokens with budget minus reserve; needs_compaction with high water."""
    log = open_log(tmp_path / "a.db")
    simple_tick(log, 1)
    p = proj(log)
    c = p.calibrated_tokens
    assert fits(p, ContextSettings(budget_tokens=c + 100, output_reserve=100))
    assert not fits(p, ContextSettings(budget_tokens=c + 99, output_reserve=100))
    assert needs_compaction(p, ContextSettings(budget_tokens=c, high_water=0.99))
    assert not needs_compaction(p, ContextSettings(budget_tokens=c * 2, high_water=0.5))


def test_oversized_single_tick_still_fits_by_shrinking_its_largest_outputs(tmp_path):
    """One tick whose tool outputs alone exceed the budget is projected within budget, every message kept."""
    log = open_log(tmp_path / "a.db")
    s = ContextSettings(budget_tokens=3000, output_reserve=300, tool_output_max_tokens=1500)
    tick_start(log, 1)
    tool_step(log, 1, [1400, 1400, 60])
    p1 = proj(log, settings=s)
    p2 = proj(log, settings=s)
    assert fits(p1, s) and p1.manifest["shrunk"] is True
    assert p1.messages == p2.messages
    assert [m["role"] for m in p1.messages] == ["system", "user", "assistant", "tool", "tool", "tool"]
    assert "call_1_2" == p1.messages[-1]["tool_call_id"]


# ------------------------------------------------------------------ time travel


def test_project_at_time_tick_and_seq(tmp_path):
    """--at T projects the events up to T; --tick N the thread of tick N's last request; --seq S up to S."""
    log = open_log(tmp_path / "a.db")
    prompts = load_prompts(None)
    simple_tick(log, 1)
    t1 = log.get(log.last_seq()).ts
    tick_start(log, 2)
    p = proj(log, model="m1")
    log_request(log, p, prompts=prompts, policy=POLICY, tools=TOOLS, tick=2)
    final_text(log, 2)
    kw = dict(policy=POLICY, tools=TOOLS)
    at = project_at(log, prompts, SMALL, at_ts=t1, **kw)
    assert at.manifest["thread_to"] == log.read(0, until_ts=t1, newest_first=True, limit=1).__next__().seq
    by_tick = project_at(log, prompts, SMALL, tick=2, **kw)
    assert by_tick.request_hash == p.request_hash
    by_seq = project_at(log, prompts, SMALL, seq=3, **kw)
    assert by_seq.manifest["thread_to"] == 3
    with pytest.raises(UsageError):
        project_at(log, prompts, SMALL, tick=99, **kw)
    with pytest.raises(UsageError):
        project_at(log, prompts, SMALL, tick=1, seq=2, **kw)
    assert utc_ts(datetime(2026, 11, 29, 10, 0, 3, tzinfo=UTC)) == "2026-11-29T10:00:03.000000Z"


def test_a_row_edited_behind_its_hash_projects_with_its_new_content(tmp_path):
    """A projection renders what the row holds now: a row edited behind its hash (triggers dropped by hand)
    projects with its new content through the same cache, not the old one."""
    log = EventLog(tmp_path / "f.db", clock=Clock())  # edited behind its hash: a SQLite file
    cache = ProjectionCache()
    simple_tick(log, 1)
    log.append("operator.note", {"text": "keep four RTX 4090", "by": "alice"}, "operator")
    first = proj(log, cache=cache)
    assert any("keep four RTX 4090" in (m.get("content") or "") for m in first.messages)
    seq = log.last_seq()
    with Tamper(log.path) as t:
        t.set(seq, payload=json.dumps({"by": "alice", "text": "keep six RTX 3090"}))
    second = proj(log, cache=cache)
    texts = [m.get("content") or "" for m in second.messages]
    assert any("keep six RTX 3090" in t for t in texts)
    assert not any("keep four RTX 4090" in t for t in texts)


def test_the_token_count_cache_stays_within_its_bounds(tmp_path):
    """The cache keeps at most its bound of texts and of characters, however long the thread and however big
    its outputs (a text longer than the character bound is counted but not kept)."""
    log = open_log(tmp_path / "b.db")
    for n in range(1, 6):
        simple_tick(log, n, outputs=(3000, 3000))
    tiny = ProjectionCache(max_entries=3, max_chars=20_000)
    proj(log, cache=tiny)
    assert 0 < tiny.entries <= 3 and tiny.chars <= 20_000
    tiny.clear()
    meter = tiny.meter(log.tokenizer)
    assert meter.count("x" * 30_000) == log.tokenizer.count("x" * 30_000) and tiny.entries == 0
