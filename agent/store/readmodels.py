"""Read models: tables derived from the log, kept in step in the same transaction.

Each projector takes the connection (inside the append transaction) and the
event just written. ``rebuild`` replays the whole log into a fresh database and
``diff`` compares it with the live tables, so a read model can never silently
drift from the log that is the truth.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from agent.events import Event
from agent.store.db import database, sqlite3

Projector = Callable[[sqlite3.Connection, Event], None]

# The read-model tables (schema.sql, migrations 002_read_models, 003_alert_silences, 006_instance_states and
# 007_observed_runs); each is compared in primary-key order.
TABLES = ("alerts", "memory", "directives", "instances", "intents", "knowledge", "silences", "instance_states",
          "observed_runs")
# Each table's primary key (on PostgreSQL after the fleet's agent_id).
KEYS = {"alerts": "id", "memory": "key", "directives": "id", "instances": "instance_id", "intents": "call_id",
        "knowledge": "name, version", "silences": "id", "instance_states": "instance_id",
        "observed_runs": "instance_id, first_seq"}


def _alert_raised(c: sqlite3.Connection, e: Event) -> None:
    p = e.payload
    c.execute(
        "INSERT INTO alerts (id, dedup_key, severity, title, detail, raised_by, status, count, first_seq, last_seq,"
        " first_ts, last_ts) VALUES (?,?,?,?,?,?,'open',1,?,?,?,?)",
        (p["alert_id"], p["dedup_key"], p["severity"], p["title"], p.get("detail") or "", p["raised_by"],
         e.seq, e.seq, e.ts, e.ts),
    )


def _alert_repeated(c: sqlite3.Connection, e: Event) -> None:
    c.execute("UPDATE alerts SET count = ?, last_seq = ?, last_ts = ? WHERE id = ?",
              (e.payload["count"], e.seq, e.ts, e.payload["alert_id"]))


def _alert_acked(c: sqlite3.Connection, e: Event) -> None:
    c.execute("UPDATE alerts SET status = 'acked', acked_by = ?, ack_note = ?, closed_seq = ? WHERE id = ?",
              (e.payload["by"], e.payload.get("note"), e.seq, e.payload["alert_id"]))


def _alert_resolved(c: sqlite3.Connection, e: Event) -> None:
    c.execute("UPDATE alerts SET status = 'resolved', closed_seq = ? WHERE id = ? AND status IN ('open', 'acked')",
              (e.seq, e.payload["alert_id"]))


def _alert_retitled(c: sqlite3.Connection, e: Event) -> None:
    c.execute("UPDATE alerts SET title = ? WHERE id = ?", (e.payload["title"], e.payload["alert_id"]))


def _alert_severity_changed(c: sqlite3.Connection, e: Event) -> None:
    c.execute("UPDATE alerts SET severity = ? WHERE id = ?", (e.payload["severity"], e.payload["alert_id"]))


def _alert_notified(c: sqlite3.Connection, e: Event) -> None:
    for a in e.payload["alerts"]:
        c.execute("UPDATE alerts SET notified_ts = ?, notified_reason = ? WHERE id = ?",
                  (e.ts, e.payload["reason"], a["alert_id"]))


def _alert_silenced(c: sqlite3.Connection, e: Event) -> None:
    p = e.payload
    c.execute("INSERT INTO silences (id, alert_id, key_pattern, until_ts, reason, by, ts) VALUES (?,?,?,?,?,?,?)",
              (e.seq, p.get("alert_id"), p.get("key_pattern"), p["until"], p["reason"], p["by"], e.ts))


def _alert_unsilenced(c: sqlite3.Connection, e: Event) -> None:
    c.execute("UPDATE silences SET lifted_seq = ? WHERE id = ? AND lifted_seq IS NULL",
              (e.seq, e.payload["silence_id"]))


def _memory_written(c: sqlite3.Connection, e: Event) -> None:
    c.execute("INSERT INTO memory (key, text, seq, ts) VALUES (?,?,?,?) ON CONFLICT(key) DO UPDATE SET"
              " text = excluded.text, seq = excluded.seq, ts = excluded.ts",
              (e.payload["key"], e.payload["text"], e.seq, e.ts))


def _memory_deleted(c: sqlite3.Connection, e: Event) -> None:
    c.execute("DELETE FROM memory WHERE key = ?", (e.payload["key"],))


def _note(c: sqlite3.Connection, e: Event) -> None:
    if e.payload.get("pin"):
        c.execute("INSERT INTO directives (id, text, by, ts, active) VALUES (?,?,?,?,1)",
                  (e.seq, e.payload["text"], e.payload["by"], e.ts))


def _unpinned(c: sqlite3.Connection, e: Event) -> None:
    c.execute("UPDATE directives SET active = 0, unpinned_seq = ? WHERE id = ? AND active = 1",
              (e.seq, e.payload["directive_id"]))


def _tool_called(c: sqlite3.Connection, e: Event) -> None:
    if e.payload.get("side_effect"):
        c.execute("INSERT INTO intents (call_id, idem_key, tool, arguments, called_seq) VALUES (?,?,?,?,?)",
                  (e.payload["call_id"], e.payload.get("idempotency_key"), e.payload["name"],
                   e.payload["arguments"], e.seq))


def _tool_result(c: sqlite3.Connection, e: Event) -> None:
    p = e.payload
    eff = p.get("effect") or {}
    # A rent answered "pending" has a result but no outcome yet: ok stays NULL until it settles.
    ok = None if eff.get("type") == "rent_pending" else int(bool(p["ok"]))
    c.execute("UPDATE intents SET result_seq = ?, ok = ? WHERE call_id = ? AND result_seq IS NULL",
              (e.seq, ok, p["call_id"]))
    if eff.get("type") == "rented" and eff.get("instance_id") is not None:
        c.execute(
            "INSERT INTO instances (instance_id, label, idem_key, offer_id, gpu_name, dph, rented_seq, status)"
            " VALUES (?,?,?,?,?,?,?,'active') ON CONFLICT(instance_id) DO NOTHING",
            (eff["instance_id"], eff.get("label") or "", eff.get("idem_key"), eff.get("offer_id"),
             eff.get("gpu_name"), eff.get("dph"), e.seq),
        )
    elif eff.get("type") == "destroyed" and eff.get("instance_id") is not None:
        c.execute("UPDATE instances SET status = 'destroyed', destroyed_seq = ? WHERE instance_id = ?"
                  " AND status = 'active'", (e.seq, eff["instance_id"]))


def _adopted(c: sqlite3.Connection, e: Event) -> None:
    p = e.payload
    if p.get("idem_key"):  # a pending rent whose label showed up: it was created
        c.execute("UPDATE intents SET ok = 1 WHERE tool = 'rent_instance' AND idem_key = ?"
                  " AND result_seq IS NOT NULL AND ok IS NULL", (p["idem_key"],))
    c.execute(
        "INSERT INTO instances (instance_id, label, idem_key, gpu_name, dph, rented_seq, status)"
        " VALUES (?,?,?,?,?,?,'active') ON CONFLICT(instance_id) DO NOTHING",
        (p["instance_id"], p["label"], p.get("idem_key"), p.get("gpu_name"), p.get("dph"), e.seq),
    )


def _gone(c: sqlite3.Connection, e: Event) -> None:
    c.execute("UPDATE instances SET status = 'destroyed', destroyed_seq = ? WHERE instance_id = ?"
              " AND status = 'active'", (e.seq, e.payload["instance_id"]))


def _rent_settled(c: sqlite3.Connection, e: Event) -> None:
    c.execute("UPDATE intents SET ok = ? WHERE call_id = ? AND ok IS NULL",
              (int(bool(e.payload["created"])), e.payload["call_id"]))


def _tick_started(c: sqlite3.Connection, e: Event) -> None:
    """Each listed instance's status and since when (kept while the status stays the same); instances
    the listing no longer shows are dropped. The table holds only what the last listing showed: it is
    read whole, once, and written in two statements (the rows kept and the rows whose status changed)."""
    obs = e.payload.get("observation") or {}
    now = obs.get("time")
    listed = [i for i in obs.get("instances") or [] if isinstance(i.get("id"), int)]
    if listed:
        status_of = dict(c.execute("SELECT instance_id, status FROM instance_states").fetchall())
        kept: list[tuple[Any, ...]] = []
        changed: dict[int, list[Any]] = {}  # a listing that names an id twice: its row as the second leaves it
        for i in listed:
            status = str(i.get("status") or "provisioning")
            if status_of.get(i["id"]) == status:
                if i["id"] in changed:
                    changed[i["id"]][2] = i.get("intended")
                else:
                    kept.append((i.get("intended"), e.seq, i["id"]))
                continue
            since = i.get("since", now)
            changed[i["id"]] = [i["id"], status, i.get("intended"),
                                float(since if isinstance(since, int | float) else 0.0), e.seq]
            status_of[i["id"]] = status
        if kept:
            c.executemany("UPDATE instance_states SET intended = ?, seen_seq = ? WHERE instance_id = ?", kept)
        if changed:
            c.executemany("INSERT INTO instance_states (instance_id, status, intended, since, seen_seq)"
                          " VALUES (?,?,?,?,?) ON CONFLICT(instance_id) DO UPDATE SET status = excluded.status,"
                          " intended = excluded.intended, since = excluded.since, seen_seq = excluded.seen_seq",
                          list(changed.values()))
    c.execute("DELETE FROM instance_states WHERE seen_seq <> ?", (e.seq,))
    _observed_runs(c, e, obs)


def _observed_runs(c: sqlite3.Connection, e: Event, obs: dict[str, Any]) -> None:
    """Each instance of ours the observation lists extends its last run when its state (running or not) is
    the same, else starts a new one: what spend reads (migration 007 fills it from older logs alike). The
    last runs of all of them are read in one statement, and written in two."""
    ours = [(int(i["id"]), int(i.get("status") == "running")) for i in obs.get("instances") or []
            if isinstance(i, dict) and isinstance(i.get("id"), int) and i.get("ours") == 1]
    if not ours:
        return
    ids = sorted({iid for iid, _ in ours})
    last: dict[int, tuple[int, int]] = {}
    for n in range(0, len(ids), 500):
        chunk = ids[n:n + 500]
        rows = c.execute("SELECT o.instance_id, o.first_seq, o.running FROM observed_runs o"
                         f" WHERE o.instance_id IN ({','.join('?' * len(chunk))}) AND o.first_seq ="
                         " (SELECT MAX(first_seq) FROM observed_runs WHERE instance_id = o.instance_id)",
                         chunk).fetchall()
        last.update((int(r[0]), (int(r[1]), int(r[2]))) for r in rows)
    extended: list[tuple[Any, ...]] = []
    started: list[tuple[Any, ...]] = []
    for iid, running in ours:
        row = last.get(iid)
        if row is not None and row[1] == running:
            extended.append((e.seq, e.ts, iid, row[0]))
        else:
            started.append((iid, e.seq, e.ts, e.seq, e.ts, running))
            last[iid] = (e.seq, running)
    if extended:
        c.executemany("UPDATE observed_runs SET last_seq = ?, last_ts = ? WHERE instance_id = ? AND first_seq = ?",
                      extended)
    if started:
        c.executemany("INSERT INTO observed_runs (instance_id, first_seq, first_ts, last_seq, last_ts, running)"
                      " VALUES (?,?,?,?,?,?)", started)


def _knowledge(c: sqlite3.Connection, e: Event) -> None:
    p = e.payload
    row = c.execute("SELECT COALESCE(MAX(version), 0) FROM knowledge WHERE name = ?", (p["name"],)).fetchone()
    c.execute("INSERT INTO knowledge (name, version, hash, size, seq, ts, change) VALUES (?,?,?,?,?,?,?)",
              (p["name"], row[0] + 1, p.get("hash"), p["size"], e.seq, e.ts, p["change"]))


PROJECTORS: dict[str, Projector] = {
    "alert.raised": _alert_raised,
    "alert.repeated": _alert_repeated,
    "alert.acked": _alert_acked,
    "alert.resolved": _alert_resolved,
    "alert.retitled": _alert_retitled,
    "alert.severity_changed": _alert_severity_changed,
    "alert.notified": _alert_notified,
    "alert.silenced": _alert_silenced,
    "alert.unsilenced": _alert_unsilenced,
    "memory.written": _memory_written,
    "memory.deleted": _memory_deleted,
    "operator.note": _note,
    "directive.unpinned": _unpinned,
    "tool.called": _tool_called,
    "tool.result": _tool_result,
    "knowledge.changed": _knowledge,
    "instance.adopted": _adopted,
    "instance.gone": _gone,
    "rent.settled": _rent_settled,
    "tick.started": _tick_started,
}

def apply(conn: sqlite3.Connection, event: Event) -> None:
    proj = PROJECTORS.get(event.kind)
    if proj is not None:
        proj(conn, event)


class _Runs:
    """What projectors write, sent as runs: consecutive writes of one statement go to the database as one
    ``executemany`` (which runs them one by one, in order), so the statements run in exactly the order the
    projectors issued them. A read (SELECT) first sends what is pending, so it sees every earlier write."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.sql = ""
        self.rows: list[Any] = []

    def execute(self, sql: str, params: Any = ()) -> Any:
        if sql.startswith("SELECT"):
            self.flush()
            return self.conn.execute(sql, params)
        if sql != self.sql:
            self.flush()
            self.sql = sql
        self.rows.append(params)
        return None

    def executemany(self, sql: str, rows: Iterable[Any]) -> None:
        for params in rows:
            self.execute(sql, params)

    def flush(self) -> None:
        rows, self.rows = self.rows, []
        if len(rows) == 1:
            self.conn.execute(self.sql, rows[0])
        elif rows:
            self.conn.executemany(self.sql, rows)


def apply_many(conn: sqlite3.Connection, events: Iterable[Event]) -> None:
    """``apply`` each event in order (the append path of a batch): the same statements in the same order,
    a run of one statement sent in one call."""
    runs = _Runs(conn)
    target: Any = runs  # a projector only executes statements on what it is given
    for event in events:
        proj = PROJECTORS.get(event.kind)
        if proj is not None:
            proj(target, event)
    runs.flush()


def snapshot(conn: sqlite3.Connection) -> dict[str, list[tuple[Any, ...]]]:
    """Every read-model row, table by table, in primary-key order (on PostgreSQL without the agent_id
    column: row-level security shows this fleet's rows only)."""
    if getattr(conn, "dialect", "sqlite") == "postgresql":
        return {t: [tuple(r[1:]) for r in conn.execute(f"SELECT * FROM {t} ORDER BY {KEYS[t]}").fetchall()]
                for t in TABLES}
    db = database(conn)
    out: dict[str, list[tuple[Any, ...]]] = {}
    for t in TABLES:
        table = db.table(t)
        out[t] = [tuple(r.values()) for r in table.rows_where(order_by=", ".join(table.pks))]
    return out


def clear(conn: sqlite3.Connection) -> None:
    """Empty every read-model table (inside the caller's transaction), ready for a replay."""
    if getattr(conn, "dialect", "sqlite") == "postgresql":
        for t in TABLES:
            conn.execute(f"DELETE FROM {t}")
        return
    db = database(conn)
    for t in TABLES:
        db.table(t).delete_where()


def rebuild(events: Iterable[Event]) -> sqlite3.Connection:
    """A fresh in-memory database whose read models are rebuilt from ``events`` alone."""
    from agent.store.db import _statements, migrations

    mem = sqlite3.connect(":memory:", isolation_level=None)
    for _name, sql in migrations():  # the events table too (empty): later migrations may read it
        for stmt in _statements(sql):
            mem.execute(stmt)
    mem.execute("BEGIN")
    for e in events:
        apply(mem, e)
    mem.execute("COMMIT")
    return mem


def diff(live: sqlite3.Connection, rebuilt: sqlite3.Connection) -> list[str]:
    """Human-readable differences between the live read models and a rebuild."""
    a, b = snapshot(live), snapshot(rebuilt)
    out = []
    for table in TABLES:
        la, lb = set(a[table]), set(b[table])
        for row in sorted(la - lb, key=repr)[:20]:
            out.append(f"{table}: live has {json.dumps(row, default=str)} which the log does not")
        for row in sorted(lb - la, key=repr)[:20]:
            out.append(f"{table}: the log implies {json.dumps(row, default=str)} which live lacks")
    return out
