"""Docs that cannot drift: every command and option of the CLI explains itself."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.cli import build_parser

REPO = Path(__file__).resolve().parents[2]


def walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], str | None,
                                                                                         argparse.ArgumentParser]]:
    """(command path, help shown in the parent's list, parser) for every command and subcommand."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield path + (name,), helps.get(name), sub
                yield from walk(sub, path + (name,))


COMMANDS = list(walk(build_parser()))


def test_the_walk_finds_every_command_group():
    """The parametrised test below covers the commands of every module that registers some."""
    names = {" ".join(p) for p, _, _ in COMMANDS}
    assert {"init", "config check", "config show", "log verify", "log export", "log search", "log rebuild",
            "thread show", "sim", "context", "replay", "tick", "alerts ack", "knowledge edit", "say", "unpin",
            "directives", "run", "status", "doctor", "demo", "fork", "fork diff", "override"} <= names


@pytest.mark.parametrize(("path", "listed_help", "parser"), [((), "top level", build_parser()), *COMMANDS],
                         ids=["fleet-agent", *(" ".join(p) for p, _, _ in COMMANDS)])
def test_command_explains_itself(path: tuple[str, ...], listed_help: str | None, parser: argparse.ArgumentParser,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    """The command has a one-line help in its parent's list, a description of its own, help text on
    every argument (hidden ones say so with SUPPRESS), and `--help` prints its usage and exits 0."""
    assert listed_help and listed_help != argparse.SUPPRESS, "no help in the parent's list"
    assert (parser.description or "").strip(), "no description"
    bare = [a.option_strings or a.dest for a in parser._actions
            if not isinstance(a, argparse._SubParsersAction | argparse._HelpAction) and not a.help]
    assert bare == [], f"arguments without help: {bare}"
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args([*path, "--help"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: fleet-agent {' '.join(path)}".rstrip())


def test_the_installed_command_answers_help_and_refuses_unknown_commands():
    """The `fleet-agent` entry point (or `python -m agent.cli`) prints usage for --help and exits 0;
    an unknown command exits 2 with one line on stderr."""
    exe = shutil.which("fleet-agent", path=str(Path(sys.executable).parent))
    cmd = [exe] if exe else [sys.executable, "-m", "agent.cli"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for args in (["--help"], ["log", "verify", "--help"]):
        r = subprocess.run(cmd + args, capture_output=True, text=True, env=env, timeout=60)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("usage: fleet-agent")
    r = subprocess.run(cmd + ["no-such-command"], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1
