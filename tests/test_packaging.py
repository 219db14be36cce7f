"""A non-editable install carries schema.sql, the prompts and config.example.yaml as real files."""

from __future__ import annotations

import importlib.util
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist", ".git", ".ruff_cache",
                               "venv", ".venv", ".hypothesis", ".pytest_cache", ".mypy_cache", "tests", "bench")

CHECK = r"""
import sys
from pathlib import Path
import agent, agent.store.db, agent.config
from agent.store.log import EventLog

assert Path(agent.__file__).resolve().is_relative_to(Path(sys.argv[1]).resolve()), agent.__file__
assert [n for n, _ in agent.store.db.migrations()], "schema.sql has no migrations"
assert agent.config.parse(agent.config.example_text()) == agent.config.Settings()
with EventLog(Path(sys.argv[2]) / "e.db") as log:
    log.append("operator.note", {"text": "from the wheel", "by": "ci"}, "operator")
    assert log.verify().ok
print("ok")
"""


def _can_build_without_isolation() -> bool:
    """setuptools builds wheels by itself from 70.1 on; before that it needs the 'wheel' package."""
    try:
        import setuptools
    except ImportError:
        return False
    major, minor = (int(x) for x in setuptools.__version__.split(".")[:2])
    return (major, minor) >= (70, 1) or importlib.util.find_spec("wheel") is not None


def _build_wheel(src: Path, out: Path) -> Path:
    """Build without isolation (offline) when this environment can; otherwise let pip make an isolated build
    environment (from the configured, possibly local, package index)."""
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out)]
    if _can_build_without_isolation():
        cmd.append("--no-build-isolation")
    r = subprocess.run(cmd + [str(src)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    wheels = list(out.glob("fleet_agent-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.mark.slow
def test_wheel_ships_data_files_and_works_without_the_repo(tmp_path):
    """The wheel holds agent/schema.sql, agent/config.example.yaml (and agent/prompts/*.md when the repo has
    prompts) as regular files equal to the top-level sources, and an install of it opens a log."""
    src = tmp_path / "src"
    shutil.copytree(REPO, src, symlinks=True, ignore=_SKIP)
    whl = _build_wheel(src, tmp_path / "dist")

    expected = {"agent/schema.sql": REPO / "schema.sql", "agent/config.example.yaml": REPO / "config.example.yaml"}
    for md in sorted((REPO / "prompts").glob("*.md")):
        expected[f"agent/prompts/{md.name}"] = md
    with zipfile.ZipFile(whl) as zf:
        infos = {i.filename: i for i in zf.infolist()}
        for name, source in expected.items():
            assert name in infos, f"{name} missing from the wheel: {sorted(infos)}"
            mode = infos[name].external_attr >> 16
            assert not stat.S_ISLNK(mode), f"{name} is a symlink in the wheel"
            assert zf.read(name) == source.read_bytes(), f"{name} differs from {source}"
        zf.extractall(tmp_path / "site")

    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(tmp_path / "site")
    r = subprocess.run([sys.executable, "-c", CHECK, str(tmp_path / "site"), str(work)], cwd=work, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"
