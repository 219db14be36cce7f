"""The event log on PostgreSQL through the real CLI and the real server (tests/pgserver.py): init, tick,
notes, verify, search, time travel, rebuild; many fleets in one database; appends from several processes;
append-only enforced by the server; storage.url and its password handling."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

from agent import cli, config
from agent.cli import doctor
from agent.config import PgTarget
from agent.errors import LogError
from agent.store.log import EventLog
from tests.tamper import EVENT_REWRITES, PG_TRUNCATE, PgTamper, pg_attempt


def write_config(root: Path, url: str, sim_url: str, *, agent_id: str = "fleet-a", extra: str = "") -> Path:
    (root / "knowledge").mkdir(parents=True, exist_ok=True)
    cfg = root / "config.yaml"
    cfg.write_text(f"""\
agent_id: {agent_id}
data_dir: ./data
knowledge_dir: ./knowledge
vast:
  url: {sim_url}
  timeout: 5s
model:
  provider: rules
schedule:
  max_steps: 3
storage:
  url: "{url}"
{extra}""", encoding="utf-8")
    return cfg


def run(capsys: pytest.CaptureFixture[str], cfg: Path, *argv: str, env: dict[str, str] | None = None
        ) -> tuple[int, str, str]:
    code = cli.main(["--config", str(cfg), *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_init_tick_notes_verify_search_and_time_travel_on_postgresql(pg_url, sim, sim_server, tmp_path, capsys,
                                                                     monkeypatch):
    """Every step an operator takes works with storage.url on PostgreSQL: init applies the schema, a tick
    runs and logs, a pinned note becomes a directive, log verify and replay --verify pass, log search finds
    the note through the tsvector index, context --at renders the past, log rebuild --check finds no drift."""
    monkeypatch.setenv("VAST_API_KEY", sim.api_key)
    cfg = write_config(tmp_path, pg_url, sim_server.url)
    code, out, err = run(capsys, cfg, "init")
    assert code == 0, err
    assert "created postgresql://" in out
    code, out, err = run(capsys, cfg, "say", "--pin", "keep two A100s warm for the batch jobs")
    assert code == 0, err
    code, out, err = run(capsys, cfg, "tick")
    assert code == 0, err
    code, out, err = run(capsys, cfg, "log", "verify")
    assert code == 0, err + out
    assert "verif" in out
    code, out, err = run(capsys, cfg, "log", "search", "A100s", "batch")
    assert code == 0, err
    assert "[batch]" in out or "batch" in out
    code, out, err = run(capsys, cfg, "log", "rebuild", "--check")
    assert code == 0, err + out
    code, out, err = run(capsys, cfg, "replay", "--verify")
    assert code == 0, err + out
    code, out, err = run(capsys, cfg, "context", "--seq", "2")
    assert code == 0, err
    assert "keep two A100s warm" in out
    code, out, err = run(capsys, cfg, "context", "--tick", "1")
    assert code == 0, err
    code, out, err = run(capsys, cfg, "context", "--at", "now")
    assert code == 0, err
    code, out, err = run(capsys, cfg, "status", "--json")
    assert code == 0, err
    st = json.loads(out)
    assert "error" not in st and st["database"].startswith("postgresql://") and st["events"] > 3
    for argv in (["thread", "show", "--kind", "tool.", "--tail", "5"], ["alerts", "list", "--all"], ["directives"],
                 ["policy", "show"], ["hosts", "list"], ["spend", "--json"], ["knowledge", "list"], ["config", "diff"],
                 ["log", "export"], ["pause", "--for", "1h", "--reason", "maintenance"], ["resume"], ["unpin", "1"]):
        code, out, err = run(capsys, cfg, *argv)
        assert code in (0, 1) and not err.startswith("Traceback") and "Error" not in err, (argv, err)
    code, out, err = run(capsys, cfg, "log", "verify")
    assert code == 0, err + out


def _target(url: str, agent_id: str, tmp_path: Path, **kw: object) -> PgTarget:
    return PgTarget(url, agent_id, state_dir=tmp_path, **kw)  # type: ignore[arg-type]


def _notes(log: EventLog, n: int, text: str) -> None:
    for i in range(n):
        log.append("operator.note", {"text": f"{text} {i}", "by": "alice", "pin": i == 0}, "operator")


def test_two_fleets_in_one_database_each_see_only_their_own_rows(pg_url, tmp_path):
    """Two fleets side by side in one database: each numbers its own events from 1, reads, searches and
    projects only its own (row-level security), and both chains verify."""
    with EventLog(_target(pg_url, "fleet-a", tmp_path), create=True) as a, \
            EventLog(_target(pg_url, "fleet-b", tmp_path), create=True) as b:
        _notes(a, 5, "alpha")
        _notes(b, 3, "bravo")
        assert [e.seq for e in a.read()] == [1, 2, 3, 4, 5]
        assert [e.seq for e in b.read()] == [1, 2, 3]
        assert all("alpha" in e.payload["text"] for e in a.read())
        assert all("bravo" in e.payload["text"] for e in b.read())
        assert a.search("bravo") == [] and len(b.search("bravo")) == 3
        assert [d.text for d in a.store.active_directives()] == ["alpha 0"]
        assert [d.text for d in b.store.active_directives()] == ["bravo 0"]
        ra, rb = a.verify(), b.verify()
        assert ra.ok and ra.head_seq == 5 and rb.ok and rb.head_seq == 3
        assert a.rebuild_check() == [] and b.rebuild_check() == []


_WRITER = """
import sys
from agent.store.log import EventLog
from agent.config import PgTarget
url, agent, n, name = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
with EventLog(PgTarget(url, agent), create=False) as log:
    for i in range(n):
        log.append("operator.note", {"text": f"{name} {i}", "by": name}, "operator")
"""


def test_several_processes_appending_at_once_keep_one_linear_chain(pg_url, tmp_path):
    """Four processes append to one fleet at the same time (the daemon and operators' CLIs on other hosts):
    the fleet's head row, locked in each append, serialises them, so seqs are gap-free, every row links to the one before and
    every process's events are all there; a second fleet written at the same time is untouched."""
    EventLog(_target(pg_url, "fleet-a", tmp_path), create=True).close()
    EventLog(_target(pg_url, "fleet-b", tmp_path), create=True).close()
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, pg_url, "fleet-a" if i < 4 else "fleet-b", "30",
                               f"w{i}"], cwd=str(Path(__file__).resolve().parents[2])) for i in range(5)]
    assert [p.wait(timeout=300) for p in procs] == [0] * 5
    with EventLog(_target(pg_url, "fleet-a", tmp_path), create=False) as a:
        events = list(a.read())
        assert [e.seq for e in events] == list(range(1, 121))
        assert all(e.prev_hash == p.hash for p, e in zip(events, events[1:], strict=False))
        assert sorted(e.payload["by"] for e in events) == sorted([f"w{i}" for i in range(4)] * 30)
        assert a.verify().ok
    with EventLog(_target(pg_url, "fleet-b", tmp_path), create=False) as b:
        assert b.count() == 30 and b.verify().ok


@pytest.mark.parametrize("statement", [*EVENT_REWRITES, PG_TRUNCATE])
def test_the_server_refuses_to_change_or_remove_events(pg_url, tmp_path, statement):
    """UPDATE and DELETE (row triggers) and TRUNCATE (a statement trigger) are refused by the server itself,
    even for the role that owns the table; the log still verifies after each attempt."""
    with EventLog(_target(pg_url, "fleet-a", tmp_path), create=True) as log:
        _notes(log, 2, "n")
    with pytest.raises(psycopg.Error, match="append-only"):
        pg_attempt(pg_url, "fleet-a", statement)
    with EventLog(_target(pg_url, "fleet-a", tmp_path), create=False) as log:
        assert log.count() == 2 and log.verify().ok


def test_verify_finds_an_edit_made_behind_the_triggers(pg_server, pg_url, tmp_path):
    """A superuser who switches the triggers off and edits a payload (or deletes a row) is caught by the
    hash chain: verify names the first bad seq."""
    with EventLog(_target(pg_url, "fleet-a", tmp_path), create=True) as log:
        _notes(log, 4, "steady")
    dbname = urlsplit(pg_url).path.strip("/")
    with PgTamper(pg_server.dsn(dbname), "fleet-a") as t:
        t.replace_in_payload(2, "steady", "shifty")
    with EventLog(_target(pg_url, "fleet-a", tmp_path), create=False) as log:
        r = log.verify()
        assert not r.ok and r.first_bad_seq == 2 and "edited" in (r.reason or "")
    with PgTamper(pg_server.dsn(dbname), "fleet-a") as t:
        t.delete(3)
    with EventLog(_target(pg_url, "fleet-a", tmp_path), create=False) as log:
        r = log.verify()
        assert not r.ok and r.first_bad_seq == 2


def test_a_role_that_bypasses_row_level_security_is_refused(pg_server, pg_dsn, tmp_path):
    """A superuser (or BYPASSRLS) connection would see every fleet's rows: it is refused, naming the role and
    the fix, before anything is read or written."""
    with pytest.raises(LogError, match="superuser.*every fleet's rows"):
        EventLog(_target(pg_dsn, "fleet-a", tmp_path), create=True)


def test_init_grant_gives_a_role_read_and_append_only_on_the_events(pg_server, pg_url, sim, sim_server, tmp_path,
                                                                    capsys, monkeypatch):
    """init --grant ROLE (run as the schema's owner) grants the fleet's role SELECT and INSERT on the events
    and writes on the read models; that role runs the fleet (doctor's privileges check passes) and an UPDATE
    of an event is refused for lack of privilege, before any trigger."""
    monkeypatch.setenv("VAST_API_KEY", sim.api_key)
    owner_cfg = write_config(tmp_path / "owner", pg_url, sim_server.url)
    pg_server.psql('CREATE ROLE fleet_runner LOGIN')
    code, out, err = run(capsys, owner_cfg, "init", "--grant", "fleet_runner")
    assert code == 0, err
    assert "GRANT SELECT, INSERT ON events TO \"fleet_runner\";" in out
    runner_url = pg_url.replace(pg_url.split("//")[1].split("@")[0], "fleet_runner", 1)
    cfg = write_config(tmp_path / "runner", runner_url, sim_server.url)
    (tmp_path / "runner" / "data").mkdir()
    code, out, err = run(capsys, cfg, "say", "hello from the runner")
    assert code == 0, err
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        pg_attempt(runner_url, "fleet-a", EVENT_REWRITES[2])
    with EventLog(_target(runner_url, "fleet-a", tmp_path), create=False) as log:
        checks = doctor._pg_privileges(log)
        assert checks.ok and "read and append only" in checks.detail
    with EventLog(_target(pg_url, "fleet-a", tmp_path), create=False) as log:
        owner = doctor._pg_privileges(log)
        assert owner.ok and "UPDATE" in owner.detail  # the owner could: doctor says so


def test_the_password_comes_from_the_environment_never_the_url(pg_server, tmp_path, sim, sim_server, capsys,
                                                               monkeypatch):
    """Over TCP the role's password comes from storage.password_env (or a file / credential) and works; a
    password written in storage.url is refused at load with the file and line; without the password the
    error names the server, never the password; the password is in no event."""
    password = "pw-" + uuid.uuid4().hex
    dbname = "f_" + uuid.uuid4().hex[:10]
    pg_server.psql(f"CREATE ROLE tcp_runner LOGIN PASSWORD '{password}'")
    pg_server.psql(f'CREATE DATABASE "{dbname}" OWNER tcp_runner')
    url = f"postgresql://tcp_runner@127.0.0.1:{pg_server.port}/{dbname}"
    monkeypatch.setenv("VAST_API_KEY", sim.api_key)
    bad = write_config(tmp_path / "bad", url.replace("tcp_runner@", f"tcp_runner:{password}@"), sim_server.url)
    code, out, err = run(capsys, bad, "status")
    assert code != 0
    assert "config.yaml:12: storage.url: a password in the URL is refused" in err
    assert password not in err + out
    cfg = write_config(tmp_path / "ok", url, sim_server.url)
    monkeypatch.delenv("FLEET_AGENT_PG_PASSWORD", raising=False)
    code, out, err = run(capsys, cfg, "init")
    assert code != 0 and "password" in err and "127.0.0.1" in err
    monkeypatch.setenv("FLEET_AGENT_PG_PASSWORD", password)
    code, out, err = run(capsys, cfg, "init")
    assert code == 0, err
    code, out, err = run(capsys, cfg, "say", "over tcp")
    assert code == 0, err
    code, out, err = run(capsys, cfg, "log", "export")
    assert code == 0 and "over tcp" in out and password not in out


def test_log_migrate_sqlite_to_postgresql_and_back_keeps_the_chain(pg_url, sim, sim_server, tmp_path, capsys,
                                                                   monkeypatch):
    """log migrate copies a SQLite log (a real tick's events) into PostgreSQL with the same seqs and hashes,
    verified on both sides and with the read models rebuilt; a second migrate into the now non-empty target
    is refused and changes nothing; migrating back into a new SQLite file gives the same chain again."""
    monkeypatch.setenv("VAST_API_KEY", sim.api_key)
    sq = write_config(tmp_path / "sq", "./data/fleet-agent.db", sim_server.url)
    assert run(capsys, sq, "init")[0] == 0
    assert run(capsys, sq, "say", "--pin", "migrate me intact")[0] == 0
    assert run(capsys, sq, "tick")[0] == 0
    code, out, err = run(capsys, sq, "log", "migrate", "--to", pg_url, "--json")
    assert code == 0, err
    moved = json.loads(out)
    with EventLog(tmp_path / "sq" / "data" / "fleet-agent.db", readonly=True, create=False) as src, \
            EventLog(_target(pg_url, "fleet-a", tmp_path), create=False) as dst:
        assert moved["events"] == src.count() == dst.count() > 3
        assert [(e.seq, e.hash) for e in src.read()] == [(e.seq, e.hash) for e in dst.read()]
        assert dst.verify().ok and dst.rebuild_check() == []
        assert [d.text for d in dst.store.active_directives()] == ["migrate me intact"]
        n = dst.count()
    code, out, err = run(capsys, sq, "log", "migrate", "--to", pg_url)
    assert code != 0 and "already holds" in err
    back = tmp_path / "back.db"
    code, out, err = run(capsys, sq, "log", "migrate", "--from", pg_url, "--to", str(back))
    assert code == 0, err
    with EventLog(back, readonly=True, create=False) as b, \
            EventLog(_target(pg_url, "fleet-a", tmp_path), create=False) as dst:
        assert dst.count() == n
        assert [(e.seq, e.hash) for e in b.read()] == [(e.seq, e.hash) for e in dst.read()]
        assert b.verify().ok and not b.verify().warnings
    code, out, err = run(capsys, sq, "log", "migrate", "--to", pg_url.replace("@", ":secret@"))
    assert code != 0 and "password in the URL is refused" in err and "secret" not in err


def test_doctor_on_postgresql_reports_server_privileges_and_chain(pg_url, sim, sim_server, tmp_path, capsys,
                                                                  monkeypatch):
    """doctor with a PostgreSQL storage.url names the server version and schema, the role's privileges and the
    chain; against a database without the schema it fails saying to run init."""
    monkeypatch.setenv("VAST_API_KEY", sim.api_key)
    cfg = write_config(tmp_path, pg_url, sim_server.url)
    checks = doctor.check_postgres(config.load(str(cfg)))
    assert not checks[0].ok and "fleet-agent init" in checks[0].detail
    assert run(capsys, cfg, "init")[0] == 0
    assert run(capsys, cfg, "say", "hello")[0] == 0
    checks = doctor.check_postgres(config.load(str(cfg)))
    assert [c.name for c in checks] == ["postgres", "role", "privileges", "chain"]
    assert all(c.ok for c in checks), checks
    assert "PostgreSQL 1" in checks[0].detail and "1 events" in checks[3].detail


def test_sqlite_commands_never_import_psycopg(tmp_path):
    """With the default storage (SQLite) opening, appending and verifying the log loads no PostgreSQL driver."""
    code = ("import sys\nfrom agent.store.log import EventLog\n"
            f"log = EventLog({str(tmp_path / 'x.db')!r})\n"
            "log.append('operator.note', {'text': 'x', 'by': 'a'}, 'operator')\nassert log.verify().ok\n"
            "assert 'psycopg' not in sys.modules, 'psycopg was imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=str(Path(__file__).resolve().parents[2]))


def test_fork_of_a_postgresql_log_writes_its_own_sqlite_log_and_diffs(pg_url, sim, sim_server, tmp_path, capsys,
                                                                      monkeypatch):
    """fork from a fleet kept in PostgreSQL reads the origin there (read-only) and writes its re-run into a
    SQLite log in the fork's own directory: the origin fleet's events are unchanged; fork diff finds the
    origin again through the recorded URL and fleet."""
    monkeypatch.setenv("VAST_API_KEY", sim.api_key)
    cfg = write_config(tmp_path / "site", pg_url, sim_server.url)
    assert run(capsys, cfg, "init")[0] == 0
    assert run(capsys, cfg, "tick")[0] == 0
    with EventLog(_target(pg_url, "fleet-a", tmp_path), create=False) as log:
        before = [(e.seq, e.hash) for e in log.read()]
    out = tmp_path / "fork"
    code, stdout, err = run(capsys, cfg, "fork", "--tick", "1", "--rules", "--out", str(out))
    assert code == 0, err
    assert (out / "data" / "fleet-agent.db").exists()
    assert config.load(str(out / "config.yaml")).storage.url is None
    with EventLog(_target(pg_url, "fleet-a", tmp_path), create=False) as log:
        assert [(e.seq, e.hash) for e in log.read()] == before
    code, stdout, err = run(capsys, cfg, "fork", "diff", str(out))
    assert code == 0, err


@pytest.mark.slow
def test_the_daemon_ticks_on_postgresql_and_stops_cleanly(pg_url, tmp_path):
    """`fleet-agent run` with a PostgreSQL storage.url verifies the log, ticks against the simulator and, on
    SIGTERM, exits 0 with daemon.stopped; the chain verifies and the read models match a rebuild."""
    import signal

    from agent.sim import SimServer, Simulator
    from tests.service.test_daemon import env_for, wait_for

    with SimServer(Simulator(seed=7)) as server:
        cfg = write_config(tmp_path, pg_url, server.url, extra="logging:\n  format: json\n")
        cfg.write_text(cfg.read_text().replace("schedule:\n  max_steps: 3", "schedule:\n  max_steps: 2\n"
                                               "  interval: 1s\n  misfire_grace: 5s"))
        assert run_init(cfg) == 0
        err = (tmp_path / "daemon.stderr").open("w")
        p = subprocess.Popen([sys.executable, "-m", "agent.cli", "--config", str(cfg), "run"], cwd=tmp_path,
                             env=env_for(), stdout=subprocess.DEVNULL, stderr=err)
        try:
            with EventLog(_target(pg_url, "fleet-a", tmp_path), create=False) as log:
                wait_for(lambda: p.poll() is not None or log.store.count_events_after(0, "tick.completed") >= 2,
                         "two completed ticks")
                assert p.poll() is None, (tmp_path / "daemon.stderr").read_text()
                p.send_signal(signal.SIGTERM)
                assert p.wait(timeout=60) == 0
                assert log.store.count_events_after(0, "daemon.stopped") == 1
                assert log.verify().ok and log.rebuild_check() == []
        finally:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)


def run_init(cfg: Path) -> int:
    return cli.main(["--config", str(cfg), "init"])


_STALLED_DAEMON = """
import sys
from pathlib import Path
from agent.store.log import EventLog
from agent.store.pglock import bound_idle_transactions
from agent.config import PgTarget
log = EventLog(PgTarget(sys.argv[1], "fleet-a", state_dir=Path(sys.argv[2])), create=False)
log.fence = lambda: None  # a daemon's log: every append is fenced
bound_idle_transactions(log, 1.0)
with log.transaction() as tx:
    tx.store.open_alerts()  # a read inside the append transaction's pipeline, then the process stops
    print("inside", flush=True)
    sys.stdin.readline()  # the test SIGSTOPs it here
    tx.append("operator.note", {"text": "never committed", "by": "alice"}, "operator")
"""


@pytest.mark.slow
def test_a_daemon_stalled_inside_an_append_never_keeps_the_append_lock_from_its_successor(pg_url, tmp_path):
    """A daemon suspended (SIGSTOP) inside an append transaction, right after a read in its pipeline, where
    the server arms no idle timeout: it keeps the fleet's append lock. The daemon that takes the fleet over
    ends that session as it takes the leadership lock, so the append lock is free for its first append,
    and the stalled transaction commits nothing when the old process resumes."""
    import os
    import signal

    from agent.runtime.leader import PgLeader
    from tests.service.test_daemon import wait_for
    from tests.tamper import pg_append_lock_free

    with EventLog(_target(pg_url, "fleet-a", tmp_path), create=True) as log:
        log.append("operator.note", {"text": "before", "by": "alice"}, "operator")
    old = subprocess.Popen([sys.executable, "-c", _STALLED_DAEMON, pg_url, str(tmp_path)], text=True,
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    leader = PgLeader(pg_url, "fleet-a", failover_seconds=30)
    try:
        assert old.stdout is not None and old.stdout.readline().strip() == "inside"
        old.send_signal(signal.SIGSTOP)
        assert not pg_append_lock_free(pg_url, "fleet-a")  # held by the suspended transaction
        assert leader.try_acquire()  # nobody holds the leadership lock: the old one had lost it
        wait_for(lambda: pg_append_lock_free(pg_url, "fleet-a"), "the stalled session to be ended", timeout=30)
        old.send_signal(signal.SIGCONT)
        _, err = old.communicate("go\n", timeout=60)
        assert old.returncode != 0, err  # its session is gone: the append fails
    finally:
        leader.release()
        if old.poll() is None:
            old.send_signal(signal.SIGCONT)
            old.kill()
            old.wait(30)
    with EventLog(_target(pg_url, "fleet-a", tmp_path), create=False, readonly=True) as after:
        assert [e.payload["text"] for e in after.read(kinds=["operator.note"])] == ["before"]


def test_an_operators_append_is_never_ended_by_a_takeover(pg_url, tmp_path):
    """Only an earlier daemon's sessions are ended at a takeover: an operator's command in the middle of an
    append (its session named for the fleet, not for a daemon) keeps its transaction and commits."""
    from agent.runtime.leader import PgLeader

    with EventLog(_target(pg_url, "fleet-a", tmp_path), create=True) as log:
        leader = PgLeader(pg_url, "fleet-a", failover_seconds=30)
        try:
            with log.transaction() as tx:
                tx.store.open_alerts()
                assert leader.try_acquire()
                tx.append("operator.note", {"text": "kept", "by": "alice"}, "operator")
        finally:
            leader.release()
        assert [e.payload["text"] for e in log.read(kinds=["operator.note"])] == ["kept"]


def test_migration_005_fills_the_runs_uptimes_from_the_observations_logged_before_it(pg_server, pg_url, tmp_path):
    """A PostgreSQL log from before the runs kept vast.ai's uptime gets it from the observations already logged,
    in every stored form (tests/fleet/test_spend_runs.py: a column, one shared value, distinct values and an index,
    a list of records), when it is next opened: what the ticks would have kept, and rebuild --check agrees."""
    from tests.fleet.test_spend_runs import UPTIMES, log_uptime_ticks, uptimes

    with EventLog(_target(pg_url, "fleet-a", tmp_path), create=True) as log:
        log_uptime_ticks(log)
        assert uptimes(log) == UPTIMES
    dbname = urlsplit(pg_url).path.strip("/")
    with PgTamper(pg_server.dsn(dbname), "fleet-a") as t:  # the schema as the release before left it
        t.runs_as_before_005()
    with EventLog(_target(pg_url, "fleet-a", tmp_path), create=False) as log:
        assert uptimes(log) == UPTIMES
        assert log.rebuild_check() == []
