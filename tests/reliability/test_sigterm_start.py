"""SIGTERM at launch: ``fleet-agent run``, the installed console script, stopped during its start-up.

bench/sigterm_start.py runs the trials at random delays and prints the figures; here a few launches are
stopped at spread-out moments after the process shows a SIGTERM handler in /proc (before that the
interpreter is still starting and no project code has run): each exits 0.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

from tests.reliability.harness import running_sim, write_config

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import sigterm_start  # noqa: E402


@pytest.mark.slow
def test_sigterm_at_any_moment_of_start_up_after_the_handler_exits_0(tmp_path):
    cmd = sigterm_start.console_script()
    rng = random.Random(3)
    with running_sim(3) as (_sim, server):
        cfg = write_config(tmp_path, server.url, schedule={"interval": "1s"}, http={"listen": None})
        rows = [sigterm_start.trial(cmd, cfg, rng.uniform(0.0, 1.5), tmp_path / "err.txt") for _ in range(6)]
        rows.append(sigterm_start.trial(cmd, cfg, 0.0, tmp_path / "err.txt", after_handler=True))
    after = [r for r in rows if r["handler"]]
    assert after, rows
    assert [r for r in after if r["rc"] != 0] == []
    assert [r for r in rows if r["rc"] not in (0, -15)] == []
