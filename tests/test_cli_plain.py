"""The plain forms of the commonest commands are read without argparse into exactly argparse's namespace.

``agent.cli.plain.parse`` either gives the namespace the full parser gives (the same names, values and
order, the same handler) or None, and then the parser reads the argv as before. Every argv built from each
plain command's own tokens (and a few that argparse refuses or reads differently) is checked against the full
parser: a plain answer where argparse fails or answers otherwise fails the test.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli import build_parser, plain
from tests.test_lean_commands import _setup

PREFIXES = ([], ["--config", "c.yaml"], ["--config=c.yaml"], ["--config=", "--config", "d.yaml"])
# Tokens each command's argv is built from: its own options in every spelling argparse takes, words, and what
# only argparse can answer (an abbreviation, an explicit value on a flag, '-', '--', help).
EXTRA = ("hi", "", "a=b", "-", "--", "--js", "--json=1", "--pin=1", "-h", "--by", "al", "--by=al", "--all")
MUST = [["alerts", "list"], ["--config", "c.yaml", "alerts", "list", "--json", "--all"], ["alerts", "silences", "--all"],
        ["directives", "--json"], ["knowledge", "list"], ["status"], ["--config=c.yaml", "status", "--json"],
        ["say", "prefer", "hosts above 0.98"], ["say", "--pin", "--by", "alice", "at most 4"],
        ["say", "x", "--by=bob", "--pin"], ["say", ""]]


def _argparse(argv: list[str]) -> list[tuple[str, object]] | None:
    """The full parser's namespace as ordered items, or None when it refuses ``argv`` (or prints help)."""
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            return list(vars(_PARSER.parse_args(argv)).items())
    except SystemExit:
        return None


_PARSER = build_parser()


def _forms(command: tuple[str, str | None]) -> list[list[str]]:
    head = [command[0]] if command[1] is None else [command[0], command[1]]
    spec = plain.FORMS[command][2]
    own = [f"--{dest}" for kind, dest in spec if kind != plain.WORDS]
    pool = sorted(set(own) | set(EXTRA))
    tails = [list(t) for n in range(4) for t in itertools.product(pool, repeat=n)]
    return [[*p, *head, *t] for p in PREFIXES for t in tails]


@pytest.mark.parametrize("command", sorted(plain.FORMS, key=str))
def test_every_plain_answer_is_argparse_s_answer(command: tuple[str, str | None]) -> None:
    """For every argv of up to three tokens after the command (from its options, words and tokens only argparse
    reads), under each --config spelling: plain.parse gives None or exactly the full parser's namespace (names,
    values, order, handler), and it answers a good share of them itself."""
    answered = 0
    for argv in _forms(command):
        got = plain.parse(argv)
        if got is None:
            continue
        answered += 1
        assert list(vars(got).items()) == _argparse(argv), argv
    assert answered >= 4 * len(PREFIXES)  # the bare form and the flag given once to three times, at least


@pytest.mark.parametrize("argv", MUST)
def test_the_commonest_forms_are_read_without_the_parser(argv: list[str]) -> None:
    """The forms operators type (a flag or two, --config before the command, say's words and --by) are read by
    plain.parse, into the full parser's namespace."""
    got = plain.parse(argv)
    assert got is not None
    assert list(vars(got).items()) == _argparse(argv)


@pytest.mark.parametrize("argv", [
    ["alerts", "list", "--js"], ["alerts", "list", "--json=1"], ["alerts", "list", "--help"], ["alerts", "list", "x"],
    ["say", "hi", "--pin", "there"], ["say", "--by", "-x", "hi"], ["say", "--by"], ["say"], ["say", "-"],
    ["say", "--", "hi"], ["--conf", "c.yaml", "status"], ["--config", "-c", "status"], ["-h", "status"],
    ["status", "--by", "x"], ["alerts"], ["alerts", "show", "1"], ["alert", "list"], ["--config", "c.yaml"], [],
    ["--version"],
])
def test_anything_else_goes_to_the_parser(argv: list[str]) -> None:
    """Abbreviations, explicit values on flags, help, words split by an option or where none is taken, '-', '--',
    an option value that starts with '-', commands and subcommands outside the table: plain.parse gives None."""
    assert plain.parse(argv) is None


_PROBE = """
import json, sys
from agent.cli import main
out = []
for argv in json.loads(sys.argv[1]):
    code = main(["--config", sys.argv[2], *argv])
    out.append([argv, code, "argparse" in sys.modules])
sys.stderr.write("PROBE " + json.dumps(out) + "\\n")
"""


def test_the_plain_forms_run_without_importing_argparse(tmp_path: Path) -> None:
    """alerts list, directives, status and say run to exit 0 in a fresh interpreter without importing argparse;
    then alerts list --js (an abbreviation of --json, which argparse accepts) goes through the parser, which
    loads it (the probe sees the module when it is there)."""
    cfg = _setup(tmp_path)
    commands = [["alerts", "list"], ["alerts", "list", "--json"], ["directives"], ["status", "--json"],
                ["say", "a note"], ["alerts", "list", "--js"]]
    r = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(commands), str(cfg)], capture_output=True,
                       text=True, timeout=120, check=False)
    line = next((ln for ln in r.stderr.splitlines() if ln.startswith("PROBE ")), None)
    assert line is not None, r.stderr[-2000:]
    got = json.loads(line[len("PROBE "):])
    assert got == [[argv, 0, argv == ["alerts", "list", "--js"]] for argv in commands]
