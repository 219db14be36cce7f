"""Every question the program asks of the database: one named method each.

Callers hold a ``Store`` (``log.store``, or ``tx.store`` inside an append
transaction, which then sees that transaction's own writes) and never see SQL
or a connection. The SQL dialect stays here and in the rest of agent/store:
the seam where another database backend would plug in.

Rows are read through sqlite-utils (``Table.rows_where`` gives dicts keyed by
column name; the joins and event queries map their columns the same way) and
handed out as small frozen dataclasses or plain values, never positional tuples.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from agent.store.db import database, sqlite3
from agent.store.readmodels import TABLES as READ_MODEL_TABLES

__all__ = ["Alert", "Directive", "FailedRun", "Instance", "Intent", "KnowledgeVersion", "Memory", "OpenTick",
           "Store"]


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


@dataclass(frozen=True)
class Instance:
    """An instance this agent rented or adopted (the ownership read model)."""

    instance_id: int
    label: str
    idem_key: str | None
    offer_id: int | None
    gpu_name: str | None
    dph: float | None
    rented_seq: int
    status: str  # active | destroyed
    destroyed_seq: int | None = None


@dataclass(frozen=True)
class Intent:
    """A side-effecting tool call; ``result_seq`` None while its outcome is not logged."""

    call_id: str
    idem_key: str | None
    tool: str
    arguments: str  # the call's arguments as the model sent them (JSON text)
    called_seq: int
    result_seq: int | None = None
    ok: bool | None = None


@dataclass(frozen=True)
class Directive:
    """A standing operator directive; ``id`` is the seq of its ``operator.note``."""

    id: int
    text: str
    by: str
    ts: str
    active: bool
    unpinned_seq: int | None = None


@dataclass(frozen=True)
class KnowledgeVersion:
    """One logged version of a knowledge file; ``hash`` None when the file was removed."""

    name: str
    version: int
    hash: str | None
    size: int
    seq: int
    ts: str
    change: str  # added | changed | removed


@dataclass(frozen=True)
class Memory:
    """One entry of the agent's memory (remember / forget)."""

    key: str
    text: str
    seq: int
    ts: str


@dataclass(frozen=True)
class OpenTick:
    """The newest tick that started and has neither completed nor failed."""

    tick: int
    seq: int  # of its tick.started
    ts: str


@dataclass(frozen=True)
class FailedRun:
    """The ticks that failed in a row at the end of the log, and the newest failure's reason."""

    count: int
    latest_reason: str | None


_LIVE_ALERTS = """
SELECT a.* FROM alerts a
WHERE {where} AND (a.status = 'open' OR (a.status = 'acked' AND NOT EXISTS (
    SELECT 1 FROM events e WHERE e.kind = 'alert.resolved' AND e.seq > a.closed_seq
      AND json_extract(e.payload, '$.alert_id') = a.id)))
ORDER BY a.id
"""

_INTENTS_SINCE = ("SELECT COUNT(*) FROM intents i JOIN events e ON e.seq = i.called_seq "
                  "WHERE i.tool = ? AND e.ts >= ?")


class Store:
    """The queries against one connection: the log's own, or the one an append transaction holds open."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._db = database(conn)

    # ------------------------------------------------------------------ plumbing

    def _rows(self, table: str, where: str | None = None, args: Sequence[Any] = (), *,
              order_by: str | None = None, limit: int | None = None, select: str = "*") -> list[dict[str, Any]]:
        return list(self._db.table(table).rows_where(where, list(args), order_by=order_by, limit=limit,
                                                     select=select))

    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[dict[str, Any]]:
        # Database.execute, not Database.query: query() wraps each read in a SAVEPOINT, which would
        # open a transaction of its own on a connection that is outside one.
        cur = self._db.execute(sql, list(args))
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]

    def _value(self, sql: str, args: Sequence[Any] = ()) -> Any:
        row = self._db.execute(sql, list(args)).fetchone()
        return None if row is None else row[0]

    # ------------------------------------------------------------------ alerts

    def alerts(self, *, all_: bool = False) -> list[Alert]:
        """Open alerts, or every alert ever raised with ``all_``; by id."""
        rows = self._rows("alerts", None if all_ else "status = 'open'", order_by="id")
        return [Alert(**r) for r in rows]

    def open_alerts(self) -> list[Alert]:
        """The alerts open now, oldest first."""
        return self.alerts()

    def alert(self, alert_id: int) -> Alert | None:
        rows = self._rows("alerts", "id = ?", [alert_id])
        return Alert(**rows[0]) if rows else None

    def live_alerts(self, *, key: str | None = None, prefix: str | None = None) -> list[Alert]:
        """Alerts whose condition still holds (open, or acked and not resolved since), by exact
        dedup key or by key prefix; oldest first."""
        if key is not None:
            rows = self._query(_LIVE_ALERTS.format(where="a.dedup_key = ?"), [key])
        elif prefix is not None:
            rows = self._query(_LIVE_ALERTS.format(where="substr(a.dedup_key, 1, ?) = ?"), [len(prefix), prefix])
        else:
            raise ValueError("live_alerts needs a key or a prefix")
        return [Alert(**r) for r in rows]

    def next_alert_id(self) -> int:
        return int(self._value("SELECT COALESCE(MAX(id), 0) + 1 FROM alerts"))

    def alert_history_seqs(self, alert_id: int) -> list[int]:
        """The seqs of every event about alert ``alert_id`` (raised, repeated, acked, resolved), in order."""
        rows = self._query("SELECT seq FROM events WHERE kind LIKE 'alert.%'"
                           " AND json_extract(payload, '$.alert_id') = ? ORDER BY seq", [alert_id])
        return [int(r["seq"]) for r in rows]

    # ------------------------------------------------------------------ instances and intents

    def owned_instances(self) -> list[Instance]:
        """The instances this agent owns now (active), by id."""
        return [Instance(**r) for r in self._rows("instances", "status = 'active'", order_by="instance_id")]

    def owned_instance_ids(self) -> list[int]:
        return [i.instance_id for i in self.owned_instances()]

    def instance(self, instance_id: int) -> Instance | None:
        rows = self._rows("instances", "instance_id = ?", [instance_id])
        return Instance(**rows[0]) if rows else None

    def instance_states(self) -> dict[int, InstanceState]:
        """Every instance the last observation listed: its status and since when (fleet clock)."""
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
        return int(self._value("SELECT COUNT(*) FROM events WHERE seq > ? AND kind = ?", [seq, kind]))

    def rent_keys(self) -> set[str]:
        """Every idempotency key a rent intent was ever logged with."""
        rows = self._rows("intents", "tool = 'rent_instance' AND idem_key IS NOT NULL")
        return {str(r["idem_key"]) for r in rows}

    def rents_since(self, ts: str) -> int:
        """Rent intents logged at or after ``ts`` (each may have spent money)."""
        return int(self._value(_INTENTS_SINCE, ["rent_instance", ts]))

    def destroys_since(self, ts: str) -> int:
        return int(self._value(_INTENTS_SINCE, ["destroy_instance", ts]))

    # ------------------------------------------------------------------ memory and directives

    def memories(self) -> list[Memory]:
        return [Memory(**r) for r in self._rows("memory", order_by="key")]

    def memory_has(self, key: str) -> bool:
        return bool(self._rows("memory", "key = ?", [key], limit=1))

    def active_directives(self) -> list[Directive]:
        """The directives in force, oldest first."""
        return [_directive(r) for r in self._rows("directives", "active = 1", order_by="id")]

    def directive(self, directive_id: int) -> Directive | None:
        rows = self._rows("directives", "id = ?", [directive_id])
        return _directive(rows[0]) if rows else None

    # ------------------------------------------------------------------ knowledge

    def recorded_input_hashes(self) -> set[str]:
        """The sha256 of every request input (prompt, policy, tool schemas) already logged in full."""
        rows = self._query("SELECT json_extract(payload, '$.sha256') AS h FROM events WHERE kind = 'input.recorded'")
        return {str(r["h"]) for r in rows}

    def knowledge_names(self) -> list[str]:
        """Every knowledge file name the log has seen (removed ones included), sorted."""
        return [str(r["name"]) for r in self._query("SELECT DISTINCT name FROM knowledge ORDER BY name")]

    def knowledge_latest(self) -> dict[str, KnowledgeVersion]:
        """name -> the newest logged version of each knowledge file."""
        rows = self._query("SELECT k.* FROM knowledge k WHERE k.version ="
                           " (SELECT MAX(version) FROM knowledge WHERE name = k.name) ORDER BY k.name")
        return {r["name"]: KnowledgeVersion(**r) for r in rows}

    def knowledge_versions(self, name: str) -> list[KnowledgeVersion]:
        """Every logged version of ``name``, oldest first."""
        return [KnowledgeVersion(**r) for r in self._rows("knowledge", "name = ?", [name], order_by="version")]

    def knowledge_text(self, name: str) -> str | None:
        """The newest full text of ``name`` as logged (None: never seen, or removed)."""
        rows = self._rows("knowledge", "name = ?", [name], order_by="version DESC", limit=1)
        if not rows or rows[0]["hash"] is None:
            return None
        payload = self._value("SELECT payload FROM events WHERE seq = ?", [rows[0]["seq"]])
        if payload is None:
            return None
        text = json.loads(payload).get("text")
        return text if isinstance(text, str) else None

    # ------------------------------------------------------------------ ticks and the thread

    def next_tick_number(self) -> int:
        """One past the highest tick that started or failed."""
        top = self._value("SELECT MAX(tick) FROM events WHERE kind IN ('tick.started', 'tick.failed')")
        return int(top or 0) + 1

    def open_tick(self) -> OpenTick | None:
        """The newest tick that has ``tick.started`` but neither ``tick.completed`` nor ``tick.failed``
        after it (running now, or interrupted)."""
        rows = self._query("SELECT tick, seq, ts FROM events WHERE kind = 'tick.started' ORDER BY seq DESC LIMIT 1")
        if not rows or rows[0]["tick"] is None:
            return None
        start = rows[0]
        done = self._value("SELECT 1 FROM events WHERE kind IN ('tick.completed', 'tick.failed')"
                           " AND tick = ? AND seq > ? LIMIT 1", [start["tick"], start["seq"]])
        return None if done else OpenTick(int(start["tick"]), int(start["seq"]), str(start["ts"]))

    def consecutive_failed_ticks(self, cap: int = 1000) -> FailedRun:
        """How many ticks failed in a row at the end of the log (looking back at most ``cap`` tick ends)."""
        rows = self._query("SELECT kind, payload FROM events WHERE kind IN ('tick.failed', 'tick.completed')"
                           " ORDER BY seq DESC LIMIT ?", [cap])
        n, reason = 0, None
        for r in rows:
            if r["kind"] != "tick.failed":
                break
            if reason is None:
                reason = json.loads(r["payload"]).get("reason")
            n += 1
        return FailedRun(n, reason)

    def thread_tokens_since(self, seq: int) -> int:
        """Tokens of the model-visible events after ``seq``."""
        return int(self._value("SELECT COALESCE(SUM(tokens), 0) FROM events WHERE seq > ? AND tokens IS NOT NULL",
                               [seq]))

    def event_hashes(self) -> dict[int, str]:
        """seq -> hash of every event, in seq order (the chain as stored, unchecked)."""
        return {int(r["seq"]): str(r["hash"]) for r in self._rows("events", order_by="seq", select="seq, hash")}

    def search_index_size(self) -> int:
        """Rows in the full-text index (one per event)."""
        return self._db.table("events_fts").count

    # ------------------------------------------------------------------ the file itself

    def quick_check(self) -> list[str]:
        """SQLite's quick_check: ["ok"], or the problems it found (an unreadable file is one)."""
        return self._check("PRAGMA quick_check")

    def integrity_check(self) -> list[str]:
        """SQLite's full integrity_check: ["ok"], or the problems it found."""
        return self._check("PRAGMA integrity_check")

    def _check(self, pragma: str) -> list[str]:
        try:
            return [str(r[0]) for r in self._db.execute(pragma).fetchall()]
        except sqlite3.DatabaseError as e:
            return [str(e)]

    def row_counts(self, tables: Iterable[str] = READ_MODEL_TABLES) -> dict[str, int]:
        """table -> rows, for each read-model table."""
        return {t: self._db.table(t).count for t in tables}


@dataclass(frozen=True)
class InstanceState:
    """What vast.ai last reported for an instance, and since when it has reported it."""

    instance_id: int
    status: str
    intended: str | None
    since: float
    seen_seq: int


def _intent(r: dict[str, Any]) -> Intent:
    ok = r["ok"]
    return Intent(call_id=r["call_id"], idem_key=r["idem_key"], tool=r["tool"], arguments=r["arguments"],
                  called_seq=r["called_seq"], result_seq=r["result_seq"], ok=None if ok is None else bool(ok))


def _directive(r: dict[str, Any]) -> Directive:
    return Directive(id=r["id"], text=r["text"], by=r["by"], ts=r["ts"], active=bool(r["active"]),
                     unpinned_seq=r["unpinned_seq"])
