"""The full-text index keeps no copy of the text (migration 009): searches find the same events with the
same snippets as the index that kept one, a log written before 009 is caught up on upgrade, and
``log rebuild`` rebuilds the index."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent import events as ev
from agent.events.canonical import canonical
from agent.store import db as agent_db
from agent.store.log import EventLog
from tests.tamper import Tamper

LONG = ("the host in Oslo kept failing after renting two instances there yesterday; every one of them went "
        "down within the hour and the operator said to avoid it until the provider confirms the repair, "
        "then rent again slowly and watch the failures")
QUERIES = ["rent", "failing", "oslo host", "4411", "watch failures", "destroy_instance", "nothing"]


def _fill(log: EventLog) -> None:
    log.append("operator.note", {"text": LONG, "by": "alice"}, "operator")
    log.append("tool.called", {"call_id": "c1", "name": "destroy_instance", "arguments": '{"id": 4411}'}, "model")
    log.append("operator.note", {"text": "nothing relevant here", "by": "bob"}, "operator")
    log.append("operator.note", {"text": "rented 4411 in Oslo: it failed", "by": "alice"}, "operator")


def _indexed(e: ev.Event) -> str:
    """The text the index that kept one held for ``e``: its rendering's, else its kind and payload JSON."""
    return ev.search_text(e) if ev.render(e) is not None else f"{e.kind} {canonical(e.payload)}"


def _match(query: str) -> str:
    return " ".join(f'"{t}"' for t in query.split())


def _tables(path: Path, *, readonly: bool = False) -> set[str]:
    conn = agent_db.connect(path, readonly=readonly)
    try:
        return set(agent_db.database(conn).table_names())
    finally:
        conn.close()


@pytest.fixture
def log(tmp_path: Path):
    with EventLog(tmp_path / "data" / "events.db") as lg:
        yield lg


def test_the_index_holds_no_copy_of_the_text(log: EventLog) -> None:
    """After indexing, the database has no FTS5 content table; every event is indexed and found."""
    _fill(log)
    assert log.index_search() == 4 and log.store.search_index_size() == 4
    tables = _tables(log.path)
    assert "events_fts" in tables and "events_fts_data" in tables
    assert "events_fts_content" not in tables
    assert [e.seq for e, _ in log.search("4411")] == [4, 2]


def test_snippets_are_the_ones_the_content_keeping_index_gave(tmp_path: Path) -> None:
    """A log upgraded from the index that kept each text (migration 009 applied on open) answers every
    query with the same events, in the same order, with the same snippets (stemmed matches marked,
    a long text cut with ' … ')."""
    path = tmp_path / "data" / "events.db"
    with EventLog(path) as log:
        _fill(log)
        texts = {e.seq: _indexed(e) for e in log.read()}
    with Tamper(path) as t:
        t.index_as_before_contentless(texts)
        before = {q: t.search_as_before_contentless(_match(q)) for q in QUERIES}
    assert "events_fts_content" in _tables(path, readonly=True)  # read-only: no migration runs
    with EventLog(path) as log:
        assert "events_fts_content" not in _tables(path)
        after = {q: [(e.seq, snip) for e, snip in log.search(q)] for q in QUERIES}
    assert after == before
    assert any("[renting]" in s and " … " in s for _, s in before["rent"])  # the cases the comparison covers
    assert [seq for seq, _ in before["rent"]] == [4, 1]


def test_a_log_from_before_009_is_indexed_on_upgrade_and_by_rebuild(tmp_path: Path) -> None:
    """Opening a pre-009 log replaces its index with an empty contentless one, which the first search
    fills in full; ``rebuild`` empties and refills it, finding the same events."""
    path = tmp_path / "data" / "events.db"
    with EventLog(path) as log:
        _fill(log)
        texts = {e.seq: _indexed(e) for e in log.read()}
    with Tamper(path) as t:
        t.index_as_before_contentless(texts)
    with EventLog(path) as log:
        assert log.store.search_index_size() == 0
        found = [e.seq for e, _ in log.search("oslo")]
        assert found == [4, 1] and log.store.search_index_size() == 4
        log.append("operator.note", {"text": "Oslo is fine again", "by": "bob"}, "operator")
        log.rebuild()
        assert log.store.search_index_size() == 5
        assert [e.seq for e, _ in log.search("oslo")] == [5, 4, 1]


def test_a_phrase_matches_in_order_past_many_events_holding_its_words(log: EventLog) -> None:
    """The index knows which words an event holds, not their order: a term that is several words
    ("destroy_instance") still matches only where they stand in a row, found past more candidates than
    one batch holds, and ``limit`` and ``until_seq`` bound the hits as before."""
    log.append("operator.note", {"text": "please destroy_instance 4411", "by": "alice"}, "operator")
    log.append("operator.note", {"text": "destroy instance 4412 too", "by": "alice"}, "operator")
    log.append_many(("operator.note", {"text": f"the instance {n} we will not destroy", "by": "bob"}, "operator", None)
                    for n in range(120))
    assert [(e.seq, s) for e, s in log.search("destroy_instance")] == [
        (2, "[operator note · alice] [destroy instance] 4412 too"),
        (1, "[operator note · alice] please [destroy_instance] 4411")]
    assert [e.seq for e, _ in log.search("destroy instance", limit=3)] == [122, 121, 120]
    assert [e.seq for e, _ in log.search("instance destroy", until_seq=2)] == [2, 1]
    assert log.search("destroy_instance", until_seq=0) == []
