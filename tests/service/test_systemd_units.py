"""The systemd units: systemd-analyze accepts them and scores them as well hardened."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent import config

SYSTEMD_DIR = Path(__file__).resolve().parents[2] / "systemd"
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
                 "TimeoutStartSec", "TimeoutStopSec", "Description", "Documentation", "WantedBy", "Environment"}
    shared = {key: value for key, value in daemon.items() if key not in lifecycle}
    assert {key: tick.get(key) for key in shared} == shared
    assert daemon["Environment"] == tick["Environment"] == ["PYTHONUNBUFFERED=1"]
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


# ------------------------------------------------------------------ the documented install, run


README = SYSTEMD_DIR / "README.md"
REPO = SYSTEMD_DIR.parent

# Commands that need root or a running systemd, shadowed on PATH: each records its arguments.
STUB = """#!/bin/sh
printf '%s' "$(basename "$0")" >> "$CALLS"
for a in "$@"; do printf ' %s' "$a" >> "$CALLS"; done
printf '\\n' >> "$CALLS"
"""
# python3 -m venv DIR makes DIR/bin/pip, whose `install` makes DIR/bin/fleet-agent.
PYTHON3_STUB = STUB + """[ "$1" = "-m" ] && [ "$2" = "venv" ] || exit 0
mkdir -p "$3/bin"
cat > "$3/bin/pip" <<PIP
#!/bin/sh
printf 'pip %s\\\\n' "\\$*" >> "\\$CALLS"
printf '#!/bin/sh\\\\nexit 0\\\\n' > "$3/bin/fleet-agent"
chmod 0755 "$3/bin/fleet-agent"
PIP
chmod 0755 "$3/bin/pip"
"""


def install_block() -> str:
    """The one ```sh block under '## Install' in systemd/README.md."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## Install", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, "systemd/README.md: '## Install' must hold exactly one ```sh block"
    return blocks[0]


def _run_install(tmp_path: Path) -> tuple[Path, list[str]]:
    root, stubs, calls = tmp_path / "root", tmp_path / "stubs", tmp_path / "calls.log"
    root.mkdir()
    stubs.mkdir()
    calls.write_text("")
    for name in ("useradd", "chown", "runuser", "systemctl"):
        (stubs / name).write_text(STUB)
        (stubs / name).chmod(0o755)
    (stubs / "python3").write_text(PYTHON3_STUB)
    (stubs / "python3").chmod(0o755)
    env = {"PATH": f"{stubs}:/usr/sbin:/usr/bin:/sbin:/bin", "ROOT": str(root), "CALLS": str(calls),
           "LC_ALL": "C"}
    result = subprocess.run(["sh", "-c", install_block()], cwd=REPO, env=env, input="test-vast-key\n",
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return root, calls.read_text().splitlines()


def test_the_documented_install_sequence_runs(tmp_path):
    """The Install block of systemd/README.md, run as written against a scratch ROOT: it creates the user,
    the directories with their modes and owners, the config pointing at them, the key file, the database
    (as the service user), installs the three units unchanged, and starts the daemon."""
    root, calls = _run_install(tmp_path)
    assert calls[0] == ("useradd --system --user-group --home-dir /var/lib/fleet-agent --no-create-home "
                        "--shell /usr/sbin/nologin fleet-agent")
    assert "pip install --quiet ." in calls
    assert (f"chown fleet-agent:fleet-agent {root}/etc/fleet-agent/knowledge {root}/var/lib/fleet-agent"
            in calls)
    assert ("runuser -u fleet-agent -- /usr/local/bin/fleet-agent --config /etc/fleet-agent/config.yaml init"
            in calls)
    assert calls[-2:] == ["systemctl daemon-reload", "systemctl enable --now fleet-agent.service"]

    modes = {"etc/fleet-agent": 0o755, "etc/fleet-agent/credentials": 0o700,
             "etc/fleet-agent/knowledge": 0o750, "var/lib/fleet-agent": 0o700,
             "etc/fleet-agent/credentials/vast_api_key": 0o600, "etc/fleet-agent/config.yaml": 0o644}
    assert {p: (root / p).stat().st_mode & 0o777 for p in modes} == modes
    assert (root / "etc/fleet-agent/credentials/vast_api_key").read_text() == "test-vast-key\n"
    settings = config.parse((root / "etc/fleet-agent/config.yaml").read_text(), "/etc/fleet-agent/config.yaml")
    assert str(settings.data_path) == "/var/lib/fleet-agent"
    assert str(settings.knowledge_path) == "/etc/fleet-agent/knowledge"
    link = root / "usr/local/bin/fleet-agent"
    assert os.readlink(link) == "/opt/fleet-agent/venv/bin/fleet-agent"
    assert (root / "opt/fleet-agent/venv/bin/fleet-agent").exists()
    for name in UNITS:
        assert (root / "etc/systemd/system" / name).read_text() == (SYSTEMD_DIR / name).read_text()


@needs_analyze
def test_systemd_analyze_verify_accepts_the_installed_units(tmp_path):
    """After the documented install into a scratch ROOT (with systemd's own units and /bin/kill copied
    in), `systemd-analyze verify --root` accepts the installed units as they are (binaries found through
    the installed symlink) and `security --offline --root` rates the daemon at or below 2.0."""
    root, _calls = _run_install(tmp_path)
    system_units = Path("/usr/lib/systemd/system")
    if not system_units.is_dir():
        pytest.skip("systemd's unit directory /usr/lib/systemd/system is missing (systemd not installed)")
    shutil.copytree(system_units, root / "usr/lib/systemd/system", symlinks=True)
    kill = Path(shutil.which("kill", path="/bin:/usr/bin") or "/bin/kill")
    (root / "bin").mkdir(exist_ok=True)
    shutil.copy2(kill.resolve(), root / "bin/kill")
    args = ["verify", f"--root={root}"] + (["--man=no"] if _supports("--man") else [])
    result = _analyze(*args, *UNITS, cwd=tmp_path)
    output = (result.stdout + result.stderr).strip()
    assert result.returncode == 0, output
    assert [line for line in output.splitlines() if "fleet-agent" in line] == [], output
    if _supports("--offline"):
        sec = _analyze("security", "--offline=yes", f"--root={root}", "--no-pager", "fleet-agent.service",
                       cwd=tmp_path)
        match = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", sec.stdout)
        assert match, sec.stdout + sec.stderr
        print(f"installed fleet-agent.service: exposure {match.group(1)}")
        assert float(match.group(1)) <= MAX_EXPOSURE
