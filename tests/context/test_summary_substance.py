"""A summary must have substance, or the deterministic fallback is used.

Small models answer a summary request with "Nothing to do this tick." or by repeating the instructions;
both passed the old mechanical check. A summary now needs every required section with content, must name
every open alert, owned instance, pinned directive and operator input it folds, and must not echo the
prompt. The summariser here is the real SDK against the fake server, which answers as those models do.
"""

from __future__ import annotations

from typing import Any

from agent.context.compaction import SECTION_TITLES, check_summary, is_echo
from agent.context.prompts import render_summarize
from agent.model.llm import OpenAIChat
from tests.context.test_compaction import ALERTS, GOOD, OWNED, PROMPTS, _meter, fill, run_compact
from tests.context.test_context import SMALL, open_log
from tests.fakes.openai_server import FakeOpenAI, echo_prompt, nothing_to_do, reply, summary_reply

EARLY = SMALL.__class__(**{**SMALL.__dict__, "high_water": 0.7})


def _summariser(fake: FakeOpenAI) -> OpenAIChat:
    return OpenAIChat(base_url=fake.base_url, model="fake-model", api_key=None, timeout=10, max_retries=0)


def _setup(tmp_path: Any) -> Any:
    log = open_log(tmp_path / "a.db")
    log.append("operator.note", {"text": "never rent A100", "by": "alice", "pin": True}, "operator", None)
    fill(log, settings=EARLY)
    return log


def test_nothing_to_do_is_rejected_twice_then_the_fallback_is_used(tmp_path: Any, fake_model: FakeOpenAI) -> None:
    """'Nothing to do this tick.' twice: both attempts are rejected for missing sections, and the
    deterministic summary (every section, the alert, the instances) is stored instead."""
    log = _setup(tmp_path)
    fake_model.enqueue(nothing_to_do(), nothing_to_do())
    ev = run_compact(log, _summariser(fake_model), settings=EARLY)
    p = ev.payload
    assert p["method"] == "fallback"
    assert [a["ok"] for a in p["attempts"]] == [False, False, True]
    assert p["attempts"][0]["reason"].startswith("sections missing or empty: Fleet state and commitments")
    assert all(f"## {t}" in p["summary"] for t in SECTION_TITLES) and "alert #3" in p["summary"]


def test_an_echo_of_the_instructions_is_rejected(tmp_path: Any, fake_model: FakeOpenAI) -> None:
    """A reply repeating the instruction it was sent (which names every section, alert and instance, so
    the old check passed it) is rejected as an echo; a real summary on the retry is accepted."""
    log = _setup(tmp_path)
    fake_model.enqueue(echo_prompt("last"), summary_reply)
    ev = run_compact(log, _summariser(fake_model), settings=EARLY)
    p = ev.payload
    assert p["method"] == "llm"
    assert p["attempts"][0] == {"method": "llm", "ok": False,
                                "reason": "the summary repeats the instructions instead of summarising"}
    echoed = fake_model.chat_requests[0].json["messages"][-1]["content"]
    assert check_summary(echoed, cap=10_000, meter=_meter(), open_alert_ids=ALERTS, owned_instance_ids=OWNED,
                         prompt=echoed) is not None
    assert check_summary(echoed, cap=10_000, meter=_meter(), open_alert_ids=ALERTS, owned_instance_ids=OWNED) \
        is None   # what the old check, which did not know the prompt, let through


def test_the_standalone_prompt_echoed_is_rejected_too() -> None:
    """The summariser's own system prompt, echoed back, is an echo; a real summary is not."""
    prompt = render_summarize(PROMPTS, 400)
    assert is_echo(prompt, prompt) and not is_echo(GOOD, prompt)


def test_a_summary_leaving_out_a_pinned_directive_or_an_operator_input_is_rejected(tmp_path: Any,
                                                                                    fake_model: FakeOpenAI) -> None:
    """The pinned directive (#1) and an operator note in the folded span must be named by number: a
    summary without them is rejected with the numbers in the reason (and the retry is told)."""
    log = open_log(tmp_path / "a.db")
    log.append("operator.note", {"text": "never rent A100", "by": "alice", "pin": True}, "operator", None)
    note = log.append("operator.note", {"text": "demand spike at 18:00", "by": "bob"}, "operator", None)
    fill(log, settings=EARLY)
    without = GOOD.replace("#1 never rent A100 (alice)", "none")
    fake_model.enqueue(reply(without), summary_reply)
    ev = run_compact(log, _summariser(fake_model), settings=EARLY)
    reason = ev.payload["attempts"][0]["reason"]
    assert "missing pinned directives #1" in reason
    assert f"missing operator inputs #1, #{note.seq}" in reason
    assert f"the operator section says '- none' but operator inputs #1, #{note.seq} exist" in reason
    assert ev.payload["method"] == "llm"
    assert reason in fake_model.chat_requests[1].json["messages"][-1]["content"]


def test_empty_sections_are_named() -> None:
    """Sections present but empty count as missing."""
    text = GOOD.replace("- held (#5)", "")
    assert check_summary(text, cap=2000, meter=_meter(), open_alert_ids=[], owned_instance_ids=[]) == \
        "sections missing or empty: Decisions and why"


def test_a_later_summary_is_asked_for_the_inputs_the_previous_one_cited(tmp_path: Any,
                                                                       fake_model: FakeOpenAI) -> None:
    """A compaction that folds no operator input still has its operator section held to the inputs the
    previous summary cited, so its request names them: a summariser that writes what it is asked is accepted
    (before, the request said "none" and the check refused "none", so the summary went to the fallback)."""
    log = open_log(tmp_path / "a.db")
    note = log.append("operator.note", {"text": "restarted the box", "by": "alice"}, "operator", None).seq
    n, comps = 1, []
    for _ in range(3):
        n = fill(log, start=n)
        fake_model.enqueue(summary_reply)
        comps.append(run_compact(log, _summariser(fake_model), tick=n).payload)
    assert [c["method"] for c in comps] == ["llm", "llm", "llm"], [c["attempts"] for c in comps]
    later = fake_model.chat_requests[-1].json["messages"][-1]["content"]
    assert "Operator inputs being folded, to mention by number: none" in later
    assert f"Operator inputs the summary cites so far, to keep citing by number: #{note}" in later
    assert f"#{note}" in comps[-1]["summary"]
