"""A deferred commit (``EventLog.transaction(defer=True)``) on a real SQLite file: what it appended commits with
the next commit of the same thread, or at ``flush`` / ``agent.store.deferred.settle`` (what every network path
calls first); a failure of the block that carries it still commits it; the fence runs before the commit that
carries it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.errors import LogError
from agent.store import deferred, plans
from agent.store.log import EventLog
from tests import tamper


@pytest.fixture
def log(tmp_path: Any) -> Iterator[EventLog]:
    with EventLog(tmp_path / "data" / "events.db") as lg:
        yield lg


def note(text: str) -> dict[str, Any]:
    return {"text": text, "by": "alice"}


def _other_count(log: EventLog) -> int:
    """The events another connection sees committed."""
    with EventLog(log.path, readonly=True, create=False) as other:
        return other.count()


def _lock_free(db: Any) -> bool:
    return tamper.sqlite_write_lock_free(db if isinstance(db, Path) else db.path)


def test_a_deferred_commit_is_made_by_the_next_transaction_of_the_thread_in_one_commit(log):
    """What a deferred block appended is not committed (another connection sees nothing) until the next
    append of the same thread, whose one COMMIT carries both, in order; the chain verifies."""
    with log.transaction(defer=True) as tx:
        tx.append("operator.note", note("start"), "operator")
    assert log.deferred and deferred.pending() and _other_count(log) == 0
    with plans.record(log) as statements:
        log.append("operator.note", note("next"), "operator")
    assert sum(s.startswith("COMMIT") for s in statements) == 1
    assert not log.deferred and not deferred.pending()
    assert _other_count(log) == 2
    assert [e.payload["text"] for e in log.read()] == ["start", "next"] and log.verify().ok


def test_reads_in_the_window_see_what_was_deferred_and_settle_commits_it(log):
    """Between the deferred block and its commit this connection reads its own appends; ``settle`` (what the
    clients and the pipeline call before anything leaves the process) commits it and frees the write lock."""
    with log.transaction(defer=True) as tx:
        tx.append("operator.note", note("start"), "operator")
    assert log.count() == 1 and not _lock_free(log)
    deferred.settle()
    assert not log.deferred and _other_count(log) == 1 and _lock_free(log)
    deferred.settle()  # nothing left: nothing happens
    log.flush()
    assert log.count() == 1 and log.verify().ok


def test_a_failing_block_that_carries_it_is_undone_alone_and_the_deferred_events_commit(log):
    """An exception in the transaction that would have carried the deferred commit undoes that block's
    appends only; what was deferred commits (as it would have on its own) and the exception goes on."""
    with log.transaction(defer=True) as tx:
        tx.append("operator.note", note("start"), "operator")
    with pytest.raises(RuntimeError, match="boom"), log.transaction() as tx:
        tx.append("operator.note", note("lost"), "operator")
        raise RuntimeError("boom")
    assert not log.deferred and _lock_free(log)
    assert [e.payload["text"] for e in log.read()] == ["start"] and _other_count(log) == 1
    log.append("operator.note", note("after"), "operator")
    assert log.verify().ok and log.count() == 2


def test_the_fence_runs_before_the_commit_that_carries_it(log):
    """The fence (a daemon's leadership check) is asked at the commit that carries the deferred events; when
    it refuses, neither they nor the carrying block's events are committed, and the log goes on."""
    asked: list[int] = []

    def fence() -> None:
        asked.append(log.count())
        if len(asked) == 1:
            raise LogError("leadership lost")

    log.fence = fence
    with log.transaction(defer=True) as tx:
        tx.append("operator.note", note("start"), "operator")
    assert asked == []  # a deferred block does not ask: its commit is not made yet
    with pytest.raises(LogError, match="leadership lost"):
        log.append("operator.note", note("next"), "operator")
    assert asked == [2] and log.count() == 0 and not log.deferred and _lock_free(log)
    log.append("operator.note", note("again"), "operator")
    assert log.count() == 1 and log.verify().ok


def test_after_commit_work_waits_for_the_carrying_commit(log):
    """What is to run once a transaction commits (an alert's notification) runs when the commit that carries
    the deferred block is made, not at the block's end."""
    ran: list[str] = []
    with log.transaction(defer=True) as tx:
        tx.append("operator.note", note("start"), "operator")
        log.after_commit(lambda: ran.append("notified"))
    assert ran == []
    log.append("operator.note", note("next"), "operator")
    assert ran == ["notified"]


def test_a_network_call_inside_a_carrying_block_or_from_another_thread_is_refused(log):
    """``settle`` inside the transaction block that carries a deferred commit (a network call made while it
    holds the lock with its events uncommitted) raises; another thread cannot commit this thread's deferred
    transaction (and has nothing of its own to settle)."""
    with log.transaction(defer=True) as tx:
        tx.append("operator.note", note("start"), "operator")
    errors: list[BaseException] = []

    def other() -> None:
        deferred.settle()  # this thread deferred nothing
        try:
            log.flush()
        except LogError as e:
            errors.append(e)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert len(errors) == 1 and log.deferred
    with pytest.raises(LogError, match="network"), log.transaction() as tx:
        tx.append("operator.note", note("in block"), "operator")
        deferred.settle()
    # the block failed: the deferred event committed alone
    assert [e.payload["text"] for e in log.read()] == ["start"] and not log.deferred


def test_a_deferred_block_carried_by_a_deferring_block_stays_deferred(log):
    """A second deferred block on top of a deferred one adds its events and leaves both for the next commit."""
    with log.transaction(defer=True) as tx:
        tx.append("operator.note", note("a"), "operator")
    with log.transaction(defer=True) as tx:
        tx.append("operator.note", note("b"), "operator")
    assert log.deferred and _other_count(log) == 0
    log.flush()
    assert _other_count(log) == 2 and log.verify().ok


def test_a_waiting_deferred_commit_is_not_an_open_transaction_block(log):
    """``in_transaction`` (which a resolve with nothing to resolve reads to skip its transaction) is False while
    a deferred commit only waits, True inside the block that carries it, and False once it committed."""
    with log.transaction(defer=True) as tx:
        tx.append("operator.note", note("start"), "operator")
        assert log.in_transaction
    assert not log.in_transaction and log.deferred
    with log.transaction():
        assert log.in_transaction
    assert not log.in_transaction and not log.deferred
