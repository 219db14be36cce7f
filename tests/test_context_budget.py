"""The budget holds under any input: floods are cut deterministically, with markers saying where the rest is."""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from agent.context import fits
from agent.feedback.knowledge import StatMemo, _File, _read_file, scan_knowledge
from tests.test_context import asked, final_text, open_log, proj, tick_start
from tests.test_context_props import S

FLOOD = 3000


def _write_many(kdir: Path, n: int) -> None:
    past = time.time() - 60
    for i in range(n):
        p = kdir / f"note-{i:05d}.md"
        p.write_text(f"# note {i}\n- host {10_000 + i} is fine\n", encoding="utf-8")
        os.utime(p, (past, past))


class CountingReader:
    """The scanner's read hook, counting every file it reads."""

    def __init__(self) -> None:
        self.reads: list[str] = []

    def __call__(self, path: Path, root: Path) -> _File:
        self.reads.append(path.name)
        return _read_file(path, root)


def test_a_scan_reads_only_the_files_whose_stat_moved(tmp_path):
    """With a stat memo, the first scan reads all 3,000 files, the next tick reads none of them, and
    after three edits exactly those three are read (and logged as changed)."""
    kdir = tmp_path / "knowledge"
    kdir.mkdir()
    _write_many(kdir, FLOOD)
    log = open_log(tmp_path / "a.db")
    settings = SimpleNamespace(knowledge_path=kdir)
    memo: StatMemo = {}
    first = CountingReader()
    assert len(scan_knowledge(log, settings, 1, memo=memo, read=first)) == FLOOD
    assert len(first.reads) == FLOOD
    again = CountingReader()
    assert scan_knowledge(log, settings, 2, memo=memo, read=again) == []
    assert again.reads == []
    past = time.time() - 30
    for i in (5, 77, 2999):
        p = kdir / f"note-{i:05d}.md"
        p.write_text(f"# note {i}\n- host {i} is flaky\n", encoding="utf-8")
        os.utime(p, (past, past))
    third = CountingReader()
    changed = scan_knowledge(log, settings, 3, memo=memo, read=third)
    assert sorted(third.reads) == ["note-00005.md", "note-00077.md", "note-02999.md"]
    assert sorted(e.payload["name"] for e in changed) == sorted(third.reads)
    log.close()


def _text(p: Any) -> str:
    return "\n".join(m.get("content") or "" for m in p.messages)


def test_3000_knowledge_files_added_then_removed_stay_within_budget(tmp_path):
    """3,000 files added in one tick, then all removed in the next: every request fits the budget, shows
    the newest tick's observation, and lists the changes as one message per tick with a marker naming
    the commands that show the rest."""
    kdir = tmp_path / "knowledge"
    kdir.mkdir()
    _write_many(kdir, FLOOD)
    log = open_log(tmp_path / "a.db")
    settings = SimpleNamespace(knowledge_path=kdir)
    tick_start(log, 1)
    scan_knowledge(log, settings, 1)
    p = proj(log)
    assert fits(p, S) and "[tick 1 · " in _text(p)
    assert "[knowledge edit · 3,000 files] 3,000 added" in _text(p)
    assert "`fleet-agent knowledge status` lists every file" in _text(p)
    asked(log, 1)
    final_text(log, 1)
    for f in kdir.iterdir():
        f.unlink()
    tick_start(log, 2)
    scan_knowledge(log, settings, 2)
    p = proj(log)
    assert fits(p, S) and "[tick 2 · " in _text(p)
    assert "[knowledge edit · 3,000 files] 3,000 removed" in _text(p)
    log.close()
