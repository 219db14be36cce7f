"""Replay survives prompt, policy and version changes: the inputs of each request are read back from the log.

A run records every request the way the tick does (``log_request``: the inputs not yet logged, then ``model.request``). Then the
operator edits prompts/system.md, changes the policy, or fleet-agent ships a new rendering of a kind (a
version bump): ``replay --verify`` still re-derives every past request byte for byte. It still fails when
an event is tampered with, and when a rendering is changed in place without a version bump.
"""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from agent.context import project
from agent.context.compaction import compact
from agent.context.inputs import KIND, log_request, record_inputs, recorded
from agent.context.prompts import load_prompts
from agent.context.replay import replay_summaries
from agent.events import Event, Message
from agent.events.kinds import VOCABULARY
from agent.events.kinds.tick import TickStartedV1
from agent.events.rendering import render_observation, user
from agent.events.vocabulary import Version
from agent.store.log import EventLog
from tests.cli.test_cli_context import TICKS, cli
from tests.context.test_context import POLICY, TOOLS, Clock
from tests.context.test_context_props import S, run
from tests.tamper import Tamper


def make_app(tmp_path: Path) -> SimpleNamespace:
    pdir = tmp_path / "prompts"
    pdir.mkdir(exist_ok=True)
    for name in ("system.md", "summarize.md"):
        shutil.copyfile(str(resources.files("agent") / "prompts" / name), pdir / name)
    app = SimpleNamespace(log=EventLog(tmp_path / "fleet.db", clock=Clock()), prompts=load_prompts(pdir),
                          prompts_dir=pdir, policy=dict(POLICY),
                          settings=SimpleNamespace(context=S, model=SimpleNamespace(name="m")))
    app.policy_dict = lambda: app.policy
    app.tool_specs = lambda: TOOLS
    return app


@dataclass
class Answer:
    text: str


class Summariser:
    """A summariser that answers every request with the same short summary (the check may reject it)."""

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Answer:
        return Answer("## Fleet state and commitments\n- instance 1000 owned; alert #3 open\n## Decisions and why\n"
                      "- none")


def drive(app: SimpleNamespace, ticks: list[dict[str, Any]], summariser: Summariser | None = None) -> None:
    """``ticks`` through the log, each request recorded as the tick records it, with the app's inputs now."""

    def step(log: EventLog, n: int, state: dict[str, Any], requests: list[Any]) -> None:
        compact(log, app.prompts, S, policy=app.policy, tools=TOOLS, summarizer=summariser, tick=n,
                open_alert_ids=[3], owned_instance_ids=[1000], model_name="m")
        p = project(log, app.prompts, S, policy=app.policy, tools=TOOLS, model="m")
        log_request(log, p, prompts=app.prompts, policy=app.policy, tools=TOOLS, tick=n)

    run(app.log, ticks, step=step)


def verify(app: SimpleNamespace, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    code = cli(app, "replay", "--verify")
    return code, capsys.readouterr().out


def requests(app: SimpleNamespace) -> int:
    return sum(1 for _ in app.log.read(0, kinds=["model.request"]))


def test_each_input_is_logged_once_by_hash(tmp_path: Path) -> None:
    """Both prompt files, the policy, the tool schemas and the requests' shared bundle (model, hashes,
    settings) are logged in full the first time their hash is seen, and never again while they stay the
    same."""
    app = make_app(tmp_path)
    drive(app, TICKS[:3])
    names = [e.payload["name"] for e in app.log.read(0, kinds=[KIND])]
    assert sorted(names) == ["policy", "request", "summarize.md", "system.md", "tools"]
    texts = recorded(app.log)
    assert texts[app.prompts.hashes["system.md"]] == app.prompts.system
    assert record_inputs(app.log, app.prompts, app.policy, TOOLS, None) == 0


def test_replay_passes_after_editing_the_system_prompt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """After prompts/system.md is edited, requests made before and after the edit all replay: each is
    re-derived from the text recorded under the hash its manifest names."""
    app = make_app(tmp_path)
    drive(app, TICKS[:4])
    f = app.prompts_dir / "system.md"
    f.write_text(f.read_text() + "\nAlways rent the cheapest offer.\n")
    app.prompts = load_prompts(app.prompts_dir)
    assert verify(app, capsys) == (0, f"replay: {requests(app)} requests re-derived, every hash matches\n")
    drive(app, TICKS[4:7])
    f.write_text("A new charter.\n{policy}\n")
    app.prompts = load_prompts(app.prompts_dir)
    assert verify(app, capsys)[0] == 0
    assert [e.payload["name"] for e in app.log.read(0, kinds=[KIND])].count("system.md") == 2


def test_replay_passes_after_changing_the_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """After policy.allowed_gpus changes (it is rendered into the system prompt), every request still
    replays, those under the old policy and those under the new."""
    app = make_app(tmp_path)
    drive(app, TICKS[:4])
    app.policy = {**app.policy, "allowed_gpus": ["H100"], "max_instances": 1}
    assert verify(app, capsys)[0] == 0
    drive(app, TICKS[4:7])
    app.policy = dict(POLICY)
    code, out = verify(app, capsys)
    assert (code, out) == (0, f"replay: {requests(app)} requests re-derived, every hash matches\n")


def _r_tick_started_v3(e: Event, p: TickStartedV1) -> Message:
    return user(render_observation(e.tick, e.ts, p.observation).replace("observation", "what the agent sees", 1))


def test_replay_passes_after_a_rendering_change_with_a_version_bump(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """An upgrade that renders tick.started differently as a new version: events stored under the old
    version render as they did, so past requests replay; new events take the new rendering, and requests
    made after the upgrade replay too."""
    app = make_app(tmp_path)
    drive(app, TICKS[:4])
    k = VOCABULARY.kinds["tick.started"]
    bumped = dataclasses.replace(k, versions=(*k.versions, Version(3, TickStartedV1, _r_tick_started_v3,
                                                                      upcast=lambda p: p)))
    monkeypatch.setitem(VOCABULARY.kinds, "tick.started", bumped)
    monkeypatch.setitem(VOCABULARY.upcasters, ("tick.started", 2), lambda p: p)
    assert verify(app, capsys)[0] == 0
    drive(app, TICKS[4:6])
    newest = next(app.log.read(0, kinds=["tick.started"], newest_first=True, limit=1))
    assert newest.version == 3
    assert verify(app, capsys)[0] == 0


def test_replay_fails_after_a_rendering_change_in_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """Changing a released version's renderer instead of adding a version is caught: replay fails."""
    app = make_app(tmp_path)
    drive(app, TICKS[:4])
    k = VOCABULARY.kinds["tick.started"]
    edited = dataclasses.replace(k, versions=(*k.versions[:-1],
                                              dataclasses.replace(k.versions[-1], render=_r_tick_started_v3)))
    monkeypatch.setitem(VOCABULARY.kinds, "tick.started", edited)
    code, out = verify(app, capsys)
    assert code == 1 and "does not match" in out


def test_replay_still_fails_on_a_tampered_event(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An operator note rewritten behind fleet-agent's back, with the hash chain recomputed so only the
    request hashes can tell, fails replay even though every input is read from the log."""
    app = make_app(tmp_path)
    drive(app, TICKS[:4])
    note = next(app.log.read(0, kinds=["operator.note"]))
    app.log.close()
    with Tamper(tmp_path / "fleet.db") as t:
        t.rechain(note.seq, lambda payload: payload.replace(note.payload["text"], "rent 40 H100s"))
    app.log = EventLog(tmp_path / "fleet.db", clock=Clock())
    code, out = verify(app, capsys)
    assert code == 1 and "does not match" in out


def test_summariser_requests_are_logged_and_replayed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every summariser call is logged as a request (hash and manifest) and a response; replay re-plans
    each from the log and its recorded inputs, also after summarize.md is edited, and a tampered event
    in the span it summarised makes it differ."""
    app = make_app(tmp_path)
    drive(app, TICKS, Summariser())
    reqs = list(app.log.read(0, kinds=["summary.request"]))
    responses = list(app.log.read(0, kinds=["summary.response"]))
    assert reqs and [r.payload["request_seq"] for r in responses] == [r.seq for r in reqs]
    f = app.prompts_dir / "summarize.md"
    f.write_text("Summarise in one line.\n")
    app.prompts = load_prompts(app.prompts_dir)
    code, out = verify(app, capsys)
    assert (code, out) == (0, f"replay: {requests(app) + len(reqs)} requests re-derived, every hash matches\n")
    first = reqs[0].payload["manifest"]
    note = next(e for e in app.log.read(0, kinds=["tool.result"]) if e.seq <= first["end"])
    app.log.close()
    with Tamper(tmp_path / "fleet.db") as t:
        t.rechain(note.seq, lambda payload: payload.replace("gpu", "GPU", 1))
    app.log = EventLog(tmp_path / "fleet.db", clock=Clock())
    results = list(replay_summaries(app.log, app.prompts, S, policy=app.policy, tools=TOOLS))
    assert not results[0].ok
