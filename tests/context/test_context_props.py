"""Properties of the projection over generated runs of ticks (hypothesis).

Each run drives the loop a tick uses: observe, take feedback, compact if
needed, project, record the request, then the model's tool calls and results.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.context import ContextSettings, fits, project, project_at, request_payload
from agent.context.compaction import compact
from agent.context.prompts import load_prompts
from agent.store.log import EventLog
from tests.context.test_context import POLICY, TOOLS, Clock, observation, words

PROMPTS = load_prompts(None)
S = ContextSettings(budget_tokens=5000, output_reserve=400, tool_output_max_tokens=300, summary_max_tokens=300,
                    pinned_max_tokens=900, knowledge_max_tokens=150)
FEEDBACK = ("none", "note", "directive", "memory", "ack", "knowledge", "unpin")

tick_spec = st.fixed_dictionaries({
    "outputs": st.lists(st.integers(5, 700), max_size=3),
    "feedback": st.sampled_from(FEEDBACK),
    "crash": st.integers(0, 9).map(lambda x: x == 0),
})
runs = st.lists(tick_spec, min_size=1, max_size=14)
PROPS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _feedback(log: Any, n: int, kind: str, state: dict[str, Any]) -> None:
    if kind == "note":
        log.append("operator.note", {"text": f"note at tick {n}", "by": "alice"}, "operator", None)
    elif kind == "directive":
        e = log.append("operator.note", {"text": f"standing order {n}", "by": "bob", "pin": True}, "operator", None)
        state["directives"][e.seq] = f"standing order {n}"
    elif kind == "unpin" and state["directives"]:
        d = min(state["directives"])
        log.append("directive.unpinned", {"directive_id": d, "by": "bob"}, "operator", None)
        del state["directives"][d]
    elif kind == "ack":
        log.append("alert.acked", {"alert_id": 3, "by": "carol", "title": "disk full", "note": "cleaned"},
                   "operator", None)
    elif kind == "knowledge":
        log.append("knowledge.changed", {"name": "notes.md", "change": "added" if n == 1 else "changed",
                                         "hash": f"h{n}", "size": 100, "text": words(n, 60), "diff": "+x"},
                   "system", n)


def _step(log: Any, n: int, state: dict[str, Any], requests: list[Any]) -> None:
    compact(log, PROMPTS, S, policy=POLICY, tools=TOOLS, summarizer=None, tick=n, open_alert_ids=[3],
            owned_instance_ids=[1000])
    p = project(log, PROMPTS, S, policy=POLICY, tools=TOOLS, model="m")
    log.append("model.request", request_payload(p), "system", n)
    requests.append((p, dict(state["directives"]), dict(state["memory"]), state["tick_seq"], n))


def _last_seq(log: Any) -> int:
    """The seq of the event just appended (the step's ``model.request``)."""
    return int(log.events[-1].seq if hasattr(log, "events") else log.last_seq())


def run(log: Any, ticks: list[dict[str, Any]], step: Callable[..., None] = _step) -> list[Any]:
    """Drive ``ticks`` through ``log`` (anything with append and append_many); ``step`` compacts if needed,
    projects and records the request. Returns (projection, directives, memory, tick seq, tick) per request."""
    state: dict[str, Any] = {"directives": {}, "memory": {}, "tick_seq": 0}
    requests: list[Any] = []
    for n, spec in enumerate(ticks, 1):
        state["tick_seq"] = log.append("tick.started", {"observation": observation(n)}, "scheduler", n).seq
        _feedback(log, n, spec["feedback"], state)
        step(log, n, state, requests)
        calls = [{"id": f"c{n}_{i}", "name": "search_offers", "arguments": json.dumps({"i": i})}
                 for i in range(len(spec["outputs"]))]
        if spec["feedback"] == "memory":
            calls.append({"id": f"c{n}_m", "name": "remember", "arguments": json.dumps({"key": f"k{n}"})})
        log.append("model.response", {"text": "", "tool_calls": calls, "request_seq": _last_seq(log)}, "model", n)
        if spec["crash"]:
            continue  # the tick died mid-call: no results, no final answer
        for c, k in zip(calls, spec["outputs"], strict=False):
            log.append("tool.result", {"call_id": c["id"], "name": c["name"], "ok": True, "output": words(n, k)},
                       "tool", n)
        if spec["feedback"] == "memory":
            log.append_many([
                ("memory.written", {"key": f"k{n}", "text": f"fact {n}"}, "model", n),
                ("tool.result", {"call_id": f"c{n}_m", "name": "remember", "ok": True,
                                 "output": f"remembered k{n}: fact {n}"}, "tool", n),
            ])
            state["memory"][f"k{n}"] = f"fact {n}"
        step(log, n, state, requests)
        log.append("model.response", {"text": f"Tick {n} done.", "tool_calls": [], "request_seq": _last_seq(log)},
                   "model", n)
        log.append("tick.completed", {"steps": 2}, "scheduler", n)
    return requests


def holds_tick(messages: list[dict[str, Any]], n: int) -> bool:
    """The request shows tick ``n``'s observation message exactly once."""
    return sum((m.get("content") or "").startswith(f"[tick {n} · ") for m in messages) == 1


def _pairs_ok(messages: list[dict[str, Any]]) -> bool:
    i = 0
    while i < len(messages):
        m = messages[i]
        if m["role"] == "tool":
            return False  # a tool message not directly after its call
        if m.get("tool_calls"):
            ids = [c["id"] for c in m["tool_calls"]]
            got = [x.get("tool_call_id") for x in messages[i + 1: i + 1 + len(ids)]]
            if sorted(got, key=str) != sorted(ids):
                return False
            i += 1 + len(ids)
            continue
        i += 1
    return True


@PROPS
@given(runs)
def test_every_request_fits_pairs_calls_keeps_newest_tick_and_pinned_items(ticks):
    """Every request fits budget minus reserve, never splits a call from its result, holds the newest
    tick whole, shows every active directive and memory, and extends the previous request between compactions."""
    with tempfile.TemporaryDirectory() as d:
        log = EventLog(Path(d) / "p.db", clock=Clock())
        requests = run(log, ticks)
        prev = None
        for p, directives, memory, tick_seq, n in requests:
            assert fits(p, S), p.manifest["sections"]
            assert _pairs_ok(p.messages)
            assert p.manifest["covered_to"] < tick_seq
            text = "\n".join(m.get("content") or "" for m in p.messages)
            assert holds_tick(p.messages, n)
            for seq, body in directives.items():
                assert f"[operator directive #{seq} · bob] {body}" in text
            for key, body in memory.items():
                assert f"{key}: {body}" in text
            if prev is not None and prev.manifest["compaction_seq"] == p.manifest["compaction_seq"] \
                    and not prev.manifest["shrunk"] and not p.manifest["shrunk"]:
                assert p.messages[: len(prev.messages)] == prev.messages
            prev = p
        log.close()


@pytest.mark.slow
@PROPS
@given(runs, st.floats(0, 1))
def test_as_of_time_equals_projecting_the_truncated_log(ticks, where):
    """Projecting "as of T" gives the same request as projecting a copy of the log cut at T."""
    with tempfile.TemporaryDirectory() as d:
        log = EventLog(Path(d) / "p.db", clock=Clock())
        run(log, ticks)
        events = list(log.read(0))
        cut = events[min(len(events) - 1, int(where * len(events)))]
        at = project_at(log, PROMPTS, S, policy=POLICY, tools=TOOLS, model="m", at_ts=cut.ts)
        times = iter(datetime.fromisoformat(e.ts.replace("Z", "+00:00")) for e in events)
        copy = EventLog(Path(d) / "copy.db", clock=lambda: next(times))
        copy.append_many((e.kind, e.payload, e.source, e.tick) for e in events if e.seq <= cut.seq)
        again = project(copy, PROMPTS, S, policy=POLICY, tools=TOOLS, model="m")
        assert at.messages == again.messages
        assert at.request_hash == again.request_hash
        assert at.manifest == again.manifest
        log.close()
        copy.close()


GOLDEN_TICKS = ("directive", "memory", "note", "knowledge", "ack", "none", "directive", "memory", "unpin", "none",
                "knowledge", "memory", "none", "directive")


def _golden_run(tmp_path: Path, outputs: list[int], s: ContextSettings) -> tuple[list[Any], list[int], str]:
    ticks = [{"outputs": outputs[: 1 + n % 3], "feedback": f, "crash": n == 7} for n, f in enumerate(GOLDEN_TICKS)]
    log = EventLog(tmp_path / f"golden-{s.budget_tokens}.db", clock=Clock())

    def step(log: EventLog, n: int, state: dict[str, Any], requests: list[Any]) -> None:
        compact(log, PROMPTS, s, policy=POLICY, tools=TOOLS, summarizer=None, tick=n, open_alert_ids=[3],
                owned_instance_ids=[1000])
        log.append("model.request", request_payload(project(log, PROMPTS, s, policy=POLICY, tools=TOOLS,
                                                            model="m")), "system", n)

    run(log, ticks, step=step)
    reqs = list(log.read(0, kinds=["model.request"]))
    comps = [e.seq for e in log.read(0, kinds=["context.compacted"])]
    digest = hashlib.sha256("\n".join(e.payload["request_hash"] for e in reqs).encode()).hexdigest()
    log.close()
    return reqs, comps, digest


def test_request_bytes_of_a_fixed_run_are_pinned(tmp_path):
    """The request hashes of two fixed runs (one roomy, one tight enough to shrink outputs and compact
    often) equal the ones recorded before the projection became a package: what the model sees, and
    therefore replay of every older log, did not change. A change here is a change to the requests.
    The digests moved once on purpose, when tick.started, tool.result, alert.*, knowledge.changed and
    context.compacted gained version 2 renderings (escaped untrusted text, a fenced summary, the agent's
    memory labelled as the agent's): new events of this run render under those; logs written before keep
    their bytes.
    They moved again when compaction stopped cutting past the newest event of an answered request (the
    cuts, not the renderings, moved), and when context.compacted gained version 3 (knowledge files most
    recently changed first, old tool outputs masked at compaction, facts after the summary, caps per
    pinned block; the cut also leaves room for the facts), and when it gained version 5 (the operator's
    notes, acks and withdrawals carried verbatim in the pinned block: a larger block, earlier cuts), and when
    system.md gained its "Each tick" steps (a longer system prompt: earlier cuts in these small budgets)."""
    reqs, comps, digest = _golden_run(tmp_path, [400, 200, 650], S)
    assert (len(reqs), comps) == (27, [34, 53, 75, 92, 108])
    assert digest == "bbd1fa667a77c1ea27b5fd54125a11b8653a8e098f677fdc04829585f63ed283"
    tight = replace(S, budget_tokens=3000, output_reserve=300, tool_output_max_tokens=900)
    reqs, comps, digest = _golden_run(tmp_path, [700, 650, 690], tight)
    assert (len(reqs), sum(e.payload["manifest"]["shrunk"] for e in reqs)) == (27, 11)
    assert comps == [16, 22, 28, 34, 38, 44, 49, 54, 60, 66, 70, 75, 85, 90, 94, 100, 105, 110, 118, 123, 127, 133, 138]
    assert digest == "ddefa15863b0b17585884729a50e1b4862bd560f7fed2e58ddf866662a956cd8"
