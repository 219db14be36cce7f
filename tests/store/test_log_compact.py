"""`fleet-agent log compact` rewrites a database made with 4 KiB pages into the page size a new database gets,
every row as it was, and is refused while the daemon holds the lock or with a page size SQLite does not take."""

from __future__ import annotations

import json
import os

from agent import cli
from agent.runtime.lock import FleetLock
from agent.store.db import PAGE_SIZE, connect
from agent.store.log import EventLog
from tests.cli.test_cli_core import site  # noqa: F401 - the fixture


def _run(capsys, cfg, *argv):
    code = cli.main(["--config", str(cfg), *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _old_database(settings) -> tuple[int, str]:
    """Replace the site's database with one made with 4 KiB pages, as a release before 8 KiB ones; its head."""
    db = settings.db_path
    for p in db.parent.glob(db.name + "*"):
        p.unlink()
    connect(db, create=True, page_size=4096).close()
    with EventLog(db, create=False) as log:
        log.append_many([("operator.note", {"text": f"note {n}: zebra crossing at host {n}", "by": "alice"}, "operator",
                          None) for n in range(300)])
        assert log.store.page_size() == 4096
        return log.head()


def test_compact_converts_an_old_database_to_the_new_page_size(site, capsys):  # noqa: F811
    """A 4 KiB-page database becomes PAGE_SIZE pages; its events, chain and head are unchanged, search finds
    them, the file stays private (0600) and back in WAL mode, and the log appends as before."""
    cfg, settings = site
    head = _old_database(settings)
    code, out, err = _run(capsys, cfg, "log", "compact", "--json")
    assert code == 0, err
    r = json.loads(out)
    assert (r["page_size_before"], r["page_size"]) == (4096, PAGE_SIZE) and r["path"] == str(settings.db_path)
    assert os.stat(settings.db_path).st_mode & 0o777 == 0o600
    with EventLog(settings.db_path, create=False) as log:
        assert log.store.page_size() == PAGE_SIZE and log.head() == head and log.verify().ok
        assert [e.seq for e, _ in log.search("zebra", limit=2)] == [300, 299]
        log.append("operator.note", {"text": "after", "by": "bob"}, "operator")
        assert settings.db_path.with_name(settings.db_path.name + "-wal").exists()  # WAL mode again
    code, out, err = _run(capsys, cfg, "log", "compact", "--page-size", "16384")
    assert code == 0, err
    assert out.startswith(f"compacted {settings.db_path}: ") and f"pages of {PAGE_SIZE:,} -> 16,384 bytes" in out


def test_compact_is_refused_while_the_daemon_runs_or_with_a_bad_page_size(site, capsys):  # noqa: F811
    """With the lock held (a running daemon), or a page size that is not one SQLite takes, compact exits
    non-zero with one line saying what to do, and the database keeps its pages."""
    cfg, settings = site
    _old_database(settings)
    lock = FleetLock(settings.data_path).acquire()
    try:
        code, _, err = _run(capsys, cfg, "log", "compact")
    finally:
        lock.release()
    assert code == 1 and "log compact refused" in err and "stop the daemon" in err
    code, _, err = _run(capsys, cfg, "log", "compact", "--page-size", "5000")
    assert code == 2 and "--page-size 5000" in err and "8192" in err
    with EventLog(settings.db_path, create=False) as log:
        assert log.store.page_size() == 4096 and log.verify().ok
