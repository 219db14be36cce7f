"""Compaction: where it cuts, what it summarises, how it checks a summary, and the fallback."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest

from agent.context import ContextSettings, fits, load, needs_compaction, project
from agent.context.compaction import (
    SECTION_TITLES,
    Plan,
    check_summary,
    compact,
    compact_for_overflow,
    fallback_summary,
    plan,
    summary_input,
)
from agent.context.prompts import load_prompts
from agent.model.llm import LLMError, ModelReply
from tests.context.test_context import (
    POLICY,
    SMALL,
    TOOLS,
    final_text,
    open_log,
    proj,
    simple_tick,
    tick_start,
    tool_step,
    words,
)

PROMPTS = load_prompts(None)
ALERTS = [3]
OWNED = [1000, 1001]
GOOD = ("## Fleet state and commitments\nInstances 1000 and 1001 running.\n## Decisions and why\n- held (#5)\n"
        "## Open problems\n- alert #3 open\n## Operator directives\n- #1 never rent A100 (alice)\n"
        "## Completed actions\n- searched (#4)")
NO_DIRECTIVE = GOOD.replace("- #1 never rent A100 (alice)", "- none")   # for logs where no operator spoke


class ScriptedSummarizer:
    """A chat provider that answers from a script: texts are replies, exceptions are raised."""

    def __init__(self, *steps: Any) -> None:
        self.steps = list(steps)
        self.calls: list[list[dict[str, Any]]] = []

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
        self.calls.append(messages)
        step = self.steps.pop(0)
        if isinstance(step, BaseException):
            raise step
        return ModelReply(text=step)


def run_compact(log, summarizer=None, settings=SMALL, **kw):
    return compact(log, PROMPTS, settings, policy=POLICY, tools=TOOLS, summarizer=summarizer, tick=kw.pop("tick", 9),
                   open_alert_ids=kw.pop("alerts", ALERTS), owned_instance_ids=kw.pop("owned", OWNED), **kw)


def fill(log, settings=SMALL, start=1, outputs=(150, 150)) -> int:
    """Append ticks until the projection passes high water; return the next tick number."""
    n = start
    while not needs_compaction(proj(log, settings=settings), settings):
        simple_tick(log, n, outputs)
        n += 1
    return n


def tick_starts(log) -> list[int]:
    return [e.seq for e in log.read(0, kinds=["tick.started"])]


def test_llm_summary_accepted_and_payload_complete(tmp_path):
    """A good LLM summary is stored with every payload field; one context.compacted is appended, after the
    summariser call logged as a request and a response (and its inputs, the first time); cut at a tick start."""
    log = open_log(tmp_path / "a.db")
    log.append("operator.note", {"text": "never rent A100", "by": "alice", "pin": True}, "operator", None)
    log.append("memory.written", {"key": "host 7", "text": "flaky disks"}, "model", None)
    early = replace(SMALL, high_water=0.7)   # room left for the instruction and the summary
    fill(log, settings=early)
    count = log.count()
    agent_request = proj(log, settings=early).messages
    s = ScriptedSummarizer(GOOD)
    ev = run_compact(log, s, settings=early, model_name="summ-1")
    assert ev is not None
    added = [e.kind for e in log.read(count)]
    assert added == ["input.recorded"] * 5 + ["summary.request", "summary.response", "context.compacted"]
    p = ev.payload
    assert set(p) >= {"summary", "covered_from", "covered_to", "first_kept_seq", "tokens_before", "tokens_after",
                      "method", "model", "prompt_hash", "pinned", "attempts"}
    assert p["method"] == "llm" and p["summary"] == GOOD and p["model"] == "summ-1"
    assert p["attempts"] == [{"method": "llm", "ok": True, "reason": "accepted"}]
    assert p["prompt_hash"] == PROMPTS.hashes["summarize.md"]
    assert p["covered_from"] == 1 and p["covered_to"] == p["first_kept_seq"] - 1
    assert p["first_kept_seq"] in tick_starts(log) and p["first_kept_seq"] <= max(tick_starts(log))
    assert p["tokens_after"] < p["tokens_before"]
    assert p["pinned"]["directives"] == [{"id": 1, "by": "alice", "text": "never rent A100"}]
    assert p["pinned"]["memory"] == {"host 7": "flaky disks"}
    # the summariser continues the agent's own request: the same messages, then one instruction
    assert s.calls[0][:-1] == agent_request
    instruction = s.calls[0][-1]["content"]
    assert "## Fleet state and commitments" in instruction and str(SMALL.summary_max_tokens) in instruction
    assert "alert #3" in instruction and "1000, 1001" in instruction and "directives to mention by number: #1" in instruction
    after = proj(log)
    assert after.manifest["covered_to"] == p["covered_to"] and after.manifest["compaction_seq"] == ev.seq
    assert p["pinned"]["changed_seq"] == 2
    assert after.messages[1]["content"].startswith("[pinned · knowledge, directives, memory as of #2]")
    assert "[operator directive #1 · alice] never rent A100" in after.messages[1]["content"]
    assert after.messages[2]["content"].startswith(f"[summary of #1–#{p['covered_to']}]")
    assert after.messages[3]["content"].startswith("[tick ")
    assert fits(after, SMALL) and not needs_compaction(after, SMALL)
    assert log.last_seq() == ev.seq


def test_summariser_sees_full_payloads_not_the_display_cut(tmp_path):
    """The summariser's request of its own (used when the agent's request plus the instruction and the
    summary would not fit the budget) holds the evicted span from full payloads, past the thread's
    tool-output cap."""
    log = open_log(tmp_path / "a.db")
    settings = ContextSettings(budget_tokens=12000, output_reserve=500, tool_output_max_tokens=300,
                               summary_max_tokens=400, mask_after_ticks=0)
    tick_start(log, 1)
    tool_step(log, 1, [700])
    final_text(log, 1)
    fill(log, settings=settings, start=2, outputs=(40, 40))
    p = plan(load(log), prompts=PROMPTS, settings=settings, policy=POLICY, tools=TOOLS, meter=_meter(),
             open_alert_ids=ALERTS, owned_instance_ids=OWNED)
    assert isinstance(p, Plan) and p.cut is not None
    full = words(1, 700)
    assert full in summary_input(p, prompts=PROMPTS, settings=settings)[1]["content"]
    shown = proj(log, until_seq=6).messages[-1]["content"]
    assert full not in shown


def test_summariser_gets_a_request_of_its_own_when_the_continuation_would_not_fit(tmp_path):
    """At a high-water mark that leaves no room for the instruction and the summary, the summariser is
    asked with its own system prompt and the transcript, without the agent's tools."""
    log = open_log(tmp_path / "a.db")
    settings = ContextSettings(budget_tokens=12000, output_reserve=500, tool_output_max_tokens=300,
                               summary_max_tokens=400, high_water=0.95)
    n = fill(log, settings=settings, outputs=(40, 40))
    while proj(log, settings=settings).calibrated_tokens <= settings.high_water * settings.budget_tokens:
        simple_tick(log, n, (40, 40))  # on past the first cut-to-fit request, up to high water itself
        n += 1
    s = ScriptedSummarizer(NO_DIRECTIVE)
    ev = run_compact(log, s, settings=settings)
    assert ev is not None and ev.payload["method"] == "llm"
    assert len(s.calls[0]) == 2 and s.calls[0][0]["content"].startswith("You maintain the rolling summary")
    req = next(log.read(0, kinds=["summary.request"]))
    assert req.payload["manifest"]["continuation"] is False


def test_summary_missing_open_alert_is_retried_then_falls_back(tmp_path):
    """A summary that omits an open alert is rejected, retried once with the reason, then the fallback is used."""
    log = open_log(tmp_path / "a.db")
    fill(log)
    bad = GOOD.replace("alert #3", "an alert")
    s = ScriptedSummarizer(bad, bad)
    ev = run_compact(log, s)
    p = ev.payload
    assert p["method"] == "fallback" and p["model"] is None
    assert [a["method"] for a in p["attempts"]] == ["llm", "llm", "fallback"]
    assert "missing open alerts #3" in p["attempts"][0]["reason"]
    assert "missing open alerts #3" in s.calls[1][-1]["content"]
    assert check_summary(p["summary"], cap=SMALL.summary_max_tokens, meter=_meter(),
                         open_alert_ids=ALERTS, owned_instance_ids=OWNED) is None
    assert all(f"## {t}" in p["summary"] for t in SECTION_TITLES)


def test_retry_succeeds_after_one_rejection(tmp_path):
    """One rejected summary followed by a good one ends as method llm with two attempts."""
    log = open_log(tmp_path / "a.db")
    fill(log)
    ev = run_compact(log, ScriptedSummarizer(NO_DIRECTIVE.replace("1001", "the other"), NO_DIRECTIVE))
    assert ev.payload["method"] == "llm"
    assert [a["ok"] for a in ev.payload["attempts"]] == [False, True]


def test_summariser_error_falls_back_and_never_stores_error_text(tmp_path):
    """A summariser raising LLMError twice ends in the deterministic fallback; no error text is stored."""
    log = open_log(tmp_path / "a.db")
    fill(log)
    boom = LLMError("server", "upstream exploded: Error generating summary")
    ev = run_compact(log, ScriptedSummarizer(boom, LLMError("timeout", "slow")))
    p = ev.payload
    assert p["method"] == "fallback"
    assert [a["reason"] for a in p["attempts"][:2]] == ["llm error: server", "llm error: timeout"]
    assert "exploded" not in p["summary"] and "Error" not in p["summary"]


def test_summariser_raising_anything_falls_back(tmp_path):
    """Even a non-LLMError failure from the summariser ends in the fallback rather than failing the tick."""
    log = open_log(tmp_path / "a.db")
    fill(log)
    ev = run_compact(log, ScriptedSummarizer(RuntimeError("bug"), RuntimeError("bug")))
    assert ev.payload["method"] == "fallback"


def test_oversized_summary_falls_back(tmp_path):
    """A summary over summary_max_tokens is rejected (twice) and replaced by a fallback within the cap."""
    log = open_log(tmp_path / "a.db")
    fill(log)
    huge = GOOD + "\n" + words(3, 2000)
    ev = run_compact(log, ScriptedSummarizer(huge, huge))
    p = ev.payload
    assert p["method"] == "fallback" and "over the cap" in p["attempts"][0]["reason"]
    assert log.tokenizer.count(p["summary"]) <= SMALL.summary_max_tokens


def test_below_high_water_does_nothing_but_overflow_forces(tmp_path):
    """compact is a no-op under high water; compact_for_overflow compacts anyway."""
    log = open_log(tmp_path / "a.db")
    for n in range(1, 4):
        simple_tick(log, n)
    count = log.count()
    assert run_compact(log) is None and log.count() == count
    ev = compact_for_overflow(log, PROMPTS, SMALL, policy=POLICY, tools=TOOLS, summarizer=None, tick=4,
                              open_alert_ids=[], owned_instance_ids=[])
    assert ev is not None and ev.payload["first_kept_seq"] in tick_starts(log)
    assert ev.payload["attempts"] == [{"method": "fallback", "ok": True, "reason": "no summariser"}]


def test_cut_skips_a_boundary_that_would_split_a_call_from_its_result(tmp_path):
    """A tool result recorded after the next tick started makes that tick start ineligible as a cut."""
    log = open_log(tmp_path / "a.db")
    tick_start(log, 1)
    tool_step(log, 1, [40], with_results=False)
    t2 = tick_start(log, 2).seq
    log.append("tool.result", {"call_id": "call_1_0", "name": "search_offers", "ok": True, "output": "x"}, "tool", 2)
    final_text(log, 2)
    for n in range(3, 6):
        simple_tick(log, n)
    ev = compact_for_overflow(log, PROMPTS, ContextSettings(budget_tokens=100_000, low_water=0.0001), policy=POLICY,
                              tools=TOOLS, summarizer=None, tick=6, open_alert_ids=[], owned_instance_ids=[])
    assert ev.payload["first_kept_seq"] != t2
    assert ev.payload["first_kept_seq"] == max(tick_starts(log))


def test_newest_tick_is_never_cut_and_oversized_tick_still_fits(tmp_path):
    """With one huge newest tick, compaction keeps it whole and the projection still fits by shrinking."""
    log = open_log(tmp_path / "a.db")
    for n in range(1, 4):
        simple_tick(log, n)
    newest = tick_start(log, 4).seq
    tool_step(log, 4, [1500, 1500, 1500, 1500])
    ev = run_compact(log)
    assert ev is not None and ev.payload["first_kept_seq"] == newest
    p = proj(log)
    assert fits(p, SMALL)
    assert p.messages[1]["content"].startswith("[summary of ")
    assert p.messages[2]["content"].startswith("[tick 4 · ")
    assert [m["role"] for m in p.messages[3:]] == ["assistant", "tool", "tool", "tool", "tool"]


def test_rolling_summaries_carry_directives_and_pinned_knowledge_truncated(tmp_path):
    """Across compactions directives stay pinned, knowledge is pinned with a read_knowledge marker when long."""
    log = open_log(tmp_path / "a.db")
    log.append("knowledge.changed", {"name": "gpu.md", "change": "added", "hash": "h", "size": 9,
                                     "text": words(5, 800)}, "system", None)
    log.append("operator.note", {"text": "keep 2 spare", "by": "bob", "pin": True}, "operator", None)
    n = 1
    seen = []
    for _ in range(3):
        n = fill(log, start=n)
        ev = run_compact(log, tick=n)
        seen.append(ev.payload["covered_to"])
        p = proj(log)
        pinned = p.messages[1]["content"]
        assert "[operator directive #2 · bob] keep 2 spare" in pinned
        assert "read_knowledge('gpu.md')" in pinned
        assert fits(p, SMALL)
    assert seen == sorted(seen) and len(set(seen)) == 3
    last = list(log.read(0, kinds=["context.compacted"]))
    assert [e.payload["covered_from"] for e in last] == [1, 1, 1]


def test_fallback_summary_is_deterministic_and_within_cap(tmp_path):
    """The fallback built from the same events twice is the same text, within its cap, citing seqs."""
    log = open_log(tmp_path / "a.db")
    for n in range(1, 30):
        simple_tick(log, n)
    events = list(log.read(0))
    a = fallback_summary("", events, cap=300, meter=_meter(), open_alert_ids=[3, 4], owned_instance_ids=[7])
    b = fallback_summary("", events, cap=300, meter=_meter(), open_alert_ids=[3, 4], owned_instance_ids=[7])
    assert a == b and log.tokenizer.count(a) <= 300
    assert "alert #3" in a and "alert #4" in a and re.search(r"\b7\b", a)
    assert re.search(r"\(#\d+\)", a)


def _meter():
    from agent.context import meter_for

    return meter_for(SMALL, None)


def test_projection_after_compaction_matches_project(tmp_path):
    """tokens_after recorded by compaction equals the estimate of the next projection."""
    log = open_log(tmp_path / "a.db")
    fill(log)
    ev = run_compact(log)
    p = project(log, PROMPTS, SMALL, policy=POLICY, tools=TOOLS)
    assert ev.payload["tokens_after"] == p.tokens


def test_the_fallback_summary_groups_repeats_and_keeps_every_operator_line():
    """Decision and action lines that differ only by their seq and tick become one line with a count and
    the seq range, where the newest stood; a grouped line from the previous summary adds to its count;
    operator lines are never grouped."""
    from agent.context.compaction import group_repeats

    lines = ["- ×3 tick N: renting 0 of 4 needed (#1–#9)", "- tick 10: renting 0 of 4 needed (#12)",
             "- searched offers: 5 results (#13)", "- tick 11: renting 0 of 4 needed (#20)", "- rented 7 (#21)",
             "- tick 12: renting 0 of 4 needed (#30)"]
    assert group_repeats(lines) == ["- searched offers: 5 results (#13)", "- rented 7 (#21)",
                                    "- ×6 tick N: renting 0 of 4 needed (#1–#30)"]
    assert group_repeats(["- rented 7 (#21)", "- rented 8 (#22)"]) == ["- rented 7 (#21)", "- rented 8 (#22)"]
    log_lines = [f"- tick {n}: renting 0 of 4 needed (#{n * 10})" for n in range(1, 29)]
    text = fallback_summary("", [], cap=2000, meter=_meter(), open_alert_ids=[], owned_instance_ids=[])
    assert "×" not in text
    prev = "## Decisions and why\n" + "\n".join(log_lines)
    text = fallback_summary(prev, [], cap=2000, meter=_meter(), open_alert_ids=[], owned_instance_ids=[])
    assert text.count("renting 0 of 4 needed") == 1 and "- ×28 tick N: renting 0 of 4 needed (#10–#280)" in text


@pytest.mark.parametrize("n", [500, 2000])
def test_a_large_fleets_summary_gives_the_count_not_every_id_and_is_accepted(n):
    """Beyond NAMED_INSTANCES_MAX owned instances a summary is checked for their count (eight-digit ids of
    500 instances alone would pass the cap): a model's summary that groups them is accepted within
    summary_max_tokens, one that leaves the count out is refused saying what to write, and the fallback
    holds the count and the id range within its cap."""
    from agent.context.compaction import NAMED_INSTANCES_MAX

    owned = list(range(21_000_000, 21_000_000 + n))
    assert n > NAMED_INSTANCES_MAX
    text = (f"## Fleet state and commitments\n- {n} instances: {n // 2} RTX 4090, {n - n // 2} RTX 3090; "
            f"21000007 restarts often\n## Decisions and why\n- kept the fleet at demand\n## Open problems\n"
            f"- alert #3\n## Operator directives\n- none\n## Completed actions\n- searched offers")
    cap = ContextSettings().summary_max_tokens
    assert check_summary(text, cap=cap, meter=_meter(), open_alert_ids=[3], owned_instance_ids=owned) is None
    why = check_summary(text.replace(f"- {n} instances", "- the instances"), cap=cap, meter=_meter(),
                        open_alert_ids=[3], owned_instance_ids=owned)
    assert why is not None and f"write '{n} instances'" in why
    fb = fallback_summary("", [], cap=cap, meter=_meter(), open_alert_ids=[3], owned_instance_ids=owned)
    assert f"{n} instances (ids 21000000–{owned[-1]})" in fb
    assert check_summary(fb, cap=cap, meter=_meter(), open_alert_ids=[3], owned_instance_ids=owned) is None


def test_a_small_fleets_summary_still_names_every_instance():
    text = ("## Fleet state and commitments\n- 2 instances\n## Decisions and why\n- kept\n## Open problems\n"
            "- alert #3\n## Operator directives\n- none\n## Completed actions\n- searched")
    why = check_summary(text, cap=2000, meter=_meter(), open_alert_ids=[3], owned_instance_ids=[11, 12])
    assert why is not None and "missing owned instances 11, 12" in why

