"""What a tick reads again and again (the overrides, the pause, the exclusions, the fleet we own) is kept
between writes (``EventLog.memo``): any commit by another connection or process, a rollback of ours and an
append of ours that could change it make the next read go to the database again, so no guardrail acts on a
stale answer."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from agent.fleet import steering
from agent.store import plans, readmodels
from agent.store.log import EventLog
from tests.conftest import rent_puts
from tests.test_steering import _good_offers, renter


def _in_another_process(log: EventLog, code: str) -> None:
    """Run ``code`` in a new Python process with ``log`` (the same database and head file) open there."""
    script = ("import sys\nfrom agent.fleet import steering\nfrom agent.store.log import EventLog\n"
              f"log = EventLog({str(log.path)!r}, head_file={str(log.head_file)!r}, create=False)\n"
              f"{code}\nlog.close()\n")
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)


def _statements(log: EventLog, fn: Any) -> tuple[Any, list[str]]:
    with plans.record(log) as seen:
        return fn(), seen


def test_a_pause_or_an_exclusion_from_another_process_blocks_the_very_next_call(sim, make_app):
    """The pipeline's pause and exclusion checks read through the memo: a pause an operator's process
    commits between two rent calls refuses the second ('paused'), and once resumed, an exclusion of the
    third offer's host committed just before it refuses that one ('excluded_hosts'); vast.ai sees only
    the first rent."""
    app = make_app(policy={"max_rents_per_hour": 100})
    a, b, c = _good_offers(sim, app.settings, 3)
    _, rent = renter(app)
    assert rent(1, a)[0].ok
    assert steering.paused(app.log) is None and c["host_id"] not in steering.excluded_hosts(app.settings, app.log)
    _in_another_process(app.log, "steering.pause(log, by='alice', reason='migration', until=None)")
    out, blocked = rent(2, b)
    assert blocked and out.blocked[0] == "paused"
    _in_another_process(app.log, "steering.resume(log, by='alice', reason=None)\n"
                                 f"steering.exclude_host(log, {c['host_id']}, by='bob', reason='disk',"
                                 " source='operator', until=None)")
    out, blocked = rent(3, c)
    assert blocked and out.blocked[0] == "excluded_hosts"
    assert len(rent_puts(sim)) == 1


def test_another_connections_commit_between_two_reads_is_seen(make_app):
    """Two logs open on one database: the overrides, pause and exclusions read by one are read again once
    the other has committed a change to them, and a read with nothing committed in between runs no query
    but SQLite's data_version."""
    app = make_app()
    other = EventLog(app.log.path, head_file=app.log.head_file, create=False)
    try:
        assert steering.active_overrides(app.log) == {} and steering.paused(app.log) is None
        assert 4417 not in steering.excluded_hosts(app.settings, app.log)
        again, seen = _statements(app.log, lambda: steering.paused(app.log))
        assert again is None and len(seen) == 1 and seen[0].endswith("data_version")  # the check alone
        steering.set_override(other, app.settings, "max_instances", "1", by="alice", reason="r", until=None)
        steering.pause(other, by="alice", reason="r", until=None)
        steering.exclude_host(other, 4417, by="alice", reason="r", source="operator", until=None)
        assert steering.active_overrides(app.log)["max_instances"].value == 1
        assert steering.paused(app.log) is not None
        assert 4417 in steering.excluded_hosts(app.settings, app.log)
    finally:
        other.close()


@pytest.mark.parametrize("joined", [False, True])
def test_what_a_rolled_back_append_showed_is_not_remembered(make_app, joined):
    """A pause appended and read inside a transaction (or a block joined to one) that then rolls back is
    gone: after it, or in the enclosing transaction, where the pause appended in its place is the one read."""
    app = make_app()
    log = app.log

    def paused_then_fail() -> None:
        with log.transaction():
            steering.pause(log, by="alice", reason="r", until=None)
            assert steering.paused(log) is not None
            raise RuntimeError("undo")

    if joined:
        with log.transaction():
            with pytest.raises(RuntimeError):
                paused_then_fail()
            steering.pause(log, by="bob", reason="r", until=None)  # appended where alice's was, not read before
            p = steering.paused(log)
            assert p is not None and p.by == "bob"
        steering.resume(log, by="bob", reason=None)
        assert steering.paused(log) is None
    else:
        with pytest.raises(RuntimeError):
            paused_then_fail()
    assert steering.paused(log) is None


def test_an_append_of_ours_that_changes_the_answer_is_seen_inside_its_transaction(make_app):
    """Inside one transaction an exclusion appended after a read of the exclusions is in the next read,
    before the commit; an append of another kind keeps the read (no query for it)."""
    app = make_app()
    log = app.log
    with log.transaction():
        assert 4417 not in steering.excluded_hosts(app.settings, log)
        log.append("operator.note", {"by": "alice", "text": "hello"}, "operator")
        kept, seen = _statements(log, lambda: steering.excluded_hosts(app.settings, log))
        assert 4417 not in kept and seen == []
        steering.exclude_host(log, 4417, by="alice", reason="r", source="operator", until=None)
        assert 4417 in steering.excluded_hosts(app.settings, log)
    assert 4417 in steering.excluded_hosts(app.settings, log)


def test_written_by_names_every_projector_that_writes_those_tables():
    """``readmodels.WRITTEN_BY`` (which the memo of the fleet we own and of the instance states trusts)
    names exactly the kinds whose projector inserts, updates or deletes rows of each table."""
    for table, kinds in readmodels.WRITTEN_BY.items():
        assert readmodels.kinds_writing(table) == set(kinds), table
    assert readmodels.kinds_writing("silences") == {"alert.silenced", "alert.unsilenced"}  # the check sees writes


def test_an_alert_raised_by_another_connection_is_resolved_by_the_next_resolve(make_app):
    """``resolve_alert`` looks for a live alert before opening a transaction, through the kept list of
    live alerts: one raised by another connection since the last look is found and resolved, and one
    resolved by this connection is gone from the next look."""
    from agent import feedback

    app = make_app()
    other = EventLog(app.log.path, head_file=app.log.head_file, create=False)
    try:
        assert feedback.resolve_alert(app.log, "model:unreachable", "fine") is False
        feedback.raise_alert(other, key="model:unreachable", severity="warning", title="down")
        assert feedback.resolve_alert(app.log, "model:unreachable", "answered again") is True
        assert feedback.resolve_alert(app.log, "model:unreachable", "answered again") is False
        assert [a.status for a in other.store.alerts(all_=True)] == ["resolved"]
    finally:
        other.close()


def test_an_append_of_ours_outside_a_transaction_is_seen_by_the_next_read(make_app):
    """A pause, a resume and an exclusion this log appends on its own (each its own commit) change the
    next read through the memo, though no other connection committed."""
    app = make_app()
    log = app.log
    assert steering.paused(log) is None and 4417 not in steering.excluded_hosts(app.settings, log)
    steering.pause(log, by="alice", reason="r", until=None)
    assert steering.paused(log) is not None
    steering.resume(log, by="alice", reason=None)
    assert steering.paused(log) is None
    steering.exclude_host(log, 4417, by="alice", reason="r", source="operator", until=None)
    assert 4417 in steering.excluded_hosts(app.settings, log)
