"""Fleets in one PostgreSQL database kept apart by the server, tried as an attacker would.

Two fleets, each run by a role of its own that the schema's owner granted with ``init --grant``. The role of
fleet A then tries everything it can think of against fleet B, through SQL on its own connection and through
the project's CLI with ``agent_id: fleet-b`` in its config: read, insert, update, delete and truncate every
table, name fleet B in the session setting the policies used to trust, take B's head row and leadership
lock, call the schema's functions, write its own binding. Every attempt is recorded with the server's answer
(``-s`` prints the table); each must read 0 rows of B and change none, and fleet B's log must be exactly as it
was, chain and read models.

A role that may UPDATE or DELETE a table may also ``LOCK TABLE`` it in any mode, which would make every
fleet's writes to it wait: the roles hold SELECT and INSERT only (their read models' other writes are
procedures, schema_pg.sql 004), so of the eight lock modes only ACCESS SHARE and ROW EXCLUSIVE are granted,
and fleet B appends, read models and all, while fleet A's role holds both on every shared table. What the
server grants is recorded in the table as granted, with what it left fleet B.

The statements below are the attacker's: they are what the test is about, so they are written here.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg import sql

from agent import cli
from agent.config import PgTarget
from agent.errors import LogError
from agent.runtime.leader import PgLeader
from agent.store import pg
from agent.store.log import EventLog
from agent.store.pglock import holds_lock, lead_table
from tests.pgserver import PgServer
from tests.store.test_pg_store import write_config
from tests.tamper import pg_append_lock_free

TABLES = (*pg.FLEET_TABLES, "fleets")
LOCK_MODES = ("ACCESS SHARE", "ROW SHARE", "ROW EXCLUSIVE", "SHARE UPDATE EXCLUSIVE", "SHARE", "SHARE ROW EXCLUSIVE",
              "EXCLUSIVE", "ACCESS EXCLUSIVE")
REPO = Path(__file__).resolve().parents[2]


def _url_as(url: str, role: str) -> str:
    u = urlsplit(url)
    return u._replace(netloc=f"{role}@{u.netloc.split('@', 1)[1]}").geturl()


def _cli(cfg: Path, *argv: str) -> tuple[int, str]:
    """The CLI in a process of its own (its exit code and what it printed, both streams)."""
    p = subprocess.run([sys.executable, "-m", "agent.cli", "--config", str(cfg), *argv], cwd=str(cfg.parent),
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    return p.returncode, p.stdout + p.stderr


class Attacker:
    """The role of fleet A on a connection of its own, naming a fleet in the session setting; every attempt
    goes in ``table`` as (what was tried, what the server answered)."""

    def __init__(self, url: str, names: str) -> None:
        self.conn = psycopg.connect(url, autocommit=True)
        self.conn.execute("SELECT set_config('fleet_agent.agent_id', %s, false)", [names])
        self.table: list[tuple[str, str]] = []

    def attempt(self, what: str, statement: str | sql.Composed, params: list[object] | None = None, *,
                keep_open: bool = False) -> str:
        """Run ``statement`` inside a transaction (rolled back unless ``keep_open``); returns the answer."""
        try:
            if self.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
                self.conn.execute("BEGIN")
            cur = self.conn.execute(statement, params or [])
            if cur.description is not None:
                answer = f"{len(cur.fetchall())} rows"
            else:
                answer = cur.statusmessage or "ok"
        except psycopg.Error as e:
            answer = "ERROR: " + str(e).strip().splitlines()[0]
            keep_open = False
        if not keep_open:
            self.rollback()
        self.table.append((what, answer))
        return answer

    def rollback(self) -> None:
        if self.conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            self.conn.execute("ROLLBACK")

    def close(self) -> None:
        self.conn.close()


def _refused(answer: str) -> bool:
    """A refusal, or a statement that touched nothing."""
    return answer.startswith("ERROR: ") or answer in ("0 rows", "UPDATE 0", "DELETE 0", "INSERT 0 0")


# Values the tables' CHECK constraints accept; every other column takes a number or a JSON text.
_CHECKED = {"status": {"alerts": "open", "instances": "active"}, "source": {"events": "operator"},
            "change": {"knowledge": "added"}}


def _row_of(conn: psycopg.Connection[tuple[object, ...]], table: str, agent_id: str) -> sql.Composed:
    """An INSERT of one well-formed row of ``table`` for fleet ``agent_id`` (keys far above any real one)."""
    cols = conn.execute("SELECT column_name, data_type FROM information_schema.columns WHERE table_name = %s "
                        "AND is_generated = 'NEVER' ORDER BY ordinal_position", [table]).fetchall()
    values: list[object] = []
    for name, kind in cols:
        if name == "agent_id":
            values.append(agent_id)
        elif name in _CHECKED and table in _CHECKED[str(name)]:
            values.append(_CHECKED[str(name)][table])
        elif kind in ("bigint", "integer", "double precision"):
            values.append(990001)
        else:
            values.append("{}")
    return sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
        sql.Identifier(table), sql.SQL(", ").join(sql.Identifier(str(c[0])) for c in cols),
        sql.SQL(", ").join(map(sql.Literal, values)))


def _state(url: str, agent_id: str, tmp_path: Path) -> dict[str, object]:
    """Everything fleet ``agent_id`` holds, as its own role reads it: its events (seq, hash), the read models'
    rows, whether it verifies."""
    with EventLog(PgTarget(url, agent_id, state_dir=tmp_path), readonly=True, create=False) as log:
        events = [(e.seq, e.hash) for e in log.read()]
        ok = log.verify().ok and log.rebuild_check() == []
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("SELECT set_config('fleet_agent.agent_id', %s, false)", [agent_id])
        rows = {t: sorted(map(repr, c.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier(t))).fetchall()))
                for t in TABLES}
    return {"events": events, "rows": rows, "verifies": ok}


@pytest.fixture
def two_fleets(pg_server: PgServer, pg_url: str, sim, sim_server, tmp_path: Path, monkeypatch, capsys):
    """Fleets A and B made by the schema's owner, each granted to a role of its own (``init --grant``), and
    each with a real history: pinned notes, a tick against the simulator, an acknowledged alert."""
    monkeypatch.setenv("VAST_API_KEY", sim.api_key)
    roles = {}
    for fleet in ("fleet-a", "fleet-b"):
        role = f"runner_{fleet[-1]}_{uuid.uuid4().hex[:10]}"
        pg_server.psql(f'CREATE ROLE "{role}" LOGIN')
        owner = write_config(tmp_path / f"owner-{fleet}", pg_url, sim_server.url, agent_id=fleet)
        assert cli.main(["--config", str(owner), "init", "--grant", role]) == 0, capsys.readouterr().err
        runner = write_config(tmp_path / fleet, _url_as(pg_url, role), sim_server.url, agent_id=fleet)
        (tmp_path / fleet / "data").mkdir(exist_ok=True)
        for argv in (["say", "--pin", f"{fleet}: keep two A100s warm"], ["tick"], ["say", f"{fleet}: a note"]):
            code = cli.main(["--config", str(runner), *argv])
            assert code == 0, (argv, capsys.readouterr().err)
        roles[fleet] = role
    capsys.readouterr()
    try:
        yield roles
    finally:  # the roles are the server's, not the database's: their grants go, then they do
        with psycopg.connect(pg_server.dsn(urlsplit(pg_url).path.strip("/")), autocommit=True) as su:
            for role in roles.values():
                su.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", [role])
                su.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
                su.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_a_role_bound_to_fleet_a_reads_and_writes_nothing_of_fleet_b(pg_server, pg_url, two_fleets, sim_server,
                                                                    tmp_path, capsys):
    """The role of fleet A against fleet B: every SELECT reads 0 of B's rows, every INSERT, UPDATE, DELETE and
    TRUNCATE is refused or touches nothing, naming fleet B in the session setting changes nothing, B's head
    row and leadership lock cannot be taken, the schema's functions and the bindings cannot be used, the
    policies cannot be changed, and the CLI run with agent_id: fleet-b refuses to start; fleet B's log,
    read models and chain are exactly as they were."""
    a_url = _url_as(pg_url, two_fleets["fleet-a"])
    b_url = _url_as(pg_url, two_fleets["fleet-b"])
    before = _state(b_url, "fleet-b", tmp_path)
    assert len(before["events"]) > 5 and before["verifies"]  # type: ignore[arg-type]
    assert before["rows"]["directives"] and before["rows"]["fleets"]  # type: ignore[index]

    # Fleet A's role may write its own read models: a row of its own in each, to try moving into fleet B.
    with psycopg.connect(a_url, autocommit=True) as own:
        own.execute("SELECT set_config('fleet_agent.agent_id', 'fleet-a', false)")
        for t in pg.FLEET_TABLES:
            if t not in ("events", "events_fts"):
                own.execute(_row_of(own, t, "fleet-a"))

    results: list[tuple[str, str]] = []
    granted: list[tuple[str, str]] = []  # attempts the server allows, which must leave fleet B untouched
    for names in ("fleet-a", "fleet-b"):  # its own fleet in the setting, then the victim's
        atk = Attacker(a_url, names)
        try:
            setting = f"[setting {names}] "
            for t in TABLES:
                ident = sql.Identifier(t)
                atk.attempt(setting + f"SELECT {t} of fleet-b", sql.SQL(
                    "SELECT * FROM {} WHERE agent_id = 'fleet-b'").format(ident))
                atk.attempt(setting + f"INSERT a row of fleet-b into {t}", _row_of(atk.conn, t, "fleet-b"))
                atk.attempt(setting + f"UPDATE {t} rows of fleet-b", sql.SQL(
                    "UPDATE {} SET agent_id = agent_id WHERE agent_id = 'fleet-b'").format(ident))
                atk.attempt(setting + f"UPDATE {t}: move own rows into fleet-b", sql.SQL(
                    "UPDATE {} SET agent_id = 'fleet-b' WHERE agent_id = 'fleet-a'").format(ident))
                atk.attempt(setting + f"DELETE {t} rows of fleet-b", sql.SQL(
                    "DELETE FROM {} WHERE agent_id = 'fleet-b'").format(ident))
                atk.attempt(setting + f"TRUNCATE {t}", sql.SQL("TRUNCATE {}").format(ident))
                for mode in LOCK_MODES:
                    answer = atk.attempt(setting + f"LOCK TABLE {t} IN {mode} MODE",
                                         sql.SQL("LOCK TABLE {} IN " + mode + " MODE NOWAIT").format(ident))
                    if answer == "LOCK TABLE":  # SELECT and INSERT allow these two: tried below against B
                        assert mode in ("ACCESS SHARE", "ROW EXCLUSIVE"), (t, mode)
                        granted.append(atk.table.pop())
            for proc, nargs in atk.conn.execute(
                    "SELECT proname, pronargs FROM pg_proc WHERE proname LIKE 'fleet\\_agent\\_rm\\_%' "
                    "ORDER BY proname").fetchall():
                answer = atk.attempt(setting + f"CALL {proc} (a read model's write)",
                                     f"CALL {proc}({', '.join(['NULL'] * int(nargs))})")
                if names == "fleet-a" and not answer.startswith("ERROR: "):
                    granted.append(atk.table.pop())  # its own fleet's rows: B's are compared below
            atk.attempt(setting + "CALL fleet_agent_rm_cleared on the bindings",
                        "CALL fleet_agent_rm_cleared('fleet_roles')")
            atk.attempt(setting + "fleet_agent_caller() directly", "SELECT fleet_agent_caller()")
            atk.attempt(setting + "lock fleet-b's head row (its append lock), transaction kept open",
                        "SELECT * FROM fleets WHERE agent_id = 'fleet-b' FOR UPDATE", keep_open=True)
            assert pg_append_lock_free(b_url, "fleet-b")  # fleet B's appends do not wait for it
            atk.rollback()
            atk.attempt(setting + "take fleet-b's leadership lock",
                        sql.SQL("LOCK TABLE {} IN EXCLUSIVE MODE NOWAIT").format(sql.Identifier(lead_table("fleet-b"))))
            atk.attempt(setting + "read fleet-b's leadership table",
                        sql.SQL("SELECT * FROM {}").format(sql.Identifier(lead_table("fleet-b"))))
            atk.attempt(setting + "bind itself to fleet-b through fleet_agent_bind",
                        "SELECT fleet_agent_bind('fleet-b', current_user)")
            atk.attempt(setting + "INSERT its binding to fleet-b into fleet_roles",
                        "INSERT INTO fleet_roles VALUES ('fleet-b', current_user, 'now')")
            atk.attempt(setting + "UPDATE its binding to name fleet-b", "UPDATE fleet_roles SET agent_id = 'fleet-b'")
            atk.attempt(setting + "DELETE fleet-b's bindings", "DELETE FROM fleet_roles WHERE agent_id = 'fleet-b'")
            atk.attempt(setting + "SELECT fleet_roles of fleet-b", "SELECT * FROM fleet_roles WHERE agent_id = 'fleet-b'")
            atk.attempt(setting + "SET ROLE to fleet-b's role",
                        sql.SQL("SET ROLE {}").format(sql.Identifier(two_fleets["fleet-b"])))
            atk.attempt(setting + "SET SESSION AUTHORIZATION to fleet-b's role",
                        sql.SQL("SET SESSION AUTHORIZATION {}").format(sql.Identifier(two_fleets["fleet-b"])))
            atk.attempt(setting + "DROP POLICY fleet ON events", "DROP POLICY fleet ON events")
            atk.attempt(setting + "ALTER TABLE events DISABLE ROW LEVEL SECURITY",
                        "ALTER TABLE events DISABLE ROW LEVEL SECURITY")
            atk.attempt(setting + "CREATE POLICY letting it see every row",
                        "CREATE POLICY open ON events USING (true)")
            atk.attempt(setting + "search fleet-b's full-text index",
                        "SELECT seq FROM events_fts WHERE tsv @@ plainto_tsquery('english', 'A100s')"
                        " AND agent_id = 'fleet-b'")
            results += atk.table
        finally:
            atk.close()
    # SET in the session (not set_config), as psql users would
    atk = Attacker(a_url, "fleet-a")
    try:
        atk.conn.execute("SET fleet_agent.agent_id = 'fleet-b'")
        atk.attempt("SET fleet_agent.agent_id = 'fleet-b', then SELECT events", "SELECT * FROM events")
        atk.attempt("  then SELECT directives", "SELECT * FROM directives")
        atk.attempt("  then INSERT a directive (agent_id from the setting)",
                    "INSERT INTO directives (id, text, by, ts) VALUES (99, 'pwned', 'mallory', 'now')")
        atk.attempt("  then INSERT an event (agent_id from the setting)", _row_of(atk.conn, "events", "fleet-b")
                    .as_string(atk.conn).replace("'fleet-b', ", "DEFAULT, ", 1))
        results += atk.table
    finally:
        atk.close()

    for what, answer in results:
        assert _refused(answer), (what, answer)

    # The project's own CLI, with agent_id: fleet-b in a config that connects as fleet A's role.
    evil = write_config(tmp_path / "evil", a_url, sim_server.url, agent_id="fleet-b")
    (tmp_path / "evil" / "data").mkdir()
    for argv in (["say", "--pin", "pwned"], ["log", "export"], ["status", "--json"], ["log", "verify"],
                 ["init"], ["tick"], ["run"]):
        code, out = _cli(evil, *argv)
        results.append((f"CLI with agent_id: fleet-b: {' '.join(argv)}",
                        f"exit {code}: " + (out.strip().splitlines() or [""])[-1][:160]))
        assert code != 0, (argv, out)
        assert "pwned" not in out and "keep two A100s" not in out
    assert "not bound to fleet 'fleet-b'" in _cli(evil, "say", "x")[1]

    assert _state(b_url, "fleet-b", tmp_path) == before

    atk = Attacker(a_url, "fleet-a")
    try:
        # The advisory keys that guarded leadership and appends before: anyone may take them, and they now
        # guard nothing; the migration key only makes a pending migration give up after 5 s, saying so.
        # The locks SELECT and INSERT allow, held on every shared table; and a write transaction in a session
        # named as one of fleet B's daemons, which B's daemon ends as it takes over only when its role may.
        atk.conn.execute("SELECT pg_advisory_lock(%s, hashtext('fleet-b'))", [0x46414C4B])
        atk.conn.execute("SELECT pg_advisory_lock(%s, hashtext('fleet-b'))", [0x66610001])
        atk.conn.execute("SELECT pg_advisory_lock(%s, 0)", [pg.MIGRATE_LOCK])
        atk.conn.execute("SET application_name = 'fleet-agent fleet-b evil 1'")
        atk.conn.execute("BEGIN")
        for t in TABLES:
            atk.conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS SHARE MODE").format(sql.Identifier(t)))
            if t != "fleets":
                atk.conn.execute(sql.SQL("LOCK TABLE {} IN ROW EXCLUSIVE MODE").format(sql.Identifier(t)))
        atk.conn.execute("INSERT INTO directives (id, text, by, ts) VALUES (99, 'held', 'mallory', 'now')")
        # and an earlier daemon of fleet B itself, suspended inside an append: its head row locked
        stale = psycopg.connect(b_url, autocommit=True, application_name="fleet-agent fleet-b old-host 2")
        stale.execute("SELECT set_config('fleet_agent.agent_id', 'fleet-b', false)")
        stale.execute("BEGIN")
        stale.execute("SELECT 1 FROM fleets WHERE agent_id = 'fleet-b' FOR UPDATE")
        assert not pg_append_lock_free(b_url, "fleet-b")
        lead = PgLeader(b_url, "fleet-b", failover_seconds=30)
        try:
            # taken, and its session still sound: a refused signal would have aborted its transaction
            ok = lead.try_acquire() and holds_lock(lead._conn, "fleet-b")
        finally:
            lead.release()
        assert pg_append_lock_free(b_url, "fleet-b")  # the stale daemon's session was ended, not the attacker's
        with pytest.raises(psycopg.OperationalError):
            stale.execute("SELECT 1")
        stale.close()
        # lock_timeout on fleet B's session: were it made to wait, the append fails rather than hangs
        waits = b_url + ("&" if "?" in b_url else "?") + "options=-c%20lock_timeout%3D10000"
        with EventLog(PgTarget(waits, "fleet-b", state_dir=tmp_path), create=False) as log:
            log.append("operator.note", {"text": "still mine", "by": "bob", "pin": True}, "operator")
            log.append("directive.unpinned", {"directive_id": log.last_seq(), "by": "bob"}, "operator")
            assert log.rebuild_check() == []
        assert atk.conn.execute("SELECT count(*) FROM directives WHERE id = 99").fetchone() == (1,)
        granted.append(("hold the old advisory keys of fleet-b (leadership, appends) and the migration key",
                        f"granted; fleet-b's daemon still took its leadership: {ok}, and appended"))
        granted.append(("hold ACCESS SHARE and ROW EXCLUSIVE on every shared table, in a write transaction "
                        "named 'fleet-agent fleet-b evil 1'", "granted; fleet-b's daemon took its leadership, "
                        "ended fleet-b's own stale daemon session, left this one alone (not its role's), and "
                        "appended and unpinned"))
        assert ok
        atk.conn.execute("ROLLBACK")
    finally:
        atk.close()
    results += granted
    with capsys.disabled():
        print("\nattack table (role of fleet-a against fleet-b):")
        for what, answer in results:
            print(f"| {what} | {answer} |")


def test_init_grant_run_by_a_role_that_does_not_own_the_schema_fails_and_grants_nothing(
        pg_server, pg_url, two_fleets, sim_server, tmp_path, capsys):
    """init --grant run with the config of a granted role (not the schema's owner): exit non-zero, saying it
    does not own the schema, and the role it named is neither granted nor bound."""
    a_url = _url_as(pg_url, two_fleets["fleet-a"])
    newcomer = f"newcomer_{uuid.uuid4().hex[:10]}"
    pg_server.psql(f'CREATE ROLE "{newcomer}" LOGIN')
    try:
        cfg = write_config(tmp_path / "not-owner", a_url, sim_server.url, agent_id="fleet-a")
        (tmp_path / "not-owner" / "data").mkdir()
        code = cli.main(["--config", str(cfg), "init", "--grant", newcomer])
        out, err = capsys.readouterr()
        assert code != 0
        assert "does not own the fleet-agent schema" in err and "nothing was granted" in err
        assert "GRANT" not in out
        with psycopg.connect(pg_server.dsn(urlsplit(pg_url).path.strip("/")), autocommit=True) as su:
            assert su.execute("SELECT count(*) FROM fleet_roles WHERE rolname = %s", [newcomer]).fetchone() == (0,)
            assert su.execute("SELECT has_table_privilege(%s, 'events', 'SELECT')", [newcomer]).fetchone() == (False,)
    finally:
        with psycopg.connect(pg_server.dsn(urlsplit(pg_url).path.strip("/")), autocommit=True) as su:
            su.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(newcomer)))
            su.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(newcomer)))


def test_init_grant_fails_and_grants_nothing_when_the_role_could_still_lock_a_shared_table(
        pg_server, pg_url, sim_server, tmp_path, capsys):
    """UPDATE on a read model granted to PUBLIC (by hand): the new role would hold it through PUBLIC, and so
    could lock that table for every fleet; init --grant exits non-zero naming it, and binds and grants nothing."""
    newcomer = f"newcomer_{uuid.uuid4().hex[:10]}"
    dbname = urlsplit(pg_url).path.strip("/")
    owner = write_config(tmp_path / "owner-c", pg_url, sim_server.url, agent_id="fleet-c")
    (tmp_path / "owner-c" / "data").mkdir()
    assert cli.main(["--config", str(owner), "init"]) == 0, capsys.readouterr().err
    pg_server.psql(f'CREATE ROLE "{newcomer}" LOGIN')
    pg_server.psql("GRANT UPDATE ON alerts TO PUBLIC", dbname)
    try:
        code = cli.main(["--config", str(owner), "init", "--grant", newcomer])
        err = capsys.readouterr().err
        assert code != 0
        assert "still holds UPDATE on alerts (through PUBLIC" in err and "nothing was granted" in err, err
        with psycopg.connect(pg_server.dsn(dbname), autocommit=True) as su:
            assert su.execute("SELECT count(*) FROM fleet_roles WHERE rolname = %s", [newcomer]).fetchone() == (0,)
            assert su.execute("SELECT has_table_privilege(%s, 'events', 'INSERT')", [newcomer]).fetchone() == (False,)
    finally:
        pg_server.psql("REVOKE UPDATE ON alerts FROM PUBLIC", dbname)
        with psycopg.connect(pg_server.dsn(dbname), autocommit=True) as su:
            su.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(newcomer)))
            su.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(newcomer)))


def old_grants(role: str) -> list[str]:
    """The GRANTs ``init --grant`` made before migration 004: UPDATE and DELETE on the read models too."""
    ident = sql.Identifier(role).as_string(None)
    return [f"GRANT USAGE ON SCHEMA public TO {ident}", f"GRANT SELECT ON _migrations TO {ident}",
            f"GRANT SELECT, INSERT ON events, events_fts TO {ident}",
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON {', '.join(pg.READ_MODEL_TABLES)} TO {ident}"]


def _old_schema(url: str, fleets: dict[str, int]) -> None:
    """The database as a fleet-agent from before the bindings left it: migrations 001 and 002 only, and
    ``fleets[agent_id]`` chained events of each fleet, written as that version wrote them (the fleet named in
    the session setting, its rows' agent_id from the column default)."""
    from agent.store.chain import COLS
    from agent.store.log import GENESIS, row_hash

    with psycopg.connect(url, autocommit=True) as c:
        c.execute("CREATE TABLE _migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
        for name, text in pg.migrations()[:2]:
            c.execute(text.replace("CREATE TABLE IF NOT EXISTS _migrations", "CREATE TABLE IF NOT EXISTS _unused"))
            c.execute("INSERT INTO _migrations VALUES (%s, 'before')", [name])
        for agent_id, n in fleets.items():
            c.execute("SELECT set_config('fleet_agent.agent_id', %s, false)", [agent_id])
            prev = GENESIS
            for seq in range(1, n + 1):
                payload = json.dumps({"text": f"{agent_id} note {seq}", "by": "alice"})
                row = (seq, f"id-{agent_id}-{seq}", f"2026-01-01T00:00:{seq:02d}.000000Z", "operator.note", 1,
                       "operator", None, payload, None, prev)
                prev = row_hash(*row)
                c.execute(f"INSERT INTO events ({COLS}) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)", [*row, prev])


def test_an_existing_single_role_database_keeps_working_after_the_upgrade(pg_server, pg_url, tmp_path):
    """A database written before the bindings, two fleets run by one role (the owner) plus a granted role:
    the upgrade binds every fleet with events to the owner and to every role that could append, sets each
    fleet's head from its events, and both roles go on appending where each chain left off; both chains
    verify. A role granted nothing before is bound to nothing. The owner then unbinds the shared role from
    one fleet: it can neither open that fleet's log nor take its leadership."""
    _old_schema(pg_url, {"fleet-a": 7, "fleet-b": 3})
    runner = f"old_runner_{uuid.uuid4().hex[:8]}"
    bystander = f"bystander_{uuid.uuid4().hex[:8]}"
    pg_server.psql(f'CREATE ROLE "{runner}" LOGIN; CREATE ROLE "{bystander}" LOGIN')
    dbname = urlsplit(pg_url).path.strip("/")
    try:
        with psycopg.connect(pg_url, autocommit=True) as c:  # the grants the old init --grant made
            for stmt in old_grants(runner):
                c.execute(stmt)
            c.execute(sql.SQL("GRANT SELECT ON events TO {}").format(sql.Identifier(bystander)))
        with EventLog(PgTarget(pg_url, "fleet-a", state_dir=tmp_path), create=False) as a:  # upgrades
            assert "003_fleet_roles" in pg.applied_migrations(a)
            assert a.last_seq() == 7
            a.append("operator.note", {"text": "after the upgrade", "by": "alice"}, "operator")
            assert a.last_seq() == 8 and a.verify().ok
        with EventLog(PgTarget(_url_as(pg_url, runner), "fleet-b", state_dir=tmp_path), create=False) as b:
            assert b.last_seq() == 3
            b.append("operator.note", {"text": "runner after the upgrade", "by": "bob"}, "operator")
            assert [e.seq for e in b.read()] == [1, 2, 3, 4] and b.verify().ok
        with psycopg.connect(pg_server.dsn(dbname), autocommit=True) as su:
            bound = su.execute("SELECT agent_id, rolname FROM fleet_roles ORDER BY 1, 2").fetchall()
        owner = urlsplit(pg_url).username
        assert sorted(bound) == sorted((f, r) for f in ("fleet-a", "fleet-b") for r in (owner, runner))
        with pytest.raises(LogError, match=f"role {bystander} is not bound to fleet 'fleet-a'"):
            EventLog(PgTarget(_url_as(pg_url, bystander), "fleet-a", state_dir=tmp_path), create=False, readonly=True)
        # The owner isolates the fleets: the shared role keeps fleet-b only.
        with psycopg.connect(pg_url, autocommit=True) as c:
            c.execute("SELECT fleet_agent_unbind('fleet-a', %s)", [runner])
        with pytest.raises(LogError, match=f"role {runner} is not bound to fleet 'fleet-a'"):
            EventLog(PgTarget(_url_as(pg_url, runner), "fleet-a", state_dir=tmp_path), create=False)
        lead = PgLeader(_url_as(pg_url, runner), "fleet-a", failover_seconds=30)
        try:
            with pytest.raises(LogError, match="may not hold the leadership of fleet 'fleet-a'"):
                lead.try_acquire()
        finally:
            lead.release()
    finally:
        with psycopg.connect(pg_server.dsn(dbname), autocommit=True) as su:
            for role in (runner, bystander):
                su.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", [role])
                su.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
                su.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_upgrade_to_004_takes_the_locking_privileges_and_the_role_writes_through_the_procedures(
        pg_server, pg_url, tmp_path, monkeypatch):
    """A database at migration 003, fleet A run by a role granted as init --grant did then (UPDATE and DELETE
    on the read models, so LOCK TABLE in every mode). The role's own open is refused, naming the migration
    only the owner may apply; while another session holds the migration key the owner's open gives up,
    saying so, and changes nothing; then it applies 004: the role keeps SELECT and
    INSERT, may lock no shared table beyond ROW EXCLUSIVE, and its daemon's writes (a pin, its unpinning, a
    memory written twice and deleted, a rebuild of every read model) reach the read models through the
    procedures, which match a rebuild from the log; the chain verifies."""
    _old_schema(pg_url, {"fleet-a": 4})
    with psycopg.connect(pg_url, autocommit=True) as c:  # a fleet-agent of migration 003 upgraded it
        name, text = pg.migrations()[2]
        c.execute(text)
        c.execute("INSERT INTO _migrations VALUES (%s, 'before')", [name])
    role = f"runner_{uuid.uuid4().hex[:10]}"
    pg_server.psql(f'CREATE ROLE "{role}" LOGIN')
    dbname = urlsplit(pg_url).path.strip("/")
    role_url = _url_as(pg_url, role)
    try:
        with psycopg.connect(pg_url, autocommit=True) as c:  # the grants and binding init --grant made then
            for stmt in old_grants(role):
                c.execute(stmt)
            c.execute("SELECT fleet_agent_bind('fleet-a', %s)", [role])
        with psycopg.connect(role_url, autocommit=True) as c:
            c.execute("BEGIN")
            c.execute("LOCK TABLE alerts IN ACCESS EXCLUSIVE MODE NOWAIT")  # what 004 takes away
            c.execute("ROLLBACK")

        with pytest.raises(LogError, match=f"needs migration 004_read_model_procedures(, [0-9a-z_]+)*, which only the "
                                            f"role that owns its tables may apply, and {role} does not"):
            EventLog(PgTarget(role_url, "fleet-a", state_dir=tmp_path), create=False)

        monkeypatch.setattr(pg, "MIGRATE_LOCK_TIMEOUT_S", 1)
        with psycopg.connect(pg_url, autocommit=True) as holder:
            holder.execute("SELECT pg_advisory_lock(%s, 0)", [pg.MIGRATE_LOCK])
            with pytest.raises(LogError, match="migration 004_read_model_procedures waited 1 s for a lock"):
                EventLog(PgTarget(pg_url, "fleet-a", state_dir=tmp_path), create=False)
        with psycopg.connect(pg_url, autocommit=True) as c:
            assert c.execute("SELECT count(*) FROM _migrations WHERE name LIKE '004%'").fetchone() == (0,)

        with EventLog(PgTarget(pg_url, "fleet-a", state_dir=tmp_path), create=False) as owner:  # upgrades
            assert "004_read_model_procedures" in pg.applied_migrations(owner)
            assert pg.locking_privileges(pg._raw(owner), role) == []
            assert pg._missing_grants(pg._raw(owner), role) == []
        with psycopg.connect(role_url, autocommit=True) as c:
            c.execute("BEGIN")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                c.execute("LOCK TABLE alerts IN SHARE MODE NOWAIT")
            c.execute("ROLLBACK")
        with EventLog(PgTarget(role_url, "fleet-a", state_dir=tmp_path), create=False) as log:
            pin = log.append("operator.note", {"text": "keep one H100", "by": "bob", "pin": True}, "operator")
            log.append("directive.unpinned", {"directive_id": pin.seq, "by": "bob"}, "operator")
            for text in ("first", "second"):
                log.append("memory.written", {"key": "plan", "text": text}, "model")
            log.append("memory.written", {"key": "gone", "text": "soon"}, "model")
            log.append("memory.deleted", {"key": "gone"}, "model")
            assert log.rebuild_check() == [] and log.verify().ok
            assert log.conn.run("SELECT active FROM directives WHERE id = %s", [pin.seq]).fetchall() == [(0,)]
            assert log.conn.run("SELECT key, text FROM memory").fetchall() == [("plan", "second")]
            log.rebuild()  # every read model emptied (fleet_agent_rm_cleared) and replayed, by the role
            assert log.rebuild_check() == []
            assert log.conn.run("SELECT key, text FROM memory").fetchall() == [("plan", "second")]
    finally:
        with psycopg.connect(pg_server.dsn(dbname), autocommit=True) as su:
            su.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", [role])
            su.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            su.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_each_read_model_write_is_a_call_of_a_procedure_the_schema_makes_with_its_parameters():
    """Every write a fleet's role may no longer make itself (UPDATE, DELETE, an upsert) is sent as the call of a
    procedure migration 004 creates, taking the statement's parameters in number; one with no procedure is
    refused before it reaches the server."""
    text = dict(pg.migrations())["004_read_model_procedures"]
    for statement, call in pg.READ_MODEL_CALLS.items():
        name = call.removeprefix("CALL fleet_agent_rm_").split("(", 1)[0]
        assert re.search(rf"\['{name}\(", text), call
        assert statement.count("%s") == call.count("%s"), (statement, call)
        assert pg._as_sent(statement) == call
    assert pg._as_sent("UPDATE fleets SET head_seq = %s, head_hash = %s WHERE agent_id = %s").startswith("UPDATE")
    for unmapped in ("UPDATE alerts SET title = %s", "DELETE FROM memory WHERE seq = %s",
                     "INSERT INTO memory (key) VALUES (%s) ON CONFLICT(agent_id, key) DO UPDATE SET key = 'x'"):
        with pytest.raises(LogError, match="no procedure writes this read-model statement"):
            pg._as_sent(unmapped)
