"""Operator commands that render no context load neither the model SDK nor the tokenizer.

Each command runs in-process (``agent.cli.main``) inside one fresh interpreter, which reports
after every command whether ``openai`` or ``tiktoken`` is in ``sys.modules``. ``context`` renders
the next request, so it must load the tokenizer: the same probe seeing it there shows the probe
can fail.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from agent import config
from agent.feedback import raise_alert
from agent.store.log import EventLog
from tests.test_status_doctor import make_setup

LEAN = [["alerts", "list"], ["alerts", "show", "1"], ["alerts", "ack", "1", "--note", "seen"],
        ["say", "prefer hosts above 0.98"], ["say", "--pin", "at most 4 instances"], ["directives"],
        ["unpin", "5"], ["status"], ["status", "--json"], ["knowledge", "list"], ["thread", "show", "--limit", "5"],
        ["log", "verify"], ["log", "search", "instance"]]
HEAVY = ("openai", "tiktoken")

_PROBE = f"""
import json, sys
from agent.cli import main
HEAVY = {HEAVY!r}
out = []
for argv in json.loads(sys.argv[1]):
    code = main(["--config", sys.argv[2], *argv])
    out.append([argv, code, [m for m in HEAVY if m in sys.modules]])
sys.stderr.write("PROBE " + json.dumps(out) + "\\n")
"""


def _probe(cfg: Path, commands: list[list[str]]) -> list[list[object]]:
    r = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(commands), str(cfg)], capture_output=True,
                       text=True, timeout=120, check=False)
    line = next((ln for ln in r.stderr.splitlines() if ln.startswith("PROBE ")), None)
    assert line is not None, r.stderr[-2000:]
    return json.loads(line[len("PROBE "):])  # type: ignore[no-any-return]


def test_commands_that_render_no_context_import_neither_the_sdk_nor_the_tokenizer(tmp_path: Path) -> None:
    """alerts, say, unpin, directives, status, knowledge, thread and log each exit 0 in-process without
    importing openai or tiktoken; then context, which counts tokens, does load tiktoken."""
    cfg = make_setup(tmp_path, "http://127.0.0.1:9", "  provider: openai\n  base_url: http://127.0.0.1:9/v1")
    with EventLog(config.load(str(cfg)).db_path) as log:
        log.append("tick.started", {"observation": {"instances": [], "balance": 10.0}}, "scheduler", 1)
        raise_alert(log, key="stuck:7", severity="warning", title="instance 7 stuck loading", tick=1)
    got = _probe(cfg, [*LEAN, ["context"]])
    assert [(argv, code) for argv, code, _ in got] == [(argv, 0) for argv in [*LEAN, ["context"]]]
    assert [(argv, loaded) for argv, _, loaded in got[:-1]] == [(argv, []) for argv in LEAN]
    assert "tiktoken" in got[-1][2]
