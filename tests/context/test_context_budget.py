"""The budget holds under any input: floods are cut deterministically, with markers saying where the rest is."""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from agent.context import fits
from agent.feedback.knowledge import StatMemo, _File, _read_file, scan_knowledge
from tests.context.test_context import asked, final_text, open_log, proj, tick_start
from tests.context.test_context_props import S

FLOOD = 3000


def _settings(kdir: Path) -> SimpleNamespace:
    """What the scanner reads of the settings: the directory, the context caps, the alert hook."""
    return SimpleNamespace(knowledge_path=kdir, context=S, alerts=SimpleNamespace(notify_command=None))


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

    def __call__(self, path: Path, root: Path, links: Counter[tuple[int, int]] | None = None) -> _File:
        self.reads.append(path.name)
        return _read_file(path, root, links)


def test_a_scan_reads_only_the_files_whose_stat_moved(tmp_path):
    """With a stat memo, the first scan reads all 3,000 files, the next tick reads none of them, and
    after three edits exactly those three are read (and logged as changed)."""
    kdir = tmp_path / "knowledge"
    kdir.mkdir()
    _write_many(kdir, FLOOD)
    log = open_log(tmp_path / "a.db")
    memo: StatMemo = {}
    first = CountingReader()
    assert len(scan_knowledge(log, _settings(kdir), 1, memo=memo, read=first)) == FLOOD
    assert len(first.reads) == FLOOD
    again = CountingReader()
    assert scan_knowledge(log, _settings(kdir), 2, memo=memo, read=again) == []
    assert again.reads == []
    past = time.time() - 30
    for i in (5, 77, 2999):
        p = kdir / f"note-{i:05d}.md"
        p.write_text(f"# note {i}\n- host {i} is flaky\n", encoding="utf-8")
        os.utime(p, (past, past))
    third = CountingReader()
    changed = scan_knowledge(log, _settings(kdir), 3, memo=memo, read=third)
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
    tick_start(log, 1)
    scan_knowledge(log, _settings(kdir), 1)
    alerts = [e.payload["title"] for e in log.read(0, kinds=["alert.raised"])]
    assert alerts == ["knowledge: 3,000 files, ~24k tokens, over pinned_max_tokens "
                      f"{S.pinned_max_tokens:,}; showing the 45 most recently changed; the others by name only"]
    p = proj(log)
    assert fits(p, S) and "[tick 1 · " in _text(p)
    assert "[knowledge edit · 3,000 files] 3,000 added" in _text(p)
    assert "`fleet-agent knowledge status` lists every file" in _text(p)
    asked(log, 1)
    final_text(log, 1)
    for f in kdir.iterdir():
        f.unlink()
    tick_start(log, 2)
    scan_knowledge(log, _settings(kdir), 2)
    assert [e.payload["alert_id"] for e in log.read(0, kinds=["alert.resolved"])] == [1]
    p = proj(log)
    assert fits(p, S) and "[tick 2 · " in _text(p)
    assert "[knowledge edit · 3,000 files] 3,000 removed" in _text(p)
    log.close()


# ------------------------------------------------------------------ any input, in memory

import pytest  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from agent.context import limit_tokens  # noqa: E402
from agent.feedback.notes import MAX_NOTE_CHARS  # noqa: E402
from tests.context.test_context import observation  # noqa: E402
from tests.context.test_context_build import METER, MemLog, project_mem  # noqa: E402
from tests.context.test_context_seen import _compact  # noqa: E402

INPUTS = st.fixed_dictionaries({
    "files": st.integers(0, FLOOD), "big_file_kb": st.integers(0, 1024), "alerts": st.integers(0, 1000),
    "instances": st.integers(0, 500), "tool_kb": st.integers(0, 5 * 1024), "note_chars": st.integers(0, MAX_NOTE_CHARS),
    "removed": st.booleans(),
})


def _flood(log: MemLog, x: dict[str, Any]) -> None:
    """Everything of ``x`` arriving between two ticks, as the log would hold it."""
    for i in range(x["files"]):
        log.append("knowledge.changed", {"name": f"n{i:05d}.md", "change": "removed" if x["removed"] else "added",
                                         "hash": None if x["removed"] else f"h{i}", "size": 40, "diff": "",
                                         "text": None if x["removed"] else f"host {i} fine"}, "operator", 2)
    if x["big_file_kb"]:
        text = ("- host 4417 flaky; avoid it\n" * (x["big_file_kb"] * 1024 // 28 + 1))[: x["big_file_kb"] * 1024]
        log.append("knowledge.changed", {"name": "big.md", "change": "added", "hash": "hb", "size": len(text),
                                         "diff": "", "text": text}, "operator", 2)
    for a in range(x["alerts"]):
        log.append("alert.raised", {"alert_id": 10 + a, "severity": "warning", "title": f"instance {a} stuck",
                                    "dedup_key": f"k{a}", "raised_by": "system"}, "system", 2)
    if x["note_chars"]:
        log.append("operator.note", {"text": ("budget review " * 400)[: x["note_chars"]].strip() or "x",
                                     "by": "alice"}, "operator")


def _step(log: MemLog, n: int, calls: list[dict[str, Any]]) -> None:
    _compact(log, n, force=False)
    p = project_mem(log.events, S)
    assert p.calibrated_tokens <= limit_tokens(S), f"request of {p.calibrated_tokens} tokens at #{log.events[-1].seq}"
    text = "\n".join(m.get("content") or "" for m in p.messages)
    assert f"[tick {n} · " in text, "the newest tick's observation is in the request"
    req = log.append("model.request", {"request_hash": p.request_hash, "manifest": p.manifest}, "system", n)
    log.append("model.response", {"text": "", "tool_calls": calls, "request_seq": req.seq}, "model", n)


@pytest.mark.slow
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(INPUTS)
def test_every_request_fits_the_budget_whatever_arrives(x):
    """For random counts and sizes of each input kind (knowledge files added or removed at once, a 1 MB
    knowledge file, open alerts, instances in the listing, a tool output up to 5 MB, a note at the limit),
    every request of the next two ticks fits the calibrated budget and shows the newest tick's observation."""
    assert METER is not None
    log = MemLog()
    log.append("tick.started", {"observation": observation(1)}, "scheduler", 1)
    _step(log, 1, [])
    _flood(log, x)
    for n in (2, 3):
        log.append("tick.started", {"observation": observation(n, instances=x["instances"])}, "scheduler", n)
        call = {"id": f"c{n}", "name": "search_offers", "arguments": "{}"}
        _step(log, n, [call])
        out = ("offer 4090 $0.41/h host 7\n" * (x["tool_kb"] * 1024 // 26 + 1))[: x["tool_kb"] * 1024] or "none"
        log.append("tool.result", {"call_id": call["id"], "name": "search_offers", "ok": True, "output": out},
                   "tool", n)
        _step(log, n, [])


def test_a_long_text_is_cut_from_its_head_exactly_as_from_the_whole():
    """A 2 MB text is cut at the same tokens as a full tokenization would, with the full count."""
    from agent.context import ProjectionCache, tokenizer_for

    tok = tokenizer_for(S)
    text = "".join(f"offer {i}: RTX_4090 x{i % 8} at ${i % 97 / 100:.2f}/h on host {i * 7919 % 100_000}\n"
                   for i in range(45_000))
    assert len(text) > 2_000_000
    meter = ProjectionCache().meter(tok)
    for cap in (0, 48, 600, 8000):
        assert meter.cut(text, cap) == tok.cut(text, cap)


def test_a_note_or_ack_note_over_the_limit_is_refused_naming_it(tmp_path):
    """A 10 MB note (and an over-long ack note) is refused with an error naming the limit; nothing is written."""
    from agent import feedback
    from agent.errors import FleetAgentError

    log = open_log(tmp_path / "a.db")
    alert_id, _ = feedback.raise_alert(log, key="t:x", severity="warning", title="stuck")
    head = log.last_seq()
    for attempt in (lambda: feedback.say(log, "x" * 10_000_000, "alice"),
                    lambda: feedback.ack(log, alert_id, "bob", "y" * (MAX_NOTE_CHARS + 1))):
        try:
            attempt()
        except FleetAgentError as e:
            assert f"the limit is {MAX_NOTE_CHARS}" in str(e)
        else:
            raise AssertionError("accepted")
    assert log.last_seq() == head
    log.close()
