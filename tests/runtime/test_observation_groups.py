"""tick.started v5 (agent.events.kinds.tick): a fleet of more than GROUP_OVER instances lists alike ones on
one line, so a large fleet's observation fits the budget without being cut; a smaller fleet, and every row
written as an earlier version, render as before. Rows written as v5 and v6 keep these renderings (v8, which
names only the instances needing attention, is tests/fleet/test_observation_compact.py)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from agent import events as ev
from agent.events.kinds.tick import GROUP_OVER
from agent.store.log import EventLog


def _fleet(n: int) -> list[dict[str, Any]]:
    gpus = [("RTX 4090", 1, 0.41), ("RTX 3090", 2, 0.54), ("A100 SXM4", 1, 1.2), ("L40S", 4, 2.8)]
    out = []
    for k in range(n):
        gpu, count, dph = gpus[k % 4]
        inst: dict[str, Any] = {"id": 21_000_000 + 7 * k, "gpu_name": gpu, "num_gpus": count, "status": "running",
                                "age_s": 3600 * (1 + k % 3), "dph": dph, "host_id": 10_000 + k % 9, "ours": True}
        if k % 50 == 3:
            inst.update(status="loading", status_msg="Pulling image: downloading layers")
        if k == n - 1:
            inst.update(ours=False)
        out.append(inst)
    return out


def test_a_large_fleet_is_listed_alike_on_one_line_and_every_instance_stays_named(tmp_path: Path) -> None:
    obs = {"time": 1_795_000_000, "balance": 900.0, "fleet_dph": 300.0, "instances": _fleet(500)}
    with EventLog(tmp_path / "events.db") as log:
        e = log.append("tick.started", {"observation": obs}, "scheduler", 1)
        assert e.version == ev.KINDS["tick.started"].version >= 5
        e = dataclasses.replace(e, version=5)   # a row written as v5
        text = ev.render(e)["content"]   # type: ignore[index]
        as_v4 = ev.render(dataclasses.replace(e, version=4))
        # every instance is named, by id, exactly once
        named = re.findall(r"#(\d{8})\b", text)
        assert sorted(int(x) for x in named) == sorted(i["id"] for i in obs["instances"])
        assert "instances (alike ones on one line" in text
        assert "NOT-OURS" in text and "Pulling image: downloading layers" in text
        grouped = log.tokenizer.count_message(ev.render(e))
        one_each = log.tokenizer.count_message(as_v4)
        assert grouped < one_each / 2, (grouped, one_each)


def test_a_fleet_up_to_the_threshold_and_old_rows_render_as_before(tmp_path: Path) -> None:
    with EventLog(tmp_path / "events.db") as log:
        small = log.append("tick.started", {"observation": {"time": 1_795_000_000, "instances": _fleet(GROUP_OVER)}},
                           "scheduler", 1)
        assert ev.render(small) == ev.render(dataclasses.replace(small, version=4))
        big = log.append("tick.started", {"observation": {"time": 1_795_000_300, "instances": _fleet(GROUP_OVER + 1)}},
                         "scheduler", 2)
        assert ev.render(big) != ev.render(dataclasses.replace(big, version=4))
        # a row stored as v4 by an earlier release keeps its rendering: one line per instance
        assert "instances:\n  #" in ev.render(dataclasses.replace(big, version=4))["content"]   # type: ignore[index]


def test_a_large_fleets_health_and_economics_keep_the_grouping_within_budget(tmp_path: Path) -> None:
    """v6 adds utilisation, uptime, restarts and jobs to every instance: 500 of them still group alike ones,
    every instance stays named, the one that restarted between ticks is named with its restarts, and the
    rendering stays under half the one-line-per-instance form and within a fifth of the default budget."""
    insts = _fleet(500)
    for k, i in enumerate(insts):
        running = i["status"] == "running"
        i.update(gpu_util=85.0 + k % 14 if running else None, up_s=3000 + 60 * (k % 30) if running else None,
                 restarts=4 if k == 10 else 0, jobs=20 + k % 40 if i["ours"] else None)
    obs = {"time": 1_795_000_000, "balance": 900.0, "fleet_dph": 300.0, "runway_h": 3.0, "instances": insts,
           "demand": {"pending": 900, "running": 500, "completed": 9000, "trend_per_h": 120.0},
           "gpu_models": {g: {"instances": 125, "jobs_per_h": 8.0, "measured_gpu_h": 40.0, "usd_per_job": 0.05}
                          for g in ("RTX 4090", "RTX 3090", "A100 SXM4", "L40S")}}
    with EventLog(tmp_path / "events.db") as log:
        e = log.append("tick.started", {"observation": obs}, "scheduler", 1)
        assert e.version >= 6
        e = dataclasses.replace(e, version=6)   # a row written as v6
        text = ev.render(e)["content"]   # type: ignore[index]
        named = re.findall(r"#(\d{8})\b", text)
        assert sorted(int(x) for x in named) == sorted(i["id"] for i in insts)
        assert f"#{insts[10]['id']} (4 restarts)" in text
        assert "per GPU model: A100 SXM4 ×125" in text and "; RTX 4090 ×125 8.0 jobs/h/GPU (measured 40.0 GPU-h) $0.050/job" in text
        grouped = log.tokenizer.count_message(ev.render(e))
        one_each = log.tokenizer.count_message(ev.render(dataclasses.replace(e, version=4)))
        assert grouped < one_each / 2 and grouped < 6000, (grouped, one_each)
