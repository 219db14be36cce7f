"""Words an operator reads and acts on: alert titles that say what happened, follow-up commands that run as
printed, flags the README promises, and what a time before the log's start does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent import cli, config, feedback
from agent.runtime.app import App
from agent.runtime.demo import command_name


@pytest.fixture
def home(tmp_path: Path) -> Path:
    assert cli.main(["init", str(tmp_path)]) == 0
    app = App(config.load(str(tmp_path / "config.yaml")))
    try:
        feedback.say(app.log, "keep costs down", "alice")
    finally:
        app.close()
    return tmp_path


def _run(home: Path, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(["--config", str(home / "config.yaml"), *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_an_oci_start_failure_is_titled_as_one(home: Path):
    """vast.ai lists an instance whose container cannot start as 'created' or 'loading' with an OCI message:
    the critical alert says it fails to start, not that it 'is created'."""
    app = App(config.load(str(home / "config.yaml")))
    try:
        inst = {"id": 7, "label": "fa-x-7", "gpu_name": "RTX 4090", "num_gpus": 1, "status": "created",
                "status_msg": "OCI runtime create failed: container_linux.go:380", "dph": 0.4, "age_s": 30,
                "host_id": 77, "ours": True}
        dead = {**inst, "id": 8, "status": "exited", "status_msg": None}
        feedback.check_conditions(app.log, app.settings, {"time": 1_800_000_000.0, "balance": 100.0, "fleet_dph": 0.8,
                                                          "instances": [inst, dead], "demand": None, "changes": [],
                                                          "open_alerts": [], "errors": []}, 1)
        titles = {a.dedup_key: (a.severity, a.title) for a in app.log.store.open_alerts()}
    finally:
        app.close()
    sev, title = titles["dead:7"]
    assert sev == "critical" and "is created" not in title
    assert title.startswith("instance #7 is failing to start its container") and "OCI runtime create failed" in title
    assert titles["dead:8"][1] == "instance #8 is exited (its container died)"


def test_an_instance_stopped_at_its_contracts_end_is_a_warning_not_an_unasked_stop(home: Path):
    """vast.ai stops an instance whose host's contract ended (its observation says ends_s <= 0): the alert
    says so as a warning, not as a critical 'stopped without our asking'; one stopped before its end still is."""
    app = App(config.load(str(home / "config.yaml")))
    try:
        inst = {"id": 9, "label": "fa-x-9", "gpu_name": "RTX 4090", "num_gpus": 1, "status": "stopped",
                "status_msg": "contract ended", "dph": 0.4, "age_s": 30, "host_id": 77, "ours": True, "ends_s": 0.0}
        early = {**inst, "id": 10, "ends_s": 7200.0}
        maint = {**inst, "id": 11, "status_msg": None, "ends_s": -60.0, "maint_s": -60.0}  # its machine went down
        feedback.check_conditions(app.log, app.settings, {"time": 1_800_000_000.0, "balance": 100.0, "fleet_dph": 0.8,
                                                          "instances": [inst, early, maint], "demand": None, "changes": [],
                                                          "open_alerts": [], "errors": []}, 1)
        titles = {a.dedup_key: (a.severity, a.title) for a in app.log.store.open_alerts()}
    finally:
        app.close()
    assert titles["dead:9"] == ("warning", "instance #9 is stopped at its contract's end (the host's offer ended); "
                                           "it is replaced")
    assert titles["dead:10"][0] == "critical" and "without our asking" in titles["dead:10"][1]
    assert titles["dead:11"] == ("warning", "instance #11 is stopped for its machine's maintenance window; it is "
                                            "replaced")


def _exe(p: Path) -> Path:
    p.write_text(f"#!{sys.executable}\nfrom agent.cli import entry\nentry()\n", encoding="utf-8")
    p.chmod(0o755)
    return p


def test_the_demo_prints_follow_up_commands_that_run(tmp_path: Path):
    """The demo's follow-up commands name fleet-agent as the shell finds it: plain when it is on PATH and is
    this program, by the path it was started with when not, and as this Python's module otherwise; each form
    printed runs."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    mine = _exe(bindir / "fleet-agent")
    other = tmp_path / "venv" / "bin"
    other.mkdir(parents=True)
    started = _exe(other / "fleet-agent")
    assert command_name(str(mine), path=str(bindir)) == "fleet-agent"
    assert command_name(str(started), path=str(bindir / "none")) == str(started)
    assert command_name("/somewhere/pytest", path=str(bindir)) == "fleet-agent"
    module = command_name("/somewhere/pytest", path=str(bindir / "none"))
    assert module == f"{sys.executable} -m agent.cli"
    env = {**os.environ, "PATH": f"{bindir}:/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    for shown in ("fleet-agent", str(started), module):
        p = subprocess.run(f"{shown} --version", shell=True, env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and p.stdout.startswith("fleet-agent "), (shown, p.stderr)


def test_config_show_and_log_export_take_json(home: Path, capsys: pytest.CaptureFixture[str]):
    """'Every read command takes --json' (README): config show --json prints the settings as JSON; log export
    --json with -o prints its summary as JSON (the events are JSON lines either way)."""
    code, out, _ = _run(home, capsys, "config", "show", "--json")
    assert code == 0 and json.loads(out)["agent_id"] == config.load(str(home / "config.yaml")).agent_id
    code, out, _ = _run(home, capsys, "log", "export", "--json", "-o", str(home / "events.jsonl"))
    written = (home / "events.jsonl").read_text(encoding="utf-8").splitlines()
    assert code == 0 and written
    assert json.loads(out) == {"events": len(written), "format": "jsonl", "path": str(home / "events.jsonl")}
    code, out, _ = _run(home, capsys, "log", "export", "--json")
    assert code == 0 and all(json.loads(x)["seq"] for x in out.splitlines())


def test_thread_show_since_before_the_first_event_shows_everything(home: Path, capsys: pytest.CaptureFixture[str]):
    """--since a time before the log's start: the whole log, exit 0 (as the README says); --until or context
    --at before it: exit 2, the log holds nothing then."""
    code, everything, _ = _run(home, capsys, "thread", "show", "--json")
    assert code == 0 and everything
    code, out, _ = _run(home, capsys, "thread", "show", "--json", "--since", "2001-01-01T00:00Z")
    assert code == 0 and out == everything
    code, _, err = _run(home, capsys, "thread", "show", "--until", "2001-01-01T00:00Z")
    assert code == 2 and "before the first event" in err
    code, _, err = _run(home, capsys, "context", "--at", "2001-01-01T00:00Z")
    assert code == 2 and "before the first event" in err
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    assert "A `--since` time before the\n  first event shows the log from its start (exit 0" in readme
