"""Every query a tick, the operator commands and the projection issue stays flat in the log's size.

A log of 10^5 events is built through ``EventLog.append_many`` from copies of real ticks
(bench/biglog.py); then a real tick runs, each operator command runs in-process and the
projection is built, with every statement the log's connection executes recorded. Each
recorded statement is checked twice, without timing anything:

- its ``EXPLAIN QUERY PLAN`` must not scan the events table (or the full-text index) whole;
- run again under SQLite's progress handler, a read must finish within ``MAX_VM_STEPS``
  virtual-machine instructions: reading a share of 10^5 rows takes far more, whatever index
  it goes through, so a query whose cost grows with the log fails here (agent/store/plans.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent import context
from agent.cli import build_parser
from agent.feedback.alerts import raise_alert
from agent.runtime.app import App
from agent.runtime.tick import run_tick
from agent.sim import ManualClock, SimServer, Simulator
from agent.store import plans
from agent.store.log import EventLog
from bench.biglog import grow, record_template
from tests.conftest import settings_for

EVENTS = 100_000
MAX_VM_STEPS = 10_000   # the flat statements take ~1,100 at most; MAX(tick) over every tick row took 33,200


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[App, Simulator]]:
    """An App over a log of 10^5 events whose history came from copies of real ticks."""
    clock = ManualClock()
    sim = Simulator(seed=7, clock=clock)
    # The history is copies of 4 ticks: with minutes-long starts each copy would replay every instance's start as
    # a new run (a fleet restarting every 20 minutes for months); instant starts keep the copies' fleet steady.
    sim.realism.update({"quick": 1})
    with SimServer(sim) as server:
        env = {"VAST_API_KEY": sim.api_key}
        tpl_dir = tmp_path_factory.mktemp("template")
        tpl = App(settings_for(tpl_dir, server.url, provider="rules"), env=env, clock=clock)
        tpl.init_database()
        template = record_template(tpl, sim.advance, ticks=4)
        tpl.close()
        app = App(settings_for(tmp_path_factory.mktemp("big"), server.url, provider="rules"), env=env, clock=clock)
        app.init_database()
        grow(app.log, template, EVENTS)
        sim.advance(600)
        try:
            yield app, sim
        finally:
            app.close()


def _record(app: App, work: Any) -> list[str]:
    with plans.record(app.log) as statements:
        work()
    return statements


def _commands(app: App, alert_id: int) -> list[list[str]]:
    return [["alerts", "list"], ["alerts", "show", str(alert_id)], ["alerts", "ack", str(alert_id), "--note", "seen"],
            ["say", "prefer hosts above 0.98"], ["say", "--pin", "at most 4 instances"], ["directives"],
            ["status"], ["knowledge", "list"], ["context"], ["spend"], ["spend", "--json"],
            ["thread", "show", "--since", str(app.log.last_seq() - 50), "--kind", "tick."]]


def _run_commands(app: App, alert_id: int) -> None:
    """Each operator command, in-process, against ``app`` (so its connection is the one recorded)."""
    parser = build_parser()
    for argv in _commands(app, alert_id):
        args = parser.parse_args(argv)
        assert args.func(args, app) == 0, argv
        if argv[0] == "say" and "--pin" in argv:
            directive = app.log.store.active_directives()[-1]
            args = parser.parse_args(["unpin", str(directive.id)])
            assert args.func(args, app) == 0


def _project(app: App) -> None:
    context.project(app.log, app.prompts, app.settings.context, policy=app.policy_dict(), tools=app.tool_specs(),
                    cache=app.projection_cache)


@pytest.mark.slow
def test_a_tick_the_commands_and_the_projection_never_scan_the_log(big: tuple[App, Simulator],
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """On a log of 10^5 events, no statement of a real tick, of the operator commands (alerts, say, unpin,
    directives, status, knowledge, context, thread, spend) or of the projection scans the events table whole
    or takes work that grows with the log (VM instructions past MAX_VM_STEPS)."""
    app, sim = big
    tick = _record(app, lambda: run_tick(app))
    sim.advance(300)
    # an open alert for the commands to show and ack (whatever the tick left open or resolved)
    alert_id, _ = raise_alert(app.log, key="queue:backlog", severity="warning", title="jobs are waiting")
    commands = _record(app, lambda: _run_commands(app, alert_id))
    projection = _record(app, lambda: _project(app))
    capsys.readouterr()
    assert len(tick) > 30 and len(commands) > 20 and len(projection) > 2
    assert app.log.count() > EVENTS
    problems = plans.problems(app.log, tick + commands + projection, MAX_VM_STEPS)
    assert not problems, "\n".join(problems)


def test_the_check_sees_a_full_scan_and_a_growing_read(tmp_path: Path) -> None:
    """The two checks fail where they should: a read with no usable index is a full scan, and reading
    many rows through an index costs VM steps in proportion (so a growing read would not pass)."""
    select = "SEL" + "ECT seq FROM events WHERE "
    with EventLog(tmp_path / "x.db") as log:
        log.append_many([("tick.completed", {"steps": 1}, "system", n) for n in range(1, 3001)])
        assert plans.problems(log, [select + "payload = '{}'"], MAX_VM_STEPS)[0].startswith("full scan")
        many = select + "kind = 'tick.completed'"
        assert plans.vm_steps(log, many) > 3000
        assert plans.problems(log, [many], 1000)[0].endswith(many)
        assert plans.vm_steps(log, select + "seq = 7") < 200
        assert plans.problems(log, [select + "seq = 7"], 1000) == []
