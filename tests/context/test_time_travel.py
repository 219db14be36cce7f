"""Time travel shows what the model saw: `context --tick/--seq/--at` and the console render a past request
with the inputs logged for it (as replay does), not today's, and say so. Over a log with a config reload (a
new policy and a new budget) and a prompt edit, every tick's view hashes to its logged request."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from agent.context import project
from agent.context.compaction import compact
from agent.context.inputs import log_request
from agent.context.prompts import load_prompts
from agent.context.replay import inspect_request
from agent.store.log import EventLog
from tests.cli.test_cli_context import TICKS, cli, make_app
from tests.context.test_context import POLICY, TOOLS
from tests.context.test_context_props import S, run

RELOAD_AT, EDIT_AT = 4, 7
NEW_POLICY = {**POLICY, "max_instances": 9}
NEW_LINE = "Prefer the cheapest host that has never failed."


def _history(tmp_path: Any) -> tuple[Any, list[tuple[int, int]]]:
    """A log of 10 ticks, each request logged as the tick logs it; before tick RELOAD_AT a reload puts a new
    policy and budget in force, before EDIT_AT system.md gains a line. ``app`` ends with today's (the newest)
    inputs. Returns the app and (tick, request seq) of every request."""
    app = make_app(tmp_path)
    now: dict[str, Any] = {"prompts": app.prompts, "policy": POLICY, "settings": S}
    bigger = replace(S, budget_tokens=S.budget_tokens + 2000)

    def step(log: EventLog, n: int, state: dict[str, Any], requests: list[Any]) -> None:
        if n == RELOAD_AT and now["policy"] is POLICY:
            now.update(policy=NEW_POLICY, settings=bigger)
            log.append("config.changed", {"changes": [{"key": "policy.max_instances", "old": 4, "new": 9}],
                                          "config_hash": "b" * 64, "previous_hash": "a" * 64},
                       "operator", n)
        if n == EDIT_AT and NEW_LINE not in now["prompts"].system:
            path = app.prompts_dir / "system.md"
            path.write_text(path.read_text() + f"\n{NEW_LINE}\n")
            now["prompts"] = load_prompts(app.prompts_dir)
        s, pr, po = now["settings"], now["prompts"], now["policy"]
        compact(log, pr, s, policy=po, tools=TOOLS, summarizer=None, tick=n, open_alert_ids=[3],
                owned_instance_ids=[1000])
        p = project(log, pr, s, policy=po, tools=TOOLS, model="m")
        requests.append((n, log_request(log, p, prompts=pr, policy=po, tools=TOOLS, tick=n).seq))

    reqs: list[Any] = []
    run(app.log, TICKS, step=lambda log, n, state, requests: step(log, n, state, reqs))
    app.prompts, app.policy_dict = now["prompts"], lambda: NEW_POLICY
    app.settings.context = now["settings"]
    return app, reqs


def test_every_tick_shows_the_request_it_logged_after_a_reload_and_a_prompt_edit(tmp_path, capsys):
    app, reqs = _history(tmp_path)
    capsys.readouterr()
    assert len(reqs) == 20 and any(True for _ in app.log.read(0, kinds=["context.compacted"]))
    for tick in range(1, len(TICKS) + 1):
        last = max(seq for n, seq in reqs if n == tick)
        assert cli(app, "context", "--tick", str(tick), "--json") == 0
        out = json.loads(capsys.readouterr().out)
        assert out["recorded_request_seq"] == last and out["recorded_hash_matches"] is True, tick
        assert out["manifest"]["request_hash"] == app.log.get(last).payload["request_hash"]
        assert out["inputs"].startswith(f"rendered with the inputs logged for request #{last} (tick {tick}): ")
        system = out["messages"][0]["content"]
        assert (NEW_LINE in system) == (tick >= EDIT_AT), tick            # the prompt as it was then
        assert ("9" in system.split("max_instances", 1)[1][:12]) == (tick >= RELOAD_AT), tick   # the policy too
    # every request, by its seq: what the model saw is the logged hash
    for _, seq in reqs:
        thread_to = int(app.log.get(seq).payload["manifest"]["thread_to"])
        found = inspect_request(app.log, app.prompts, app.settings.context, policy=NEW_POLICY, tools=TOOLS,
                                model="m", seq=thread_to)
        assert found.projection.request_hash == app.log.get(seq).payload["request_hash"], seq
    # the text view says which inputs it used
    assert cli(app, "context", "--tick", "2") == 0
    text = capsys.readouterr().out
    assert "hash matches" in text and "inputs: rendered with the inputs logged for request #" in text
    assert "system.md" in text and "policy" in text


def test_at_a_time_uses_the_inputs_of_the_request_before_it(tmp_path, capsys):
    app, reqs = _history(tmp_path)
    capsys.readouterr()
    first_tick = [seq for n, seq in reqs if n == 1]
    ts = app.log.get(first_tick[-1] + 1).ts
    assert cli(app, "context", "--at", ts, "--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert NEW_LINE not in out["messages"][0]["content"]
    assert out["inputs"].startswith(f"rendered with the inputs logged for request #{first_tick[-1]} (tick 1)")
    # now: today's inputs
    assert cli(app, "context", "--json") == 0
    now = json.loads(capsys.readouterr().out)
    assert NEW_LINE in now["messages"][0]["content"] and now["inputs"].startswith("today's")
