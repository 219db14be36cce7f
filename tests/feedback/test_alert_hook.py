"""The alert hook keeps secrets and ticks safe: ``notify_command`` runs with a minimal environment (no
API keys), off the caller's path from a queue, and the model opens at most ``alerts.max_new_per_tick``
new alerts per tick."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from agent import feedback
from agent.feedback.alert_hook import INHERITED_ENV
from agent.runtime.tick import run_tick
from tests.conftest import events_of
from tests.fakes.openai_server import reply
from tests.feedback.test_feedback import app, with_notify  # noqa: F401 - the fixture

CANARY = "canary-key-5f3a9c1e7b"
DOCUMENTED = {"FLEET_AGENT_ALERT_ID", "FLEET_AGENT_SEVERITY", "FLEET_AGENT_AGENT_ID"}


def test_the_hook_sees_no_secrets(app, tmp_path, monkeypatch):  # noqa: F811
    """A hook that dumps its environment sees only PATH, LANG, TZ and the documented FLEET_AGENT_*
    variables: the vast.ai key, the model key and any other variable stay behind."""
    for name in ("VAST_API_KEY", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "SOME_TOKEN"):
        monkeypatch.setenv(name, CANARY)
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("TZ", "UTC")
    out = tmp_path / "env.json"
    script = tmp_path / "dump.py"
    script.write_text(f"import json, os\nopen({str(out)!r}, 'w').write(json.dumps(dict(os.environ)))\n")
    s = with_notify(app, f"{sys.executable} {script}")
    feedback.raise_alert(app.log, key="balance:low", severity="critical", title="broke", settings=s)
    assert feedback.drain_alert_hooks(30)
    env = json.loads(out.read_text())
    assert CANARY not in json.dumps(env)
    assert set(env) - {"LC_CTYPE"} <= set(INHERITED_ENV) | DOCUMENTED
    assert env["FLEET_AGENT_ALERT_ID"] == "1" and env["FLEET_AGENT_SEVERITY"] == "critical"
    assert env["FLEET_AGENT_AGENT_ID"] == "test-fleet" and env["LANG"] == "C.UTF-8" and env["TZ"] == "UTC"


def test_a_slow_hook_does_not_hold_the_caller(app, tmp_path):  # noqa: F811
    """raise_alert returns while the hook is still running: the hook waits for a file the test only
    writes after raise_alert returned, and finishes afterwards."""
    gate = tmp_path / "gate"
    done = tmp_path / "done"
    script = tmp_path / "slow.py"
    script.write_text("import os, sys, time\n"
                      f"while not os.path.exists({str(gate)!r}): time.sleep(0.01)\n"
                      f"open({str(done)!r}, 'w').write(sys.stdin.read())\n")
    s = with_notify(app, f"{sys.executable} {script}", timeout=60)
    feedback.raise_alert(app.log, key="k", severity="warning", title="slow hook", settings=s)
    assert not done.exists()  # the hook cannot have finished: the gate is still closed
    gate.write_text("open")
    assert feedback.drain_alert_hooks(60)
    assert json.loads(done.read_text())["title"] == "slow hook"


def test_the_model_opens_at_most_max_new_per_tick_alerts(sim, make_app, fake_model):
    """A model raising six different alerts in one tick opens alerts.max_new_per_tick (2 here); the rest
    get an error naming the setting, and a repeat of an open alert is still counted on it."""
    fleet = make_app(alerts={"max_new_per_tick": 2})
    calls = [("raise_alert", {"severity": "warning", "title": f"finding {i}", "key": f"f{i}"}) for i in range(6)]
    calls.append(("raise_alert", {"severity": "warning", "title": "finding 0", "key": "f0"}))
    fake_model.enqueue(reply(tool_calls=calls[:4]), reply(tool_calls=calls[4:]), reply("done"))
    r = run_tick(fleet)
    assert r.ok, r.reason
    raised = [e for e in events_of(fleet, "alert.raised") if e.payload["raised_by"] == "model"]
    assert [e.payload["dedup_key"] for e in raised] == ["f0", "f1"]
    results = [e.payload for e in events_of(fleet, "tool.result") if e.payload.get("name") == "raise_alert"
               or "alert" in json.dumps(e.payload)]
    refused = [p for p in results if "max_new_per_tick" in json.dumps(p)]
    assert len(refused) == 4
    assert [e.payload["alert_id"] for e in events_of(fleet, "alert.repeated")] == [raised[0].payload["alert_id"]]


def test_hook_env_lists_what_the_config_example_documents():
    """The variables a hook gets are the ones config.example.yaml names."""
    text = (Path(__file__).resolve().parents[2] / "config.example.yaml").read_text(encoding="utf-8")
    for name in (*INHERITED_ENV, *DOCUMENTED):
        assert name in text
