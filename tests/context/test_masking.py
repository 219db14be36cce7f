"""Old tool outputs are masked at compaction time, before anything is summarised.

At a compaction, tool results older than the newest ``context.mask_after_ticks`` ticks become one-line
stubs in the projection (the call stays in the assistant's message, the outcome in the result's header, and
the stub names the event that holds the output). The rule is carried by the ``context.compacted`` event
(``masked_to``), so it is deterministic and replayable and changes nothing between compactions. Masking
happens only together with a summary: the new summary changes the request from its place on, so the stubs
after it cost the prompt cache nothing; masking alone would rewrite the middle of a cached request. Logs
written when masking-only compactions were made still replay.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from agent.context import ContextSettings
from agent.events import Event
from tests.context.test_context_build import MemLog, mem_step
from tests.context.test_context_props import S, run

TICKS = [{"outputs": [600, 600], "feedback": "none", "crash": False} for _ in range(14)]


def _tool_contents(p: Any) -> list[str]:
    return [m["content"] for m in p.messages if m["role"] == "tool"]


def test_old_outputs_become_stubs_and_the_newest_ticks_stay_verbatim() -> None:
    """After a compaction that masks, every tool result before the newest tick is a one-line stub naming
    its event; the results of the newest tick are shown as before."""
    s = replace(S, budget_tokens=10000, low_water=0.4, mask_after_ticks=1, tool_output_max_tokens=700)
    log = MemLog()
    requests = run(log, TICKS, step=mem_step(s))
    comps = [e for e in log.events if e.kind == "context.compacted"]
    assert comps and any(c.payload.get("masked_to") for c in comps)
    last = comps[-1]
    p = requests[-1][0]
    masked_to = last.payload["masked_to"]
    results = [e for e in log.events if e.kind == "tool.result" and e.seq > last.payload["covered_to"]]
    contents = _tool_contents(p)
    assert len(contents) == len(results)
    for e, c in zip(results, contents, strict=True):
        if masked_to is not None and e.seq <= masked_to:
            assert "(output masked at compaction: " in c and f"event #{e.seq} has it" in c
            assert len(c.splitlines()) == 4   # the result's header, the fence, the one-line stub, the fence
        else:
            assert e.payload["output"][:200] in c


def test_between_compactions_each_request_extends_the_previous_one() -> None:
    """Masking is applied only at a compaction: every request made under the same compaction is a
    message prefix of the next."""
    s = replace(S, mask_after_ticks=2, tool_output_max_tokens=700)
    requests = [r[0] for r in run(MemLog(), TICKS, step=mem_step(s))]
    pairs = [(a, b) for a, b in zip(requests, requests[1:], strict=False)
             if a.manifest["compaction_seq"] == b.manifest["compaction_seq"]]
    assert pairs and all(b.messages[:len(a.messages)] == a.messages for a, b in pairs)


MASK_ONLY = ContextSettings(budget_tokens=8000, output_reserve=500, high_water=0.8, low_water=0.5,
                            tool_output_max_tokens=1000, summary_max_tokens=400, mask_after_ticks=1)


class UncountedLog(MemLog):
    """Events as the log appends them since token counting moved off the append path: no stored count
    (the projection counts each message when it renders it)."""

    def append(self, kind: str, payload: dict[str, Any], source: str, tick: int | None = None) -> Event:
        e = replace(super().append(kind, payload, source, tick), tokens=None)
        self.events[-1] = e
        return e


@pytest.mark.parametrize("make_log", [MemLog, UncountedLog], ids=["stored counts", "no stored counts"])
def test_masking_never_happens_without_a_summary(make_log: Any) -> None:
    """Even when the outputs are most of the request (masking alone would bring it under low water), every
    compaction summarises: the outputs it masks all follow the new summary, whose bytes are new anyway, and
    the request after it keeps the system prompt and the pinned block of the request before it; whether or
    not the events carry a stored token count."""
    log = make_log()
    ticks = [{"outputs": [900], "feedback": "note" if n % 3 == 0 else "none", "crash": False} for n in range(12)]
    requests = [r[0] for r in run(log, ticks, step=mem_step(MASK_ONLY))]
    comps = [e.payload for e in log.events if e.kind == "context.compacted"]
    assert comps and all(c["summarised"] and c["method"] != "masked" and c["covered_to"] > 0 for c in comps)
    assert any(c["masked_to"] is not None for c in comps)
    assert all(c["masked_to"] is None or c["masked_to"] >= c["first_kept_seq"] for c in comps)
    for a, b in zip(requests, requests[1:], strict=False):
        if a.manifest["compaction_seq"] == b.manifest["compaction_seq"]:
            assert b.messages[:len(a.messages)] == a.messages
            continue
        first = next(i for i, (x, y) in enumerate(zip(a.messages, b.messages, strict=False)) if x != y)
        head = 2 if str(a.messages[1]["content"]).startswith("[pinned · ") else 1
        assert str(b.messages[first]["content"]).startswith(("[summary of", "[pinned · "))
        assert first >= 1 and (first >= head or b.messages[1] != a.messages[1])


def test_zero_turns_masking_off() -> None:
    """``mask_after_ticks: 0``: no compaction masks anything; each one summarises."""
    log = MemLog()
    run(log, TICKS, step=mem_step(replace(S, mask_after_ticks=0, tool_output_max_tokens=700)))
    comps = [e.payload for e in log.events if e.kind == "context.compacted"]
    assert comps and all(c.get("masked_to") is None and c["method"] == "fallback" for c in comps)


def test_requests_after_masking_compactions_replay(tmp_path: Any, capsys: Any) -> None:
    """On a real log, with summarising compactions that mask and masking-only compactions as earlier
    versions made them, replay --verify re-derives every agent and summariser request."""
    from agent.context import assemble, load, make_view, meter_for, project
    from agent.context.compaction import Plan, compact, compaction_payload, mask_point
    from agent.context.inputs import log_request
    from agent.store.log import EventLog
    from tests.context.test_context import TOOLS
    from tests.context.test_replay_inputs import Summariser, make_app, verify

    app = make_app(tmp_path)
    s = replace(MASK_ONLY, budget_tokens=9000)
    app.settings.context = s

    def masking_only(log: EventLog, n: int) -> None:
        """A compaction that only masks, as versions before masking waited for a summary appended it."""
        meter = meter_for(s, None)
        v = make_view(load(log), prompts=app.prompts, settings=s, policy=app.policy, tools=TOOLS, meter=meter)
        masked_to = mask_point(v, s)
        if masked_to is None:
            return
        before = assemble(v, s, model="m", tools=TOOLS, prompts=app.prompts, policy=app.policy)
        prev = v.compaction.payload if v.compaction else None
        plan = Plan(v, before, None, [], prev, [], [3], [1000], masked_to=masked_to)
        log.append("context.compacted", compaction_payload(
            plan, plan.previous_summary, "masked", [], prompts=app.prompts, settings=s, policy=app.policy,
            tools=TOOLS, model_name="m"), "system", n)

    def step(log: EventLog, n: int, state: dict[str, Any], requests: list[Any]) -> None:
        if n % 5 == 3:
            masking_only(log, n)
        compact(log, app.prompts, s, policy=app.policy, tools=TOOLS, summarizer=Summariser(), tick=n,
                open_alert_ids=[3], owned_instance_ids=[1000], model_name="m")
        p = project(log, app.prompts, s, policy=app.policy, tools=TOOLS, model="m")
        log_request(log, p, prompts=app.prompts, policy=app.policy, tools=TOOLS, tick=n)

    run(app.log, [{"outputs": [900, 300], "feedback": f, "crash": False}
                  for f in ("note", "none", "directive", "none", "ack", "none") * 3], step=step)
    methods = {e.payload["method"] for e in app.log.read(0, kinds=["context.compacted"])}
    assert "masked" in methods and methods - {"masked"}
    code, out = verify(app, capsys)
    assert code == 0, out
