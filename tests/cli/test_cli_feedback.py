"""The operator feedback commands through the real CLI: alerts, knowledge, say, unpin, directives."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agent import cli, feedback
from agent.config import load
from agent.runtime.app import App
from tests.conftest import init_database
from tests.feedback.test_feedback import CONFIG

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    p = tmp_path / "config.yaml"
    p.write_text(CONFIG, encoding="utf-8")
    (tmp_path / "knowledge").mkdir()
    init_database(p)
    return p


def open_app(cfg: Path) -> App:
    return App(load(str(cfg)))


def env(**extra: str) -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(REPO) + os.pathsep + e.get("PYTHONPATH", "")
    e.update(extra)
    return e


def fleet_agent(cfg: Path, *args: str, **extra_env: str) -> subprocess.CompletedProcess:
    exe = shutil.which("fleet-agent", path=str(Path(sys.executable).parent))
    argv = [exe] if exe else [sys.executable, "-m", "agent.cli"]
    return subprocess.run([*argv, "--config", str(cfg), *args], capture_output=True, text=True,
                          env=env(**extra_env), timeout=120)


def count(cfg: Path) -> int:
    app = open_app(cfg)
    try:
        return app.log.count()
    finally:
        app.close()


def test_ack_refusals_exit_1_and_write_nothing(cfg):
    """alerts ack of an unknown alert exits 1 with one line; acking an acked alert again is a no-op that
    exits 0 and names who acked it; the log is unchanged by either."""
    app = open_app(cfg)
    feedback.raise_alert(app.log, key="dead:5", severity="critical", title="instance #5 is exited")
    app.close()

    ok = fleet_agent(cfg, "alerts", "ack", "1", "--note", "destroying it", "--by", "bob")
    assert ok.returncode == 0, ok.stderr
    assert "alert #1 acked by bob" in ok.stdout
    n = count(cfg)
    again = fleet_agent(cfg, "alerts", "ack", "1")
    unknown = fleet_agent(cfg, "alerts", "ack", "42")
    assert unknown.returncode == 1
    assert len(unknown.stderr.strip().splitlines()) == 1 and unknown.stderr.startswith("fleet-agent: ")
    assert again.returncode == 0 and "already acked by bob; nothing to do" in again.stdout
    assert "no alert #42" in unknown.stderr
    assert count(cfg) == n
    with pytest.raises(SystemExit) as usage:
        cli.main(["--config", str(cfg), "alerts", "ack", "one"])
    assert usage.value.code == 2
    assert count(cfg) == n


def test_alert_list_show_and_by_defaults(cfg, capsys, monkeypatch):
    """alerts list/show print open alerts and history; --by defaults to $SUDO_USER."""
    app = open_app(cfg)
    for _ in range(3):
        feedback.raise_alert(app.log, key="balance:low", severity="warning", title="balance $3.00 is low")
    app.close()
    monkeypatch.setenv("SUDO_USER", "root-by-sudo")
    assert cli.main(["--config", str(cfg), "alerts", "list", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["id"], row["count"], row["status"]) == (1, 3, "open")
    assert cli.main(["--config", str(cfg), "alerts", "ack", "1"]) == 0
    assert cli.main(["--config", str(cfg), "alerts", "list"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "no open alerts"
    assert cli.main(["--config", str(cfg), "alerts", "show", "1"]) == 0
    out = capsys.readouterr().out
    assert "[alert #1 acked · root-by-sudo] balance $3.00 is low" in out
    assert "alert.repeated" in out


def test_say_unpin_directives(cfg, capsys):
    """say records notes and pinned directives; directives lists active ones; unpin withdraws."""
    base = ["--config", str(cfg)]
    assert cli.main([*base, "say", "host", "77", "is", "flaky", "--by", "alice"]) == 0
    assert cli.main([*base, "say", "never rent A100s", "--pin", "--by", "alice"]) == 0
    pinned = re.search(r"directive #(\d+) pinned", capsys.readouterr().out)  # after the first note's proposals
    assert pinned is not None
    did = int(pinned.group(1))
    assert cli.main([*base, "directives", "--json"]) == 0
    assert [(d["id"], d["text"]) for d in json.loads(capsys.readouterr().out)] == [(did, "never rent A100s")]
    assert cli.main([*base, "unpin", str(did), "--by", "bob"]) == 0
    assert cli.main([*base, "unpin", str(did), "--by", "bob"]) == 1
    assert "already withdrawn" in capsys.readouterr().err
    assert cli.main([*base, "directives"]) == 0
    assert capsys.readouterr().out.strip().endswith("no active directives")
    app = open_app(cfg)
    try:
        note = app.log.get(1)
        assert note.payload == {"text": "host 77 is flaky", "by": "alice"}
    finally:
        app.close()


def test_knowledge_commands(cfg, capsys):
    """knowledge list/show/history reflect the disk and the log."""
    kdir = cfg.parent / "knowledge"
    (kdir / "hosts.md").write_text("avoid 77\n")
    base = ["--config", str(cfg)]
    assert cli.main([*base, "knowledge", "list"]) == 0
    assert "hosts.md" in capsys.readouterr().out
    assert cli.main([*base, "knowledge", "show", "hosts.md"]) == 1
    app = open_app(cfg)
    feedback.scan_knowledge(app.log, app.settings, 1)
    (kdir / "hosts.md").write_text("avoid 77 and 91\n")
    feedback.scan_knowledge(app.log, app.settings, 2)
    app.close()
    capsys.readouterr()
    assert cli.main([*base, "knowledge", "show", "hosts.md"]) == 0
    assert capsys.readouterr().out == "avoid 77 and 91\n"
    assert cli.main([*base, "knowledge", "history", "hosts.md", "--json"]) == 0
    hist = json.loads(capsys.readouterr().out)
    assert [(v["version"], v["change"], v["size"]) for v in hist] == [(1, "added", 9), (2, "changed", 16)]
    assert cli.main([*base, "knowledge", "list", "--json"]) == 0
    assert [(k["name"], k["state"], k["version"]) for k in json.loads(capsys.readouterr().out)] == [
        ("hosts.md", "current", 2)]


def test_knowledge_edit_through_the_cli_with_editor(cfg, tmp_path, capsys):
    """knowledge edit runs $EDITOR; invalid YAML exits 1 naming the line and keeps the old file;
    a valid save is written and logged."""
    kdir = cfg.parent / "knowledge"
    (kdir / "limits.yaml").write_text("max_dph: 0.5\n")
    bad = tmp_path / "bad-editor.sh"
    bad.write_text("#!/bin/sh\nprintf 'max_dph: 0.5\\nhosts: [1, 2\\nz: 1\\n' > \"$1\"\n")
    good = tmp_path / "good-editor.sh"
    good.write_text("#!/bin/sh\nprintf 'max_dph: 0.7\\n' > \"$1\"\n")
    for s in (bad, good):
        s.chmod(0o755)
    n = count(cfg)
    r = fleet_agent(cfg, "knowledge", "edit", "limits.yaml", EDITOR=str(bad), VISUAL="", TMPDIR=str(tmp_path))
    assert r.returncode == 1
    assert "not valid YAML at line 3" in r.stderr
    assert list(tmp_path.glob("fleet-agent-edit-*/limits.yaml"))  # the refused edit is kept for the operator
    assert (kdir / "limits.yaml").read_text() == "max_dph: 0.5\n"
    assert count(cfg) == n

    r = fleet_agent(cfg, "knowledge", "edit", "limits.yaml", EDITOR=str(good), VISUAL="", TMPDIR=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert (kdir / "limits.yaml").read_text() == "max_dph: 0.7\n"
    assert cli.main(["--config", str(cfg), "knowledge", "show", "limits.yaml"]) == 0
    assert capsys.readouterr().out == "max_dph: 0.7\n"
    assert cli.main(["--config", str(cfg), "knowledge", "edit", "../etc.md", "--editor", str(good)]) == 2
    assert not (cfg.parent / "etc.md").exists()


WORKER = textwrap.dedent("""
    import sys
    from agent import cli
    cfg, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    for i in range(n):
        rc = cli.main(["--config", cfg, "say", f"note {tag}-{i}", "--by", tag])
        assert rc == 0, rc
""")

ACKER = textwrap.dedent("""
    import sys
    from agent import cli
    cfg, ids = sys.argv[1], [int(x) for x in sys.argv[2].split(",")]
    ok = sum(cli.main(["--config", cfg, "alerts", "ack", str(i), "--by", "acker"]) == 0 for i in ids)
    print("acked", ok)
""")

BACKGROUND = textwrap.dedent("""
    import os, sys, time
    from agent.runtime.app import App
    from agent.config import load
    cfg, stop = sys.argv[1], sys.argv[2]
    app = App(load(cfg))
    n = 0
    while not os.path.exists(stop) or n < 50:
        app.log.append("memory.written", {"key": f"bg{n % 7}", "text": f"background {n}"}, "tool")
        n += 1
        time.sleep(0.002)  # leave the CPU to the CLI processes on small machines; still ~100s of appends
    print(n)
""")


@pytest.mark.slow
def test_parallel_notes_and_acks_are_all_recorded_once(cfg, tmp_path):
    """200 notes from 4 CLI processes and racing acks, while another process appends continuously:
    every note is present exactly once, each alert is acked once (the ack that loses the race is a no-op
    that exits 0), and no process hits 'database is locked'."""
    app = open_app(cfg)
    for i in range(20):
        feedback.raise_alert(app.log, key=f"k{i}", severity="warning", title=f"alert {i}")
    app.close()
    stop = tmp_path / "stop"
    procs = [subprocess.Popen([sys.executable, "-c", BACKGROUND, str(cfg), str(stop)], env=env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)]
    ids = ",".join(str(i) for i in range(1, 21))
    procs += [subprocess.Popen([sys.executable, "-c", WORKER, str(cfg), f"w{w}", "50"], env=env(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for w in range(4)]
    procs += [subprocess.Popen([sys.executable, "-c", ACKER, str(cfg), ids], env=env(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs[1:]]
    stop.touch()
    outs.insert(0, procs[0].communicate(timeout=120))
    for p, (_out, err) in zip(procs, outs, strict=True):
        assert "database is locked" not in err
        assert p.returncode == 0, err[-2000:]
    assert sum(int(out.splitlines()[-1].split()[1]) for out, _ in outs[5:]) == 40  # a lost race is a no-op, exit 0
    assert int(outs[0][0]) >= 50

    app = open_app(cfg)
    try:
        notes = [e.payload["text"] for e in app.log.read(kinds=["operator.note"])]
        assert sorted(notes) == sorted(f"note w{w}-{i}" for w in range(4) for i in range(50))
        acks = [e.payload["alert_id"] for e in app.log.read(kinds=["alert.acked"])]
        assert sorted(acks) == list(range(1, 21))
        assert app.log.verify().ok
        assert app.log.rebuild_check() == []
    finally:
        app.close()
