"""Wall time of operator commands against ``python -c 'import sqlite3'``, in the same run.

Makes a data directory (``fleet-agent init``) with a few alerts, then runs each command as a
new process ``--runs`` times, through the ``fleet-agent`` console script as an operator does,
taking turns with the baseline so a busy machine slows both alike. Prints one line per
command: p50 wall ms, the baseline's p50 and the ratio, and which heavy modules the process
imported (``-X importtime``): the model SDK, the tokenizer, PyYAML, structlog, rich, the event
kinds, the event log's module, argparse, json, typing, pathlib.

Two installs, each figure labelled: ``editable`` is this checkout's venv (``pip install -e``),
whose site startup runs setuptools' editable finder, for the baseline too (it imports pathlib,
urllib.parse, fnmatch, ...); ``regular`` (with ``--installed``) is a regular install of this
checkout into a new venv that takes the dependencies from this one without running its
``.pth`` files: what an operator who installed the package runs, and the honest ratio.

Every process runs with bytecode caching on (into a temporary ``PYTHONPYCACHEPREFIX``), as an
installed package runs from its compiled ``.pyc`` files, even when the calling environment sets
``PYTHONDONTWRITEBYTECODE``; one untimed run of each command fills the cache first.
``--source`` measures with caching off instead (every module compiled from source each time).

A first line per install times the standard modules every command imports besides fleet-agent's own (the
console script's ``re`` and the SQLite driver) against the same baseline.

``--against REV`` instead times regular installs of this checkout and of a git revision of it (``main``,
a commit), each command of both taking turns with the baseline: a before/after pair under the same load.

    python bench/cli.py [--runs 15] [--installed] [--source] [--against REV]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from agent import config
from agent.feedback import raise_alert
from agent.store.log import EventLog

COMMANDS = (["alerts", "list"], ["status"], ["directives"], ["say", "bench note"], ["context"])
HEAVY = ("openai", "tiktoken", "yaml", "structlog", "rich", "agent.events.kinds", "agent.store.log", "argparse", "json",
         "typing", "pathlib")
REPO = Path(config.__file__).resolve().parent.parent  # the checkout this python's agent package comes from


def _cli(py: str, script: str, cfg: Path, argv: list[str]) -> list[str]:
    return [py, script, "--config", str(cfg), *argv]


def _regular_install(root: Path, rev: str | None = None) -> tuple[str, str]:
    """A regular (not editable) install of this checkout (or of its git revision ``rev``) in a new venv under
    ``root``, its dependencies read from this venv's site-packages (a path in a ``.pth`` file: that
    directory's own ``.pth`` files, the editable finder among them, do not run). Returns the venv's python
    and the console script."""
    src = root / "src"
    if rev is None:
        shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(".git", ".venv*", "build", "*.egg-info",
                                                                 "__pycache__", "fleet-data", "demo-run"))
    else:
        src.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "fleet-agent-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", site, str(src)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return py, str(Path(site) / "bin" / "fleet-agent")


def _wall(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=_ENV)
    return time.perf_counter() - t0


def _heavy(cmd: list[str]) -> list[str]:
    r = subprocess.run([cmd[0], "-X", "importtime", *cmd[1:]], capture_output=True, text=True, check=True,
                       env=_ENV)
    mods = {ln.rsplit("|", 1)[-1].strip() for ln in r.stderr.splitlines() if ln.startswith("import time:")}
    return [m for m in HEAVY if m in mods]


_ENV = dict(os.environ)


# What any command here imports besides fleet-agent's own modules: the console script's re and the SQLite
# driver (alerts list in its plain form imports neither argparse nor json, pathlib nor typing). Printed as a
# first line of reference: the part of the ratio no change to fleet-agent's own modules can remove.
FLOOR = "import re, pysqlite3.dbapi2"


def _measure(label: str, py: str, script: str, cfg: Path, runs: int) -> None:
    baseline = [py, "-c", "import sqlite3"]
    print(f"{label} install ({py}):")
    floor, base = [], []
    for _ in range(runs):
        base.append(_wall(baseline))
        floor.append(_wall([py, "-c", FLOOR]))
    f50, b50 = statistics.median(floor) * 1e3, statistics.median(base) * 1e3
    print(f"  {'(stdlib floor)':<14} p50 {f50:7.1f} ms   import sqlite3 p50 {b50:6.1f} ms   ratio {f50 / b50:5.2f}"
          f"   ({FLOOR.removeprefix('import ')})")
    for argv_ in COMMANDS:
        _wall(baseline)
        _wall(_cli(py, script, cfg, argv_))  # fills the bytecode cache; not timed
        ours, base = [], []
        for _ in range(runs):
            base.append(_wall(baseline))
            ours.append(_wall(_cli(py, script, cfg, argv_)))
        p50, b50 = statistics.median(ours) * 1e3, statistics.median(base) * 1e3
        print(f"  {' '.join(argv_):<14} p50 {p50:7.1f} ms   import sqlite3 p50 {b50:6.1f} ms   ratio {p50 / b50:5.2f}"
              f"   imports {','.join(_heavy(_cli(py, script, cfg, argv_))) or '-'}")


def _measure_against(rev: str, before: tuple[str, str], after: tuple[str, str], cfg: Path, runs: int) -> None:
    """Each command of two regular installs, ``rev`` and this checkout, taking turns with the baseline."""
    baseline = [after[0], "-c", "import sqlite3"]
    print(f"regular installs, {rev} against this checkout:")
    for argv_ in COMMANDS[:-1]:
        old, new = _cli(*before, cfg, argv_), _cli(*after, cfg, argv_)
        _wall(old), _wall(new)  # fill the bytecode cache; not timed
        t: dict[str, list[float]] = {"base": [], "old": [], "new": []}
        for _ in range(runs):
            t["base"].append(_wall(baseline))
            t["old"].append(_wall(old))
            t["new"].append(_wall(new))
        b50, o50, n50 = (statistics.median(t[k]) * 1e3 for k in ("base", "old", "new"))
        print(f"  {' '.join(argv_):<14} import sqlite3 p50 {b50:6.1f} ms   {rev} p50 {o50:7.1f} ms ratio "
              f"{o50 / b50:5.2f}   this checkout p50 {n50:7.1f} ms ratio {n50 / b50:5.2f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--installed", action="store_true",
                    help="also measure a regular (not editable) install of this checkout in a new venv")
    ap.add_argument("--source", action="store_true", help="bytecode caching off: compile every module each run")
    ap.add_argument("--against", metavar="REV", help="instead: regular installs of this checkout and of git "
                    "revision REV, each command of both taking turns with the baseline (a before/after pair)")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fleet-agent-bench-") as d:
        env_dir = Path(d)
        _ENV.pop("PYTHONDONTWRITEBYTECODE", None)
        _ENV["PYTHONPYCACHEPREFIX"] = str(env_dir / "pycache")
        if a.source:
            _ENV["PYTHONDONTWRITEBYTECODE"] = "1"
        script = str(Path(sys.executable).parent / "fleet-agent")
        subprocess.run([sys.executable, script, "init", str(env_dir / "data")], check=True, stdout=subprocess.DEVNULL)
        cfg = env_dir / "data" / "config.yaml"
        with EventLog(config.load(str(cfg)).db_path) as log:
            log.append("tick.started", {"observation": {"instances": [], "balance": 10.0}}, "scheduler", 1)
            for n in range(5):
                raise_alert(log, key=f"bench:{n}", severity="warning", title=f"bench alert {n}", tick=1)
        _ENV.setdefault("VAST_API_KEY", "bench")
        print(f"bytecode: {'off (compiled from source each run)' if a.source else 'cached, as installed'}")
        if a.against:
            _measure_against(a.against, _regular_install(env_dir / "against", a.against),
                             _regular_install(env_dir / "regular"), cfg, a.runs)
            return 0
        _measure("editable", sys.executable, script, cfg, a.runs)
        if a.installed:
            _measure("regular", *_regular_install(env_dir / "regular"), cfg, a.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
