"""Fixtures of the reliability suite (the machinery itself lives in harness.py).

    fast_root   a fresh directory for a data dir: on tmpfs when there is one (these tests
                commit thousands of events; fsync on a disk would dominate), else tmp_path
    zygote      one pre-imported process that forks ``fleet-agent`` children (module scope)
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability import harness
from tests.reliability.harness import Zygote


@pytest.fixture(autouse=True)
def _harness_storage(storage_url: str | None) -> Iterator[None]:
    """A module with ``pytestmark = pytest.mark.usefixtures("backend")`` runs the harness on SQLite and on
    PostgreSQL: the configs it writes name the test's database then."""
    harness.use_storage(storage_url)
    yield
    harness.use_storage(None)


@pytest.fixture
def fast_root(tmp_path: Path) -> Iterator[Path]:
    shm = Path("/dev/shm")
    if not (shm.is_dir() and shm.stat().st_mode & 0o002):
        yield tmp_path
        return
    root = Path(tempfile.mkdtemp(prefix="fa-rel-", dir=shm))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    z = Zygote()
    try:
        yield z
    finally:
        z.close()
