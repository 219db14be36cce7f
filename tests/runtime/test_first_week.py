"""A first week at the console, scripted end to end against the simulator with real ticks (the rules
provider): an alert acked (twice), a silence, a note, notifications, a backup taken while the daemon holds
the lock, a restore refused while it runs and done once stopped, ticks on the restored log, --json reads, a
policy override and a pause.

Set FIRST_WEEK_THREAD=path to keep the resulting 'thread show' text."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from agent import cli, config, feedback
from agent.runtime.app import App
from agent.runtime.lock import FleetLock
from agent.runtime.tick import run_tick
from tests.cli.test_status_doctor import SIM_KEY, _restore_structlog, make_setup, sim_server  # noqa: F401


def _cli(capsys, cfg: Path, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(["--config", str(cfg), *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _tick(cfg: Path) -> int:
    app = App(config.load(str(cfg)))
    try:
        r = run_tick(app)
        assert r.ok, r.reason
        return r.tick
    finally:
        app.close()


@pytest.mark.slow
def test_a_first_week(tmp_path, sim_server, monkeypatch, capsys):  # noqa: F811
    """The operator's week, in order; each step's effect is checked where the operator would look."""
    monkeypatch.setenv("TEST_VAST_KEY", SIM_KEY)
    sent = tmp_path / "notified.jsonl"
    hook = tmp_path / "notify.py"
    hook.write_text("import sys, pathlib\npathlib.Path(sys.argv[1]).open('a').write(sys.stdin.read())\n")
    cfg = make_setup(tmp_path, sim_server.url, "  provider: rules")
    # unmet_after 0: the rules provider's first ticks leave jobs waiting; unmet demand is not the week's subject
    cfg.write_text(cfg.read_text(encoding="utf-8") + f"demand:\n  url: {sim_server.url}/demand\n"
                   f"alerts:\n  low_balance: 1000000\n  stuck_after: 1s\n  unmet_after: 0\n"
                   f"  notify_command: {sys.executable} {hook} {sent}\n",
                   encoding="utf-8")
    settings = config.load(str(cfg))

    # Monday: the first tick rents; the balance is under the (high) threshold, so an alert opens.
    _tick(cfg)
    code, out, _ = _cli(capsys, cfg, "status", "--json")
    fleet = json.loads(out)["fleet"]
    assert code == 0 and fleet["acted"] > 0 and len(fleet["instances"]) == fleet["acted"]
    code, out, _ = _cli(capsys, cfg, "alerts", "list", "--json")
    (balance,) = json.loads(out)
    assert balance["dedup_key"] == "balance:low"

    # The operator acks it (twice: the second is a no-op), silences instance failures for maintenance,
    # and leaves a note.
    assert _cli(capsys, cfg, "alerts", "ack", str(balance["id"]), "--note", "top-up on Friday", "--by", "alice")[0] == 0
    code, out, _ = _cli(capsys, cfg, "alerts", "ack", str(balance["id"]), "--by", "bob")
    assert code == 0 and "already acked by alice; nothing to do" in out
    code, out, _ = _cli(capsys, cfg, "alerts", "silence", "--key", "stuck:*", "--for", "2h", "--reason",
                        "host maintenance tonight", "--by", "alice")
    assert code == 0 and out.startswith("silence #")
    assert _cli(capsys, cfg, "say", "maintenance on the hosts until 22:00", "--by", "alice")[0] == 0

    # Two instances hang restarting on their hosts while the daemon runs; the operator takes a backup meanwhile.
    owned = sorted(i["id"] for i in fleet["instances"])
    for iid in owned[:2]:
        sim_server.sim.set_status(iid, "loading", "host maintenance: restarting the container")
    daemon = FleetLock(settings.data_path).acquire()
    code, out, err = _cli(capsys, cfg, "backup", str(tmp_path / "monday.db"), "--json")
    assert code == 0, err
    backup = json.loads(out)
    daemon.release()

    # The next ticks: the hanging instances (and any still loading) raise 'stuck' alerts, silenced: nobody
    # is notified, and the next observation marks them silenced. (An alert raised by one tick's conditions
    # is in the next tick's observation; ages follow the simulator's wall clock, so tick until any
    # observation has listed some, at most eight times.)
    stuck_lines: list[str] = []
    for _ in range(8):
        later = _tick(cfg)
        app = App(settings)
        try:
            started = next(app.log.read(0, kinds=["tick.started"], tick=later))
        finally:
            app.close()
        stuck_lines += [ln for ln in started.payload["observation"]["open_alerts"] if " stuck in " in ln]
        if stuck_lines:
            break
    assert stuck_lines and all("(silenced until" in ln and "by alice)" in ln for ln in stuck_lines)
    app = App(settings)
    try:
        stuck = {a.dedup_key for a in app.log.store.alerts(all_=True) if a.dedup_key.startswith("stuck:")}
        assert {f"stuck:{iid}" for iid in owned[:2]} <= stuck
        assert app.log.store.alert(balance["id"]).status == "acked"
    finally:
        app.close()
    feedback.drain_alert_hooks(60)
    notes = [json.loads(x) for x in sent.read_text().splitlines()]
    # The balance alert notified once; the silenced 'stuck' alerts notified nobody. (Policy blocks of the
    # rules provider's rent burst may open and notify their own alert; that is not the week's subject.)
    sent_for = [(n["reason"], n["group"]) for n in notes]
    assert sent_for.count(("opened", "balance")) == 1
    assert not [g for _r, g in sent_for if g == "stuck"]
    assert {g for _r, g in sent_for} <= {"balance", "policy"}

    # Friday: a restore is refused while the daemon runs, then done with it stopped.
    daemon = FleetLock(settings.data_path).acquire()
    code, _, err = _cli(capsys, cfg, "restore", str(tmp_path / "monday.db"))
    assert code == 1 and "restore refused" in err
    daemon.release()
    code, out, err = _cli(capsys, cfg, "restore", str(tmp_path / "monday.db"), "--json")
    assert code == 0, err
    restored = json.loads(out)
    assert (restored["head_seq"], restored["head_hash"]) == (backup["head_seq"], backup["head_hash"])
    assert restored["kept_aside"]

    # Ticks go on from the restored log: reconcile notices what changed since the backup.
    _tick(cfg)
    code, out, _ = _cli(capsys, cfg, "log", "verify", "--json")
    assert code == 0 and json.loads(out)["ok"] is True
    for argv in (("alerts", "list", "--all", "--json"), ("alerts", "silences", "--json"), ("status", "--json"),
                 ("config", "diff", "--json"), ("log", "rebuild", "--check", "--json")):
        code, out, _ = _cli(capsys, cfg, *argv)
        assert code == 0 and json.loads(out) is not None, argv
    code, out, _ = _cli(capsys, cfg, "context", "--json")
    seen = "\n".join(m.get("content") or "" for m in json.loads(out)["messages"])
    assert "[alert silence #" in seen and "host maintenance tonight" in seen
    assert "[operator note · alice] maintenance on the hosts until 22:00" in seen
    # Saturday: the operator tightens the policy for a while, pauses for a host migration (a tick observes
    # and acts on nothing) and resumes. (Destroys by hand: tests/fleet/test_steering.py.)
    code, _, err = _cli(capsys, cfg, "policy", "set", "max_instances", "2", "--for", "8h", "--reason",
                        "budget review", "--by", "alice")
    assert code == 0, err
    code, out, _ = _cli(capsys, cfg, "policy", "show", "--json")
    view = json.loads(out)
    assert view["effective"]["max_instances"] == 2 and view["overrides"][0]["by"] == "alice"
    code, _, err = _cli(capsys, cfg, "pause", "--for", "2h", "--reason", "host migration", "--by", "bob")
    assert code == 0, err
    paused_tick = _tick(cfg)
    code, out, _ = _cli(capsys, cfg, "status", "--json")
    assert json.loads(out)["steering"]["paused"]["by"] == "bob"
    app = App(settings)
    try:
        # every action the tick tried was refused as paused; no call had an effect
        results = list(app.log.read(0, kinds=["tool.result"], tick=paused_tick))
        assert not [e for e in results if e.payload.get("effect")]
        blocked = list(app.log.read(0, kinds=["policy.blocked"], tick=paused_tick))
        assert all(e.payload["rule"] == "paused" for e in blocked)
    finally:
        app.close()
    assert _cli(capsys, cfg, "resume", "--by", "bob")[0] == 0
    code, out, _ = _cli(capsys, cfg, "context", "--json")
    seen = "\n".join(m.get("content") or "" for m in json.loads(out)["messages"])
    assert "[policy override #" in seen and "max_instances 2" in seen

    code, out, _ = _cli(capsys, cfg, "thread", "show")
    assert code == 0
    if os.environ.get("FIRST_WEEK_THREAD"):
        Path(os.environ["FIRST_WEEK_THREAD"]).write_text(out, encoding="utf-8")
