"""The core operator commands, run as real processes: init, thread show, log export/search/rebuild."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent import config
from agent.store.log import EventLog

REPO = Path(__file__).resolve().parents[2]
_ENV_DROP = ("VAST_API_KEY", "OPENAI_API_KEY", "CREDENTIALS_DIRECTORY", "FLEET_AGENT_CONFIG")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _ENV_DROP}
    env["PYTHONPATH"] = str(REPO)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "agent.cli", *args]


def run_many(*calls: tuple[str, ...], cwd: Path | None = None) -> list[subprocess.CompletedProcess]:
    """Run several 'fleet-agent ARGS...' processes concurrently; results in call order."""
    procs = [(c, subprocess.Popen(_cmd(*c), env=_env(), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)) for c in calls]
    out = []
    for c, p in procs:
        stdout, stderr = p.communicate(timeout=120)
        out.append(subprocess.CompletedProcess(c, p.returncode, stdout, stderr))
    return out


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return run_many(args, cwd=cwd)[0]


T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


@pytest.fixture
def site(tmp_path):
    """A directory made by 'fleet-agent init' and a log holding two ticks' worth of events, one minute apart."""
    r = run("init", str(tmp_path / "site"))
    assert r.returncode == 0, r.stderr
    cfg = tmp_path / "site" / "config.yaml"
    settings = config.load(str(cfg), env={})
    clock = iter(T0 + timedelta(minutes=i) for i in range(1000))
    with EventLog(settings.db_path, clock=lambda: next(clock)) as log:
        log.append("tick.started", {"observation": {"time": T0.timestamp(), "balance": 120.5, "instances": []}},
                   "scheduler", tick=1)
        log.append("model.response", {"text": "renting one RTX 4090", "tool_calls": [
            {"id": "c1", "name": "rent_instance", "arguments": '{"offer_id": 17}'}]}, "model", tick=1)
        log.append("tool.called", {"call_id": "c1", "name": "rent_instance", "arguments": '{"offer_id": 17}',
                                    "side_effect": True, "idempotency_key": "fa-fleet-1-k1"}, "model", tick=1)
        log.append("tool.result", {"call_id": "c1", "name": "rent_instance", "ok": True, "output": "rented #901",
                                   "effect": {"type": "rented", "instance_id": 901, "label": "fa-fleet-1-k1"}},
                   "tool", tick=1)
        log.append("tick.completed", {"steps": 1}, "system", tick=1)
        log.append("operator.note", {"text": "keep spend under budget, zebra", "by": "alice", "pin": True},
                   "operator")
        log.append("tick.started", {"observation": {"time": T0.timestamp() + 300, "instances": []}}, "scheduler",
                   tick=2)
    return cfg, settings


def test_init_creates_everything_and_refuses_to_overwrite(tmp_path):
    """'init DIR' creates a config equal to the example, a private data dir with a migrated database and a
    knowledge dir; a second 'init' exits 1 and changes nothing."""
    site = tmp_path / "site"
    r = run("init", str(site))
    assert r.returncode == 0, r.stderr
    cfg = site / "config.yaml"
    assert cfg.read_text() == config.example_text()
    assert oct(cfg.stat().st_mode & 0o777) == "0o600"
    settings = config.load(str(cfg), env={})
    assert settings.db_path.is_file() and oct(settings.db_path.stat().st_mode & 0o777) == "0o600"
    assert oct(settings.data_path.stat().st_mode & 0o777) == "0o700"
    assert list(settings.knowledge_path.glob("*.md"))
    with EventLog(settings.db_path, readonly=True) as log:
        assert log.count() == 0
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in site.rglob("*") if p.is_file()}
    cfg.write_text(cfg.read_text() + "# edited by the operator\n")
    before[cfg] = (cfg.read_bytes(), cfg.stat().st_mtime_ns)
    again = run("init", str(site))
    assert again.returncode == 1
    assert "already exists" in again.stderr and again.stderr.count("\n") == 1
    after = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in site.rglob("*") if p.is_file()}
    assert after == before


@pytest.mark.slow
def test_thread_show_variants(site):
    """'thread show' prints every event readably; --json, --kind (family), --since (seq or time) and --limit
    select and shape the output."""
    cfg, _ = site
    c = ("--config", str(cfg), "thread", "show")
    plain, js, kind, since_seq, since_ts, limit = run_many(
        c, c + ("--json",), c + ("--kind", "tool."), c + ("--since", "5"), c + ("--since", "2026-11-29T10:04:00Z"),
        c + ("--limit", "2"))
    for r in (plain, js, kind, since_seq, since_ts, limit):
        assert r.returncode == 0, r.stderr
    assert "#1 2026-11-29T10:00:00Z tick.started [scheduler t1]" in plain.stdout
    assert "balance $120.50" in plain.stdout
    assert "-> rent_instance(" in plain.stdout
    assert "[operator directive #6 · alice] keep spend under budget, zebra" in plain.stdout
    rows = [json.loads(line) for line in js.stdout.splitlines()]
    assert [r["seq"] for r in rows] == list(range(1, 8))
    assert all(len(r["hash"]) == 64 for r in rows) and rows[1]["prev_hash"] == rows[0]["hash"]
    heads = lambda out: [ln.split()[0] for ln in out.splitlines() if ln.startswith("#")]  # noqa: E731
    assert heads(kind.stdout) == ["#3", "#4"]
    assert heads(since_seq.stdout) == ["#6", "#7"]
    assert heads(since_ts.stdout) == ["#5", "#6", "#7"]
    assert heads(limit.stdout) == ["#1", "#2"]
    bad = run(*c, "--since", "yesterday-ish")
    assert bad.returncode == 2 and "neither a seq number nor a time" in bad.stderr


def test_thread_show_follow_prints_events_from_another_process(site):
    """'thread show --follow' prints events another process appends while it runs, and Ctrl-C ends it
    with exit 0."""
    cfg, settings = site
    # --follow-for only bounds a run that never sees the new event; the test stops it once it has.
    # Ctrl-C as a terminal delivers it: SIGINT at its default, even when the suite runs in a background job
    # (which starts with SIGINT ignored, and Python then installs no KeyboardInterrupt handler)
    p = subprocess.Popen(_cmd("--config", str(cfg), "thread", "show", "--follow", "--follow-for", "120"),
                         env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        seen = _lines_until(p, "#7 ")  # the existing events are out: now following
        with EventLog(settings.db_path) as log:
            log.append("operator.note", {"text": "appended while following", "by": "bob"}, "operator")
        new = _lines_until(p, "#8 ")[-1] + p.stdout.readline()  # the event's head line, then its text
        p.send_signal(signal.SIGINT)
        _out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=30)
    assert p.returncode == 0, err
    assert not any(line.startswith("#8 ") for line in seen)
    assert new.startswith("#8 ") and new.endswith("\n  [operator note · bob] appended while following\n")


def _lines_until(p: subprocess.Popen, head: str) -> list[str]:
    """Lines read from ``p``'s stdout up to and including the one starting with ``head``; fails (with
    its stderr) if the process ends first."""
    seen: list[str] = []
    while not (seen and seen[-1].startswith(head)):
        line = p.stdout.readline()
        assert line, p.stderr.read()
        seen.append(line)
    return seen


def test_log_export_search_rebuild(site, tmp_path):
    """'log export' writes JSON lines with hashes (stdout or -o), 'log search' finds words, 'log rebuild --check'
    finds the read models in step with the log."""
    cfg, settings = site
    c = ("--config", str(cfg), "log")
    out = tmp_path / "export.jsonl"
    export, export_since, to_file, search, nothing, check = run_many(
        c + ("export",), c + ("export", "--since", "5"), c + ("export", "-o", str(out)), c + ("search", "zebra"),
        c + ("search", "platypus"), c + ("rebuild", "--check"))
    for r in (export, export_since, to_file, search, nothing, check):
        assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in export.stdout.splitlines()]
    with EventLog(settings.db_path, readonly=True) as log:
        assert rows == [e.to_dict() for e in log.read()]
    assert {"seq", "id", "ts", "kind", "source", "tick", "payload", "tokens", "prev_hash", "hash"} <= set(rows[0])
    assert [json.loads(x)["seq"] for x in export_since.stdout.splitlines()] == [6, 7]
    assert out.read_text() == export.stdout and "exported 7 events" in to_file.stdout
    assert search.stdout.startswith("#6 ") and "[zebra]" in search.stdout
    assert nothing.stdout.strip() == "no matches"
    assert check.stdout.strip() == "read models match the log"


def test_an_unknown_command_is_refused_listing_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    """A misspelt command exits 2 with one line naming the valid choices, every group's commands among them."""
    from agent.cli import main

    with pytest.raises(SystemExit) as e:
        main(["alert", "list"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'alert'" in err and "'alerts'" in err and "'spend'" in err and "'web'" in err


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["alert", "list"], ["alerts", "show", "x"]])
def test_the_module_entry_exits_as_argparse_says(argv: list[str], tmp_path: Path) -> None:
    """``python -m agent.cli`` (the console script's entry) ends argparse's own exits with their code and
    their whole output: --help and --version exit 0, usage errors exit 2 with one line."""
    from agent import __version__
    from agent.cli import build_parser

    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    r = subprocess.run([sys.executable, "-m", "agent.cli", *argv], capture_output=True, text=True, timeout=60,
                       check=False, env=env, cwd=tmp_path)
    if argv == ["--help"]:
        assert (r.returncode, r.stdout, r.stderr) == (0, build_parser().format_help(), "")
    elif argv == ["--version"]:
        assert (r.returncode, r.stdout, r.stderr) == (0, f"fleet-agent {__version__}\n", "")
    else:
        assert r.returncode == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1
        assert r.stderr.startswith("fleet-agent: error: ")


def test_a_failing_command_exits_with_its_code_and_one_line(tmp_path: Path) -> None:
    """A command's error is one line on stderr and its exit code (2: a configuration error here), through
    the installed entry and a normal interpreter exit."""
    r = subprocess.run([sys.executable, "-m", "agent.cli", "--config", str(tmp_path / "missing.yaml"), "status"],
                       capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1
    assert r.stderr.startswith("fleet-agent: ")
