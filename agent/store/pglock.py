"""The fleet's leadership lock on PostgreSQL: a table lock, held by an open transaction on a dedicated connection.

    open_lock_session(conninfo, ...)    a connection that dies on its own when its client stops talking
    try_lock(conn, agent_id) -> bool    LOCK TABLE the fleet's leadership table IN EXCLUSIVE MODE NOWAIT
    holds_lock(conn, agent_id) -> bool  this session is alive and holds that lock
    unlock(conn, agent_id)
    lock_holders(conn, agent_id)        who holds it: backend pid, application_name, client, since

Each fleet has a table of its own, ``fleet_lead_<md5 of agent_id>`` (agent/schema_pg.sql's
fleet_agent_bind makes it as the owner binds the fleet to a role): only the roles bound to the fleet may
lock it, so no role of another fleet can hold a fleet's leadership (an advisory key would be anyone's to
take). The lock is held by a transaction that has written nothing, so it holds no transaction id and no
snapshot between its queries: it keeps no row from being vacuumed, however long it lasts.

The session sets ``idle_in_transaction_session_timeout`` (and ``idle_session_timeout`` on PostgreSQL 14
and later, for a standby) and server-side TCP keepalives, so the server ends the session, and with it the
lock, when its client stops sending queries: a client that was killed, cut off by the network, or
suspended (SIGSTOP keeps its socket open, so only the timeout notices it). The holder queries at least
every ``idle_timeout / 3`` to keep it.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the driver loads when a lock session opens: SQLite users never load it
    import psycopg

from agent.errors import LogError

_HELD = ("locktype = 'relation' AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
         "AND relation = to_regclass(%s) AND mode = 'ExclusiveLock' AND granted")


def lead_table(agent_id: str) -> str:
    """The name of fleet ``agent_id``'s leadership table."""
    return "fleet_lead_" + hashlib.md5(agent_id.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class LockHolder:
    """A session holding the fleet's key, as the server sees it."""

    pid: int
    application_name: str
    client: str | None
    backend_start: str | None
    last_query_at: str | None


def open_lock_session(conninfo: str, *, application_name: str, idle_timeout_s: float,
                      connect_timeout_s: float = 10.0, **kwargs: Any) -> psycopg.Connection[Any]:
    """An autocommit connection for the lock alone. Raises ``psycopg.Error``."""
    import psycopg

    idle = max(1, int(idle_timeout_s))
    conn = psycopg.connect(conninfo, autocommit=True, application_name=application_name[:63],
                           connect_timeout=max(1, int(connect_timeout_s)), keepalives=1,
                           keepalives_idle=idle, keepalives_interval=max(1, idle // 3), keepalives_count=3,
                           **kwargs)
    try:
        conn.execute(f"SET idle_in_transaction_session_timeout = {max(1000, int(idle_timeout_s * 1000))}")
        if conn.info.server_version >= 140000:
            conn.execute(f"SET idle_session_timeout = {max(1000, int(idle_timeout_s * 1000))}")
        conn.execute(f"SET tcp_keepalives_idle = {idle}")
        conn.execute(f"SET tcp_keepalives_interval = {max(1, idle // 3)}")
        conn.execute("SET tcp_keepalives_count = 3")
    except BaseException:
        conn.close()
        raise
    return conn


def server_version(conn: psycopg.Connection[Any]) -> int:
    return int(conn.info.server_version)


def try_lock(conn: psycopg.Connection[Any], agent_id: str) -> bool:
    """Take the fleet's leadership lock without waiting (the session then stays in a transaction that holds
    it). Raises LogError when the role may not lock it (not bound to the fleet, or the fleet not bound)."""
    import psycopg

    if holds_lock(conn, agent_id):
        return True
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        conn.execute("ROLLBACK")
    conn.execute("BEGIN")
    try:
        conn.execute(f'LOCK TABLE "{lead_table(agent_id)}" IN EXCLUSIVE MODE NOWAIT')
    except psycopg.errors.LockNotAvailable:
        conn.execute("ROLLBACK")
        return False
    except (psycopg.errors.InsufficientPrivilege, psycopg.errors.UndefinedTable):
        conn.execute("ROLLBACK")
        role = conn.execute("SELECT current_user").fetchone()
        raise LogError(f"the role {role[0] if role else '?'} may not hold the leadership of fleet {agent_id!r}: it "
                       "is not bound to that fleet; check agent_id in the config, or have the schema's owner run "
                       "'fleet-agent --config OWNER_CONFIG init --grant ROLE' for this fleet") from None
    except BaseException:
        if not conn.closed and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.execute("ROLLBACK")
        raise
    return True


def holds_lock(conn: psycopg.Connection[Any], agent_id: str) -> bool:
    """True when this session is alive and holds the lock (raises ``psycopg.Error`` when it is gone)."""
    row = conn.execute(f"SELECT EXISTS (SELECT 1 FROM pg_locks WHERE {_HELD} AND pid = pg_backend_pid())",
                       (lead_table(agent_id),)).fetchone()
    return bool(row and row[0])


def unlock(conn: psycopg.Connection[Any], agent_id: str) -> None:
    conn.execute("ROLLBACK")


def session_setting(conn: psycopg.Connection[Any], name: str) -> str:
    """A setting as this session has it (``idle_session_timeout``: '15s')."""
    row = conn.execute("SELECT current_setting(%s)", (name,)).fetchone()
    return str(row[0]) if row else ""


def lock_holders(conn: psycopg.Connection[Any], agent_id: str) -> list[LockHolder]:
    """The sessions holding the fleet's key (none or one), with what pg_stat_activity says of them."""
    rows = conn.execute(
        "SELECT l.pid, a.application_name, a.client_addr::text, a.backend_start::text, a.state_change::text "
        f"FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid WHERE {_HELD.replace('locktype', 'l.locktype')} "
        "ORDER BY l.pid", (lead_table(agent_id),)).fetchall()
    return [LockHolder(int(r[0]), r[1] or "", r[2], r[3], r[4]) for r in rows]


def daemon_sessions(conn: psycopg.Connection[Any], agent_id: str) -> list[LockHolder]:
    """Every session a daemon of this fleet opened (named by ``identity``: its lock session, its log's;
    a standby's polling session), oldest first; an operator's command names its sessions otherwise."""
    rows = conn.execute(
        "SELECT pid, application_name, client_addr::text, backend_start::text, state_change::text "
        "FROM pg_stat_activity WHERE starts_with(application_name, %s) AND pid <> pg_backend_pid() "
        "ORDER BY backend_start, pid", (f"fleet-agent {agent_id} ",)).fetchall()
    return [LockHolder(int(r[0]), r[1] or "", r[2], r[3], r[4]) for r in rows]


def hostname() -> str:
    """This host's name, as a holder writes it (``socket`` is imported here, on first use: ``status`` reads the
    lock files without it)."""
    import socket

    return socket.gethostname()


def identity(agent_id: str) -> str:
    """``fleet-agent <agent_id> <hostname> <pid>``: how a holder names itself (its lock, its sessions)."""
    return f"fleet-agent {agent_id} {hostname()} {os.getpid()}"


def bound_idle_transactions(log: Any, seconds: float) -> None:
    """On a log in PostgreSQL: the server ends the log's session once it has sat ``seconds`` inside an
    open transaction. A daemon suspended mid-append would otherwise keep the fleet's append lock, and
    block the daemon that took over, for as long as it stays suspended. Nothing on a SQLite log."""
    conn: Any = getattr(log, "conn", None)
    if getattr(conn, "dialect", None) == "postgresql":
        conn.raw.execute(f"SET idle_in_transaction_session_timeout = {max(1000, int(seconds * 1000))}")
        # Named as the daemon's lock session is, so a daemon that takes over can tell this session from an
        # operator's (end_fenced_appends).
        conn.raw.execute("SELECT set_config('application_name', %s, false)", [identity(conn.target.agent_id)[:63]])


def end_fenced_appends(conn: psycopg.Connection[Any], agent_id: str, own: str) -> list[LockHolder]:
    """What a daemon does as it takes the fleet over, before its first append: end the sessions of an
    earlier active daemon of this fleet that are inside a write (their transaction holds an id: an append
    holds the lock on the fleet's head row).

    The timeout that ``bound_idle_transactions`` sets does not cover every stall: inside an append's
    pipeline the server waits for the client as an *active* query, and arms no idle timeout, so a daemon
    suspended there (SIGSTOP, a frozen VM) would keep the head row locked, and block its successor, for as
    long as it stays suspended. That daemon has lost the fleet (this one holds the leadership lock), so
    its open transaction can only end in a rollback: the server rolls it back now. Only daemon sessions
    (named ``fleet-agent <agent_id> <host> <pid>``, not ``own``) are ended; an operator's command is not.

    A name is anyone's to take, so only sessions of a role bound to the fleet (only those may lock its head
    row) that this session's role may signal are ended: a session of another fleet's role named like one of
    this fleet's daemons is left alone, and cannot make the takeover fail on a signal it may not send."""
    rows = conn.execute(
        "SELECT a.pid, a.application_name, a.client_addr::text, a.backend_start::text, a.state_change::text "
        "FROM pg_stat_activity a WHERE a.datname = current_database() AND a.backend_xid IS NOT NULL "
        "AND starts_with(a.application_name, %s) AND a.application_name <> %s AND a.pid <> pg_backend_pid() "
        "AND pg_has_role(a.usesysid, 'MEMBER') "
        "AND EXISTS (SELECT 1 FROM fleet_roles r WHERE r.agent_id = %s AND r.rolname = a.usename)",
        (f"fleet-agent {agent_id} ", own[:63], agent_id)).fetchall()
    for r in rows:
        conn.execute("SELECT pg_terminate_backend(%s)", (int(r[0]),))
    return [LockHolder(int(r[0]), r[1] or "", r[2], r[3], r[4]) for r in rows]
