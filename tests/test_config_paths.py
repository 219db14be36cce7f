"""Settings.path resolves a setting against the config file's real directory: through a symlink, under a
relative config path (the working directory at the time of asking), with $VAR and ~ read at every call,
and a replaced copy resolves its own values.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from agent.config import load


def _settings(tmp_path: Path, name: str = "config.yaml") -> Path:
    cfg = tmp_path / name
    cfg.write_text("data_dir: ./data\nknowledge_dir: ./kn\n")
    return cfg


def test_paths_resolve_against_the_real_config_dir_and_repeat(tmp_path: Path) -> None:
    """data_path resolves through the config file's symlink, and asking again gives an equal Path."""
    real = tmp_path / "real"
    real.mkdir()
    _settings(real)
    (tmp_path / "link.yaml").symlink_to(real / "config.yaml")
    s = load(str(tmp_path / "link.yaml"))
    first = s.data_path
    assert first == real.resolve() / "data"
    assert s.data_path == first and s.knowledge_path == real.resolve() / "kn"


def test_a_relative_config_path_follows_the_working_directory(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """With a config named relative to the working directory, a change of directory changes the base
    (what resolving each time gave), even after the path was asked for once."""
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        _settings(tmp_path / d)
    monkeypatch.chdir(tmp_path / "a")
    s = load("config.yaml")
    assert s.data_path == (tmp_path / "a").resolve() / "data"
    monkeypatch.chdir(tmp_path / "b")
    assert s.data_path == (tmp_path / "b").resolve() / "data"


def test_env_and_home_paths_are_read_fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A setting naming $VAR or ~ is expanded at every call, as before."""
    s = load(str(_settings(tmp_path)))
    monkeypatch.setenv("FA_TEST_DIR", str(tmp_path / "one"))
    assert s.path("$FA_TEST_DIR/x") == tmp_path / "one" / "x"
    monkeypatch.setenv("FA_TEST_DIR", str(tmp_path / "two"))
    assert s.path("$FA_TEST_DIR/x") == tmp_path / "two" / "x"
    monkeypatch.setenv("HOME", str(tmp_path / "h1"))
    assert s.path("~/k") == tmp_path / "h1" / "k"
    monkeypatch.setenv("HOME", str(tmp_path / "h2"))
    assert s.path("~/k") == tmp_path / "h2" / "k"


def test_asking_for_paths_leaves_equality_repr_and_replace_alone(tmp_path: Path) -> None:
    """Settings that asked for paths equal and show as settings that did not; a replaced copy resolves
    its own data_dir."""
    cfg = _settings(tmp_path)
    a, b = load(str(cfg)), load(str(cfg))
    _ = a.data_path
    assert a == b and repr(a) == repr(b)
    c = dataclasses.replace(a, data_dir=os.path.join(str(tmp_path), "other"))
    assert c.data_path == tmp_path / "other" and a.data_path == tmp_path.resolve() / "data"
