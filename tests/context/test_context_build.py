"""Properties of the pure build over generated runs of ticks, on in-memory events (no SQLite).

The events are made the way the log makes them (validated payloads, stored
token counts of their rendering), kept in a list; compaction is planned with the
pure steps and its fallback summary; every request is ``build(select(events))``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from agent import events as ev
from agent.context import (
    Projection,
    ProjectionCache,
    build,
    fits,
    load,
    request_payload,
    select,
    tokenizer_for,
)
from agent.context.compaction import Plan, compaction_payload, plan, summarise
from agent.events import Event, render
from agent.events.canonical import canonical
from agent.store.log import EventLog
from agent.times import utc_ts
from tests.context.test_context import POLICY, TOOLS, Clock
from tests.context.test_context_props import PROMPTS, S, _pairs_ok, holds_tick, run, runs

CACHE = ProjectionCache()
METER = CACHE.meter(tokenizer_for(S))
TIGHT = replace(S, budget_tokens=3000, output_reserve=300, tool_output_max_tokens=600)
BUILD = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class MemLog:
    """Events in a list, each made as the log makes it: validated payload, stored token count."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.clock = Clock()

    def append(self, kind: str, payload: dict[str, Any], source: str, tick: int | None = None) -> Event:
        k = ev.kind(kind)
        k.validate(payload)
        seq = len(self.events) + 1
        e = Event(seq=seq, id=f"e{seq}", ts=utc_ts(self.clock()), kind=kind, source=source, tick=tick,
                  payload=json.loads(canonical(payload)), version=k.version, hash=f"h{seq}")
        msg = render(e)
        e = replace(e, tokens=None if msg is None else METER.message(msg))
        self.events.append(e)
        return e

    def append_many(self, items: Any) -> list[Event]:
        return [self.append(*item) for item in items]


def project_mem(events: list[Event], s: Any = S, until_seq: int | None = None) -> Projection:
    return build(select(events, until_seq), prompts=PROMPTS, settings=s, policy=POLICY, tools=TOOLS, meter=METER,
                 model="m")


def mem_step(s: Any) -> Any:
    """The tick loop's step on a MemLog: compact if needed (fallback summary), project, record the request."""
    def step(log: MemLog, n: int, state: dict[str, Any], requests: list[Any]) -> None:
        p = plan(select(log.events), prompts=PROMPTS, settings=s, policy=POLICY, tools=TOOLS, meter=METER,
                 open_alert_ids=[3], owned_instance_ids=[1000])
        if isinstance(p, Plan):
            summary, method, attempts = summarise(p, None, s.summary_max_tokens)
            log.append("context.compacted", compaction_payload(p, summary, method, attempts, prompts=PROMPTS,
                                                               settings=s, policy=POLICY, tools=TOOLS),
                       "system", n)
        proj = project_mem(log.events, s)
        log.append("model.request", request_payload(proj), "system", n)
        requests.append((proj, dict(state["directives"]), dict(state["memory"]), state["tick_seq"], n))
    return step


def _text(p: Projection) -> str:
    return "\n".join(m.get("content") or "" for m in p.messages)


@pytest.mark.slow
@BUILD
@given(runs, st.sampled_from([S, TIGHT]))
def test_build_fits_keeps_newest_tick_and_pinned_items_and_pairs_calls(ticks, s):
    """Every built request stays within budget minus reserve (calibrated), shows the newest tick,
    every active directive and memory, and puts each tool call's results right after it."""
    log = MemLog()
    requests = run(log, ticks, step=mem_step(s))
    event("compacted" if any(p.manifest["compaction_seq"] for p, *_ in requests) else "never compacted")
    event("shrunk" if any(p.manifest["shrunk"] for p, *_ in requests) else "never shrunk")
    for p, directives, memory, tick_seq, n in requests:
        assert fits(p, s), p.manifest["sections"]
        assert p.manifest["covered_to"] < tick_seq
        assert holds_tick(p.messages, n)
        assert _pairs_ok(p.messages)
        text = _text(p)
        for seq, body in directives.items():
            assert f"[operator directive #{seq} · bob] {body}" in text
        for key, body in memory.items():
            assert f"{key}: {body}" in text


@pytest.mark.slow
@BUILD
@given(runs, st.floats(0, 1), st.sampled_from([S, TIGHT]))
def test_build_as_of_seq_equals_building_the_truncated_list(ticks, where, s):
    """Projecting "as of seq N" from the whole list gives the same request as projecting the list cut at N."""
    log = MemLog()
    run(log, ticks, step=mem_step(s))
    n = log.events[min(len(log.events) - 1, int(where * len(log.events)))].seq
    as_of = project_mem(log.events, s, until_seq=n)
    cut = project_mem([e for e in log.events if e.seq <= n], s)
    assert as_of.messages == cut.messages
    assert as_of.manifest == cut.manifest


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs, st.lists(st.floats(0, 1), min_size=1, max_size=4))
def test_load_from_sqlite_equals_select_from_the_list(tmp_path_factory, ticks, wheres):
    """End to end: the inputs the load step reads from a real log file at seq N equal ``select`` over the
    log's events, so the request built from either is the same."""
    d: Path = tmp_path_factory.mktemp("load")
    log = EventLog(d / "l.db", clock=Clock())
    run(log, ticks)
    events = list(log.read(0))
    for w in wheres:
        n = events[min(len(events) - 1, int(w * len(events)))].seq
        assert load(log, n) == select(events, n)
    assert load(log) == select(events)
    log.close()
