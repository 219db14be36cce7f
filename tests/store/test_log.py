"""The event log on a real SQLite file: append, read, refuse, search, export, files."""

from __future__ import annotations

import io
import json
import os
import stat
from datetime import UTC, datetime, timedelta

import pysqlite3
import pytest
import sqlite_utils.db

from agent.errors import LogError, PayloadError
from agent.store import db as agent_db
from agent.store.log import GENESIS, EventLog, row_hash
from agent.store.queries import Memory
from tests import tamper


@pytest.fixture
def log(backend, new_log, tmp_path):
    """The log on each backend (SQLite: tmp_path/data/events.db; PostgreSQL: a fresh database)."""
    if backend == "sqlite":
        with EventLog(tmp_path / "data" / "events.db") as lg:
            yield lg
    else:
        yield new_log()


@pytest.fixture
def sqlite_log(tmp_path):
    """The log in a SQLite file, for what only a file has (its triggers as SQLite raises them, the head file
    beside it, the statement trace)."""
    with EventLog(tmp_path / "data" / "events.db") as lg:
        yield lg


def note(text: str = "hello", **extra):
    return {"text": text, "by": "alice", **extra}


def test_append_reads_back_with_chain(log):
    """Appended events read back field for field; seqs run 1..n and each prev_hash is the previous hash."""
    a = log.append("operator.note", note("first"), "operator")
    b = log.append("tick.completed", {"steps": 2}, "system", tick=7)
    got = list(log.read())
    assert got == [a, b]
    assert [e.seq for e in got] == [1, 2]
    assert a.prev_hash == GENESIS and b.prev_hash == a.hash
    assert b.tick == 7 and a.tokens is None and b.tokens is None  # counted when rendered, not on append
    assert a.hash == row_hash(a.seq, a.id, a.ts, a.kind, a.version, a.source, a.tick,
                              json.dumps(a.payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False),
                              a.tokens, a.prev_hash)
    assert log.head() == (2, b.hash)
    assert log.verify().ok


@pytest.mark.parametrize(
    ("kind", "payload", "source", "fragment"),
    [
        ("operator.noet", note(), "operator", "did you mean 'operator.note'"),
        ("operator.note", {"text": "no author"}, "operator", "missing required field 'by'"),
        ("operator.note", {"text": 3, "by": "alice"}, "operator", "'text' must be str"),
        ("tick.completed", {"steps": True}, "system", "'steps' must be int"),
        ("operator.note", note(x=float("nan")), "operator", "not valid JSON"),
        ("operator.note", note(x=float("inf")), "operator", "not valid JSON"),
        ("operator.note", note(x={1, 2}), "operator", "not JSON-serialisable"),
        ("operator.note", note(), "nobody", "unknown source"),
        ("operator.note", ["not", "a", "dict"], "operator", "must be a JSON object"),
    ],
)
def test_bad_payload_is_refused_and_nothing_written(log, kind, payload, source, fragment):
    """An unknown kind, missing field, wrong type, NaN/Infinity or bad source raises PayloadError
    naming the problem, and the log, the FTS index and the head stay as they were."""
    first = log.append("operator.note", note(), "operator")
    with pytest.raises(PayloadError) as exc:
        log.append(kind, payload, source)
    assert fragment in str(exc.value)
    assert log.count() == 1
    assert log.head() == (1, first.hash)
    assert log.index_search() == 1 and log.store.search_index_size() == 1
    assert log.verify().ok


@pytest.mark.parametrize("sql", tamper.EVENT_REWRITES)
def test_update_and_delete_on_events_fail(sqlite_log, sql):
    """Triggers refuse UPDATE and DELETE on events, whatever the statement."""
    sqlite_log.append("operator.note", note(), "operator")
    with pytest.raises(pysqlite3.dbapi2.IntegrityError, match="append-only"):
        tamper.attempt(sqlite_log.path, sql)
    assert sqlite_log.count() == 1
    assert sqlite_log.verify().ok


def test_append_many_is_atomic(log):
    """A bad payload in the middle of a batch writes nothing of the batch; a good batch commits whole."""
    log.append("operator.note", note("before"), "operator")
    batch = [("operator.note", note(f"n{i}"), "operator", None) for i in range(10)]
    batch[5] = ("operator.note", {"text": "missing by"}, "operator", None)
    with pytest.raises(PayloadError):
        log.append_many(batch)
    assert log.count() == 1
    assert log.index_search() == 1 and log.store.search_index_size() == 1
    assert log._read_head()[0] == 1
    batch[5] = ("memory.written", {"key": "k", "text": "v"}, "model", 3)
    got = log.append_many(batch)
    assert [e.seq for e in got] == list(range(2, 12))
    assert [(m.key, m.text, m.seq) for m in log.store.memories()] == [("k", "v", 7)]
    assert log.verify().ok


def test_a_batch_of_every_size_reads_back_as_appended_ticks_and_all(log):
    """Batches of 1 to 103 events (statements of 64, 32, ... rows, chained across statement boundaries) read
    back field for field: ticks stay null or the number given (a null tick is stored NULL, not a number
    nor a NaN), tokens stay null, the batch shares one timestamp, and the chain verifies."""
    appended = []
    for size in (1, 2, 3, 64, 65, 103):
        batch = [("tick.completed", {"steps": i}, "system", i if i % 3 else None) for i in range(size)]
        got = log.append_many(batch)
        assert [e.tick for e in got] == [t for *_, t in batch] and {e.ts for e in got} == {got[0].ts}
        appended += got
    assert list(log.read()) == appended
    assert all(e.tick is None and e.tokens is None for e in log.read() if e.payload["steps"] % 3 == 0)
    assert [e.payload["steps"] for e in log.read(tick=64)] == [64, 64]
    assert log.verify().ok and log.head() == (appended[-1].seq, appended[-1].hash)


def test_a_single_append_writes_the_row_a_batch_writes(tmp_path):
    """Each payload shape (flat, nested, an integer beyond 64 bits, a float orjson writes otherwise, text
    beyond ASCII, a version that stores a smaller form, a null tick) appended alone gives the same kind,
    version, source, tick, stored payload text and event payload as the same item in a batch; both chains
    verify."""
    obs = {"time": 100.0, "instances": [{"id": 7, "status": "running"}, {"id": 8, "status": "running"}]}
    items = [
        ("operator.note", note("plain"), "operator", None),
        ("operator.note", note("big", n=2**70, f=1e-5, u="é\u2028\x00"), "operator", None),
        ("tool.called", {"call_id": "c1", "name": "search", "arguments": "{}", "extra": {"a": [1, 2.5]}}, "model", 3),
        ("tick.started", {"observation": obs}, "scheduler", 4),
        ("tick.completed", {"steps": 1, "spent": 0.25}, "system", None),
    ]
    with EventLog(tmp_path / "single.db") as one, EventLog(tmp_path / "batch.db") as many:
        singles = [one.append(*item) for item in items]
        batch = many.append_many(items)
        out = []
        for lg in (one, many):
            buf = io.StringIO()
            lg.export(buf)
            out.append([{k: v for k, v in json.loads(line).items() if k not in ("id", "ts", "hash", "prev_hash")}
                        for line in buf.getvalue().rstrip("\n").split("\n")])  # a payload may hold U+2028
            assert lg.verify().ok
    assert out[0] == out[1]
    assert [(e.kind, e.version, e.source, e.tick, e.payload) for e in singles] == [
        (e.kind, e.version, e.source, e.tick, e.payload) for e in batch]
    assert singles[3].version >= 3 and out[0][3]["payload"] != singles[3].payload  # stored in its smaller form


def test_transaction_rolls_back_events_and_read_models_on_error(log):
    """An exception inside transaction() rolls back every event and read-model change made in it."""

    class Boom(Exception):
        pass

    with pytest.raises(Boom), log.transaction() as tx:
        tx.append("memory.written", {"key": "a", "text": "x"}, "model")
        tx.append("operator.note", note("pinned", pin=True), "operator")
        raise Boom()
    assert log.count() == 0
    assert log.store.row_counts(["memory", "directives"]) == {"memory": 0, "directives": 0}
    assert not log.head_file.exists()


def test_read_filters(tmp_path):
    """read() filters by since, until_seq, kinds, tick, time range and limit, in either order."""
    t0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
    clock = iter(t0 + timedelta(minutes=i) for i in range(100))
    with EventLog(tmp_path / "e.db", clock=lambda: next(clock)) as log:
        for i in range(6):
            log.append("tick.started", {"observation": {"instances": []}}, "scheduler", tick=i)
            log.append("tick.completed", {"steps": 1}, "system", tick=i)
        seqs = lambda it: [e.seq for e in it]  # noqa: E731
        assert seqs(log.read(10)) == [11, 12]
        assert seqs(log.read(0, until_seq=3)) == [1, 2, 3]
        assert seqs(log.read(kinds=["tick.completed"])) == [2, 4, 6, 8, 10, 12]
        assert seqs(log.read(tick=2)) == [5, 6]
        assert seqs(log.read(limit=2, newest_first=True)) == [12, 11]
        assert seqs(log.read(since_ts="2026-11-29T10:03:00.000000Z", until_ts="2026-11-29T10:05:00.000000Z")) == [4, 5, 6]
        assert log.get(4).kind == "tick.completed" and log.get(99) is None
        assert log.last_seq() == 12


def test_search_finds_rendered_and_unrendered_text(log):
    """search() matches words of an event's rendering (or of its payload when invisible), newest first,
    and a query with FTS syntax characters does not raise."""
    log.append("operator.note", note("avoid host 4411 it keeps failing"), "operator")
    log.append("tool.called", {"call_id": "c1", "name": "destroy_instance", "arguments": '{"id": 4411}'}, "model")
    log.append("operator.note", note("nothing relevant"), "operator")
    hits = log.search("4411")
    assert [e.seq for e, _ in hits] == [2, 1]
    assert "[4411]" in hits[1][1]
    assert [e.seq for e, _ in log.search("4411", until_seq=1)] == [1]
    assert log.search("keeps failing")[0][0].seq == 1
    assert log.search('"AND OR NEAR( * -') == []
    assert log.search("   ") == []


def test_export_writes_every_field(log):
    """export() writes one JSON object per event with every column, hashes included."""
    a = log.append("operator.note", note("x"), "operator")
    b = log.append("tick.completed", {"steps": 1}, "system", tick=1)
    buf = io.StringIO()
    assert log.export(buf) == 2
    rows = [json.loads(line) for line in buf.getvalue().splitlines()]
    assert rows == [a.to_dict(), b.to_dict()]
    buf = io.StringIO()
    assert log.export(buf, since=1) == 1


def test_head_file_tracks_newest_event(sqlite_log):
    """Each commit records the newest seq and hash in <db>.head, private to the owner."""
    sqlite_log.append("operator.note", note(), "operator")
    e = sqlite_log.append_many([("operator.note", note(str(i)), "operator", None) for i in range(3)])[-1]
    assert sqlite_log.head_file.name == "events.db.head"
    assert sqlite_log.head_file.read_text().split() == [str(e.seq), e.hash]
    assert stat.S_IMODE(os.stat(sqlite_log.head_file).st_mode) == 0o600


def test_a_head_file_holding_something_longer_is_rewritten_to_the_one_record(sqlite_log):
    """A head file that holds more than a record (a stray edit) is cut to the newest seq and hash on the
    next commit; a record that only grows is rewritten in place."""
    sqlite_log.append("operator.note", note(), "operator")
    sqlite_log.head_file.write_text("not a record " * 20 + "\n")
    e = sqlite_log.append("operator.note", note("again"), "operator")
    assert sqlite_log.head_file.read_text() == f"{e.seq} {e.hash}\n"
    last = sqlite_log.append_many([("operator.note", note(str(i)), "operator", None) for i in range(9)])[-1]
    assert sqlite_log.head_file.read_text() == f"{last.seq} {last.hash}\n"


def test_the_head_file_never_moves_backwards(sqlite_log):
    """A head file that already records a higher seq (another writer's, written after a later commit) is left
    as it is by a commit of a lower seq; one that holds no record is replaced by the commit's."""
    e = sqlite_log.append("operator.note", note(), "operator")
    later = f"{e.seq + 5} {'f' * 64}\n"
    sqlite_log.head_file.write_text(later)
    sqlite_log.append("operator.note", note("again"), "operator")
    assert sqlite_log.head_file.read_text() == later
    sqlite_log.head_file.write_text(f"x{e.seq + 5} {'f' * 64}\n")
    last = sqlite_log.append("operator.note", note("once more"), "operator")
    assert sqlite_log.head_file.read_text() == f"{last.seq} {last.hash}\n"


def _projected_batch() -> list[tuple[str, dict, str, int | None]]:
    """Events of every shape a projector handles: runs of one statement (two alert repeats, three results),
    writes a later read depends on (two changes of one knowledge file), a read-heavy tick.started."""
    raised = {"alert_id": 1, "severity": "warning", "title": "low balance", "dedup_key": "bal", "raised_by": "system"}
    doc = {"name": "a.md", "change": "added", "hash": "h", "size": 3, "text": "abc"}
    obs = {"time": 100.0, "instances": [{"id": 7, "status": "running", "ours": 1}, {"id": 8, "status": "loading"}]}
    return [
        ("alert.raised", raised, "system", None),
        ("alert.repeated", {"alert_id": 1, "count": 2}, "system", None),
        ("alert.repeated", {"alert_id": 1, "count": 3}, "system", None),
        ("memory.written", {"key": "k", "text": "v1"}, "model", 1),
        ("memory.written", {"key": "k", "text": "v2"}, "model", 1),
        ("tool.called", {"call_id": "c1", "name": "rent", "arguments": "{}", "side_effect": True,
                         "idempotency_key": "fa-fleet-1-abc"}, "model", 1),
        ("tool.result", {"call_id": "c1", "name": "rent", "ok": True,
                         "effect": {"type": "rented", "instance_id": 42, "label": "fa-fleet-1-abc"}}, "tool", 1),
        ("tool.result", {"call_id": "c2", "name": "search", "ok": True}, "tool", 1),
        ("tool.result", {"call_id": "c3", "name": "search", "ok": False}, "tool", 1),
        ("knowledge.changed", doc, "system", None),
        ("knowledge.changed", {**doc, "change": "changed", "hash": "h2"}, "system", None),
        ("tick.started", {"observation": obs}, "system", 2),
        ("memory.deleted", {"key": "k"}, "model", 2),
        ("operator.note", {"text": "pin me", "by": "bob", "pin": True}, "operator", None),
    ]


def test_a_batch_projects_as_its_events_one_by_one(log):
    """A batch's read models (writes of one statement sent together, reads seeing every earlier write) equal
    a rebuild from the log, which applies its events one at a time."""
    log.append_many(_projected_batch())
    assert log.rebuild_check() == []
    assert [(k.version, k.hash) for k in log.store.knowledge_versions("a.md")] == [(1, "h"), (2, "h2")]
    assert log.store.instance(42).status == "active"
    assert not log.store.memory_has("k")


def test_appends_from_two_connections_interleaved_stay_chained(log, new_log):
    """A log that remembers its head between its own commits still chains onto what another connection
    appended in between (single appends, batches, a rolled-back transaction), and the chain verifies."""
    other = new_log("events") if log.is_pg else EventLog(log.path)
    try:
        order = ["a", "a", "b", "a", "b", "b", "a"]
        for i, who in enumerate(order):
            (log if who == "a" else other).append("operator.note", note(f"{who}{i}"), "operator")
        other.append_many([("operator.note", note(f"batch {i}"), "operator", None) for i in range(3)])
        with pytest.raises(RuntimeError), log.transaction() as tx:
            tx.append("operator.note", note("rolled back"), "operator")
            raise RuntimeError("undo")
        log.append_many([("operator.note", note(f"mine {i}"), "operator", None) for i in range(2)])
        other.append("operator.note", note("last"), "operator")
        events = list(log.read())
        assert [e.payload["text"] for e in events] == [f"{w}{i}" for i, w in enumerate(order)] + [
            "batch 0", "batch 1", "batch 2", "mine 0", "mine 1", "last"]
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert all(b.prev_hash == a.hash for a, b in zip(events, events[1:], strict=False))
        assert log.verify().ok
    finally:
        if not log.is_pg:
            other.close()


def test_rebuild_check_matches_and_detects_drift(log):
    """Read models rebuilt from the log equal the live ones; a hand-edited read model shows as a difference,
    and rebuild() repairs it."""
    log.append("alert.raised", {"alert_id": 1, "severity": "warning", "title": "low balance", "dedup_key": "bal",
                                "raised_by": "system"}, "system")
    log.append("alert.acked", {"alert_id": 1, "by": "bob", "title": "low balance", "note": "topped up"}, "operator")
    log.append("memory.written", {"key": "k", "text": "v"}, "model")
    log.append("tool.called", {"call_id": "c1", "name": "rent", "arguments": "{}", "side_effect": True,
                               "idempotency_key": "fa-fleet-1-abc"}, "model")
    log.append("tool.result", {"call_id": "c1", "name": "rent", "ok": True,
                               "effect": {"type": "rented", "instance_id": 42, "label": "fa-fleet-1-abc"}}, "tool")
    log.append("knowledge.changed", {"name": "a.md", "change": "added", "hash": "h", "size": 3, "text": "abc"},
               "system")
    assert log.rebuild_check() == []
    tamper.edit_read_model(log, "memory", text="tampered")
    diffs = log.rebuild_check()
    assert any("memory" in d for d in diffs)
    log.rebuild()
    assert log.rebuild_check() == []
    assert [(a.status, a.acked_by) for a in log.store.alerts(all_=True)] == [("acked", "bob")]
    assert log.store.instance(42).status == "active"
    assert log.store.memories() == [Memory("k", "v", 3, log.get(3).ts)]


def test_readonly_log_refuses_writes(tmp_path):
    """A log opened read-only reads but refuses to append; a missing database is a clear error."""
    with EventLog(tmp_path / "e.db") as w:
        w.append("operator.note", note(), "operator")
    with EventLog(tmp_path / "e.db", readonly=True) as r:
        assert r.count() == 1
        with pytest.raises(LogError, match="read-only"):
            r.append("operator.note", note(), "operator")
    with pytest.raises(LogError, match="fleet-agent init"):
        EventLog(tmp_path / "missing.db", readonly=True)


def test_database_and_directory_are_private(tmp_path):
    """The database file (and its WAL) is 0600 and a directory the log creates is 0700."""
    path = tmp_path / "fresh" / "dir" / "events.db"
    with EventLog(path) as log:
        log.append("operator.note", note(), "operator")
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
        wal = path.with_name(path.name + "-wal")
        if wal.exists():
            assert stat.S_IMODE(os.stat(wal).st_mode) == 0o600


def test_reopening_a_loose_database_tightens_its_mode(tmp_path):
    """An existing database file with a loose mode is made 0600 when opened for writing."""
    path = tmp_path / "events.db"
    EventLog(path).close()
    os.chmod(path, 0o644)
    EventLog(path).close()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_sqlite_is_new_enough_and_shared_with_sqlite_utils():
    """The runtime SQLite is >= 3.51.3 (no WAL-reset bug) and sqlite-utils uses the same pysqlite3 module."""
    v = tuple(int(x) for x in agent_db.sqlite3.sqlite_version.split(".")[:3])
    assert v >= (3, 51, 3)
    assert agent_db.sqlite_version() >= agent_db.MIN_SQLITE
    assert agent_db.sqlite3.__name__.startswith("pysqlite3")
    assert sqlite_utils.db.sqlite3 is pysqlite3 or sqlite_utils.db.sqlite3 is agent_db.sqlite3
    assert sqlite_utils.db.sqlite3.sqlite_version == agent_db.sqlite3.sqlite_version


def test_migrations_apply_once_and_refuse_newer_databases(tmp_path):
    """Opening twice applies nothing the second time; a database with an unknown migration is refused."""
    path = tmp_path / "e.db"
    EventLog(path).close()
    conn = agent_db.connect(path)
    assert agent_db.apply_migrations(conn) == []
    assert agent_db.applied_migrations(conn) == [n for n, _ in agent_db.migrations()]
    conn.close()
    tamper.record_migration(path, "999_future")
    with pytest.raises(LogError, match="newer fleet-agent"):
        EventLog(path)


def test_read_model_conflict_refuses_the_event_and_leaves_the_log_usable(log):
    """An event its read model cannot take (a second alert with the same id) is refused as a LogError; nothing
    of it is written and the next append works (no transaction left open)."""
    raised = {"alert_id": 1, "severity": "warning", "title": "t", "dedup_key": "k", "raised_by": "system"}
    log.append("alert.raised", raised, "system")
    with pytest.raises(LogError, match="could not be written"):
        log.append_many([("operator.note", note(), "operator", None), ("alert.raised", raised, "system", None)])
    assert log.count() == 1
    assert not log.in_transaction
    assert log.append("operator.note", note(), "operator").seq == 2
    assert log.verify().ok


def test_unopenable_database_is_a_clear_error(tmp_path):
    """A database path that cannot be created raises LogError naming the path, not a raw OS or SQLite error."""
    (tmp_path / "afile").write_text("")
    with pytest.raises(LogError, match="cannot open the database"):
        EventLog(tmp_path / "afile" / "events.db")


def test_verify_while_another_connection_appends(tmp_path):
    """verify() on one connection while another keeps appending never mistakes the newer head file for a
    truncated log."""
    path = tmp_path / "e.db"
    with EventLog(path) as writer, EventLog(path) as reader:
        writer.append_many([("operator.note", note(str(i)), "operator", None) for i in range(600)])
        walk = reader.read(0)
        next(walk)  # a reader mid-walk (past its first batch of rows) holds an older snapshot
        writer.append("operator.note", note(), "operator")
        assert reader.verify().ok
        walk.close()
        for i in range(5):
            writer.append("operator.note", note(str(i)), "operator")
            assert reader.verify().ok


def test_held_appends_commit_first_in_the_next_transaction_or_at_the_end(sqlite_log):
    """Inside holding(), append_held keeps its events out of the sqlite_log until the next transaction, which
    appends them first (one commit for both), and the block's end commits what is left; a bad payload is
    refused when held; outside holding() append_held commits at once; the chain verifies."""
    from agent.store import plans

    with sqlite_log.holding():
        sqlite_log.append_held([("operator.note", note("a"), "operator", None), ("operator.note", note("b"), "operator", None)])
        assert sqlite_log.count() == 0
        with pytest.raises(PayloadError):
            sqlite_log.append_held([("operator.note", {"by": "alice"}, "operator", None)])
        with plans.record(sqlite_log) as statements:
            c = sqlite_log.append("operator.note", note("c"), "operator")
        assert sum(s.startswith("COMMIT") for s in statements) == 1
        sqlite_log.append_held([("operator.note", note("d"), "operator", None)])
        assert sqlite_log.count() == 3
    assert [e.payload["text"] for e in sqlite_log.read()] == ["a", "b", "c", "d"] and c.seq == 3
    sqlite_log.append_held([("operator.note", note("e"), "operator", None)])
    assert sqlite_log.count() == 5 and sqlite_log.verify().ok


def test_search_index_trails_appends_and_catches_up_in_order(log):
    """Appends do not render into the full-text index; index_search() adds exactly the events it lacks
    (a prefix of the log stays indexed), and search() brings it up to the head before matching."""
    for i in range(3):
        log.append("operator.note", note(f"gpu{i} host 770{i}"), "operator")
    assert log.store.search_index_size() == 0
    assert [e.seq for e, _ in log.search("host")] == [3, 2, 1]
    assert log.store.search_index_size() == 3
    log.append("tool.called", {"call_id": "c9", "name": "destroy_instance", "arguments": '{"id": 7702}'}, "model")
    assert log.store.search_index_size() == 3
    assert log.index_search() == 1 and log.index_search() == 0
    assert [e.seq for e, _ in log.search("7702")] == [4, 3]


def test_read_only_log_searches_what_was_indexed(log):
    """A read-only log never writes: its search covers the indexed prefix, not the events after it."""
    log.append("operator.note", note("first alpha"), "operator")
    log.index_search()
    log.append("operator.note", note("second alpha"), "operator")
    with EventLog(log.path, readonly=True, create=False) as ro:
        assert [e.seq for e, _ in ro.search("alpha")] == [1]
        assert ro.index_search() == 0
    assert log.store.search_index_size() == 1


def test_event_ids_are_distinct_uuid4_text():
    """new_event_id gives RFC 4122 version-4 UUIDs in str(uuid) form, never twice."""
    import uuid

    from agent.store.log import new_event_id

    ids = [new_event_id() for _ in range(600)]
    assert len(set(ids)) == 600
    for i in ids[:50]:
        u = uuid.UUID(i)
        assert str(u) == i and u.version == 4 and u.variant == uuid.RFC_4122


@pytest.mark.parametrize("dt", [datetime(2026, 11, 29, 10, 0, 3, 999999, tzinfo=UTC),
                                datetime(2026, 11, 29, 10, 0, 4, 5, tzinfo=UTC),
                                datetime(2026, 11, 29, 11, 0, 4, 5, tzinfo=UTC),
                                datetime(1969, 12, 31, 23, 59, 59, 500000, tzinfo=UTC),
                                datetime(2026, 11, 29, 12, 0, 4, 5, tzinfo=UTC) + timedelta(hours=0)])
def test_utc_ts_matches_isoformat_across_seconds(dt):
    """utc_ts formats each value as isoformat does, across a second, an hour and the epoch, and from
    another time zone."""
    from datetime import timezone

    from agent.times import utc_ts

    want = dt.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"
    assert utc_ts(dt) == want
    assert utc_ts(dt.astimezone(timezone(timedelta(hours=5, minutes=30)))) == want


def test_an_append_on_the_default_clock_stamps_now_in_utc_ts_form(log):
    """An append on the log's default clock gives each event utc_ts's fixed-width text for a moment
    between the times read before and after it."""
    import re

    from agent.times import utc_ts

    before = utc_ts()
    events = [log.append("operator.note", note(), "operator")] + log.append_many(
        [("operator.note", note(str(i)), "operator", None) for i in range(3)])
    after = utc_ts()
    for e in events:
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", e.ts), e.ts
        assert before <= e.ts <= after
        assert datetime.fromisoformat(e.ts[:-1]).isoformat(timespec="microseconds") + "Z" == e.ts
    assert [e.ts for e in events] == sorted(e.ts for e in events)


def test_a_transaction_inside_another_joins_it_and_commits_with_it(log):
    """A transaction opened inside one this thread has open joins it: its appends are seen inside, are
    not in the file for another connection until the outer block ends, and commit with the outer one
    (one head-file record, after the commit)."""
    with log.transaction() as outer:
        outer.append("operator.note", note("outer"), "operator")
        inner = log.append("operator.note", note("inner"), "operator")
        assert inner.seq == 2 and log.store.search_index_size() == 0
        assert [e.seq for e in log.read()] == [1, 2]
        with EventLog(log.path, readonly=True, create=False) as other:
            assert other.count() == 0
        assert log._read_head() is None
    assert log.count() == 2 and log._read_head() == (2, inner.hash)
    assert log.verify().ok


def test_a_failing_inner_transaction_rolls_back_alone(log):
    """An exception inside a joined transaction undoes that block's appends (and read-model changes)
    only; the outer block goes on with the chain where it was and commits the rest."""
    with log.transaction() as outer:
        outer.append("operator.note", note("kept"), "operator")
        with pytest.raises(PayloadError):
            with log.transaction() as tx:
                tx.append("memory.written", {"key": "k", "text": "gone"}, "model")
                tx.append("operator.note", {"text": "no author"}, "operator")
        assert not log.store.memory_has("k")
        last = outer.append("operator.note", note("after"), "operator")
    assert [e.payload["text"] for e in log.read()] == ["kept", "after"]
    assert last.seq == 2 and log.verify().ok


def test_after_commit_runs_once_committed_and_never_after_a_rollback(log):
    """after_commit runs at once outside a transaction, after the commit inside one, and not at all
    when the transaction (or the joined block that asked) rolls back."""
    ran: list[str] = []
    log.after_commit(lambda: ran.append("now"))
    assert ran == ["now"]
    with log.transaction() as tx:
        tx.append("operator.note", note(), "operator")
        log.after_commit(lambda: ran.append(f"committed {log.count()}"))
        with pytest.raises(RuntimeError), log.transaction():
            log.after_commit(lambda: ran.append("inner rolled back"))
            raise RuntimeError("inner")
        assert ran == ["now"]
    with pytest.raises(RuntimeError), log.transaction():
        log.after_commit(lambda: ran.append("outer rolled back"))
        raise RuntimeError("outer")
    assert ran == ["now", "committed 1"]


def test_an_appended_event_owns_its_payload_and_equals_its_row(log):
    """The event an append returns has its own copy of the payload, equal to the row read back (flat
    payloads, nested ones, a float, a tuple that JSON makes a list); changing the caller's dict later
    changes neither."""
    flat = note("flat", x=1.5, y=None, z=True)
    nested = {"call_id": "c1", "name": "search_offers", "ok": True, "output": "x", "effect": {"type": "none"},
              "extra": (1, 2)}
    a = log.append("operator.note", flat, "operator")
    b = log.append("tool.result", nested, "tool", 3)
    flat["text"] = "changed"
    nested["effect"]["type"] = "changed"
    assert a.payload["text"] == "flat" and b.payload["effect"] == {"type": "none"}
    assert b.payload["extra"] == [1, 2]
    assert list(log.read()) == [a, b]


def test_canonical_json_is_sorted_compact_utf8_and_refuses_what_json_cannot_hold():
    """canonical() writes what json.dumps(sort_keys, compact separators, UTF-8) writes, byte for byte; a
    payload holding NaN, an object JSON has no form for, or itself is refused with PayloadError."""
    from agent.events.canonical import canonical

    sample = {"z": [1, 2.5, -0.0, 1e300, None, True, False], "a": {"é": "line\nbreak \"quoted\" \u2028"},
              "m": 10**30, "e": [], "o": {}}
    assert canonical(sample) == json.dumps(sample, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    loop: dict = {"a": 1}
    loop["self"] = loop
    for bad in ({"x": float("nan")}, {"x": object()}, loop):
        with pytest.raises(PayloadError):
            canonical(bad)
