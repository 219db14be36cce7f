"""Every read command takes --json and prints JSON (or JSON lines) that parses, with every timestamp in one
form: ISO 8601 UTC ('2026-12-01T03:00:00.000000Z'). The list below is checked against the parser, so a new
read command with --json cannot be left out."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent import cli, config, feedback
from agent.cli.completion import _subparsers
from agent.runtime.app import App
from agent.runtime.tick import run_tick
from tests.cli.test_status_doctor import SIM_KEY, _restore_structlog, make_setup, sim_server  # noqa: F401

# (argv after --config, "json" | "jsonl"): every read command, with the arguments it needs.
READS: list[tuple[tuple[str, ...], str]] = [
    (("status",), "json"),
    (("doctor",), "json"),
    (("config", "check"), "json"),
    (("config", "show"), "json"),
    (("config", "diff"), "json"),
    (("log", "verify"), "json"),
    (("log", "search", "rent"), "json"),
    (("log", "rebuild", "--check"), "json"),
    (("log", "export"), "jsonl"),
    (("log", "segments"), "json"),
    (("thread", "show", "--tail", "5"), "jsonl"),
    (("context",), "json"),
    (("replay",), "jsonl"),
    (("alerts", "list", "--all"), "json"),
    (("alerts", "show", "1"), "json"),
    (("alerts", "silences", "--all"), "json"),
    (("knowledge", "list"), "json"),
    (("knowledge", "show", "notes.md"), "json"),
    (("knowledge", "history", "notes.md"), "json"),
    (("directives",), "json"),
    (("policy", "show"), "json"),
    (("policy", "proposals", "--all"), "json"),
    (("hosts", "list"), "json"),
    (("spend",), "json"),
    (("instances",), "json"),
]
# Commands with --json that change something: covered by their own tests.
WRITES = {"tick", "backup", "restore", "log archive", "log prune", "log migrate", "log compact"}  # archive: tests/store/test_archive*.py; log migrate: tests/store/test_pg_store.py reads its --json; log compact: tests/store/test_log_compact.py
ALWAYS_JSON: set[str] = set()  # commands that print JSON without being asked and refuse --json: none
# Read commands that need more than a fleet's own config: parsed with --json by their own tests.
ELSEWHERE = {"fork diff"}  # tests/fork/test_fork.py reads a fork's directory

ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?Z$")
DATE_LIKE = re.compile(r"^\d{4}-\d\d-\d\d[T ]\d\d:\d\d")
TIME_KEYS = re.compile(r"(^|_)(ts|at)$")


def _timestamps(obj: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(path, value) of every string that looks like a time or sits under a time key (ts, *_ts, at, *_at)."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, str) and (TIME_KEYS.search(k) or DATE_LIKE.match(v)):
                yield f"{path}.{k}", v
            elif k not in ("payload", "messages", "manifest", "settings"):  # event bodies and model text: data
                yield from _timestamps(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _timestamps(v, f"{path}[{i}]")


def _json_commands(p, path="") -> Iterator[str]:
    subs = _subparsers(p)
    if not subs:
        if any("--json" in a.option_strings for a in p._actions):
            yield path
    for name, sp in subs.items():
        yield from _json_commands(sp, f"{path} {name}".strip())


def test_the_list_covers_every_read_command_with_json():
    """Every command that has --json is either in READS or is a write covered elsewhere."""
    from agent.cli import build_parser

    listed = {" ".join(w for w in argv if not w.startswith("-") and w not in ("rent", "1", "5", "notes.md"))
              for argv, _ in READS}
    assert set(_json_commands(build_parser())) - WRITES - ELSEWHERE == listed - ALWAYS_JSON


@pytest.fixture
def fleet(tmp_path, sim_server, monkeypatch):  # noqa: F811
    """A fleet after one real tick (rules provider, simulator, demand): rents, a knowledge file, an alert,
    a silence, a directive."""
    monkeypatch.setenv("TEST_VAST_KEY", SIM_KEY)
    cfg = make_setup(tmp_path, sim_server.url, "  provider: rules")
    cfg.write_text(cfg.read_text(encoding="utf-8") + f"demand:\n  url: {sim_server.url}/demand\n", encoding="utf-8")
    app = App(config.load(str(cfg)))
    try:
        assert run_tick(app).ok
        feedback.raise_alert(app.log, key="dead:9", severity="critical", title="instance #9 exited")
        feedback.silence(app.log, by="alice", reason="replacing it", seconds=3600, key_pattern="dead:*")
        feedback.say(app.log, "at most 4 instances", "alice", pin=True)
    finally:
        app.close()
    return cfg


def test_every_read_command_prints_json_with_iso_utc_timestamps(fleet, capsys):
    """Each read command with --json exits 0 and prints JSON (or one JSON object per line) that parses;
    every timestamp in it is ISO 8601 UTC with a Z."""
    schemas = {}
    for argv, shape in READS:
        capsys.readouterr()
        code = cli.main(["--config", str(fleet), *argv, *(() if " ".join(argv[:2]) in ALWAYS_JSON else ("--json",))])
        out = capsys.readouterr().out
        assert code == 0, (argv, out)
        docs = [json.loads(line) for line in out.splitlines()] if shape == "jsonl" else [json.loads(out)]
        assert docs, argv
        for doc in docs:
            for where, value in _timestamps(doc):
                assert ISO_UTC.match(value), (argv, where, value)
        schemas[" ".join(argv)] = docs[0]
    assert schemas["doctor"]["verdict"] == "ok" and schemas["doctor"]["ok"] is True
    assert schemas["alerts show 1"]["history"][0]["ts"].endswith("Z")
    assert schemas["knowledge show notes.md"]["text"] == "prefer RTX 4090\n"
    assert schemas["log rebuild --check"] == {"ok": True, "differences": []}
    assert schemas["config check"]["ok"] is True and "sim-key" not in json.dumps(schemas)


def schema_of(obj: Any, depth: int = 0) -> Any:
    """A readable shape of a JSON value: keys with their types, one level into lists (for the docs)."""
    if isinstance(obj, dict):
        return {k: schema_of(v, depth + 1) for k, v in obj.items()} if depth < 2 else "object"
    if isinstance(obj, list):
        return [schema_of(obj[0], depth + 1)] if obj else "array"
    return type(obj).__name__ if obj is not None else "null"


def write_schemas(cfg: Path, out: Path) -> None:  # pragma: no cover - run by hand for the docs
    """Print every read command's --json shape to ``out`` (used for the README's list)."""
    import contextlib
    import io

    lines = []
    for argv, shape in READS:
        buf = io.StringIO()
        flag = () if " ".join(argv[:2]) in ALWAYS_JSON else ("--json",)
        with contextlib.redirect_stdout(buf):
            cli.main(["--config", str(cfg), *argv, *flag])
        first = buf.getvalue().splitlines()[0] if shape == "jsonl" else buf.getvalue()
        lines.append(f"fleet-agent {' '.join(argv)} {' '.join(flag)} ({shape}): "
                     + json.dumps(schema_of(json.loads(first))))
    out.write_text("\n".join(lines) + "\n")
