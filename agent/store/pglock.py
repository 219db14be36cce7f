"""The fleet's leadership lock on PostgreSQL: a session-level advisory lock on a dedicated connection.

    open_lock_session(conninfo, ...)    a connection that dies on its own when its client stops talking
    try_lock(conn, agent_id) -> bool    pg_try_advisory_lock on the fleet's key
    holds_lock(conn, agent_id) -> bool  this session is alive and holds the fleet's key
    unlock(conn, agent_id)
    lock_holders(conn, agent_id)        who holds the key: backend pid, application_name, client, since

The key is two 32-bit integers: a fixed class (``LOCK_CLASS``, "FALK") and ``hashtext(agent_id)``, so
two fleets in one database never share a lock and no other application's one-integer keys collide.

The session sets ``idle_session_timeout`` (PostgreSQL 14 and later) and server-side TCP keepalives, so
the server ends the session, and with it the lock, when its client stops sending queries: a client that
was killed, cut off by the network, or suspended (SIGSTOP keeps its socket open, so only the timeout
notices it). The holder queries at least every ``idle_timeout / 3`` to keep it.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the driver loads when a lock session opens: SQLite users never load it
    import psycopg

LOCK_CLASS = 0x46414C4B  # "FALK": the first half of every fleet-agent leadership key
_KEY = "classid = %s::bigint::oid AND objid = (hashtext(%s)::bigint & 4294967295)::oid AND objsubid = 2"


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
    row = conn.execute("SELECT pg_try_advisory_lock(%s, hashtext(%s))", (LOCK_CLASS, agent_id)).fetchone()
    return bool(row and row[0])


def holds_lock(conn: psycopg.Connection[Any], agent_id: str) -> bool:
    """True when this session is alive and holds the key (raises ``psycopg.Error`` when it is gone)."""
    row = conn.execute(f"SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND {_KEY} "
                       "AND granted AND pid = pg_backend_pid())", (LOCK_CLASS, agent_id)).fetchone()
    return bool(row and row[0])


def unlock(conn: psycopg.Connection[Any], agent_id: str) -> None:
    conn.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", (LOCK_CLASS, agent_id))


def session_setting(conn: psycopg.Connection[Any], name: str) -> str:
    """A setting as this session has it (``idle_session_timeout``: '15s')."""
    row = conn.execute("SELECT current_setting(%s)", (name,)).fetchone()
    return str(row[0]) if row else ""


def lock_holders(conn: psycopg.Connection[Any], agent_id: str) -> list[LockHolder]:
    """The sessions holding the fleet's key (none or one), with what pg_stat_activity says of them."""
    rows = conn.execute(
        "SELECT l.pid, a.application_name, a.client_addr::text, a.backend_start::text, a.state_change::text "
        f"FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND {_KEY} "
        "AND l.granted ORDER BY l.pid", (LOCK_CLASS, agent_id)).fetchall()
    return [LockHolder(int(r[0]), r[1] or "", r[2], r[3], r[4]) for r in rows]


def daemon_sessions(conn: psycopg.Connection[Any], agent_id: str) -> list[LockHolder]:
    """Every session a daemon of this fleet opened (named by ``identity``: its lock session, its log's;
    a standby's polling session), oldest first; an operator's command names its sessions otherwise."""
    rows = conn.execute(
        "SELECT pid, application_name, client_addr::text, backend_start::text, state_change::text "
        "FROM pg_stat_activity WHERE starts_with(application_name, %s) AND pid <> pg_backend_pid() "
        "ORDER BY backend_start, pid", (f"fleet-agent {agent_id} ",)).fetchall()
    return [LockHolder(int(r[0]), r[1] or "", r[2], r[3], r[4]) for r in rows]


def identity(agent_id: str) -> str:
    """``fleet-agent <agent_id> <hostname> <pid>``: how a holder names itself (its lock, its sessions)."""
    return f"fleet-agent {agent_id} {socket.gethostname()} {os.getpid()}"


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
    earlier active daemon of this fleet that still hold the fleet's append lock.

    The timeout that ``bound_idle_transactions`` sets does not cover every stall: inside an append's
    pipeline the server waits for the client as an *active* query, and arms no idle timeout, so a daemon
    suspended there (SIGSTOP, a frozen VM) would keep the append lock, and block its successor, for as
    long as it stays suspended. That daemon has lost the fleet (this one holds the leadership lock), so
    its open transaction can only end in a rollback: the server rolls it back now. Only daemon sessions
    (named ``fleet-agent <agent_id> <host> <pid>``, not ``own``) are ended; an operator's command is not."""
    from agent.store.pg import APPEND_LOCK

    rows = conn.execute(
        "SELECT a.pid, a.application_name, a.client_addr::text, a.backend_start::text, a.state_change::text "
        "FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' "
        f"AND {_KEY} AND l.granted AND starts_with(a.application_name, %s) AND a.application_name <> %s "
        "AND a.pid <> pg_backend_pid()", (APPEND_LOCK, agent_id, f"fleet-agent {agent_id} ", own[:63])).fetchall()
    for r in rows:
        conn.execute("SELECT pg_terminate_backend(%s)", (int(r[0]),))
    return [LockHolder(int(r[0]), r[1] or "", r[2], r[3], r[4]) for r in rows]
