"""The PostgreSQL backend: connect, schema and migrations, and the connection the store reads and writes through.

Imported only when ``storage.url`` names a PostgreSQL database (``EventLog`` given a ``PgTarget``), so
SQLite users never load psycopg. ``PgConnection`` wraps a psycopg 3 connection. The event log's recorder
(agent/store/pg_recorder.py), the read models (agent/store/readmodels.py) and ``Store``
(agent/store/queries.py) write their statements in PostgreSQL's dialect (agent/store/dialect.py) and run
them as they are (``run``, ``run_many``).

Many fleets share one database: each connection names its fleet (``SET fleet_agent.agent_id``), every
table's ``agent_id`` defaults to it and row-level security (FORCE) shows the connection only that fleet's
rows (agent/schema_pg.sql). A role that bypasses row-level security (a superuser, BYPASSRLS) would see
every fleet's rows, so it is refused. An append transaction (``begin_append``) holds a transaction-scoped
advisory lock on the fleet, so appends from several processes and hosts form one linear chain.

Advisory lock keys (two-int form, class first): ``APPEND_LOCK`` (per fleet, for each append transaction),
``MIGRATE_LOCK`` (while migrating); the daemon's leadership of a fleet is agent/store/pglock.py's
``LOCK_CLASS`` (a session lock, held while it is active).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from importlib import resources
from typing import Any

import psycopg
from psycopg import pq

from agent.config import PgTarget
from agent.errors import LogError
from agent.secrets import scrub

APPEND_LOCK = 0x66610001
MIGRATE_LOCK = 0x66610000
MIN_SERVER = 120000  # generated columns, FORCE row-level security, websearch text search
CONNECT_TIMEOUT_S = 10
SETTING = "fleet_agent.agent_id"

# The tables every fleet's rows live in (all carry agent_id and the row-level security policy).
FLEET_TABLES = ("events", "events_fts", "alerts", "memory", "directives", "instances", "intents", "knowledge",
                "silences", "instance_states", "observed_runs")
# What the agent's role needs, table by table: the log only grows; read models change with it.
GRANTS = {"events": "SELECT, INSERT", "events_fts": "SELECT, INSERT", "_migrations": "SELECT"}
READ_MODEL_GRANT = "SELECT, INSERT, UPDATE, DELETE"

Error = psycopg.Error


def _schema_text() -> str:
    return resources.files("agent").joinpath("schema_pg.sql").read_text(encoding="utf-8")


def migrations() -> list[tuple[str, str]]:
    """The ordered (name, sql) migrations declared in schema_pg.sql."""
    parts = re.split(r"^-- migration: (\S+)\s*$", _schema_text(), flags=re.M)
    return [(parts[i], parts[i + 1]) for i in range(1, len(parts), 2)]


def _fail(target: PgTarget, what: str, e: BaseException) -> LogError:
    msg = scrub(str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__)
    return LogError(f"{what} {target.url}: {msg}")


class PgConnection:
    """A psycopg connection in autocommit mode: ``run`` and ``run_many`` send PostgreSQL as it is written."""

    dialect = "postgresql"

    def __init__(self, raw: psycopg.Connection[Any], target: PgTarget) -> None:
        self.raw = raw
        self.target = target
        self._pipe: Any = None
        self._pipeline: Any = None  # the open pipeline itself (``_pipe`` is its context manager)

    def run(self, sql: str, params: Any = ()) -> psycopg.Cursor[Any]:
        """SQL written for PostgreSQL (``%s`` placeholders), as it is."""
        return self.raw.execute(sql, list(params))

    def run_many(self, sql: str, rows: Iterable[Any]) -> psycopg.Cursor[Any]:
        """One statement for many rows (inside a transaction's pipeline, sent without a wait per row)."""
        cur = self.raw.cursor()
        cur.executemany(sql, [list(r) for r in rows])
        return cur

    def begin_append(self) -> None:
        """BEGIN, the fleet's append lock (transaction-scoped, so appends from several processes and hosts
        form one linear chain), then a pipeline for the transaction's statements."""
        self.raw.execute("BEGIN")
        self.raw.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", [APPEND_LOCK, self.target.agent_id])
        self._pipe = self.raw.pipeline()
        self._pipeline = self._pipe.__enter__()

    def end_pipeline(self, *, commit: bool) -> None:
        """Close the append's pipeline (its errors raise only when about to commit)."""
        if self._pipe is None:
            return
        pipe, self._pipe = self._pipe, None
        try:
            pipe.__exit__(None, None, None)
        except psycopg.Error:
            if commit:
                raise

    def sync(self) -> None:
        """Send what the open append's pipeline holds and wait for the server: from then on the session is
        idle in its transaction, so ``idle_in_transaction_session_timeout`` ends it if the client stalls."""
        if self._pipe is not None:
            self._pipeline.sync()

    @property
    def in_transaction(self) -> bool:
        return self.raw.info.transaction_status != pq.TransactionStatus.IDLE

    @property
    def closed(self) -> bool:
        return bool(self.raw.closed)

    def close(self) -> None:
        self.raw.close()


def raw_connect(target: PgTarget) -> psycopg.Connection[Any]:
    """A plain autocommit connection to the target's database (no fleet named, nothing checked)."""
    kw: dict[str, Any] = {"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_S,
                          "application_name": f"fleet-agent {target.agent_id}"[:63]}
    if target.password is not None:
        kw["password"] = target.password.reveal()
    try:
        return psycopg.connect(target.url, **kw)
    except psycopg.Error as e:
        raise _fail(target, "cannot connect to", e) from None


def connect(target: PgTarget, *, readonly: bool = False, create: bool = False) -> PgConnection:
    """A connection naming the target's fleet, its schema checked and migrated (unless ``readonly``).

    Without ``create`` a database that holds no fleet-agent schema is refused (``fleet-agent init`` makes
    it); a role that would see other fleets' rows (superuser, BYPASSRLS) is always refused."""
    raw = raw_connect(target)
    try:
        _check_role(raw, target)
        raw.execute("SELECT set_config(%s, %s, false)", [SETTING, target.agent_id])
        if readonly:
            raw.execute("SET default_transaction_read_only = on")
        if raw.info.server_version < MIN_SERVER:
            raise LogError(f"{target.url}: PostgreSQL {raw.info.server_version // 10000} is too old; "
                           "fleet-agent needs PostgreSQL 12 or newer")
        if not create and not schema_present(raw):
            raise LogError(f"{target.url} holds no fleet-agent schema; run 'fleet-agent init' with this "
                           "storage.url (as a role that may create tables), or check the database name")
        if not readonly:
            apply_migrations(raw, target)
    except psycopg.Error as e:
        raw.close()
        raise _fail(target, "cannot open the event log in", e) from None
    except BaseException:
        raw.close()
        raise
    return PgConnection(raw, target)


def _check_role(raw: psycopg.Connection[Any], target: PgTarget) -> None:
    row = raw.execute("SELECT current_user, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user"
                      ).fetchone()
    if row is not None and (row[1] or row[2]):
        why = "a superuser" if row[1] else "allowed to bypass row-level security (BYPASSRLS)"
        raise LogError(f"{target.url}: the role {row[0]} is {why}, so it would see every fleet's rows; connect "
                       "as a role without those rights (README: Running more than one host)")


def schema_present(raw: psycopg.Connection[Any]) -> bool:
    row = raw.execute("SELECT to_regclass('_migrations') IS NOT NULL AND to_regclass('events') IS NOT NULL"
                      ).fetchone()
    return bool(row and row[0])


def apply_migrations(raw: psycopg.Connection[Any], target: PgTarget) -> list[str]:
    """Apply every migration not yet recorded, each in its own transaction under the migration lock."""
    known = [n for n, _ in migrations()]
    done = _applied(raw)
    applied: list[str] = []
    for name, sql in migrations():
        if name in done:
            continue
        raw.execute("BEGIN")
        try:
            raw.execute("SELECT pg_advisory_xact_lock(%s, 0)", [MIGRATE_LOCK])
            if name not in _applied(raw):  # another process may have just applied it
                raw.execute(sql)
                raw.execute("INSERT INTO _migrations (name, applied_at) VALUES (%s, "
                            "to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'))",
                            [name])
                applied.append(name)
            raw.execute("COMMIT")
        except BaseException:
            if raw.info.transaction_status != pq.TransactionStatus.IDLE:
                raw.execute("ROLLBACK")
            raise
    newer = sorted(_applied(raw) - set(known))
    if newer:
        raise LogError(f"{target.url} has migrations this version does not know ({', '.join(newer)}); "
                       "it was written by a newer fleet-agent: upgrade fleet-agent")
    return applied


def _applied(raw: psycopg.Connection[Any]) -> set[str]:
    if not raw.execute("SELECT to_regclass('_migrations') IS NOT NULL").fetchone()[0]:  # type: ignore[index]
        return set()
    return {r[0] for r in raw.execute("SELECT name FROM _migrations")}


def _raw(log: Any) -> psycopg.Connection[Any]:
    """The psycopg connection of an EventLog on PostgreSQL (a LogError on a SQLite one)."""
    conn = getattr(log, "conn", None)
    if not isinstance(conn, PgConnection):
        raise LogError(f"{getattr(log, 'path', 'the log')} is not a PostgreSQL log")
    return conn.raw


def applied_migrations(log: Any) -> list[str]:
    """The migrations recorded in the log's database, sorted."""
    return sorted(_applied(_raw(log)))


def grant_statements(role: str) -> list[str]:
    """The GRANTs that let ``role`` run a fleet: read and append the log, keep the read models."""
    ident = '"' + role.replace('"', '""') + '"'
    out = [f"GRANT USAGE ON SCHEMA public TO {ident};"]
    for t in ("_migrations", *FLEET_TABLES):
        out.append(f"GRANT {GRANTS.get(t, READ_MODEL_GRANT)} ON {t} TO {ident};")
    return out


def apply_grants(log: Any, role: str) -> list[str]:
    """GRANT ``role`` what a fleet needs (``grant_statements``), as the tables' owner; returns the statements."""
    raw = _raw(log)
    if not raw.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role]).fetchone():
        raise LogError(f"init --grant: no role {role!r} in the server; create it first (CREATE ROLE {role} LOGIN)")
    stmts = grant_statements(role)
    try:
        for s in stmts:
            raw.execute(s)
    except psycopg.Error as e:
        raise LogError(f"init --grant {role}: {scrub(str(e)).strip()}; run it as the role that owns the tables "
                       "(the one that ran init)") from None
    return stmts


def privileges(log: Any) -> dict[str, set[str]]:
    """table -> the privileges the connected role holds on it (SELECT, INSERT, UPDATE, DELETE, TRUNCATE)."""
    out: dict[str, set[str]] = {}
    for t in ("_migrations", *FLEET_TABLES):
        row = _raw(log).execute(
            "SELECT has_table_privilege(current_user, %s, 'SELECT'), has_table_privilege(current_user, %s, 'INSERT'),"
            " has_table_privilege(current_user, %s, 'UPDATE'), has_table_privilege(current_user, %s, 'DELETE'),"
            " has_table_privilege(current_user, %s, 'TRUNCATE')", [t] * 5).fetchone()
        names = ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE")
        out[t] = {n for n, ok in zip(names, row or (), strict=False) if ok}
    return out


def server_version(log: Any) -> str:
    row = _raw(log).execute("SHOW server_version").fetchone()
    return str(row[0]) if row else "?"
