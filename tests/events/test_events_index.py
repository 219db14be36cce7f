"""The index of which module defines which kind (agent.events.kinds.base.MODULES): every kind it names is
defined by the module it names, every kind module's kinds are in it, and a process that reads one kind
imports that kind's module alone."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import agent.events.kinds as kinds_package
from agent.events import KINDS, Version, Vocabulary
from agent.events.columns import INSTANCE_COLUMNS
from agent.events.kinds.base import INDEX, MODULES, STORED_FORMS, UNSEEN, VOCABULARY
from tests.events.test_events_versions import ProbeV1, _r_v1
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


def test_the_kinds_with_stored_forms_are_the_ones_indexed_as_such() -> None:
    """STORED_FORMS names exactly the kinds some version of which stores a smaller form: a row of any other kind
    reads as stored, without its module."""
    VOCABULARY.kinds.load_all()
    assert {kind for kind, _ in VOCABULARY.stored} == STORED_FORMS


def test_a_stored_form_for_a_kind_not_indexed_as_such_fails_at_definition() -> None:
    with pytest.raises(ValueError, match="STORED_FORMS"):
        Vocabulary(stored_forms=()).define("probe.stored", "test-only", Version(1, ProbeV1, _r_v1, stored=INSTANCE_COLUMNS))
    v = Vocabulary(stored_forms=("probe.stored",))
    v.define("probe.stored", "test-only", Version(1, ProbeV1, _r_v1, stored=INSTANCE_COLUMNS))
    assert ("probe.stored", 1) in v.stored


def test_reading_a_kind_without_a_stored_form_imports_no_kind_module() -> None:
    """A model response (no stored form) is read as stored without loading agent.events.kinds.model; a tick's
    observation (stored as columns) loads its module to decode."""
    code = ("import sys, json\n"
            "from agent import events as ev\n"
            "p = ev.decode('model.response', 1, {'usage': {'prompt_tokens': 3}})\n"
            "mid = sorted(m for m in sys.modules if m.startswith('agent.events.kinds.'))\n"
            "ev.decode('tick.started', 1, {})\n"
            "after = sorted(m for m in sys.modules if m.startswith('agent.events.kinds.'))\n"
            "print(json.dumps([p, mid, after]))\n")
    p, mid, after = fresh(code)  # type: ignore[misc]
    assert p == {"usage": {"prompt_tokens": 3}}
    assert mid == ["agent.events.kinds.base"]
    assert after == ["agent.events.kinds.base", "agent.events.kinds.tick"]


def test_the_kinds_that_never_render_are_the_ones_indexed_as_such() -> None:
    """UNSEEN names exactly the kinds no version of which renders: rendering an event of any other kind loads its
    module and asks it."""
    VOCABULARY.kinds.load_all()
    never = {name for name, k in VOCABULARY.kinds.loaded.items() if all(v.render is None for v in k.versions)}
    assert never == UNSEEN


def test_a_rendering_for_a_kind_indexed_as_unseen_fails_at_definition() -> None:
    with pytest.raises(ValueError, match="UNSEEN"):
        Vocabulary(unseen=("probe.unseen",)).define("probe.unseen", "test-only", Version(1, ProbeV1, _r_v1))
    v = Vocabulary(unseen=("probe.unseen",))
    v.define("probe.unseen", "test-only", Version(1, ProbeV1))
    assert "probe.unseen" in v.kinds.loaded


def test_rendering_a_kind_that_never_renders_imports_no_kind_module() -> None:
    """A model request, a tool call, a compaction in the thread render as nothing without loading their modules;
    a tool result loads agent.events.kinds.tools to render."""
    code = ("import sys, json\n"
            "from agent import events as ev\n"
            "from agent.events.event import Event\n"
            "def e(kind, payload):\n"
            "    return Event(1, 'id', '2026-12-01T00:00:00Z', kind, 'system', 1, payload)\n"
            "gone = [ev.render(e(k, {})) for k in ('model.request', 'tool.called', 'context.compacted')]\n"
            "mid = sorted(m for m in sys.modules if m.startswith('agent.events.kinds.'))\n"
            "shown = ev.render(e('tool.result', {'call_id': 'c1', 'name': 'get_balance', 'ok': True, 'output': '{}'}))\n"
            "after = sorted(m for m in sys.modules if m.startswith('agent.events.kinds.'))\n"
            "print(json.dumps([gone, mid, shown is not None, after]))\n")
    gone, mid, shown, after = fresh(code)  # type: ignore[misc]
    assert gone == [None, None, None]
    assert mid == ["agent.events.kinds.base"]
    assert shown and after == ["agent.events.kinds.base", "agent.events.kinds.tools"]
