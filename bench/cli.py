"""Wall time of operator commands against ``python -c 'import sqlite3'``, in the same run.

Makes a data directory (``fleet-agent init``) with a few alerts, then runs each command as a
new process ``--runs`` times, taking turns with the baseline so a busy machine slows both
alike. Prints one line per command: p50 wall ms, the baseline's p50 and the ratio, and
which heavy modules the process imported (``-X importtime``): the model SDK, the tokenizer,
structlog, rich, the event kinds.

Every process runs with bytecode caching on (into a temporary ``PYTHONPYCACHEPREFIX``), as an
installed package runs from its compiled ``.pyc`` files, even when the calling environment sets
``PYTHONDONTWRITEBYTECODE``; one untimed run of each command fills the cache first.
``--source`` measures with caching off instead (every module compiled from source each time).

    python bench/cli.py [--runs 15] [--source]
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

from agent import config
from agent.feedback import raise_alert
from agent.store.log import EventLog

COMMANDS = (["alerts", "list"], ["status"], ["directives"], ["say", "bench note"], ["context"])
BASELINE = [sys.executable, "-c", "import sqlite3"]
HEAVY = ("openai", "tiktoken", "structlog", "rich", "agent.events.kinds")


def _cli(cfg: Path, argv: list[str]) -> list[str]:
    return [sys.executable, "-m", "agent.cli", "--config", str(cfg), *argv]


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--source", action="store_true", help="bytecode caching off: compile every module each run")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fleet-agent-bench-") as d:
        env_dir = Path(d)
        _ENV.pop("PYTHONDONTWRITEBYTECODE", None)
        _ENV["PYTHONPYCACHEPREFIX"] = str(env_dir / "pycache")
        if a.source:
            _ENV["PYTHONDONTWRITEBYTECODE"] = "1"
        subprocess.run([sys.executable, "-m", "agent.cli", "init", str(env_dir)], check=True,
                       stdout=subprocess.DEVNULL)
        cfg = env_dir / "config.yaml"
        with EventLog(config.load(str(cfg)).db_path) as log:
            log.append("tick.started", {"observation": {"instances": [], "balance": 10.0}}, "scheduler", 1)
            for n in range(5):
                raise_alert(log, key=f"bench:{n}", severity="warning", title=f"bench alert {n}", tick=1)
        _ENV.setdefault("VAST_API_KEY", "bench")
        print(f"bytecode: {'off (compiled from source each run)' if a.source else 'cached, as installed'}")
        for argv_ in COMMANDS:
            _wall(BASELINE)
            _wall(_cli(cfg, argv_))  # fills the bytecode cache; not timed
            ours, base = [], []
            for _ in range(a.runs):
                base.append(_wall(BASELINE))
                ours.append(_wall(_cli(cfg, argv_)))
            p50, b50 = statistics.median(ours) * 1e3, statistics.median(base) * 1e3
            print(f"{' '.join(argv_):<14} p50 {p50:7.1f} ms   import sqlite3 p50 {b50:6.1f} ms   ratio {p50 / b50:5.2f}"
                  f"   imports {','.join(_heavy(_cli(cfg, argv_))) or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
