"""The two SQL dialects the read models and ``Store`` write their statements in.

Each statement is written once with the dialect's pieces put in where it is written (``p``, the one
placeholder; ``marks(n)``; ``q(name)``, a quoted name; ``fleet``, what precedes a table's own key in
``ON CONFLICT``: on PostgreSQL every read-model key starts with the fleet's ``agent_id``), so the text sent
to the database is the text written. Statements whose SQL differs beyond that (JSON, GLOB, PRAGMA) have
one text per dialect next to each other in agent/store/queries.py.

``run`` and ``run_many`` send a statement on either kind of connection: ``execute``/``executemany`` on
sqlite3, ``run``/``run_many`` on agent.store.pg.PgConnection (which sends the text as it is).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Dialect:
    name: str
    p: str  # one placeholder
    fleet: str  # the key columns before a table's own in ON CONFLICT
    quote: str  # a name's opening and closing quote

    def marks(self, n: int) -> str:
        """``n`` placeholders, comma-separated."""
        return ",".join([self.p] * n)

    def q(self, name: str) -> str:
        return f"{self.quote[0]}{name}{self.quote[1]}"


SQLITE = Dialect("sqlite", "?", "", "[]")
POSTGRESQL = Dialect("postgresql", "%s", "agent_id, ", '""')


def of(conn: Any) -> Dialect:
    """The dialect a connection speaks (a connection with no ``dialect`` is sqlite3's)."""
    return POSTGRESQL if getattr(conn, "dialect", "sqlite") == "postgresql" else SQLITE


def run(conn: Any, sql: str, params: Any = ()) -> Any:
    """Send ``sql`` (written in ``conn``'s dialect) with ``params``; the cursor."""
    if of(conn) is POSTGRESQL:
        return conn.run(sql, params)
    return conn.execute(sql, params)


def run_many(conn: Any, sql: str, rows: Iterable[Any]) -> Any:
    """Send ``sql`` (written in ``conn``'s dialect) once for each of ``rows``."""
    if of(conn) is POSTGRESQL:
        return conn.run_many(sql, rows)
    return conn.executemany(sql, rows)
