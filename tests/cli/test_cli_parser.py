"""The command table (agent/cli/parser.py): parsing a command imports no command module and nothing heavy,
running `alerts list` or `status` loads neither the model SDK nor the scheduler nor the tick, and a command is
one table entry whose handler is imported when it runs."""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agent.cli import main
from agent.cli.args import number
from agent.cli.parser import COMMANDS, OVERRIDABLE_KEYS, PAGE_SIZE, Handler, arg, build_parser, command

REPO = Path(__file__).resolve().parents[2]

# Never needed to read alerts or the status: the model SDK, the tokenizer, the scheduler, the tick, the model.
NEVER_FOR_READS = ("openai", "apscheduler", "agent.runtime.tick", "agent.model.llm", "agent.service.daemon",
                   "agent.cli.doctor")
# Nothing parsing needs: besides those, the config's validation, logging, the store and every command module.
NEVER_FOR_PARSING = (*NEVER_FOR_READS, "tiktoken", "pydantic", "yaml", "structlog", "rich", "sqlite_utils",
                     "httpx", "agent.config", "agent.events", "agent.store", "agent.runtime", "agent.feedback",
                     "agent.cli.feedback", "agent.cli.service", "agent.cli.log", "agent.cli.completion")

PARSE = """
import json, sys
from agent.cli import build_parser
try:
    build_parser().parse_args(sys.argv[1:])
except SystemExit as e:
    assert e.code == 0, e.code
print(json.dumps(sorted(sys.modules)))
"""

RUN = """
import contextlib, io, json, sys
from agent.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    code = main(sys.argv[1:])
print(json.dumps({"code": code, "out": out.getvalue(), "modules": sorted(sys.modules)}))
"""


def _python(code: str, *argv: str) -> Any:
    r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.splitlines()[-1])


def _loaded(modules: list[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


@pytest.mark.parametrize("argv", [["alerts", "list"], ["status"], ["--help"], ["log", "verify", "--help"]])
def test_parsing_a_command_imports_no_command_module_nor_anything_heavy(argv: list[str]) -> None:
    modules = _python(PARSE, *argv)
    assert "agent.cli.parser" in modules  # the probe saw the parser built
    assert _loaded(modules, NEVER_FOR_PARSING) == []


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fleet")
    assert main(["init", str(root)]) == 0
    return root / "config.yaml"


@pytest.mark.parametrize("argv", [["alerts", "list"], ["status"], ["status", "--json"]])
def test_reading_alerts_or_status_loads_no_model_scheduler_or_tick(data_dir: Path, argv: list[str]) -> None:
    r = _python(RUN, "--config", str(data_dir), *argv)
    assert r["code"] == 0
    assert r["out"]  # it did read the log: "no open alerts", the daemon's state
    assert "agent.cli.feedback" in r["modules"] or "agent.runtime.status" in r["modules"]
    assert _loaded(r["modules"], NEVER_FOR_READS) == []


def test_every_handler_names_a_function_of_its_module() -> None:
    for c in COMMANDS:
        if c.handler is None:
            continue
        module, _, name = c.handler.partition(":")
        assert callable(getattr(importlib.import_module(module), name, None)), c.handler


def test_every_group_has_a_handler_or_subcommands() -> None:
    paths = {c.path for c in COMMANDS}
    assert len(paths) == len(COMMANDS), "a command declared twice"
    for c in COMMANDS:
        if c.handler is None:
            assert any(p.startswith(c.path + " ") for p in paths), f"{c.path}: no handler and no subcommand"


def test_the_table_copies_of_policy_keys_and_page_size_match_their_source() -> None:
    """`policy set --help` lists the overridable keys and `log compact --help` the default page size without
    importing the steering code or the store; these are the values those modules hold."""
    from agent.fleet import steering
    from agent.store import db

    assert list(OVERRIDABLE_KEYS) == sorted(steering.OVERRIDABLE)
    assert PAGE_SIZE == db.PAGE_SIZE


def test_a_new_command_is_one_entry_and_its_handler_is_imported_when_it_runs(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "extra_handlers.py").write_text(
        "def cmd_frob(args, app):\n    return 40 + args.id\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    table = (*COMMANDS, command("alerts frob", "extra_handlers:cmd_frob", "frob an alert", "Frob one alert.",
                                arg("id", type=number, help="alert number"), no_config=True))
    p = build_parser(table)
    assert "extra_handlers" not in sys.modules
    args = p.parse_args(["alerts", "frob", "2"])
    assert isinstance(args.func, Handler) and args.no_config
    assert "extra_handlers" not in sys.modules
    assert args.func(args, None) == 42
    assert _subcommands(p, "alerts")[-1] == "frob"
    with pytest.raises(SystemExit):
        p.parse_args(["alerts", "frob", "zero"])


def test_a_subcommand_before_its_group_is_refused() -> None:
    with pytest.raises(ValueError, match="declare 'nothing' before it"):
        build_parser((command("nothing here", "agent.cli.ops:cmd_tick", "h", "d"),))


def test_a_command_with_a_handler_has_optional_subcommands_a_group_required_ones() -> None:
    p = build_parser()
    assert p.parse_args(["fork", "--same"]).func.target == "agent.cli.fork:cmd_fork"
    assert p.parse_args(["fork", "diff", "d"]).func.target == "agent.cli.fork:cmd_fork_diff"
    with pytest.raises(SystemExit) as exited:
        p.parse_args(["alerts"])
    assert exited.value.code == 2


def _subcommands(p: argparse.ArgumentParser, name: str) -> list[str]:
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for sub_action in a.choices[name]._actions:
                if isinstance(sub_action, argparse._SubParsersAction):
                    return list(sub_action.choices)
    return []


def _outcome(parse: Any, argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[Any, ...]:
    """What parsing ``argv`` gives: the namespace (its handler by target) or the exit code, and the output."""
    try:
        ns = vars(parse(argv))
        code = None
    except SystemExit as e:
        ns, code = {}, e.code
    ns = {k: (v.target if isinstance(v, Handler) else v) for k, v in ns.items()}
    out = capsys.readouterr()
    return ns, code, out.out, out.err


ONE_COMMAND_CASES = [
    [], ["--help"], ["-h", "status"], ["--version"], ["nosuch"], ["--config", "f"], ["--config=f", "status"],
    ["--conf", "f", "status"], ["status", "--bogus"], ["status", "--config", "f"], ["alerts"], ["alerts", "nope"],
    ["thread", "show", "--tail", "5", "--limit", "3"], ["thread", "show", "--tail", "x"], ["fork"], ["fork", "diff"],
    *([*c.path.split(), *extra] for c in COMMANDS for extra in (["--help"], ["--json"], [])),
    *(["--config", "f", *c.path.split()] for c in COMMANDS),
]


def test_parsing_builds_the_named_command_alone_and_reads_argv_as_the_whole_parser_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    """`parse_args` builds only the parsers of the command it runs; every argv reads as with every command
    built: the same namespace, or the same help, version or error output and exit code."""
    from agent.cli.parser import parse_args

    assert [a for a in build_parser(only="status")._actions if isinstance(a, argparse._SubParsersAction)][0] \
        .choices.keys() == {"status"}
    whole = build_parser()
    for argv in ONE_COMMAND_CASES:
        assert _outcome(parse_args, argv, capsys) == _outcome(whole.parse_args, argv, capsys), argv


# Never needed by a read command once its config was validated (and kept: agent.config.ConfigCache): the tokenizer,
# the config's parser and validator, the projection, the knowledge editor.
NEVER_FOR_CACHED_READS = (*NEVER_FOR_READS, "tiktoken", "pydantic", "yaml", "agent.context.build",
                          "agent.context.load", "agent.feedback.knowledge_editor")
READS = (["status"], ["alerts", "list"], ["directives"], ["spend"], ["log", "search", "rent"],
         ["thread", "show", "--tail", "20"])


@pytest.mark.parametrize("argv", [*READS, *([*r, "--json"] for r in READS)], ids=" ".join)
def test_a_read_command_with_a_validated_config_loads_no_tokenizer_validator_or_projection(
        data_dir: Path, argv: list[str]) -> None:
    _python(RUN, "--config", str(data_dir), *argv)  # validates the config and keeps it
    r = _python(RUN, "--config", str(data_dir), *argv)
    assert r["code"] == 0
    assert _loaded(r["modules"], NEVER_FOR_CACHED_READS) == []
