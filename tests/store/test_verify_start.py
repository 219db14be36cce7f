"""The log is checked before anything acts on it: run and tick verify it (since a checkpoint) before their first
append, only init creates a database, and log verify says when it cannot be sure."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from agent import config
from agent.errors import ChainBroken, LogError
from agent.runtime.app import App
from agent.service.daemon import run_daemon
from agent.store.log import EventLog
from tests.conftest import init_database
from tests.tamper import Tamper

REPO = Path(__file__).resolve().parents[2]
N = 12
CONFIG = """\
agent_id: verify-1
data_dir: ./data
knowledge_dir: ./knowledge
vast:
  url: http://127.0.0.1:9
  timeout: 1s
model:
  provider: rules
"""


def cli(cfg: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FLEET_AGENT_CONFIG", "CREDENTIALS_DIRECTORY")}
    env["PYTHONPATH"] = str(REPO)
    env["VAST_API_KEY"] = "sim-key"
    return subprocess.run([sys.executable, "-m", "agent.cli", "--config", str(cfg), *args], env=env, input=stdin,
                          capture_output=True, text=True, timeout=120)


def write_config(root: Path) -> Path:
    (root / "knowledge").mkdir(parents=True, exist_ok=True)
    cfg = root / "config.yaml"
    cfg.write_text(CONFIG, encoding="utf-8")
    return cfg


@pytest.fixture
def site(tmp_path: Path) -> tuple[Path, Path]:
    """A config, and the database init made, holding N operator notes; (config, db path)."""
    cfg = write_config(tmp_path)
    db = init_database(cfg)
    with EventLog(db, create=False) as log:
        for i in range(1, N + 1):
            log.append("operator.note", {"text": f"note {i}", "by": "alice"}, "operator")
    return cfg, db


def snapshot(db: Path) -> tuple[int, tuple[int, str]]:
    with EventLog(db, readonly=True) as log:
        return log.count(), log.head()


def one_line_error(r: subprocess.CompletedProcess[str]) -> str:
    """The single stderr line of a refused command (and no traceback anywhere)."""
    assert "Traceback" not in r.stdout + r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    return lines[0]


# ------------------------------------------------------------------ run and tick refuse a log that fails


@pytest.mark.parametrize("command", ["tick", "run"])
def test_run_and_tick_refuse_an_edited_log_and_append_nothing(site: tuple[Path, Path], command: str) -> None:
    """With a row edited behind fleet-agent's back, `tick` and `run` exit 1 with one line naming the seq and the
    fix, before contacting anything; the log (events and head) is exactly as the tampering left it."""
    cfg, db = site
    with Tamper(db) as t:
        t.replace_in_payload(5, "note 5", "note five")
    before = snapshot(db)
    r = cli(cfg, command)
    assert r.returncode == 1, r.stdout + r.stderr
    line = one_line_error(r)
    assert "fails verification at seq 5" in line and "the row was edited" in line
    assert "restore the database" in line and "nothing was appended" in line
    assert snapshot(db) == before


def test_a_rewritten_history_before_the_checkpoint_is_refused(site: tuple[Path, Path]) -> None:
    """Rows rewritten with every hash recomputed (and the head file rewritten to match) still differ from the
    verified checkpoint a previous start left: the next start refuses, naming the checkpoint's seq."""
    cfg, db = site
    with EventLog(db, create=False) as log:
        assert log.check_before_append().ok
        cp = log.checkpoint_file.read_text().split()
        assert cp[0] == str(N)
    with Tamper(db) as t:
        t.rechain(3, lambda p: p.replace("note 3", "note III"))
    with EventLog(db, create=False) as log:
        log.head_file.write_text(f"{log.head()[0]} {log.head()[1]}\n")  # an attacker fixes the head file too
        with pytest.raises(ChainBroken, match=f"at seq {N}: seq {N}: hash differs from the verified checkpoint"):
            log.check_before_append()


def test_an_edit_of_the_checkpoint_row_itself_is_caught(site: tuple[Path, Path]) -> None:
    """The row the checkpoint names is re-hashed at every check, so editing its content (hash left alone) is
    refused like any edit after it."""
    _cfg, db = site
    with EventLog(db, create=False) as log:
        log.check_before_append()
    with Tamper(db) as t:
        t.replace_in_payload(N, f"note {N}", "note altered")
    with EventLog(db, create=False) as log, pytest.raises(ChainBroken, match=f"at seq {N}: .*the row was edited"):
        log.check_before_append()


def test_start_up_walks_only_the_events_after_the_checkpoint(site: tuple[Path, Path]) -> None:
    """The first check walks the whole chain and records a checkpoint at its head; the next walks only what was
    appended since, and an edit after the checkpoint is still caught at its seq."""
    _cfg, db = site
    with EventLog(db, create=False) as log:
        first = log.check_before_append()
        assert (first.since, first.checked, first.head_seq) == (0, N, N)
        for i in range(3):
            log.append("operator.note", {"text": f"later {i}", "by": "bob"}, "operator")
        second = log.check_before_append()
        assert (second.since, second.checked, second.head_seq) == (N, 3, N + 3)
        log.append("operator.note", {"text": "latest", "by": "bob"}, "operator")
    with Tamper(db) as t:
        t.replace_in_payload(N + 4, "latest", "altered")
    with EventLog(db, create=False) as log, pytest.raises(ChainBroken, match=f"at seq {N + 4}"):
        log.check_before_append()


def test_truncation_below_the_checkpoint_is_refused_without_the_head_file(site: tuple[Path, Path]) -> None:
    """Deleting the newest rows and the head file leaves a chain that links, but the verified checkpoint names
    a seq the log no longer has: refused."""
    _cfg, db = site
    with EventLog(db, create=False) as log:
        log.check_before_append()
        log.head_file.unlink()
    with Tamper(db) as t:
        t.truncate(keep=7)
    with EventLog(db, create=False) as log, pytest.raises(ChainBroken, match="checkpoint records seq 12 but the "
                                                                               "log ends at 7"):
        log.check_before_append()


def test_the_daemon_stops_with_exit_1_when_the_log_is_edited_while_it_runs(site: tuple[Path, Path]) -> None:
    """A row edited between two ticks is caught by the next tick's check: the daemon stops with exit 1 and
    appends nothing after the edit (no daemon.stopped)."""
    cfg, db = site
    calls: list[int] = []

    def tick(app: App, *, stop: threading.Event) -> Any:
        app.log.check_before_append()
        calls.append(1)
        if len(calls) == 1:
            e = app.log.append("operator.note", {"text": "during tick 1", "by": "alice"}, "operator")
            with Tamper(db) as t:  # someone edits the log between this tick and the next
                t.replace_in_payload(e.seq, "during", "after")
        else:
            os.kill(os.getpid(), signal.SIGTERM)  # not refused: stop the daemon (the test then fails)
        return _Result(len(calls))

    settings = config.load(str(cfg))
    settings = settings.__class__(**{**settings.__dict__, "schedule": settings.schedule.__class__(
        **{**settings.schedule.__dict__, "interval": 1.0, "jitter": 0.0})})
    with capture_logs() as logs:
        code = run_daemon(settings, config_path=str(cfg), tick_fn=tick, env={"VAST_API_KEY": "sim-key"})
    assert code == 1 and len(calls) == 1
    assert any(x["event"] == "log.verify_failed" and f"at seq {N + 4}" in x["error"] for x in logs)
    with EventLog(db, readonly=True) as log:
        kinds = [e.kind for e in log.read(N)]
    assert kinds == ["leader.acquired", "daemon.started", "config.applied", "operator.note"]


class _Result:
    def __init__(self, tick: int) -> None:
        self.tick, self.ok, self.reason, self.steps, self.usage, self.duration_ms = tick, True, None, 0, {}, 0.0


def test_the_tick_log_line_carries_the_head(make_app: Any) -> None:
    """The canonical 'tick' log line carries head=SEQ:HASH, the log's head after the tick, so the journal holds
    a copy outside the data directory."""
    from agent.runtime.tick import run_tick

    app = make_app(provider="rules")
    with capture_logs() as logs:
        r = run_tick(app)
    assert r.ok, r.reason
    line = next(x for x in logs if x["event"] == "tick")
    seq, h = app.log.head()
    assert line["head"] == f"{seq}:{h}"


# ------------------------------------------------------------------ only init creates a database


@pytest.mark.parametrize("args", [("say", "hi"), ("alerts", "ack", "1"), ("thread", "show"), ("log", "verify"),
                                  ("directives",), ("knowledge", "list"), ("tick",), ("run",)])
def test_commands_refuse_a_missing_database_and_create_nothing(tmp_path: Path, args: tuple[str, ...]) -> None:
    """With the database moved away, every command exits 1 with one line saying to run init (or fix data_dir)
    and creates neither a new database nor the data directory."""
    cfg = write_config(tmp_path)
    r = cli(cfg, *args)
    assert r.returncode == 1, r.stdout + r.stderr
    line = one_line_error(r)
    assert "no database at" in line and "fleet-agent init" in line
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("args", [("say", "hi"), ("alerts", "ack", "1"), ("thread", "show"), ("tick",)])
def test_commands_refuse_an_empty_database(site: tuple[Path, Path], args: tuple[str, ...]) -> None:
    """A database truncated to 0 bytes is refused (history does not restart at seq 1); the file stays empty."""
    cfg, db = site
    db.write_bytes(b"")
    db.with_name(db.name + "-wal").unlink(missing_ok=True)
    r = cli(cfg, *args)
    assert r.returncode == 1
    line = one_line_error(r)
    assert "is empty (0 bytes)" in line and "restore it from a backup" in line
    assert db.stat().st_size == 0


def test_commands_refuse_a_foreign_or_gutted_database(site: tuple[Path, Path], tmp_path: Path) -> None:
    """A file that is not SQLite, a SQLite database of something else, and fleet-agent's own database with its
    events table dropped are each refused with one line saying what is wrong."""
    cfg, db = site
    with Tamper(db) as t:
        t.drop_table("events")
    r = cli(cfg, "thread", "show")
    assert r.returncode == 1 and "has no events table" in one_line_error(r)

    db.unlink()
    for suffix in ("-wal", "-shm"):
        db.with_name(db.name + suffix).unlink(missing_ok=True)
    db.write_text("not a database at all\n" * 10)
    r = cli(cfg, "say", "hi")
    assert r.returncode == 1 and "is not a SQLite database" in one_line_error(r)

    db.unlink()
    with Tamper(db) as t:  # a plain SQLite file with a table of its own
        t.create_table("photos")
    r = cli(cfg, "say", "hi")
    assert r.returncode == 1 and "is not a fleet-agent database" in one_line_error(r)


def test_init_with_config_creates_the_database_it_names_and_refuses_an_existing_one(tmp_path: Path) -> None:
    """`--config FILE init` creates the data directory and database the config names (the config is left as it
    is); after that the commands work, and a second init refuses to touch the database."""
    cfg = write_config(tmp_path)
    text = cfg.read_text()
    r = cli(cfg, "init")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "data" / "fleet-agent.db").stat().st_size > 0 and cfg.read_text() == text
    assert cli(cfg, "say", "hi").returncode == 0
    again = cli(cfg, "init")
    assert again.returncode == 1 and "already exists" in one_line_error(again)
    assert snapshot(tmp_path / "data" / "fleet-agent.db")[0] == 1


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_init_into_an_unwritable_directory_is_one_line(tmp_path: Path) -> None:
    """init into a directory it cannot create exits 1 with one line naming the path."""
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    r = subprocess.run([sys.executable, "-m", "agent.cli", "init", str(locked / "site")], capture_output=True,
                       text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    assert r.returncode == 1
    assert str(locked / "site") in one_line_error(r)


def test_init_into_an_unusable_directory_is_one_line(tmp_path: Path) -> None:
    """init where a file stands in the way of the directory exits 1 with one line and no traceback."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = subprocess.run([sys.executable, "-m", "agent.cli", "init", str(blocker / "site")], capture_output=True,
                       text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    assert r.returncode == 1
    assert "init: cannot create" in one_line_error(r)


def test_library_opens_refuse_what_only_init_may_create(tmp_path: Path) -> None:
    """EventLog(create=False), as the App and the daemon open it, refuses a missing file and leaves no file."""
    with pytest.raises(LogError, match="no database at"):
        EventLog(tmp_path / "data" / "x.db", create=False)
    assert not (tmp_path / "data").exists()


# ------------------------------------------------------------------ log verify and its anchors


def test_log_verify_without_the_head_file_warns_and_does_not_say_ok(site: tuple[Path, Path]) -> None:
    """With the head file gone, log verify prints a warning, never 'ok', and exits 1."""
    cfg, db = site
    db.with_name(db.name + ".head").unlink()
    r = cli(cfg, "log", "verify")
    assert r.returncode == 1
    assert "WARNING: no head file" in r.stdout and "ok:" not in r.stdout and "incomplete" in r.stdout


def test_log_verify_against_a_recorded_head(site: tuple[Path, Path]) -> None:
    """--head SEQ:HASH passes when the log holds that head; fails naming the seq when history was rewritten or
    the log ends before it; a malformed value is a usage error (exit 2)."""
    cfg, db = site
    seq, h = snapshot(db)[1]
    ok = cli(cfg, "log", "verify", "--head", f"{seq}:{h}")
    assert ok.returncode == 0 and f"matches the recorded head {seq}" in ok.stdout
    past = cli(cfg, "log", "verify", "--head", f"{seq + 5}:{h}")
    assert past.returncode == 1 and f"the recorded head records seq {seq + 5}" in past.stdout
    with Tamper(db) as t:
        t.rechain(4, lambda p: p.replace("note 4", "note IV"))
    db.with_name(db.name + ".head").write_text(" ".join(map(str, snapshot(db)[1])) + "\n")
    fixed_head_file = cli(cfg, "log", "verify")
    assert fixed_head_file.returncode == 0  # both database and head file rewritten: undetectable without --head
    caught = cli(cfg, "log", "verify", "--head", f"{seq}:{h}")
    assert caught.returncode == 1 and f"FAILED at seq {seq}: seq {seq}: hash differs from the recorded head" \
        in caught.stdout
    bad = cli(cfg, "log", "verify", "--head", "twelve")
    assert bad.returncode == 2 and "SEQ:HASH" in one_line_error(bad)


def test_thread_follow_stops_with_one_line_when_the_database_is_moved(site: tuple[Path, Path]) -> None:
    """thread show --follow, with the database moved away under it, exits 1 with one line saying so instead of
    following a file nobody writes any more."""
    cfg, db = site
    env = {k: v for k, v in os.environ.items() if k != "FLEET_AGENT_CONFIG"}
    env["PYTHONPATH"] = str(REPO)
    p = subprocess.Popen([sys.executable, "-m", "agent.cli", "--config", str(cfg), "thread", "show", "--follow"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert p.stdout is not None
        seen = ""
        while f"note {N}" not in seen:
            seen += p.stdout.readline()
        db.rename(db.with_name("moved.db"))
        _out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
            p.wait(timeout=30)
    assert p.returncode == 1
    assert "Traceback" not in err and "was moved or replaced while following it" in err
