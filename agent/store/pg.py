"""The PostgreSQL backend: connect, schema and migrations, and the connection the store reads and writes through.

Imported only when ``storage.url`` names a PostgreSQL database (``EventLog`` given a ``PgTarget``), so
SQLite users never load psycopg. ``PgConnection`` wraps a psycopg 3 connection. The event log's recorder
(agent/store/pg_recorder.py), the read models (agent/store/readmodels.py) and ``Store``
(agent/store/queries.py) write their statements in PostgreSQL's dialect (agent/store/dialect.py) and run
them as they are (``run``, ``run_many``).

Many fleets share one database, kept apart by the server: each fleet is bound to the database roles that
may run it (``fleet_roles``, which only the schema's owner writes; ``init --grant ROLE`` binds), and
row-level security (FORCE) shows a session the rows of the fleet it names (``SET fleet_agent.agent_id``)
only when its own role is bound to that fleet, so a role that names another fleet sees and writes nothing
of it. A connection whose role is not bound to its fleet is refused as it opens (the owner binds itself
to a fleet it creates). A role that bypasses row-level security (a superuser, BYPASSRLS) would see every
fleet's rows, so it is refused. The role checked is the one the session logged in as (``session_user``).

The tables are shared by every fleet, and PostgreSQL lets a role that may UPDATE or DELETE a table LOCK it
in any mode, which would make every fleet's writes wait: a fleet's role holds SELECT and INSERT only, and
the read models' other writes are sent as calls of procedures (``READ_MODEL_CALLS``) that run as the owner
for the fleet the session names, once they have checked that its role is bound to it.

An append transaction (``begin_append``) locks the fleet's row in ``fleets``, which holds the fleet's head
(last seq and hash) and is updated in the same transaction: appends from several processes and hosts form
one linear chain, and no role of another fleet can see the row, let alone lock it. ``MIGRATE_LOCK`` (an
advisory key) is held while migrating, waited for at most ``MIGRATE_LOCK_TIMEOUT_S`` like any lock a
migration takes; the daemon's leadership of a fleet is agent/store/pglock.py's
table lock.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Iterator
from importlib import resources
from typing import Any

import psycopg
from psycopg import pq

from agent.config import PgTarget
from agent.errors import LogError
from agent.secrets import scrub

MIGRATE_LOCK = 0x66610000
MIGRATE_LOCK_TIMEOUT_S = 5
MIN_SERVER = 120000  # generated columns, FORCE row-level security, websearch text search
CONNECT_TIMEOUT_S = 10
SETTING = "fleet_agent.agent_id"

# The tables every fleet's rows live in (all carry agent_id and the row-level security policy).
FLEET_TABLES = ("events", "events_fts", "alerts", "memory", "directives", "instances", "intents", "knowledge",
                "silences", "instance_states", "observed_runs")
# What the agent's role needs, table by table: the log only grows; read models change with it; the head
# row (``fleets``) and the leadership table are granted by the binding itself (fleet_agent_bind).
GRANTS = {"events": "SELECT, INSERT", "events_fts": "SELECT, INSERT", "_migrations": "SELECT"}
HEAD_FOR_APPEND = "SELECT head_seq, head_hash FROM fleets WHERE agent_id = %s FOR UPDATE"
# SELECT and INSERT only: a role that may UPDATE or DELETE a table may also LOCK it in any mode, and every
# fleet's writes to that shared table would wait for it. The read models' other writes are procedures.
READ_MODEL_GRANT = "SELECT, INSERT"
READ_MODEL_TABLES = ("alerts", "memory", "directives", "instances", "intents", "knowledge", "silences",
                     "instance_states", "observed_runs")

# The read models' writes other than a plain INSERT (agent/store/readmodels.py, as written for PostgreSQL),
# each sent as the call of the procedure that makes it (schema_pg.sql 004_read_model_procedures): the
# procedure runs as the schema's owner for the fleet the session names, once it has checked that the
# session's role is bound to that fleet. The parameters are the statement's, in its order.
READ_MODEL_CALLS = {
    "UPDATE alerts SET count = %s, last_seq = %s, last_ts = %s WHERE id = %s":
        "CALL fleet_agent_rm_alert_repeated(%s, %s, %s, %s)",
    "UPDATE alerts SET status = 'acked', acked_by = %s, ack_note = %s, closed_seq = %s WHERE id = %s":
        "CALL fleet_agent_rm_alert_acked(%s, %s, %s, %s)",
    "UPDATE alerts SET status = 'resolved', closed_seq = %s WHERE id = %s AND status IN ('open', 'acked')":
        "CALL fleet_agent_rm_alert_resolved(%s, %s)",
    "UPDATE alerts SET title = %s WHERE id = %s": "CALL fleet_agent_rm_alert_retitled(%s, %s)",
    "UPDATE alerts SET severity = %s WHERE id = %s": "CALL fleet_agent_rm_alert_severity(%s, %s)",
    "UPDATE alerts SET notified_ts = %s, notified_reason = %s WHERE id = %s":
        "CALL fleet_agent_rm_alert_notified(%s, %s, %s)",
    "UPDATE silences SET lifted_seq = %s WHERE id = %s AND lifted_seq IS NULL":
        "CALL fleet_agent_rm_silence_lifted(%s, %s)",
    "INSERT INTO memory (key, text, seq, ts) VALUES (%s,%s,%s,%s) ON CONFLICT(agent_id, key) DO UPDATE SET"
    " text = excluded.text, seq = excluded.seq, ts = excluded.ts": "CALL fleet_agent_rm_memory_written(%s, %s, %s, %s)",
    "DELETE FROM memory WHERE key = %s": "CALL fleet_agent_rm_memory_deleted(%s)",
    "UPDATE directives SET active = 0, unpinned_seq = %s WHERE id = %s AND active = 1":
        "CALL fleet_agent_rm_directive_unpinned(%s, %s)",
    "UPDATE intents SET result_seq = %s, ok = %s WHERE call_id = %s AND result_seq IS NULL":
        "CALL fleet_agent_rm_intent_result(%s, %s, %s)",
    "UPDATE intents SET ok = 1 WHERE tool = 'rent_instance' AND idem_key = %s AND result_seq IS NOT NULL"
    " AND ok IS NULL": "CALL fleet_agent_rm_intent_adopted(%s)",
    "UPDATE intents SET ok = %s WHERE call_id = %s AND ok IS NULL": "CALL fleet_agent_rm_intent_settled(%s, %s)",
    "UPDATE instances SET status = 'destroyed', destroyed_seq = %s WHERE instance_id = %s AND status = 'active'":
        "CALL fleet_agent_rm_instance_destroyed(%s, %s)",
    "UPDATE instance_states SET intended = %s, seen_seq = %s WHERE instance_id = %s":
        "CALL fleet_agent_rm_state_seen(%s, %s, %s)",
    "INSERT INTO instance_states (instance_id, status, intended, since, seen_seq) VALUES (%s,%s,%s,%s,%s)"
    " ON CONFLICT(agent_id, instance_id) DO UPDATE SET status = excluded.status, intended = excluded.intended,"
    " since = excluded.since, seen_seq = excluded.seen_seq": "CALL fleet_agent_rm_state_changed(%s, %s, %s, %s, %s)",
    "DELETE FROM instance_states WHERE seen_seq <> %s": "CALL fleet_agent_rm_states_unseen(%s)",
    "UPDATE observed_runs SET last_seq = %s, last_ts = %s WHERE instance_id = %s AND first_seq = %s":
        "CALL fleet_agent_rm_run_extended(%s, %s, %s, %s)",
    # readmodels.clear, before a rebuild
    **{f"DELETE FROM {t}": f"CALL fleet_agent_rm_cleared('{t}')" for t in READ_MODEL_TABLES},
}
READ_MODEL_PROCEDURES = sorted({c.split("(", 1)[0].removeprefix("CALL ") for c in READ_MODEL_CALLS.values()})


def _as_sent(sql: str) -> str:
    """``sql`` as the server gets it: a read model's write other than an INSERT as its procedure's call. One
    with no procedure is refused here, for every role: a bound role may not run it (nor should the owner)."""
    call = READ_MODEL_CALLS.get(sql)
    if call is not None:
        return call
    words = [*sql.split(None, 3), "", "", ""]
    if ((words[0] == "UPDATE" and words[1] in READ_MODEL_TABLES)
            or (words[0] == "DELETE" and words[2] in READ_MODEL_TABLES)
            or (words[0] == "INSERT" and " DO UPDATE " in sql)):
        raise LogError(f"no procedure writes this read-model statement on PostgreSQL: {sql[:200]}; add it to "
                       "schema_pg.sql and to agent/store/pg.py READ_MODEL_CALLS")
    return sql

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
        self.trace: list[tuple[str, list[Any]]] | None = None  # agent/store/plans.py records statements here

    def run(self, sql: str, params: Any = ()) -> psycopg.Cursor[Any]:
        """SQL written for PostgreSQL (``%s`` placeholders), as it is (a read model's write other than an
        INSERT as the call of its procedure, ``READ_MODEL_CALLS``)."""
        sql = _as_sent(sql)
        if self.trace is not None:
            self.trace.append((sql, list(params)))
        return self.raw.execute(sql, list(params))

    def run_many(self, sql: str, rows: Iterable[Any]) -> psycopg.Cursor[Any]:
        """One statement for many rows (inside a transaction's pipeline, sent without a wait per row)."""
        rows = [list(r) for r in rows]
        sql = _as_sent(sql)
        if self.trace is not None and rows:
            self.trace.append((sql, rows[0]))
        cur = self.raw.cursor()
        cur.executemany(sql, rows)
        return cur

    def begin_append(self) -> tuple[int, str | None]:
        """BEGIN, a lock on the fleet's head row (held to the transaction's end, so appends from several
        processes and hosts form one linear chain), then a pipeline for the transaction's statements.
        Returns the head (last seq, its hash) as the lock found it."""
        self.raw.execute("BEGIN")
        try:
            if self.trace is not None:
                self.trace.append((HEAD_FOR_APPEND, [self.target.agent_id]))
            row = self.raw.execute(HEAD_FOR_APPEND, [self.target.agent_id]).fetchone()
        except BaseException:
            if not self.raw.closed and self.in_transaction:
                with contextlib.suppress(psycopg.Error):
                    self.raw.execute("ROLLBACK")
            raise
        if row is None:
            self.raw.execute("ROLLBACK")
            raise LogError(_unbound(self.target, self.raw))
        self._pipe = self.raw.pipeline()
        self._pipeline = self._pipe.__enter__()
        return int(row[0]), row[1]

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
        _check_binding(raw, target, create=create)
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


def _current_role(raw: psycopg.Connection[Any]) -> str:
    return str(raw.execute("SELECT current_user").fetchone()[0])  # type: ignore[index]


def owns_schema(raw: psycopg.Connection[Any]) -> bool:
    """Whether the connected role owns the bindings (may bind a fleet to a role)."""
    return _owns(raw, "fleet_roles")


def _owns(raw: psycopg.Connection[Any], table: str) -> bool:
    row = raw.execute("SELECT pg_has_role(current_user, c.relowner, 'USAGE') FROM pg_class c "
                      "WHERE c.oid = to_regclass(%s)", [table]).fetchone()
    return bool(row and row[0])


def is_bound(raw: psycopg.Connection[Any], agent_id: str) -> bool:
    """Whether the connected role is bound to fleet ``agent_id`` (a role reads only its own bindings)."""
    row = raw.execute("SELECT EXISTS (SELECT 1 FROM fleet_roles WHERE agent_id = %s AND rolname = current_user)",
                      [agent_id]).fetchone()
    return bool(row and row[0])


def _unbound(target: PgTarget, raw: psycopg.Connection[Any]) -> str:
    role = _current_role(raw)
    return (f"{target.url}: the role {role} is not bound to fleet {target.agent_id!r}, so the server shows it none "
            f"of that fleet's rows; check agent_id in the config, or have the schema's owner run "
            f"'fleet-agent --config OWNER_CONFIG init --grant {role}' with agent_id: {target.agent_id}")


def _check_binding(raw: psycopg.Connection[Any], target: PgTarget, *, create: bool) -> None:
    """Refuse a role not bound to the target's fleet; with ``create``, the owner binds itself to it."""
    if not raw.execute("SELECT to_regclass('fleet_roles') IS NOT NULL").fetchone()[0]:  # type: ignore[index]
        return  # a schema from before the bindings, opened read-only: its policies are as they were
    if is_bound(raw, target.agent_id):
        return
    if create and owns_schema(raw):
        bind(raw, target.agent_id, _current_role(raw))
        return
    raise LogError(_unbound(target, raw))


def bind(raw: psycopg.Connection[Any], agent_id: str, role: str) -> None:
    """Bind fleet ``agent_id`` to ``role`` (as the schema's owner): its rows, head row and leadership table."""
    raw.execute("SELECT fleet_agent_bind(%s, %s)", [agent_id, role])


def bindings(raw: psycopg.Connection[Any], role: str) -> list[str]:
    """The fleets ``role`` is bound to (as the owner sees them)."""
    return [str(r[0]) for r in raw.execute("SELECT agent_id FROM fleet_roles WHERE rolname = %s ORDER BY agent_id",
                                           [role])]


def schema_present(raw: psycopg.Connection[Any]) -> bool:
    row = raw.execute("SELECT to_regclass('_migrations') IS NOT NULL AND to_regclass('events') IS NOT NULL"
                      ).fetchone()
    return bool(row and row[0])


def apply_migrations(raw: psycopg.Connection[Any], target: PgTarget) -> list[str]:
    """Apply every migration not yet recorded, each in its own transaction under the migration lock."""
    known = [n for n, _ in migrations()]
    done = _applied(raw)
    applied: list[str] = []
    pending = [n for n in known if n not in done]
    if done and pending and not _owns(raw, "_migrations"):
        raise LogError(f"{target.url}: the schema needs migration {', '.join(pending)}, which only the role that "
                       f"owns its tables may apply, and {_current_role(raw)} does not; run any command once with "
                       "the owner's config (fleet-agent --config OWNER_CONFIG log verify), then start this one again")
    for name, sql in migrations():
        if name in done:
            continue
        raw.execute("BEGIN")
        try:
            # A migration waits at most this long for a lock (the migration key, a table another session
            # reads): a session that holds one keeps the schema as it is, and this one says so.
            raw.execute(f"SET LOCAL lock_timeout = '{MIGRATE_LOCK_TIMEOUT_S}s'")
            raw.execute("SELECT pg_advisory_xact_lock(%s, 0)", [MIGRATE_LOCK])
            if name not in _applied(raw):  # another process may have just applied it
                raw.execute(sql)
                raw.execute("INSERT INTO _migrations (name, applied_at) VALUES (%s, "
                            "to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'))",
                            [name])
                applied.append(name)
            raw.execute("COMMIT")
        except psycopg.errors.LockNotAvailable:
            raw.execute("ROLLBACK")
            raise LogError(f"{target.url}: migration {name} waited {MIGRATE_LOCK_TIMEOUT_S} s for a lock another "
                           "session holds (a table it reads, or the migration key); nothing was changed. Run it "
                           "again, or find the session in pg_locks and pg_stat_activity") from None
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
    out += [f"GRANT EXECUTE ON PROCEDURE {p} TO {ident};" for p in READ_MODEL_PROCEDURES]
    return out


# What lets a role LOCK a table in a mode above ROW EXCLUSIVE (PostgreSQL's LOCK TABLE checks these): no
# role running a fleet holds any of them on a table the fleets share.
LOCKING = ("UPDATE", "DELETE", "TRUNCATE")


def unlock_statements(role: str) -> list[str]:
    """The REVOKEs that leave ``role`` no privilege to lock a shared table beyond ROW EXCLUSIVE (grants made
    by an older init --grant, or by hand)."""
    ident = '"' + role.replace('"', '""') + '"'
    return [f"REVOKE {', '.join(LOCKING)} ON {', '.join(FLEET_TABLES)} FROM {ident};"]


def locking_privileges(raw: psycopg.Connection[Any], role: str) -> list[str]:
    """``table privilege`` for each privilege ``role`` holds, itself, through PUBLIC or a role it belongs
    to, that would let it LOCK a shared table in a mode that makes other fleets' writes wait."""
    return [f"{priv} on {t}" for t in ("_migrations", *FLEET_TABLES, "fleets") for priv in LOCKING
            if raw.execute("SELECT has_table_privilege(%s, %s, %s)", [role, t, priv]).fetchone() == (True,)]


@contextlib.contextmanager
def _all_or_nothing(raw: psycopg.Connection[Any], what: str, nothing: str) -> Iterator[None]:
    """One transaction for the owner's ``what`` (init --grant / --revoke): committed when the block ends,
    even by a return; rolled back on any error, a server error becoming one LogError that says ``nothing``
    was done."""
    raw.execute("BEGIN")
    try:
        yield
        raw.execute("COMMIT")
    except psycopg.Error as e:
        raw.execute("ROLLBACK")
        raise LogError(f"{what}: {scrub(str(e)).strip()}; {nothing}. Run it as the role that owns the tables "
                       "(the one that ran init)") from None
    except BaseException:
        raw.execute("ROLLBACK")
        raise


def apply_grants(log: Any, role: str) -> list[str]:
    """Bind ``role`` to the log's fleet and GRANT it what a fleet needs (``grant_statements``), as the schema's
    owner, in one transaction; returns what was done. Raises LogError, having changed nothing, when the
    connected role could not (it does not own the schema) or the server did not grant every privilege."""
    raw = _raw(log)
    agent_id = log.conn.target.agent_id
    if not raw.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role]).fetchone():
        raise LogError(f"init --grant: no role {role!r} in the server; create it first (CREATE ROLE {role} LOGIN)")
    if not owns_schema(raw):
        raise LogError(f"init --grant {role}: the role {_current_role(raw)} does not own the fleet-agent schema, so "
                       "it can neither bind a fleet nor grant on its tables; nothing was granted. Run it with the "
                       "config of the role that owns the tables (the one that ran init)")
    if _owner_role(raw, role):
        raise LogError(f"init --grant {role}: the role {role} owns the fleet-agent schema, so it may lock every "
                       "fleet's tables; nothing was granted. Create a role for this fleet (CREATE ROLE ... LOGIN) "
                       "and grant that one")
    stmts = [*grant_statements(role), *unlock_statements(role)]
    with _all_or_nothing(raw, f"init --grant {role}", "nothing was granted"):
        for s in stmts:
            raw.execute(s)
        bind(raw, agent_id, role)
        missing = _missing_grants(raw, role)
        if missing:
            raise LogError(f"init --grant {role}: the server did not grant {', '.join(missing)}; nothing was "
                           "granted. Run it as the role that owns the tables (the one that ran init)")
        locking = locking_privileges(raw, role)
        if locking:
            raise LogError(f"init --grant {role}: the role still holds {', '.join(locking)} (through PUBLIC or a "
                           "role it belongs to), which would let it lock that table for every fleet; nothing was "
                           "granted. REVOKE those privileges from PUBLIC or the role it belongs to, then run it again")
    return [*stmts, f"-- bound fleet {agent_id!r} to the role {role}"]


def _owner_role(raw: psycopg.Connection[Any], role: str) -> bool:
    """Whether ``role`` owns the schema's tables (or belongs to the role that does)."""
    row = raw.execute("SELECT pg_has_role(%s, c.relowner, 'USAGE') FROM pg_class c "
                      "WHERE c.oid = to_regclass('fleet_roles')", [role]).fetchone()
    return bool(row and row[0])


def revoke_statements(role: str) -> list[str]:
    """The REVOKEs that undo ``grant_statements`` and what the bindings granted on the head rows."""
    ident = '"' + role.replace('"', '""') + '"'
    out = [f"REVOKE {GRANTS.get(t, READ_MODEL_GRANT)} ON {t} FROM {ident};" for t in ("_migrations", *FLEET_TABLES)]
    out += [f"REVOKE EXECUTE ON PROCEDURE {p} FROM {ident};" for p in READ_MODEL_PROCEDURES]
    return [*out, f"REVOKE SELECT, UPDATE ON fleets FROM {ident};", f"REVOKE USAGE ON SCHEMA public FROM {ident};"]


def apply_revoke(log: Any, role: str) -> list[str]:
    """Unbind ``role`` from the log's fleet and, when it is then bound to no fleet, REVOKE what ``apply_grants``
    granted it, as the schema's owner, in one transaction; returns what was done. Raises LogError, having
    changed nothing, when the connected role does not own the schema or ``role`` is not bound to the fleet.
    The owner's own privileges on its tables are never revoked."""
    raw = _raw(log)
    agent_id = log.conn.target.agent_id
    if not owns_schema(raw):
        raise LogError(f"init --revoke {role}: the role {_current_role(raw)} does not own the fleet-agent schema, "
                       "so it can neither unbind a fleet nor revoke on its tables; nothing was revoked. Run it with "
                       "the config of the role that owns the tables (the one that ran init)")
    with _all_or_nothing(raw, f"init --revoke {role}", "nothing was revoked"):
        bound = bindings(raw, role)
        if agent_id not in bound:
            where = f"it is bound to {', '.join(bound)}" if bound else "it is bound to no fleet"
            raise LogError(f"init --revoke {role}: the role {role} is not bound to fleet {agent_id!r} ({where}); "
                           "nothing was revoked. Run it with the owner's config whose agent_id names the fleet to "
                           "take from the role, or check the role's name")
        done = [f"-- unbound fleet {agent_id!r} from the role {role}"]
        left = [f for f in bound if f != agent_id]
        if not raw.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role]).fetchone():
            # a role dropped since it was bound: its binding goes, it holds no privileges to revoke
            raw.execute("DELETE FROM fleet_roles WHERE agent_id = %s AND rolname = %s", [agent_id, role])
            return [*done, f"-- the role {role} no longer exists in the server: nothing to revoke"]
        raw.execute("SELECT fleet_agent_unbind(%s, %s)", [agent_id, role])
        owner = raw.execute("SELECT pg_has_role(%s, c.relowner, 'USAGE') FROM pg_class c "
                            "WHERE c.oid = to_regclass('fleet_roles')", [role]).fetchone()
        if left:
            done.append(f"-- the role {role} keeps its privileges: it is still bound to {', '.join(left)}")
        elif owner and owner[0]:
            done.append(f"-- the role {role} owns the tables: its privileges on them stay")
        else:
            for s in revoke_statements(role):
                raw.execute(s)
                done.append(s)
    return done


def held_grants(log: Any, role: str) -> list[str]:
    """``table privilege`` for each privilege of ``grant_statements`` that ``role`` still holds (through PUBLIC
    or a role it is a member of, once its own grants are revoked)."""
    raw = _raw(log)
    if not raw.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role]).fetchone():
        return []
    return [f"{priv} on {t}" for t in ("_migrations", *FLEET_TABLES)
            for priv in GRANTS.get(t, READ_MODEL_GRANT).split(", ")
            if raw.execute("SELECT has_table_privilege(%s, %s, %s)", [role, t, priv]).fetchone() == (True,)]


def probe_role(target: PgTarget) -> tuple[str, list[str], bool] | None:
    """The role a connection to ``target`` logs in as, the fleets it is bound to and whether it owns the schema,
    without opening the log (so it answers for a role the log refuses); None for a database without the
    bindings."""
    raw = raw_connect(target)
    try:
        if not raw.execute("SELECT to_regclass('fleet_roles') IS NOT NULL").fetchone()[0]:  # type: ignore[index]
            return None
        role = _current_role(raw)
        return role, bindings(raw, role), owns_schema(raw)
    except psycopg.Error as e:
        raise _fail(target, "cannot read the bindings in", e) from None
    finally:
        raw.close()


def _missing_grants(raw: psycopg.Connection[Any], role: str) -> list[str]:
    """``table privilege`` for each privilege of ``grant_statements`` that ``role`` still lacks."""
    out = []
    for t in ("_migrations", *FLEET_TABLES):
        for priv in GRANTS.get(t, READ_MODEL_GRANT).split(", "):
            row = raw.execute("SELECT has_table_privilege(%s, %s, %s)", [role, t, priv]).fetchone()
            if not (row and row[0]):
                out.append(f"{priv} on {t}")
    for name in READ_MODEL_PROCEDURES:
        row = raw.execute("SELECT has_function_privilege(%s, p.oid, 'EXECUTE') FROM pg_proc p WHERE p.proname = %s",
                          [role, name]).fetchone()
        if not (row and row[0]):
            out.append(f"EXECUTE on {name}")
    return out


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
