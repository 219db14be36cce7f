"""The index of which module defines which kind (agent.events.kinds.base.MODULES): every kind it names is
defined by the module it names, every kind module's kinds are in it, and a process that reads one kind
imports that kind's module alone."""

from __future__ import annotations

import importlib
import pkgutil

import agent.events.kinds as kinds_package
from agent.events import KINDS
from agent.events.kinds.base import INDEX, MODULES, VOCABULARY
from tests.test_lazy import fresh


def test_every_indexed_kind_resolves_to_its_module() -> None:
    for name, module in INDEX.items():
        k = KINDS[name]
        assert k.name == name
        assert VOCABULARY.kinds.defined_in[name] == module, name


def test_every_kind_module_is_in_the_index() -> None:
    """Import every module of the package, as a new kind module would be: each kind defined is indexed under
    the module that defined it, and no module of the package is left out of MODULES."""
    modules = {m.name for m in pkgutil.iter_modules(kinds_package.__path__)} - {"base"}
    for m in modules:
        importlib.import_module(f"agent.events.kinds.{m}")
    assert set(MODULES) == modules
    assert VOCABULARY.kinds.defined_in == INDEX
    assert sorted(KINDS) == sorted(INDEX)
    assert len(KINDS) == len(INDEX)


def test_unknown_kind_is_not_in_the_mapping() -> None:
    assert "no.such_kind" not in KINDS
    assert KINDS.get("no.such_kind") is None


def test_reading_one_kind_imports_its_module_alone() -> None:
    code = ("import sys, json\n"
            "from agent import events as ev\n"
            "before = sorted(m for m in sys.modules if m.startswith('agent.events.kinds.'))\n"
            "v = ev.KINDS['alert.raised'].version\n"
            "ev.decode('alert.raised', v, {})\n"
            "after = sorted(m for m in sys.modules if m.startswith('agent.events.kinds.'))\n"
            "print(json.dumps([before, after]))\n")
    before, after = fresh(code)  # type: ignore[misc]
    assert before == ["agent.events.kinds.base"]
    assert after == ["agent.events.kinds.alerts", "agent.events.kinds.base"]
