"""Replay checks what is sent besides the messages, and every request of a summariser retry.

The model parameters (temperature, max output tokens, tool choice) are a content-addressed input like the
prompts: logged once by hash, named by each request's manifest and part of its hash, so ``replay --verify``
re-derives the whole request. A summariser retry (the rejected answer appended, then the instruction to
write it again) is re-derived from the logged answer it names, not only through its first request.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.context import project
from agent.context.compaction import compact
from agent.context.inputs import KIND, log_request, manifest_of, recorded
from agent.context.replay import replay_summaries
from agent.store.log import EventLog
from tests.cli.test_cli_context import TICKS, cli
from tests.context.test_context import TOOLS, Clock
from tests.context.test_context_props import S, run
from tests.context.test_replay_inputs import Answer, make_app
from tests.tamper import Tamper

GOOD = ("## Fleet state and commitments\n- instance 1000 owned (#2)\n## Decisions and why\n- kept it (#2)\n"
        "## Open problems\n- alert #3 open (#2)\n## Operator directives\n- none\n## Completed actions\n- none")


class FirstRejected:
    """Answers the first request of each compaction with a summary the check rejects (it leaves out the open
    alert), and the retry with one it accepts."""

    def __init__(self) -> None:
        self.calls: list[list[dict[str, Any]]] = []

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Answer:
        self.calls.append(messages)
        retry = messages[-1]["content"].startswith("That summary was rejected")
        return Answer(GOOD if retry else "## Fleet state and commitments\n- instance 1000 owned")


def drive(app: Any, ticks: list[dict[str, Any]], params: dict[str, Any], summariser: Any = None) -> None:
    """``ticks`` through the log, each request and summary recorded with ``params`` as the tick does."""

    def step(log: EventLog, n: int, state: dict[str, Any], requests: list[Any]) -> None:
        compact(log, app.prompts, S, policy=app.policy, tools=TOOLS, summarizer=summariser, tick=n,
                open_alert_ids=[3], owned_instance_ids=[1000], model_name="m",
                params={k: v for k, v in params.items() if k != "tool_choice"})
        p = project(log, app.prompts, S, policy=app.policy, tools=TOOLS, model="m", params=params)
        log_request(log, p, prompts=app.prompts, policy=app.policy, tools=TOOLS, tick=n, params=params)

    run(app.log, ticks, step=step)


def verify(app: Any, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    code = cli(app, "replay", "--verify")
    return code, capsys.readouterr().out


PARAMS = {"temperature": 0.2, "max_tokens": 2048, "tool_choice": "auto"}


def test_model_parameters_are_logged_once_and_hashed_with_each_request(tmp_path: Path) -> None:
    """The parameters are an input.recorded 'params' the first time their hash appears; each request's
    manifest names them and its hash covers them, so the same messages with another temperature hash
    differently."""
    app = make_app(tmp_path)
    drive(app, TICKS[:3], PARAMS)
    params = [e.payload for e in app.log.read(0, kinds=[KIND]) if e.payload["name"] == "params"]
    assert [p["content"] for p in params] == [PARAMS]
    req = next(app.log.read(0, kinds=["model.request"]))
    assert recorded(app.log)[manifest_of(req, recorded(app.log))["params_hash"]] == PARAMS
    a = project(app.log, app.prompts, S, policy=app.policy, tools=TOOLS, model="m", params=PARAMS)
    b = project(app.log, app.prompts, S, policy=app.policy, tools=TOOLS, model="m",
                params={**PARAMS, "temperature": 0.7})
    assert a.messages == b.messages and a.request_hash != b.request_hash


def test_replay_passes_after_the_parameters_change(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Requests sent at temperature 0.2 and then at 0.7 (another max_tokens too) all replay from the
    parameters the log recorded for each."""
    app = make_app(tmp_path)
    drive(app, TICKS[:3], PARAMS)
    drive(app, TICKS[3:6], {**PARAMS, "temperature": 0.7, "max_tokens": 512})
    code, out = verify(app, capsys)
    assert code == 0, out
    assert sum(1 for e in app.log.read(0, kinds=[KIND]) if e.payload["name"] == "params") == 2


def test_replay_fails_when_the_recorded_parameters_were_tampered_with(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """The recorded temperature rewritten (hash chain recomputed, so only replay can tell): every request
    sent with those parameters no longer re-derives."""
    app = make_app(tmp_path)
    drive(app, TICKS[:3], PARAMS)
    ev = next(e for e in app.log.read(0, kinds=[KIND]) if e.payload["name"] == "params")
    app.log.close()
    with Tamper(tmp_path / "fleet.db") as t:
        t.rechain(ev.seq, lambda payload: payload.replace('"temperature":0.2', '"temperature":1.5'))
    app.log = EventLog(tmp_path / "fleet.db", clock=Clock())
    assert recorded(app.log)[ev.payload["sha256"]]["temperature"] == 1.5
    code, out = verify(app, capsys)
    assert code == 1 and "does not match" in out


def test_every_request_of_a_summariser_retry_is_replayed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A rejected summary and its retry are two summary.request events; the retry's manifest names the
    rejected answer and the reason; replay re-derives both requests' hashes from the log."""
    app = make_app(tmp_path)
    summariser = FirstRejected()
    drive(app, TICKS, PARAMS, summariser)
    reqs = list(app.log.read(0, kinds=["summary.request"]))
    retries = [r for r in reqs if "retry_of" in r.payload["manifest"]]
    assert retries and len(reqs) == 2 * len(retries)
    first = retries[0].payload["manifest"]
    assert "missing open alerts #3" in first["reason"]
    assert next(app.log.read(first["retry_of"] - 1, until_seq=first["retry_of"])).kind == "summary.response"
    results = list(replay_summaries(app.log, app.prompts, S, policy=app.policy, tools=TOOLS))
    assert [r.seq for r in results] == [r.seq for r in reqs] and all(r.ok for r in results)
    code, out = verify(app, capsys)
    assert code == 0, out


def test_a_tampered_rejected_answer_fails_the_retrys_replay(tmp_path: Path) -> None:
    """The rejected answer a retry quotes, rewritten in its summary.response (chain recomputed): the
    retry's request no longer re-derives, while the first request, which does not contain it, still does."""
    app = make_app(tmp_path)
    drive(app, TICKS, PARAMS, FirstRejected())
    retry = next(r for r in app.log.read(0, kinds=["summary.request"]) if "retry_of" in r.payload["manifest"])
    app.log.close()
    with Tamper(tmp_path / "fleet.db") as t:
        t.rechain(retry.payload["manifest"]["retry_of"], lambda payload: payload.replace("1000 owned", "0 owned"))
    app.log = EventLog(tmp_path / "fleet.db", clock=Clock())
    results = {r.seq: r.ok for r in replay_summaries(app.log, app.prompts, S, policy=app.policy, tools=TOOLS)}
    assert results[retry.seq] is False
    assert results[retry.seq - 2] is True   # the first request of the same compaction


def test_a_ticks_request_records_the_parameters_the_server_received(sim: Any, make_app: Any, fake_model: Any) -> None:
    """Through the real SDK: what the fake server received besides model, messages and tools is exactly
    the recorded parameters the tick's model.request names."""
    from agent.runtime.tick import run_tick
    from tests.fakes.openai_server import reply

    fake_model.enqueue(reply("nothing to do"))
    app = make_app()
    assert run_tick(app).ok
    sent = {k: v for k, v in fake_model.chat_requests[-1].json.items() if k not in ("model", "messages", "tools")}
    req = next(app.log.read(0, kinds=["model.request"]))
    assert recorded(app.log)[manifest_of(req, recorded(app.log))["params_hash"]] == sent
    assert sent["temperature"] == app.settings.model.temperature
