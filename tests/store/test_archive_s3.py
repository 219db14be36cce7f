"""Segment copies on object storage: a real S3 client (boto3) against moto's S3 server on 127.0.0.1."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta

import boto3
import pytest
import structlog
from moto.server import ThreadedMotoServer

from agent import config
from agent.cli import main
from agent.errors import LogError
from agent.runtime.app import App
from agent.store import archive
from agent.store.log import EventLog
from tests.store.test_archive import DAY, Clock, build

KEY_ID, SECRET = "AKIAFLEETTEST0001", "s3-secret-never-printed-0123456789"


@pytest.fixture(scope="module")
def s3_url() -> Iterator[str]:
    """moto's S3 server on a free port of 127.0.0.1, with one bucket."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    url = f"http://127.0.0.1:{server._server.server_port}"
    boto3.client("s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id=KEY_ID,
                 aws_secret_access_key=SECRET).create_bucket(Bucket="fleet-archive")
    yield url
    server.stop()


def _config(tmp_path, s3_url: str, bucket: str = "fleet-archive") -> str:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"data_dir: ./data\nknowledge_dir: ./knowledge\nstorage:\n  archive_after: 90d\n"
                   f"  archive_url: s3://{bucket}/fleet-1\n  s3_endpoint_url: {s3_url}\n  s3_region: us-east-1\n"
                   f"  s3_access_key_id_env: TEST_S3_KEY_ID\n  s3_secret_access_key_file: ./s3_secret\n",
                   encoding="utf-8")
    (tmp_path / "s3_secret").write_text(SECRET + "\n", encoding="utf-8")
    (tmp_path / "s3_secret").chmod(0o600)
    (tmp_path / "knowledge").mkdir(exist_ok=True)
    return str(cfg)


@pytest.fixture
def site(tmp_path, s3_url, monkeypatch) -> tuple[str, Clock]:
    """A config naming the bucket (key id from the environment, secret from a file) and a five-month log."""
    monkeypatch.setenv("TEST_S3_KEY_ID", KEY_ID)
    cfg = _config(tmp_path, s3_url)
    clock = Clock()
    build(tmp_path / "data" / "fleet-agent.db", clock).close()
    return cfg, clock


def _app(cfg: str, clock: Clock) -> App:
    return App(config.load(cfg), clock=lambda: clock().timestamp())


def test_archive_copies_each_segment_to_s3_and_reads_it_back(site, s3_url):
    """With storage.archive_url every sealed segment is also written to the bucket under the prefix and
    read back before the move commits; the stub names the copy; the object is byte for byte the file."""
    cfg, clock = site
    app = _app(cfg, clock)
    try:
        r = archive.archive(app.log, older_than=90 * DAY, now=clock(), remote=app.archive_remote())
        assert [s.copy_url for s in r.sealed] == ["s3://fleet-archive/fleet-1/2026-01.jsonl.zst",
                                                  "s3://fleet-archive/fleet-1/2026-02.jsonl.zst"]
        s3 = boto3.client("s3", endpoint_url=s3_url, region_name="us-east-1", aws_access_key_id=KEY_ID,
                          aws_secret_access_key=SECRET)
        body = s3.get_object(Bucket="fleet-archive", Key="fleet-1/2026-01.jsonl.zst")["Body"].read()
        assert body == (app.log.segment_files.dir / "2026-01.jsonl.zst").read_bytes()
    finally:
        app.close()


def test_pruned_segments_are_read_and_verified_from_the_bucket(site, capsys):
    """`log prune --before … --yes` deletes the local files (their S3 copies read back first); then `log
    verify`, `thread show` and `log search` read the archived months from the bucket; a process without
    storage.archive_url gets one line naming the copy and the setting."""
    cfg, clock = site
    c = ["--config", cfg]
    app = _app(cfg, clock)
    try:
        archive.archive(app.log, older_than=90 * DAY, now=clock(), remote=app.archive_remote())
        before = list(app.log.read())
        seg_dir = app.log.segment_files.dir
    finally:
        app.close()
    assert main(c + ["log", "prune", "--before", "2026-03-01"]) == 0
    assert "nothing was deleted" in capsys.readouterr().out and len(list(seg_dir.iterdir())) == 2
    assert main(c + ["log", "prune", "--before", "2026-03-01", "--yes"]) == 0
    out = capsys.readouterr().out
    assert out.count("deleted ") == 2 and list(seg_dir.iterdir()) == []
    assert main(c + ["log", "verify"]) == 0 and capsys.readouterr().out.startswith("ok:")
    assert main(c + ["log", "search", "4412"]) == 0 and "#13 " in capsys.readouterr().out
    app = _app(cfg, clock)
    try:
        assert list(app.log.read()) == before
    finally:
        app.close()
    with EventLog(seg_dir.parent / "fleet-agent.db", create=False) as bare, \
            pytest.raises(LogError, match="s3://fleet-archive/fleet-1/2026-01.jsonl.zst: set storage.archive_url"):
        bare.get(3)


def test_a_bad_bucket_is_one_clear_line_without_the_secret(tmp_path, s3_url, monkeypatch, capsys):
    """Archiving to a bucket that does not exist fails with the object's URL and the store's reason, the
    secret appears in no output, no log line and no event, and nothing moves."""
    monkeypatch.setenv("TEST_S3_KEY_ID", KEY_ID)
    cfg = _config(tmp_path, s3_url, bucket="no-such-bucket")
    clock = Clock()
    build(tmp_path / "data" / "fleet-agent.db", clock).close()
    with structlog.testing.capture_logs() as logs:
        rc = main(["--config", cfg, "log", "archive"])
    cap = capsys.readouterr()
    assert rc != 0 and "s3://no-such-bucket/fleet-1/2026-01.jsonl.zst" in cap.err and "NoSuchBucket" in cap.err
    assert SECRET not in cap.err + cap.out + repr(logs)
    with EventLog(tmp_path / "data" / "fleet-agent.db", create=False) as lg:
        assert lg.store.segments() == [] and all(SECRET not in str(e.payload) for e in lg.read())
        assert lg.verify().ok


def test_storage_settings_are_checked_with_file_and_line(tmp_path):
    """A bad archive_url, a too-short archive_after, and half an S3 key pair are refused naming the key."""
    for text, frag in (("storage:\n  archive_url: ftp://x/y\n", "storage.archive_url"),
                       ("storage:\n  archive_after: 7d\n", "storage.archive_after: must be at least 32d"),
                       ("storage:\n  s3_endpoint_url: minio:9000\n", "storage.s3_endpoint_url")):
        with pytest.raises(config.ConfigError, match=frag) as e:
            config.parse(text, str(tmp_path / "c.yaml"))
        assert "c.yaml:2" in str(e.value)
    s = config.parse("storage:\n  archive_url: s3://bkt/p\n", str(tmp_path / "c.yaml"))
    with pytest.raises(config.ConfigError, match="storage.s3_secret_access_key: not found"):
        s.s3_credentials({"AWS_ACCESS_KEY_ID": KEY_ID})
    assert s.s3_credentials({}) is None
    assert timedelta(seconds=float(config.parse("storage:\n  archive_after: 90d\n").storage.archive_after or 0)).days == 90
