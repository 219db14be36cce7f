"""The pinned knowledge block shows the files the operator touched last, and the alert says so.

Knowledge files are ordered most recently changed first (by the seq of each file's last change in the log,
then by name), so when they do not all fit ``pinned_max_tokens`` the ones shown in full are the newest;
the over-budget alert names how many the agent sees in full.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

from agent.context import render_pinned, request_payload, select
from agent.context.compaction import Plan, compaction_payload, plan, summarise
from agent.feedback.knowledge import scan_knowledge
from tests.context.test_context import POLICY, TOOLS, observation
from tests.context.test_context_budget import _settings
from tests.context.test_context_build import METER, PROMPTS, MemLog, project_mem
from tests.context.test_context_props import S


def _file(log: MemLog, name: str, text: str, tick: int, change: str = "added") -> None:
    log.append("knowledge.changed", {"name": name, "change": change, "hash": f"h{name}{len(log.events)}",
                                     "size": len(text), "diff": "", "text": text}, "operator", tick)


def _compact(log: MemLog, tick: int) -> dict[str, Any]:
    """The model answers a request holding everything so far, a new tick starts, and a forced compaction
    (the deterministic summary) folds what came before it."""
    req = log.append("model.request", request_payload(project_mem(log.events)), "system", tick - 1)
    log.append("model.response", {"text": "ok", "tool_calls": [], "request_seq": req.seq}, "model", tick - 1)
    log.append("tick.started", {"observation": observation(tick)}, "scheduler", tick)
    p = plan(select(log.events), prompts=PROMPTS, settings=S, policy=POLICY, tools=TOOLS, meter=METER,
             open_alert_ids=[], owned_instance_ids=[], force=True)
    assert isinstance(p, Plan)
    summary, method, attempts = summarise(p, None, S.summary_max_tokens)
    payload = compaction_payload(p, summary, method, attempts, prompts=PROMPTS, settings=S, policy=POLICY,
                                 tools=TOOLS)
    log.append("context.compacted", payload, "system", tick)
    return payload


def _headings(text: str) -> list[tuple[str, bool]]:
    """(file name, shown in full) for each file in the pinned block, in order."""
    parts = re.split(r"\n### ", text)[1:]
    return [(p.split("\n", 1)[0], "[not shown for space" not in p.split("\n", 2)[1]) for p in parts]


def test_files_are_shown_most_recently_changed_first_and_the_newest_in_full() -> None:
    """Thirty files added in name order, then the fourth edited: the pinned block lists the edited file
    first, then the rest newest first; those shown in full are exactly the newest ones, and a marker
    counts the older ones left out."""
    log = MemLog()
    log.append("tick.started", {"observation": observation(1)}, "scheduler", 1)
    for i in range(30):
        _file(log, f"f{i:02d}.md", f"host {i} notes " * 12, 1)
    _file(log, "f03.md", "host 3 is flaky now " * 30, 1, change="changed")
    payload = _compact(log, 2)
    text = render_pinned(payload["pinned"], payload["covered_to"], S, METER)
    assert text is not None and "## Knowledge files (most recently changed first)" in text
    order = _headings(text)
    names = [n for n, _ in order]
    newest_first = ["f03.md", *(f"f{i:02d}.md" for i in range(29, -1, -1) if i != 3)]
    assert 4 <= len(names) < 30 and names == newest_first[:len(names)]
    full = [full for _, full in order]
    assert full == sorted(full, reverse=True)   # every file in full comes before every name-only one
    assert f"[... {30 - len(names)} more knowledge files not listed for space" in text


def test_the_order_is_the_same_after_a_compaction_that_changes_nothing_pinned() -> None:
    """The order is carried in the compaction's pinned snapshot: a later compaction, with no knowledge
    change in between, renders the same block byte for byte."""
    log = MemLog()
    log.append("tick.started", {"observation": observation(1)}, "scheduler", 1)
    for i in range(6):
        _file(log, f"f{i:02d}.md", f"host {i}", 1)
    _file(log, "f00.md", "host 0 replaced", 1, change="changed")
    a = _compact(log, 2)
    b = _compact(log, 3)
    assert (render_pinned(a["pinned"], a["covered_to"], S, METER)
            == render_pinned(b["pinned"], b["covered_to"], S, METER))
    assert [n for n, _ in _headings(render_pinned(b["pinned"], 0, S, METER) or "")][:2] == ["f00.md", "f05.md"]


def test_the_over_budget_alert_names_how_many_newest_files_are_shown(tmp_path: Path) -> None:
    """Forty files over the pinned cap, scanned from disk: one alert says the block shows the N most
    recently changed and the others by name only, and N is the number the rendered block shows in full
    (within one: the alert estimates tokens from sizes)."""
    kdir = tmp_path / "knowledge"
    kdir.mkdir()
    past = time.time() - 60
    for i in range(40):
        p = kdir / f"k{i:02d}.md"
        p.write_text(f"# host {i}\n" + "- ok, replaced disk last week\n" * 8, encoding="utf-8")
        os.utime(p, (past, past))
    from tests.context.test_context import open_log, tick_start

    log = open_log(tmp_path / "a.db")
    tick_start(log, 1)
    scan_knowledge(log, _settings(kdir), 1)
    title = next(log.read(0, kinds=["alert.raised"])).payload["title"]
    m = re.search(r"showing the (\d+) most recently changed; the others by name only$", title)
    assert m, title
    mem = MemLog()
    mem.append("tick.started", {"observation": observation(1)}, "scheduler", 1)
    for e in log.read(0, kinds=["knowledge.changed"]):
        mem.append("knowledge.changed", e.payload, "operator", 1)
    payload = _compact(mem, 2)
    shown = sum(full for _, full in _headings(render_pinned(payload["pinned"], 0, S, METER) or ""))
    assert 0 < shown < 40 and abs(int(m.group(1)) - shown) <= 1, (m.group(1), shown)
    log.close()
