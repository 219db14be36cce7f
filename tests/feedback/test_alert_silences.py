"""Alerts like Alertmanager: silences (by alert or key pattern, with expiry), notifications on open (grouped
by key prefix), on repeat while unacked and on resolve; value-tracking titles updated in place; re-ack a
no-op; 'alerts show' says resolved after an ack."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta

import pytest

from agent import cli, feedback
from agent.errors import FleetAgentError
from agent.events import render
from tests.feedback.test_feedback import app, inst, obs, with_notify  # noqa: F401 - the fixture

# Runs on SQLite and on PostgreSQL (the app fixture opens the log on the test's backend).
pytestmark = pytest.mark.usefixtures("backend")


class Clock:
    """The log's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def at(self, **delta: float) -> Clock:
        self.now = datetime(2026, 12, 1, 8, 0, tzinfo=UTC) + timedelta(**delta)
        return self


@pytest.fixture
def clock(app):  # noqa: F811
    c = Clock()
    app.log.clock = c
    return c


@pytest.fixture
def hook(app, tmp_path):  # noqa: F811
    """Settings whose notify command appends each notification's JSON to a file; returns (settings, read)."""
    out = tmp_path / "notified.jsonl"
    script = tmp_path / "notify.py"
    script.write_text("import sys, pathlib\npathlib.Path(sys.argv[1]).open('a').write(sys.stdin.read())\n")
    s = with_notify(app, f"{sys.executable} {script} {out}", timeout=30)

    def read() -> list[dict]:
        assert feedback.drain_alert_hooks(60)
        return [json.loads(x) for x in out.read_text().splitlines()] if out.exists() else []
    return s, read


def test_alerts_opened_together_are_one_notification_per_key_prefix(app, hook):  # noqa: F811
    """Two stuck instances and a low balance seen in one tick: one notification for the 'stuck' group
    (both alerts listed) and one for the balance; the next tick with the same conditions notifies nobody."""
    s, read = hook
    o = obs([inst(5, "loading", age_s=3000), inst(6, "loading", age_s=3000)], balance=10.0)
    feedback.check_conditions(app.log, s, o, 1)
    got = read()
    assert sorted((n["group"], n["reason"], len(n["alerts"])) for n in got) == [("balance", "opened", 1),
                                                                                ("stuck", "opened", 2)]
    stuck = next(n for n in got if n["group"] == "stuck")
    assert [a["dedup_key"] for a in stuck["alerts"]] == ["stuck:5", "stuck:6"] and stuck["alert_id"] == 1
    second = [app.log.get(q).kind for q in app.log.store.alert_history_seqs(2)]
    assert second == ["alert.raised", "alert.notified"]  # the group's notification is in each alert's history
    feedback.check_conditions(app.log, s, o, 2)
    assert len(read()) == 2


def test_repeat_while_unacked_then_resolve(app, hook, clock):  # noqa: F811
    """An open alert nobody acked is notified again once repeat_after (4h) passed since its last
    notification, not before; an acked one is not repeated; each notified alert that resolves is notified
    as resolved (acked or not)."""
    s, read = hook
    feedback.raise_alert(app.log, key="dead:1", severity="critical", title="instance #1 exited", settings=s)
    feedback.raise_alert(app.log, key="orphan:2", severity="warning", title="orphan #2", settings=s)
    clock.at(hours=3)
    assert feedback.dispatch_notifications(app.log, s) == []
    feedback.ack(app.log, 2, "bob", None)
    clock.at(hours=4, minutes=1)
    again = feedback.dispatch_notifications(app.log, s)
    assert [(e.payload["reason"], e.payload["alert_id"]) for e in again] == [("repeat", 1)]
    clock.at(hours=5)
    assert feedback.dispatch_notifications(app.log, s) == []
    feedback.resolve_alert(app.log, "dead:1", "gone")
    feedback.resolve_alert(app.log, "orphan:2", "gone")
    done = feedback.dispatch_notifications(app.log, s)
    assert sorted((e.payload["reason"], e.payload["alert_id"]) for e in done) == [("resolved", 1), ("resolved", 2)]
    assert [n["reason"] for n in read()] == ["opened", "opened", "repeat", "resolved", "resolved"]
    assert feedback.dispatch_notifications(app.log, s) == []


def test_silenced_alerts_notify_nobody_and_the_model_sees_them_marked(app, hook, capsys):  # noqa: F811
    """A silence by key pattern keeps new matching alerts quiet (no command runs; an alert raised later
    matches too); the observation lists them marked silenced; the silence is a tagged message for the
    model; after 'alerts unsilence' the alert notifies at the next dispatch."""
    s, read = hook
    cfg = str(app.settings.source_path)
    assert cli.main(["--config", cfg, "alerts", "silence", "--key", "stuck:*", "--for", "2h",
                     "--reason", "host 77 in maintenance", "--by", "alice"]) == 0
    out = capsys.readouterr().out
    sid = int(out.split("#")[1].split(":")[0])
    feedback.check_conditions(app.log, s, obs([inst(5, "loading", age_s=3000)], balance=10.0), 1)
    assert [n["group"] for n in read()] == ["balance"]
    lines = feedback.alert_lines(app.log)
    assert any(ln.startswith("#1 warning: instance #5 stuck") and "(silenced until" in ln and "by alice)" in ln
               for ln in lines)
    assert not any("silenced" in ln for ln in lines if "balance" in ln)
    msg = render(app.log.get(sid))
    assert msg["content"].startswith(f"[alert silence #{sid} · alice] alerts with key stuck:* silenced until ")
    assert msg["content"].endswith("— host 77 in maintenance")

    assert cli.main(["--config", cfg, "alerts", "silences", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["id"], r["key_pattern"], r["state"]) for r in rows] == [(sid, "stuck:*", "active")]
    assert rows[0]["until_ts"].endswith("Z")
    assert cli.main(["--config", cfg, "alerts", "list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [f"#{sid})" in ln for ln in listed] == [True, False]  # the stuck alert (#1), then the balance one
    assert cli.main(["--config", cfg, "alerts", "show", "1", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)  # show names the silence as list does
    assert shown["silence_id"] == sid and shown["silenced_until"] == rows[0]["until_ts"]
    assert cli.main(["--config", cfg, "alerts", "unsilence", str(sid), "--by", "alice"]) == 0
    assert render(app.log.get(app.log.last_seq()))["content"] == f"[alert silence #{sid} lifted · alice]"
    feedback.dispatch_notifications(app.log, s)
    assert [n["group"] for n in read()] == ["balance", "stuck"]
    with pytest.raises(FleetAgentError, match="already lifted"):
        feedback.unsilence(app.log, sid, "alice")


def test_a_silence_expires_and_one_alert_can_be_silenced(app, hook, clock):  # noqa: F811
    """A silence of one alert by id holds until its end: its repeat is quiet then; after expiry the alert
    notifies again. Silencing an unknown alert, or with no reason, is refused and writes nothing."""
    s, read = hook
    feedback.raise_alert(app.log, key="dead:1", severity="critical", title="instance #1 exited", settings=s)
    n = app.log.count()
    with pytest.raises(FleetAgentError, match="no alert #9"):
        feedback.silence(app.log, by="bob", reason="x", seconds=60, alert_id=9)
    with pytest.raises(FleetAgentError, match="needs --reason"):
        feedback.silence(app.log, by="bob", reason=" ", seconds=60, alert_id=1)
    assert app.log.count() == n
    feedback.silence(app.log, by="bob", reason="replacing it", seconds=6 * 3600, alert_id=1)
    clock.at(hours=5)
    assert feedback.dispatch_notifications(app.log, s) == []
    clock.at(hours=7)
    later = feedback.dispatch_notifications(app.log, s)
    assert [e.payload["reason"] for e in later] == ["repeat"]
    assert [x["reason"] for x in read()] == ["opened", "repeat"]


def test_value_tracking_titles_update_and_show_says_resolved(app, capsys):  # noqa: F811
    """A low-balance alert seen again at a new balance gets the new title (an alert.retitled event, the
    first event untouched); once resolved after an ack, 'alerts show' says resolved (text and JSON)."""
    s = app.settings
    feedback.check_conditions(app.log, s, obs(balance=12.0), 1)
    feedback.check_conditions(app.log, s, obs(balance=9.0), 2)
    a = app.log.store.alert(1)
    assert a.title == "credit $9.00 is below $25.00" and a.count == 2
    assert [e.payload["previous"] for e in app.log.read(kinds=["alert.retitled"])] == [
        "credit $12.00 is below $25.00"]
    assert next(app.log.read(kinds=["alert.raised"])).payload["title"] == "credit $12.00 is below $25.00"
    assert feedback.alert_lines(app.log) == ["#1 warning: credit $9.00 is below $25.00 (x2)"]
    feedback.ack(app.log, 1, "bob", "topping up")
    assert feedback.ack(app.log, 1, "eve", None) is None
    feedback.check_conditions(app.log, s, obs(balance=80.0), 3)
    cfg = str(app.settings.source_path)
    assert cli.main(["--config", cfg, "alerts", "show", "1"]) == 0
    assert "    status: resolved" in capsys.readouterr().out
    assert cli.main(["--config", cfg, "alerts", "show", "1", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["status"] == "resolved" and shown["acked_by"] == "bob"
    assert [h["kind"] for h in shown["history"]] == ["alert.raised", "alert.repeated", "alert.retitled",
                                                     "alert.acked", "alert.resolved"]
    assert app.log.rebuild_check() == []
