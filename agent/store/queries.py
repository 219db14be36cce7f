"""Every question the program asks of the database: one named method each.

Callers hold a ``Store`` (``log.store``, or ``tx.store`` inside an append
transaction, which then sees that transaction's own writes) and never see SQL
or a connection. The SQL dialect stays here and in the rest of agent/store:
the seam where another database backend would plug in.

Rows are read as dicts keyed by column name (the shape sqlite-utils'
``Table.rows_where`` gives, built here on the connection so a command that only
reads does not load sqlite-utils) and handed out as small frozen dataclasses or
plain values, never positional tuples.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from agent.store import dialect
from agent.store.db import sqlite3
from agent.store.readmodels import TABLES as READ_MODEL_TABLES
from agent.store.rows import (
    Directive,
    FailedRun,
    Instance,
    InstanceState,
    Intent,
    KnowledgeVersion,
    Memory,
    OpenTick,
    Rental,
)
from agent.store.segment_types import Segment

__all__ = ["Alert", "Directive", "FailedRun", "Instance", "InstanceState", "Intent", "KnowledgeVersion", "Memory",
           "OpenTick", "Rental", "Silence", "Store"]


@dataclass(frozen=True)
class Alert:
    """One row of the alerts read model."""

    id: int
    dedup_key: str
    severity: str
    title: str
    detail: str
    raised_by: str
    status: str  # open | acked | resolved
    count: int
    first_seq: int
    last_seq: int
    first_ts: str
    last_ts: str
    acked_by: str | None = None
    ack_note: str | None = None
    closed_seq: int | None = None
    notified_ts: str | None = None
    notified_reason: str | None = None  # opened | repeat | resolved: the last notification about it


@dataclass(frozen=True)
class Silence:
    """An alert silence; ``id`` is the seq of its ``alert.silenced``. Active while not lifted and
    ``until_ts`` is in the future."""

    id: int
    alert_id: int | None
    key_pattern: str | None
    until_ts: str
    reason: str
    by: str
    ts: str
    lifted_seq: int | None = None











_LIVE_ALERTS = """
SELECT a.* FROM alerts a
WHERE {where} AND (a.status = 'open' OR (a.status = 'acked' AND NOT EXISTS (
    SELECT 1 FROM events e WHERE e.kind GLOB 'alert.*' AND json_extract(e.payload, '$.alert_id') = a.id
      AND e.seq > a.closed_seq AND e.kind = 'alert.resolved')))
ORDER BY a.id
"""

# From the events of the window (index events_ts; "+e.kind" keeps the kind index out of it) to their
# intents (index intents_called): the cost is the window's, not the log's.
_INTENTS_SINCE = ("SELECT COUNT(*) FROM events e CROSS JOIN intents i ON i.called_seq = e.seq "
                  "WHERE i.tool = ? AND e.ts >= ? AND +e.kind = 'tool.called'")

# Rent intents vast.ai refused (tools/fleet.py answers them "not rented: ..."): nothing was created.
_REFUSED_SINCE = ("SELECT COUNT(*) FROM events e CROSS JOIN intents i ON i.called_seq = e.seq"
                  " JOIN events r ON r.seq = i.result_seq WHERE i.tool = 'rent_instance' AND e.ts >= ?"
                  " AND +e.kind = 'tool.called' AND i.ok = 0"
                  " AND json_extract(r.payload, '$.error') LIKE 'not rented: %'")


# What metrics count, grouped by kind and up to two labels, with the model's token sums.
_METRIC_TOTALS = """
SELECT kind,
  CASE kind WHEN 'tick.failed' THEN COALESCE(json_extract(payload, '$.error_kind'), 'other')
            WHEN 'tool.result' THEN json_extract(payload, '$.name')
            WHEN 'policy.blocked' THEN json_extract(payload, '$.rule')
            WHEN 'context.compacted' THEN json_extract(payload, '$.method') END AS a,
  CASE kind WHEN 'tool.result' THEN CASE WHEN json_extract(payload, '$.ok') THEN 'ok' ELSE 'error' END
            WHEN 'policy.blocked' THEN json_extract(payload, '$.name') END AS b,
  COUNT(*) AS n,
  SUM(CASE WHEN kind IN ('model.response', 'summary.response')
           THEN json_extract(payload, '$.usage.prompt_tokens') END) AS prompt,
  SUM(CASE WHEN kind IN ('model.response', 'summary.response')
           THEN json_extract(payload, '$.usage.cached_tokens') END) AS cached,
  SUM(CASE WHEN kind IN ('model.response', 'summary.response')
           THEN json_extract(payload, '$.usage.completion_tokens') END) AS completion,
  SUM(CASE WHEN kind = 'tick.completed' AND COALESCE(json_array_length(payload, '$.actions'), 0) = 0
           THEN 1 ELSE 0 END) AS idle
FROM events
WHERE seq > ? AND seq <= ? AND kind IN ('tick.completed', 'tick.failed', 'model.response', 'tool.result',
                                        'policy.blocked', 'context.compacted', 'summary.response')
GROUP BY kind, a, b
"""


# ------------------------------------------------------------------ PostgreSQL variants
# The queries whose SQL differs beyond the dialect's placeholder and quoting, as PostgreSQL runs them (psycopg
# placeholders, ``%%`` for a literal ``%``): JSON through the jsonb ``body`` column (the payload text parsed;
# the hash covers the text), GLOB as LIKE.

_LIVE_ALERTS_PG = """
SELECT a.* FROM alerts a
WHERE {where} AND (a.status = 'open' OR (a.status = 'acked' AND NOT EXISTS (
    SELECT 1 FROM events e WHERE e.kind LIKE 'alert.%%' AND e.body->>'alert_id' = a.id::text
      AND e.seq > a.closed_seq AND e.kind = 'alert.resolved')))
ORDER BY a.id
"""

_INTENTS_SINCE_PG = ("SELECT COUNT(*) FROM events e JOIN intents i ON i.called_seq = e.seq "
                     "WHERE i.tool = %s AND e.ts >= %s AND e.kind = 'tool.called'")


def _pg_num(path: str, cast: str = "double precision", body: str = "body") -> str:
    """The JSON number at ``path`` of the payload (NULL when it is anything else), as ``cast``; ``body``: the
    column (qualified in a join)."""
    return f"(CASE WHEN jsonb_typeof({body} #> '{path}') = 'number' THEN ({body} #>> '{path}')::numeric::{cast} END)"


_METRIC_TOTALS_PG = f"""
SELECT kind,
  CASE kind WHEN 'tick.failed' THEN COALESCE(body->>'error_kind', 'other')
            WHEN 'tool.result' THEN body->>'name'
            WHEN 'policy.blocked' THEN body->>'rule'
            WHEN 'context.compacted' THEN body->>'method' END AS a,
  CASE kind WHEN 'tool.result' THEN CASE WHEN body->'ok' IN ('true'::jsonb) OR (jsonb_typeof(body->'ok') = 'number'
                                             AND (body->>'ok')::numeric <> 0) THEN 'ok' ELSE 'error' END
            WHEN 'policy.blocked' THEN body->>'name' END AS b,
  COUNT(*) AS n,
  SUM(CASE WHEN kind IN ('model.response', 'summary.response')
           THEN {_pg_num('{usage,prompt_tokens}', 'bigint')} END)::bigint AS prompt,
  SUM(CASE WHEN kind IN ('model.response', 'summary.response')
           THEN {_pg_num('{usage,cached_tokens}', 'bigint')} END)::bigint AS cached,
  SUM(CASE WHEN kind IN ('model.response', 'summary.response')
           THEN {_pg_num('{usage,completion_tokens}', 'bigint')} END)::bigint
      AS completion,
  SUM(CASE WHEN kind = 'tick.completed' AND COALESCE(CASE WHEN jsonb_typeof(body->'actions') = 'array'
           THEN jsonb_array_length(body->'actions') END, 0) = 0 THEN 1 ELSE 0 END)::bigint AS idle
FROM events
WHERE seq > %s AND seq <= %s AND kind IN ('tick.completed', 'tick.failed', 'model.response', 'tool.result',
                                        'policy.blocked', 'context.compacted', 'summary.response')
GROUP BY kind, a, b
"""

_PG: dict[str, str] = {
    "alert_history": ("SELECT seq FROM events WHERE kind LIKE 'alert.%%' AND body->>'alert_id' = CAST(%s AS text)"
                      " UNION SELECT seq FROM events WHERE kind = 'alert.notified' AND EXISTS ("
                      "SELECT 1 FROM jsonb_array_elements(CASE WHEN jsonb_typeof(body->'alerts') = 'array'"
                      " THEN body->'alerts' ELSE '[]'::jsonb END) j WHERE j->>'alert_id' = CAST(%s AS text))"
                      " ORDER BY seq"),
    "input_hashes": "SELECT body->>'sha256' AS h FROM events WHERE kind = 'input.recorded'",
    "payload_bytes": ("SELECT kind, COUNT(*) AS n, SUM(octet_length(payload))::bigint AS b FROM events"
                      " GROUP BY kind ORDER BY kind"),
    "tick_durations": (f"SELECT {_pg_num('{duration_ms}')} AS d FROM events"
                       " WHERE kind = 'tick.completed' AND seq > %s AND seq <= %s ORDER BY seq"),
    "fleet_rates": (f"SELECT seq, ts, {_pg_num('{observation,fleet_dph}')} AS dph FROM events"
                    " WHERE kind = 'tick.started' AND seq > %s ORDER BY seq"),
    "refused_since": ("SELECT COUNT(*) FROM events e JOIN intents i ON i.called_seq = e.seq"
                      " JOIN events r ON r.seq = i.result_seq WHERE i.tool = 'rent_instance' AND e.ts >= %s"
                      " AND e.kind = 'tool.called' AND i.ok = 0 AND r.body->>'error' LIKE 'not rented: %%'"),
    # The storage $/h a rent noted (tool.result's effect) or an adoption (instance.adopted) with it.
    "rentals": ("SELECT i.instance_id, i.gpu_name, i.dph, i.label, s.ts AS start_ts, d.ts AS end_ts,"
                f" COALESCE({_pg_num('{effect,storage_dph}', body='s.body')}, {_pg_num('{storage_dph}', body='s.body')})"
                " AS storage_dph"
                " FROM instances i JOIN events s ON s.seq = i.rented_seq"
                " LEFT JOIN events d ON d.seq = i.destroyed_seq ORDER BY i.instance_id"),
    "outbids_since": ("SELECT COUNT(*) FROM events WHERE kind = 'instance.outbid' AND ts >= %s"
                      " AND body->>'action' IN ('kept', 'destroyed')"),
    "host_failures": ("SELECT COUNT(*) FROM events WHERE kind = 'host.failed' AND ts >= %s"
                      " AND body->>'host_id' = CAST(%s AS text)"),
    "host_failure_logged": ("SELECT 1 FROM events WHERE kind = 'host.failed' AND body->>'instance_id' = CAST(%s AS text)"
                            " AND body->>'status' = %s LIMIT 1"),
}


class Store:
    """The queries against one connection: the log's own, or the one an append transaction holds open.

    On PostgreSQL (``conn`` an agent.store.pg.PgConnection) the SQL of a few queries is a variant
    (``_PG``); row-level security keeps every query to the connection's fleet."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._d = dialect.of(conn)
        self._p = self._d.p  # the placeholder the statements below are written with
        self._pg = self._d is dialect.POSTGRESQL

    def _sql(self, sqlite_sql: str, pg_key: str) -> str:
        return _PG[pg_key] if self._pg else sqlite_sql

    # ------------------------------------------------------------------ plumbing

    def _rows(self, table: str, where: str | None = None, args: Sequence[Any] = (), *,
              order_by: str | None = None, limit: int | None = None, select: str = "*") -> list[dict[str, Any]]:
        """``Table.rows_where``'s query, run on the connection itself (a command that reads a read
        model does not load sqlite-utils for it)."""
        sql = f"SELECT {select} FROM {self._d.q(table)}"
        if where is not None:
            sql += f" WHERE {where}"
        if order_by is not None:
            sql += f" ORDER BY {order_by}"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return self._query(sql, args)

    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[dict[str, Any]]:
        cur = dialect.run(self._conn, sql, list(args))
        fetched = cur.fetchall()  # first: inside a PostgreSQL pipeline the columns are known once it has run
        cols = [d[0] for d in cur.description]
        rows = [dict(zip(cols, r, strict=True)) for r in fetched]
        if self._pg and "agent_id" in cols:  # the fleet's own column: never part of what a query answers
            for r in rows:
                del r["agent_id"]
        return rows

    def _value(self, sql: str, args: Sequence[Any] = ()) -> Any:
        row = dialect.run(self._conn, sql, list(args)).fetchone()
        return None if row is None else row[0]

    def _count(self, table: str) -> int:
        return int(self._value(f"SELECT COUNT(*) FROM {self._d.q(table)}"))

    # ------------------------------------------------------------------ alerts

    def alerts(self, *, all_: bool = False) -> list[Alert]:
        """Open alerts, or every alert ever raised with ``all_``; by id."""
        rows = self._rows("alerts", None if all_ else "status = 'open'", order_by="id")
        return [Alert(**r) for r in rows]

    def open_alerts(self) -> list[Alert]:
        """The alerts open now, oldest first."""
        return self.alerts()

    def alert(self, alert_id: int) -> Alert | None:
        rows = self._rows("alerts", f"id = {self._p}", [alert_id])
        return Alert(**rows[0]) if rows else None

    def live_alerts(self, *, key: str | None = None, prefix: str | None = None) -> list[Alert]:
        """Alerts whose condition still holds (open, or acked and not resolved since), by exact
        dedup key or by key prefix; oldest first."""
        live = "a.status IN ('open', 'acked') AND "  # index alerts_live: resolved alerts are never read
        sql = _LIVE_ALERTS_PG if self._pg else _LIVE_ALERTS
        if key is not None:
            rows = self._query(sql.format(where=live + f"a.dedup_key = {self._p}"), [key])
        elif prefix is not None:
            rows = self._query(sql.format(where=live + f"a.dedup_key >= {self._p} AND a.dedup_key <= {self._p}"
                                                   f" AND substr(a.dedup_key, 1, {self._p}) = {self._p}"),
                               [prefix, prefix + "\U0010ffff", len(prefix), prefix])
        else:
            raise ValueError("live_alerts needs a key or a prefix")
        return [Alert(**r) for r in rows]

    def next_alert_id(self) -> int:
        return int(self._value("SELECT COALESCE(MAX(id), 0) + 1 FROM alerts"))

    def alert_history_seqs(self, alert_id: int) -> list[int]:
        """The seqs of every event about alert ``alert_id`` (raised, repeated, retitled, acked, resolved, and
        the notifications that name it, first or not), in order. The first part goes through index
        events_alert; notifications are few (one per opening, repeat or resolution)."""
        rows = self._query(self._sql(
            "SELECT seq FROM events WHERE kind GLOB 'alert.*' AND json_extract(payload, '$.alert_id') = ?"
            " UNION SELECT seq FROM events WHERE kind = 'alert.notified' AND EXISTS ("
            "SELECT 1 FROM json_each(payload, '$.alerts') j WHERE json_extract(j.value, '$.alert_id') = ?)"
            " ORDER BY seq", "alert_history"), [alert_id, alert_id])
        return [int(r["seq"]) for r in rows]

    # ------------------------------------------------------------------ instances and intents

    def owned_instances(self) -> list[Instance]:
        """The instances this agent owns now (active), by id."""
        from agent.store.rows import Instance

        return [Instance(**r) for r in self._rows("instances", "status = 'active'", order_by="instance_id")]

    def owned_instance_ids(self) -> list[int]:
        return [i.instance_id for i in self.owned_instances()]

    def instance(self, instance_id: int) -> Instance | None:
        from agent.store.rows import Instance

        rows = self._rows("instances", f"instance_id = {self._p}", [instance_id])
        return Instance(**rows[0]) if rows else None

    def instance_states(self) -> dict[int, InstanceState]:
        """Every instance the last observation listed: its status and since when (fleet clock)."""
        from agent.store.rows import InstanceState

        return {int(r["instance_id"]): InstanceState(**r) for r in self._rows("instance_states",
                                                                             order_by="instance_id")}

    def dangling_intents(self) -> list[Intent]:
        """Side-effecting calls whose outcome was never logged, oldest first."""
        rows = self._rows("intents", "result_seq IS NULL", order_by="called_seq")
        return [_intent(r) for r in rows]

    def pending_rents(self) -> list[Intent]:
        """Rents whose outcome is unknown (answered "pending") and not yet settled, oldest first."""
        rows = self._rows("intents", "tool = 'rent_instance' AND result_seq IS NOT NULL AND ok IS NULL",
                          order_by="called_seq")
        return [_intent(r) for r in rows]

    def count_events_after(self, seq: int, kind: str) -> int:
        """Events of ``kind`` logged after ``seq``."""
        return int(self._value(f"SELECT COUNT(*) FROM events WHERE seq > {self._p} AND kind = {self._p}", [seq, kind]))

    def rent_keys(self) -> set[str]:
        """Every idempotency key a rent intent was ever logged with."""
        rows = self._rows("intents", "tool = 'rent_instance' AND idem_key IS NOT NULL")
        return {str(r["idem_key"]) for r in rows}

    def rents_since(self, ts: str) -> int:
        """Rent intents logged at or after ``ts`` (each may have spent money)."""
        return int(self._value(_INTENTS_SINCE_PG if self._pg else _INTENTS_SINCE, ["rent_instance", ts]))

    def counted_rents_since(self, ts: str, cap: int) -> int:
        """The rents since ``ts`` that count against an hourly limit of ``cap``: every rent intent (each may
        have spent money) but those vast.ai refused (a 402 for credit, a machine it could not schedule, an offer
        gone: nothing was created), and one for each outbid since (the market took an instance: its
        replacement is not a runaway rent), at most ``cap`` of them (at most twice the cap in all)."""
        refused = int(self._value(self._sql(_REFUSED_SINCE, "refused_since"), [ts]))
        return max(0, self.rents_since(ts) - refused - min(self.outbids_since(ts), cap))

    def outbids_since(self, ts: str) -> int:
        """Outbids logged at or after ``ts`` that took an instance of ours out of work (``instance.outbid`` kept or
        destroyed; a rebid one runs on): each may take a rent to replace."""
        return int(self._value(self._sql("SELECT COUNT(*) FROM events WHERE kind = 'instance.outbid' AND ts >= ?"
                                         " AND json_extract(payload, '$.action') IN ('kept', 'destroyed')",
                                         "outbids_since"), [ts]))

    def destroys_since(self, ts: str) -> int:
        return int(self._value(_INTENTS_SINCE_PG if self._pg else _INTENTS_SINCE, ["destroy_instance", ts]))

    # ------------------------------------------------------------------ memory and directives

    def memories(self) -> list[Memory]:
        from agent.store.rows import Memory

        return [Memory(**r) for r in self._rows("memory", order_by="key")]

    def memory_has(self, key: str) -> bool:
        return bool(self._rows("memory", f"key = {self._p}", [key], limit=1))

    def active_directives(self) -> list[Directive]:
        """The directives in force, oldest first."""
        return [_directive(r) for r in self._rows("directives", "active = 1", order_by="id")]

    def directive(self, directive_id: int) -> Directive | None:
        rows = self._rows("directives", f"id = {self._p}", [directive_id])
        return _directive(rows[0]) if rows else None

    # ------------------------------------------------------------------ knowledge

    def recorded_input_hashes(self) -> set[str]:
        """The sha256 of every request input (prompt, policy, tool schemas) already logged in full."""
        rows = self._query(self._sql("SELECT json_extract(payload, '$.sha256') AS h FROM events"
                                     " WHERE kind = 'input.recorded'", "input_hashes"))
        return {str(r["h"]) for r in rows}

    def knowledge_names(self) -> list[str]:
        """Every knowledge file name the log has seen (removed ones included), sorted."""
        return [str(r["name"]) for r in self._query("SELECT DISTINCT name FROM knowledge ORDER BY name")]

    def knowledge_latest(self) -> dict[str, KnowledgeVersion]:
        """name -> the newest logged version of each knowledge file."""
        from agent.store.rows import KnowledgeVersion

        rows = self._query("SELECT k.* FROM knowledge k WHERE k.version ="
                           " (SELECT MAX(version) FROM knowledge WHERE name = k.name) ORDER BY k.name")
        return {r["name"]: KnowledgeVersion(**r) for r in rows}

    def knowledge_versions(self, name: str) -> list[KnowledgeVersion]:
        """Every logged version of ``name``, oldest first."""
        from agent.store.rows import KnowledgeVersion

        return [KnowledgeVersion(**r) for r in self._rows("knowledge", f"name = {self._p}", [name], order_by="version")]

    def knowledge_text(self, name: str) -> str | None:
        """The newest full text of ``name`` as logged (None: never seen, or removed)."""
        rows = self._rows("knowledge", f"name = {self._p}", [name], order_by="version DESC", limit=1)
        if not rows or rows[0]["hash"] is None:
            return None
        payload = self._value(f"SELECT payload FROM events WHERE seq = {self._p}", [rows[0]["seq"]])
        if payload is None:
            return None
        text = json.loads(payload).get("text")
        return text if isinstance(text, str) else None

    # ------------------------------------------------------------------ ticks and the thread

    def next_tick_number(self) -> int:
        """One past the highest tick that started or failed."""
        top = [self._value(f"SELECT MAX(tick) FROM events WHERE kind = {self._p} AND tick IS NOT NULL", [k])
               for k in ("tick.started", "tick.failed")]
        return max((int(t) for t in top if t is not None), default=0) + 1

    def open_tick(self) -> OpenTick | None:
        """The newest tick that has ``tick.started`` but neither ``tick.completed`` nor ``tick.failed``
        after it (running now, or interrupted)."""
        from agent.store.rows import OpenTick

        rows = self._query("SELECT tick, seq, ts FROM events WHERE kind = 'tick.started' ORDER BY seq DESC LIMIT 1")
        if not rows or rows[0]["tick"] is None:
            return None
        start = rows[0]
        done = self._value("SELECT 1 FROM events WHERE kind IN ('tick.completed', 'tick.failed')"
                           f" AND tick = {self._p} AND seq > {self._p} LIMIT 1", [start["tick"], start["seq"]])
        return None if done else OpenTick(int(start["tick"]), int(start["seq"]), str(start["ts"]))

    def consecutive_failed_ticks(self, cap: int = 1000) -> FailedRun:
        """How many ticks failed in a row at the end of the log (looking back at most ``cap`` tick ends)."""
        from agent.store.rows import FailedRun

        done = self._value("SELECT seq FROM events WHERE kind = 'tick.completed' ORDER BY seq DESC LIMIT 1")
        rows = self._query(f"SELECT payload FROM events WHERE kind = 'tick.failed' AND seq > {self._p}"
                           f" ORDER BY seq DESC LIMIT {self._p}", [done or 0, cap])
        reason = json.loads(rows[0]["payload"]).get("reason") if rows else None
        return FailedRun(len(rows), reason)

    def event_hashes(self) -> dict[int, str]:
        """seq -> hash of every event, in seq order (the chain as stored, unchecked)."""
        return {int(r["seq"]): str(r["hash"]) for r in self._rows("events", order_by="seq", select="seq, hash")}

    def search_index_size(self) -> int:
        """Rows in the full-text index (one per event)."""
        return self._count("events_fts")

    # ------------------------------------------------------------------ the file itself

    def quick_check(self) -> list[str]:
        """SQLite's quick_check: ["ok"], or the problems it found (an unreadable file is one)."""
        return self._check("PRAGMA quick_check")

    def integrity_check(self) -> list[str]:
        """SQLite's full integrity_check: ["ok"], or the problems it found."""
        return self._check("PRAGMA integrity_check")

    def _check(self, pragma: str) -> list[str]:
        if self._pg:  # the server keeps its own files sound; what is checked here is that the log reads
            try:
                self._value("SELECT COUNT(*) FROM events")
            except Exception as e:  # noqa: BLE001 - any driver error is the answer
                return [str(e)]
            return ["ok"]
        try:
            return [str(r[0]) for r in self._conn.execute(pragma).fetchall()]
        except sqlite3.DatabaseError as e:
            return [str(e)]

    def row_counts(self, tables: Iterable[str] = READ_MODEL_TABLES) -> dict[str, int]:
        """table -> rows, for each read-model table."""
        return {t: self._count(t) for t in tables}

    # ------------------------------------------------------------------ lookups that stay flat in the log's size

    def payload_bytes_by_kind(self) -> dict[str, tuple[int, int]]:
        """kind -> (events, bytes of their payload JSON), for every kind in the log."""
        rows = self._query(self._sql("SELECT kind, COUNT(*) AS n, SUM(length(CAST(payload AS BLOB))) AS b FROM events"
                                     " GROUP BY kind ORDER BY kind", "payload_bytes"))
        return {str(r["kind"]): (int(r["n"]), int(r["b"] or 0)) for r in rows}

    def has_rent_key(self, key: str) -> bool:
        """Whether a rent intent was ever logged with idempotency key ``key`` (index intents_idem)."""
        return self._value(f"SELECT 1 FROM intents WHERE idem_key = {self._p} AND idem_key IS NOT NULL"
                           " AND tool = 'rent_instance' LIMIT 1", [key]) is not None

    # ------------------------------------------------------------------ silences and notifications

    def silences(self, *, now_ts: str | None = None) -> list[Silence]:
        """Every silence by id, or with ``now_ts`` only those in force then (not lifted, not expired)."""
        if now_ts is None:
            rows = self._rows("silences", order_by="id")
        else:
            rows = self._rows("silences", f"lifted_seq IS NULL AND until_ts > {self._p}", [now_ts], order_by="id")
        return [Silence(**r) for r in rows]

    def silence(self, silence_id: int) -> Silence | None:
        rows = self._rows("silences", f"id = {self._p}", [silence_id])
        return Silence(**rows[0]) if rows else None

    def alerts_to_notify(self) -> list[Alert]:
        """Alerts a notification may be due for: open ones, and resolved ones whose opening was notified
        but not their resolution; by id."""
        rows = self._rows("alerts", "status = 'open' OR (status = 'resolved' AND notified_reason IN "
                          "('opened', 'repeat'))", order_by="id")
        return [Alert(**r) for r in rows]
    # ------------------------------------------------------------------ the console and metrics

    def metric_totals(self, since: int, until: int) -> list[dict[str, Any]]:
        """Counts and token sums of the events in (since, until] that metrics count, grouped by kind and
        by one or two labels: the failure kind of a failed tick, a tool's name and outcome, a policy rule,
        a compaction's method. Sums: prompt, cached and completion tokens of model and summariser responses;
        ticks whose model took no action (``idle``)."""
        return self._query(_METRIC_TOTALS_PG if self._pg else _METRIC_TOTALS, [since, until])

    def tick_durations(self, since: int, until: int) -> list[float]:
        """The ``duration_ms`` of every completed tick in (since, until], in order."""
        rows = self._query(self._sql("SELECT json_extract(payload, '$.duration_ms') AS d FROM events"
                                     " WHERE kind = 'tick.completed' AND seq > ? AND seq <= ? ORDER BY seq",
                                     "tick_durations"), [since, until])
        return [float(r["d"]) for r in rows if isinstance(r["d"], int | float)]

    def fleet_rates(self, *, after_seq: int, since_ts: str) -> list[tuple[int, str, float | None]]:
        """(seq, ts, fleet $/h) of every tick's observation after ``after_seq`` and at or after ``since_ts``,
        oldest first. With no ``after_seq`` the time bound becomes a seq bound first, so only tick.started rows
        are read; ``since_ts`` is not applied after that (callers drop older points themselves)."""
        if after_seq == 0:
            # Through the ts index (MIN(seq) ... WHERE ts >= ? would walk the table from seq 1).
            first = self._value(f"SELECT seq FROM events WHERE ts >= {self._p} ORDER BY ts LIMIT 1", [since_ts])
            if first is None:
                return []
            after_seq = int(first) - 1
        rows = self._query(self._sql("SELECT seq, ts, json_extract(payload, '$.observation.fleet_dph') AS dph FROM events"
                                     " WHERE kind = 'tick.started' AND seq > ? ORDER BY seq", "fleet_rates"), [after_seq])
        return [(int(r["seq"]), str(r["ts"]), _num(r["dph"])) for r in rows]

    def last_event_ts(self, kinds: Sequence[str]) -> str | None:
        """The ts of the newest event of any of ``kinds``."""
        marks = self._d.marks(len(kinds))
        v = self._value(f"SELECT ts FROM events WHERE seq = (SELECT MAX(seq) FROM events WHERE kind IN ({marks}))",
                        list(kinds))
        return None if v is None else str(v)

    def tick_request_seqs(self, tick: int) -> list[int]:
        """The seqs of the model requests tick ``tick`` sent, in order."""
        rows = self._query(f"SELECT seq FROM events WHERE kind = 'model.request' AND tick = {self._p} ORDER BY seq", [tick])
        return [int(r["seq"]) for r in rows]

    def latest_tick(self) -> int | None:
        """The tick of the newest ``tick.started`` (tick numbers grow with seq; this reads one index entry
        where MAX(tick) would read every tick.started row)."""
        v = self._value("SELECT tick FROM events WHERE kind = 'tick.started' ORDER BY seq DESC LIMIT 1")
        return None if v is None else int(v)

    def tick_starts(self, limit: int) -> list[tuple[int, int | None, str]]:
        """(seq, tick, ts) of the newest ``limit`` ``tick.started`` events of the table, oldest first: the ticks
        a window spans, without reading their observations."""
        rows = self._query(f"SELECT seq, tick, ts FROM events WHERE kind = 'tick.started' ORDER BY seq DESC LIMIT {self._p}",
                           [limit])
        return [(int(r["seq"]), None if r["tick"] is None else int(r["tick"]), str(r["ts"])) for r in reversed(rows)]

    def events_page(self, *, before: int | None, after: int, kinds: Sequence[str], limit: int) -> list[int]:
        """Seqs for one page of the timeline: newest first below ``before`` (or the newest), above ``after``,
        of the given kind prefixes (``tool.`` matches every tool kind) or all kinds."""
        where: list[str] = [f"seq > {self._p}"]
        args: list[Any] = [after]
        if before is not None:
            where.append(f"seq < {self._p}")
            args.append(before)
        if kinds:
            where.append("(" + " OR ".join(f"kind = {self._p} OR substr(kind, 1, {self._p}) = {self._p}" for _ in kinds) + ")")
            for k in kinds:
                prefix = k.rstrip("*").rstrip(".") + "."
                args += [k, len(prefix), prefix]
        rows = self._query(f"SELECT seq FROM events WHERE {' AND '.join(where)} ORDER BY seq DESC LIMIT {self._p}",
                           [*args, limit])
        return [int(r["seq"]) for r in rows]


    # ------------------------------------------------------------------ money and steering

    def rentals(self) -> list[Rental]:
        """Every instance this agent rented or adopted, with when its rent (or adoption) and its end
        (destroy result or ``instance.gone``) were logged; by id."""
        from agent.store.rows import Rental

        rows = self._query(self._sql(
            "SELECT i.instance_id, i.gpu_name, i.dph, i.label, s.ts AS start_ts, d.ts AS end_ts,"
            " COALESCE(json_extract(s.payload, '$.effect.storage_dph'), json_extract(s.payload, '$.storage_dph'))"
            " AS storage_dph FROM instances i JOIN events s ON s.seq = i.rented_seq"
            " LEFT JOIN events d ON d.seq = i.destroyed_seq ORDER BY i.instance_id", "rentals"))
        return [Rental(**r) for r in rows]

    def observed_runs(self, since_ts: str) -> dict[int, list[tuple[str, str, bool]]]:
        """instance id -> (first ts, last ts, running) for each run of tick observations of an instance of
        ours (consecutive observations in one state) that lasted until ``since_ts`` or later, in log order.
        Reads the spend read model: the runs of a period, not its observations, through the index on last_ts
        (sorted here: an ORDER BY on the key would make SQLite walk the table's every run, since the first)."""
        rows = dialect.run(self._conn, f"SELECT instance_id, first_seq, first_ts, last_ts, running FROM observed_runs"
                                       f" WHERE last_ts >= {self._p}", [since_ts]).fetchall()  # (a month's: tuples)
        out: dict[int, list[tuple[str, str, bool]]] = {}
        for iid, _seq, first, last, running in sorted((int(r[0]), int(r[1]), r[2], r[3], r[4]) for r in rows):
            out.setdefault(iid, []).append((str(first), str(last), bool(running)))
        return out

    def rental_runs(self, since_ts: str) -> dict[int, list[tuple[int, str, str, bool, float | None]]]:
        """``observed_runs`` of the instances this agent rented or adopted only, for a period from ``since_ts``:
        each one's runs from the run before its first that lasted until ``since_ts`` on (its last run when none
        did), in log order. The run before is what makes a period's spend exact: the time between it and the
        next run is billed by both their states, and the time after an instance's last run by that run's. Each
        run as (first seq, first ts, last ts, running, up_s: a running run's uptime at its first observation, as
        vast.ai reported it, or None). Reads each instance's runs of the period and one before,
        by key, not the runs of every instance."""
        p = self._p
        rows = dialect.run(self._conn, (
            "WITH cut AS MATERIALIZED (SELECT i.instance_id AS iid, COALESCE("
            " (SELECT MAX(b.first_seq) FROM observed_runs b WHERE b.instance_id = i.instance_id AND b.first_seq <"
            f"   (SELECT MIN(k.first_seq) FROM observed_runs k WHERE k.instance_id = i.instance_id AND k.last_ts >= {p})),"
            f" (SELECT MIN(k.first_seq) FROM observed_runs k WHERE k.instance_id = i.instance_id AND k.last_ts >= {p}),"
            " (SELECT MAX(k.first_seq) FROM observed_runs k WHERE k.instance_id = i.instance_id)) AS from_seq"
            " FROM instances i)"
            " SELECT o.instance_id, o.first_seq, o.first_ts, o.last_ts, o.running, o.up_s FROM cut"
            " JOIN observed_runs o ON o.instance_id = cut.iid AND o.first_seq >= cut.from_seq"),
            [since_ts, since_ts]).fetchall()
        out: dict[int, list[tuple[int, str, str, bool, float | None]]] = {}
        for iid, seq, first, last, running, up in sorted((int(r[0]), int(r[1]), r[2], r[3], r[4], r[5]) for r in rows):
            out.setdefault(iid, []).append((seq, str(first), str(last), bool(running),
                                            float(up) if up is not None else None))
        return out

    def hashes_of(self, seqs: Sequence[int]) -> dict[int, str]:
        """seq -> chain hash of those of ``seqs`` the events table holds (an archived event is in its segment)."""
        out: dict[int, str] = {}
        wanted = sorted(set(seqs))
        for n in range(0, len(wanted), 500):
            chunk = wanted[n:n + 500]
            rows = dialect.run(self._conn, f"SELECT seq, hash FROM events WHERE seq IN ({', '.join([self._p] * len(chunk))})",
                               chunk).fetchall()
            out.update((int(r[0]), str(r[1])) for r in rows)
        return out

    def host_failures_since(self, host_id: int, ts: str) -> int:
        """``host.failed`` events for ``host_id`` logged at or after ``ts``."""
        return int(self._value(self._sql("SELECT COUNT(*) FROM events WHERE kind = 'host.failed' AND ts >= ?"
                                         " AND json_extract(payload, '$.host_id') = ?", "host_failures"), [ts, host_id]))

    def host_failure_logged(self, instance_id: int, status: str) -> bool:
        """Whether a ``host.failed`` for this instance entering ``status`` is already logged."""
        return self._value(self._sql("SELECT 1 FROM events WHERE kind = 'host.failed'"
                                     " AND json_extract(payload, '$.instance_id') = ?"
                                     " AND json_extract(payload, '$.status') = ? LIMIT 1", "host_failure_logged"),
                           [instance_id, status]) is not None

    # ------------------------------------------------------------------ storage tiers (agent/store/archive.py)

    def segments(self) -> list[Segment]:
        """Every sealed segment's stub, in seq order ([] on a database from before segments existed)."""
        from agent.store.segment_types import Segment

        try:
            return [Segment(**r) for r in self._rows("segments", order_by="first_seq")]
        except sqlite3.OperationalError as e:
            if "no such table" in str(e):
                return []
            raise

    def data_version(self) -> int:
        """SQLite's data_version: changes whenever another connection commits to the database."""
        return int(self._value("PRAGMA data_version"))

    def month_spans(self, after: int) -> list[tuple[str, int, int, int]]:
        """(YYYY-MM, first seq, last seq, events) of each calendar month of the events after ``after``,
        in seq order."""
        rows = self._query("SELECT substr(ts, 1, 7) AS m, MIN(seq) AS a, MAX(seq) AS b, COUNT(*) AS n FROM events"
                           f" WHERE seq > {self._p} GROUP BY m ORDER BY a", [after])
        return [(str(r["m"]), int(r["a"]), int(r["b"]), int(r["n"])) for r in rows]

    def last_seq_before(self, ts: str) -> int:
        """The newest seq logged before ``ts`` (0 when none), through the ts index."""
        v = self._value(f"SELECT seq FROM events WHERE ts < {self._p} ORDER BY ts DESC LIMIT 1", [ts])
        return 0 if v is None else int(v)

    def retained_seqs(self, first: int, last: int) -> set[int]:
        """Events in [first, last] that stay in the hot table when their month is archived, because a live
        query reads them by seq: each knowledge file's newest text, and every recorded request input."""
        rows = self._query(f"SELECT seq FROM knowledge k WHERE hash IS NOT NULL AND seq BETWEEN {self._p} AND {self._p} AND version ="
                           " (SELECT MAX(version) FROM knowledge WHERE name = k.name)"
                           f" UNION SELECT seq FROM events WHERE kind = 'input.recorded' AND seq BETWEEN {self._p} AND {self._p}",
                           [first, last, first, last])
        return {int(r["seq"]) for r in rows}

    def vacuum(self) -> None:
        """Rewrite the database file without the pages archived rows left free."""
        self._conn.execute("VACUUM")

    def hot_events_after(self, seq: int) -> int:
        """Rows in the events table after ``seq``."""
        return int(self._value(f"SELECT COUNT(*) FROM events WHERE seq > {self._p}", [seq]))

    # ------------------------------------------------------------------ the file's pages (SQLite; bench/storage.py)

    def page_size(self) -> int:
        """The database file's page size in bytes."""
        return int(self._value("PRAGMA page_size"))

    def checkpoint(self) -> int:
        """Copy every frame of the write-ahead log into the database file and truncate the log to 0 bytes;
        the number of frames it held (each one page plus a 24-byte header)."""
        frames = self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1]  # TRUNCATE reports 0
        busy = self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        if busy:
            raise sqlite3.OperationalError("the write-ahead log could not be checkpointed: another connection reads")
        return int(frames)

    def compact(self, page_size: int) -> None:
        """Rewrite the database file with ``page_size``-byte pages and no free pages (VACUUM, which changes the
        page size only outside WAL mode), then go back to WAL mode. Leaving WAL mode needs every other
        connection to the file closed; one that stays open makes this fail after the busy timeout."""
        mode = self._conn.execute("PRAGMA journal_mode = DELETE").fetchone()[0]
        if str(mode).lower() != "delete":
            raise sqlite3.OperationalError("another connection has the database open; close it and run again")
        try:
            self._conn.execute(f"PRAGMA page_size = {int(page_size)}")
            self._conn.execute("VACUUM")
        finally:
            self._conn.execute("PRAGMA journal_mode = WAL")

    def autocheckpoint(self, pages: int) -> None:
        """Checkpoint this connection's commits once the write-ahead log holds ``pages`` frames (0: never)."""
        self._conn.execute(f"PRAGMA wal_autocheckpoint = {int(pages)}")

    # ------------------------------------------------------------------ the tick's batched reads

    def known_instance_ids(self, ids: Iterable[int]) -> set[int]:
        """Which of ``ids`` the log knows in any state (``instance`` is not None): one query for a whole
        listing, by primary key, instead of one a listed instance."""
        wanted = sorted({int(i) for i in ids})
        known: set[int] = set()
        for n in range(0, len(wanted), 500):
            chunk = wanted[n:n + 500]
            rows = self._rows("instances", f"instance_id IN ({self._d.marks(len(chunk))})", chunk,
                              select="instance_id")
            known.update(int(r["instance_id"]) for r in rows)
        return known

    # ------------------------------------------------------------------ what a tick keeps between writes

    def every_live_alert(self) -> list[Alert]:
        """Every live alert (open, or acked while its condition persists), oldest first: ``live_alerts``
        without a key, which ``agent.feedback.alerts`` keeps between writes and filters."""
        sql = _LIVE_ALERTS_PG if self._pg else _LIVE_ALERTS
        return [Alert(**r) for r in self._query(sql.format(where="a.status IN ('open', 'acked')"))]


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None



def _intent(r: dict[str, Any]) -> Intent:
    from agent.store.rows import Intent

    ok = r["ok"]
    return Intent(call_id=r["call_id"], idem_key=r["idem_key"], tool=r["tool"], arguments=r["arguments"],
                  called_seq=r["called_seq"], result_seq=r["result_seq"], ok=None if ok is None else bool(ok))


def _directive(r: dict[str, Any]) -> Directive:
    from agent.store.rows import Directive

    return Directive(id=r["id"], text=r["text"], by=r["by"], ts=r["ts"], active=bool(r["active"]),
                     unpinned_seq=r["unpinned_seq"])
