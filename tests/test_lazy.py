"""Packages that load their names on first use (agent/lazy.py): each name is the one its module defines, a
submodule named like a name does not take it over, and importing one module leaves the others unloaded."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("agent.context", "agent.feedback")


def fresh(code: str) -> object:
    """What ``code``, run in a new interpreter with this checkout first, prints as JSON."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                         env={"PYTHONPATH": str(ROOT), "PATH": ""}).stdout
    return json.loads(out)


@pytest.mark.parametrize("name", PACKAGES)
def test_every_name_is_its_modules(name: str) -> None:
    pkg = importlib.import_module(name)
    for module, names in pkg.EXPORTS.items():
        mod = importlib.import_module(f"{name}.{module}")
        for n in names:
            assert getattr(pkg, n) is getattr(mod, n), n
    assert set(pkg.__all__) <= {n for names in pkg.EXPORTS.values() for n in names} | set(pkg.__dict__)


def test_a_submodule_named_like_a_name_does_not_take_it() -> None:
    code = ("import json, sys, types\nimport agent.context.load\nimport agent.context.build\nfrom agent import context\n"
            "print(json.dumps([isinstance(context.load, types.FunctionType), isinstance(context.build, types.FunctionType),"
            " context.load is sys.modules['agent.context.load'].load]))")
    assert fresh(code) == [True, True, True]


def test_one_module_leaves_the_others_unloaded() -> None:
    code = ("import sys, json\nfrom agent.feedback import directives\nimport agent.context.cache\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('agent.feedback.', 'agent.context.')))"
            " + ['yaml'] * ('yaml' in sys.modules)))")
    loaded = fresh(code)
    assert isinstance(loaded, list)
    assert "agent.feedback.notes" in loaded and "agent.context.cache" in loaded
    assert not {"agent.feedback.knowledge_editor", "agent.context.build", "agent.context.load", "yaml"} & set(loaded)


def test_a_missing_name_is_an_attribute_error() -> None:
    from agent import feedback

    with pytest.raises(AttributeError):
        _ = feedback.no_such_name
    assert isinstance(feedback.alerts, types.ModuleType)
