"""Knowledge edits are never silently lost: a save over a concurrent change is refused and the change
shown, each logged change says who made it, hard links out of the directory are refused like symlinks,
and doctor counts refused files as a failure."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

from agent import cli, feedback
from agent.cli.doctor import check_knowledge
from agent.errors import FleetAgentError
from agent.feedback.knowledge import EDITED_ON_DISK
from tests.feedback.test_feedback import make_app
from tests.feedback.test_knowledge import editor

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


def racing_editor(tmp_path: Path, target: Path, mine: str, theirs: str) -> str:
    """An editor that saves ``mine`` into its copy while someone else writes ``theirs`` to the real file."""
    script = tmp_path / "race.py"
    script.write_text("import pathlib, sys\n"
                      f"pathlib.Path({str(target)!r}).write_text({theirs!r})\n"
                      f"pathlib.Path(sys.argv[1]).write_text({mine!r})\n")
    return f"{sys.executable} {script}"


def test_a_save_over_a_concurrent_change_is_refused_and_shows_it(app, tmp_path):
    """When the file changed on disk while the editor was open, the save is refused: the other change
    stays on disk, the error shows its diff and where the refused edit is kept, and nothing is logged."""
    f = app.settings.knowledge_path / "hosts.md"
    f.write_text("avoid host 1\n")
    feedback.scan_knowledge(app.log, app.settings, 1)
    n = app.log.count()
    with pytest.raises(FleetAgentError) as err:
        feedback.knowledge_edit(app.settings, app.log, "hosts.md",
                                racing_editor(tmp_path, f, "avoid host 2\n", "avoid host 1\navoid host 9\n"),
                                by="alice")
    msg = str(err.value)
    assert "changed on disk while you edited it" in msg and "+avoid host 9" in msg
    kept = Path(msg.split("kept at ")[1].split(")")[0])
    assert kept.read_text() == "avoid host 2\n"
    assert f.read_text() == "avoid host 1\navoid host 9\n"
    assert app.log.count() == n


def test_a_concurrent_delete_is_refused_too(app, tmp_path):
    """A file deleted while it was being edited is not silently re-created."""
    f = app.settings.knowledge_path / "gone.md"
    f.write_text("x\n")
    script = tmp_path / "del.py"
    script.write_text(f"import os, pathlib, sys\nos.unlink({str(f)!r})\npathlib.Path(sys.argv[1]).write_text('y')\n")
    with pytest.raises(FleetAgentError, match="it was deleted"):
        feedback.knowledge_edit(app.settings, app.log, "gone.md", f"{sys.executable} {script}")
    assert not f.exists()


def test_changes_record_who_made_them(app, tmp_path):
    """knowledge.changed carries ``by``: the operator for 'knowledge edit' (--by, else the invoking
    user), 'edited on disk' for a change the scan found; the model's rendering is unchanged."""
    r = feedback.knowledge_edit(app.settings, app.log, "a.md", editor(tmp_path, "one\n"), by="alice")
    assert [e.payload["by"] for e in r.events] == ["alice"]
    (app.settings.knowledge_path / "a.md").write_text("two\n")
    (found,) = feedback.scan_knowledge(app.log, app.settings, 2)
    assert found.payload["by"] == EDITED_ON_DISK
    (app.settings.knowledge_path / "a.md").unlink()
    (removed,) = feedback.scan_knowledge(app.log, app.settings, 3)
    assert removed.payload["by"] == EDITED_ON_DISK
    from agent.events import render

    assert "alice" not in (render(r.events[0]) or {}).get("content", "")


def test_the_cli_edit_records_by_or_the_invoking_user(tmp_path, monkeypatch, capsys):
    """'fleet-agent knowledge edit --by bob' logs bob; without --by, the invoking user ($SUDO_USER here)."""
    assert cli.main(["init", str(tmp_path)]) == 0
    cfg = str(tmp_path / "config.yaml")
    assert cli.main(["--config", cfg, "knowledge", "edit", "x.md", "--by", "bob",
                     "--editor", editor(tmp_path, "hello\n")]) == 0
    monkeypatch.setenv("SUDO_USER", "carol")
    assert cli.main(["--config", cfg, "knowledge", "edit", "x.md", "--editor", editor(tmp_path, "hello again\n")]) == 0
    from agent.config import load
    from agent.runtime.app import App

    a = App(load(cfg))
    try:
        bys = [e.payload.get("by") for e in a.log.read(kinds=["knowledge.changed"]) if e.payload["name"] == "x.md"]
    finally:
        a.close()
    assert bys == ["bob", "carol"]


def test_a_hard_link_to_a_file_outside_is_refused_like_a_symlink(app, tmp_path):
    """A knowledge file hard-linked to a file outside the directory is skipped with an alert by the scan
    and refused by 'knowledge edit'; two names for one file inside the directory are fine."""
    outside = tmp_path / "secret.txt"
    outside.write_text("not for the model\n")
    kd = app.settings.knowledge_path
    os.link(outside, kd / "linked.md")
    (kd / "inside.md").write_text("fine\n")
    os.link(kd / "inside.md", kd / "alias.md")
    changes = feedback.scan_knowledge(app.log, app.settings, 1)
    assert sorted(e.payload["name"] for e in changes) == ["alias.md", "inside.md"]
    assert "knowledge:bad:linked.md" in [a.dedup_key for a in app.log.store.open_alerts()]
    assert "hard link" in feedback.knowledge_problems(kd)["linked.md"]
    with pytest.raises(FleetAgentError, match="hard link"):
        feedback.knowledge_edit(app.settings, app.log, "linked.md", editor(tmp_path, "x"))
    assert outside.read_text() == "not for the model\n"


def test_doctor_counts_refused_files_as_a_failure(app, tmp_path):
    """doctor's knowledge check fails while a file is refused (binary, symlink out, hard link out),
    naming it and the fix, and passes once it is removed."""
    kd = app.settings.knowledge_path
    (kd / "ok.md").write_text("fine\n")
    assert check_knowledge(app.settings).ok
    (kd / "bin.md").write_bytes(b"a\0b")
    os.symlink(tmp_path / "config.yaml", kd / "out.md")
    c = check_knowledge(app.settings)
    assert not c.ok and "2 files refused" in c.detail and "bin.md" in c.detail and "out.md" in c.detail
    (kd / "bin.md").unlink()
    (kd / "out.md").unlink()
    assert check_knowledge(app.settings).ok
