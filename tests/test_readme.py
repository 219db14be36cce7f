"""The README cannot lie: its commands are the ones CI runs, every command line it shows parses, every
setting it names exists, and the configuration reference in docs/ is the example file itself."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
EXAMPLE = yaml.safe_load((ROOT / "config.example.yaml").read_text(encoding="utf-8"))
MAX_LINES = 500


def readme_command(name: str) -> str:
    r = subprocess.run([sys.executable, str(ROOT / ".ci" / "readme_command.py"), name], capture_output=True,
                       text=True, check=True)
    return r.stdout.strip()


def test_readme_has_exactly_the_two_quickstart_commands():
    """The Quickstart gives one demo command and one test command, each installing what it needs."""
    demo, test = readme_command("demo"), readme_command("test")
    assert "pip install" in demo and demo.endswith("fleet-agent demo")
    assert "pip install" in test and "pytest" in test and "ruff check" in test and "mypy" in test
    assert README.index("<!-- demo-command -->") < README.index("## The promises")


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


def test_the_readme_is_an_operators_guide():
    """Short, with a contents list whose links all land on a heading, the seven promises, and a real
    model's settings before the daily commands."""
    assert len(README.splitlines()) <= MAX_LINES
    assert "## Contents" in README
    promises = README.split("## The promises", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"^(\d+)\. \*\*", promises, re.M) == [str(n) for n in range(1, 8)]
    anchors = {_anchor(h) for h in re.findall(r"^#+ (.+)$", README, re.M)}
    links = re.findall(r"\]\(#([^)]+)\)", README)
    assert links and not sorted(set(links) - anchors), "contents links without a heading"
    assert README.index("base_url:") < README.index("### Daily commands")
    assert "fleet-agent sim" in README and "http://127.0.0.1:18790/demand" in README


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_links_to_files_exist():
    """Every relative link in the README and docs/ points at a file that exists."""
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", doc.read_text(encoding="utf-8")):
            assert (doc.parent / target).exists(), f"{doc.name} links to a missing {target}"


def _shown_command_lines(text: str) -> list[list[str]]:
    """Every `fleet-agent ...` command line the text shows, in inline code or in shell blocks, as argv
    after `fleet-agent` (cut at a shell operator or a comment)."""
    found: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        found += block.splitlines()
    found += re.findall(r"`([^`\n]*fleet-agent [^`\n]*)`", re.sub(r"```.*?```", "", text, flags=re.S))
    argvs = []
    for line in found:
        line = line.replace("\\|", "|")
        # the program, not the unit or user of that name (`journalctl -u fleet-agent`, `sudo -u fleet-agent`)
        runs = [m for m in re.finditer(r"(?:^|[\s/])fleet-agent\s+(\S.*)", line)
                if not line[:m.start()].rstrip().endswith("-u")]
        if not runs or "..." in runs[0].group(1) or "…" in runs[0].group(1):
            continue
        words = shlex.split(runs[0].group(1), comments=True)
        for i, w in enumerate(words):
            if w in ("|", ">", "&&", "&", ";"):
                words = words[:i]
                break
        if words:
            argvs.append(words)
    return argvs


def test_every_command_line_the_readme_shows_parses():
    """Each `fleet-agent ...` line the README shows (commands, subcommands, flags) is accepted by the real
    parser, so a renamed command or flag cannot leave the guide behind."""
    from agent.cli import build_parser

    argvs = _shown_command_lines(README)
    verbs = {argv[2] if argv[0] == "--config" else argv[0] for argv in argvs}
    assert {"demo", "status", "say", "alerts", "pause", "resume", "hosts", "policy", "spend", "drain",
            "knowledge", "backup", "restore", "doctor", "sim", "web", "context"} <= verbs
    bad = []
    for argv in argvs:
        try:
            with contextlib.redirect_stderr(io.StringIO()) as err:
                build_parser().parse_args(argv)
        except SystemExit as e:
            if e.code:
                bad.append(f"fleet-agent {shlex.join(argv)}: {err.getvalue().strip().splitlines()[-1]}")
    assert not bad, "\n".join(bad)


def _config_keys(tree: Any, prefix: str = "") -> set[str]:
    keys: set[str] = set()
    if isinstance(tree, dict):
        for key, value in tree.items():
            keys.add(prefix + key)
            if isinstance(value, dict) and value:
                keys |= _config_keys(value, prefix + key + ".")
    return keys


def _event_kinds() -> set[str]:
    """Event kinds, named the way config keys are (`model.request`): every quoted dotted name in agent/events."""
    names: set[str] = set()
    for f in (ROOT / "agent" / "events").glob("*.py"):
        names |= set(re.findall(r"\"([a-z_]+\.[a-z_.]+)\"", f.read_text(encoding="utf-8")))
    return names


def test_every_setting_the_readme_names_exists():
    """Each `section.key` the README names in code is a key of config.example.yaml (or an event kind), and
    every YAML block it shows uses only real keys, nested where they belong."""
    keys = _config_keys(EXAMPLE)
    sections = {k for k, v in EXAMPLE.items() if isinstance(v, dict)}
    pattern = "`((?:" + "|".join(sections) + r")\.[a-z_]+)(?:[`\s/])"
    named = set(re.findall(pattern, README))
    assert {"context.budget_tokens", "policy.max_daily_spend", "storage.failover_seconds"} <= named
    unknown = sorted(named - keys - _event_kinds())
    assert not unknown, f"README names settings that do not exist: {unknown}"
    blocks = re.findall(r"```yaml\n(.*?)```", README, re.S)
    assert blocks
    for block in blocks:
        shown = _config_keys(yaml.safe_load(block))
        assert not sorted(shown - keys), f"README's YAML uses unknown keys: {sorted(shown - keys)}"


@pytest.mark.parametrize("key", ["budget_tokens", "max_instances", "notify_command", "label_prefix"])
def test_configuration_reference_is_the_example(key):
    """docs/configuration.md's reference is the example file itself, so they cannot drift."""
    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    example = (ROOT / "config.example.yaml").read_text(encoding="utf-8")
    block = re.search(r"<!-- config-reference -->\s*```yaml\n(.+?)\n```", text, re.S)
    assert block, "docs/configuration.md has no <!-- config-reference --> block"
    assert block.group(1).strip() == example.strip()
    assert key in block.group(1)
