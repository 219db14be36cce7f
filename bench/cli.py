"""Wall time of operator commands, each a new process as an operator runs it: the median of ``--runs``.

Times ``alerts list``, ``status``, ``--help`` and ``context`` as ``python -m agent.cli --config CFG ...``
with this checkout first on ``PYTHONPATH`` (one untimed run each first, which also writes the bytecode).
CFG is a demo data directory made with ``fleet-agent demo --keep`` unless ``--config`` names one.

``--against REV`` also times a git revision (a commit, a branch) checked out into a temporary worktree,
taking turns with this checkout run by run so a busy machine slows both alike: a before/after pair.
Each figure is a median wall time, with the median CPU time (user + system) beside it.

    python bench/cli.py [--runs 20] [--against e5e967e] [--config FILE]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COMMANDS = (("alerts", "list"), ("status",), ("--help",), ("context",))


def run(tree: Path, cfg: Path, argv: tuple[str, ...]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system) of one ``python -m agent.cli --config CFG ARGV`` with ``tree`` on
    PYTHONPATH."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "agent.cli", "--config", str(cfg), *argv], env=env, cwd=tree,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    took = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"{tree}: {' '.join(argv)} exited {r.returncode}: {r.stderr.strip()}")
    return took, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def check_tree(tree: Path) -> None:
    """The ``agent`` package that runs is the one in ``tree`` (PYTHONPATH comes before the editable install)."""
    out = subprocess.run([sys.executable, "-c", "import agent; print(agent.__file__)"], capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(tree)}, cwd=tree, check=True).stdout
    if not Path(out.strip()).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"{tree}: python imports agent from {out.strip()}, not from the tree")


def demo_config(where: Path) -> Path:
    """A demo data directory in ``where`` (its config file)."""
    d = where / "demo"
    subprocess.run([sys.executable, "-m", "agent.cli", "demo", "--keep", str(d), "--ticks", "8"], check=True,
                   stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(REPO)})
    return d / "config.yaml"


def bench(trees: dict[str, Path], cfg: Path, runs: int,
          commands: tuple[tuple[str, ...], ...] = COMMANDS) -> dict[tuple[str, str], list[tuple[float, float]]]:
    times: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for tree in trees.values():
        check_tree(tree)
        for argv in commands:
            run(tree, cfg, argv)  # untimed: writes the tree's bytecode
    for _ in range(runs):
        for argv in commands:
            for label, tree in trees.items():
                times.setdefault((label, " ".join(argv)), []).append(run(tree, cfg, argv))
    return times


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=20, help="timed runs of each command (default 20)")
    p.add_argument("--against", metavar="REV", help="also time this git revision, for a before/after pair")
    p.add_argument("--config", type=Path, help="the config to read (default: a new demo data directory)")
    p.add_argument("--commands", help="the commands to time, ';'-separated (default: "
                   + "; ".join(" ".join(c) for c in COMMANDS) + ")")
    a = p.parse_args()
    commands = tuple(tuple(c.split()) for c in a.commands.split(";")) if a.commands else COMMANDS
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp:
        cfg = a.config or demo_config(Path(tmp))
        trees = {"this checkout": REPO}
        if a.against:
            rev_tree = Path(tmp) / "rev"
            subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(rev_tree), a.against],
                           check=True)
            trees = {a.against: rev_tree, **trees}
        try:
            times = bench(trees, cfg, a.runs, commands)
        finally:
            if a.against:
                subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(rev_tree)], check=True)
    print(f"median of {a.runs} runs of python -m agent.cli --config CFG COMMAND ({sys.executable}), wall "
          f"seconds (CPU seconds, user + system: what a busy machine changes least); load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'command':<20}" + "".join(f"{label:>22}" for label in trees))
    for argv in commands:
        cmd = " ".join(argv)
        cells = []
        for label in trees:
            wall, cpu = (statistics.median(x) for x in zip(*times[(label, cmd)], strict=True))
            cells.append(f"{wall:.3f}s ({cpu:.3f}s)")
        print(f"{cmd:<20}" + "".join(f"{c:>22}" for c in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
