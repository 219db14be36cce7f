"""The official `vastai` CLI (1.9.1) works against the simulator, end to end.

The CLI exits 0 even when a call fails, so every step asserts on what it printed.
Independent invocations run in parallel to keep the test short.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from agent.sim import ManualClock, SimServer, Simulator


def _vastai() -> str | None:
    found = shutil.which("vastai")
    if found:
        return found
    candidate = Path(sys.executable).parent / "vastai"
    return str(candidate) if candidate.exists() else None


VASTAI = _vastai()
pytestmark = pytest.mark.skipif(VASTAI is None, reason="the official vastai CLI is not installed "
                                "(pip install vastai==1.9.1, part of the dev extras)")


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Cli:
    def __init__(self, url: str, key: str, home: Path) -> None:
        self.env = {
            "PATH": os.environ.get("PATH", ""), "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_CACHE_HOME": str(home / ".cache"), "XDG_DATA_HOME": str(home / ".local" / "share"),
            "XDG_STATE_HOME": str(home / ".local" / "state"),
            "VAST_URL": url, "VAST_API_KEY": key, "VASTAI_NO_UPDATE_CHECK": "1", "COLUMNS": "250",
            "NO_COLOR": "1",
        }
        # The CLI creates its config, cache and state directories without exist_ok on first use, so two first
        # runs at once race (FileExistsError); a machine where it ran before has them.
        for base in (".config", ".cache", ".local/state"):
            (home / base / "vastai").mkdir(parents=True, exist_ok=True)

    def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([VASTAI, *argv], env=self.env, capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL)
        proc.stdout, proc.stderr = ANSI.sub("", proc.stdout), ANSI.sub("", proc.stderr)
        return proc

    def many(self, *commands: tuple[str, ...]) -> list[subprocess.CompletedProcess[str]]:
        with ThreadPoolExecutor(max_workers=len(commands)) as pool:
            return list(pool.map(lambda argv: self.run(*argv), commands))


def _json(proc: subprocess.CompletedProcess[str]):
    assert proc.returncode == 0, proc.stderr[-2000:]
    try:
        return json.loads(proc.stdout)
    except ValueError:
        pytest.fail(f"not JSON: {proc.stdout[-1000:]!r} / stderr {proc.stderr[-1000:]!r}")


@pytest.mark.slow
def test_official_cli_round_trip(tmp_path: Path) -> None:
    """show instances/user, search with filters, create, show, logs, label, reboot, destroy: all read back right."""
    clock = ManualClock()
    sim = Simulator(seed=7, clock=clock, api_key="cli-test-key")
    # These commands run side by side (their first-run calls too), and the official CLI does not pace
    # itself: its 429 retries wait 0.15 s and 0.225 s, inside vast.ai's interval. This test pins the
    # request shapes, so the per-endpoint limit is off here, and the listing lag too (it reads back what it
    # created at once); the sequential test below runs the CLI against the defaults.
    # Its rents must be running when it reads them back: none stuck or refused in scheduling.
    sim.realism.update({"rate_interval": 0, "listing_lag": 0, "stuck_scheduling": 0, "unschedulable": 0})
    with SimServer(sim) as server:
        cli = Cli(server.url, sim.api_key, tmp_path)

        good = [sim.find_offer(model) for model in ("RTX 4090", "L40S")]
        search, user, *created = cli.many(
            ("search", "offers", "gpu_name=RTX_4090 num_gpus=1 reliability>0.9", "-o", "dph+", "--raw"),
            ("show", "user", "--raw"),
            *[("create", "instance", str(o["id"]), "--image", "ghcr.io/acme/prover:1", "--disk", "20",
               "--label", f"fa-cli-{n}", "--env", "-e JOB_QUEUE=http://q", "--onstart-cmd", "echo hi", "--raw")
              for n, o in enumerate(good)],
        )
        offers = _json(search)
        assert offers and all(o["gpu_name"] == "RTX 4090" and o["num_gpus"] == 1 for o in offers)
        assert all(o["reliability"] > 0.9 for o in offers)
        assert [o["dph_total"] for o in offers] == sorted(o["dph_total"] for o in offers)
        me = _json(user)
        assert me["credit"] == 500.0 and me["email"] == "fleet@sim.invalid" and "api_key" not in me
        ids = [_json(p)["new_contract"] for p in created]
        assert all(_json(p)["success"] is True for p in created) and len(set(ids)) == 2
        a, b = sorted(ids, key=lambda i: sim.instances[i]["label"])
        assert sim.instances[a]["_offer_id"] == good[0]["id"] and sim.instances[a]["onstart"] == "echo hi"
        sim.plant_logs(a, "proof 1 ok\nproof 2 ok\nproof 3 ok\n")
        sim.advance(900)  # past vast.ai's scheduling (up to 4 min) and loading (up to 7 min)

        show, logs, label, reboot, table = cli.many(
            ("show", "instance", str(a), "--raw"),
            ("logs", str(a), "--tail", "2"),
            ("label", "instance", str(b), "renamed"),
            ("reboot", "instance", str(b)),
            ("show", "instances"),
        )
        row = _json(show)
        assert (row["id"], row["label"], row["actual_status"]) == (a, "fa-cli-0", "running")
        assert row["image_uuid"] == "ghcr.io/acme/prover:1" and row["extra_env"] == {"JOB_QUEUE": "http://q"}
        assert logs.stdout.strip().splitlines() == ["proof 2 ok", "proof 3 ok"], logs.stdout + logs.stderr
        assert f"label for {b} set to renamed." in label.stdout
        assert f"Rebooting instance {b}." in reboot.stdout
        assert "Total: 2 instances" in table.stdout and str(a) in table.stdout, table.stdout + table.stderr
        assert sim.instances[b]["label"] == "renamed" and sim.instances[b]["status_msg"] == "rebooting"
        seen = {(r["method"], r["path"], r["auth"]) for r in sim.requests}
        assert ("GET", "/api/v0/gpu_names/unique/", None) in seen  # the CLI's first-run calls
        assert ("GET", "/api/v0/users/current", "bearer") in seen
        assert ("GET", "/api/v0/instances/filters/", "bearer") in seen

        gone = cli.run("destroy", "instances", str(a), str(b), "-y")
        assert f"destroying instance [{a}, {b}]." in gone.stdout, gone.stdout + gone.stderr
        assert sim.instances == {}

        missing, again = cli.many(("show", "instance", str(a)), ("destroy", "instance", str(a), "-y"))
        assert f"Instance {a} not found" in missing.stderr
        assert f"Failed with error 400: Instance {a} has been destroyed." in again.stderr  # vast.ai's answer
        assert "cli-test-key" not in json.dumps(sim.requests)


@pytest.mark.slow
def test_official_cli_one_command_at_a_time_against_the_defaults(tmp_path: Path) -> None:
    """One command at a time, as people run it, the official CLI works against the simulator with vast.ai's
    defaults on (rate limits, listing lag): it lists, searches and creates, and a new instance shows up
    once the listing lag has passed."""
    clock = ManualClock()
    sim = Simulator(seed=7, clock=clock, api_key="cli-test-key")
    with SimServer(sim) as server:
        cli = Cli(server.url, sim.api_key, tmp_path)
        assert _json(cli.run("show", "instances", "--raw")) == []
        offers = _json(cli.run("search", "offers", "gpu_name=RTX_4090 num_gpus=1", "--raw"))
        made = _json(cli.run("create", "instance", str(offers[0]["id"]), "--image", "img:1", "--disk", "5",
                             "--raw"))
        assert made["success"] is True
        assert _json(cli.run("show", "instances", "--raw")) == []  # not listed yet
        sim.advance(sim.realism.listing_lag)
        assert [i["id"] for i in _json(cli.run("show", "instances", "--raw"))] == [made["new_contract"]]
