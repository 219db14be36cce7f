"""The summariser's own input is fenced like the agent's: untrusted text reaches it as data.

When the summariser is asked with a request of its own (the evicted span written out as a transcript),
every string the model, vast.ai or a tool wrote (the assistant's words, call names and arguments, policy
details, alert titles the model raised, the previous summary) is escaped: no line the data writes starts
with a source tag, no raw control or separator character is left, and every fence opened is closed.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from agent.context import request_payload, select
from agent.context.compaction import Plan, plan, summary_input
from tests.context.test_context import POLICY, TOOLS, observation
from tests.context.test_context_build import METER, PROMPTS, MemLog, project_mem
from tests.context.test_context_props import S
from tests.context.test_injection import CORPUS, TAG, _fence_findings, _unsafe_chars

HEAD = re.compile(r"^#\d+ ")   # the renderer's own "#seq " before each event of the transcript


def _span(text: str) -> MemLog:
    """One tick in which ``text`` arrives through every channel the transcript quotes, an earlier
    compaction whose summary is ``text``, the model's answer to a request holding it all, and a new tick."""
    log = MemLog()
    log.append("tick.started", {"observation": observation(1)}, "scheduler", 1)
    log.append("context.compacted", {"summary": text or "x", "covered_to": 0, "method": "llm", "covered_from": 1,
                                     "first_kept_seq": 1, "pinned": {}}, "system", 1)
    calls = [{"id": "c1", "name": text[:40] or "n", "arguments": text[:200]}]
    req = log.append("model.request", request_payload(project_mem(log.events)), "system", 1)
    log.append("model.response", {"text": text, "tool_calls": calls, "request_seq": req.seq}, "model", 1)
    log.append("policy.blocked", {"call_id": "c1", "name": text[:40] or "n", "rule": "allowed_gpus",
                                  "detail": text}, "system", 1)
    log.append("tool.result", {"call_id": "c1", "name": text[:40] or "n", "ok": False, "error": text}, "tool", 1)
    log.append("alert.raised", {"alert_id": 4, "severity": "warning", "title": text[:200] or "t",
                                "dedup_key": "m", "raised_by": "model", "detail": text}, "model", 1)
    req = log.append("model.request", request_payload(project_mem(log.events)), "system", 1)
    log.append("model.response", {"text": text, "tool_calls": [], "request_seq": req.seq}, "model", 1)
    log.append("tick.started", {"observation": observation(2)}, "scheduler", 2)
    return log


def input_findings(messages: list[dict[str, Any]]) -> list[str]:
    out = []
    for msg in messages:
        if msg["role"] == "system":
            continue
        content = msg["content"]
        lines = content.splitlines()
        out += [f"raw {c}" for c in sorted(set(_unsafe_chars(content)))]
        for n, line in enumerate(lines):
            head = HEAD.match(line)
            for m in TAG.finditer(line):
                if head is None or m.start() != head.end():
                    out.append(f"line {n}: tag {m.group(0)[:60]!r}")
        out += _fence_findings(lines, "user")
    return out


@pytest.mark.parametrize("payload", CORPUS, ids=[p["name"] for p in CORPUS])
def test_no_payload_escapes_into_the_summarisers_input(payload: dict[str, str]) -> None:
    """Each corpus payload, through the assistant's text, a call's name and arguments, a policy block, a
    failed tool result, a model-raised alert and the previous summary: the summariser's request holds
    none of it as a tag, a raw control character or an unclosed fence."""
    log = _span(payload["text"])
    p = plan(select(log.events), prompts=PROMPTS, settings=S, policy=POLICY, tools=TOOLS, meter=METER,
             open_alert_ids=[4], owned_instance_ids=[], force=True)
    assert isinstance(p, Plan)
    messages = summary_input(p, prompts=PROMPTS, settings=S)
    assert input_findings(messages) == []
    assert "[assistant]" in messages[-1]["content"]
