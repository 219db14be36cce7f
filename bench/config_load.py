"""What loading the config costs a command: wall time of importing ``agent.config`` and loading the config
``fleet-agent init`` writes, over what a command imports anyway before it (``re``, ``json``, the SQLite driver).

Every command loads the config first. This times, as new processes of a regular (not editable) install taking
turns (bytecode cached, as installed), ``python -c 'import sqlite3'`` (issue 17's baseline), the floor
``import re, json, pysqlite3.dbapi2`` and the floor plus ``from agent import config; config.load(PATH)``, and
prints the p50 of each and the config's cost over the floor; then ``-X importtime``'s median cumulative
microseconds for ``agent.config`` and the heavy standard modules the load imported (none, when all is well).

``--against REV`` does the same for a regular install of git revision REV of this checkout, in the same
turns: a before/after pair under the same load.

    python bench/config_load.py [--runs 21] [--against main]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cli import _regular_install  # noqa: E402  (bench/cli.py: a regular install of this checkout)

FLOOR = "import re, json, pysqlite3.dbapi2"
WATCH = ("typing", "re", "pathlib", "urllib.parse", "ipaddress", "threading", "contextlib", "structlog", "yaml",
         "dataclasses")


def _load_code(cfg: Path) -> str:
    return f"{FLOOR}; from agent import config; config.load({str(cfg)!r})"


def _run(py: str, code: str, env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system, which a busy machine inflates less) of one process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([py, "-c", code], env=env, stdout=subprocess.DEVNULL, cwd=env["PYTHONPYCACHEPREFIX"])
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{py} -c {code!r} exited {proc.returncode}")
    return wall, usage.ru_utime + usage.ru_stime


def _importtime(py: str, cfg: Path, env: dict[str, str], runs: int) -> tuple[float, list[str]]:
    """Median cumulative µs of agent.config's import, and which WATCH modules a load imported beyond the floor."""
    cum: list[int] = []
    code = (f"import sys; {FLOOR}; before = set(sys.modules); from agent import config; "
            f"config.load({str(cfg)!r}); print(' '.join(m for m in {WATCH!r} if m in sys.modules and m not in before))")
    extra: list[str] = []
    for _ in range(runs):
        r = subprocess.run([py, "-X", "importtime", "-c", code], env=env, capture_output=True, text=True, check=True,
                           cwd=env["PYTHONPYCACHEPREFIX"])
        extra = r.stdout.split()
        for line in r.stderr.splitlines():
            if line.rstrip().endswith("| agent.config"):
                cum.append(int(line.split("|")[1]))
    return statistics.median(cum), extra


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--against", metavar="REV", help="also a regular install of git revision REV, in the same turns")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fleet-agent-bench-") as d:
        root = Path(d)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(root / "pycache")  # (also the processes' directory: python -c puts its
        (root / "pycache").mkdir()                             # directory first on sys.path, and not this checkout)
        script = str(Path(sys.executable).parent / "fleet-agent")
        subprocess.run([sys.executable, script, "init", str(root / "data")], check=True, stdout=subprocess.DEVNULL)
        cfg = root / "data" / "config.yaml"
        installs = {"this checkout": _regular_install(root / "new")[0]}
        if a.against:
            installs = {a.against: _regular_install(root / "old", a.against)[0], **installs}
        py0 = installs["this checkout"]
        cases = [("import sqlite3", py0, "import sqlite3"), ("floor", py0, FLOOR)]
        cases += [(f"config.load, {label}", py, _load_code(cfg)) for label, py in installs.items()]
        for _, py, code in cases:
            _run(py, code, env)  # fills the bytecode cache; not timed
        times: dict[str, list[tuple[float, float]]] = {label: [] for label, _, _ in cases}
        for _ in range(a.runs):
            for label, py, code in cases:
                times[label].append(_run(py, code, env))
        wall = {label: statistics.median(w for w, _ in t) * 1e3 for label, t in times.items()}
        cpu = {label: statistics.median(c for _, c in t) * 1e3 for label, t in times.items()}
        print(f"regular installs, bytecode cached, p50 of {a.runs} runs taking turns (floor: {FLOOR}):")
        for label, _, _ in cases:
            over = (f"   over the floor: wall {wall[label] - wall['floor']:5.1f} ms, cpu {cpu[label] - cpu['floor']:5.1f} ms"
                    if label.startswith("config") else "")
            print(f"  {label:<28} wall p50 {wall[label]:6.1f} ms (x{wall[label] / wall['import sqlite3']:4.2f} import "
                  f"sqlite3)   cpu p50 {cpu[label]:6.1f} ms{over}")
        for label, py in installs.items():
            cum, extra = _importtime(py, cfg, env, min(a.runs, 11))
            print(f"  -X importtime, {label}: agent.config {cum / 1e3:5.2f} ms cumulative; the load imported "
                  f"{', '.join(extra) or 'none'} of {', '.join(WATCH)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
