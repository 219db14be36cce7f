"""Package direction: ``tools`` builds on ``agent``; ``agent`` finds the tools through an entry point.

The import graph is read from the source with ``ast`` (every import, including the
ones inside functions), so a late import cannot hide a dependency.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import tools
from agent.config import Settings
from agent.fleet.toolkit import ENTRY_POINT_GROUP, Action, Tool, load_tools
from agent.runtime.app import App

REPO = Path(__file__).resolve().parents[1]
# What runs the tools; a tool importing it would close the loop the entry point opens.
RUNTIME = {"agent.runtime.tick", "agent.fleet.pipeline", "agent.service.daemon", "agent.runtime.app", "agent.cli"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports (``from m import n`` counts as m and m.n), relative ones resolved."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return out


def _graph(package: str) -> dict[str, set[str]]:
    return {_module_name(p): _imports(p) for p in sorted((REPO / package).rglob("*.py"))}


def _within(imported: str, package: str) -> bool:
    return imported == package or imported.startswith(package + ".")


def test_no_agent_module_imports_tools():
    """No module under agent/ imports the tools package, at module level or inside a function."""
    offenders = {mod: sorted(i for i in imps if _within(i, "tools"))
                 for mod, imps in _graph("agent").items()}
    assert {m: i for m, i in offenders.items() if i} == {}


def test_tools_import_only_public_agent_modules():
    """Modules under tools/ import from agent only public modules (no underscore-prefixed module
    or name) and never the runtime that runs them (tick, pipeline, daemon, app, cli)."""
    graph = _graph("tools")
    assert "tools.fleet" in graph and "tools.memory" in graph
    bad: dict[str, list[str]] = {}
    for mod, imps in graph.items():
        for i in sorted(imps):
            if not _within(i, "agent"):
                continue
            private = any(part.startswith("_") for part in i.split(".")[1:])
            runtime = any(_within(i, r) for r in RUNTIME)
            if private or runtime:
                bad.setdefault(mod, []).append(i)
    assert bad == {}


def test_the_graph_reader_sees_imports_inside_functions():
    """The reader counts a late import inside a function body (tools/memory.py imports agent.feedback there)."""
    assert "agent.feedback" in _imports(REPO / "tools" / "memory.py")


def test_entry_point_resolves_to_the_tools_fleet_agent_uses():
    """The fleet_agent.tools entry point names tools:TOOLS; load_tools returns exactly those tool
    objects, and the specs the app sends the model are theirs, in name order."""
    eps = list(entry_points(group=ENTRY_POINT_GROUP))
    assert [ep.value for ep in eps] == ["tools:TOOLS"]
    assert eps[0].load() is tools.TOOLS
    loaded = list(load_tools())
    assert sorted(loaded, key=id) == sorted(tools.TOOLS, key=id)
    assert all(isinstance(t, Tool | Action) for t in loaded)
    assert [t.name for t in loaded] == sorted(t.name for t in tools.TOOLS)
    assert App(Settings()).tool_specs() == [t.spec() for t in sorted(tools.TOOLS, key=lambda t: t.name)]


def test_actions_are_exactly_the_fleet_changing_tools():
    """rent, destroy and reboot are actions (a check declared with the handler); every other tool only reads."""
    assert sorted(t.name for t in load_tools() if isinstance(t, Action)) == [
        "destroy_instance", "reboot_instance", "rent_instance"]


def test_stale_install_without_the_entry_point_fails_with_the_reinstall_hint(tmp_path):
    """Package metadata from before the entry point (shadowing the install on sys.path): loading
    the tools raises an error that says to reinstall, instead of running an agent without tools."""
    stale = tmp_path / "fleet_agent-0.1.0.dist-info"
    stale.mkdir()
    (stale / "METADATA").write_text("Metadata-Version: 2.1\nName: fleet-agent\nVersion: 0.1.0\n")
    (stale / "entry_points.txt").write_text("[console_scripts]\nfleet-agent = agent.cli:entry\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    code = ("from agent.fleet.toolkit import ToolsNotInstalled, load_tools\n"
            "try:\n    load_tools()\nexcept ToolsNotInstalled as e:\n    print(e)\n    raise SystemExit(3)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "fleet_agent.tools" in r.stdout and "pip install -e ." in r.stdout


# The layers inside agent/, lowest first. A module imports only modules of its own layer or lower ones, and
# never a package beside it in its layer (the base layer's modules excepted, which import one another).
# Imports inside functions count as much as those at the top; only imports under ``if TYPE_CHECKING:`` (which
# never run) are left out.
LAYERS: list[tuple[str, ...]] = [
    ("agent", "agent.errors", "agent.secrets", "agent.times", "agent.tokens", "agent.logsetup"),
    ("agent.config",),
    ("agent.events",),
    ("agent.store",),
    ("agent.feedback",),
    ("agent.clients", "agent.model", "agent.sim"),
    ("agent.context",),
    ("agent.fleet",),
    ("agent.runtime",),
    ("agent.fork",),
    ("agent.web",),
    ("agent.service",),
    ("agent.cli",),
    ("agent.start",),  # the console script: a stop signal handled before anything else, then the CLI
]


def _type_checking_only(tree: ast.Module) -> set[int]:
    """Line numbers of the imports under ``if TYPE_CHECKING:``."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for sub in node.body:
                lines.update(n.lineno for n in ast.walk(sub) if isinstance(n, ast.Import | ast.ImportFrom))
    return lines


def _runtime_graph() -> dict[str, set[str]]:
    """Module -> the agent modules it imports when it runs (``from pkg import name`` resolved to the module
    ``pkg.name`` when that is a module, else ``pkg``)."""
    paths = {_module_name(p): p for p in sorted((REPO / "agent").rglob("*.py"))}

    def resolve(name: str) -> str:
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, set[str]] = {}
    for mod, path in paths.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        skip = _type_checking_only(tree)
        out: set[str] = set()
        for node in ast.walk(tree):
            if getattr(node, "lineno", None) in skip:
                continue
            if isinstance(node, ast.Import):
                out.update(resolve(a.name) for a in node.names if a.name.startswith("agent"))
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("agent") and not node.level:
                module = node.module or ""
                out.update(resolve(f"{module}.{a.name}") if f"{module}.{a.name}" in paths else resolve(module)
                           for a in node.names)
        graph[mod] = out - {mod, ""}
    return graph


def _layer_of(module: str) -> tuple[int, str] | None:
    best: tuple[int, str] | None = None
    for index, layer in enumerate(LAYERS):
        for home in layer:
            if (module == home or module.startswith(home + ".")) and (best is None or len(home) > len(best[1])):
                best = (index, home)
    return best


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_every_agent_module_has_a_layer():
    assert [m for m in _runtime_graph() if _layer_of(m) is None] == []


def test_agent_modules_import_only_their_own_layer_or_lower_ones():
    """e.g. the store never imports the context, the runtime never the CLI, the console never the CLI."""
    bad = []
    for mod, imports in sorted(_runtime_graph().items()):
        mine = _layer_of(mod)
        assert mine is not None
        for imported in sorted(imports):
            theirs = _layer_of(imported)
            assert theirs is not None, imported
            if theirs[0] > mine[0] or (theirs[0] == mine[0] > 0 and theirs[1] != mine[1]):
                bad.append(f"{mod} -> {imported}")
    assert bad == []


def test_no_import_cycles_inside_agent():
    assert _cycles(_runtime_graph()) == []


def test_the_layer_check_sees_late_imports_and_skips_type_only_ones(tmp_path):
    """A cycle closed by an import inside a function is found; one closed only under TYPE_CHECKING is not."""
    graph = {"agent.a": {"agent.b"}, "agent.b": {"agent.a"}, "agent.c": set()}
    assert _cycles(graph) == [["agent.a", "agent.b"]]
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from agent.x import y\n"
                     "def f():\n    from agent.z import w\n")
    assert _type_checking_only(tree) == {3}
