"""Docs that cannot drift: every command and option of the CLI explains itself."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from agent.cli import build_parser

REPO = Path(__file__).resolve().parents[1]


def walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], str | None,
                                                                                         argparse.ArgumentParser]]:
    """(command path, help shown in the parent's list, parser) for every command and subcommand."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield path + (name,), helps.get(name), sub
                yield from walk(sub, path + (name,))


def test_every_command_has_help_and_description():
    """Each command and subcommand has a one-line help in its parent's list and a description of its own."""
    commands = list(walk(build_parser()))
    names = {" ".join(p) for p, _, _ in commands}
    assert {"init", "config check", "config show", "log verify", "log export", "log search", "log rebuild",
            "thread show"} <= names
    missing = [" ".join(p) for p, h, _ in commands if not h or h == argparse.SUPPRESS]
    assert missing == [], f"commands without help: {missing}"
    undescribed = [" ".join(p) for p, _, sub in commands if not (sub.description or "").strip()]
    assert undescribed == [], f"commands without a description: {undescribed}"


def test_every_option_has_help():
    """Every argument of every command has help text (hidden ones say so with SUPPRESS)."""
    parsers = [((), build_parser())] + [(p, sub) for p, _, sub in walk(build_parser())]
    bare = []
    for path, parser in parsers:
        for a in parser._actions:
            if isinstance(a, argparse._SubParsersAction | argparse._HelpAction):
                continue
            if not a.help:
                bare.append(f"{' '.join(path) or 'fleet-agent'} {'/'.join(a.option_strings) or a.dest}")
    assert bare == [], f"arguments without help: {bare}"


def test_help_exits_zero():
    """'fleet-agent --help' (and a subcommand's --help) print usage and exit 0."""
    exe = shutil.which("fleet-agent", path=str(Path(sys.executable).parent))
    cmd = [exe] if exe else [sys.executable, "-m", "agent.cli"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for args in (["--help"], ["log", "verify", "--help"]):
        r = subprocess.run(cmd + args, capture_output=True, text=True, env=env, timeout=60)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("usage: fleet-agent")
    r = subprocess.run(cmd + ["no-such-command"], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1
