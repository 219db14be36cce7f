"""Shell completion (bash, zsh) and the man page are generated from the parser by the installed command,
and build: bash parses the script, groff formats the page without a warning, and both name every command."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from agent.cli import build_parser
from agent.cli.completion import _subparsers, completion_script, man_page


def _leaf_commands() -> list[str]:
    out = []

    def walk(p, path):
        subs = _subparsers(p)
        if not subs:
            out.append(path)
        for name, sp in subs.items():
            walk(sp, f"{path} {name}".strip())
    walk(build_parser(), "")
    return out


def test_bash_completion_parses_and_knows_every_command(tmp_path):
    """The bash script is valid bash, and completes the top-level commands and nested ones (alerts silence)."""
    script = completion_script(build_parser(), "bash")
    path = tmp_path / "fleet-agent.bash"
    path.write_text(script)
    r = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for word in ("backup", "restore", "silence", "unsilence", "--tail", "completion"):
        assert word in script
    # Loaded into bash, it completes 'fleet-agent al' to 'alerts'.
    probe = (f"source {path}; COMP_WORDS=(fleet-agent al); COMP_CWORD=1; COMP_LINE='fleet-agent al'; "
             "COMP_POINT=${#COMP_LINE}; _shtab_fleet_agent fleet-agent al fleet-agent; echo \"${COMPREPLY[@]}\"")
    r = subprocess.run(["bash", "-c", probe], capture_output=True, text=True)
    assert r.returncode == 0 and "alerts" in r.stdout.split(), (r.stdout, r.stderr)


def test_zsh_completion_is_a_compdef_for_every_command():
    """The zsh script declares itself for fleet-agent and lists the commands."""
    script = completion_script(build_parser(), "zsh")
    assert script.lstrip().startswith("#compdef fleet-agent")
    for word in ("backup", "restore", "silence", "thread"):
        assert word in script
    if shutil.which("zsh"):
        r = subprocess.run(["zsh", "-n"], input=script, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


def test_man_page_formats_and_documents_every_command():
    """The man page has a section per leaf command (e.g. 'fleet-agent alerts silence') with its options,
    and groff formats it without warnings."""
    page = man_page(build_parser())
    assert page.startswith(".TH FLEET\\-AGENT 1 ")
    for cmd in _leaf_commands():
        assert f".SS fleet\\-agent {cmd.replace('-', chr(92) + '-')}\n" in page, cmd
    assert "\\fB\\-\\-reason\\fR REASON" in page
    if shutil.which("groff") is None:
        pytest.skip("groff is not installed")
    r = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z"], input=page, capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr == "", r.stderr


def test_the_installed_command_prints_them():
    """'fleet-agent completion bash' and 'fleet-agent man' work with no config (as after pip install)."""
    from agent import cli

    assert cli.main(["completion", "bash"]) == 0
    assert cli.main(["man"]) == 0
