"""Storage tiers on real files: old months move into sealed zstd segments, reads and verify cross them,
the database refuses every DELETE but the archive move, and an interrupted archive leaves a sound log."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pysqlite3
import pytest

from agent.errors import LogError
from agent.store import archive
from agent.store.log import EventLog
from agent.store.segments import decode, decompress
from tests import tamper

START = datetime(2026, 1, 1, tzinfo=UTC)
DAY = 86400.0


class Clock:
    """The log's clock, moved by hand."""

    def __init__(self, t: datetime = START) -> None:
        self.t = t

    def __call__(self) -> datetime:
        return self.t


class Stepping:
    """A clock that moves ``step`` forward on every reading (one event per reading, in one transaction)."""

    def __init__(self, clock: Clock, step: timedelta) -> None:
        self.clock, self.step = clock, step

    def __call__(self) -> datetime:
        self.clock.t += self.step
        return self.clock.t


def build(path: Path, clock: Clock, *, notes: int = 300, step: timedelta = timedelta(hours=12),
          covered_to: int | None = None) -> EventLog:
    """A log of ``notes`` operator notes (and every 10th a tick.completed of tick n), ``step`` apart, then a
    summary covering up to ``covered_to`` (default: all but the last 10 events)."""
    log = EventLog(path, clock=Stepping(clock, step))
    log.append_many(("tick.completed", {"steps": i}, "system", i // 10) if i % 10 == 9 else
                    ("operator.note", {"text": f"note {i} about host 44{i}", "by": "alice"}, "operator", None)
                    for i in range(notes))
    log.clock = clock
    upto = log.last_seq() - 10 if covered_to is None else covered_to
    log.append("context.compacted", {"summary": "older turns", "covered_to": upto, "method": "fallback"}, "system")
    return log


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def log(tmp_path, clock):
    with build(tmp_path / "data" / "fleet-agent.db", clock) as lg:
        yield lg


def run_archive(log: EventLog, clock: Clock, days: float = 90, **kw):
    return archive.archive(log, older_than=days * DAY, now=clock(), **kw)


def test_whole_old_covered_months_move_and_every_read_gives_the_same_events(log, clock):
    """Archiving at 2026-05-31 with 90 days moves January and February (whole months, all older than
    2026-03-02 and covered by the summary) into one segment each; read() in every shape (all, ranges,
    kinds, tick, times, newest first with a limit), get(), count() and search() give exactly what they
    gave before, and the chain verifies end to end."""
    shapes = [dict(), dict(since=50, until_seq=70), dict(kinds=["tick.completed"]), dict(tick=3),
              dict(since_ts="2026-01-20T00:00:00.000000Z", until_ts="2026-03-05T00:00:00.000000Z"),
              dict(newest_first=True, limit=5), dict(kinds=["operator.note"], newest_first=True, limit=200),
              dict(since=100, limit=30)]
    before = [list(log.read(**s)) for s in shapes]
    one, hits, count = log.get(7), log.search("4412"), log.count()
    r = run_archive(log, clock)
    assert [s.name for s in r.sealed] == ["2026-01.jsonl.zst", "2026-02.jsonl.zst"]
    assert (r.sealed[0].first_seq, r.sealed[-1].last_seq) == (1, 117)
    assert r.sealed[1].first_seq == r.sealed[0].last_seq + 1
    assert log.store.hot_events_after(0) == count - 117  # the rows left the table
    assert [list(log.read(**s)) for s in shapes] == before
    assert log.get(7) == one and log.search("4412") == hits and log.count() == count
    v = log.verify()
    assert v.ok and v.checked == count, v


def test_a_segment_is_zstd_json_lines_holding_each_row_exactly(log, clock):
    """The file decompresses with plain zstd into one JSON object per event, every column kept, the payload
    as the stored text; its sha256 and bounds are in the stub; it is 0600 in <db>.segments/."""
    rows = [tuple(e.to_dict().values()) for e in log.read(0, until_seq=61)]
    seg = run_archive(log, clock).sealed[0]
    path = log.segment_files.dir / seg.name
    assert path.parent.name == "fleet-agent.db.segments" and oct(path.stat().st_mode & 0o777) == "0o600"
    data = path.read_bytes()
    lines = decompress(data, seg.name).decode().splitlines()
    first = json.loads(lines[0])
    assert len(lines) == seg.events == 61 and first["seq"] == 1 and isinstance(first["payload"], str)
    assert json.loads(first["payload"]) == log.get(1).payload
    assert seg.bytes == len(data) < seg.raw_bytes and len(rows) == 61
    assert decode(decompress(data, seg.name), seg.name)[60][10] == seg.last_hash == log.get(61).hash


def test_nothing_moves_that_no_summary_covers_or_that_is_too_young(tmp_path, clock):
    """A month is archived only whole: with the summary covering up to mid-January nothing moves; with
    archive_after longer than the log's age nothing moves; --dry-run names the months and changes nothing."""
    with build(tmp_path / "a.db", Clock(), covered_to=30) as lg:
        assert run_archive(lg, Clock(START + timedelta(days=400))).sealed == []
    with build(tmp_path / "b.db", clock) as lg:
        assert run_archive(lg, clock, days=365).plan.months == []
        r = run_archive(lg, clock, dry_run=True)
        assert [m.month for m in r.plan.months] == ["2026-01", "2026-02"] and r.sealed == []
        assert lg.store.segments() == [] and lg.store.hot_events_after(0) == lg.count()


def test_archiving_again_continues_where_the_last_one_stopped(log, clock):
    """A later archive seals the next months after the last segment; one already sealed is not sealed again."""
    run_archive(log, clock)
    assert run_archive(log, clock).sealed == []
    clock.t += timedelta(days=31)
    log.append("context.compacted", {"summary": "s", "covered_to": log.last_seq() - 1, "method": "fallback"}, "system")
    assert [s.month for s in run_archive(log, clock).sealed] == ["2026-03"]
    assert log.verify().ok and [e.seq for e in log.read()] == list(range(1, log.last_seq() + 1))


def test_verify_names_a_changed_missing_or_mismatched_segment(log, clock):
    """A flipped byte in a segment, a deleted segment file, and a row kept in the table that differs from
    its archived copy each fail verify with the seq and the segment's name; restoring the file heals it."""
    seg = run_archive(log, clock).sealed[0]
    path = log.segment_files.dir / seg.name
    good = path.read_bytes()
    path.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    r = log.verify()
    assert not r.ok and r.first_bad_seq == 1 and seg.name in r.reason and "sha256" in r.reason
    path.unlink()
    r = log.verify()
    assert not r.ok and "missing" in r.reason
    path.write_bytes(good)
    assert log.verify().ok


def test_a_kept_row_must_equal_its_archived_copy(tmp_path, clock):
    """Each knowledge file's newest text stays in the table (live queries read it by seq) while its segment
    holds it too: knowledge_text still answers after the archive, and editing the kept row fails verify."""
    db = tmp_path / "k.db"
    with EventLog(db, clock=clock) as lg:
        clock.t += timedelta(hours=1)
        lg.append("knowledge.changed", {"name": "hosts.md", "change": "added", "text": "avoid 4417",
                                        "hash": "a" * 64, "size": 10}, "system")
    with build(db, clock) as lg:
        k = lg.store.knowledge_latest()["hosts.md"]
        run_archive(lg, clock)
        assert lg.store.knowledge_text("hosts.md") == "avoid 4417" and lg.get(k.seq).payload["text"] == "avoid 4417"
        assert lg.verify().ok
    with tamper.Tamper(db) as t:
        t.replace_in_payload(k.seq, "4417", "4418")
    with EventLog(db, create=False) as lg:
        r = lg.verify()
        assert not r.ok and r.first_bad_seq == k.seq and "differs from its archived copy" in r.reason


def test_the_database_refuses_every_delete_but_the_archive_move(log, clock):
    """With segments in place: deleting a row no segment covers, the newest row, or any event at all in
    bulk is refused; a segment stub cannot be changed or deleted, one that does not continue the chain
    cannot be inserted, and a prune cannot be recorded without a verified copy."""
    run_archive(log, clock)
    db = log.path
    last = log.last_seq()
    for stmt in tamper.archive_rewrites(last):
        with pytest.raises(pysqlite3.dbapi2.IntegrityError):
            tamper.attempt(db, stmt)
    assert log.verify().ok and log.count() == last


def test_log_verify_after_a_row_deleted_behind_the_triggers_still_fails(log, clock):
    """Deleting a hot row with the triggers dropped is still found by verify (the chain breaks at it)."""
    run_archive(log, clock)
    with tamper.Tamper(log.path) as t:
        t.delete(200)
    r = log.verify()
    assert not r.ok and r.first_bad_seq == 200


def test_an_orphan_file_from_a_kill_before_the_commit_is_overwritten(log, clock):
    """A kill after the rename and before the transaction leaves a file no stub names and a temporary file:
    the log still verifies with every row in the table, and the next archive replaces both."""
    d = log.segment_files.dir
    d.mkdir()
    (d / "2026-01.jsonl.zst").write_bytes(b"half a segment")
    (d / "2026-01.jsonl.zst.999.tmp").write_bytes(b"half")
    assert log.verify().ok and log.store.segments() == []
    r = run_archive(log, clock)
    assert r.sealed[0].name == "2026-01.jsonl.zst" and not list(d.glob("*.tmp")) and log.verify().ok


_KILLED = textwrap.dedent("""
    import sys
    from datetime import datetime
    from agent.store import archive
    from agent.store.log import EventLog
    log = EventLog(sys.argv[1], create=False)
    print("ready", flush=True)
    sys.stdin.readline()
    archive.archive(log, older_than=90 * 86400, now=datetime.fromisoformat(sys.argv[2]))
    print("done", flush=True)
""")


@pytest.mark.slow
@pytest.mark.parametrize("delay_lines", [0, 1, 2, 3, 5, 8])
def test_a_kill_at_any_point_leaves_the_old_state_or_the_new_one(tmp_path, clock, delay_lines):
    """SIGKILL of an archiving process at different points (after it is told to go, once the parent has read
    a growing number of directory listings): afterwards the log verifies, every event reads back as before,
    and a new archive completes the move."""
    db = tmp_path / "fleet-agent.db"
    with build(db, clock, notes=3000, step=timedelta(minutes=72)) as lg:
        before = [e.hash for e in lg.read()]
    proc = subprocess.Popen([sys.executable, "-c", _KILLED, str(db), clock().isoformat()], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2])
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline().strip() == "ready"
    proc.stdin.write("go\n")
    proc.stdin.flush()
    seg_dir = db.with_name(db.name + ".segments")
    for _ in range(delay_lines * 200):
        if proc.poll() is not None:
            break
        seg_dir.exists() and list(seg_dir.iterdir())
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with EventLog(db, create=False, clock=clock) as lg:
        assert lg.verify().ok
        assert [e.hash for e in lg.read()] == before
        run_archive(lg, clock)
        assert lg.verify().ok and [e.hash for e in lg.read()] == before
        assert [s.month for s in lg.store.segments()] == ["2026-01", "2026-02"]


def test_prune_deletes_only_files_whose_copy_reads_back(log, clock, tmp_path):
    """Without a copy elsewhere prune refuses (nothing deleted); without --yes it only names the files;
    with a directory copy store the file is copied, read back, then deleted here, and reads and verify
    fetch the copy; a copy that no longer matches makes reads fail with the segment's name."""
    segs = run_archive(log, clock).sealed
    cut = "2026-02-01T00:00:00.000000Z"
    with pytest.raises(LogError, match="no copy elsewhere"):
        archive.prune(log, before_ts=cut, now=clock(), yes=True)
    assert archive.prune(log, before_ts=cut, now=clock()).dry_run
    assert (log.segment_files.dir / segs[0].name).exists()
    from agent.store.segments import open_remote

    store = tmp_path / "cold"
    remote = open_remote(f"file://{store}")
    r = archive.prune(log, before_ts=cut, now=clock(), remote=remote, yes=True)
    assert [s.name for s in r.pruned] == [segs[0].name]
    assert not (log.segment_files.dir / segs[0].name).exists() and (store / segs[0].name).exists()
    stub = log.store.segments()[0]
    assert stub.pruned_ts is not None and stub.copy_url == f"file://{store / segs[0].name}"
    with EventLog(log.path, create=False) as fresh:  # another process, no remote configured: the file:// copy
        assert fresh.verify().ok and fresh.get(3) == log.get(3)
    (store / segs[0].name).write_bytes(b"not it")
    with EventLog(log.path, create=False) as fresh, pytest.raises(LogError, match=segs[0].name):
        fresh.get(3)


def test_backup_carries_the_segments_and_restore_puts_them_back(log, clock, tmp_path):
    """`backup` copies the segment files beside the copy and verifies them with it; `restore` into a data
    directory without them puts them back, and the restored log verifies and reads every event."""
    from agent.store import backup

    run_archive(log, clock)
    events = list(log.read())
    r = backup.backup(log, tmp_path / "copy.db")
    assert r.events == len(events)
    assert sorted(p.name for p in (tmp_path / "copy.db.segments").iterdir()) == ["2026-01.jsonl.zst",
                                                                                  "2026-02.jsonl.zst"]
    target = tmp_path / "elsewhere" / "fleet-agent.db"
    target.parent.mkdir()
    backup.restore(tmp_path / "copy.db", target)
    with EventLog(target, create=False) as back:
        assert back.verify().ok and list(back.read()) == events


def test_the_daemon_archives_old_months_after_a_tick(tmp_path):
    """With storage.archive_after set, the daemon moves the old covered months into segments after its first
    tick (logging daemon.archived with the segment names), and the log verifies across them."""
    import threading

    from structlog.testing import capture_logs

    from agent import config
    from agent.service.daemon import run_daemon
    from agent.sim import SimServer, Simulator
    from tests.service.test_daemon import stand_in_tick, wait_for, write_config

    with SimServer(Simulator(seed=7)) as server:
        cfg = write_config(tmp_path, server.url)
        with cfg.open("a", encoding="utf-8") as f:
            f.write("storage:\n  archive_after: 90d\n")
        db = tmp_path / "data" / "fleet-agent.db"
        build(db, Clock()).close()  # January to May 2026, long before the daemon's now

        def stopper() -> None:
            with EventLog(db, create=False) as lg:
                wait_for(lambda: lg.store.segments(), "the daemon's archive")
            os.kill(os.getpid(), signal.SIGTERM)

        threading.Thread(target=stopper, daemon=True).start()
        with capture_logs() as logs:
            code = run_daemon(config.load(str(cfg)), config_path=str(cfg), tick_fn=stand_in_tick,
                              env={"VAST_API_KEY": "sim-key"})
    assert code == 0
    done = [x for x in logs if x["event"] == "daemon.archived"]
    assert done and done[0]["segments"][0] == "2026-01.jsonl.zst"
    with EventLog(db, create=False) as lg:
        assert lg.verify().ok and [s.name for s in lg.store.segments()] == done[0]["segments"]


def test_prune_counts_a_backup_copy_and_reads_then_come_from_it(log, clock, tmp_path):
    """`prune --backup PATH`: each segment goes only when the backup's copy has the sealed sha256; the stub
    then names that copy and reads and verify use it."""
    from agent.store import backup

    run_archive(log, clock)
    backup.backup(log, tmp_path / "copy.db")
    r = archive.prune(log, before_ts="2026-03-01T00:00:00.000000Z", now=clock(), backup=tmp_path / "copy.db", yes=True)
    assert [s.month for s in r.pruned] == ["2026-01", "2026-02"] and not list(log.segment_files.dir.iterdir())
    assert log.store.segments()[0].copy_url == f"file://{(tmp_path / 'copy.db.segments' / '2026-01.jsonl.zst').resolve()}"
    with EventLog(log.path, create=False) as fresh:
        assert fresh.verify().ok and fresh.get(5) == log.get(5)


def test_archive_without_a_setting_is_one_line_and_exit_2(tmp_path, capsys):
    """`log archive` with neither storage.archive_after nor --older-than says which to set (exit 2, nothing
    moved); `--older-than 90d` then archives."""
    from agent.cli import main

    (tmp_path / "knowledge").mkdir()
    cfg = tmp_path / "config.yaml"
    cfg.write_text("data_dir: ./data\nknowledge_dir: ./knowledge\n", encoding="utf-8")
    build(tmp_path / "data" / "fleet-agent.db", Clock()).close()
    assert main(["--config", str(cfg), "log", "archive"]) == 2
    err = capsys.readouterr().err
    assert "storage.archive_after is not set" in err and "--older-than 90d" in err and err.count("\n") == 1
    assert main(["--config", str(cfg), "log", "archive", "--older-than", "90d", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sealed"]
