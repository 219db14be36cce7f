"""Many fleets in one PostgreSQL database, as a shared server holds them, for the plan test and bench/pg.py.

``copy_fleet`` copies one built fleet's rows to other fleets (made and bound already), as the superuser
past row-level security, then runs ANALYZE and turns autovacuum off on every fleet table: whatever is
appended afterwards (the newest fleet) arrives after the last ANALYZE and stays unseen by the planner.
The copies are sound logs of their own (a row's hash covers no agent_id).
"""

from __future__ import annotations

from urllib.parse import urlsplit

import psycopg
from psycopg import sql

from agent.store import pg
from tests.pgserver import PgServer


def copy_fleet(srv: PgServer, url: str, source: str, copies: list[str]) -> None:
    """Copy every row of fleet ``source`` in the database ``url`` names to each fleet of ``copies``, heads
    included; then ANALYZE, and no autovacuum from then on."""
    with psycopg.connect(srv.dsn(urlsplit(url).path.strip("/")), autocommit=True) as su:
        for t in pg.FLEET_TABLES:
            cols = [str(r[0]) for r in su.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = %s AND is_generated = 'NEVER'"
                " AND column_name <> 'agent_id' ORDER BY ordinal_position", [t])]
            names = sql.SQL(", ").join(map(sql.Identifier, cols))
            for fleet in copies:
                su.execute(sql.SQL("INSERT INTO {t} (agent_id, {c}) SELECT %s, {c} FROM {t} WHERE agent_id = %s")
                           .format(t=sql.Identifier(t), c=names), [fleet, source])
        heads = su.execute("SELECT to_regclass('fleets') IS NOT NULL").fetchone() == (True,)  # (not before 003)
        if heads:
            su.execute("UPDATE fleets SET (head_seq, head_hash) = (SELECT head_seq, head_hash FROM fleets "
                       "WHERE agent_id = %s) WHERE agent_id = ANY(%s)", [source, copies])
        su.execute("ANALYZE")
        for t in (*pg.FLEET_TABLES, *(["fleets"] if heads else [])):
            su.execute(sql.SQL("ALTER TABLE {} SET (autovacuum_enabled = false)").format(sql.Identifier(t)))


def analyzed(srv: PgServer, url: str, agent_id: str) -> bool:
    """Whether the planner's statistics on the events table know fleet ``agent_id`` (its most common values)."""
    with psycopg.connect(srv.dsn(urlsplit(url).path.strip("/")), autocommit=True) as su:
        row = su.execute("SELECT most_common_vals::text FROM pg_stats WHERE tablename = 'events' "
                         "AND attname = 'agent_id'").fetchone()
    return row is not None and row[0] is not None and agent_id in str(row[0])


def superuser_fleet(srv: PgServer, dbname: str, agent_id: str) -> None:
    """Fleet ``agent_id`` made in database ``dbname`` for the superuser, schema and all: so tests that drive
    the leadership lock as the superuser (over TCP with its password, say) find the fleet's leadership
    table. fleet-agent itself refuses to run a fleet as a superuser; the lock alone does not check."""
    from agent.config import PgTarget

    with psycopg.connect(srv.dsn(dbname), autocommit=True) as su:
        pg.apply_migrations(su, PgTarget(srv.dsn(dbname), agent_id))
        su.execute("SELECT fleet_agent_bind(%s, current_user)", [agent_id])
