"""Model chaos: a scripted OpenAI-compatible server misbehaving in every way we know.

Malformed arguments, unknown tools, thousands of calls in one response, a megabyte of
text, empty choices, refusals, context-length errors, 500s, hangs and garbage bodies:
no crash, steps bounded by max_steps, each fault logged, and the next request still
fits the budget.
"""

from __future__ import annotations

import pytest

from agent import context
from agent.runtime.tick import run_tick
from tests.fakes.openai_server import FakeOpenAI, context_length_error, empty_choices, error, hang, raw, reply
from tests.reliability.harness import check_db, db_path, make_app, running_sim

MAX_STEPS = 4


def _refusal() -> object:
    return raw({"id": "chatcmpl-r", "object": "chat.completion", "created": 0, "model": "fake-model",
                "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": None,
                                         "refusal": "I can't help with that request."}}]})


FAULTS = {
    "malformed_json": lambda: reply("checking", tool_calls=[("search_offers", '{"limit": 5,,')]),
    "arguments_not_object": lambda: reply(tool_calls=[("rent_instance", "[1, 2, 3]")]),
    "unknown_tool": lambda: reply(tool_calls=[("launch_missiles", {"target": "all"})]),
    "thousands_of_calls": lambda: reply(tool_calls=[("get_balance", {})] * 2000),
    "megabyte_text": lambda: reply("x" * 1_000_000),
    "megabyte_arguments": lambda: reply(tool_calls=[("search_offers", {"gpu_name": "y" * 1_000_000})]),
    "empty_choices": empty_choices,
    "refusal": _refusal,
    "context_length_twice": lambda: [context_length_error(), context_length_error()],
    "server_500": lambda: error(500),
    "rate_limited_429": lambda: error(429),
    "hang": lambda: hang(3.0),
    "garbage_body": lambda: raw(b"\x00\xff not json", 200),
    "null_tool_name": lambda: raw({"id": "c", "object": "chat.completion", "created": 0, "model": "fake-model",
                                   "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                                       "role": "assistant", "content": None, "tool_calls": [
                                           {"id": "t", "type": "function",
                                            "function": {"name": None, "arguments": None}}]}}]}),
}


@pytest.mark.slow
def test_every_model_fault_is_logged_and_the_projection_stays_within_budget(fast_root):
    """Each fault in FAULTS, one tick each: run_tick returns, at most
    max_steps model calls per tick, each fault leaves a model.failed event or an error
    tool.result or a recorded response, no tick fails with an internal error, and after it
    all the projected request fits the context budget."""
    with FakeOpenAI() as fake, running_sim(seed=4) as (sim, server):
        app = make_app(fast_root, sim, server, provider="openai", model_url=fake.base_url,
                       model={"timeout": 0.5}, schedule={"max_steps": MAX_STEPS},
                       context={"budget_tokens": 12000, "output_reserve": 1000})
        seen: dict[str, str] = {}
        try:
            for name, make in FAULTS.items():
                steps = make()
                fake.enqueue(*(steps if isinstance(steps, list) else [steps]))
                before = app.log.last_seq()
                r = run_tick(app)
                fake._script.clear()
                assert r.steps <= MAX_STEPS, name
                kinds = [e.kind for e in app.log.read(before)]
                assert kinds.count("model.request") <= MAX_STEPS + 1, name
                assert ("tick.completed" in kinds) != ("tick.failed" in kinds), name
                failed = [e for e in app.log.read(before, kinds=["tick.failed"])]
                assert not any(e.payload["error_kind"] == "internal" for e in failed), \
                    (name, [e.payload for e in failed])
                errs = [e for e in app.log.read(before, kinds=["tool.result"]) if not e.payload["ok"]]
                logged = "model.failed" in kinds or errs or "model.response" in kinds
                assert logged, name
                seen[name] = "failed" if failed else "completed"
                sim.advance(300.0)
            proj = context.project(app.log, app.prompts, app.settings.context, policy=app.policy_dict(),
                                   tools=app.tool_specs(), model=app.settings.model.name)
            assert context.fits(proj, app.settings.context)
            assert proj.calibrated_tokens <= app.settings.context.budget_tokens
        finally:
            app.close()
        assert check_db(db_path(fast_root)) == []
    assert set(seen) == set(FAULTS)
