"""What a read command loads: an operator's `status`, `alerts list`, `thread show`, `directives`, `spend` and
the like read the log and print; they load neither the tokenizer, nor the model SDK, nor an HTTP client, nor
the logging stack (nothing is logged), nor sqlite-utils (plain queries on the connection). `context` renders
a request and may count its tokens, but counts kept in the data directory spare a second run the tokenizer.
Each command runs in a fresh process, as an operator runs it, on a fleet after a real tick."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.cli.test_json_reads import fleet  # noqa: F401
from tests.cli.test_status_doctor import _restore_structlog, sim_server  # noqa: F401

REPO = Path(__file__).resolve().parents[2]

RUN = """
import contextlib, io, json, sys
from agent.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    code = main(sys.argv[1:])
print(json.dumps({"code": code, "out": out.getvalue(), "modules": sorted(sys.modules)}))
"""

# Never loaded by a command that only reads the log and prints.
HEAVY = ("tiktoken", "tiktoken_ext", "openai", "httpx", "httpcore", "structlog", "rich", "sqlite_utils", "click",
         "apscheduler", "agent.runtime.tick", "agent.model.llm", "agent.clients", "agent.service")
# Nor, once the config is kept (validating it loads pydantic, which loads these), what only an error's hint
# (difflib) or the example config (importlib.resources, which loads tempfile and random) needs.
KEPT = ("difflib", "importlib.resources", "tempfile")
READS = (("status",), ("status", "--json"), ("alerts", "list"), ("alerts", "show", "1"), ("thread", "show", "--tail", "20"),
         ("directives",), ("spend",), ("spend", "--json"), ("policy", "show"), ("hosts", "list"), ("log", "search", "rent"))


# Loads every kind module first: every row read is decoded through its kind, as before kinds without a stored
# form were read as stored.
EVERY_KIND = "from agent.events.kinds.base import VOCABULARY\nVOCABULARY.kinds.load_all()\n"


def _run(cfg: Path, *argv: str, before: str = "") -> dict[str, Any]:
    r = subprocess.run([sys.executable, "-c", before + RUN, "--config", str(cfg), *argv], capture_output=True, text=True,
                       cwd=REPO, timeout=120)
    assert r.returncode == 0, r.stderr
    out: dict[str, Any] = json.loads(r.stdout.splitlines()[-1])
    assert out["code"] == 0, (argv, out["out"], r.stderr)
    return out


def _loaded(modules: list[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


def test_read_commands_load_no_tokenizer_model_sdk_http_client_or_logging(fleet: Path) -> None:  # noqa: F811
    first = _run(fleet, "alerts", "list")  # validates the config and keeps it (agent.config.load_partial)
    assert _loaded(first["modules"], HEAVY) == []
    for argv in READS:
        r = _run(fleet, *argv)
        assert r["out"], argv  # it read the log and printed
        assert _loaded(r["modules"], HEAVY + KEPT) == [], argv


def _timeless(out: str) -> str:
    """``status`` output less the rentals' spend, which grows with the clock between two runs."""
    if out.startswith("{"):
        st = json.loads(out)
        del st["steering"]["spend"]
        return json.dumps(st)
    return "\n".join(ln for ln in out.splitlines() if not ln.startswith("spend: "))


def test_status_reads_model_responses_and_tool_results_without_their_kind_modules(fleet: Path) -> None:  # noqa: F811
    """`status` sums the last tick's usage and prices the model from model responses, and applies the rents
    since the last observation from tool results, without loading those kinds' modules (their payload classes,
    renderers and upcasters), and shows the same as when every row is decoded through its kind."""
    skipped = ("agent.events.kinds.model", "agent.events.kinds.tools")
    _run(fleet, "alerts", "list")  # validates the config and keeps it (agent.config.load_partial): read after
    for argv in (("status",), ("status", "--json")):
        lean = _run(fleet, *argv)
        assert _loaded(lean["modules"], skipped) == [], argv
        # The leadership files are read (only a holder names its host and draws a token); no event is appended
        # (no id drawn) and no token counted.
        assert _loaded(lean["modules"], ("socket", "uuid", "platform", "agent.tokens")) == [], argv
        full = _run(fleet, *argv, before=EVERY_KIND)
        assert _loaded(full["modules"], skipped) == list(skipped)
        assert _timeless(lean["out"]) == _timeless(full["out"]), argv
    st = json.loads(lean["out"])
    assert st["model_cost"]["calls"] > 0 and st["last_tick"]["tick"] == 1  # read from model responses
    assert st["fleet"]["acted"] > 0  # the tick's rents, from its tool results


def test_context_counts_once_and_a_second_process_reads_the_counts_kept(fleet: Path) -> None:  # noqa: F811
    """The first `context` counts what the tick's counts file lacks; the next one finds every count kept and
    never loads the tokenizer, and prints the same request with the same counts."""
    first = _run(fleet, "context", "--json")
    second = _run(fleet, "context", "--json")
    assert json.loads(second["out"]) == json.loads(first["out"])
    assert json.loads(second["out"])["manifest"]
    assert _loaded(second["modules"], ("tiktoken", "tiktoken_ext", "openai", "httpx", "structlog", "rich")) == []


def test_context_of_a_shrunk_request_logs_nothing_and_lists_the_tools_without_the_fleet_layer(fleet: Path) -> None:  # noqa: F811
    """`context` re-derives a request: one cut to fit its budget is no news (the daemon warned when it sent it),
    so the command loads no logging stack. It lists the tools' specs from the tools package without what their
    handlers call (the fleet's policy and market, the vast.ai client), nor the model client, nor compaction's
    planner (replay's summaries need it, not one agent request), nor the module of a kind the thread holds
    that never renders (the tick's compaction, calibration and recorded inputs: agent.events.kinds.context)."""
    small = fleet.with_name("small-budget.yaml")
    small.write_text(fleet.read_text(encoding="utf-8") + "context:\n  budget_tokens: 3800\n  output_reserve: 500\n",
                     encoding="utf-8")
    _run(small, "context", "--json")  # validates the config and keeps it; counts the texts its cuts made
    for argv in (("context", "--json"), ("context",)):
        r = _run(small, *argv)
        assert "tools.fleet" in r["modules"] and "tools 0" not in r["out"], argv  # the tools' specs were listed
        assert _loaded(r["modules"], ("structlog", "rich", "agent.fleet.policy", "agent.fleet.market",
                                      "agent.clients", "agent.model.llm", "agent.context.compaction", "httpx",
                                      "openai", "agent.events.kinds.context")) == [], argv
    shown = json.loads(_run(small, "context", "--json")["out"])
    assert shown["manifest"]["shrunk"] is True and shown["sections"]["tools"] > 0
    # the thread it rendered holds events of that module's kinds
    every = _run(small, "thread", "show", "--json", "--since", str(shown["manifest"]["thread_from"] - 1))
    assert {json.loads(line)["kind"] for line in every["out"].splitlines()} & {"context.calibrated", "input.recorded"}
