"""`status` reports the knowledge files against the log without reading them.

With 3,000 files it stats each one and reads none (counted by an audit hook on every ``open`` of a path in
the knowledge directory): the scanner's stat memo, saved beside the database by the scan, tells an unchanged
file from one edited since; new and removed files come from the directory listing against the log.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from agent import config
from agent.feedback.knowledge import save_memo, scan_knowledge
from agent.runtime.app import App
from tests.cli.test_status_doctor import _restore_structlog, make_setup, run_cli, sim_server  # noqa: F401

OPENS: list[str] = []
WATCH: list[str] = []


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event == "open" and WATCH and isinstance(args[0], str | Path) and str(args[0]).startswith(WATCH[0]):
        OPENS.append(str(args[0]))


sys.addaudithook(_hook)


def test_status_reads_no_knowledge_file_and_reports_what_changed(tmp_path: Path, capsys: Any,
                                                                 sim_server: Any) -> None:  # noqa: F811
    """3,000 files scanned once (memo saved): status opens none of them. After two edits that keep the
    size, one new file and one deletion, status counts exactly those, still without opening a file."""
    cfg = make_setup(tmp_path, sim_server.url, "  provider: rules")
    kdir = tmp_path / "knowledge"
    past = time.time() - 60
    for i in range(3000):
        p = kdir / f"note-{i:05d}.md"
        p.write_text(f"# note {i}\n- host {10_000 + i} is fine\n", encoding="utf-8")
        os.utime(p, (past, past))
    os.utime(kdir / "notes.md", (past, past))
    app = App(config.load(str(cfg)))
    scan_knowledge(app.log, app.settings, 1, memo=app.knowledge_memo)
    save_memo(app.settings.data_path, app.knowledge_memo)
    app.close()

    WATCH[:] = [str(kdir)]
    try:
        OPENS.clear()
        code, out = run_cli(capsys, "--config", str(cfg), "status", "--json")
        assert code == 0 and OPENS == []
        k = json.loads(out)["knowledge"]
        assert (k["files"], k["on_disk"], k["pending_counts"]) == (3001, 3001, {"new": 0, "changed": 0, "removed": 0})
        assert 0 < k["shown_in_full"] < 3001
        for i in (7, 2999):
            p = kdir / f"note-{i:05d}.md"
            p.write_text(f"# note {i}\n- host {10_000 + i} is FINE\n", encoding="utf-8")
            os.utime(p, (past + 10, past + 10))
        (kdir / "zz-new.md").write_text("new\n", encoding="utf-8")
        (kdir / "note-00100.md").unlink()
        OPENS.clear()
        code, out = run_cli(capsys, "--config", str(cfg), "status")
        assert code == 0 and OPENS == []
        assert ("knowledge: 3,001 files logged, ~24,476 tokens" in out
                and "on disk since the last tick: 1 new, 2 changed, 1 removed" in out), out
    finally:
        WATCH.clear()
