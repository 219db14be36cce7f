"""Ambiguous rents: the simulator creates the instance, then answers 500 or hangs.

Promise 4: the outcome is settled by looking for our label within the same tick, never
by sending the rent again.
"""

from __future__ import annotations

import pytest

from tests.reliability.harness import run_ambiguous

# Runs on SQLite and on PostgreSQL (the harness writes configs naming the test's database).
pytestmark = pytest.mark.usefixtures("backend")


@pytest.mark.slow
def test_every_ambiguous_rent_is_resolved_within_its_tick_and_never_duplicated(fast_root):
    """Half of all rents create the instance and then fail (500, or a hang past the client
    timeout), switching every two ticks while demand swings: every tool.called has its
    tool.result before its tick ends, each ambiguous rent is recorded as rented (the label
    was found), and the audit finds no duplicate, untraced or untracked instance."""
    r = run_ambiguous(fast_root, ticks=14)
    assert r["failed_ticks"] == []
    assert r["unresolved"] == []
    assert r["ambiguous_500"] >= 1 and r["ambiguous_hang"] >= 1
    ambiguous = r["ambiguous_500"] + r["ambiguous_hang"]
    assert ambiguous >= 0.1 * r["rent_requests"]
    assert r["resolved_by_label"] == ambiguous
    a = r["audit"]
    assert (a["duplicates"], a["untraced"], a["untracked"], a["dangling_intents"]) == (0, 0, 0, 0)
    assert a["created"] == r["rents_creating"]
    assert r["problems"] == []
