"""Storage tiers end to end: ticks over five months, then `log archive` and every read command across the
archived months (replay --verify, context --tick/--at, thread show, log search, log verify, backup)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.cli import main
from agent.runtime.app import App
from agent.runtime.tick import run_tick
from agent.store.log import EventLog
from tests.fork.test_fork import _config_file

SMALL = {"budget_tokens": 6000, "output_reserve": 1000, "high_water": 0.6, "low_water": 0.35,
         "tool_output_max_tokens": 600, "summary_max_tokens": 700, "knowledge_max_tokens": 600,
         "pinned_max_tokens": 1500}


@pytest.fixture
def aged(sim_clock, make_app, tmp_path) -> tuple[App, Path]:
    """Twenty rules-provider ticks a week apart (about five months) under a small budget, so summaries
    cover the early months; (closed app, its config file with storage.archive_after 60d)."""
    app = make_app(provider="rules", context=SMALL, storage={"archive_after": 60 * 86400.0})
    for _ in range(20):
        assert run_tick(app).ok
        sim_clock.advance(7 * 86400)
    app.close()
    return app, _config_file(app, tmp_path / "config.yaml")


def _out(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str]:
    rc = main(argv)
    return rc, capsys.readouterr().out


@pytest.mark.slow
def test_every_read_command_answers_the_same_across_archived_months(aged, capsys, tmp_path):
    """Before and after `log archive`: `replay --verify` re-derives every request (those in segments too),
    `context --tick 2` and `--at` print the same context, `thread show --json` and `log export` the same
    events, `log search` the same hits, `log rebuild --check` finds the read models equal to a rebuild from
    the whole log, and `log verify` passes over the whole chain; `log archive --dry-run` changes nothing first;
    `backup` copies the segments and its copy verifies."""
    app, cfg = aged
    c = ["--config", str(cfg)]
    reads = [["replay", "--verify"], ["context", "--tick", "2"], ["thread", "show", "--json"],
             ["log", "search", "offer"], ["context", "--at", "2026-12-03T00:00Z"], ["log", "export"],
             ["log", "rebuild", "--check"]]
    before = [_out(capsys, c + r) for r in reads]
    assert all(rc == 0 for rc, _ in before), before
    rc, dry = _out(capsys, c + ["log", "archive", "--dry-run"])
    assert rc == 0 and "would seal" in dry and "nothing was changed" in dry
    with EventLog(app.settings.db_path, create=False) as lg:
        assert lg.store.segments() == []
    rc, done = _out(capsys, c + ["log", "archive"])
    assert rc == 0 and "sealed" in done, done
    with EventLog(app.settings.db_path, create=False) as lg:
        segs = lg.store.segments()
        assert segs and lg.store.hot_events_after(0) < lg.count()
        archived_ticks = {t for s in segs for t in (s.min_tick, s.max_tick)}
    assert 2 in range(min(archived_ticks), max(archived_ticks) + 1)
    after = [_out(capsys, c + r) for r in reads]
    assert after == before
    rc, ok = _out(capsys, c + ["log", "verify"])
    assert rc == 0 and ok.startswith("ok:")
    rc, listing = _out(capsys, c + ["log", "segments", "--json"])
    assert rc == 0 and [s["name"] for s in json.loads(listing)] == [s.name for s in segs]
    rc, b = _out(capsys, c + ["backup", str(tmp_path / "copy.db")])
    assert rc == 0 and "verified" in b
    assert sorted(p.name for p in (tmp_path / "copy.db.segments").iterdir()) == sorted(s.name for s in segs)
