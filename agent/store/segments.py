"""Sealed segment files: the format, where they live, and reading them back.

A segment holds one calendar month of archived events as zstd-compressed JSON lines, one event per line,
every column of its row kept exactly (``payload`` is the stored JSON text itself, so the row hashes again
to the byte). Files live in ``<database>.segments/`` beside the database; a copy may live on object storage
(``s3://bucket/prefix``, through boto3) or in a directory (``file:///mnt/archive``). Every load checks the
file's sha256 against the segment's stub row before a line is read.

This module neither writes the database nor walks the chain: ``agent.store.archive`` moves events into
segments, ``agent.store.log`` reads and verifies through ``SegmentFiles``.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

from agent.errors import LogError, optional_import
from agent.store.segment_types import S3Credentials as S3Credentials
from agent.store.segment_types import Segment as Segment

# The columns of an event row, in the order log.py reads them.
COLUMNS = ("seq", "id", "ts", "kind", "version", "source", "tick", "payload", "tokens", "prev_hash", "hash")
ZSTD_LEVEL = 10
SUFFIX = ".jsonl.zst"



def encode(rows: Iterable[tuple[Any, ...]]) -> bytes:
    """JSON lines, one object per row with every column (keys sorted), UTF-8."""
    out = [json.dumps(dict(zip(COLUMNS, r, strict=True)), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False) for r in rows]
    return ("\n".join(out) + "\n").encode("utf-8") if out else b""


def decode(raw: bytes, name: str) -> list[tuple[Any, ...]]:
    """The rows of a segment's JSON lines, as tuples in ``COLUMNS`` order."""
    rows: list[tuple[Any, ...]] = []
    for n, line in enumerate(raw.split(b"\n"), 1):
        if not line:
            continue
        try:
            obj = json.loads(line)
            rows.append(tuple(obj[c] for c in COLUMNS))
        except (ValueError, KeyError, TypeError) as e:
            raise LogError(f"segment {name} line {n} is not an event row ({e}); restore the file from its "
                           "copy or a backup") from None
    return rows


def compress(raw: bytes) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=True).compress(raw)


def decompress(data: bytes, name: str) -> bytes:
    import zstandard

    try:
        return zstandard.ZstdDecompressor().decompress(data)
    except zstandard.ZstdError as e:
        raise LogError(f"segment {name} does not decompress ({e}); restore it from its copy or a backup") from None


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_durably(path: Path, data: bytes) -> None:
    """``data`` at ``path``: written to a temporary name, fsynced, renamed, the directory fsynced. A crash
    leaves the old state (no file, or the temporary one the next run replaces) or the whole new file."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


# ------------------------------------------------------------------ copies elsewhere


class Remote(Protocol):
    """Where segment copies live outside the data directory."""

    url: str

    def put(self, name: str, data: bytes) -> None: ...

    def get(self, name: str) -> bytes: ...

    def location(self, name: str) -> str: ...


class DirRemote:
    """Copies in a directory (``file:///path``): a mounted disk or network share."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.root = Path(urlparse(url).path)

    def put(self, name: str, data: bytes) -> None:
        write_durably(self.root / name, data)

    def get(self, name: str) -> bytes:
        try:
            return (self.root / name).read_bytes()
        except OSError as e:
            raise LogError(f"cannot read the segment copy {self.location(name)}: {e.strerror}") from None

    def location(self, name: str) -> str:
        return f"file://{self.root / name}"


class S3Remote:
    """Copies in an S3 bucket (AWS, MinIO or any S3-compatible store), under a key prefix."""

    def __init__(self, url: str, *, endpoint_url: str | None = None, region: str | None = None,
                 credentials: S3Credentials | None = None) -> None:
        optional_import("boto3", "s3", "storage.archive_url: s3://…")
        optional_import("botocore", "s3", "storage.archive_url: s3://…")
        import boto3
        from botocore.config import Config

        u = urlparse(url)
        self.url, self.bucket, self.prefix = url, u.netloc, u.path.strip("/")
        kw: dict[str, Any] = {"config": Config(retries={"max_attempts": 3}, connect_timeout=10, read_timeout=60)}
        if endpoint_url:
            kw["endpoint_url"] = endpoint_url
        if region:
            kw["region_name"] = region
        if credentials is not None:
            kw["aws_access_key_id"] = credentials.key_id.reveal()
            kw["aws_secret_access_key"] = credentials.secret.reveal()
        self._client = boto3.client("s3", **kw)

    def _key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def put(self, name: str, data: bytes) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self._client.put_object(Bucket=self.bucket, Key=self._key(name), Body=data,
                                    ChecksumAlgorithm="SHA256")
        except (BotoCoreError, ClientError) as e:
            raise LogError(f"cannot write the segment copy {self.location(name)}: {_s3_reason(e)}; check "
                           "storage.archive_url, the endpoint and the credentials") from None

    def get(self, name: str) -> bytes:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            body = self._client.get_object(Bucket=self.bucket, Key=self._key(name))["Body"]
            return bytes(body.read())
        except (BotoCoreError, ClientError) as e:
            raise LogError(f"cannot read the segment copy {self.location(name)}: {_s3_reason(e)}") from None

    def location(self, name: str) -> str:
        return f"s3://{self.bucket}/{self._key(name)}"


def _s3_reason(e: Exception) -> str:
    """What went wrong, without anything the client may have echoed from the request."""
    err = getattr(e, "response", {}).get("Error", {}) if hasattr(e, "response") else {}
    if err:
        return f"{err.get('Code', 'error')}: {err.get('Message', '')}".strip(": ")
    return type(e).__name__


def open_remote(url: str, *, endpoint_url: str | None = None, region: str | None = None,
                credentials: S3Credentials | None = None) -> Remote:
    """The copy store ``url`` names: ``s3://bucket[/prefix]`` or ``file:///directory``."""
    scheme = urlparse(url).scheme
    if scheme == "s3":
        return S3Remote(url, endpoint_url=endpoint_url, region=region, credentials=credentials)
    if scheme == "file":
        return DirRemote(url)
    raise LogError(f"storage.archive_url {url!r}: use s3://bucket/prefix or file:///directory")


# ------------------------------------------------------------------ reading


class SegmentFiles:
    """The segment files of one database: load (sha256-checked) and decode, with a small cache of the
    most recently read segments (a daemon asking for an old kind each tick decodes it once)."""

    CACHE = 2

    def __init__(self, db_path: Path) -> None:
        self.dir = db_path.with_name(db_path.name + ".segments")
        self.open_remote: Callable[[], Remote] | None = None  # set from storage.archive_url
        self._remote: Remote | None = None
        self._cache: OrderedDict[tuple[str, str], list[tuple[Any, ...]]] = OrderedDict()
        self._kinds: OrderedDict[tuple[str, str], dict[str, list[int]]] = OrderedDict()

    def path(self, seg: Segment) -> Path:
        return self.dir / seg.name

    def load(self, seg: Segment) -> bytes:
        """The compressed file, from here or from its copy elsewhere; LogError unless its sha256 matches."""
        p = self.path(seg)
        try:
            data = p.read_bytes()
        except FileNotFoundError:
            data = self._from_copy(seg, p)
        except OSError as e:
            raise LogError(f"cannot read the segment {p}: {e.strerror}") from None
        if sha256(data) != seg.sha256:
            raise LogError(f"segment {seg.name} (seq {seg.first_seq}..{seg.last_seq}): its sha256 differs from "
                           "the one sealed in the database: the file was changed; restore it from its copy or "
                           "a backup")
        return data

    def _from_copy(self, seg: Segment, p: Path) -> bytes:
        if seg.copy_url is None:
            raise LogError(f"segment {seg.name} (seq {seg.first_seq}..{seg.last_seq}) is missing at {p}; restore "
                           "it from a backup ('fleet-agent backup' copies segments beside the database copy)")
        if seg.copy_url.startswith("file://"):
            return DirRemote(seg.copy_url.rsplit("/", 1)[0]).get(seg.name)
        remote = self.remote()
        if remote is None or not seg.copy_url.startswith(remote.url.rstrip("/")):
            raise LogError(f"segment {seg.name} is not here; its copy is at {seg.copy_url}: set "
                           "storage.archive_url (and its credentials) to read it")
        return remote.get(seg.name)

    def remote(self) -> Remote | None:
        """The configured copy store, opened on first use (a command that never reads one never loads boto3)."""
        if self._remote is None and self.open_remote is not None:
            self._remote = self.open_remote()
        return self._remote

    def rows(self, seg: Segment, *, fresh: bool = False) -> list[tuple[Any, ...]]:
        """Every row of ``seg``, in seq order; ``fresh`` reads the file again (verification) instead of
        trusting what this process decoded before."""
        key = (seg.name, seg.sha256)
        got = None if fresh else self._cache.get(key)
        if got is None:
            got = decode(decompress(self.load(seg), seg.name), seg.name)
            self._cache[key] = got
            while len(self._cache) > self.CACHE:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        return got

    def positions(self, seg: Segment, kinds: Iterable[str], lo: int, hi: int) -> list[int]:
        """The row positions in [lo, hi) of ``seg`` holding one of ``kinds``, in order."""
        key = (seg.name, seg.sha256)
        index = self._kinds.get(key)
        if index is None:
            index = {}
            for i, r in enumerate(self.rows(seg)):
                index.setdefault(r[3], []).append(i)
            self._kinds[key] = index
            while len(self._kinds) > self.CACHE:
                self._kinds.popitem(last=False)
        else:
            self._kinds.move_to_end(key)
        parts = [p[bisect.bisect_left(p, lo):bisect.bisect_left(p, hi)] for k in kinds if (p := index.get(k))]
        return parts[0] if len(parts) == 1 else sorted(i for part in parts for i in part)
