"""The README cannot lie: its commands are the ones CI runs, and they are runnable."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def readme_command(name: str) -> str:
    r = subprocess.run([sys.executable, str(ROOT / ".ci" / "readme_command.py"), name], capture_output=True,
                       text=True, check=True)
    return r.stdout.strip()


def test_readme_has_exactly_the_two_quickstart_commands():
    """The Quickstart gives one demo command and one test command, each installing what it needs."""
    demo, test = readme_command("demo"), readme_command("test")
    assert "pip install" in demo and demo.endswith("fleet-agent demo")
    assert "pip install" in test and "pytest" in test and "ruff check" in test and "mypy" in test


def test_ci_runs_the_readme_test_command():
    """.ci/run runs whatever the README's test command says (it reads it from the README)."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "readme_command.py test" in ci


@pytest.mark.slow
def test_readme_demo_command_runs_in_this_environment(tmp_path):
    """The demo part of the README command (after the install) runs and exits 0."""
    demo = readme_command("demo")
    assert demo.split("&&")[-1].strip() == ".venv/bin/fleet-agent demo"
    r = subprocess.run([sys.executable, "-m", "agent.cli", "demo", "--ticks", "2", "--speed", "1e9",
                        "--keep", str(tmp_path / "d")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_cli_verb_the_readme_names_exists():
    """Each `fleet-agent VERB` the README mentions is a real command."""
    from agent.cli import build_parser

    parser = build_parser()
    verbs = set(parser._subparsers._group_actions[0].choices)  # noqa: SLF001 - argparse has no public API
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    named = set(re.findall(r"(?:^|`|/|&& )fleet-agent (?:--config \S+ )?([a-z]+)", text, re.M))
    assert {"demo", "status", "say", "context"} <= named
    missing = sorted(named - verbs)
    assert not missing, f"README names commands that do not exist: {missing}"


@pytest.mark.parametrize("key", ["budget_tokens", "max_instances", "notify_command", "label_prefix"])
def test_readme_configuration_reference_matches_the_example(key):
    """The README's configuration reference is the example file itself, so they cannot drift."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    example = (ROOT / "config.example.yaml").read_text(encoding="utf-8")
    block = re.search(r"<!-- config-reference -->\s*```yaml\n(.+?)\n```", text, re.S)
    assert block, "README.md has no <!-- config-reference --> block"
    assert block.group(1).strip() == example.strip()
    assert key in block.group(1)
