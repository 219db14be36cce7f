"""The `context` and `replay` commands, run through their argparse registration."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from agent.cli import build_parser
from agent.context import project
from agent.context.compaction import compact
from agent.context.inputs import log_request
from agent.context.prompts import load_prompts
from agent.store.log import EventLog
from tests.context.test_context import POLICY, TOOLS, Clock
from tests.context.test_context_props import S, run

TICKS = [{"outputs": [400, 200], "feedback": f, "crash": False}
         for f in ("directive", "memory", "note", "knowledge", "ack", "none", "directive", "memory", "none", "none")]


def make_app(tmp_path: Path) -> SimpleNamespace:
    pdir = tmp_path / "prompts"
    pdir.mkdir(exist_ok=True)
    for name in ("system.md", "summarize.md"):
        shutil.copyfile(str(resources.files("agent") / "prompts" / name), pdir / name)
    log = EventLog(tmp_path / "fleet.db", clock=Clock())
    app = SimpleNamespace(log=log, prompts=load_prompts(pdir), prompts_dir=pdir,
                          settings=SimpleNamespace(context=S, model=SimpleNamespace(name="m")),
                          policy_dict=lambda: POLICY, tool_specs=lambda: TOOLS)
    return app


def cli(app: Any, *argv: str) -> int:
    args = build_parser().parse_args(list(argv))
    return int(args.func(args, app))


def logged_as_the_tick_does(app: SimpleNamespace) -> Callable[..., None]:
    """A ``run`` step that compacts when needed, then logs the request through ``log_request`` (its inputs
    not yet logged, then the ``model.request``), as the tick does."""

    def step(log: EventLog, n: int, state: dict[str, Any], requests: list[Any]) -> None:
        compact(log, app.prompts, S, policy=POLICY, tools=TOOLS, summarizer=None, tick=n, open_alert_ids=[3],
                owned_instance_ids=[1000])
        p = project(log, app.prompts, S, policy=POLICY, tools=TOOLS, model="m")
        log_request(log, p, prompts=app.prompts, policy=POLICY, tools=TOOLS, tick=n)

    return step


def test_context_tick_prints_the_recorded_request(tmp_path, capsys):
    """`context --tick N` re-derives exactly the messages tick N last sent: the recorded hash matches."""
    app = make_app(tmp_path)
    run(app.log, TICKS)
    capsys.readouterr()  # drop the run's own log lines
    assert any(True for _ in app.log.read(0, kinds=["context.compacted"]))
    for n in (1, 6, 10):
        rec = next(app.log.read(0, kinds=["model.request"], tick=n, newest_first=True, limit=1))
        assert cli(app, "context", "--tick", str(n), "--json") == 0
        out = json.loads(capsys.readouterr().out)
        assert out["manifest"]["request_hash"] == rec.payload["request_hash"]
        assert out["recorded_hash_matches"] is True and out["recorded_request_seq"] == rec.seq
    assert cli(app, "context", "--tick", "10") == 0
    text = capsys.readouterr().out
    assert "hash matches" in text and "sections: system" in text and "── [0] system" in text


def test_context_now_and_at_time(tmp_path, capsys):
    """`context` shows the request the model would get now; `--at` one from the past, fewer events."""
    app = make_app(tmp_path)
    run(app.log, TICKS[:3])
    capsys.readouterr()  # drop the run's own log lines
    assert cli(app, "context", "--json") == 0
    now = json.loads(capsys.readouterr().out)
    ts = app.log.get(5).ts
    assert cli(app, "context", "--at", ts, "--json") == 0
    past = json.loads(capsys.readouterr().out)
    assert past["manifest"]["thread_to"] == 5 < now["manifest"]["thread_to"]
    assert len(past["messages"]) < len(now["messages"])
    assert past["messages"][0] == now["messages"][0]


def test_replay_verify_passes_on_untouched_log(tmp_path, capsys):
    """`replay --verify` re-derives every recorded request and finds every hash equal."""
    app = make_app(tmp_path)
    run(app.log, TICKS, step=logged_as_the_tick_does(app))
    capsys.readouterr()  # drop the run's own log lines
    n = sum(1 for _ in app.log.read(0, kinds=["model.request"]))
    assert cli(app, "replay", "--verify") == 0
    assert f"replay: {n} requests re-derived, every hash matches" in capsys.readouterr().out


def test_replay_verify_names_the_changed_prompt_file(tmp_path, capsys):
    """On a log written before the prompt texts were recorded (v1 requests naming them by hash only), after
    system.md is edited `replay --verify` fails at the first request, naming both hashes."""
    from tests.events.test_replay_versions import v1_log

    app = make_app(tmp_path)
    app.log.close()
    app.log = v1_log(tmp_path / "old.db", app.prompts, TICKS[:4], inputs=False)
    capsys.readouterr()  # drop the run's own log lines
    old = app.prompts.hashes["system.md"]
    f = app.prompts_dir / "system.md"
    f.write_text(f.read_text() + "\nAlways rent the cheapest offer.\n")
    app.prompts = load_prompts(app.prompts_dir)
    new = app.prompts.hashes["system.md"]
    assert cli(app, "replay", "--verify") == 1
    out = capsys.readouterr().out
    first = next(app.log.read(0, kinds=["model.request"])).seq
    assert f"request #{first} (tick 1) does not match" in out
    assert f"prompt file system.md changed: recorded sha256 {old}, current {new}" in out
    assert cli(app, "replay", "--verify", "--json") == 1
    rep = json.loads(capsys.readouterr().out)
    assert rep["ok"] is False and rep["first_mismatch"]["seq"] == first
