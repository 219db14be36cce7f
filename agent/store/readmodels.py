"""Read models: tables derived from the log, kept in step in the same transaction.

Each projector takes the connection (inside the append transaction) and the
event just written. ``rebuild`` replays the whole log into a fresh database and
``diff`` compares it with the live tables, so a read model can never silently
drift from the log that is the truth.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from agent.events import Event
from agent.store import dialect
from agent.store.db import database, sqlite3


class Target(Protocol):
    """What a projector writes through: statements written in ``d``, sent as they are."""

    d: dialect.Dialect

    def run(self, sql: str, params: Any = ...) -> Any: ...

    def run_many(self, sql: str, rows: Iterable[Any]) -> Any: ...


Projector = Callable[[Target, Event], None]

# The read-model tables (schema.sql, migrations 002_read_models, 003_alert_silences, 006_instance_states and
# 007_observed_runs); each is compared in primary-key order.
TABLES = ("alerts", "memory", "directives", "instances", "intents", "knowledge", "silences", "instance_states",
          "observed_runs")
# Each table's primary key (on PostgreSQL after the fleet's agent_id).
KEYS = {"alerts": "id", "memory": "key", "directives": "id", "instances": "instance_id", "intents": "call_id",
        "knowledge": "name, version", "silences": "id", "instance_states": "instance_id",
        "observed_runs": "instance_id, first_seq"}


def _alert_raised(c: Target, e: Event) -> None:
    p = e.payload
    c.run(
        "INSERT INTO alerts (id, dedup_key, severity, title, detail, raised_by, status, count, first_seq, last_seq,"
        f" first_ts, last_ts) VALUES ({c.d.marks(6)},'open',1,{c.d.marks(4)})",
        (p["alert_id"], p["dedup_key"], p["severity"], p["title"], p.get("detail") or "", p["raised_by"],
         e.seq, e.seq, e.ts, e.ts),
    )


def _alert_repeated(c: Target, e: Event) -> None:
    c.run(f"UPDATE alerts SET count = {c.d.p}, last_seq = {c.d.p}, last_ts = {c.d.p} WHERE id = {c.d.p}",
              (e.payload["count"], e.seq, e.ts, e.payload["alert_id"]))


def _alert_acked(c: Target, e: Event) -> None:
    c.run(f"UPDATE alerts SET status = 'acked', acked_by = {c.d.p}, ack_note = {c.d.p}, closed_seq = {c.d.p} WHERE id = {c.d.p}",
              (e.payload["by"], e.payload.get("note"), e.seq, e.payload["alert_id"]))


def _alert_resolved(c: Target, e: Event) -> None:
    c.run(f"UPDATE alerts SET status = 'resolved', closed_seq = {c.d.p} WHERE id = {c.d.p} AND status IN ('open', 'acked')",
              (e.seq, e.payload["alert_id"]))


def _alert_retitled(c: Target, e: Event) -> None:
    c.run(f"UPDATE alerts SET title = {c.d.p} WHERE id = {c.d.p}", (e.payload["title"], e.payload["alert_id"]))


def _alert_severity_changed(c: Target, e: Event) -> None:
    c.run(f"UPDATE alerts SET severity = {c.d.p} WHERE id = {c.d.p}", (e.payload["severity"], e.payload["alert_id"]))


def _alert_notified(c: Target, e: Event) -> None:
    for a in e.payload["alerts"]:
        c.run(f"UPDATE alerts SET notified_ts = {c.d.p}, notified_reason = {c.d.p} WHERE id = {c.d.p}",
                  (e.ts, e.payload["reason"], a["alert_id"]))


def _alert_silenced(c: Target, e: Event) -> None:
    p = e.payload
    c.run(f"INSERT INTO silences (id, alert_id, key_pattern, until_ts, reason, by, ts) VALUES ({c.d.marks(7)})",
              (e.seq, p.get("alert_id"), p.get("key_pattern"), p["until"], p["reason"], p["by"], e.ts))


def _alert_unsilenced(c: Target, e: Event) -> None:
    c.run(f"UPDATE silences SET lifted_seq = {c.d.p} WHERE id = {c.d.p} AND lifted_seq IS NULL",
              (e.seq, e.payload["silence_id"]))


def _memory_written(c: Target, e: Event) -> None:
    c.run(f"INSERT INTO memory (key, text, seq, ts) VALUES ({c.d.marks(4)}) ON CONFLICT({c.d.fleet}key) DO UPDATE SET"
              " text = excluded.text, seq = excluded.seq, ts = excluded.ts",
              (e.payload["key"], e.payload["text"], e.seq, e.ts))


def _memory_deleted(c: Target, e: Event) -> None:
    c.run(f"DELETE FROM memory WHERE key = {c.d.p}", (e.payload["key"],))


def _note(c: Target, e: Event) -> None:
    if e.payload.get("pin"):
        c.run(f"INSERT INTO directives (id, text, by, ts, active) VALUES ({c.d.marks(4)},1)",
                  (e.seq, e.payload["text"], e.payload["by"], e.ts))


def _unpinned(c: Target, e: Event) -> None:
    c.run(f"UPDATE directives SET active = 0, unpinned_seq = {c.d.p} WHERE id = {c.d.p} AND active = 1",
              (e.seq, e.payload["directive_id"]))


def _tool_called(c: Target, e: Event) -> None:
    if e.payload.get("side_effect"):
        c.run(f"INSERT INTO intents (call_id, idem_key, tool, arguments, called_seq) VALUES ({c.d.marks(5)})",
                  (e.payload["call_id"], e.payload.get("idempotency_key"), e.payload["name"],
                   e.payload["arguments"], e.seq))


def _tool_result(c: Target, e: Event) -> None:
    p = e.payload
    eff = p.get("effect") or {}
    # A rent answered "pending" has a result but no outcome yet: ok stays NULL until it settles.
    ok = None if eff.get("type") == "rent_pending" else int(bool(p["ok"]))
    c.run(f"UPDATE intents SET result_seq = {c.d.p}, ok = {c.d.p} WHERE call_id = {c.d.p} AND result_seq IS NULL",
              (e.seq, ok, p["call_id"]))
    if eff.get("type") == "rented" and eff.get("instance_id") is not None:
        c.run(
            "INSERT INTO instances (instance_id, label, idem_key, offer_id, gpu_name, dph, rented_seq, status)"
            f" VALUES ({c.d.marks(7)},'active') ON CONFLICT({c.d.fleet}instance_id) DO NOTHING",
            (eff["instance_id"], eff.get("label") or "", eff.get("idem_key"), eff.get("offer_id"),
             eff.get("gpu_name"), eff.get("dph"), e.seq),
        )
    elif eff.get("type") == "destroyed" and eff.get("instance_id") is not None:
        c.run(f"UPDATE instances SET status = 'destroyed', destroyed_seq = {c.d.p} WHERE instance_id = {c.d.p}"
                  " AND status = 'active'", (e.seq, eff["instance_id"]))


def _adopted(c: Target, e: Event) -> None:
    p = e.payload
    if p.get("idem_key"):  # a pending rent whose label showed up: it was created
        c.run(f"UPDATE intents SET ok = 1 WHERE tool = 'rent_instance' AND idem_key = {c.d.p}"
                  " AND result_seq IS NOT NULL AND ok IS NULL", (p["idem_key"],))
    c.run(
        "INSERT INTO instances (instance_id, label, idem_key, gpu_name, dph, rented_seq, status)"
        f" VALUES ({c.d.marks(6)},'active') ON CONFLICT({c.d.fleet}instance_id) DO NOTHING",
        (p["instance_id"], p["label"], p.get("idem_key"), p.get("gpu_name"), p.get("dph"), e.seq),
    )


def _gone(c: Target, e: Event) -> None:
    c.run(f"UPDATE instances SET status = 'destroyed', destroyed_seq = {c.d.p} WHERE instance_id = {c.d.p}"
              " AND status = 'active'", (e.seq, e.payload["instance_id"]))


def _rent_settled(c: Target, e: Event) -> None:
    c.run(f"UPDATE intents SET ok = {c.d.p} WHERE call_id = {c.d.p} AND ok IS NULL",
              (int(bool(e.payload["created"])), e.payload["call_id"]))


def _tick_started(c: Target, e: Event) -> None:
    """Each listed instance's status and since when (kept while the status stays the same); instances
    the listing no longer shows are dropped. The table holds only what the last listing showed: it is
    read whole, once, and written in two statements (the rows kept and the rows whose status changed)."""
    obs = e.payload.get("observation") or {}
    now = obs.get("time")
    listed = [i for i in obs.get("instances") or [] if isinstance(i.get("id"), int)]
    if listed:
        status_of = dict(c.run("SELECT instance_id, status FROM instance_states").fetchall())
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
            c.run_many(f"UPDATE instance_states SET intended = {c.d.p}, seen_seq = {c.d.p} WHERE instance_id = {c.d.p}", kept)
        if changed:
            c.run_many("INSERT INTO instance_states (instance_id, status, intended, since, seen_seq)"
                          f" VALUES ({c.d.marks(5)}) ON CONFLICT({c.d.fleet}instance_id) DO UPDATE SET status = excluded.status,"
                          " intended = excluded.intended, since = excluded.since, seen_seq = excluded.seen_seq",
                          list(changed.values()))
    c.run(f"DELETE FROM instance_states WHERE seen_seq <> {c.d.p}", (e.seq,))
    _observed_runs(c, e, obs)


def _observed_runs(c: Target, e: Event, obs: dict[str, Any]) -> None:
    """Each instance of ours the observation lists extends its last run when its state (running or not) is
    the same, else starts a new one, a running one with the uptime vast.ai reported then (``up_s``): what spend
    reads (migration 007 fills it from older logs alike). The
    last runs of all of them are read in one statement, and written in two."""
    ours = [(int(i["id"]), int(i.get("status") == "running"), _up_s(i)) for i in obs.get("instances") or []
            if isinstance(i, dict) and isinstance(i.get("id"), int) and i.get("ours") == 1]
    if not ours:
        return
    ids = sorted({iid for iid, _, _ in ours})
    last: dict[int, tuple[int, int]] = {}
    for n in range(0, len(ids), 500):
        chunk = ids[n:n + 500]
        # Driven by the ids (a VALUES list; both dialects name its column column1): each id's last run is two
        # key lookups. With ``instance_id IN (...)`` the planner walked every run of each instance, running the
        # MAX subquery for each: 40 ms a tick for an instance 14,000 runs old.
        rows = c.run("SELECT o.instance_id, o.first_seq, o.running"
                     f" FROM (VALUES {','.join([f'({c.d.p})'] * len(chunk))}) AS ids"
                     " JOIN observed_runs o ON o.instance_id = ids.column1 AND o.first_seq ="
                     " (SELECT MAX(m.first_seq) FROM observed_runs m WHERE m.instance_id = ids.column1)",
                     chunk).fetchall()
        last.update((int(r[0]), (int(r[1]), int(r[2]))) for r in rows)
    extended: list[tuple[Any, ...]] = []
    started: list[tuple[Any, ...]] = []
    for iid, running, up_s in ours:
        row = last.get(iid)
        if row is not None and row[1] == running:
            extended.append((e.seq, e.ts, iid, row[0]))
        else:
            started.append((iid, e.seq, e.ts, e.seq, e.ts, running, up_s if running else None))
            last[iid] = (e.seq, running)
    if extended:
        c.run_many(f"UPDATE observed_runs SET last_seq = {c.d.p}, last_ts = {c.d.p} WHERE instance_id = {c.d.p} AND first_seq = {c.d.p}",
                      extended)
    if started:
        c.run_many("INSERT INTO observed_runs (instance_id, first_seq, first_ts, last_seq, last_ts, running, up_s)"
                      f" VALUES ({c.d.marks(7)})", started)


def _up_s(rec: dict[str, Any]) -> float | None:
    """The record's ``up_s`` (how long vast.ai says it has run since it last started, from ``uptime_mins``), when
    it is a number of seconds; the runs keep it from the observation that begins a running run (migration 011
    fills it alike from the observations already logged)."""
    v = rec.get("up_s")
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 else None


def _knowledge(c: Target, e: Event) -> None:
    p = e.payload
    row = c.run(f"SELECT COALESCE(MAX(version), 0) FROM knowledge WHERE name = {c.d.p}", (p["name"],)).fetchone()
    c.run(f"INSERT INTO knowledge (name, version, hash, size, seq, ts, change) VALUES ({c.d.marks(7)})",
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

class _Direct:
    """A projector's statements sent to the connection one call each."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.d = dialect.of(conn)

    def run(self, sql: str, params: Any = ()) -> Any:
        return dialect.run(self.conn, sql, params)

    def run_many(self, sql: str, rows: Iterable[Any]) -> Any:
        return dialect.run_many(self.conn, sql, rows)


def apply(conn: sqlite3.Connection, event: Event) -> None:
    proj = PROJECTORS.get(event.kind)
    if proj is not None:
        proj(_Direct(conn), event)


class _Runs:
    """What projectors write, sent as runs: consecutive writes of one statement go to the database as one
    ``run_many`` (which runs them one by one, in order), so the statements run in exactly the order the
    projectors issued them. A read (SELECT) first sends what is pending, so it sees every earlier write."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = _Direct(conn)
        self.d = self.conn.d
        self.sql = ""
        self.rows: list[Any] = []

    def run(self, sql: str, params: Any = ()) -> Any:
        if sql.startswith("SELECT"):
            self.flush()
            return self.conn.run(sql, params)
        if sql != self.sql:
            self.flush()
            self.sql = sql
        self.rows.append(params)
        return None

    def run_many(self, sql: str, rows: Iterable[Any]) -> None:
        for params in rows:
            self.run(sql, params)

    def flush(self) -> None:
        rows, self.rows = self.rows, []
        if len(rows) == 1:
            self.conn.run(self.sql, rows[0])
        elif rows:
            self.conn.run_many(self.sql, rows)


def apply_many(conn: sqlite3.Connection, events: Iterable[Event]) -> None:
    """``apply`` each event in order (the append path of a batch): the same statements in the same order,
    a run of one statement sent in one call."""
    runs = _Runs(conn)
    for event in events:
        proj = PROJECTORS.get(event.kind)
        if proj is not None:
            proj(runs, event)
    runs.flush()


def snapshot(conn: sqlite3.Connection) -> dict[str, list[tuple[Any, ...]]]:
    """Every read-model row, table by table, in primary-key order (on PostgreSQL without the agent_id
    column: row-level security shows this fleet's rows only)."""
    if dialect.of(conn) is dialect.POSTGRESQL:
        return {t: [tuple(r[1:]) for r in conn.run(f"SELECT * FROM {t} ORDER BY {KEYS[t]}").fetchall()]
                for t in TABLES}
    db = database(conn)
    out: dict[str, list[tuple[Any, ...]]] = {}
    for t in TABLES:
        table = db.table(t)
        out[t] = [tuple(r.values()) for r in table.rows_where(order_by=", ".join(table.pks))]
    return out


def clear(conn: sqlite3.Connection) -> None:
    """Empty every read-model table (inside the caller's transaction), ready for a replay."""
    if dialect.of(conn) is dialect.POSTGRESQL:
        for t in TABLES:
            conn.run(f"DELETE FROM {t}")
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
