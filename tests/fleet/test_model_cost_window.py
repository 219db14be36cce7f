"""The model cost's window on a long log (agent.fleet.spend.model_cost): the newest MODEL_COST_TICKS ticks are found
by their index entries and only the window's first and newest observations are read; a window that reaches into
archived months (storage tiers) gives the figures the events give."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from agent.fleet.spend import MODEL_COST_TICKS, model_cost
from agent.price import PRESETS
from agent.store import archive
from agent.store.log import EventLog
from tests.conftest import settings_for
from tests.store.test_archive import DAY, Clock, Stepping

TICKS = 60
USAGE = {"prompt_tokens": 1200, "cached_tokens": 800, "completion_tokens": 90}


def _instances(n: int) -> list[dict[str, Any]]:
    return [{"id": 1000 + i, "gpu_name": "RTX 4090", "num_gpus": 1, "status": "running", "dph": 0.4, "ours": i != 0}
            for i in range(n)]


def _log(path: Path, clock: Clock) -> EventLog:
    """TICKS ticks a day apart from 2026-01-01 (events eight hours apart), each an observation (tick t: t + 2 instances, 10 t jobs
    completed), one model response and its end; then a summary covering all but the newest tick."""
    log = EventLog(path, clock=Stepping(clock, timedelta(hours=8)))
    for t in range(1, TICKS + 1):
        log.append_many([
            ("tick.started", {"observation": {"instances": _instances(t + 2), "demand": {"completed": 10 * t}}},
             "system", t),
            ("model.response", {"text": "", "tool_calls": [], "usage": USAGE}, "model", t),
            ("tick.completed", {"steps": 1}, "system", t)])
    log.clock = clock
    log.append("context.compacted", {"summary": "older ticks", "covered_to": log.last_seq() - 3, "method": "fallback"},
               "system")
    return log


def _expected(log: EventLog) -> dict[str, Any]:
    """The window's figures, from the events: the newest MODEL_COST_TICKS ticks, one priced call each."""
    i, c, o = PRESETS["gpt-4.1"][:3]
    call = ((USAGE["prompt_tokens"] - USAGE["cached_tokens"]) * i + USAGE["cached_tokens"] * c
            + USAGE["completion_tokens"] * o) / 1e6
    starts = [e for e in log.read(0, kinds=["tick.started"])][-MODEL_COST_TICKS:]
    first = TICKS - MODEL_COST_TICKS + 1
    assert [e.tick for e in starts] == list(range(first, TICKS + 1))
    return {"ticks": MODEL_COST_TICKS, "calls": MODEL_COST_TICKS, "since": starts[0].ts,
            "cost": pytest.approx(call * MODEL_COST_TICKS, rel=1e-4), "last_tick": {"tick": TICKS, "cost": round(call, 6)},
            "instances": TICKS + 2 - 1, "jobs": 10 * (TICKS - first),
            "per_job": pytest.approx(call * (MODEL_COST_TICKS - 1) / (10 * (TICKS - first)), rel=1e-4)}


def _figures(mc: dict[str, Any]) -> dict[str, Any]:
    return {k: mc[k] for k in ("ticks", "calls", "since", "cost", "last_tick", "instances", "jobs", "per_job")}


def test_the_window_is_the_newest_ticks_hot_or_archived(tmp_path: Path) -> None:
    clock = Clock()
    settings = settings_for(tmp_path, "http://127.0.0.1:9", model={"name": "gpt-4.1"})
    with _log(tmp_path / "data" / "fleet-agent.db", clock) as log:
        expected = _expected(log)
        assert _figures(model_cost(log, settings)) == expected
        # January and February (all but the newest tick) move into segments: most of the window leaves the table.
        clock.t += timedelta(days=21)
        moved = archive.archive(log, older_than=20 * DAY, now=clock())
        assert moved.sealed and log.segments()
        assert 0 < len(log.store.tick_starts(MODEL_COST_TICKS)) < MODEL_COST_TICKS
        assert _figures(model_cost(log, settings)) == expected
