"""The Store on a real SQLite file: each query pinned by what it answers; and no SQL outside agent/store."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent.store.log import EventLog
from agent.store.queries import Alert, Directive, FailedRun, Instance, Intent, KnowledgeVersion, OpenTick
from tests import tamper

REPO = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def log(backend: str, new_log: Callable[..., EventLog], tmp_path: Path, clock: Clock) -> Iterator[EventLog]:
    """The log on each backend (SQLite: tmp_path/store.db; PostgreSQL: a fresh database)."""
    if backend == "sqlite":
        with EventLog(tmp_path / "store.db", clock=clock) as lg:
            yield lg
    else:
        yield new_log(clock=clock)


def raised(alert_id: int, key: str, title: str = "t", severity: str = "warning") -> dict:
    return {"alert_id": alert_id, "severity": severity, "title": title, "dedup_key": key, "raised_by": "system"}


def called(call_id: str, tool: str, key: str | None = None, args: str = "{}") -> dict:
    return {"call_id": call_id, "name": tool, "arguments": args, "side_effect": True, "idempotency_key": key}


def result(call_id: str, tool: str, ok: bool = True, effect: dict | None = None) -> dict:
    p: dict = {"call_id": call_id, "name": tool, "ok": ok}
    if effect is not None:
        p["effect"] = effect
    return p


def rented(iid: int, key: str, dph: float = 0.5) -> dict:
    return {"type": "rented", "instance_id": iid, "label": f"fa-x-{key}", "idem_key": key, "offer_id": 7,
            "gpu_name": "RTX 4090", "dph": dph}


# ------------------------------------------------------------------ alerts


def test_alerts_open_all_one_and_next_id(log: EventLog):
    """open_alerts lists open ones by id; alerts(all_=True) every one with its status; alert(id) one row or
    None; next_alert_id is one past the highest id."""
    st = log.store
    assert st.open_alerts() == [] and st.alert(1) is None and st.next_alert_id() == 1
    log.append("alert.raised", raised(1, "balance:low", "low balance", "critical"), "system")
    log.append("alert.raised", raised(2, "stuck:5", "stuck"), "system")
    log.append("alert.repeated", {"alert_id": 2, "count": 3}, "system")
    log.append("alert.acked", {"alert_id": 1, "by": "bob", "title": "low balance", "note": "topping up"},
               "operator")
    assert [(a.id, a.count) for a in st.open_alerts()] == [(2, 3)]
    assert [(a.id, a.status) for a in st.alerts(all_=True)] == [(1, "acked"), (2, "open")]
    a1 = st.alert(1)
    assert isinstance(a1, Alert)
    assert (a1.severity, a1.title, a1.acked_by, a1.ack_note, a1.closed_seq) == \
        ("critical", "low balance", "bob", "topping up", 4)
    assert st.next_alert_id() == 3


def test_live_alerts_keep_an_acked_alert_until_it_resolves(log: EventLog):
    """An acked alert stays live (by key and by prefix) until an alert.resolved for it; open ones are live."""
    st = log.store
    log.append("alert.raised", raised(1, "dead:1"), "system")
    log.append("alert.raised", raised(2, "dead:2"), "system")
    log.append("alert.raised", raised(3, "balance:low"), "system")
    log.append("alert.acked", {"alert_id": 1, "by": "bob", "title": "t"}, "operator")
    assert [a.id for a in st.live_alerts(prefix="dead:")] == [1, 2]
    assert [a.id for a in st.live_alerts(key="dead:1")] == [1]
    log.append("alert.resolved", {"alert_id": 1, "title": "t"}, "system")
    assert [a.id for a in st.live_alerts(prefix="dead:")] == [2]
    assert st.live_alerts(key="dead:1") == []
    with pytest.raises(ValueError):
        st.live_alerts()


def test_alert_history_seqs_name_only_that_alerts_events(log: EventLog):
    """alert_history_seqs gives the seq of every event about one alert, in order, and nothing about another."""
    log.append("alert.raised", raised(1, "a"), "system")
    log.append("alert.raised", raised(2, "b"), "system")
    log.append("operator.note", {"text": "alert 1 is fine", "by": "bob"}, "operator")
    log.append("alert.repeated", {"alert_id": 1, "count": 2}, "system")
    log.append("alert.resolved", {"alert_id": 1, "title": "t"}, "system")
    assert log.store.alert_history_seqs(1) == [1, 4, 5]
    assert log.store.alert_history_seqs(2) == [2]
    assert log.store.alert_history_seqs(9) == []


# ------------------------------------------------------------------ instances and intents


def test_ownership_follows_rents_adoptions_and_destroys(log: EventLog):
    """owned_instances holds rented and adopted instances until destroyed or gone; instance(id) keeps the row."""
    st = log.store
    log.append("tool.called", called("c1", "rent_instance", "k1"), "model")
    log.append("tool.result", result("c1", "rent_instance", effect=rented(11, "k1", 0.4)), "tool")
    log.append("tool.called", called("c2", "rent_instance", "k2"), "model")
    log.append("tool.result", result("c2", "rent_instance", effect=rented(12, "k2", 0.6)), "tool")
    log.append("instance.adopted", {"instance_id": 13, "label": "fa-x-k3", "idem_key": "k3"}, "system")
    assert st.owned_instance_ids() == [11, 12, 13]
    first = st.owned_instances()[0]
    assert isinstance(first, Instance)
    assert (first.label, first.idem_key, first.offer_id, first.gpu_name, first.dph, first.status) == \
        ("fa-x-k1", "k1", 7, "RTX 4090", 0.4, "active")
    log.append("tool.called", called("c3", "destroy_instance", None, '{"instance_id": 11}'), "model")
    log.append("tool.result", result("c3", "destroy_instance", effect={"type": "destroyed", "instance_id": 11}),
               "tool")
    log.append("instance.gone", {"instance_id": 13}, "system")
    assert st.owned_instance_ids() == [12]
    gone = st.instance(11)
    assert gone is not None and gone.status == "destroyed" and gone.destroyed_seq == 7
    assert st.instance(99) is None


def test_rentals_carry_the_storage_rate_their_rent_or_adoption_noted(log: EventLog):
    """rentals() gives each rental the storage $/h its rent's effect or its adoption noted (spend bills it while
    the instance does not run), None where none was noted (an older log), and its end once destroyed."""
    log.append("tool.called", called("c1", "rent_instance", "k1"), "model")
    log.append("tool.result", result("c1", "rent_instance", effect={**rented(11, "k1", 0.4), "storage_dph": 0.0082}),
               "tool")
    log.append("instance.adopted", {"instance_id": 12, "label": "fa-x-k2", "idem_key": "k2", "dph": 0.3,
                                    "storage_dph": 0.0041}, "system")
    log.append("tool.called", called("c3", "rent_instance", "k3"), "model")
    log.append("tool.result", result("c3", "rent_instance", effect=rented(13, "k3", 0.5)), "tool")
    log.append("tool.called", called("c4", "destroy_instance", None, '{"instance_id": 11}'), "model")
    log.append("tool.result", result("c4", "destroy_instance", effect={"type": "destroyed", "instance_id": 11}),
               "tool")
    got = {r.instance_id: r for r in log.store.rentals()}
    assert {i: r.storage_dph for i, r in got.items()} == {11: 0.0082, 12: 0.0041, 13: None}
    assert got[11].dph == 0.4 and got[11].end_ts is not None and got[12].end_ts is None


def test_tick_starts_are_the_newest_ticks_oldest_first(log: EventLog):
    """tick_starts(n): (seq, tick, ts) of the newest n tick.started events, oldest first, other kinds left out
    (the model cost's window reads them without decoding observations), on either store."""
    seqs = []
    for t in range(1, 5):
        seqs.append(log.append("tick.started", {"observation": {}}, "scheduler", t).seq)
        log.append("tick.completed", {"steps": 1}, "scheduler", t)
    got = log.store.tick_starts(3)
    assert [(s, t) for s, t, _ in got] == [(seqs[1], 2), (seqs[2], 3), (seqs[3], 4)]
    assert all(ts for _, _, ts in got) and log.store.tick_starts(10)[0][0] == seqs[0]


def test_dangling_intents_and_rent_keys(log: EventLog):
    """dangling_intents lists side-effecting calls without a result, oldest first; rent_keys every rent key."""
    st = log.store
    log.append("tool.called", called("c1", "rent_instance", "k1", '{"offer_id": 7}'), "model")
    log.append("tool.called", called("c2", "destroy_instance", None, '{"instance_id": 5}'), "model")
    log.append("tool.called", called("c3", "rent_instance", "k3"), "model")
    log.append("tool.result", result("c3", "rent_instance", ok=False), "tool")
    log.append("tool.called", {"call_id": "c4", "name": "list_offers", "arguments": "{}"}, "model")
    assert st.dangling_intents() == [
        Intent("c1", "k1", "rent_instance", '{"offer_id": 7}', 1),
        Intent("c2", None, "destroy_instance", '{"instance_id": 5}', 2),
    ]
    assert st.rent_keys() == {"k1", "k3"}
    log.append("tool.result", result("c1", "rent_instance", ok=True), "tool")
    assert [i.call_id for i in st.dangling_intents()] == ["c2"]


def test_rents_and_destroys_since_count_intents_by_time(log: EventLog, clock: Clock):
    """rents_since / destroys_since count the intents logged at or after a time, whatever their outcome."""
    log.append("tool.called", called("c1", "rent_instance", "k1"), "model")
    clock.now = T0 + timedelta(minutes=30)
    log.append("tool.called", called("c2", "rent_instance", "k2"), "model")
    log.append("tool.result", result("c2", "rent_instance", ok=False), "tool")
    log.append("tool.called", called("c3", "destroy_instance", None, '{"instance_id": 1}'), "model")
    half = log.get(2).ts
    assert log.store.rents_since(log.get(1).ts) == 2
    assert log.store.rents_since(half) == 1
    assert log.store.destroys_since(half) == 1
    assert log.store.rents_since("2026-12-01T00:00:00.000000Z") == 0


# ------------------------------------------------------------------ memory and directives


def test_memory_and_directives(log: EventLog):
    """memory_has follows remember/forget; active_directives holds pinned notes until unpinned."""
    st = log.store
    log.append("memory.written", {"key": "host 77", "text": "flaky"}, "model")
    log.append("operator.note", {"text": "keep four 4090s", "by": "alice", "pin": True}, "operator")
    log.append("operator.note", {"text": "just saying", "by": "alice"}, "operator")
    log.append("operator.note", {"text": "never rent in EU", "by": "bob", "pin": True}, "operator")
    assert st.memory_has("host 77") and not st.memory_has("host 78")
    assert [(m.key, m.text) for m in st.memories()] == [("host 77", "flaky")]
    assert [d.id for d in st.active_directives()] == [2, 4]
    log.append("directive.unpinned", {"directive_id": 2, "by": "bob"}, "operator")
    log.append("memory.deleted", {"key": "host 77"}, "model")
    assert not st.memory_has("host 77")
    assert st.active_directives() == [Directive(4, "never rent in EU", "bob", log.get(4).ts, True)]
    withdrawn = st.directive(2)
    assert withdrawn is not None and not withdrawn.active and withdrawn.unpinned_seq == 5
    assert st.directive(3) is None


# ------------------------------------------------------------------ knowledge


def knowledge(name: str, change: str, text: str | None) -> dict:
    return {"name": name, "change": change, "hash": None if text is None else f"h-{text}",
            "size": len(text or ""), "diff": "", "text": text}


def test_knowledge_versions_latest_and_text(log: EventLog):
    """knowledge_latest is each file's newest version; knowledge_text its full text (None once removed or
    never seen); knowledge_versions every version in order; knowledge_names every name seen."""
    st = log.store
    log.append("knowledge.changed", knowledge("hosts.md", "added", "avoid 77"), "operator")
    log.append("knowledge.changed", knowledge("notes.txt", "added", "hello"), "operator")
    log.append("knowledge.changed", knowledge("hosts.md", "changed", "avoid 77 and 91"), "operator")
    log.append("knowledge.changed", knowledge("notes.txt", "removed", None), "operator")
    assert st.knowledge_names() == ["hosts.md", "notes.txt"]
    latest = st.knowledge_latest()
    assert latest["hosts.md"] == KnowledgeVersion("hosts.md", 2, "h-avoid 77 and 91", 15, 3, log.get(3).ts,
                                                  "changed")
    assert latest["notes.txt"].hash is None and latest["notes.txt"].version == 2
    assert st.knowledge_text("hosts.md") == "avoid 77 and 91"
    assert st.knowledge_text("notes.txt") is None
    assert st.knowledge_text("missing.md") is None
    assert [(k.version, k.change) for k in st.knowledge_versions("hosts.md")] == [(1, "added"), (2, "changed")]


# ------------------------------------------------------------------ ticks and the thread


def test_ticks_open_next_and_failed_in_a_row(log: EventLog):
    """next_tick_number counts started and failed ticks; open_tick is the started tick with no end for it;
    consecutive_failed_ticks counts failures back to the last completion, with the newest reason."""
    st = log.store
    assert st.next_tick_number() == 1 and st.open_tick() is None
    assert st.consecutive_failed_ticks() == FailedRun(0, None)
    log.append("tick.started", {"observation": {}}, "scheduler", 1)
    assert st.open_tick() == OpenTick(1, 1, log.get(1).ts)
    log.append("tick.completed", {"steps": 1}, "system", 1)
    assert st.open_tick() is None
    log.append("tick.failed", {"reason": "vast.ai unavailable"}, "system", 2)
    log.append("tick.started", {"observation": {}}, "scheduler", 3)
    log.append("tick.failed", {"reason": "model down"}, "system", 3)
    assert st.next_tick_number() == 4
    assert st.consecutive_failed_ticks() == FailedRun(2, "model down")
    assert st.consecutive_failed_ticks(cap=1) == FailedRun(1, "model down")
    log.append("tick.started", {"observation": {}}, "scheduler", 4)
    log.append("tick.failed", {"reason": "another tick's end"}, "system", 9)
    assert st.open_tick() == OpenTick(4, 6, log.get(6).ts)


def test_checks_counts_and_hashes(log: EventLog):
    """quick_check and integrity_check say ok on a sound file; row_counts, search_index_size and event_hashes
    follow what was appended."""
    st = log.store
    e1 = log.append("operator.note", {"text": "a", "by": "x", "pin": True}, "operator")
    e2 = log.append("memory.written", {"key": "k", "text": "v"}, "model")
    assert st.quick_check() == ["ok"] and st.integrity_check() == ["ok"]
    assert st.row_counts() == {"alerts": 0, "memory": 1, "directives": 1, "instances": 0, "intents": 0,
                               "knowledge": 0, "silences": 0, "instance_states": 0,
                               "observed_runs": 0}
    assert st.search_index_size() == 0  # appends leave the full-text index behind
    assert log.index_search() == 2 and st.search_index_size() == 2
    assert st.event_hashes() == {1: e1.hash, 2: e2.hash}


def test_quick_check_reports_a_damaged_file_instead_of_raising(tmp_path: Path):
    """A file whose pages were overwritten answers quick_check with the problem, not an exception."""
    path = tmp_path / "damaged.db"
    with EventLog(path) as lg:
        lg.append_many([("operator.note", {"text": "x" * 2000, "by": "a"}, "operator", None)] * 50)
    data = bytearray(path.read_bytes())
    data[4096 * 2:4096 * 4] = b"\xff" * (4096 * 2)
    path.write_bytes(bytes(data))
    with EventLog(path, readonly=True) as lg:
        assert lg.store.quick_check() != ["ok"]


def test_tx_store_sees_its_own_appends_and_a_rollback_leaves_nothing(log: EventLog):
    """Inside a transaction tx.store answers with what the transaction appended so far; after a rollback the
    log's store sees none of it."""
    with pytest.raises(RuntimeError), log.transaction() as tx:
        tx.append("alert.raised", raised(tx.store.next_alert_id(), "a"), "system")
        tx.append("alert.raised", raised(tx.store.next_alert_id(), "b"), "system")
        assert [a.dedup_key for a in tx.store.open_alerts()] == ["a", "b"]
        raise RuntimeError("abandon")
    assert log.store.open_alerts() == [] and log.store.next_alert_id() == 1
    with log.transaction() as tx:
        tx.append("memory.written", {"key": "k", "text": "v"}, "model")
        assert tx.store.memory_has("k")
    assert log.store.memory_has("k")


def test_store_reads_a_read_only_log(tmp_path: Path):
    """A log opened read-only (the operator's status) answers every kind of query."""
    path = tmp_path / "ro.db"
    with EventLog(path) as w:
        w.append("alert.raised", raised(1, "a"), "system")
        w.append("tick.started", {"observation": {}}, "scheduler", 1)
    with EventLog(path, readonly=True) as r:
        assert [a.id for a in r.store.open_alerts()] == [1]
        assert r.store.open_tick() is not None and r.store.next_tick_number() == 2
        assert r.store.quick_check() == ["ok"]


def test_rebuild_compares_and_repairs_through_the_store(log: EventLog):
    """A read model edited behind the log's back shows in rebuild_check, and rebuild() restores what the
    Store answers."""
    log.append("memory.written", {"key": "k", "text": "v"}, "model")
    tamper.edit_read_model(log, "memory", text="tampered")
    assert [m.text for m in log.store.memories()] == ["tampered"]
    assert any(d.startswith("memory: live has") for d in log.rebuild_check())
    log.rebuild()
    assert log.rebuild_check() == []
    assert [m.text for m in log.store.memories()] == ["v"]


# ------------------------------------------------------------------ no SQL outside the store

SCANNED = ("agent", "tools", "tests", "bench")
# Tests that play an attacker (tamper, the cross-fleet role attack), set up throwaway PostgreSQL servers
# and fleets, EXPLAIN what the store sends, or run the README's psql steps as the operator would.
ALLOWED = {"agent/store", "tests/tamper.py", "tests/pgserver.py", "tests/store/test_pgserver.py", "tests/pgfleets.py",
           "tests/store/test_pg_isolation.py", "tests/store/test_pg_query_plans.py", "tests/store/test_pg_revoke.py",
           "tests/test_readme_postgres.py"}
# bench/ files that time a raw SQLite baseline against the log may keep their SQL.
BENCH_RAW_BASELINE: set[str] = {"bench/append.py"}

_SQL = re.compile(
    r"\bSELECT\s+[\w*(]|\bINSERT\s+(OR\s+\w+\s+)?INTO\b|\bUPDATE\s+\w+\s+SET\b|\bDELETE\s+FROM\b"
    r"|\bPRAGMA\s+\w|\b(CREATE|DROP)\s+(TABLE|INDEX|TRIGGER|VIEW)\b|\bBEGIN\s+(IMMEDIATE|EXCLUSIVE)\b"
)
_EXECUTE = {"execute", "executemany", "executescript"}


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def raw_sql(source: str) -> list[tuple[int, str]]:
    """(line, what) for each SQL statement text, .execute() call, .conn use or sqlite3.connect() in source."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            m = _SQL.search(node.value)
            if m:
                found.append((node.lineno, f"SQL text {m.group(0)!r}"))
        elif isinstance(node, ast.Attribute) and node.attr == "conn":
            found.append((node.lineno, ".conn (a raw connection)"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in _EXECUTE:
                found.append((node.lineno, f".{node.func.attr}()"))
            elif node.func.attr == "connect" and isinstance(node.func.value, ast.Name) \
                    and node.func.value.id in ("sqlite3", "pysqlite3"):
                found.append((node.lineno, "sqlite3.connect()"))
    return found


def test_the_scanner_finds_each_kind_of_raw_sql():
    """The scan below is not vacuous: statement text, .execute(), .conn and sqlite3.connect() are each found;
    prose and docstrings are not."""
    stmt = "SEL" + "ECT seq FROM events"
    src = "\n".join([
        '"""A docstring may say ' + stmt + '."""',
        "x = " + repr(stmt),
        "log.co" + "nn.close()",
        "cur.exec" + "ute(x)",
        "c = sqlite3.con" + "nect('f.db')",
        "msg = 'select an offer and delete it'",
        "http.request('DEL" + "ETE', url)",
    ])
    assert sorted(line for line, _ in raw_sql(src)) == [2, 3, 4, 5]


def test_no_raw_sql_outside_the_store():
    """Only agent/store/ (and, in tests, the tamper helper that plays an attacker and the throwaway
    PostgreSQL server's setup) writes SQL or touches a connection; everything else asks the Store."""
    offenders = []
    for top in SCANNED:
        for path in sorted((REPO / top).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if any(rel == a or rel.startswith(a + "/") for a in ALLOWED) or rel in BENCH_RAW_BASELINE:
                continue
            offenders += [f"{rel}:{line}: {what}" for line, what in raw_sql(path.read_text(encoding="utf-8"))]
    assert offenders == [], "raw SQL outside agent/store:\n" + "\n".join(offenders)


def test_recorded_input_hashes_are_those_logged_in_full(log: EventLog):
    """The hashes of request inputs already logged (each once, with its full content), so a tick can
    tell which ones are new without decoding their texts."""
    assert log.store.recorded_input_hashes() == set()
    log.append("input.recorded", {"name": "system.md", "sha256": "a" * 64, "content": "You run a fleet."}, "system")
    log.append("input.recorded", {"name": "policy", "sha256": "b" * 64, "content": {"max_instances": 4}}, "system")
    assert log.store.recorded_input_hashes() == {"a" * 64, "b" * 64}
