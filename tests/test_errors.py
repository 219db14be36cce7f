"""The error tree: agent/errors.py's docstring draws every FleetAgentError the project defines."""

from __future__ import annotations

import importlib
import pkgutil
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
