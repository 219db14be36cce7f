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
