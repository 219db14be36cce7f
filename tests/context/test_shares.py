"""The budget split: the history gets what the fixed blocks leave (low water is a share of that room), and
`status` and the console show how the last request used the budget."""

from __future__ import annotations

import json
from typing import Any

from agent import config
from agent.config import budget_problem, smallest_budget
from agent.context import ContextSettings, ProjectionCache
from agent.context.compaction import Plan, plan
from agent.context.load import load, meter_for
from agent.context.shares import low_target, room, split, split_text
from agent.runtime.app import App
from tests.cli.test_status_doctor import SIM_KEY, make_setup, run_cli
from tests.cli.test_status_doctor import sim_server as sim_server  # the simulator that key opens
from tests.context.test_compaction import OWNED, PROMPTS, fill
from tests.context.test_context import POLICY, TOOLS, open_log

S = ContextSettings(budget_tokens=8000, output_reserve=800, tool_output_max_tokens=300, summary_max_tokens=600,
                    pinned_max_tokens=1500, knowledge_max_tokens=400, low_water=0.5, mask_after_ticks=0)


def test_low_water_is_a_share_of_the_room_the_fixed_blocks_leave() -> None:
    assert room(S, 3000) == 8000 - 800 - 3000
    assert low_target(S, 3000) == 3000 + 0.5 * 4200
    assert low_target(S, 9000) == 9000   # nothing left: the fixed blocks alone
    parts = split({"system": 900, "pinned": 300, "summary": 500, "thread": 2000, "tools": 300}, 8000, 800)
    assert parts == {"system": 900, "pinned": 300, "summary": 500, "tools": 300, "history": 2000, "reserve": 800,
                     "free": 3200}
    assert split_text(parts, 8000) == ("system 900 (11%) · pinned 300 (4%) · summary 500 (6%) · tools 300 (4%) · "
                                       "history 2,000 (25%) · reserve 800 (10%) · free 3,200 (40%)")


def test_a_compaction_keeps_more_history_when_the_fixed_blocks_are_large(tmp_path: Any) -> None:
    """With a pinned block of some size, a v2 plan cuts later (keeps more of the thread) than a v1 plan,
    which cut to low water of the whole budget, and what it keeps fits the share target."""
    log = open_log(tmp_path / "a.db")
    for k in range(12):
        log.append("memory.written", {"key": f"host {k}", "text": "flaky disks " * 12}, "model", None)
    fill(log, settings=S)
    kw: dict[str, Any] = {"prompts": PROMPTS, "settings": S, "policy": POLICY, "tools": TOOLS,
                          "meter": meter_for(S, ProjectionCache()), "open_alert_ids": [], "owned_instance_ids": OWNED}
    old, new = plan(load(log), version=1, **kw), plan(load(log), **kw)
    assert isinstance(old, Plan) and isinstance(new, Plan) and old.cut and new.cut
    assert new.cut.first_kept_seq < old.cut.first_kept_seq
    kept_new = sum(e.tokens for e in new.view.thread if e.seq >= new.cut.first_kept_seq)
    kept_old = sum(e.tokens for e in old.view.thread if e.seq >= old.cut.first_kept_seq)
    assert kept_new > kept_old


def test_status_shows_the_last_requests_budget_split(tmp_path: Any, capsys: Any, sim_server: Any,
                                                      monkeypatch: Any) -> None:
    from agent.runtime.tick import run_tick

    monkeypatch.setenv("TEST_VAST_KEY", SIM_KEY)
    cfg = make_setup(tmp_path, sim_server.url, "  provider: rules")
    cfg.write_text(cfg.read_text(encoding="utf-8") + f"demand:\n  url: {sim_server.url}/demand\n", encoding="utf-8")
    code, out = run_cli(capsys, "--config", str(cfg), "status", "--json")
    assert json.loads(out)["budget_split"] is None   # no request yet
    app = App(config.load(str(cfg)))
    try:
        assert run_tick(app).ok
        req = next(app.log.read(0, kinds=["model.request"], newest_first=True, limit=1))
        sections = req.payload["manifest"]["sections"]
        budget = app.settings.context.budget_tokens
    finally:
        app.close()
    code, out = run_cli(capsys, "--config", str(cfg), "status", "--json")
    sp = json.loads(out)["budget_split"]
    assert sp["budget"] == budget and sp["parts"]["history"] == sections["thread"]
    assert sp["parts"]["system"] == sections["system"] and sum(sp["parts"].values()) == budget
    code, out = run_cli(capsys, "--config", str(cfg), "status")
    line = next(ln for ln in out.splitlines() if ln.startswith("budget split: "))
    assert f"history {sections['thread']:,} (" in line and " · free " in line


def test_a_budget_that_cannot_hold_the_fixed_blocks_and_a_tick_is_refused_with_the_smallest_that_works() -> None:
    """The default caps need 21,500 tokens (17,200 under high water 0.8); 8,000 works once the caps fit."""
    d = ContextSettings()
    assert smallest_budget(d) == 21_500 and budget_problem(d) is None
    small = ContextSettings(budget_tokens=8000, output_reserve=1024)
    why = budget_problem(small)
    assert why is not None and why.startswith("context.budget_tokens 8,000 cannot hold the pinned block")
    assert "the smallest budget that works with these caps is 21,500: raise context.budget_tokens to 21,500" in why
    fitted = ContextSettings(budget_tokens=8000, output_reserve=800, pinned_max_tokens=1200, summary_max_tokens=600,
                             facts_max_tokens=200, tool_output_max_tokens=300)
    assert budget_problem(fitted) is None and smallest_budget(fitted) <= 8000
