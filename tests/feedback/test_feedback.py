"""agent.feedback: alerts (dedup, ack, conditions, notify) and operator notes, on a real log."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from agent import config, feedback
from agent.errors import FleetAgentError
from agent.events import render
from agent.runtime.app import App

CONFIG = """\
agent_id: test-fleet
data_dir: ./data
knowledge_dir: ./knowledge
alerts:
  stuck_after: 20m
  low_balance: 25
  failed_ticks: 3
  policy_blocks: 5
"""


def make_app(tmp_path: Path, extra: str = "", storage_url: str | None = None) -> App:
    cfg = tmp_path / "config.yaml"
    storage = f'storage:\n  url: "{storage_url}"\n' if storage_url else ""
    cfg.write_text(CONFIG + extra + storage, encoding="utf-8")
    app = App(config.load(str(cfg)))
    app.init_database(exist_ok=True)
    return app


# Alerts, notes and knowledge run on SQLite and on PostgreSQL (every module using the app fixture).
pytestmark = pytest.mark.usefixtures("backend")


@pytest.fixture
def app(tmp_path: Path, storage_url: str | None):
    a = make_app(tmp_path, storage_url=storage_url)
    try:
        yield a
    finally:
        a.close()


def with_notify(app: App, command: str, timeout: float = 5.0) -> object:
    alerts = dataclasses.replace(app.settings.alerts, notify_command=command,
                                 notify_timeout=config.Duration(timeout))
    return dataclasses.replace(app.settings, alerts=alerts)


def kinds(app: App, kind: str) -> list:
    return list(app.log.read(kinds=[kind]))


def obs(instances=(), balance=100.0, **kw) -> dict:
    return {"time": 1_800_000_000.0, "balance": balance, "fleet_dph": 1.0, "instances": list(instances),
            "demand": None, "changes": [], "open_alerts": [], "errors": [], **kw}


def inst(iid: int, status: str = "running", age_s: float = 60.0, ours: bool = True, msg: str | None = None) -> dict:
    return {"id": iid, "label": f"fa-test-{iid}", "gpu_name": "RTX 4090", "num_gpus": 1, "status": status,
            "status_msg": msg, "dph": 0.4, "age_s": age_s, "host_id": 77, "ours": ours}


def open_alerts(app: App) -> list[tuple[int, str, int]]:
    return [(a.id, a.dedup_key, a.count) for a in app.log.store.open_alerts()]


# ------------------------------------------------------------------ rendering


def test_each_feedback_path_renders_its_tag_once(app):
    """Raise, ack, resolve, note, directive and unpin each append one event that renders to its tagged message."""
    log = app.log
    aid, new = feedback.raise_alert(log, key="k1", severity="warning", title="disk almost full", detail="92%")
    assert (aid, new) == (1, True)
    ack = feedback.ack(log, aid, "bob", "cleaned /tmp")
    note = feedback.say(log, "host 77 is flaky", "alice")
    pin = feedback.say(log, "never rent A100s", "alice", pin=True)
    unpin = feedback.unpin(log, pin.seq, "carol")
    feedback.raise_alert(log, key="k2", severity="info", title="something", tick=4)
    assert feedback.resolve_alert(log, "k2", "it went away", tick=5)

    texts = [render(e)["content"] for e in log.read() if render(e) is not None]
    assert texts == [
        "[alert #1 raised · system] warning: disk almost full — 92%",
        "[alert #1 acked · bob] disk almost full — note: cleaned /tmp",
        "[operator note · alice] host 77 is flaky",
        f"[operator directive #{pin.seq} · alice] never rent A100s",
        f"[operator · carol] directive #{pin.seq} withdrawn",
        "[alert #2 raised · system] info: something",
        "[alert #2 resolved · system] something — it went away",
    ]
    assert ack.source == note.source == pin.source == unpin.source == "operator"
    assert feedback.directives(log) == []
    assert log.rebuild_check() == []


def test_model_raised_alert_is_not_rendered_again(app):
    """An alert the model raised through its tool is logged but not echoed back to it."""
    aid, new = feedback.raise_alert(app.log, key="model:x", severity="critical", title="t", raised_by="model")
    assert new
    (e,) = kinds(app, "alert.raised")
    assert e.source == "tool" and render(e) is None


def test_bad_severity_and_empty_note_are_refused(app):
    """Invalid severity, empty notes, oversized notes and empty names raise FleetAgentError and write nothing."""
    with pytest.raises(FleetAgentError, match="severity"):
        feedback.raise_alert(app.log, key="k", severity="urgent", title="t")
    with pytest.raises(FleetAgentError, match="empty"):
        feedback.say(app.log, "   ", "alice")
    with pytest.raises(FleetAgentError, match="limit"):
        feedback.say(app.log, "x" * (feedback.MAX_NOTE_CHARS + 1), "alice")
    with pytest.raises(FleetAgentError, match="--by"):
        feedback.say(app.log, "hi", " ")
    assert app.log.count() == 0


# ------------------------------------------------------------------ ack and unpin refusals


def test_ack_refuses_unknown_acked_and_resolved_without_writing(app):
    """ack on an unknown or resolved alert raises a clear error and appends nothing; on an already-acked
    one it appends nothing and returns None (a no-op)."""
    log = app.log
    feedback.raise_alert(log, key="a", severity="warning", title="A")
    feedback.raise_alert(log, key="b", severity="warning", title="B")
    feedback.ack(log, 1, "bob", None)
    feedback.resolve_alert(log, "b", "gone")
    n = log.count()
    with pytest.raises(FleetAgentError, match=r"no alert #99"):
        feedback.ack(log, 99, "bob", None)
    assert feedback.ack(log, 1, "eve", "again") is None
    with pytest.raises(FleetAgentError, match=r"#2 is resolved"):
        feedback.ack(log, 2, "bob", None)
    assert log.count() == n


def test_unpin_refuses_unknown_and_inactive(app):
    """unpin of an unknown, non-pinned or withdrawn directive raises and appends nothing."""
    log = app.log
    plain = feedback.say(log, "just a note", "alice")
    pin = feedback.say(log, "keep 2 spare", "alice", pin=True)
    assert [d["id"] for d in feedback.directives(log)] == [pin.seq]
    feedback.unpin(log, pin.seq, "bob")
    n = log.count()
    for bad in (plain.seq, pin.seq, 12345):
        with pytest.raises(FleetAgentError):
            feedback.unpin(log, bad, "bob")
    assert log.count() == n


# ------------------------------------------------------------------ conditions


def test_stuck_instance_over_20_ticks_is_one_alert_with_count_20(app):
    """The same stuck instance seen at 20 ticks is one open alert with count 20; it resolves when it runs."""
    s = app.settings
    for t in range(1, 21):
        feedback.check_conditions(app.log, s, obs([inst(5, "loading", age_s=1300 + t * 300), inst(6)]), t)
    assert open_alerts(app) == [(1, "stuck:5", 20)]
    assert len(kinds(app, "alert.raised")) == 1
    assert len(kinds(app, "alert.repeated")) == 19
    (raised,) = kinds(app, "alert.raised")
    assert render(raised)["content"].startswith("[alert #1 raised · system] warning: instance #5 stuck in loading")

    feedback.check_conditions(app.log, s, obs([inst(5, "running", age_s=9000), inst(6)]), 21)
    assert open_alerts(app) == []
    (res,) = kinds(app, "alert.resolved")
    assert res.payload["alert_id"] == 1 and res.tick == 21
    feedback.check_conditions(app.log, s, obs([inst(5, "running", age_s=9300)]), 22)
    assert len(kinds(app, "alert.resolved")) == 1
    assert app.log.rebuild_check() == []


def test_dead_instances_and_young_or_foreign_ones(app):
    """Exited/offline/OCI-failed instances of ours raise dead:<id> (not also stuck); young, running
    or foreign instances raise nothing; a destroyed instance's alert resolves."""
    s = app.settings
    o = obs([inst(1, "exited", age_s=5000), inst(2, "loading", age_s=100, msg="OCI runtime create failed: x"),
             inst(3, "loading", age_s=100), inst(4, "offline", age_s=9000, ours=False)])
    feedback.check_conditions(app.log, s, o, 1)
    assert [k for _, k, _ in open_alerts(app)] == ["dead:1", "dead:2"]
    (a1, a2) = kinds(app, "alert.raised")
    assert a1.payload["severity"] == "critical"
    assert "OCI runtime create failed" in a2.payload["detail"]
    feedback.check_conditions(app.log, s, obs([inst(2, "running")]), 2)
    assert open_alerts(app) == []


def test_low_balance_raises_and_recovers(app):
    """balance < low_balance raises balance:low; unknown balance changes nothing; recovery resolves it."""
    s = app.settings
    feedback.check_conditions(app.log, s, obs(balance=10.0), 1)
    feedback.check_conditions(app.log, s, obs(balance=None), 2)
    feedback.check_conditions(app.log, s, obs(balance=9.0), 3)
    assert open_alerts(app) == [(1, "balance:low", 2)]
    feedback.check_conditions(app.log, s, obs(balance=80.0), 4)
    assert open_alerts(app) == []
    assert "balance back to $80.00" in kinds(app, "alert.resolved")[0].payload["reason"]


def test_failing_ticks_alert_after_n_in_a_row(app):
    """failed_ticks trailing tick.failed events raise ticks:failing; a completed tick resolves it."""
    s, log = app.settings, app.log
    log.append("tick.completed", {"steps": 1}, "scheduler", 1)
    for t in (2, 3):
        log.append("tick.failed", {"reason": "vast.ai timed out"}, "scheduler", t)
    feedback.check_conditions(log, s, obs(), 4)
    assert open_alerts(app) == []
    log.append("tick.failed", {"reason": "model unreachable"}, "scheduler", 4)
    feedback.check_conditions(log, s, obs(), 5)
    (raised,) = kinds(app, "alert.raised")
    assert raised.payload["dedup_key"] == "ticks:failing"
    assert raised.payload["title"] == "3 ticks failed in a row"
    assert "model unreachable" in raised.payload["detail"]
    log.append("tick.completed", {"steps": 1}, "scheduler", 5)
    feedback.check_conditions(log, s, obs(), 6)
    assert open_alerts(app) == []


def test_policy_blocks_threshold(app):
    """note_policy_blocks raises policy:blocks at the threshold and resolves below it."""
    s = app.settings
    feedback.note_policy_blocks(app.log, s, 4, 1)
    assert open_alerts(app) == []
    feedback.note_policy_blocks(app.log, s, 5, 2)
    feedback.note_policy_blocks(app.log, s, 7, 3)
    assert open_alerts(app) == [(1, "policy:blocks", 2)]
    feedback.note_policy_blocks(app.log, s, 0, 4)
    assert open_alerts(app) == []


def test_acked_condition_that_persists_is_not_raised_again(app):
    """After an ack, the same condition counts on the acked alert instead of opening a new one;
    once it clears the alert is resolved, and a later recurrence opens a new alert."""
    s = app.settings
    stuck = obs([inst(9, "loading", age_s=5000)])
    feedback.check_conditions(app.log, s, stuck, 1)
    feedback.ack(app.log, 1, "bob", "looking")
    feedback.check_conditions(app.log, s, stuck, 2)
    feedback.check_conditions(app.log, s, stuck, 3)
    assert len(kinds(app, "alert.raised")) == 1
    a = app.log.store.alert(1)
    assert (a.status, a.count) == ("acked", 3)
    feedback.check_conditions(app.log, s, obs([inst(9)]), 4)
    assert [e.payload["alert_id"] for e in kinds(app, "alert.resolved")] == [1]
    feedback.check_conditions(app.log, s, stuck, 5)
    assert open_alerts(app) == [(2, "stuck:9", 1)]
    assert app.log.rebuild_check() == []


def test_resolve_absent_only_touches_its_prefix(app):
    """resolve_absent resolves live keys under the prefix that are not still present, nothing else."""
    log = app.log
    for key in ("dead:1", "dead:2", "stuck:1"):
        feedback.raise_alert(log, key=key, severity="warning", title=key)
    assert feedback.resolve_absent(log, "dead:", {"dead:2"}) == [1]
    assert [k for _, k, _ in open_alerts(app)] == ["dead:2", "stuck:1"]
    assert feedback.resolve_alert(log, "nope", "x") is False


# ------------------------------------------------------------------ notify


def test_notify_command_receives_the_alert_json(app, tmp_path):
    """A new alert runs notify_command with the notification as JSON on stdin (the alert's id, title, key
    and severity, why, and the logged alert.notified's seq); a repeat does not."""
    out = tmp_path / "got.json"
    script = tmp_path / "notify.py"
    script.write_text("import sys, pathlib\npathlib.Path(sys.argv[1]).open('a').write(sys.stdin.read())\n")
    s = with_notify(app, f"{sys.executable} {script} {out}")
    feedback.raise_alert(app.log, key="balance:low", severity="critical", title="broke", detail="$1", settings=s)
    feedback.raise_alert(app.log, key="balance:low", severity="critical", title="broke", settings=s)
    assert feedback.drain_alert_hooks(30)
    lines = out.read_text().splitlines()
    assert len(lines) == 1
    body = json.loads(lines[0])
    assert body["alert_id"] == 1 and body["title"] == "broke" and body["dedup_key"] == "balance:low"
    assert body["severity"] == "critical" and body["agent_id"] == "test-fleet" and body["reason"] == "opened"
    assert app.log.get(body["seq"]).kind == "alert.notified" and body["alerts"][0]["detail"] == "$1"


def test_failing_or_missing_notify_command_is_logged_not_raised(app, tmp_path):
    """A notify command that exits non-zero or does not exist is logged; the alert is still raised."""
    s = with_notify(app, f"{sys.executable} -c \"import sys; sys.stderr.write('boom'); sys.exit(3)\"")
    with capture_logs() as logs:
        assert feedback.raise_alert(app.log, key="a", severity="warning", title="A", settings=s) == (1, True)
        assert feedback.drain_alert_hooks(30)
    failed = [x for x in logs if x["event"] == "alert.notify_failed"]
    assert failed and failed[0]["status"] == 3 and "boom" in failed[0]["stderr"]
    s = with_notify(app, str(tmp_path / "no-such-command"))
    with capture_logs() as logs:
        assert feedback.raise_alert(app.log, key="b", severity="warning", title="B", settings=s) == (2, True)
        assert feedback.drain_alert_hooks(30)
    assert [x["error"] for x in logs if x["event"] == "alert.notify_failed"] == ["FileNotFoundError"]


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_hanging_notify_command_is_killed_at_the_timeout(app, tmp_path):
    """A notify command that hangs is killed with its whole process group after notify_timeout,
    and raise_alert returns normally."""
    pids = tmp_path / "pids"
    script = tmp_path / "hang.sh"
    script.write_text(f"#!/bin/sh\nsleep 30 &\necho $$ $! > {pids}\nwait\n")
    script.chmod(0o755)
    # 3 s: the shell must have started its child and written the pids before the timeout, on a loaded machine
    s = with_notify(app, str(script), timeout=3.0)
    with capture_logs() as logs:
        assert feedback.raise_alert(app.log, key="h", severity="warning", title="H", settings=s) == (1, True)
        assert feedback.drain_alert_hooks(30)
    assert [x["event"] for x in logs if x["event"].startswith("alert.notify")] == ["alert.notify_timeout"]
    shell, child = (int(x) for x in pids.read_text().split())
    deadline = time.monotonic() + 30  # a bound, not a measure: the loop ends as soon as both are gone
    while not (_gone(shell) and _gone(child)) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _gone(shell) and _gone(child)
    assert os.path.exists(pids)
