"""Operator commands that render no context load neither the model SDK nor the tokenizer.

Each command runs in-process (``agent.cli.main``) inside one fresh interpreter, which reports
after every command whether ``openai`` or ``tiktoken`` is in ``sys.modules``. ``context`` renders
the next request, so it must load the tokenizer: the same probe seeing it there shows the probe
can fail. Commands that only read read models load neither structlog nor the event kinds either.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent import __version__, config
from agent.cli import COMMAND_GROUPS, CORE_COMMANDS, build_parser, command_of, group_module, main, parser_for
from agent.feedback import raise_alert
from agent.store.log import EventLog
from tests import tamper
from tests.test_status_doctor import make_setup

LEAN = [["alerts", "list"], ["alerts", "show", "1"], ["alerts", "ack", "1", "--note", "seen"],
        ["say", "prefer hosts above 0.98"], ["say", "--pin", "at most 4 instances"], ["directives"],
        ["unpin", "5"], ["status"], ["status", "--json"], ["knowledge", "list"], ["thread", "show", "--limit", "5"],
        ["log", "verify"], ["log", "search", "instance"]]
HEAVY = ("openai", "tiktoken")

_PROBE = """
import json, sys
from agent.cli import main
HEAVY = json.loads(sys.argv[3])
out = []
for argv in json.loads(sys.argv[1]):
    code = main(["--config", sys.argv[2], *argv])
    out.append([argv, code, [m for m in HEAVY if m in sys.modules]])
sys.stderr.write("PROBE " + json.dumps(out) + "\\n")
"""


def _probe(cfg: Path, commands: list[list[str]], heavy: tuple[str, ...] = HEAVY) -> list[list[object]]:
    r = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(commands), str(cfg), json.dumps(heavy)],
                       capture_output=True, text=True, timeout=120, check=False)
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


def _setup(tmp_path: Path) -> Path:
    cfg = make_setup(tmp_path, "http://127.0.0.1:9", "  provider: openai\n  base_url: http://127.0.0.1:9/v1")
    with EventLog(config.load(str(cfg)).db_path) as log:
        log.append("tick.started", {"observation": {"instances": [], "balance": 10.0}}, "scheduler", 1)
        raise_alert(log, key="stuck:7", severity="warning", title="instance 7 stuck loading", tick=1)
    return cfg


READS = [["alerts", "list"], ["alerts", "list", "--json"], ["directives"], ["status"], ["knowledge", "list"],
         ["log", "verify"]]
LOGGING = ("structlog", "agent.events.kinds", "agent.feedback.knowledge_editor")


def test_commands_that_read_read_models_load_neither_structlog_nor_the_event_kinds(tmp_path: Path) -> None:
    """alerts list, directives, status, knowledge list and log verify exit 0 without loading structlog,
    the event kinds or the knowledge editor; then say, which appends an event, loads the kinds it checks the
    payload against (the probe sees a module when it is there)."""
    cfg = _setup(tmp_path)
    got = _probe(cfg, [*READS, ["say", "a note"]], LOGGING)
    assert [(argv, code, loaded) for argv, code, loaded in got[:-1]] == [(argv, 0, []) for argv in READS]
    assert got[-1][1] == 0 and "agent.events.kinds" in got[-1][2]


STDLIB = ("agent.feedback.alert_hook", "subprocess", "tempfile", "zipfile", "importlib.resources", "difflib",
          "getpass", "shutil", "yaml", "agent.tokens", "agent.events.rendering", "agent.events.vocabulary")


def test_commands_that_read_read_models_load_no_stdlib_they_do_not_use(tmp_path: Path) -> None:
    """alerts list, directives, status, knowledge list and log verify exit 0 without the alert hook (subprocess,
    tempfile), importlib.resources (zipfile), difflib (only for error hints), getpass, shutil (argparse asks it
    for the terminal width), PyYAML (the config is plain), the tokenizer module, the event renderers or the
    event vocabulary (a row is decoded without it); then say,
    which names the operator, loads getpass (the probe sees a module when it is there)."""
    cfg = _setup(tmp_path)
    got = _probe(cfg, [*READS, ["say", "a note"]], STDLIB)
    assert [(argv, code, loaded) for argv, code, loaded in got[:-1]] == [(argv, 0, []) for argv in READS]
    assert got[-1][1] == 0 and "getpass" in got[-1][2]


DEFINING = ("dataclasses", "inspect", "hashlib")


def test_commands_define_their_records_and_payloads_without_dataclasses(tmp_path: Path) -> None:
    """alerts list and directives exit 0 without importing dataclasses (nor inspect, which it brings) or
    hashlib (OpenSSL); status and knowledge list (which hash the knowledge files), log verify and say (which
    hashes the event it appends, checked against its payload class) load hashlib but not dataclasses; then
    context, which renders a request through modules that still define dataclasses, loads it (the probe
    sees the module when it is there)."""
    cfg = _setup(tmp_path)
    commands = [*READS, ["say", "a note"]]
    got = _probe(cfg, [*commands, ["context"]], DEFINING)
    hashing = (["status"], ["knowledge", "list"], ["log", "verify"], ["say", "a note"])
    assert [(argv, code, loaded) for argv, code, loaded in got[:-1]] == [
        (argv, 0, ["hashlib"] if argv in hashing else []) for argv in commands]
    assert got[-1][1] == 0 and "dataclasses" in got[-1][2]


_VERSION = """
import sys
from agent.cli import main
try:
    main(["--version"])
except SystemExit as e:
    print("exit", e.code, sorted(m for m in sys.modules if m.startswith("agent.cli.")))
"""


def test_version_answers_without_loading_a_command_group() -> None:
    """--version prints what the full parser prints and exits 0, with no command group module imported
    (the full parser imports every one of them): only the CLI's own argument, output, parser and plain-form
    modules."""
    r = subprocess.run([sys.executable, "-c", _VERSION], capture_output=True, text=True, timeout=60, check=True)
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["--version"])
    assert e.value.code == 0
    version, tail = r.stdout.splitlines()
    assert version == f"fleet-agent {__version__}"
    assert tail == "exit 0 ['agent.cli.args', 'agent.cli.output', 'agent.cli.parser', 'agent.cli.plain']"


def test_the_group_table_names_exactly_the_commands_each_group_registers() -> None:
    """COMMAND_GROUPS (which module a command's run imports) lists, for each group module, the top-level
    commands its register() adds, in order; no name is in two groups or among the core commands."""
    for name, commands in COMMAND_GROUPS.items():
        sub = argparse.ArgumentParser().add_subparsers()
        group_module(name).register(sub)
        assert tuple(sub.choices) == commands, name
    every = [c for commands in COMMAND_GROUPS.values() for c in commands] + list(CORE_COMMANDS)
    assert len(every) == len(set(every))
    top = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert sorted(top.choices) == sorted(every)


@pytest.mark.parametrize(("argv", "command"), [
    (["alerts", "list"], "alerts"), (["--config", "c.yaml", "say", "hi"], "say"), (["--config=c.yaml", "status"], "status"),
    (["--conf", "c.yaml", "log", "verify"], "log"), (["init", "d"], "init"), (["--help"], None), (["--version"], None),
    (["-h", "alerts"], None), (["alert", "list"], None), ([], None), (["--config"], None), (["--bogus", "status"], None),
])
def test_command_of_names_the_command_only_when_nothing_but_config_comes_first(argv: list[str],
                                                                              command: str | None) -> None:
    """command_of finds the top-level command after --config (spelt out, with '=' or abbreviated as argparse
    accepts it); help, version, unknown options and unknown commands give None (the full parser)."""
    assert command_of(argv) == command


def test_an_unknown_command_is_refused_by_the_full_parser_listing_every_command(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A misspelt command exits 2 with one line naming the valid choices, every group's commands among
    them, as before commands were loaded one group at a time."""
    with pytest.raises(SystemExit) as e:
        main(["alert", "list"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'alert'" in err and "'alerts'" in err and "'spend'" in err and "'web'" in err


def test_a_command_parses_the_same_with_only_its_group_loaded() -> None:
    """The parser built for one command gives the same namespace as the full parser for that command."""
    for argv in (["alerts", "silence", "--for", "2h", "--reason", "r", "3"], ["say", "--pin", "x"],
                 ["log", "verify", "--json"], ["spend", "--json"], ["thread", "show", "--tail", "4"]):
        full, one = build_parser().parse_args(argv), build_parser(command_of(argv)).parse_args(argv)
        assert vars(full) == vars(one), argv


_LAZY_LOG = """
import io, json, sys
from agent import logsetup
buf = io.StringIO()
logsetup.configure("info", "json", stream=buf)
before = "structlog" in sys.modules
logsetup.get_logger("probe").warning("probe.line", api_key="sk-abcdef", n=3)
print(json.dumps({"before": before, "after": "structlog" in sys.modules, "out": buf.getvalue()}))
"""


def test_the_first_log_call_loads_structlog_with_the_configured_setup() -> None:
    """configure() before structlog is loaded does not load it; the first call on a module's logger does,
    with that setup: one JSON line on the configured stream, credentials under their keys redacted."""
    r = subprocess.run([sys.executable, "-c", _LAZY_LOG], capture_output=True, text=True, timeout=60, check=True)
    got = json.loads(r.stdout)
    assert (got["before"], got["after"]) == (False, True)
    line = json.loads(got["out"])
    assert (line["event"], line["level"], line["n"], line["api_key"]) == ("probe.line", "warning", 3, "***")


def test_libyaml_and_the_pure_python_loader_read_the_example_config_alike() -> None:
    """The config read through libyaml gives the same values and the same line for every key as PyYAML's
    pure-Python loader (which still reads, and words the errors of, anything libyaml refuses)."""
    from agent import configyaml

    text = config.example_text()
    fast = configyaml._compose_fast(text)
    assert fast is not None
    slow = configyaml._NoAliasLoader(text).get_single_node()
    loc_fast, loc_slow = config._Loc("f"), config._Loc("f")
    assert configyaml._to_python(fast, (), loc_fast) == configyaml._to_python(slow, (), loc_slow)
    assert loc_fast.lines == loc_slow.lines and len(loc_fast.lines) > 20
    assert configyaml._compose_fast("a: &x 1\nb: *x\n") is None


def test_the_tokenizer_keeps_no_python_copy_of_its_ranks_and_still_counts() -> None:
    """The offline encoding drops tiktoken's Python dict of BPE ranks once its Rust core holds them (~15 MB
    of the daemon's memory) and still encodes exactly: known token ids for known text, and a round trip."""
    from agent.tokens import get_tokenizer

    enc = get_tokenizer("cl100k_base").encoding
    assert enc._mergeable_ranks == {}
    assert enc.encode("hello world") == [15339, 1917]
    text = "Rent 2x RTX 4090 at $0.41/h on host 4417 — reliability 0.991 ✓"
    assert enc.decode(enc.encode(text)) == text


@pytest.mark.parametrize("first", ["import agent.events.kinds_money", "from agent.events.kinds import VOCABULARY",
                                   "from agent.events import render", "import agent.events.kinds_ctx"])
def test_the_vocabulary_is_whole_whichever_module_loads_it_first(first: str) -> None:
    """The event kinds load on first use, from whichever module is imported first: each way in ends with
    every kind of every module in KIND_MODULES defined, the same set as a plain ``KINDS`` read gives."""
    from agent.events import KINDS

    code = f"{first}\nfrom agent.events import KINDS\nprint(' '.join(sorted(KINDS)))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert r.stdout.split() == sorted(KINDS) and "system.destroy" in KINDS and "rent.settled" in KINDS


@pytest.mark.parametrize("columns", ["57", "0", "wide", None])
def test_help_is_as_wide_as_shutil_says_without_importing_it(columns: str | None,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The parser's formatter takes the terminal width as shutil.get_terminal_size would ($COLUMNS when it is a
    positive number, else the terminal, else 80), and the help wraps to it."""
    import shutil

    from agent.cli import parser as cli

    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert cli._columns() == shutil.get_terminal_size().columns
    if columns == "57":
        lines = build_parser().format_help().splitlines()
        assert max(len(ln) for ln in lines) <= 55 < max(len(ln) for ln in build_parser("alerts").format_help()
                                                        .replace("\n ", " ").splitlines())


def test_alerts_list_builds_only_the_rows_it_reads(tmp_path: Path) -> None:
    """alerts list (and --json) exit 0 without defining the Store's other row classes (agent.store.rows), a
    segment's records (agent.store.segment_types), a version's stored form (agent.events.stored) or the
    Unicode database (only naming an operator checks characters with it); then
    directives, which reads a Directive row, loads the rows (the probe sees the module when it is there)."""
    cfg = _setup(tmp_path)
    with EventLog(config.load(str(cfg)).db_path) as log:
        log.append("operator.note", {"text": "at most 4 instances", "by": "alice", "pin": True}, "operator")
    got = _probe(cfg, [["alerts", "list"], ["alerts", "list", "--json"], ["directives"]],
                 ("agent.store.rows", "agent.store.segment_types", "agent.events.stored", "unicodedata"))
    assert [(code, loaded) for _, code, loaded in got] == [(0, []), (0, []), (0, ["agent.store.rows"])]


_CATALOG = """
import argparse, gettext, os, struct, sys
from pathlib import Path

root = Path(sys.argv[1])
if sys.argv[2] == "catalog":  # a one-entry .mo file: 'options' -> 'OPTIONEN'
    (root / "xx" / "LC_MESSAGES").mkdir(parents=True)
    key, value = b"options", b"OPTIONEN"
    header = struct.pack("<7I", 0x950412DE, 0, 1, 28, 36, 0, 44)
    body = struct.pack("<4I", len(key), 44, len(value), 44 + len(key) + 1) + key + b"\\0" + value + b"\\0"
    (root / "xx" / "LC_MESSAGES" / "messages.mo").write_bytes(header[:28] + body)
gettext.bindtextdomain("messages", str(root))
os.environ["LANGUAGE"] = "xx"
from agent.cli import build_parser
text = build_parser("alerts").format_help()
print(argparse._ is str, "OPTIONEN" in text)
"""


@pytest.mark.parametrize(("catalog", "expected"), [("none", "True False"), ("catalog", "False True")])
def test_argparse_skips_gettext_only_when_there_is_no_catalog(catalog: str, expected: str, tmp_path: Path) -> None:
    """Without a message catalog for the locale, argparse's gettext becomes the identity (each lookup would
    return its message unchanged); with one, help is still translated through it."""
    r = subprocess.run([sys.executable, "-c", _CATALOG, str(tmp_path), catalog], capture_output=True, text=True,
                       timeout=60, check=True)
    assert r.stdout.strip() == expected


def _exiting(code: str, stdout: Any, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter with stdout block-buffered (as under an operator's pipe)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    return subprocess.run([sys.executable, "-c", code], stdout=stdout, stderr=subprocess.PIPE, text=True,
                          timeout=60, check=False, env=env, cwd=tmp_path)


_EXIT_NOW = """
import atexit, sys
from agent.cli import exit_now
atexit.register(lambda: sys.stdout.write("atexit ran\\n"))
sys.stdout.write("x" * 100000 + "\\n")
exit_now(3)
"""


def test_the_quick_exit_runs_atexit_flushes_stdout_and_keeps_the_code(tmp_path: Path) -> None:
    """exit_now ends the process with its code after running the atexit functions and flushing stdout:
    output sent to a file or a pipe is complete, the atexit function's line last."""
    with open(tmp_path / "out", "w", encoding="utf-8") as f:
        r = _exiting(_EXIT_NOW, f, tmp_path)
    piped = _exiting(_EXIT_NOW, subprocess.PIPE, tmp_path)
    expected = "x" * 100000 + "\natexit ran\n"
    assert (r.returncode, r.stderr, (tmp_path / "out").read_text(encoding="utf-8")) == (3, "", expected)
    assert (piped.returncode, piped.stderr, piped.stdout) == (3, "", expected)


@pytest.mark.parametrize("ending", ["exit_now(0)", "sys.exit(0)"])
def test_a_closed_pipe_at_exit_ends_as_the_interpreter_ends_it(ending: str, tmp_path: Path) -> None:
    """Output still buffered when the reader has gone: exit_now hands over to the interpreter's own exit,
    which reports the broken pipe and exits 120, exactly as sys.exit does."""
    read, write = os.pipe()
    os.close(read)
    try:
        r = _exiting(f"import sys\nfrom agent.cli import exit_now\nprint('lost')\n{ending}\n", write, tmp_path)
    finally:
        os.close(write)
    assert r.returncode == 120
    assert "BrokenPipeError" in r.stderr and r.stderr.startswith("Exception ignored in: <_io.TextIOWrapper")


_THREAD = """
import threading, time
from agent.cli import exit_now
def late():
    time.sleep(0.3)
    print("thread done", flush=True)
threading.Thread(target=late).start()
exit_now(4)
"""


def test_the_quick_exit_waits_for_a_live_non_daemon_thread(tmp_path: Path) -> None:
    """With another non-daemon thread alive, exit_now leaves the exit to the interpreter, which waits for
    the thread: its output arrives and the code is kept."""
    r = _exiting(_THREAD, subprocess.PIPE, tmp_path)
    assert (r.returncode, r.stdout, r.stderr) == (4, "thread done\n", "")


@pytest.mark.parametrize("argv", [["--help"], ["alert", "list"], ["alerts", "show", "x"]])
def test_the_module_entry_exits_as_argparse_says(argv: list[str], tmp_path: Path) -> None:
    """``python -m agent.cli`` (the console script's entry) ends argparse's own exits with their code and
    their whole output: --help exits 0 with the full parser's help, usage errors exit 2 with one line."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    r = subprocess.run([sys.executable, "-m", "agent.cli", *argv], capture_output=True, text=True, timeout=60,
                       check=False, env=env, cwd=tmp_path)
    if argv == ["--help"]:
        assert (r.returncode, r.stdout, r.stderr) == (0, build_parser().format_help(), "")
    else:
        assert r.returncode == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1
        assert r.stderr.startswith("fleet-agent: error: ")


@pytest.mark.parametrize("enabled", [True, False])
def test_a_command_leaves_the_garbage_collector_as_it_found_it(enabled: bool, tmp_path: Path) -> None:
    """main() pauses the cyclic GC only while the command starts: after a command, after a usage error and
    after --version, the collector is on or off as it was before."""
    cfg = _setup(tmp_path)
    frozen = gc.get_freeze_count()
    try:
        if not enabled:
            gc.disable()
        states = []
        assert main(["--config", str(cfg), "alerts", "list"]) == 0
        states.append(gc.isenabled())
        for argv in (["--version"], ["alerts", "show", "x"]):
            with pytest.raises(SystemExit):
                main(argv)
            states.append(gc.isenabled())
    finally:
        gc.enable()
    assert states == [enabled] * 3
    assert gc.get_freeze_count() == frozen  # an in-process caller's objects stay collectable


_WHOLE = """
import gc, sys
from agent.cli import main
code = main(["--config", sys.argv[1], "alerts", "list"], whole_process=True)
print(code, gc.isenabled(), gc.get_freeze_count() > 1000)
"""


def test_the_console_script_freezes_what_the_start_made() -> None:
    """A whole-process run (the console script's) resumes the collector with what the start made frozen out
    of its sight: thousands of objects; the collector is on again."""
    r = subprocess.run([sys.executable, "-c", _WHOLE, "/nonexistent/config.yaml"], capture_output=True, text=True,
                       timeout=60, check=True)
    assert r.stdout.split() == ["2", "True", "True"]


def _command_paths(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> Iterator[list[str]]:
    """Every command and subcommand of ``parser``, as the words that name it."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield [*prefix, name]
                yield from _command_paths(sub, (*prefix, name))


def _outcome(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[object, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            result: object = sorted(vars(parser.parse_args(argv)).items(), key=lambda kv: kv[0])
        except SystemExit as e:
            result = ("exit", e.code)
    return result, out.getvalue(), err.getvalue()


def test_the_parser_built_for_a_run_answers_as_the_full_parser_for_every_command(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """For every command and subcommand, alone, with --help, with an unknown option, with a stray word and
    after --config, the parser main() builds for that run (only the command named, only its subcommand
    named) gives the same namespace, or the same exit code and byte-identical help and error text, as
    the parser of every command."""
    monkeypatch.setenv("COLUMNS", "100")
    full = build_parser()
    paths = list(_command_paths(full))
    assert ["alerts", "list"] in paths and ["log", "verify"] in paths and ["say"] in paths and len(paths) > 60
    narrowed = 0
    for path in paths:
        for argv in (path, [*path, "--help"], [*path, "--no-such-option"], [*path, "no-such-word"],
                     ["--config", "c.yaml", *path, "-h"], [*path, "1", "--json"]):
            lazy = parser_for(argv)
            narrowed += lazy is not full and len(list(_command_paths(lazy))) < len(paths) // 4
            assert _outcome(lazy, argv) == _outcome(full, argv), argv
    assert narrowed > len(paths)
    lazy = parser_for(["alerts", "list"])
    assert list(_command_paths(lazy)) == [p for p in paths if p[0] == "alerts"]
    built = {" ".join(p): len(_subparser(lazy, p)._actions) for p in _command_paths(lazy)}
    assert built["alerts show"] == built["alerts ack"] == 1 < built["alerts list"]  # -h alone, or the options


def _subparser(parser: argparse.ArgumentParser, path: list[str]) -> argparse.ArgumentParser:
    for word in path:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[word]
    return parser


def test_reading_commands_load_neither_threading_nor_the_segment_reader(tmp_path: Path) -> None:
    """alerts list, directives, status, knowledge list, log verify and say run without the threading module
    (the log and the secrets take their locks from _thread); alerts list and directives also without fcntl
    (only writing the head file locks it) or agent.store.segments (only reading events may reach archived
    months);
    then log verify, which walks every event, loads the segment reader (the probe sees it when it is there)."""
    cfg = _setup(tmp_path)
    got = _probe(cfg, [*READS, ["say", "a note"]], ("threading", "fcntl", "agent.store.segments"))
    assert [(argv, code) for argv, code, _ in got] == [(argv, 0) for argv in [*READS, ["say", "a note"]]]
    loaded = {" ".join(argv): names for argv, _, names in got}
    assert all("threading" not in names for names in loaded.values())
    for argv in ("alerts list", "alerts list --json", "directives"):
        assert loaded[argv] == [], argv
    assert "agent.store.segments" in loaded["log verify"]


def test_payload_field_types_are_what_get_type_hints_gives_for_every_kind() -> None:
    """The payload field types, evaluated once per distinct annotation text and module, equal
    typing.get_type_hints for every field of every version of every event kind."""
    from typing import get_type_hints

    from agent.events import KINDS
    from agent.events.payload import field_types

    checked = 0
    for kind in KINDS.values():
        for version in kind.versions:
            hints, got = get_type_hints(version.payload), field_types(version.payload)
            assert got == {name: hints[name] for name in got}, version
            checked += len(got)
    assert checked > 200


def test_reading_and_appending_commands_load_no_deep_copy(tmp_path: Path) -> None:
    """alerts list, directives, status, knowledge list, log verify and say run without the copy module (and
    the weakref module it brings): a deep copy is made only when a stored form is expanded or an old version
    upcast; then thread show, over a tick.started row whose records share a non-scalar value (each record
    gets its own copy), loads it (the probe sees the module when it is there)."""
    cfg = _setup(tmp_path)
    commands = [*READS, ["say", "a note"]]
    got = _probe(cfg, commands, ("copy",))
    assert [(argv, code, loaded) for argv, code, loaded in got] == [(argv, 0, []) for argv in commands]
    with EventLog(config.load(str(cfg)).db_path) as log:
        log.append("tick.started", {"observation": {"balance": 1.0, "instances": [
            {"id": n, "gpu_name": "RTX 4090", "ports": {"22/tcp": 22}} for n in (1, 2)]}}, "scheduler", 2)
    assert _probe(cfg, [["thread", "show"]], ("copy",)) == [[["thread", "show"], 0, ["copy"]]]


def test_the_migration_names_an_open_checks_are_the_declared_ones(tmp_path: Path) -> None:
    """The names found without splitting schema.sql are the declared migrations' names, in order; a database
    with all of them applied opens applying none, and one that records a migration this version does not
    declare is refused naming it."""
    from agent.errors import LogError
    from agent.store import db

    assert db.migration_names() == [name for name, _ in db.migrations()] and len(db.migration_names()) >= 10
    path = config.load(str(_setup(tmp_path))).db_path
    conn = db.connect(path)
    try:
        assert db.apply_migrations(conn) == []
    finally:
        conn.close()
    tamper.record_migration(path, "999_from_the_future")
    with pytest.raises(LogError, match="999_from_the_future"):
        db.connect(path).close()


def test_reading_alerts_and_directives_imports_neither_typing_nor_pathlib(tmp_path: Path) -> None:
    """alerts list (plain and --json) and directives exit 0 in a fresh interpreter without site startup (as a
    regular install runs: no editable-install finder) and import neither typing nor pathlib (nor
    urllib.parse, which pathlib brings); status imports no typing either, but pathlib (the knowledge files
    are listed as Paths); then context, which renders a request through modules that use typing, loads it
    (the probe sees a module when it is there)."""
    cfg = _setup(tmp_path)
    commands = [["alerts", "list"], ["alerts", "list", "--json"], ["directives"], ["status"], ["context"]]
    root = str(Path(config.__file__).parent.parent)
    r = subprocess.run([sys.executable, "-S", "-c", _PROBE, json.dumps(commands), str(cfg),
                        json.dumps(["typing", "pathlib", "urllib.parse"])],
                       capture_output=True, text=True, timeout=120, check=False,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join([root, *sys.path])})
    line = next((ln for ln in r.stderr.splitlines() if ln.startswith("PROBE ")), None)
    assert line is not None, r.stderr[-2000:]
    got = json.loads(line[len("PROBE "):])
    assert [(argv, code, loaded) for argv, code, loaded in got[:-2]] == [(argv, 0, []) for argv in commands[:-2]]
    assert got[-2][1:] == [0, ["pathlib", "urllib.parse"]]
    assert got[-1][1] == 0 and "typing" in got[-1][2]


def test_a_log_opened_by_its_name_gives_the_paths_pathlib_gave(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """EventLog opened with a string (spelt with './' and doubled slashes, as the config keeps text) still
    gives Path objects: its path is Path(name), its head and checkpoint files sit beside it as before
    (NAME.head, NAME.verified), an explicit head file is kept as given; an append writes the head file and a
    verification from the checkpoint the checkpoint file, at those paths."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir()
    name = "./d//fleet.db"
    with EventLog(name) as log:
        assert isinstance(log.path, Path) and log.path == Path(name)
        assert log.head_file == Path("d/fleet.db.head") and log.checkpoint_file == Path("d/fleet.db.verified")
        log.append("tick.started", {"observation": {"instances": [], "balance": 1.0}}, "scheduler", 1)
        assert log.verify_since_checkpoint().ok
    assert (tmp_path / "d/fleet.db.head").read_text().startswith("1 ")
    assert (tmp_path / "d/fleet.db.verified").read_text().startswith("1 ")
    with EventLog(Path(name), head_file=str(tmp_path / "elsewhere.head"), create=False) as log:
        assert log.head_file == tmp_path / "elsewhere.head" and log.path == Path("d/fleet.db")


def test_alerts_and_directives_read_the_read_models_without_the_event_log(tmp_path: Path) -> None:
    """alerts list (plain and --json), alerts silences and directives exit 0 without importing the event log's
    module or the event classes: the read models are queried over a connection opened as the log's is; then
    alerts show, which reads the alert's events through the event log, loads both (the probe sees a module when
    it is there)."""
    cfg = _setup(tmp_path)
    modules = ("agent.store.log", "agent.events")
    commands = [["alerts", "list"], ["alerts", "list", "--json"], ["alerts", "silences"], ["directives"],
                ["alerts", "show", "1"]]
    got = _probe(cfg, commands, modules)
    assert [(code, loaded) for _, code, loaded in got] == [(0, [])] * 4 + [(0, list(modules))]
