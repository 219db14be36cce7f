"""The error tree: agent/errors.py's docstring draws every FleetAgentError the project defines."""

from __future__ import annotations

import importlib
import os
import pkgutil
import subprocess
import sys
from types import ModuleType

import agent
import tools
from agent import errors
from agent.errors import FleetAgentError


def _import_all(package: ModuleType) -> list[str]:
    """Import every module of ``package`` (entry-point ``__main__`` modules aside); their names."""
    names = []
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if info.name.rsplit(".", 1)[-1] == "__main__":
            continue
        importlib.import_module(info.name)
        names.append(info.name)
    return names


def _subclasses(cls: type) -> list[type]:
    out = []
    for sub in cls.__subclasses__():
        out.append(sub)
        out.extend(_subclasses(sub))
    return out


def test_every_error_class_is_drawn_in_the_tree():
    """Each FleetAgentError subclass defined under agent/ or tools/ is named in the errors module docstring,
    so the tree there is the complete list an operator or a caller can meet."""
    imported = _import_all(agent) + _import_all(tools)
    assert "agent.model.llm" in imported and "agent.fleet.toolkit" in imported and "tools.fleet" in imported
    ours = [c for c in _subclasses(FleetAgentError) if c.__module__.split(".")[0] in ("agent", "tools")]
    names = {c.__name__ for c in ours}
    assert {"ConfigError", "LLMError", "VastError", "DemandError", "ToolInputError"} <= names
    doc = errors.__doc__ or ""
    missing = sorted(n for n in names if f" {n} " not in doc)
    assert missing == [], f"add these to the tree in agent/errors.py: {missing}"


def test_a_missing_optional_package_names_the_extra_to_install(tmp_path):
    """With psycopg hidden, a log on PostgreSQL fails with one line naming fleet-agent[postgres]."""
    (tmp_path / "psycopg.py").write_text("raise ImportError('hidden for this test', name='psycopg')\n")
    code = ("from agent.config import PgTarget\nfrom agent.store.log import EventLog\nfrom agent.errors import ConfigError\n"
            "try:\n    EventLog(PgTarget('postgresql://u@127.0.0.1:1/db', 'fleet-a'))\n"
            "except ConfigError as e:\n    print(e)\n    raise SystemExit(3)\n")
    r = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(tmp_path)},
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "pip install 'fleet-agent[postgres]'" in r.stdout and "storage.url" in r.stdout
