"""Hostile operator input: fuzzed config files, knowledge files and CLI arguments.

Each is either accepted or refused with one clear line (exit 2 for configuration and
usage errors); nothing is written half-way, and the log verifies after each.
"""

from __future__ import annotations

import contextlib
import io
import os
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from agent import cli
from agent.runtime.tick import run_tick
from agent.store.log import EventLog
from tests.reliability.harness import SIM_KEY, check_db, config_dict, db_path, make_app, running_sim

FUZZ = settings(max_examples=80, deadline=None, database=None, derandomize=True,
                suppress_health_check=list(HealthCheck), phases=[Phase.generate])


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """agent.cli.main in this process; (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = cli.main(argv)
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 2
    return rc, out.getvalue(), err.getvalue()


def one_clear_line(err: str) -> bool:
    return err.count("\n") == 1 and err.startswith("fleet-agent: ") and "Traceback" not in err


# ------------------------------------------------------------------ config files

SECTIONS = list(config_dict("http://127.0.0.1:1"))
FIELDS = sorted({k for v in config_dict("http://127.0.0.1:1").values() if isinstance(v, dict) for k in v}
                | {"interval", "cron", "budget_tokens", "allowed_gpus", "env", "api_key", "image"})
scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(),
                    st.text(max_size=20), st.sampled_from(["5m", "-1s", "1e309", "~", "0x1F", "2026-01-01"]))
values = st.recursive(scalars, lambda c: st.one_of(st.lists(c, max_size=4),
                                                   st.dictionaries(st.one_of(st.sampled_from(FIELDS), st.text(max_size=8)),
                                                                   c, max_size=4)), max_leaves=12)
documents = st.one_of(
    st.dictionaries(st.one_of(st.sampled_from(SECTIONS), st.text(max_size=10)), values, max_size=5),
    values,
)


@pytest.mark.slow
def test_fuzzed_config_files_are_accepted_or_refused_with_one_line_and_exit_2(tmp_path):
    """YAML documents of random shapes (known keys with wrong types, unknown keys, secrets
    inline, non-mappings) and raw garbage text: `config show` exits 0, or 2 with exactly one
    line naming the problem; never a traceback."""
    path = tmp_path / "config.yaml"
    seen = {0: 0, 2: 0}

    # Control characters have their own test below.
    printable = st.text(st.characters(blacklist_categories=("Cc", "Cs")) | st.sampled_from("\n\t"), max_size=60)

    @FUZZ
    @given(doc=documents, garbage=st.one_of(st.none(), printable.map(lambda t: t.encode()),
                                            st.binary(min_size=1, max_size=60).map(lambda b: b"\xff" + b)))
    def one(doc: Any, garbage: bytes | None) -> None:
        if garbage is not None:
            path.write_bytes(garbage)
        else:
            path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
        rc, out, err = run_cli(["--config", str(path), "config", "show"])
        assert rc in (0, 2), (rc, err)
        assert rc == 0 or one_clear_line(err), err
        seen[rc] += 1

    one()
    assert seen[2] > 0


def test_a_config_file_with_a_control_character_is_refused_in_one_line(tmp_path):
    """A config file holding a control character (here 0x1E) is refused with exit 2 and one
    line (a yaml.ReaderError once leaked its two-line message)."""
    path = tmp_path / "config.yaml"
    path.write_bytes(b"\x1e")
    rc, _out, err = run_cli(["--config", str(path), "config", "show"])
    assert rc == 2
    assert one_clear_line(err), err


# ------------------------------------------------------------------ knowledge files


def _hostile_knowledge(kdir: Path, outside: Path) -> None:
    (kdir / "binary.md").write_bytes(bytes(range(256)) * 40)
    (kdir / "huge.md").write_bytes(b"# huge\n" + b"all work and no play " * 150_000)
    (kdir / "latin1.txt").write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    (kdir / "bad.yaml").write_text("a: [1, 2\nb: {", encoding="utf-8")
    (kdir / "ok.md").write_text("# ok\n- prefer RTX 4090\n", encoding="utf-8")
    (kdir / "long-line.md").write_text("x" * 600_000, encoding="utf-8")
    outside.write_text("secret stuff outside\n", encoding="utf-8")
    os.symlink(outside, kdir / "link-out.md")
    os.symlink(kdir / "missing.md", kdir / "dangling.md")
    os.symlink(kdir / "loop.md", kdir / "loop.md")
    (kdir / "dir.md").mkdir()
    os.symlink(kdir / "ok.md", kdir / "link-in.md")


def test_binary_huge_undecodable_and_symlinked_knowledge_files_never_stop_a_tick(fast_root):
    """Binary, oversized, invalid UTF-8, invalid YAML, symlinks out of the directory, dangling
    and looping symlinks and a directory named like a file: two ticks complete, the usable
    files are ingested, the unusable ones raise alerts, and the log verifies."""
    with running_sim(seed=2) as (sim, server):
        app = make_app(fast_root, sim, server)
        try:
            _hostile_knowledge(app.settings.knowledge_path, fast_root / "outside.md")
            for _ in range(2):
                r = run_tick(app)
                assert r.ok, r.reason
                sim.advance(300.0)
            names = {e.payload["name"] for e in app.log.read(0, kinds=["knowledge.changed"])}
            assert {"ok.md", "link-in.md", "long-line.md"} <= names
            assert not names & {"binary.md", "latin1.txt", "link-out.md", "dangling.md", "loop.md"}
            bad = {a.dedup_key for a in app.log.store.open_alerts()}
            assert {"knowledge:bad:binary.md", "knowledge:bad:latin1.txt", "knowledge:bad:link-out.md"} <= bad
            assert not any("secret stuff outside" in (e.payload.get("text") or "")
                           for e in app.log.read(0, kinds=["knowledge.changed"]))
        finally:
            app.close()
        assert check_db(db_path(fast_root)) == []


def test_a_named_pipe_in_the_knowledge_directory_does_not_hang_the_tick(fast_root):
    """A FIFO named like a knowledge file (an operator's `mkfifo notes.md`, or a half-set-up
    log pipe) is refused, not read: the tick completes and the pipe never becomes knowledge.
    (A tick once blocked in open() on it forever.)"""
    with running_sim(seed=2) as (sim, server):
        app = make_app(fast_root, sim, server)
        fifo = app.settings.knowledge_path / "pipe.md"
        os.mkfifo(fifo)
        done: list[Any] = []
        t = threading.Thread(target=lambda: done.append(run_tick(app)), daemon=True)
        try:
            t.start()
            # A tick stuck in open() on the FIFO is released by a non-blocking writer opening and
            # closing it: it then reads an empty file, which would show up as knowledge below.
            while t.is_alive():
                with contextlib.suppress(OSError):
                    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
                t.join(0.01)
        finally:
            app.close()
        assert done and done[0].ok
        with EventLog(db_path(fast_root)) as log:
            assert [e for e in log.read(0, kinds=["knowledge.changed"]) if e.payload["name"] == "pipe.md"] == []


# ------------------------------------------------------------------ CLI arguments

cli_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=60)


@pytest.mark.slow
def test_fuzzed_say_ack_and_since_arguments_are_accepted_or_refused_without_half_writes(
        fast_root, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fuzzed strings to `say`, `alerts ack ID --note`, `thread show --since`: exit 0, or a
    non-zero exit with one clear line; a refused write appends nothing, an accepted one
    exactly the events it names; the chain verifies after each."""
    with running_sim(seed=2) as (sim, server):
        app = make_app(fast_root, sim, server)
        from agent import feedback

        for n in range(40):
            feedback.raise_alert(app.log, key=f"fuzz:{n}", severity="warning", title=f"alert {n}")
        app.close()
        cfg = str(fast_root / "config.yaml")
        monkeypatch.setenv("VAST_API_KEY", SIM_KEY)
        stats = {"ok": 0, "refused": 0}

        def count() -> int:
            from agent.store.log import EventLog

            with EventLog(db_path(fast_root)) as log:
                assert log.verify().ok
                return log.count()

        acked: set[int] = set()

        @FUZZ
        @given(verb=st.sampled_from(["say", "say-pin", "ack", "since"]), text=cli_text,
               alert=st.integers(-2, 60))
        def one(verb: str, text: str, alert: int) -> None:
            before = count()
            if verb.startswith("say"):
                argv = ["say", "--by", "fuzz", text] + (["--pin"] if verb == "say-pin" else [])
            elif verb == "ack":
                argv = ["alerts", "ack", str(alert), "--by", "fuzz", "--note", text]
            else:
                argv = ["thread", "show", "--limit", "3", "--since", text]
            rc, _out, err = run_cli(["--config", cfg, *argv])
            after = count()
            if rc == 0:
                stats["ok"] += 1
                # acking an alert already acked is a no-op (exit 0, nothing written)
                writes = 0 if verb == "since" or (verb == "ack" and alert in acked) else 1
                assert after - before == writes, (argv, after - before)
                if verb == "ack":
                    acked.add(alert)
            else:
                stats["refused"] += 1
                assert one_clear_line(err), (argv, err)
                assert after == before, argv

        one()
        assert stats["ok"] and stats["refused"]
        assert check_db(db_path(fast_root)) == []
