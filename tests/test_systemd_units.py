"""The systemd units: systemd-analyze accepts them and scores them as well hardened."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SYSTEMD_DIR = Path(__file__).resolve().parent.parent / "systemd"
UNITS = ("fleet-agent.service", "fleet-agent-tick.service", "fleet-agent-tick.timer")
SERVICES = ("fleet-agent.service", "fleet-agent-tick.service")
INSTALLED_BINARY = "/usr/local/bin/fleet-agent"
MAX_EXPOSURE = 2.0

ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(
    ANALYZE is None, reason="systemd-analyze is not installed (it ships with systemd)"
)


def _directives(text: str) -> dict[str, list[str]]:
    """Key -> values of every `Key=value` line, comments skipped."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";", "[")) or "=" not in line:
            continue
        key, value = line.split("=", 1)
        found.setdefault(key.strip(), []).append(value.strip())
    return found


def _stand_in_binary() -> str:
    """An executable that exists here, for verify's check that ExecStart's binary exists."""
    beside_python = Path(sys.executable).parent / "fleet-agent"
    return str(beside_python) if beside_python.exists() else sys.executable


def _copy_units(tmp_path: Path) -> Path:
    """The units copied into tmp_path; ExecStart re-pointed when the real binary is not installed."""
    target = tmp_path / "units"
    target.mkdir()
    for name in UNITS:
        text = (SYSTEMD_DIR / name).read_text()
        if not Path(INSTALLED_BINARY).exists():
            text = text.replace(f"={INSTALLED_BINARY} ", f"={_stand_in_binary()} ")
        (target / name).write_text(text)
    return target


def _analyze(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert ANALYZE is not None
    return subprocess.run([ANALYZE, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def _supports(option: str) -> bool:
    assert ANALYZE is not None
    return option in subprocess.run([ANALYZE, "--help"], capture_output=True, text=True).stdout


def test_daemon_unit_has_the_required_settings():
    """fleet-agent.service is Type=notify with reload, restart, watchdog, state, config, credentials, umask."""
    settings = _directives((SYSTEMD_DIR / "fleet-agent.service").read_text())
    assert settings["Type"] == ["notify"]
    assert settings["NotifyAccess"] == ["main"]
    assert settings["ExecStart"] == [f"{INSTALLED_BINARY} --config /etc/fleet-agent/config.yaml run"]
    assert settings["ExecReload"] == [f"{INSTALLED_BINARY} --config /etc/fleet-agent/config.yaml config check",
                                      "/bin/kill -HUP $MAINPID"]
    assert settings["Restart"] == ["on-failure"]
    assert settings["RestartPreventExitStatus"] == ["2"]
    assert settings["WatchdogSec"] == ["120"]
    assert settings["StateDirectory"] == ["fleet-agent"]
    assert settings["StateDirectoryMode"] == ["0700"]
    assert settings["ConfigurationDirectory"] == ["fleet-agent"]
    assert sorted(settings["LoadCredential"]) == [
        "model_api_key:/etc/fleet-agent/credentials/model_api_key",
        "vast_api_key:/etc/fleet-agent/credentials/vast_api_key",
    ]
    # A blank default for each: a missing key file does not fail the start (systemd.exec(5)).
    assert sorted(settings["SetCredential"]) == ["model_api_key:\\n", "vast_api_key:\\n"]
    assert settings["UMask"] == ["0077"]
    assert settings["CapabilityBoundingSet"] == [""]
    assert "IPAddressDeny" not in settings, "the daemon needs egress to vast.ai and the model endpoint"


def test_tick_mode_units():
    """The tick service is a oneshot running `tick` with the daemon's hardening; the timer runs it every 5 min."""
    daemon = _directives((SYSTEMD_DIR / "fleet-agent.service").read_text())
    tick = _directives((SYSTEMD_DIR / "fleet-agent-tick.service").read_text())
    assert tick["Type"] == ["oneshot"]
    assert tick["ExecStart"] == [f"{INSTALLED_BINARY} --config /etc/fleet-agent/config.yaml tick"]
    lifecycle = {"Type", "NotifyAccess", "ExecStart", "ExecReload", "Restart", "RestartSec", "WatchdogSec",
                 "RestartPreventExitStatus",
                 "TimeoutStartSec", "TimeoutStopSec", "Description", "Documentation", "WantedBy"}
    shared = {key: value for key, value in daemon.items() if key not in lifecycle}
    assert {key: tick.get(key) for key in shared} == shared
    timer = _directives((SYSTEMD_DIR / "fleet-agent-tick.timer").read_text())
    assert timer["OnBootSec"] == ["2min"]
    assert timer["OnUnitActiveSec"] == ["5min"]
    assert timer["Persistent"] == ["true"]
    assert timer["Unit"] == ["fleet-agent-tick.service"]


@needs_analyze
def test_systemd_analyze_verify_accepts_the_units(tmp_path):
    """`systemd-analyze verify` exits 0 and says nothing about any of our units."""
    units = _copy_units(tmp_path)
    args = ["verify"]
    if _supports("--man"):
        args.append("--man=no")
    result = _analyze(*args, *(str(units / name) for name in UNITS), cwd=units)
    output = (result.stdout + result.stderr).strip()
    assert result.returncode == 0, output
    complaints = [line for line in output.splitlines() if str(units) in line or "fleet-agent" in line]
    assert complaints == [], output


@needs_analyze
@pytest.mark.parametrize("name", SERVICES)
def test_security_exposure_is_low(tmp_path, name):
    """`systemd-analyze security --offline=yes` rates each service at an exposure of at most 2.0."""
    if not _supports("--offline"):
        pytest.skip("this systemd-analyze has no `security --offline` (needs systemd >= 250)")
    units = _copy_units(tmp_path)
    result = _analyze("security", "--offline=yes", "--no-pager", str(units / name), cwd=units)
    match = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", result.stdout)
    assert match, result.stdout + result.stderr
    score = float(match.group(1))
    print(f"{name}: exposure {score}")
    assert score <= MAX_EXPOSURE, result.stdout
