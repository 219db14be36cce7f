"""The throwaway PostgreSQL server the PostgreSQL tests run on."""

from __future__ import annotations

import psycopg
import pytest

from tests.pgserver import PgServer


def test_server_takes_socket_and_password_connections(pg_server: PgServer, pg_dsn: str) -> None:
    """A fresh database answers over the trusted socket; TCP needs the password and refuses without it."""
    with psycopg.connect(pg_dsn) as c:
        assert c.execute("SELECT current_database()").fetchone()[0].startswith("t_")
    with psycopg.connect(pg_server.tcp_dsn(with_password=True)) as c:
        assert c.execute("SELECT version()").fetchone()[0].startswith("PostgreSQL")
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(pg_server.tcp_dsn(with_password=False), connect_timeout=5).close()


def test_a_database_given_back_is_empty_for_the_next_test(pg_server: PgServer, tmp_path) -> None:
    """The pool hands the same database to the next test only after the reset: the fleet's tables (whose
    triggers refuse DELETE and TRUNCATE), a schema and grants a test made, its settings and its role are
    gone, and the next lease's role owns it."""
    from agent.config import PgTarget
    from agent.store.log import EventLog
    from tests.pgserver import fleet_database

    with fleet_database(pg_server) as url:
        with EventLog(PgTarget(url, "fleet-1", state_dir=tmp_path), create=True) as log:
            log.append("operator.note", {"text": "left behind", "by": "alice"}, source="operator")
        name = url.split("/")[3].split("?")[0]
        first_role = url.split("//")[1].split("@")[0]
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("CREATE SCHEMA extra")
            c.execute(f'GRANT CONNECT ON DATABASE "{name}" TO PUBLIC')
            c.execute(f'ALTER DATABASE "{name}" SET work_mem = \'8MB\'')
        lingering = psycopg.connect(url)  # a session the test left open: ended by the reset
    with fleet_database(pg_server) as again:
        assert again.split("/")[3].split("?")[0] == name
        role = again.split("//")[1].split("@")[0]
        with psycopg.connect(again) as c:
            assert c.execute("SELECT nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg%' "
                             "AND nspname <> 'information_schema'").fetchall() == [("public",)]
            assert c.execute("SELECT count(*) FROM pg_class WHERE relnamespace = 'public'::regnamespace"
                             ).fetchone() == (0,)
            assert c.execute("SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = current_database()"
                             ).fetchone() == (role,)
            assert c.execute("SELECT current_setting('work_mem')").fetchone() != ("8MB",)
            assert c.execute("SELECT count(*) FROM pg_roles WHERE rolname = %s", (first_role,)).fetchone() == (0,)
            c.execute("CREATE TABLE mine (x int)")  # the new owner may create in public
    assert lingering.closed or lingering.broken or _dead(lingering)
    lingering.close()


def _dead(conn: psycopg.Connection) -> bool:
    try:
        conn.execute("SELECT 1")
    except psycopg.OperationalError:
        return True
    return False
