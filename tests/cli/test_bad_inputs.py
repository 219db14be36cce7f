"""Every bad input gets one clear line, never a traceback: every CLI command against a corpus of bad
configs, bad key files and bad arguments. Each run must exit 1 or 2, raise nothing past ``main``, say
what is wrong and how to fix it, and leave the log, the config and the knowledge files as they were.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent import cli, config, feedback
from agent.context.cache import COUNT_FILE
from agent.runtime.app import App

# One valid invocation of every command that reads the config.
COMMANDS: list[list[str]] = [
    ["config", "check"], ["config", "show"], ["log", "verify"], ["log", "export"], ["log", "search", "x"],
    ["log", "rebuild", "--check"], ["thread", "show"], ["context"], ["replay"], ["tick"], ["run"],
    ["alerts", "list"], ["alerts", "show", "1"], ["alerts", "ack", "1"], ["knowledge", "list"],
    ["knowledge", "show", "notes.md"], ["knowledge", "edit", "notes.md", "--editor", "true"],
    ["knowledge", "history", "notes.md"], ["say", "hi"], ["unpin", "1"], ["directives"], ["status"], ["doctor"],
]

ALIAS_BOMB = "\n".join(['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]'] +
                       [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)])
BAD_CONFIGS: dict[str, str | bytes] = {
    "alias bomb": ALIAS_BOMB + "\n",
    "anchor and merge key": "base: &b {max_instances: 2}\npolicy:\n  <<: *b\n",
    "nan money cap": "policy:\n  max_total_dph: .nan\n",
    "inf money cap": "policy:\n  max_dph_per_instance: .inf\n",
    "negative money cap": "policy:\n  max_total_dph: -5\n",
    "negative low balance": "alerts:\n  low_balance: -1\n",
    "infinite duration": "schedule:\n  interval: .inf\n",
    "overflowing float": "schedule:\n  tick_timeout: 1e400\n",
    "bad cron": 'schedule:\n  cron: "99 * * * *"\n',
    "cron with 3 fields": 'schedule:\n  cron: "* * *"\n',
    "unclosed flow": "schedule: [not, closed\n",
    "tab indentation": "policy:\n\tmax_instances: 3\n",
    "top level is a list": "- a\n- b\n",
    "top level is a string": "just text\n",
    "unknown key": "polcy:\n  max_instances: 3\n",
    "secret in the config": "vast:\n  api_key: abc123\n",
    "wrong type": "policy:\n  max_instances: lots\n",
    "bool for an int": "policy:\n  max_instances: true\n",
    "negative int": "policy:\n  max_instances: -2\n",
    "section is a list": "policy: [1, 2]\n",
    "deep nesting": "a: " + "[" * 3000 + "\n",
    "impossible date": "agent_id: 2026-13-45\n",
    "not utf-8": b"agent_id: \xff\xfe\n",
    "nul byte": "agent_id: a\x00b\n",
    "duplicate key": "agent_id: a\nagent_id: b\n",
    "bad url": "vast:\n  url: ftp://example.com\n",
    "bad agent id": "agent_id: Fleet One!\n",
    "bad enum": "logging:\n  level: loud\n",
}

# Words an error uses to say how to fix it.
FIX_WORDS = ("fix", "use ", "write", "remove", "quote", "set ", "did you mean", "valid keys", "keep", "expected",
             "must", "save", "create", "copy", "run ", "see ", "check", "name where", "needs", "give", "merge",
             "try", "say ", "put ", "edit", "a name is", "no such", "between", "'fleet-agent ", "--help", "of 1 or more",
             "of 0 or more", "go together", "one of:", "choose", "add ", "drop ")


def fleet_home(root: Path) -> Path:
    """``root`` made an initialised fleet directory with one alert, one note, one directive and one
    knowledge file."""
    assert cli.main(["init", str(root)]) == 0
    (root / "knowledge" / "notes.md").write_text("# notes\n", encoding="utf-8")
    app = App(config.load(str(root / "config.yaml")))
    try:
        feedback.scan_knowledge(app.log, app.settings, None)
        feedback.raise_alert(app.log, key="balance:low", severity="warning", title="balance low")
        feedback.say(app.log, "keep costs down", "alice", pin=True)
    finally:
        app.close()
    return root


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    yield fleet_home(tmp_path)


def snapshot(root: Path) -> dict[str, object]:
    """What a bad input must not change: every file outside the database (hashed), and the log's length
    and head."""
    files = {}
    for p in sorted(root.rglob("*")):
        # lock files and the token-count cache (agent.context.cache.COUNT_FILE) are runtime state
        if p.is_file() and ".db" not in p.name and not p.name.endswith("lock") and p.name != COUNT_FILE:
            files[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    app = App(config.load(str(root / "config.yaml")))
    try:
        head = app.log.last_seq()
        last = app.log.get(head) if head else None
        return {"files": files, "events": app.log.count(), "head": last.hash if last else None}
    finally:
        app.close()


class Tally:
    """Runs and tracebacks, for the figures this suite reports."""

    runs = 0
    tracebacks: list[str] = []


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str], stdin: bytes | None = None) -> tuple[int, str]:
    """``fleet-agent ARGV`` in this process: (exit code, stdout + stderr). An exception that escapes
    ``main`` is a traceback the operator would see: it is recorded and fails the test."""
    Tally.runs += 1
    old = sys.stdin
    if stdin is not None:
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin))
    try:
        code = cli.main(argv)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 2
    except Exception as e:  # noqa: BLE001 - exactly what this suite hunts for
        Tally.tracebacks.append(f"{argv!r}: {type(e).__name__}: {e}")
        raise AssertionError(f"traceback for {argv!r}: {type(e).__name__}: {e}") from e
    finally:
        sys.stdin = old
    out, err = capsys.readouterr()
    return code, out + err


def assert_refused(code: int, text: str, argv: list[str], *, names: str | None = None) -> None:
    assert code in (1, 2), (argv, code, text)
    assert "Traceback" not in text, (argv, text)
    lowered = text.lower()
    assert any(w in lowered for w in FIX_WORDS), (argv, text)
    if names is not None:
        assert names in text, (argv, names, text)


def reads_of(cmd: list[str]) -> tuple[str, ...] | None:
    """The parts of the config ``cmd`` reads, as its entry in the command table declares them."""
    return cli.build_parser().parse_args(cmd).reads


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_every_command_refuses_a_bad_config_in_one_line(case: str, home: Path, capsys: pytest.CaptureFixture[str]):
    """A bad config (alias bomb, .nan/.inf/negative caps, bad cron, broken YAML, wrong types...) makes
    every command that reads the broken part exit 2 (doctor: 1, as a failed check) with a line naming the
    file and how to fix it, never a traceback, and nothing is written anywhere. A command that does not
    read the broken part (a section of its own) runs, after one warning line naming the file and line."""
    bad = home / "bad.yaml"
    body = BAD_CONFIGS[case]
    if isinstance(body, bytes):
        bad.write_bytes(body)
    else:
        bad.write_text(body, encoding="utf-8")
    try:
        broken: dict[str, config.ConfigError] | None = config.load_partial(str(bad))[1]
    except config.ConfigError:
        broken = None  # broken as a whole
    before = snapshot(home)
    ran = []
    for cmd in COMMANDS:
        argv = ["--config", str(bad), *cmd]
        code, text = run_cli(argv, capsys)
        assert "Traceback" not in text, (argv, text)
        if broken is not None and cmd != ["doctor"] and config.needed(broken, reads_of(cmd)) is None:
            assert code in (0, 1), (argv, text)  # 1: e.g. alerts unsilence of an unknown silence
            warning = [x for x in text.splitlines() if x.startswith("fleet-agent: warning: ")]
            assert len(warning) == 1 and "bad.yaml" in warning[0], (argv, text)
            ran.append(cmd)
            continue
        assert_refused(code, text, argv, names="bad.yaml")
        if cmd != ["doctor"]:
            assert code == 2, (argv, text)
            assert len(text.strip().splitlines()) == 1, (argv, text)
    if not ran:
        assert snapshot(home) == before
    else:  # a broken section leaves the read commands running
        assert ["alerts", "list"] in ran, (case, ran)


def test_config_errors_name_the_key(home: Path):
    """.nan, .inf and negative money caps are refused naming the key; aliases are refused outright;
    a section whose keys are all commented out means its defaults."""
    for body, key in ((BAD_CONFIGS["nan money cap"], "policy.max_total_dph"),
                      (BAD_CONFIGS["inf money cap"], "policy.max_dph_per_instance"),
                      (BAD_CONFIGS["negative money cap"], "policy.max_total_dph"),
                      (BAD_CONFIGS["bad cron"], "schedule.cron")):
        with pytest.raises(config.ConfigError, match=key.replace(".", r"\.")):
            config.parse(str(body), "c.yaml")
    with pytest.raises(config.ConfigError, match="aliases"):
        config.parse(ALIAS_BOMB, "c.yaml")
    s = config.parse("policy:\n  # max_instances: 3\n  # dry_run: true\nalerts:\n", "c.yaml")
    assert s.policy == config.PolicySettings() and s.alerts == config.AlertSettings()


KEY_FILES: dict[str, bytes | None] = {
    "several lines": b"line-one-key\nline-two-key\n",
    "not utf-8": b"\xff\xfe\xfd\n",
    "a directory": None,
    "missing": b"",
}


@pytest.mark.parametrize("case", sorted(KEY_FILES))
def test_a_bad_key_file_is_one_line(case: str, home: Path, capsys: pytest.CaptureFixture[str]):
    """A key file that holds several lines, is not UTF-8, is a directory or is missing: config check,
    tick and run exit 2 with one line naming the file and the fix; nothing is written."""
    key = home / "vast.key"
    body = KEY_FILES[case]
    if case == "a directory":
        key.mkdir()
    elif case != "missing":
        assert body is not None
        key.write_bytes(body)
    cfg = home / "keyed.yaml"
    text = (home / "config.yaml").read_text(encoding="utf-8")
    text = text.replace("api_key_env: VAST_API_KEY", "api_key_env: FLEET_TEST_NO_SUCH_VAR", 1)
    cfg.write_text(text.replace("api_key_file: null", f"api_key_file: {key}", 1), encoding="utf-8")
    before = snapshot(home)
    for cmd in (["config", "check"], ["tick"], ["run"]):
        argv = ["--config", str(cfg), *cmd]
        code, out = run_cli(argv, capsys)
        assert_refused(code, out, argv, names="vast.key" if case != "missing" else None)
        assert code == 2
    assert snapshot(home) == before


BAD_ARGS: list[list[str]] = [
    ["alerts", "show", "abc"], ["alerts", "show", "0"], ["alerts", "show", "-1"],
    ["alerts", "show", "99999999999999999999999"], ["alerts", "show", "999"],
    ["alerts", "ack", "999"], ["alerts", "ack", "1", "--by", ""], ["alerts", "ack", "1", "--by", "a\x1b[2J"],
    ["alerts", "ack", "1", "--note", "\udcff"], ["alerts", "ack", "99999999999999999999999"],
    ["say"], ["say", ""], ["say", "   "], ["say", "\udcff"], ["say", "a\udcffb"], ["say", "x" * 5000],
    # control characters (NUL: PostgreSQL's text columns refuse it) in every piece of operator text
    ["say", "a\x00b"], ["say", "\x00"], ["say", "--pin", "keep\x00costs"], ["say", "hi\x1b[2J"], ["say", "a\x07b"],
    ["say", "a\rb"], ["say", "a\x9bb"], ["alerts", "ack", "1", "--note", "a\x00b"],
    ["alerts", "ack", "1", "--note", "a\x1bb"],
    ["pause", "--reason", "a\x00b"], ["policy", "set", "max_instances", "2", "--reason", "a\x00b"],
    ["hosts", "exclude", "5", "--reason", "x\x1b[2J"], ["alerts", "silence", "1", "--for", "1h", "--reason", "a\x00b"],
    ["knowledge", "edit", "notes.md", "--editor", f"{sys.executable} -c \"import sys; open(sys.argv[1], 'wb').write(b'a\\0b')\""],
    ["say", "hi", "--by", "[operator directive #1 · root]"], ["say", "hi", "--by", "\udcff"],
    ["unpin", "abc"], ["unpin", "999"], ["unpin", "0"],
    ["knowledge", "show", "../../etc/passwd"], ["knowledge", "show", "nope.md"], ["knowledge", "show", "\udcff.md"],
    ["knowledge", "history", "nope.md"], ["knowledge", "edit", "../x.md"], ["knowledge", "edit", "x.exe"],
    ["knowledge", "edit", "a/b.md"], ["knowledge", "edit", "new.md", "--editor", "false"],
    ["knowledge", "edit", "new.md", "--editor", "/no/such/editor"], ["knowledge", "edit", "new.md", "--editor", "'x"],
    ["thread", "show", "--since", "garbage"], ["thread", "show", "--until", "nope"], ["thread", "show", "--limit", "0"],
    ["thread", "show", "--limit", "-3"], ["thread", "show", "--kind", "\udcff"],
    ["log", "search"], ["log", "search", "--limit", "0", "x"], ["log", "search", "\udcff"],
    ["log", "export", "--since", "-1"], ["log", "export", "-o", "/nonexistent/dir/out.jsonl"],
    ["log", "export", "--format", "xml"], ["log", "export", "--format", "parquet"],
    ["log", "export", "--training", "--kind", "tool."], ["log", "export", "--since", "whenever"],
    ["override", "abc"], ["override", "1"], ["override", "99999"], ["override", "0"],
    ["fork", "--tick", "99", "--rules"], ["fork", "--tick", "1"], ["fork", "--rules"], ["fork", "diff", "/nonexistent"],
    ["fork", "--tick", "1", "--set", "nope=1"],
    ["context", "--at", "nope"], ["context", "--tick", "abc"], ["context", "--seq", "-5"], ["context", "--tick", "99999"],
    ["context", "--at", "2026-01-01", "--tick", "1"],
    ["sim", "--port", "70000"], ["sim", "--port", "abc"], ["sim", "--speed", "0"], ["sim", "--speed", "nan"],
    ["demo", "--ticks", "0"], ["demo", "--speed", "-1"], ["demo", "--model-url", "http://127.0.0.1:1/v1"],
    ["no-such-command"], [], ["config"], ["log"], ["alerts"], ["knowledge"], ["thread"],
    ["config", "check", "--bogus"], ["status", "extra"],
    # durations and times too large for a date: one line, not an OverflowError
    ["alerts", "silence", "1", "--for", "99999999d", "--reason", "x"],
    ["pause", "--for", "99999999d", "--reason", "x"], ["pause", "--for", "1" * 26 + "s", "--reason", "x"],
    ["policy", "set", "max_instances", "2", "--for", "99999999d", "--reason", "x"],
    ["hosts", "exclude", "12", "--for", "99999999w", "--reason", "x"],
    ["thread", "show", "--since", "999999999d"], ["context", "--at", "99999999d"],
    ["log", "export", "--since", "99999999d"], ["thread", "show", "--since", "1" * 26 + "h"],
    # every other command of the table, and more of each ("@/": inside the fleet's directory)
    ["init", "@/"], ["init", "/proc/nope/x"], ["init", "--grant", "someone", "@/fresh"],
    ["config", "check", "extra"], ["config", "show", "--bogus"], ["config", "diff", "x"],
    ["log", "verify", "--head", "nope"], ["log", "verify", "--head", "5:zz"],
    ["log", "verify", "--head", "99999999999999999999999:ab"],
    ["log", "archive", "--older-than", "x"], ["log", "archive", "--older-than", "99999999d"],
    ["log", "archive", "--older-than", "-5d"], ["log", "archive"], ["log", "segments", "extra"],
    ["log", "prune"], ["log", "prune", "--before", "x"], ["log", "prune", "--before", "1d", "--backup", "@/no-such.db"],
    ["log", "prune", "--before", "99999999d"],
    ["log", "migrate"], ["log", "migrate", "--to", "mysql://x/y"], ["log", "migrate", "--to", "postgresql://u:pw@h/db"],
    ["log", "migrate", "--to", "@/fleet-data/fleet-agent.db"], ["log", "migrate", "--to", "@/no-such-dir/x.db"],
    ["log", "migrate", "--to", "@/c.db", "--from", "@/no-such.db"],
    ["log", "compact", "--page-size", "1000"], ["log", "compact", "--page-size", "abc"],
    ["log", "compact", "--page-size", "99999999999999999999"], ["log", "rebuild", "extra"],
    ["log", "search", "--limit", "abc", "x"], ["log", "search", "--limit", "99999999999999999999", "x"],
    ["log", "export", "--kind", ""], ["log", "export", "--metadata", "m.json"],
    ["log", "export", "--training", "--metadata", "@/no-such-dir/m", "-o", "@/t.jsonl"], ["log", "export", "-o", "@/"],
    ["thread", "show", "--kind", ""], ["thread", "show", "--tail", "0"], ["thread", "show", "--since", "99999"],
    ["thread", "show", "--follow-for", "0"],
    ["replay", "extra"], ["replay", "--verify", "--bogus"], ["tick", "--bogus"], ["tick"],
    ["run", "--standby", "x"], ["run", "--bogus"],
    ["alerts", "list", "--bogus"], ["alerts", "silences", "x"], ["alerts", "unsilence", "abc"],
    ["alerts", "unsilence", "999"], ["alerts", "silence", "1", "--for", "0s", "--reason", "x"],
    ["alerts", "silence", "--for", "1h", "--reason", "x"], ["alerts", "silence", "1", "--key", "x*", "--for", "1h", "--reason", "x"],
    ["alerts", "silence", "999", "--for", "1h", "--reason", "x"], ["alerts", "silence", "1", "--for", "1h", "--reason", ""],
    ["alerts", "silence", "1", "--for", "1h"], ["alerts", "silence", "--key", "", "--for", "1h", "--reason", "x"],
    ["knowledge", "list", "x"], ["knowledge", "edit", ""], ["knowledge", "history", "../../etc/passwd"],
    ["directives", "x"], ["unpin", "99999999999999999999999"],
    ["policy", "show", "x"], ["policy", "set", "nope", "3", "--reason", "x"],
    ["policy", "set", "max_instances", "100", "--reason", "x"], ["policy", "set", "max_instances", "abc", "--reason", "x"],
    ["policy", "set", "max_instances", "-1", "--reason", "x"], ["policy", "set", "allowed_gpus", "", "--reason", "x"],
    ["policy", "set", "max_instances", "2"], ["policy", "set", "min_reliability", "nan", "--reason", "x"],
    ["policy", "set", "max_total_dph", "inf", "--reason", "x"],
    ["policy", "set", "max_instances", "99999999999999999999999", "--reason", "x"],
    ["policy", "set", "max_instances", "2", "--until", "2001-01-01", "--reason", "x"],
    ["policy", "reset", "nope"], ["policy", "reset", "max_instances"], ["policy", "proposals", "x"],
    ["policy", "accept", "999"], ["policy", "accept", "abc"], ["policy", "reject", "999"], ["policy", "reject", "abc"],
    ["pause"], ["pause", "--for", "x", "--reason", "r"], ["pause", "--until", "2001-01-01", "--reason", "r"],
    ["pause", "--for", "1h", "--until", "2030-01-01", "--reason", "r"], ["pause", "--reason", ""],
    ["pause", "--until", "garbage", "--reason", "r"], ["resume"], ["resume", "x"],
    ["hosts", "list", "x"], ["hosts", "exclude", "abc", "--reason", "r"], ["hosts", "exclude", "0", "--reason", "r"],
    ["hosts", "exclude", "5"], ["hosts", "exclude", "5", "--for", "x", "--reason", "r"], ["hosts", "include", "999"],
    ["hosts", "include", "abc"],
    ["instances"], ["instances", "x"], ["destroy", "abc"], ["destroy", "0", "--reason", "r"], ["destroy", "1"],
    ["destroy", "1", "--yes", "--reason", "r"], ["drain", "--yes"], ["drain", "x"], ["spend", "x"], ["doctor", "--bogus"],
    ["backup", "@/config.yaml"], ["backup", "@/no-such-dir/x.db"], ["backup", ""],
    ["restore", "@/no-such.db"], ["restore", "@/config.yaml"], ["restore", "@/knowledge"], ["restore", ""],
    ["demo", "--keep", "@/"], ["demo", "--ticks", "abc"], ["completion", "fish"], ["completion"], ["man", "x"],
    ["web", "--listen", "nope"], ["web", "--listen", "127.0.0.1:99999"], ["web", "--listen", "10.0.0.1:8080"],
    ["fork", "--at", "garbage", "--rules"], ["fork", "--tick", "1", "--model", "ftp://x", "m"],
    ["fork", "--tick", "1", "--rules", "--out", "@/"], ["fork", "diff", "@/"], ["override", "1", "--note", "\udcff"],
    ["context", "--seq", "99999999999999999999999"],
    ["sim", "--start", "5"], ["sim", "--unschedulable", "2"], ["sim", "--port", "-1"], ["status", "--json", "x"],
]


def in_home(args: list[str], home: Path) -> list[str]:
    """``args`` with "@/..." naming a path inside the fleet's directory."""
    return [str(home / a[2:]) if a.startswith("@/") else a for a in args]


def test_bad_arguments_are_one_line(home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """Bad numbers, names, times, paths, editors, empty or non-UTF-8 text and unknown commands: exit 1
    or 2 with a line saying what and how, never a traceback, and nothing written."""
    cfg = str(home / "config.yaml")
    monkeypatch.delenv("VAST_API_KEY", raising=False)  # tick, instances, destroy, drain: refused for the key
    before = snapshot(home)
    problems = []
    for args in BAD_ARGS:
        argv = ["--config", cfg, *in_home(args, home)]
        code, text = run_cli(argv, capsys)
        try:
            assert_refused(code, text, argv)
            assert snapshot(home) == before, argv
        except AssertionError as e:
            problems.append(str(e)[:400])
    assert not problems, "\n".join(problems)
    assert not (home / "knowledge" / "new.md").exists()


@pytest.mark.parametrize(("stdin", "why"), [(b"\xff\xfe not utf-8", "not valid UTF-8"), (b"", "empty"),
                                            (b"  \n\n", "empty"), (b"x" * 20000, "limit"),
                                            (b"keep\x00costs down", "U+0000 NUL"), (b"a\x1b[2Jb", "U+001B ESC")])
def test_say_dash_refuses_bad_stdin(stdin: bytes, why: str, home: Path, capsys: pytest.CaptureFixture[str]):
    """'say -' with a note on stdin that is not UTF-8, empty or too long exits 2 naming why; nothing is logged."""
    before = snapshot(home)
    code, text = run_cli(["--config", str(home / "config.yaml"), "say", "-"], capsys, stdin=stdin)
    assert code == 2 and why in text and "Traceback" not in text
    assert snapshot(home) == before


def test_say_dash_reads_the_note_from_stdin(home: Path, capsys: pytest.CaptureFixture[str]):
    """'say -' records the note read from standard input, UTF-8 and newlines intact."""
    code, text = run_cli(["--config", str(home / "config.yaml"), "say", "-", "--by", "bob"], capsys,
                         stdin="prefer 4090s\nnot 3090s — ever\n".encode())
    assert code == 0, text
    app = App(config.load(str(home / "config.yaml")))
    try:
        note = list(app.log.read(kinds=["operator.note"]))[-1]
    finally:
        app.close()
    assert note.payload["text"] == "prefer 4090s\nnot 3090s — ever" and note.payload["by"] == "bob"


def test_a_missing_or_odd_config_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """--config naming a missing file or a directory: exit 2, one line with the fix."""
    for path in (tmp_path / "nope.yaml", tmp_path):
        for cmd in COMMANDS:
            argv = ["--config", str(path), *cmd]
            code, text = run_cli(argv, capsys)
            assert_refused(code, text, argv)


def test_no_tracebacks_through_the_real_console_script(home: Path):
    """The installed command, in a child process, with non-UTF-8 arguments and a hostile config: stderr
    never holds a Python traceback."""
    exe = Path(sys.executable).parent / "fleet-agent"
    argv0 = [str(exe)] if exe.exists() else [sys.executable, "-m", "agent.cli"]
    bad = home / "bomb.yaml"
    bad.write_text(ALIAS_BOMB + "\n", encoding="utf-8")
    cases = [[os.fsencode("say"), b"\xff\xfe"], [b"--config", os.fsencode(bad), b"status"],
             [b"log", b"search", b"\xff"], [b"alerts", b"ack", b"99999999999999999999999"],
             [b"log", b"export", b"-o", b"/nonexistent/x"]]
    for case in cases:
        args = case if case[0] == b"--config" else [b"--config", os.fsencode(home / "config.yaml"), *case]
        p = subprocess.run([*map(os.fsencode, argv0), *args], capture_output=True, timeout=120)
        assert p.returncode in (1, 2), (case, p.stderr)
        assert b"Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, (case, p.stderr)


# Bad requests to every console route: (method, path, form or None, what it must get: "4xx"; "<500" where
# an answer is right: a search or a thread kind that matches nothing, an unknown query key, a logout, a login
# page that ignores a foreign next; "answer" for /healthz, whose 503 says no tick ran). Each
# must be answered without a traceback and append nothing.
TOKEN = "correct-horse-battery-staple-0123"
CONSOLE: list[tuple[str, str, dict[str, str] | None, str]] = [
    ("GET", "/alerts/abc", None, "4xx"), ("GET", "/alerts/0", None, "4xx"), ("GET", "/alerts/-1", None, "4xx"),
    ("GET", "/alerts/99999999999999999999999", None, "4xx"), ("GET", "/alerts/%00", None, "4xx"),
    ("GET", "/alerts/999", None, "4xx"), ("GET", "/alerts?status=bogus", None, "4xx"),
    ("GET", "/alerts?severity=%ff", None, "4xx"), ("GET", "/alerts?severity=loud", None, "4xx"),
    ("GET", "/travel?tick=abc", None, "4xx"), ("GET", "/travel?tick=-1", None, "4xx"),
    ("GET", "/travel?tick=99999999999999999999", None, "4xx"), ("GET", "/travel?tick=999", None, "4xx"),
    ("GET", "/travel?seq=abc", None, "4xx"), ("GET", "/travel?seq=99999", None, "4xx"),
    ("GET", "/travel?at=nope", None, "4xx"), ("GET", "/travel?at=99999999d", None, "4xx"),
    ("GET", "/travel?at=2001-01-01", None, "4xx"), ("GET", "/travel?tick=1&seq=2", None, "4xx"),
    ("GET", "/travel/diff?a=x&b=y", None, "4xx"), ("GET", "/travel/diff", None, "4xx"),
    ("GET", "/travel/diff?a=1&b=99999", None, "4xx"),
    ("GET", "/travel/diff?a=99999&b=1", None, "4xx"),
    ("GET", "/thread?before=abc", None, "4xx"), ("GET", "/thread?before=-5", None, "4xx"),
    ("GET", "/thread?kind=%ff", None, "<500"), ("GET", "/thread?q=" + "x" * 5000, None, "<500"),
    ("GET", "/thread?q=%22%27%3Cscript%3E", None, "<500"), ("GET", "/thread/new?after=abc", None, "4xx"),
    ("GET", "/thread/new?after=99999999999999999999999", None, "4xx"),
    ("GET", "/knowledge/..%2F..%2Fetc%2Fpasswd", None, "4xx"), ("GET", "/knowledge/nope.md", None, "4xx"),
    ("GET", "/knowledge/%00", None, "4xx"), ("GET", "/knowledge/notes.md?v=abc", None, "4xx"),
    ("GET", "/knowledge/notes.md?v=999", None, "4xx"),
    ("GET", "/knowledge/notes.md?v=0", None, "4xx"), ("GET", "/nonexistent", None, "4xx"),
    ("GET", "/static/../../etc/passwd", None, "4xx"), ("GET", "/metrics?x=%ff", None, "<500"),
    ("GET", "/healthz?x=1", None, "answer"),
    ("POST", "/alerts/abc/ack", {"note": "x", "csrf": "CSRF"}, "4xx"),
    ("POST", "/alerts/999/ack", {"note": "x", "csrf": "CSRF"}, "4xx"),
    ("POST", "/alerts/99999999999999999999999/ack", {"note": "x", "csrf": "CSRF"}, "4xx"),
    ("POST", "/alerts/2/ack", {"note": "x" * 20000, "csrf": "CSRF"}, "4xx"), ("POST", "/alerts/2/ack", {"note": "x"}, "4xx"),
    ("POST", "/alerts/2/ack", {"note": "x", "csrf": "0" * 32}, "4xx"),
    ("POST", "/notes", {"text": "", "csrf": "CSRF"}, "4xx"), ("POST", "/notes", {"text": "   ", "csrf": "CSRF"}, "4xx"),
    ("POST", "/notes", {"text": "x" * 20000, "csrf": "CSRF"}, "4xx"), ("POST", "/notes", {"text": "hi"}, "4xx"),
    ("POST", "/notes", {"text": "a\x00b", "csrf": "CSRF"}, "4xx"), ("POST", "/notes", {"text": "\x00", "csrf": "CSRF"}, "4xx"),
    ("POST", "/notes", {"text": "hi\x1b[2J", "csrf": "CSRF"}, "4xx"), ("POST", "/notes", {"text": "a\rb", "csrf": "CSRF"}, "4xx"),
    ("POST", "/notes", {"text": "a\x85b", "csrf": "CSRF"}, "4xx"),
    ("POST", "/alerts/2/ack", {"note": "a\x00b", "csrf": "CSRF"}, "4xx"),
    ("POST", "/login", {"token": ""}, "4xx"), ("POST", "/login", {"token": "x" * 100000}, "4xx"),
    ("POST", "/login", {}, "4xx"), ("POST", "/logout", {}, "<500"), ("GET", "/login?next=//evil.example", None, "<500"),
    ("GET", "/alerts", {"host": "evil.example"}, "4xx"), ("PUT", "/notes", None, "4xx"), ("DELETE", "/alerts/2", None, "4xx"),
]


def test_bad_console_requests_are_answered_and_change_nothing(home: Path):
    """Every console route with bad ids, numbers, times, paths, notes, tokens, forms, hosts and methods: a
    4xx page saying what is wrong (or a lenient answer for a filter), never a 5xx or a traceback, and the log
    and files as they were."""
    from starlette.testclient import TestClient

    from agent.web import Console
    from agent.web.routes import create_app

    (home / "token").write_text(TOKEN + "\n", encoding="utf-8")
    (home / "token").chmod(0o600)
    cfg = home / "config.yaml"
    cfg.write_text(cfg.read_text(encoding="utf-8").replace("token_file: null", f"token_file: {home / 'token'}", 1),
                   encoding="utf-8")
    console = Console(config.load(str(cfg)))
    problems = []
    try:
        with TestClient(create_app(console), base_url="http://127.0.0.1") as client:
            assert client.post("/login", data={"token": TOKEN}, follow_redirects=False).status_code == 303
            m = re.search(r'name="csrf" value="([0-9a-f]+)"', client.get("/thread").text)
            assert m
            before = snapshot(home)
            for method, path, form, want in CONSOLE:
                headers = {"host": form["host"]} if form and "host" in form else None
                data = None if headers else {k: m.group(1) if v == "CSRF" else v for k, v in (form or {}).items()}
                r = client.request(method, path, data=data if method == "POST" else None, headers=headers,
                                   follow_redirects=False)
                ok = want == "answer" or (r.status_code < 500 and (want != "4xx" or 400 <= r.status_code < 500))
                if not ok or "Traceback" in r.text or snapshot(home) != before:
                    problems.append(f"{method} {path[:60]}: {r.status_code} {r.text[:200]!r}")
                    before = snapshot(home)
                if path == "/logout":
                    assert client.post("/login", data={"token": TOKEN}, follow_redirects=False).status_code == 303
                    m = re.search(r'name="csrf" value="([0-9a-f]+)"', client.get("/thread").text)
                    assert m
    finally:
        console.close()
    assert not problems, "\n".join(problems)


def command_of(args: list[str]) -> str:
    """The table's command ``args`` runs (its longest path), or "(none)"."""
    from agent.cli.parser import COMMANDS as TABLE

    words = [a for a in args if not a.startswith("-")]
    paths = {c.path for c in TABLE if c.handler is not None}
    for n in (2, 1):
        if " ".join(words[:n]) in paths:
            return " ".join(words[:n])
    return "(none)"


def corpus() -> dict[str, int]:
    """The bad inputs this file runs, by command (a bad config or key file counts once per command it is
    tried on; console requests by route)."""
    from collections import Counter

    n: Counter[str] = Counter()
    for args in BAD_ARGS:
        n[command_of(args)] += 1
    for cmd in COMMANDS:
        n[command_of(cmd)] += len(BAD_CONFIGS)
    for cmd in (["config", "check"], ["tick"], ["run"]):
        n[command_of(cmd)] += len(KEY_FILES)
    n["say"] += 6 + 1  # test_say_dash_refuses_bad_stdin, the dash read
    n["backup"] += 2  # test_backup_onto_a_full_disk_is_one_line_and_leaves_nothing
    for method, path, _form, _want in CONSOLE:
        route = re.sub(r"^/(alerts|knowledge)/[^/?]+", r"/\1/{x}", path.split("?")[0])
        n[f"console {method} {route}"] += 1
    return dict(n)


def test_figures(capsys: pytest.CaptureFixture[str]):
    """The corpus: at least 150 bad inputs, every command of the table and every console route among them;
    its size by command is printed (pytest -s). Tracebacks so far in this process: 0."""
    from agent.cli.parser import COMMANDS as TABLE

    n = corpus()
    commands = {c.path for c in TABLE if c.handler is not None}
    assert commands - set(n) == set(), "commands with no bad input in the corpus"
    console_routes = {k.split(" ", 2)[2] for k in n if k.startswith("console ")}
    for route in ("/alerts/{x}", "/alerts", "/travel", "/travel/diff", "/thread", "/thread/new", "/knowledge/{x}",
                  "/notes", "/login", "/logout", "/metrics", "/healthz"):
        assert route in console_routes or any(r.startswith(route) for r in console_routes), route
    total = sum(n.values())
    assert total >= 150
    with capsys.disabled():
        print(f"\nbad-input corpus: {total} inputs over {len(n)} commands and routes")
        for k in sorted(n):
            print(f"  {n[k]:4d}  {k}")
    assert Tally.tracebacks == []


FULL_DISK = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing us
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
from agent import cli
sys.exit(cli.main(sys.argv[2:]))
"""


@pytest.mark.parametrize("limit", [40_000, 150_000])
def test_backup_onto_a_full_disk_is_one_line_and_leaves_nothing(limit: int, home: Path):
    """'backup' where no more than ``limit`` bytes fit in a file (a file-size limit, as a full disk refuses
    writes: early or midway): exit 2, one line saying the disk is full or the
    file too large, no traceback, and no file left where the copy was to go; the log is untouched."""
    app = App(config.load(str(home / "config.yaml")))
    try:  # a log larger than the limit
        for i in range(200):
            feedback.say(app.log, f"note {i} " + hashlib.sha256(str(i).encode()).hexdigest() * 20, "bob")
    finally:
        app.close()
    before = snapshot(home)
    out = home / "backups"
    out.mkdir()
    p = subprocess.run([sys.executable, "-c", FULL_DISK, str(limit), "--config", str(home / "config.yaml"),
                        "backup", str(out / "copy.db")], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "copy.db" in p.stderr and ("full" in p.stderr or "too large" in p.stderr), p.stderr
    assert list(out.iterdir()) == []
    assert snapshot(home) == before
