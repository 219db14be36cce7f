"""Knowledge files: change detection into the log, bad files, and safe editing."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

from agent import feedback
from agent.errors import FleetAgentError, UsageError
from agent.events import render
from tests.feedback.test_feedback import make_app

# Runs on SQLite and on PostgreSQL (the app fixture opens the log on the test's backend).
pytestmark = pytest.mark.usefixtures("backend")


@pytest.fixture
def app(tmp_path: Path, monkeypatch, storage_url):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # refused edits keep their copy there
    a = make_app(tmp_path, storage_url=storage_url)
    a.settings.knowledge_path.mkdir()
    try:
        yield a
    finally:
        a.close()


def kdir(app) -> Path:
    return app.settings.knowledge_path


def open_keys(app) -> list[str]:
    return [a.dedup_key for a in app.log.store.open_alerts()]


def editor(tmp_path: Path, content: str) -> str:
    """An editor command that replaces the file it is given with ``content``."""
    src = tmp_path / f"content-{abs(hash(content))}.txt"
    src.write_text(content, encoding="utf-8")
    script = tmp_path / "ed.py"
    script.write_text("import shutil, sys\nshutil.copyfile(sys.argv[1], sys.argv[2])\n")
    return f"{sys.executable} {script} {src}"


def test_added_changed_removed_and_readded(app):
    """Adding, changing and deleting files each log one knowledge.changed with hash, diff and full text;
    an unchanged rescan logs nothing."""
    log, s = app.log, app.settings
    (kdir(app) / "hosts.md").write_text("# Hosts\n- avoid 77\n")
    (kdir(app) / "limits.yaml").write_text("max_dph: 0.5\n")
    (kdir(app) / "notes.txt").write_text("hello\n")
    added = feedback.scan_knowledge(log, s, 1)
    assert [(e.payload["name"], e.payload["change"]) for e in added] == [
        ("hosts.md", "added"), ("limits.yaml", "added"), ("notes.txt", "added")]
    assert [e.seq for e in added] == [1, 2, 3]
    assert render(added[0])["content"] == "[knowledge edit · hosts.md] added\n```text\n# Hosts\n- avoid 77\n\n```"
    assert feedback.scan_knowledge(log, s, 2) == []

    (kdir(app) / "hosts.md").write_text("# Hosts\n- avoid 77\n- avoid 91\n")
    (kdir(app) / "notes.txt").unlink()
    changed, removed = feedback.scan_knowledge(log, s, 3)
    p = changed.payload
    assert (p["change"], p["prev_hash"]) == ("changed", added[0].payload["hash"])
    assert "+- avoid 91" in p["diff"] and p["diff"].startswith("--- a/hosts.md\n+++ b/hosts.md")
    assert p["text"] == "# Hosts\n- avoid 77\n- avoid 91\n" and p["size"] == len(p["text"])
    assert render(changed)["content"].startswith("[knowledge edit · hosts.md] changed\n```diff\n--- a/hosts.md")
    assert (removed.payload["change"], removed.payload["hash"]) == ("removed", None)
    assert render(removed)["content"] == "[knowledge edit · notes.txt] removed: the file was deleted"
    assert changed.source == "operator" and changed.tick == 3

    assert feedback.read_knowledge(log, "hosts.md") == "# Hosts\n- avoid 77\n- avoid 91\n"
    assert feedback.read_knowledge(log, "notes.txt") is None
    (kdir(app) / "notes.txt").write_text("back\n")
    (again,) = feedback.scan_knowledge(log, s, 4)
    assert (again.payload["change"], again.payload["prev_hash"]) == ("added", None)
    assert [v["change"] for v in feedback.knowledge_history(log, "notes.txt")] == ["added", "removed", "added"]
    assert log.rebuild_check() == []


def test_only_direct_text_files_are_scanned(app):
    """Hidden files, other suffixes and subdirectories are ignored; a missing directory logs nothing."""
    (kdir(app) / ".hosts.md.swp").write_bytes(b"\0\0")
    (kdir(app) / "script.sh").write_text("rm -rf /\n")
    (kdir(app) / "sub").mkdir()
    (kdir(app) / "sub" / "deep.md").write_text("deep\n")
    (kdir(app) / "dir.md").mkdir()
    (kdir(app) / "a.yml").write_text("a: 1\n")
    assert [e.payload["name"] for e in feedback.scan_knowledge(app.log, app.settings, 1)] == ["a.yml"]
    assert open_keys(app) == []

    (kdir(app) / "a.yml").unlink()
    (kdir(app) / ".hosts.md.swp").unlink()
    (kdir(app) / "script.sh").unlink()
    (kdir(app) / "sub" / "deep.md").unlink()
    (kdir(app) / "sub").rmdir()
    (kdir(app) / "dir.md").rmdir()
    kdir(app).rmdir()
    assert feedback.scan_knowledge(app.log, app.settings, 2) == []


def test_bad_files_are_skipped_with_an_alert_and_the_scan_completes(app, tmp_path):
    """Binary, non-UTF-8 and oversized files and symlinks leading outside are skipped with a
    knowledge:bad alert; the good files in the same scan are logged; fixing a file resolves its alert."""
    outside = tmp_path / "secret.md"
    outside.write_text("not for the agent\n")
    (kdir(app) / "bin.md").write_bytes(b"PK\x03\x04\0\0binary")
    (kdir(app) / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    (kdir(app) / "huge.txt").write_bytes(b"x" * (feedback.MAX_KNOWLEDGE_BYTES + 1))
    (kdir(app) / "escape.md").symlink_to(outside)
    (kdir(app) / "inside.md").symlink_to(kdir(app) / "good.md")
    (kdir(app) / "good.md").write_text("fine\n")

    events = feedback.scan_knowledge(app.log, app.settings, 1)
    assert [e.payload["name"] for e in events] == ["good.md", "inside.md"]
    assert open_keys(app) == ["knowledge:bad:bin.md", "knowledge:bad:escape.md", "knowledge:bad:huge.txt",
                              "knowledge:bad:latin1.txt"]
    titles = {e.payload["dedup_key"]: e.payload["title"] for e in app.log.read(kinds=["alert.raised"])}
    assert "binary" in titles["knowledge:bad:bin.md"]
    assert "outside the knowledge directory" in titles["knowledge:bad:escape.md"]
    assert "larger than 1024 KiB" in titles["knowledge:bad:huge.txt"]
    assert "not UTF-8" in titles["knowledge:bad:latin1.txt"]
    assert "not for the agent" not in "".join(str(e.payload) for e in app.log.read())

    feedback.scan_knowledge(app.log, app.settings, 2)
    assert [a.count for a in app.log.store.alerts(all_=True) if a.dedup_key == "knowledge:bad:bin.md"] == [2]

    (kdir(app) / "bin.md").write_text("now text\n")
    (kdir(app) / "huge.txt").unlink()
    events = feedback.scan_knowledge(app.log, app.settings, 3)
    assert [(e.payload["name"], e.payload["change"]) for e in events] == [("bin.md", "added")]
    assert open_keys(app) == ["knowledge:bad:escape.md", "knowledge:bad:latin1.txt"]
    assert app.log.rebuild_check() == []


def test_a_known_file_turning_bad_keeps_its_last_good_version(app):
    """A file that becomes unreadable is not logged as removed; the agent keeps the last good text."""
    f = kdir(app) / "hosts.md"
    f.write_text("good\n")
    feedback.scan_knowledge(app.log, app.settings, 1)
    f.write_bytes(b"\xff\xfe\0bad")
    assert feedback.scan_knowledge(app.log, app.settings, 2) == []
    assert feedback.read_knowledge(app.log, "hosts.md") == "good\n"
    assert open_keys(app) == ["knowledge:bad:hosts.md"]


def test_file_larger_than_the_token_cap_is_logged_whole(app):
    """A file over knowledge_max_tokens is logged with its full text; the rendering truncates with a marker."""
    text = "".join(f"- host {i} is slow on tuesdays\n" for i in range(3000))
    (kdir(app) / "big.md").write_text(text)
    (e,) = feedback.scan_knowledge(app.log, app.settings, 1)
    assert e.payload["text"] == text
    assert feedback.read_knowledge(app.log, "big.md") == text
    assert "read_knowledge('big.md') has the full text" in render(e)["content"]


# ------------------------------------------------------------------ editing


def test_edit_refuses_yaml_that_does_not_parse(app, tmp_path):
    """Saving YAML that no longer parses is refused naming the line; the old file and log are untouched."""
    f = kdir(app) / "limits.yaml"
    f.write_text("max_dph: 0.5\n")
    feedback.scan_knowledge(app.log, app.settings, 1)
    n = app.log.count()
    with pytest.raises(FleetAgentError, match=r"not valid YAML at line 3") as err:
        feedback.knowledge_edit(app.settings, app.log, "limits.yaml", editor(tmp_path, "a: 1\nb: [1, 2\nc: 3\n"))
    assert "saved version is unchanged" in str(err.value)
    assert f.read_text() == "max_dph: 0.5\n"
    assert app.log.count() == n


def test_edit_writes_atomically_and_logs_the_change(app, tmp_path):
    """A valid edit replaces the file (keeping its mode), logs the change at once, and leaves no temp files."""
    f = kdir(app) / "limits.yaml"
    f.write_text("max_dph: 0.5\n")
    f.chmod(0o640)
    feedback.scan_knowledge(app.log, app.settings, 1)
    r = feedback.knowledge_edit(app.settings, app.log, "limits.yaml", editor(tmp_path, "max_dph: 0.6\n"))
    assert r.status == "changed" and f.read_text() == "max_dph: 0.6\n"
    assert f.stat().st_mode & 0o777 == 0o640
    (e,) = r.events
    assert e.payload["change"] == "changed" and "+max_dph: 0.6" in e.payload["diff"]
    assert sorted(p.name for p in kdir(app).iterdir()) == ["limits.yaml"]
    assert feedback.scan_knowledge(app.log, app.settings, 2) == []

    same = feedback.knowledge_edit(app.settings, app.log, "limits.yaml", editor(tmp_path, "max_dph: 0.6\n"))
    assert same.status == "unchanged" and same.events == []


def test_edit_creates_new_files_and_validates_names(app, tmp_path):
    """Editing a missing file creates it; names with '/', '..' or another suffix are refused."""
    r = feedback.knowledge_edit(app.settings, app.log, "runbook.md", editor(tmp_path, "# Runbook\n"))
    assert r.status == "created" and (kdir(app) / "runbook.md").read_text() == "# Runbook\n"
    assert r.events[0].payload["change"] == "added"
    for bad in ("../x.md", "a/b.md", "x.exe", "..md", ".hidden.md", ""):
        with pytest.raises(UsageError):
            feedback.knowledge_edit(app.settings, app.log, bad, editor(tmp_path, "x"))


def test_edit_refuses_binary_and_failed_editor(app, tmp_path):
    """A save with NUL bytes is refused; an editor exiting non-zero saves nothing."""
    (kdir(app) / "a.md").write_text("a\n")
    with pytest.raises(FleetAgentError, match="binary"):
        feedback.knowledge_edit(app.settings, app.log, "a.md", editor(tmp_path, "a\0b"))
    with pytest.raises(FleetAgentError, match="status 4"):
        feedback.knowledge_edit(app.settings, app.log, "a.md", f"{sys.executable} -c 'raise SystemExit(4)'")
    assert (kdir(app) / "a.md").read_text() == "a\n"


def test_the_stat_memo_is_rewritten_only_when_it_changed(tmp_path: Path) -> None:
    """Saving the scanner's stat memo again unchanged leaves the file as it was (no new file renamed over it),
    a changed memo replaces it, and what is read back is always the memo last saved."""
    from agent.feedback.knowledge import MEMO_NAME, load_memo, save_memo

    memo = {"a.md": ((1, 2, 3), "h1")}
    save_memo(tmp_path, memo)  # type: ignore[arg-type]
    first = os.stat(tmp_path / MEMO_NAME).st_ino
    save_memo(tmp_path, dict(memo))  # type: ignore[arg-type]
    assert os.stat(tmp_path / MEMO_NAME).st_ino == first
    changed = {**memo, "b.md": ((4, 5, 6), "h2")}
    save_memo(tmp_path, changed)  # type: ignore[arg-type]
    assert os.stat(tmp_path / MEMO_NAME).st_ino != first
    assert load_memo(tmp_path) == changed
