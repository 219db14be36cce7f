"""The demo: the first five minutes of a newcomer, run as a test."""

from __future__ import annotations

import io
import re
import subprocess
import sys

import pytest

from agent.config import load
from agent.runtime.demo import run_demo
from agent.store.log import EventLog


def test_demo_six_ticks_exits_zero_with_every_kind_of_story(tmp_path):
    """`demo --ticks 6` completes every tick, its log verifies, and it shows a rent,
    an operator ack, a knowledge edit, a pinned directive and a compaction; and every operator input
    reached the model verbatim ("operator inputs seen by the model: N/N")."""
    out = io.StringIO()
    rc = run_demo(ticks=6, speed=1e9, keep=str(tmp_path / "d"), out=out)
    text = out.getvalue()
    assert rc == 0, text
    settings = load(str(tmp_path / "d" / "config.yaml"))
    log = EventLog(settings.db_path)
    try:
        assert log.verify().ok
        kinds = [e.kind for e in log.read(0)]
        rents = [e for e in log.read(0, kinds=["tool.result"])
                 if e.payload["ok"] and (e.payload.get("effect") or {}).get("type") == "rented"]
        assert rents, "the demo rents at least one instance"
        assert "alert.acked" in kinds
        assert any(e.payload["change"] == "changed" for e in log.read(0, kinds=["knowledge.changed"]))
        assert any(e.payload.get("pin") for e in log.read(0, kinds=["operator.note"]))
        assert "context.compacted" in kinds
        assert kinds.count("tick.completed") == 6 and "tick.failed" not in kinds
        assert log.rebuild_check() == []
    finally:
        log.close()
    seen = re.search(r"operator inputs seen by the model: (\d+)/(\d+)", text)
    assert seen and seen.group(1) == seen.group(2) and int(seen.group(2)) >= 3, text
    assert "demo finished" in text and "replay --verify" in text and "BLOCKED" not in text.split("demo finished")[1]


@pytest.mark.slow
def test_demo_commands_it_prints_work(tmp_path):
    """The commands the demo prints at the end run against what it recorded."""
    out = io.StringIO()
    assert run_demo(ticks=4, speed=1e9, keep=str(tmp_path / "d"), out=out) == 0
    cfg = str(tmp_path / "d" / "config.yaml")
    for args in (["log", "verify"], ["replay", "--verify"], ["context", "--tick", "2"], ["alerts", "list", "--all"],
                 ["thread", "show", "--kind", "tool.", "--limit", "5"]):
        r = subprocess.run([sys.executable, "-m", "agent.cli", "--config", cfg, *args], capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, (args, r.stdout, r.stderr)


def test_demo_refuses_a_directory_that_holds_a_demo(tmp_path):
    """--keep DIR never overwrites an earlier demo."""
    assert run_demo(ticks=1, speed=1e9, keep=str(tmp_path / "d"), out=io.StringIO()) == 0
    before = (tmp_path / "d" / "config.yaml").read_bytes()
    out = io.StringIO()
    assert run_demo(ticks=1, speed=1e9, keep=str(tmp_path / "d"), out=out) == 2
    assert "already holds a demo" in out.getvalue()
    assert (tmp_path / "d" / "config.yaml").read_bytes() == before


def test_demo_model_timeout_defaults_long_with_a_model_url(tmp_path):
    """`demo --model-url` gives each model request 600 s by default (a cold CPU model needs minutes for a
    fleet's first request) and a tick room for its steps; --model-timeout sets it; the CLI refuses a
    timeout that is not a positive number."""
    from agent import config
    from agent.cli import build_parser
    from agent.runtime.demo import demo_config

    def parsed(**kw: object) -> config.Settings:
        text = demo_config(tmp_path, "http://127.0.0.1:9", budget=6000, **kw)  # type: ignore[arg-type]
        return config.parse(text, str(tmp_path / "config.yaml"))

    real = parsed(model_url="http://127.0.0.1:8080/v1", model="m")
    assert real.model.timeout == 600 and real.schedule.tick_timeout >= 8 * 600
    assert parsed(model_url="http://127.0.0.1:8080/v1", model="m", model_timeout=45.5).model.timeout == 45.5
    assert parsed(model_url=None, model=None).model.timeout == 60
    args = build_parser().parse_args(["demo", "--model-url", "http://x/v1", "--model", "m", "--model-timeout", "90"])
    assert args.model_timeout == 90.0
    with pytest.raises(SystemExit):
        build_parser().parse_args(["demo", "--model-timeout", "0"])
