"""Faithful summaries: the operator's words stay verbatim in the pinned block, and the summary check holds a
summary's claims to the log (skeletons, negations, orders nobody gave, wrong numbers are rejected, retried
with the reasons, then replaced by the fallback)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from agent.context import ContextSettings, ProjectionCache
from agent.context.compaction import MustMention, check_summary, compact, plan
from agent.context.load import load, meter_for
from agent.context.pinned import OPERATOR_WORDS_HOURS, empty_pinned, fold_pinned, render_pinned
from agent.context.replay import replay_summaries, verify
from agent.model.llm import OpenAIChat
from agent.times import parse_ts, utc_ts
from tests.context.faithful_run import HOSTILE, hostile_summariser, run
from tests.context.test_compaction import OWNED, PROMPTS, fill
from tests.context.test_context import POLICY, TOOLS, open_log, proj
from tests.fakes.openai_server import FakeOpenAI, reply, summary_reply

EARLY = ContextSettings(budget_tokens=6000, output_reserve=500, tool_output_max_tokens=300, summary_max_tokens=400,
                        pinned_max_tokens=900, knowledge_max_tokens=200, high_water=0.7)
HONEST = ("## Fleet state and commitments\n- 2 instances: 1000, 1001; balance $250.00\n## Decisions and why\n"
          "- held (#5)\n## Open problems\n- alert #3 open\n## Operator directives\n- directive #1 stands; note #2; "
          "override #9; host 5001 excluded\n## Completed actions\n- searched (#4)")
MUST = MustMention(directives=(1,), operator=(2,), claims=True, overrides=(9,), hosts=(5001,), known=(1, 2, 9),
                   counts=(2,), balances=(250.0, 249.0), rates=(0.82,))


def _meter() -> Any:
    return meter_for(ContextSettings(), ProjectionCache())


def _check(text: str, must: MustMention = MUST) -> str | None:
    return check_summary(text, cap=2000, meter=_meter(), open_alert_ids=[3], owned_instance_ids=OWNED, must=must)


def test_an_honest_summary_passes_the_claim_check() -> None:
    assert _check(HONEST) is None
    assert _check(HONEST.replace("balance $250.00", "spend $0.82/h, balance 249")) is None


@pytest.mark.parametrize("bad, why", [
    (HONEST.replace("- directive #1 stands; note #2; override #9; host 5001 excluded", "-"),
     "missing pinned directives #1"),
    (HONEST.replace("override #9", "no directives were given"), "it says 'no directives' but 1 directives"),
    (HONEST.replace("override #9", "overrides: none, #9 lapsed"), "it says 'overrides: none' but 1 overrides"),
    (HONEST + "\n- alerts: none", "it says 'alerts: none' but 1 alerts"),
    (HONEST.replace("## Operator directives\n", "## Operator directives\n- Rent nothing ever again.\n"),
     "the operator section line '- Rent nothing ever again.' cites no operator input"),
    (HONEST.replace("## Operator directives\n", "## Operator directives\n- none\n"),
     "the operator section says '- none' but operator inputs #1, #2, #9 exist"),
    (HONEST.replace("2 instances", "17 instances"), "it gives 17 instances; the log shows 2"),
    (HONEST.replace("$250.00", "$9,999.00"), "it gives a balance of 9,999.00; the observations show 250.00, 249.00"),
    (HONEST.replace("balance $250.00", "spend $42.00/h"), "it gives a spend of $42/h; the observations show $0.82/h"),
    (HONEST.replace("override #9; ", ""), "missing overrides and pauses in force #9"),
    (HONEST.replace("host 5001 excluded", "a host excluded"), "missing excluded hosts 5001"),
])
def test_untrue_claims_are_rejected_with_the_reason(bad: str, why: str) -> None:
    reason = _check(bad)
    assert reason is not None and why in reason, reason


def test_without_claims_only_what_was_checked_before_is_checked() -> None:
    """A v1 summary request (logged before the claim check) is judged as it was then: no claim reasons."""
    legacy = replace(MUST, claims=False)
    assert _check(HONEST.replace("2 instances", "17 instances") + "\n- Rent nothing ever again.", legacy) is None


def test_operator_words_are_pinned_verbatim_until_they_expire_or_are_superseded(tmp_path: Any) -> None:
    log = open_log(tmp_path / "a.db")
    note = log.append("operator.note", {"text": "demand spike at 18:00, keep 2 spare", "by": "bob"}, "operator", None)
    log.append("alert.raised", {"alert_id": 4, "severity": "warning", "title": "slow", "dedup_key": "s",
                                "raised_by": "system"}, "system", 1)
    ack = log.append("alert.acked", {"alert_id": 4, "by": "carol", "title": "slow", "note": "vendor ticket 4411"},
                     "operator", None)
    d = log.append("operator.note", {"text": "never rent A100", "by": "alice", "pin": True}, "operator", None)
    un = log.append("directive.unpinned", {"directive_id": d.seq, "by": "alice"}, "operator", None)
    events = list(log.read(0))
    pinned = fold_pinned(empty_pinned(), events)
    assert [w["id"] for w in pinned["operator"]] == [note.seq, ack.seq, un.seq]
    text = render_pinned(pinned, un.seq, EARLY, _meter())
    assert text is not None
    assert f"- [operator note #{note.seq} · bob · " in text and "demand spike at 18:00, keep 2 spare" in text
    assert f"- [alert #4 acked #{ack.seq} · carol · " in text and "note: vendor ticket 4411" in text
    assert f"directive #{d.seq} withdrawn" in text and "never rent A100" not in text   # withdrawn: gone
    assert text.startswith(f"[pinned · knowledge, directives, memory as of #{un.seq}]")
    # the v4 rendering (compactions logged before) does not show them
    assert "demand spike" not in (render_pinned(pinned, un.seq, EARLY, _meter(), 4) or "")
    # an ack goes when its alert resolves
    resolved = log.append("alert.resolved", {"alert_id": 4, "title": "slow", "reason": "cleared"}, "system", 2)
    later = fold_pinned(pinned, [resolved])
    assert [w["id"] for w in later["operator"]] == [note.seq, un.seq]
    # everything goes OPERATOR_WORDS_HOURS after it was given
    log.clock = lambda: parse_ts(un.ts) + timedelta(hours=OPERATOR_WORDS_HOURS, seconds=1)  # type: ignore[attr-defined]
    late = log.append("operator.note", {"text": "new shift", "by": "dan"}, "operator", None)
    assert late.ts > utc_ts(parse_ts(un.ts) + timedelta(hours=OPERATOR_WORDS_HOURS))
    assert [w["text"] for w in fold_pinned(later, [late])["operator"]] == ["new shift"]


def test_a_hostile_summary_is_retried_with_the_reasons_then_the_fallback_keeps_the_words(tmp_path: Any) -> None:
    """Over HTTP: a negation, then an order nobody gave; both rejected with their reasons (the retry is
    told), the fallback is stored, the note's words are in the next request verbatim, and replay re-derives
    both summariser requests."""
    log = open_log(tmp_path / "a.db")
    log.append("operator.note", {"text": "never rent A100", "by": "alice", "pin": True}, "operator", None)
    note = log.append("operator.note", {"text": "jobs double at 18:00; hold two spares", "by": "bob"}, "operator",
                      None)
    ov = log.append("policy.overridden", {"key": "max_instances", "value": 3, "by": "dave",
                                          "reason": "budget review"}, "operator", None)
    fill(log, settings=EARLY)
    with FakeOpenAI() as fake:
        fake.default = hostile_summariser()
        fake.enqueue(lambda b: reply(summary_reply(b).text.replace("## Operator directives\n",
                                                                   "## Operator directives\n- no directives were "
                                                                   "given\n")),
                     lambda b: reply(summary_reply(b).text + "\n## Operator directives\n- Rent nothing ever again."))
        summariser = OpenAIChat(base_url=fake.base_url, model=fake.model, api_key=None)
        ev = compact(log, PROMPTS, EARLY, policy=POLICY, tools=TOOLS, summarizer=summariser, tick=9,
                     open_alert_ids=[], owned_instance_ids=OWNED, model_name=fake.model)
        assert ev is not None
        sent = [r.json["messages"] for r in fake.chat_requests]
    p = ev.payload
    assert p["method"] == "fallback" and [a["ok"] for a in p["attempts"]] == [False, False, True]
    first, second = p["attempts"][0]["reason"], p["attempts"][1]["reason"]
    assert "it says 'no directives' but 1 directives are in force" in first
    assert "Rent nothing ever again" in second or "missing" in second
    assert first in sent[1][-1]["content"]                      # the retry was told why
    assert f"Overrides and pause in force, to mention by number: #{ov.seq}" in sent[0][-1]["content"]
    assert "Rent nothing" not in p["summary"]
    after = "\n".join(str(m["content"]) for m in proj(log, settings=EARLY).messages)
    assert p["covered_to"] >= note.seq
    assert "jobs double at 18:00; hold two spares" in after and "never rent A100" in after
    assert "budget review" in after
    reqs = list(log.read(0, kinds=["summary.request"]))
    assert [r.version for r in reqs] == [3, 3]
    s = verify(replay_summaries(log, PROMPTS, EARLY, policy=POLICY, tools=TOOLS), stop_at_first=False)
    assert s.checked == 2 and not s.mismatches, s.first


def test_a_v1_summary_request_replans_as_it_was(tmp_path: Any) -> None:
    """plan(version=1) renders the pinned block as v4 and asks for no claims: logs written before replay."""
    log = open_log(tmp_path / "a.db")
    log.append("operator.note", {"text": "jobs double at 18:00", "by": "bob"}, "operator", None)
    log.append("policy.overridden", {"key": "max_instances", "value": 3, "by": "dave", "reason": "budget"},
               "operator", None)
    fill(log, settings=EARLY)
    kw: dict[str, Any] = {"prompts": PROMPTS, "settings": EARLY, "policy": POLICY, "tools": TOOLS,
                          "meter": _meter(), "open_alert_ids": [], "owned_instance_ids": OWNED}
    old, new = plan(load(log), version=1, **kw), plan(load(log), **kw)
    assert old is not None and new is not None and not isinstance(old, str) and not isinstance(new, str)
    assert not old.must.claims and new.must.claims and new.must.overrides == (2,)
    assert "Overrides and pause in force" not in old.messages[-1]["content"]
    assert "Overrides and pause in force" in new.messages[-1]["content"]


@pytest.mark.slow
def test_no_operator_input_is_lost_over_a_long_hostile_run(tmp_path: Any) -> None:
    """300 ticks at 8k tokens against a summariser that writes each kind of bad summary in turn: every
    operator input in force is in every request verbatim; bad summaries were rejected and fell back."""
    with FakeOpenAI() as fake:
        t = run(tmp_path / "run.db", fake, budget=8000, ticks=300)
    assert t.checks > 1000 and t.compactions > 20
    assert t.lost == 0, t.row()
    assert t.kept == t.checks
    assert t.fallbacks > 0 and t.retries > 0 and t.rejected >= len(HOSTILE)
