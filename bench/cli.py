"""Wall time of operator commands, each a new process as an operator runs it: the median of ``--runs``.

Times ``--help``, the read commands (``status``, ``alerts list``, ``directives``, ``spend``, ``log search``,
``thread show --tail 20``, each with and without ``--json``) and ``context`` as ``python -m agent.cli --config CFG ...``
with this checkout first on ``PYTHONPATH`` (one untimed run each first, which also writes the bytecode).
CFG is a demo data directory made with ``fleet-agent demo --keep`` unless ``--config`` names one. With
``--events N`` its log is replaced by one of N events grown from copies of the demo's ticks (bench/biglog.py),
kept under /tmp/fleet-agent-biglogs (``$FLEET_AGENT_BIGLOG_CACHE``) so a rerun reuses it: built once, read
by every run after (the commands timed here only read). A new build is checked as the operator would check
a daemon's log (``log verify``, ``log rebuild --check``) before it is kept.

``--layers`` prints, per command, where its import time goes: ``python -X importtime`` summed by top-level
package (and by ``agent.*`` module), the self time of every module imported under it, median of the runs.

``--against REV`` also times a git revision (a commit, a branch) checked out into a temporary worktree,
taking turns with this checkout run by run so a busy machine slows both alike: a before/after pair.
Each figure is a median wall time, with the median CPU time (user + system) beside it, then the
least of each over the runs (on a shared, loaded machine the least is the nearest to the command's own cost).

    python bench/cli.py [--runs 20] [--against e5e967e] [--config FILE | --events 1000000] [--layers]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The operator's read commands (issue 41: each within 150 ms at 10^6 events), with and without --json.
READS = (("status",), ("alerts", "list"), ("directives",), ("spend",), ("log", "search", "rent"),
         ("thread", "show", "--tail", "20"), ("policy", "show"))
COMMANDS = (("--help",), *(c for r in READS for c in (r, (*r, "--json"))), ("context",), ("context", "--json"))


def run(tree: Path, cfg: Path, argv: tuple[str, ...]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system) of one ``python -m agent.cli --config CFG ARGV`` with ``tree`` on
    PYTHONPATH."""
    env = tree_env(tree)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "agent.cli", "--config", str(cfg), *argv], env=env, cwd=tree,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    took = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"{tree}: {' '.join(argv)} exited {r.returncode}: {r.stderr.strip()}")
    return took, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def tree_env(tree: Path) -> dict[str, str]:
    """The environment a command of ``tree`` runs in: the tree first on PYTHONPATH, bytecode written, and a
    validated-config cache of its own. The cache's key covers the config code, so two trees whose agent/config.py
    differ, taking turns on one cache, would each find the other's entry and validate the file again every run
    (~0.15 s of CPU on both sides of an --against pair)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["FLEET_AGENT_CONFIG_CACHE"] = str(Path(tempfile.gettempdir()) / "bench-cli-config-cache"
                                          / hashlib.sha256(str(tree.resolve()).encode()).hexdigest()[:16])
    return env


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


def big_config(events: int) -> Path:
    """A demo data directory whose log holds ``events`` events (its config file), built once under the
    biglog cache directory and reused."""
    sys.path.insert(0, str(REPO))
    from agent import config, logsetup
    from agent.runtime.app import App
    from agent.store.db import migrations
    from bench.biglog import CACHE_DIR, grow, ticks_of

    d = CACHE_DIR / f"cli-{events}-{migrations()[-1][0]}"
    if (d / "complete").exists():
        return d / "demo" / "config.yaml"
    logsetup.configure("warning", "auto")
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    cfg = demo_config(d)
    settings = config.load(str(cfg))
    app = App(settings)
    template = ticks_of(app.log)  # the demo's own ticks
    app.close()
    for f in settings.db_path.parent.glob(settings.db_path.name + "*"):
        f.unlink()
    (settings.data_path / "token-counts").unlink(missing_ok=True)
    app = App(settings)
    app.init_database()
    grow(app.log, template, events)
    app.close()
    # What a daemon would have left: the chain verifies and the read models are what a rebuild from the log
    # gives (a minute or two at 10^6 events, once per build).
    for check in (("log", "verify"), ("log", "rebuild", "--check")):
        subprocess.run([sys.executable, "-m", "agent.cli", "--config", str(cfg), *check], check=True,
                       stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(REPO)})
    (d / "complete").write_text(f"{events} events\n", encoding="utf-8")
    return cfg


IMPORT_LINE = re.compile(r"import time:\s+(\d+) \|\s+\d+ \|( *)(\S+)")


def layers(tree: Path, cfg: Path, argv: tuple[str, ...]) -> dict[str, float]:
    """Seconds of import time of one run, by top-level package (and by ``agent.*`` module): the self time of
    every module imported, summed under the name it starts with."""
    env = tree_env(tree)
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "agent.cli", "--config", str(cfg), *argv],
                       env=env, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    out: dict[str, float] = {}
    for m in IMPORT_LINE.finditer(r.stderr):
        name = m.group(3)
        top = ".".join(name.split(".")[:2]) if name.startswith("agent.") else name.split(".")[0]
        out[top] = out.get(top, 0.0) + int(m.group(1)) / 1e6
    return out


def layer_table(trees: dict[str, Path], cfg: Path, runs: int, commands: tuple[tuple[str, ...], ...],
                top: int = 12) -> list[str]:
    """The lines of the import-time tables, one per command."""
    lines = []
    for argv in commands:
        lines.append(f"\nimport time of {' '.join(argv)!r} by package, median of {runs} runs (seconds, self time "
              "summed; the largest first)")
        by_tree = {}
        for label, tree in trees.items():
            samples = [layers(tree, cfg, argv) for _ in range(runs)]
            names = {n for s in samples for n in s}
            by_tree[label] = {n: statistics.median(s.get(n, 0.0) for s in samples) for n in names}
        names = sorted({n for t in by_tree.values() for n in t},
                       key=lambda n: -max(t.get(n, 0.0) for t in by_tree.values()))
        lines.append(f"{'package':<28}" + "".join(f"{label:>22}" for label in trees))
        lines.append(f"{'(all)':<28}" + "".join(f"{sum(t.values()):>21.3f}s" for t in by_tree.values()))
        lines += [f"{n:<28}" + "".join(f"{t.get(n, 0.0):>21.3f}s" for t in by_tree.values()) for n in names[:top]]
    return lines


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
    where = p.add_mutually_exclusive_group()
    where.add_argument("--config", type=Path, help="the config to read (default: a new demo data directory)")
    where.add_argument("--events", type=int, metavar="N",
                       help="a demo data directory whose log holds N events (built once, then reused)")
    p.add_argument("--layers", action="store_true",
                   help="also print each command's import time by top-level package (python -X importtime)")
    p.add_argument("--commands", help="the commands to time, ';'-separated (default: "
                   + "; ".join(" ".join(c) for c in COMMANDS) + ")")
    a = p.parse_args()
    commands = tuple(tuple(c.split()) for c in a.commands.split(";")) if a.commands else COMMANDS
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp:
        cfg = a.config or (big_config(a.events) if a.events else demo_config(Path(tmp)))
        trees = {"this checkout": REPO}
        if a.against:
            rev_tree = Path(tmp) / "rev"
            subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(rev_tree), a.against],
                           check=True)
            trees = {a.against: rev_tree, **trees}
        try:
            times = bench(trees, cfg, a.runs, commands)
            layer_lines = layer_table(trees, cfg, max(3, a.runs // 4), commands) if a.layers else []
        finally:
            if a.against:
                subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(rev_tree)], check=True)
    print(f"{a.runs} runs of python -m agent.cli --config CFG COMMAND ({sys.executable}): median wall seconds "
          f"(median CPU seconds, user + system: what a busy machine changes least), then the least of each; load "
          f"average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'command':<32}" + "".join(f"{label + ' median':>22}{'min':>18}" for label in trees))
    for argv in commands:
        cmd = " ".join(argv)
        cells = []
        for label in trees:
            walls, cpus = zip(*times[(label, cmd)], strict=True)
            cells.append(f"{statistics.median(walls):>13.3f}s ({statistics.median(cpus):.3f}s)"
                         f"{min(walls):>9.3f}s ({min(cpus):.3f}s)")
        print(f"{cmd:<32}" + "".join(cells))
    print("\n".join(layer_lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
