"""The query-plan test on PostgreSQL: ten fleets in one database, the newest never analyzed.

Nine fleets of ``EVENTS`` events each (copies of real ticks, bench/biglog.py) are analyzed; then the tenth
is grown through ``EventLog.append_many`` with autovacuum off, so the planner has never seen a row of it
(tests/pgfleets.py). A real tick, each operator command and the projection run against that newest fleet
with every statement its connection sends recorded; each is then run again under EXPLAIN (ANALYZE) and
must neither scan the events table (or the search index) whole nor read more than ``MAX_ROWS`` of their
rows (agent/store/plans.py): a plan that sorts all of the fleet's rows to find its newest one reads them all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent.config import PgTarget
from agent.feedback.alerts import raise_alert
from agent.runtime.app import App
from agent.runtime.tick import run_tick
from agent.sim import ManualClock, SimServer, Simulator
from agent.store import plans
from agent.store.log import EventLog
from bench.biglog import grow, record_template
from tests.conftest import settings_for
from tests.pgfleets import analyzed, copy_fleet
from tests.pgserver import PgServer, fleet_database
from tests.store.test_query_plans import _project, _run_commands

EVENTS = 10_000
FLEETS = 10
MAX_ROWS = 2_000  # the flat statements read a few hundred rows at most; sorting a fleet reads all 10,000


@pytest.fixture(scope="module")
def newest(pg_server: PgServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[App, Simulator, str]]:
    """An App on the newest of ten fleets in one database, its rows never analyzed."""
    clock = ManualClock()
    sim = Simulator(seed=7, clock=clock)
    with SimServer(sim) as server, fleet_database(pg_server) as url:
        env = {"VAST_API_KEY": sim.api_key}
        tpl = App(settings_for(tmp_path_factory.mktemp("template"), server.url, provider="rules"), env=env,
                  clock=clock)
        tpl.init_database()
        template = record_template(tpl, sim.advance, ticks=4)
        tpl.close()
        state = tmp_path_factory.mktemp("state")
        # Every fleet's history ends where the newest's does, as fleets running side by side on one server
        # have theirs: the events' timestamps are in the same statistics.
        now = datetime.fromtimestamp(clock(), UTC)
        with EventLog(PgTarget(url, "fleet-1", state_dir=state)) as first:
            grow(first, template, EVENTS, now=now)
        for i in range(2, FLEETS):
            EventLog(PgTarget(url, f"fleet-{i}", state_dir=state)).close()
        copy_fleet(pg_server, url, "fleet-1", [f"fleet-{i}" for i in range(2, FLEETS)])
        s = settings_for(tmp_path_factory.mktemp("newest"), server.url, provider="rules")
        s = dataclasses.replace(s, agent_id=f"fleet-{FLEETS}", storage=dataclasses.replace(s.storage, url=url))
        app = App(s, env=env, clock=clock)
        app.init_database()
        grow(app.log, template, EVENTS)
        sim.advance(600)
        try:
            yield app, sim, url
        finally:
            app.close()


@pytest.mark.slow
def test_the_newest_of_ten_fleets_never_analyzed_reads_no_more_than_it_needs(
        newest: tuple[App, Simulator, str], pg_server: PgServer, capsys: pytest.CaptureFixture[str]) -> None:
    """On the newest of ten fleets of 10,000 events in one database, its rows never analyzed: no statement of
    a real tick, of the operator commands or of the projection scans the events table whole or reads more
    than MAX_ROWS of its rows (EXPLAIN ANALYZE's own counts)."""
    app, sim, url = newest
    assert not analyzed(pg_server, url, f"fleet-{FLEETS}") and analyzed(pg_server, url, "fleet-1")
    with plans.pg_record(app.log) as tick:
        run_tick(app)
    sim.advance(300)
    # an open alert for the commands to show and ack (whatever the tick left open or resolved)
    alert_id, _ = raise_alert(app.log, key="queue:backlog", severity="warning", title="jobs are waiting")
    with plans.pg_record(app.log) as commands:
        _run_commands(app, alert_id)
    with plans.pg_record(app.log) as projection:
        _project(app)
    capsys.readouterr()
    assert len(tick) > 30 and len(commands) > 20 and len(projection) > 2
    assert app.log.count() > EVENTS
    problems = plans.pg_problems(app.log, tick + commands + projection, MAX_ROWS)
    assert not problems, "\n".join(problems)


def test_the_check_sees_a_read_of_every_row_and_a_sort_of_every_row(pg_url: str, tmp_path: Path) -> None:
    """The check fails where it should: a read that filters on a column no index covers reads every row of the
    fleet, and so does a read that sorts them all to keep one; a read by key reads one row."""
    select = "SEL" + "ECT seq FROM events WHERE "
    with EventLog(PgTarget(pg_url, "fleet-a", state_dir=tmp_path), create=True) as log:
        log.append_many([("tick.completed", {"steps": 1}, "system", n) for n in range(1, 3001)])
        assert plans.pg_problems(log, [(select + "payload = '{}'", [])], MAX_ROWS)  # every row of the fleet
        every = "SEL" + "ECT seq FROM events ORDER BY payload DESC LIMIT 1"
        assert plans.rows_read(plans.pg_plan(log, every, [], analyze=True)) >= 3000
        assert plans.pg_problems(log, [(every, [])], MAX_ROWS)[0].startswith("3000 rows read")
        assert plans.pg_problems(log, [(select + "seq = %s", [7])], MAX_ROWS) == []


@pytest.mark.slow
def test_a_policy_the_planner_can_guess_sorts_the_newest_fleet_and_the_check_says_so(
        pg_server: PgServer, pg_url: str, tmp_path: Path) -> None:
    """Nine fleets of 4,000 events analyzed, a tenth of 20,000 never: the newest tick read through the policy keyed on
    the session's role and binding (a value the planner cannot guess) goes down the primary key backwards
    and reads 1 row. Put back the policy from before the bindings, keyed on the setting the planner reads
    as a constant, and the planner expects 1 row of a fleet it never saw, so it sorts all 20,000: the check
    names that statement and its Sort."""
    from urllib.parse import urlsplit

    from psycopg import connect

    for i in range(1, FLEETS):
        with EventLog(PgTarget(pg_url, f"fleet-{i}", state_dir=tmp_path), create=True) as log:
            for start in range(1, 4001, 2000):
                log.append_many([("tick.completed", {"steps": 1}, "system", n) for n in range(start, start + 2000)])
    copy_fleet(pg_server, pg_url, "fleet-1", [])  # ANALYZE, then no autovacuum
    latest = "SEL" + "ECT seq FROM events WHERE kind = 'tick.completed' ORDER BY seq DESC LIMIT 1"
    with EventLog(PgTarget(pg_url, f"fleet-{FLEETS}", state_dir=tmp_path), create=True) as log:
        for start in range(1, 20001, 2000):
            log.append_many([("tick.completed", {"steps": 1}, "system", n) for n in range(start, start + 2000)])
        assert not analyzed(pg_server, pg_url, f"fleet-{FLEETS}")
        assert plans.rows_read(plans.pg_plan(log, latest, [], analyze=True)) == 1
        assert plans.pg_problems(log, [(latest, [])], 1000) == []
        with connect(pg_server.dsn(urlsplit(pg_url).path.strip("/")), autocommit=True) as su:
            su.execute("ALTER POLICY fleet ON events USING (agent_id = current_setting('fleet_agent.agent_id'))")
        (problem,) = plans.pg_problems(log, [(latest, [])], 1000)
        assert problem.startswith("20000 rows read") and "Sort" in problem, problem
