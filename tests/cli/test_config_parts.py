"""A config broken in one part refuses only the commands that read it (docs/configuration.md, "A file broken
in one place"): one row of that table per test case, each run in this process against a real log."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from agent import cli, config
from agent.cli.parser import COMMANDS, build_parser
from agent.runtime.app import App
from agent.service.daemon import effective
from tests.cli.test_bad_inputs import fleet_home

ROOT = Path(__file__).resolve().parents[2]

# How to break each part: (section or None for a top-level key, key, a value it refuses).
BREAK: dict[str, tuple[str | None, str, object]] = {
    "logging": ("logging", "level", "loud"), "schedule": ("schedule", "max_steps", "x"),
    "vast": ("vast", "timeout", "x"), "demand": ("demand", "url", 5), "model": ("model", "temperature", "hot"),
    "context": ("context", "budget_tokens", "x"), "fleet": ("fleet", "disk_gb", "x"),
    "policy": ("policy", "max_instances", "x"), "alerts": ("alerts", "failed_ticks", "x"),
    "http": ("http", "listen", "nope"), "storage": ("storage", "failover_seconds", "x"),
    "knowledge_dir": (None, "knowledge_dir", [1]), "prompts_dir": (None, "prompts_dir", [1]),
    "agent_id": (None, "agent_id", "Not An Id"), "data_dir": (None, "data_dir", [1]),
}

# One ordinary invocation of every command that reads the config (a test checks none is missing).
INVOCATIONS: dict[str, list[str]] = {
    "config check": ["config", "check"], "config show": ["config", "show"], "config diff": ["config", "diff"],
    "log verify": ["log", "verify"], "log export": ["log", "export"],
    "log archive": ["log", "archive", "--dry-run", "--older-than", "90d"], "log segments": ["log", "segments"],
    "log prune": ["log", "prune", "--before", "90d"], "log migrate": ["log", "migrate", "--to", "MIGRATED"],
    "log compact": ["log", "compact"], "log search": ["log", "search", "keep"], "log rebuild": ["log", "rebuild", "--check"],
    "thread show": ["thread", "show"], "context": ["context"], "replay": ["replay"], "tick": ["tick"], "run": ["run"],
    "alerts list": ["alerts", "list"], "alerts show": ["alerts", "show", "1"], "alerts ack": ["alerts", "ack", "2"],
    "alerts silence": ["alerts", "silence", "2", "--for", "1h", "--reason", "r"], "alerts silences": ["alerts", "silences"],
    "alerts unsilence": ["alerts", "unsilence", "1"], "knowledge list": ["knowledge", "list"],
    "knowledge show": ["knowledge", "show", "notes.md"], "knowledge edit": ["knowledge", "edit", "notes.md", "--editor", "true"],
    "knowledge history": ["knowledge", "history", "notes.md"], "say": ["say", "hello"], "unpin": ["unpin", "3"],
    "directives": ["directives"], "policy show": ["policy", "show"],
    "policy set": ["policy", "set", "max_instances", "2", "--reason", "r"], "policy reset": ["policy", "reset", "max_instances"],
    "policy proposals": ["policy", "proposals"], "policy accept": ["policy", "accept", "1"],
    "policy reject": ["policy", "reject", "1"], "pause": ["pause", "--reason", "r"], "resume": ["resume"],
    "hosts list": ["hosts", "list"], "hosts exclude": ["hosts", "exclude", "5", "--reason", "r"],
    "hosts include": ["hosts", "include", "5"], "instances": ["instances"], "destroy": ["destroy", "1", "--yes", "--reason", "r"],
    "drain": ["drain", "--yes"], "spend": ["spend"], "fork": ["fork", "--rules", "--tick", "1"], "override": ["override", "1"],
    "status": ["status"], "backup": ["backup", "BACKUP"], "restore": ["restore", "BACKUP"], "web": ["web", "--listen", "nope"],
}


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fleet with a knowledge file, an alert, a note and a directive."""
    yield fleet_home(tmp_path_factory.mktemp("fleet"))


def broken_config(home: Path, part: str, name: str) -> Path:
    """The home's config with ``part`` broken, as ``name``; the other parts as they were."""
    data = yaml.safe_load((home / "config.yaml").read_text(encoding="utf-8"))
    section, key, value = BREAK[part]
    if section is None:
        data[key] = value
    else:
        data[section] = {**(data.get(section) or {}), key: value}
    for k in ("data_dir", "knowledge_dir"):  # relative to the home, wherever the file is
        if k != part:
            data[k] = str(home / str(data[k]))
    p = home / name
    p.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return p


def run(home: Path, cfg: Path, path: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    argv = [str(home / "copy.db") if a == "MIGRATED" else str(home / "backup.db") if a == "BACKUP" else a
            for a in INVOCATIONS[path]]
    try:
        code = cli.main(["--config", str(cfg), *argv])
    except SystemExit as e:  # argparse
        code = e.code if isinstance(e.code, int) else 2
    out, err = capsys.readouterr()
    return code, out, err


def rows() -> list[tuple[str, tuple[str, ...] | None]]:
    return [(c.path, c.reads) for c in COMMANDS if c.handler is not None and not c.no_config]


def test_every_command_with_a_config_has_an_invocation_and_a_row_in_the_docs():
    """The table in docs/configuration.md is the parser's ``reads=``, row for row."""
    assert sorted(INVOCATIONS) == sorted(p for p, _ in rows())
    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    table = text.split("<!-- config-parts -->")[1].split("<!-- /config-parts -->")[0]
    documented: dict[str, str] = {}
    for row in table.strip().splitlines()[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        for name in re.findall(r"`([^`]+)`", cells[0]):
            documented[name] = cells[1]
    assert sorted(documented) == sorted(p for p, _ in rows())
    for path, reads in rows():
        doc = documented[path]
        if reads is None:
            assert doc == "all", path
        elif not reads:
            assert doc.startswith("none"), path
        else:
            assert [w for w in re.findall(r"[a-z_]+", re.sub(r"\([^)]*\)", "", doc)) if w in BREAK] == list(reads), path


@pytest.mark.parametrize(("path", "reads"), rows(), ids=[p for p, _ in rows()])
def test_a_broken_part_refuses_only_the_commands_that_read_it(path: str, reads: tuple[str, ...] | None, home: Path,
                                                              capsys: pytest.CaptureFixture[str]):
    """Each part the command reads (and agent_id, data_dir, storage), broken: exit 2, one line naming the file,
    the line and the key. A part it does not read, broken: it is not refused for it, and one warning line names
    the file and line."""
    needed = list(BREAK) if reads is None else [*config.CORE_PARTS, "data_dir", *reads]
    for part in dict.fromkeys(needed):
        if reads is None and part not in ("http", "model", "agent_id"):
            continue  # a command that reads everything: three parts show it
        cfg = broken_config(home, part, f"broken-{part}.yaml")
        code, out, err = run(home, cfg, path, capsys)
        key = BREAK[part][1] if BREAK[part][0] is None else f"{BREAK[part][0]}.{BREAK[part][1]}"
        assert code == 2, (path, part, out, err)
        assert re.fullmatch(rf"fleet-agent: {re.escape(str(cfg))}:\d+: {re.escape(key)}: .*\n", err), (path, part, err)
    if reads is None:
        return
    unread = next(p for p in ("http", "model", "alerts", "schedule") if p not in reads)
    cfg = broken_config(home, unread, f"unread-{unread}.yaml")
    code, out, err = run(home, cfg, path, capsys)
    lines = err.splitlines()
    assert lines and re.match(rf"fleet-agent: warning: {re.escape(str(cfg))}:\d+: {unread}\.", lines[0]), (path, err)
    assert "does not read that part" in lines[0]
    assert all(str(cfg) not in x for x in lines[1:]), (path, err)  # not refused for it
    assert "Traceback" not in out + err


def test_status_reads_broken_sections_as_the_daemon_put_them_in_force(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]):
    """With policy broken in the file and the daemon's configuration recorded in the log, status runs and
    shows the spend budget in force; without a record it is refused naming the line."""
    assert cli.main(["init", str(tmp_path)]) == 0
    capsys.readouterr()
    good = tmp_path / "config.yaml"
    text = good.read_text(encoding="utf-8").replace("max_daily_spend: null", "max_daily_spend: 75.5", 1)
    good.write_text(text, encoding="utf-8")
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("max_instances: 8", "max_instances: eight", 1), encoding="utf-8")
    assert cli.main(["--config", str(bad), "status"]) == 2
    err = capsys.readouterr().err
    assert re.fullmatch(rf"fleet-agent: {re.escape(str(bad))}:\d+: policy\.max_instances: .*\n", err), err
    s = config.load(str(good))
    app = App(s)
    try:  # what the daemon records when it starts
        app.log.append("config.applied", {"config_hash": s.config_hash(), "settings": effective(s), "path": str(good)},
                       "system")
    finally:
        app.close()
    assert cli.main(["--config", str(bad), "status", "--json"]) == 0
    out, err = capsys.readouterr()
    assert len(err.splitlines()) == 1 and "bad.yaml" in err and "policy as the daemon last put them in force" in err
    import json

    assert json.loads(out)["steering"]["spend"]["max_daily_spend"] == 75.5


def test_a_broken_section_cannot_be_read_by_mistake():
    """A section set aside raises its own error on any use, dataclasses.asdict included."""
    import dataclasses

    s, broken = config.parse_partial("model:\n  temperature: hot\nhttp:\n  listen: nope\n", "c.yaml")
    assert list(broken) == ["model", "http"]
    assert s.policy == config.PolicySettings()
    for use in (lambda: s.model.name, lambda: dataclasses.asdict(s.http), lambda: s.to_dict()):
        with pytest.raises(config.ConfigError, match=r"c\.yaml:[24]: (model|http)\."):
            use()
    with pytest.raises(config.ConfigError, match=r"c\.yaml:2"):
        config.parse("model:\n  temperature: hot\nhttp:\n  listen: nope\n", "c.yaml")


def test_a_file_that_is_not_yaml_refuses_everything():
    for text in ("policy: [oops\n", "- a\n"):
        with pytest.raises(config.ConfigError):
            config.parse_partial(text, "c.yaml")


def test_the_parser_declares_reads_as_parts_the_loader_knows():
    """Every name in a ``reads=`` is a part of the file (a top-level key)."""
    parts = set(config._keys(config.Settings))
    for c in COMMANDS:
        assert set(c.reads or ()) <= parts and set(c.in_force) <= set(c.reads or ()), c.path
    assert build_parser().parse_args(["status"]).in_force == ("context", "policy")
