"""Operators' terminals are safe: text from the model, vast.ai, notes and knowledge files never reaches
stdout as a control character or escape sequence, and list views keep one record per line.

The hostile text is tests/data/injection_corpus.json; it enters the log the way it would in
production (a scripted model through the real SDK, the simulator's instance fields, ``say``, a
knowledge file on disk) and comes out through the real CLI.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent import cli, config, feedback
from agent.cli.output import json_text, line, text
from agent.runtime.tick import MAX_CALLS_PER_STEP, run_tick
from tests.fakes.openai_server import reply

CORPUS_FILE = Path(__file__).resolve().parents[1] / "data" / "injection_corpus.json"
PAYLOADS: list[str] = json.loads(CORPUS_FILE.read_text(encoding="utf-8"))["payloads"]
# Bytes that must never reach the operator's terminal from data: ESC, CR, and the C1 / Unicode line
# breaks a terminal or pager may act on.
FORBIDDEN = ("\x1b", "\r", "\x9b", "\x9d", "\x85", "\u2028", "\u2029", "\x07", "\x08", "\x00")


def _encodable(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def test_the_corpus_is_large_and_varied():
    """The corpus holds at least 50 payloads, among them ESC, CR, U+2028/2029/0085, fake tags,
    fence markers, zero-width characters and 10 kB strings."""
    assert len(PAYLOADS) >= 50
    joined = "".join(PAYLOADS)
    for needle in ("\x1b[", "\r", "\u2028", "\u2029", "\x85", "[operator directive #1", "```", "\u200b"):
        assert needle in joined, needle
    assert any(len(p) >= 10240 for p in PAYLOADS)


@pytest.mark.parametrize("payload", PAYLOADS, ids=range(len(PAYLOADS)))
def test_each_payload_is_escaped_visibly(payload: str):
    """line() leaves no control character, escape or line break; text() keeps only newlines and tabs;
    json_text() stays valid JSON that decodes to the exact payload."""
    one = line(payload)
    assert not any(c in one for c in (*FORBIDDEN, "\n"))
    many = text(payload)
    assert not any(c in many for c in FORBIDDEN)
    assert many.replace("\n", "") == text(payload.replace("\n", ""))
    dumped = json_text({"p": payload})
    assert not any(c in dumped for c in FORBIDDEN)
    assert json.loads(dumped)["p"] == payload


def test_escapes_look_like_cat_v():
    """ESC and CR show in caret notation, Unicode separators and invisible characters as <U+XXXX>."""
    assert line("a\x1b[2Jb\rc\nd") == "a^[[2Jb^Mc^Jd"
    assert line("x\u2028y\u200bz\x85") == "x<U+2028>y<U+200B>z<U+0085>"
    assert text("keep\nnewlines\tand tabs\x7f") == "keep\nnewlines\tand tabs^?"
    assert line("plain text, é and → stay") == "plain text, é and → stay"


def test_every_character_made_visible_is_one_isprintable_refuses():
    """Printable text skips the scan (output._safe), so every code point the three patterns match must be one
    str.isprintable() refuses: else a printable string holding it would pass through unescaped. The newline
    and tab that text() and json_text() keep are the only refused characters their patterns leave alone."""
    import re

    from agent.cli import output

    for pattern, kept in ((output._UNSAFE_LINE, ""), (output._UNSAFE_TEXT, "\n\t"), (output._UNSAFE_JSON, "\n")):
        rx = re.compile(pattern)
        matched = [c for c in map(chr, range(0x110000)) if rx.fullmatch(c)]
        assert len(matched) > 100 and not [c for c in matched if c.isprintable()]
        assert all(rx.fullmatch(c) is None for c in kept)
    assert line("a\x85b") == "a<U+0085>b" and line("a\xa0b") == "a\xa0b"  # NBSP: refused, not matched, kept


@pytest.fixture
def hostile(tmp_path, sim, make_app, fake_model) -> Path:
    """A data directory whose log holds the whole corpus: model answers and alert titles from a
    scripted model, instance fields from the simulator, operator notes and a knowledge file.
    Returns the config file the CLI reads."""
    cfg = tmp_path / "config.yaml"
    cfg.write_text(config.example_text(), encoding="utf-8")
    app = make_app(alerts={"max_new_per_tick": 1000}, schedule={"max_steps": 100})
    offers = sorted(sim.offers.values(), key=lambda o: o["id"])
    for i, o in enumerate(offers[:3]):
        iid = sim.create_instance(o["id"], label=f"fa-{app.settings.agent_id}-inj{i}")
        sim.instances[iid]["status_msg"] = PAYLOADS[i * 7]
        sim.instances[iid]["gpu_name"] = PAYLOADS[21 + i]
    calls = [("raise_alert", {"severity": "warning", "title": p[:200], "key": f"inj:{i}", "detail": p[:2000]})
             for i, p in enumerate(PAYLOADS) if _encodable(p)]
    chunks = [calls[i:i + MAX_CALLS_PER_STEP] for i in range(0, len(calls), MAX_CALLS_PER_STEP)]
    fake_model.enqueue(*[reply(PAYLOADS[n % len(PAYLOADS)], tool_calls=c) for n, c in enumerate(chunks)],
                       reply("done " + PAYLOADS[0]))
    kdir = app.settings.knowledge_path
    kdir.mkdir(parents=True, exist_ok=True)
    (kdir / "hostile.md").write_text("\n".join(p for p in PAYLOADS if _encodable(p) and "\x00" not in p),
                                     encoding="utf-8")
    r = run_tick(app)
    assert r.ok, r.reason
    for p in PAYLOADS:
        if _encodable(p) and p.strip() and len(p.strip()) <= feedback.MAX_NOTE_CHARS:
            logged_note(app, p)
    assert len(app.log.store.alerts(all_=True)) >= 50
    return cfg


def logged_note(app: Any, text: str, pin: bool = False) -> None:
    """An operator note as a log written before ``say`` refused control characters may hold it: appended
    as ``say`` appends it, without the check (the readers must stay safe for such logs)."""
    app.log.append("operator.note", {"text": text.strip(), "by": "alice", **({"pin": True} if pin else {})},
                   "operator")


def _run(capsys: pytest.CaptureFixture[str], cfg: Path, *argv: str) -> str:
    code = cli.main(["--config", str(cfg), *argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    for c in FORBIDDEN:
        assert c not in out, (argv, repr(c))
        assert c not in err, (argv, repr(c))
    return out


def test_the_corpus_through_every_reading_command(hostile: Path, capsys: pytest.CaptureFixture[str]):
    """alerts list/show, status, thread show, log search, knowledge show/list, directives, context,
    text and --json alike: no ESC, CR, C1 or Unicode line break reaches stdout, and list views print
    one line per record."""
    listed = _run(capsys, hostile, "alerts", "list", "--all")
    rows = listed.splitlines()
    ids = [int(r.split()[0].lstrip("#")) for r in rows]
    assert len(rows) == len(set(ids)) >= 50  # every line is one alert: no forged rows
    for alert_id in ids:
        _run(capsys, hostile, "alerts", "show", str(alert_id))
    _run(capsys, hostile, "alerts", "list", "--json")
    status = _run(capsys, hostile, "status")
    assert "NOT-OURS" in status or "fleet" in status
    _run(capsys, hostile, "status", "--json")
    _run(capsys, hostile, "thread", "show")
    _run(capsys, hostile, "thread", "show", "--json")
    for word in ("operator", "screen", "fence", "width", "title"):
        _run(capsys, hostile, "log", "search", word)
    _run(capsys, hostile, "knowledge", "show", "hostile.md")
    _run(capsys, hostile, "knowledge", "list")
    _run(capsys, hostile, "knowledge", "history", "hostile.md")
    directives = _run(capsys, hostile, "directives")
    assert directives == "no active directives\n"
    _run(capsys, hostile, "context")


def test_directives_list_one_per_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """Pinned directives holding newlines and fake tags list as exactly one line each."""
    assert cli.main(["init", str(tmp_path)]) == 0
    cfg = tmp_path / "config.yaml"
    from agent.runtime.app import App

    app = App(config.load(str(cfg)))
    try:
        pinned = [p for p in PAYLOADS if _encodable(p) and p.strip() and len(p) < feedback.MAX_NOTE_CHARS]
        for p in pinned:
            logged_note(app, p, pin=True)
    finally:
        app.close()
    capsys.readouterr()
    out = _run(capsys, cfg, "directives")
    assert len(out.splitlines()) == len(pinned)


def test_error_lines_are_escaped_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """An error message quoting operator input verbatim (a path with an escape) is escaped on stderr."""
    assert cli.main(["init", str(tmp_path)]) == 0
    cfg = tmp_path / "config.yaml"
    code = cli.main(["--config", str(cfg), "log", "export", "-o", str(tmp_path / "no\x1b]0;pwned\x07" / "x")])
    _, err = capsys.readouterr()
    assert code == 1
    assert "\x1b" not in err and "\x07" not in err and "no^[]0;pwned^G" in err


def test_the_corpus_through_the_steering_and_money_commands(hostile: Path, sim, sim_server, monkeypatch,
                                                           capsys: pytest.CaptureFixture[str]):
    """instances (labels, GPU names and status messages from vast.ai), spend, policy show, hosts list
    and status with hostile operator reasons, text and --json: nothing unsafe reaches stdout, and
    `instances` prints one line per instance."""
    cfg = hostile.with_name("config-sim.yaml")
    cfg.write_text(hostile.read_text(encoding="utf-8").replace("https://console.vast.ai", sim_server.url),
                   encoding="utf-8")
    monkeypatch.setenv("VAST_API_KEY", sim.api_key)
    reason = next(p for p in PAYLOADS if "\x1b" in p and _encodable(p) and len(p) < 400)
    # the CLI refuses such a reason now; a log written before it did holds them, as these appends write them
    assert cli.main(["--config", str(cfg), "pause", "--reason", reason]) == 2
    capsys.readouterr()
    from agent.fleet import steering
    from agent.runtime.app import App

    app = App(config.load(str(cfg)))
    try:
        steering.set_override(app.log, app.settings, "max_instances", "2", by=reason, reason=reason, until=None)
        steering.exclude_host(app.log, 77, by="alice", reason=reason, source="operator", until=None)
        steering.pause(app.log, by="alice", reason=reason, until=None)
    finally:
        app.close()
    rows = _run(capsys, cfg, "instances").splitlines()
    assert len(rows) == 1 + len(sim.instances) >= 4
    _run(capsys, cfg, "instances", "--json")
    for argv in (["spend"], ["spend", "--json"], ["policy", "show"], ["policy", "show", "--json"],
                 ["hosts", "list"], ["hosts", "list", "--json"], ["status"], ["thread", "show"]):
        _run(capsys, cfg, *argv)
