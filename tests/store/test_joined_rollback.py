"""A joined transaction (a savepoint) whose failure took the whole transaction with it, and a commit the
daemon's guard refused: the transaction is marked gone, so nothing appended after it commits on its own."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from agent.errors import LogError
from agent.runtime.leader import FileLeader, LeaseBusy
from agent.store.log import EventLog
from tests.tamper import roll_back_whole_transaction_on


def reasons(lg: EventLog) -> list[str]:
    return [e.payload["reason"] for e in lg.read(0)]


def test_a_joined_block_whose_error_rolled_back_everything_leaves_its_transaction_gone(tmp_path: Path):
    """The database rolls the whole transaction back inside a joined block: the block raises LogError, and
    a caller that catches it and goes on with the outer transaction can neither append (which would insert
    outside any transaction, each row committing alone onto a head that was rolled back), nor join, nor
    commit; nothing of the outer transaction is in the log, the chain verifies, and the next transaction
    appends as before."""
    db = tmp_path / "log.db"
    with EventLog(db) as lg:
        lg.append("daemon.stopped", {"reason": "first"}, "system")
        roll_back_whole_transaction_on(db, "poison")
        with pytest.raises(LogError, match="could not be written"), lg.transaction() as tx:
            tx.append("daemon.stopped", {"reason": "outer"}, "system")
            with pytest.raises(LogError, match="whole transaction"), lg.transaction() as inner:
                inner.append("daemon.stopped", {"reason": "poison"}, "system")
            assert not lg.in_transaction
            with pytest.raises(LogError, match="rolled back"):
                tx.append("daemon.stopped", {"reason": "after"}, "system")
            with pytest.raises(LogError, match="rolled back"), lg.transaction() as again:
                again.append("daemon.stopped", {"reason": "joined after"}, "system")
        assert reasons(lg) == ["first"]
        assert lg.writer.current() is None and not lg.in_transaction
        lg.append("daemon.stopped", {"reason": "next"}, "system")
        assert reasons(lg) == ["first", "next"]
        assert lg.verify().ok


def test_a_joined_block_that_fails_alone_rolls_back_to_its_savepoint_only(tmp_path: Path):
    """An ordinary failure inside a joined block undoes only the block: the outer transaction goes on and
    commits what it appended before and after."""
    with EventLog(tmp_path / "log.db") as lg:
        with lg.transaction() as tx:
            tx.append("daemon.stopped", {"reason": "before"}, "system")
            with pytest.raises(ValueError), lg.transaction() as inner:
                inner.append("daemon.stopped", {"reason": "undone"}, "system")
                raise ValueError("the block failed")
            tx.append("daemon.stopped", {"reason": "after"}, "system")
        assert reasons(lg) == ["before", "after"]
        assert lg.verify().ok


def test_a_commit_the_guard_refuses_rolls_back_and_leaves_no_live_transaction(tmp_path: Path):
    """The daemon's commit guard (``FileLeader.hold``) finds the lease taken: the COMMIT does not run, the
    transaction (and a joined block inside it) is rolled back and marked gone, nothing is open on the
    connection, and the log appends again once the guard is a holder's."""
    lead = FileLeader(tmp_path / "data", "fleet-1", failover_seconds=30.0)
    with EventLog(tmp_path / "log.db") as lg:
        assert lead.try_acquire()
        lg.commit_guard = lead.hold
        lg.append("daemon.stopped", {"reason": "held"}, "system")
        taker = FileLeader(tmp_path / "data", "fleet-1", failover_seconds=30.0, clock=lambda: time.time() + 31)
        assert taker.try_acquire()
        with pytest.raises(LeaseBusy), lg.transaction() as tx:
            tx.append("daemon.stopped", {"reason": "outer"}, "system")
            with lg.transaction() as inner:
                inner.append("daemon.stopped", {"reason": "joined"}, "system")
        assert tx.gone is not None
        assert lg.writer.current() is None and not lg.in_transaction
        assert lead.lost is not None and "now held by" in lead.lost
        lg.commit_guard = taker.hold
        lg.append("daemon.stopped", {"reason": "taker"}, "system")
        assert reasons(lg) == ["held", "taker"]
        assert lg.verify().ok
        taker.release()
    lead.release()
