"""backup and restore through the real CLI: a verified copy while the log is being written, a restore that
refuses while the lock is held or the copy does not verify, and keeps the replaced database aside."""

from __future__ import annotations

import json
import threading

from agent import cli, config
from agent.runtime.lock import FleetLock
from agent.store.log import EventLog
from tests.cli.test_cli_core import site  # noqa: F401 - the fixture
from tests.tamper import Tamper


def _run(capsys, cfg, *argv):
    code = cli.main(["--config", str(cfg), *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_backup_while_writing_then_restore(site, tmp_path, capsys):  # noqa: F811
    """backup takes a consistent, verified copy (with its .head) while the daemon holds the lock and another
    writer appends; restore is refused while the lock is held, then puts the copy back (the log verifies,
    its head is the copy's) and keeps the replaced database and head aside."""
    cfg, settings = site
    lock = FleetLock(settings.data_path).acquire()  # as a running daemon holds it
    stop = threading.Event()

    def writer() -> None:
        with EventLog(settings.db_path, create=False) as lg:
            while not stop.is_set():
                lg.append("operator.note", {"text": "busy", "by": "bob"}, "operator")

    t = threading.Thread(target=writer)
    t.start()
    try:
        code, out, err = _run(capsys, cfg, "backup", str(tmp_path / "b.db"), "--json")
    finally:
        stop.set()
        t.join()
    assert code == 0, err
    r = json.loads(out)
    assert r["path"] == str(tmp_path / "b.db") and r["events"] == r["head_seq"] >= 7
    assert (tmp_path / "b.db.head").read_text() == f"{r['head_seq']} {r['head_hash']}\n"
    with EventLog(settings.db_path, create=False) as lg:
        assert lg.get(r["head_seq"]).hash == r["head_hash"]  # the copy is a prefix of the live log
        lg.append("operator.note", {"text": "after the backup", "by": "bob"}, "operator")
        live_head = lg.head()

    code, _, err = _run(capsys, cfg, "backup", str(tmp_path / "b.db"))
    assert code == 1 and "already exists" in err

    code, _, err = _run(capsys, cfg, "restore", str(tmp_path / "b.db"))
    assert code == 1 and "restore refused" in err and "stop it" in err
    lock.release()

    code, out, err = _run(capsys, cfg, "restore", str(tmp_path / "b.db"))
    assert code == 0, err
    assert f"{r['events']} events verified" in out and "kept the replaced file as" in out
    with EventLog(settings.db_path, create=False) as lg:
        assert lg.head() == (r["head_seq"], r["head_hash"])
    code, out, _ = _run(capsys, cfg, "log", "verify")
    assert code == 0 and out.startswith("ok:")
    aside = sorted(p.name for p in settings.db_path.parent.iterdir() if ".replaced-" in p.name)
    assert any(n.endswith(".head") for n in aside)
    kept = next(p for p in settings.db_path.parent.iterdir() if ".replaced-" in p.name and p.suffix == ".db")
    with EventLog(kept, readonly=True, create=False) as old:
        assert old.head() == live_head


def test_restore_refuses_a_copy_that_does_not_verify(site, tmp_path, capsys):  # noqa: F811
    """A tampered copy, or one without its head file, is refused before anything moves: the live database
    is unchanged and nothing is set aside."""
    cfg, settings = site
    code, _, err = _run(capsys, cfg, "backup", str(tmp_path))
    assert code == 0, err
    copy = next(tmp_path.glob("fleet-agent-*.db"))
    with Tamper(copy) as t:
        t.replace_in_payload(2, "RTX 4090", "RTX 9999")
    before = EventLog(settings.db_path, create=False)
    head = before.head()
    before.close()
    code, _, err = _run(capsys, cfg, "restore", str(copy))
    assert code == 1 and "does not verify (seq 2" in err and "nothing was changed" in err

    code, _, _ = _run(capsys, cfg, "backup", str(tmp_path / "second.db"))
    (tmp_path / "second.db.head").unlink()
    code, _, err = _run(capsys, cfg, "restore", str(tmp_path / "second.db"))
    assert code == 1 and "no head file" in err
    with EventLog(settings.db_path, create=False) as lg:
        assert lg.head() == head
    assert not [p for p in settings.db_path.parent.iterdir() if ".replaced-" in p.name]
    assert config.load(str(cfg)).db_path == settings.db_path
