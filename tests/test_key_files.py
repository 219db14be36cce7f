"""Key files: one that spans several lines is refused, one readable by group or others or reached
through a symlink is used with a warning that says how to fix it; the key never appears."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from agent import config
from agent.errors import ConfigError

KEY = "vk-0123456789abcdef"


def settings(tmp_path: Path, key_file: Path) -> config.Settings:
    return config.parse(f"vast:\n  api_key_env: FLEET_TEST_UNSET\n  api_key_file: {key_file}\n",
                        str(tmp_path / "config.yaml"))


def test_a_private_key_file_loads_quietly(tmp_path: Path):
    """A 0600 regular file holding the key on one line: the key, no warning."""
    f = tmp_path / "vast.key"
    f.write_text(KEY + "\n")
    f.chmod(0o600)
    with capture_logs() as logs:
        assert settings(tmp_path, f).vast_api_key({}).reveal() == KEY
    assert logs == []


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644])
def test_a_key_file_others_can_read_is_warned_about(tmp_path: Path, mode: int):
    """Group- or world-readable: the key is used, with a warning naming the file and 'chmod 600'."""
    f = tmp_path / "vast.key"
    f.write_text(KEY + "\n")
    f.chmod(mode)
    with capture_logs() as logs:
        assert settings(tmp_path, f).vast_api_key({}).reveal() == KEY
    (w,) = [x for x in logs if x["event"] == "secret.file_readable_by_others"]
    assert w["log_level"] == "warning" and w["fix"] == f"chmod 600 {f}" and w["mode"] == f"{mode:o}"
    assert KEY not in repr(logs)


def test_a_symlinked_key_file_is_warned_about(tmp_path: Path):
    """A key file reached through a symlink: used, with a warning naming the link and its target."""
    real = tmp_path / "real.key"
    real.write_text(KEY)
    real.chmod(0o600)
    link = tmp_path / "vast.key"
    os.symlink(real, link)
    with capture_logs() as logs:
        assert settings(tmp_path, link).vast_api_key({}).reveal() == KEY
    (w,) = [x for x in logs if x["event"] == "secret.file_symlink"]
    assert w["target"] == str(real) and KEY not in repr(logs)


@pytest.mark.parametrize("body", [f"{KEY}\nsecond-line\n", f"# my key\n{KEY}\n", f"{KEY}\r\nmore"])
def test_a_key_file_with_several_lines_is_refused(tmp_path: Path, body: str):
    """Several lines (a pasted file, a comment line) are refused naming the file, never the key."""
    f = tmp_path / "vast.key"
    f.write_text(body)
    f.chmod(0o600)
    with pytest.raises(ConfigError, match="holds several lines") as err:
        settings(tmp_path, f).vast_api_key({})
    assert str(f) in str(err.value) and KEY not in str(err.value)
