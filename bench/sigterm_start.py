"""SIGTERM at launch: ``fleet-agent run`` (the console script) stopped at a random moment of its start-up.

Each trial launches the installed console script against the simulator on 127.0.0.1 and sends SIGTERM
after a random delay (uniform, 0 to ``--max-delay`` seconds). At the moment of sending, the trial reads
/proc/PID/status: ``SigCgt`` says whether a SIGTERM handler was installed yet. A process whose handler was
not installed yet (the interpreter still starting, before ``agent.start`` ran) ends by the signal (-15):
nothing of the project ran yet, so nothing was half done. The bench prints exit codes by count, how many
trials fell before the handler, the latest such delay, and the time from launch to the handler over
``--probe`` launches polled every millisecond.

Prints ONE JSON object; exit 1 when a trial whose handler was installed exited other than 0.

    PYTHONPATH=. .venv/bin/python bench/sigterm_start.py [--trials 60] [--max-delay 1.5] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.reliability.harness import running_sim, write_config  # noqa: E402

SIGTERM_BIT = 1 << (signal.SIGTERM - 1)


def console_script() -> list[str]:
    exe = Path(sys.executable).with_name("fleet-agent")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("fleet-agent")
    if found is None:
        raise SystemExit("fleet-agent console script not found: pip install -e . into this interpreter's venv")
    return [found]


def handler_installed(pid: int) -> bool | None:
    """Whether the process catches SIGTERM now (None: it is gone)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) & SIGTERM_BIT)
    except OSError:
        return None
    return None


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def trial(cmd: list[str], cfg: Path, delay: float, err: Path, *, after_handler: bool = False) -> dict[str, Any]:
    """One launch stopped ``delay`` seconds in (``after_handler``: counted from when the handler shows)."""
    with err.open("wb") as e:
        t0 = time.monotonic()
        p = subprocess.Popen([*cmd, "--config", str(cfg), "run"], stdout=subprocess.DEVNULL, stderr=e,
                             stdin=subprocess.DEVNULL, env=_env(), cwd=str(cfg.parent))
    if after_handler:
        while handler_installed(p.pid) is False and p.poll() is None:
            time.sleep(0.001)
        t0 = time.monotonic()
    time.sleep(max(0.0, delay - (time.monotonic() - t0)))
    caught = handler_installed(p.pid)
    sent = time.monotonic() - t0
    p.send_signal(signal.SIGTERM)
    try:
        rc = p.wait(120)
    except subprocess.TimeoutExpired:
        p.kill()
        rc = p.wait()
        caught = None
    return {"delay_s": round(sent, 3), "handler": caught, "rc": rc,
            "stderr": err.read_text(errors="replace")[-300:] if rc not in (0, -signal.SIGTERM) else ""}


def time_to_handler(cmd: list[str], cfg: Path, err: Path) -> float | None:
    """Seconds from launch until /proc shows a SIGTERM handler (polled every ms); then the daemon is stopped."""
    with err.open("wb") as e:
        t0 = time.monotonic()
        p = subprocess.Popen([*cmd, "--config", str(cfg), "run"], stdout=subprocess.DEVNULL, stderr=e,
                             stdin=subprocess.DEVNULL, env=_env(), cwd=str(cfg.parent))
    took = None
    while time.monotonic() - t0 < 30:
        got = handler_installed(p.pid)
        if got:
            took = time.monotonic() - t0
            break
        if got is None or p.poll() is not None:
            break
        time.sleep(0.001)
    p.send_signal(signal.SIGTERM)
    p.wait(120)
    return took


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=60)
    ap.add_argument("--max-delay", type=float, default=1.5)
    ap.add_argument("--probe", type=int, default=10, help="launches timed to the handler's installation")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    cmd = console_script()
    base = Path(tempfile.mkdtemp(prefix="fa-sigterm-"))
    rows: list[dict[str, Any]] = []
    t_start = time.monotonic()
    try:
        with running_sim(args.seed) as (_sim, server):
            cfg = write_config(base, server.url, schedule={"interval": "1s"}, http={"listen": None})
            probes = [time_to_handler(cmd, cfg, base / "probe.err") for _ in range(args.probe)]
            for _ in range(args.trials):
                rows.append(trial(cmd, cfg, rng.uniform(0.0, args.max_delay), base / "err.txt"))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    before = [r for r in rows if r["handler"] is False]
    after = [r for r in rows if r["handler"]]
    known = sorted(p for p in probes if p is not None)
    out = {
        "command": " ".join(cmd[-1:]) + " --config CFG run", "trials": len(rows), "max_delay_s": args.max_delay,
        "exit_codes": dict(Counter(str(r["rc"]) for r in rows)),
        "before_handler": len(before), "before_handler_exit_codes": dict(Counter(str(r["rc"]) for r in before)),
        "latest_delay_before_handler_s": max((r["delay_s"] for r in before), default=None),
        "after_handler_exit_codes": dict(Counter(str(r["rc"]) for r in after)),
        "after_handler_not_0": [r for r in after if r["rc"] != 0][:5],
        "handler_installed_after_s": {"n": len(known), "min": known[0] if known else None,
                                      "p50": known[len(known) // 2] if known else None,
                                      "max": known[-1] if known else None},
        "seconds": round(time.monotonic() - t_start, 1),
    }
    out["ok"] = not out["after_handler_not_0"] and all(r["rc"] in (0, -signal.SIGTERM) for r in rows)
    sys.stdout.write(json.dumps(out, sort_keys=True) + "\n")
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
