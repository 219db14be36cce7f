"""Kinds, their versions, upcasters, and versioned rendering.

A kind is a stable name with a list of versions, 1..N; N is the version new
appends record. Each version names its payload class and how an event stored
under it renders. Renderings are history: once an event has been rendered into
a request and hashed, the bytes it rendered to must never change, so

- a version's renderer is frozen once released (its golden file pins it);
- changing what a kind renders to means a new version with a new renderer;
  events stored under older versions keep rendering through theirs;
- changing only the payload shape means a new version whose predecessor is
  declared ``render=AS_NEXT``: an event stored under it is upcast and rendered
  by the next version's renderer, and its golden file proves the bytes did not
  move.

Upcasters (as in pyeventsourcing) upgrade a stored payload from version n-1 to
n. They run on copies when an event is read through ``upcast``/``payload_of`` or
rendered through an ``AS_NEXT`` version; stored rows are never rewritten (the
hash chain covers them).
"""

from __future__ import annotations

import copy
import importlib
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field, replace
from typing import Any, Final, Generic, TypeVar

from agent.errors import PayloadError
from agent.events.event import Event, JsonObject, Message
from agent.events.payload import FieldSpec, Payload
from agent.events.stored import Stored as Stored

P = TypeVar("P", bound=Payload)
Renderer = Callable[[Event, Any], "Message | None"]
"""How an event stored under one version renders: (event, its typed payload) -> message or None."""
Indexer = Callable[[Event, Any], str]
"""What the full-text index holds for an event stored under a version the model does not see."""
Upcaster = Callable[[JsonObject], JsonObject]
"""Upgrades a payload of version n-1 to version n; gets a copy it may change, returns the new payload."""


class _AsNext:
    def __repr__(self) -> str:
        return "AS_NEXT"


AS_NEXT: Final = _AsNext()
"""A version's ``render``: events stored under it are upcast and rendered by the next version."""


@dataclass(frozen=True)
class Version(Generic[P]):
    """One version of a kind: payload class, rendering, and the upcaster from the version before."""

    number: int
    payload: type[P]
    render: Callable[[Event, P], Message | None] | _AsNext | None = None
    upcast: Upcaster | None = None  # from number-1; required for every version after 1
    search: Indexer | None = None   # not model-visible: the index text (default: the kind and payload JSON)
    stored: Stored | None = None    # the row holds a smaller form than readers see (default: the payload)

    @property
    def visible(self) -> bool:
        return self.render is not None


@dataclass(frozen=True)
class Kind:
    """A kind of event: its name, what it records, and its versions (the last is current)."""

    name: str
    doc: str
    versions: tuple[Version[Any], ...]
    vocabulary: Vocabulary = field(repr=False, compare=False)

    @property
    def version(self) -> int:
        """The version new appends record."""
        return self.versions[-1].number

    @property
    def current(self) -> Version[Any]:
        return self.versions[-1]

    @property
    def payload(self) -> type[Payload]:
        return self.current.payload

    @property
    def fields(self) -> tuple[FieldSpec, ...]:
        return self.payload.fields_of()

    @property
    def required(self) -> dict[str, str]:
        """Required fields of the current version and their JSON types ('str', 'int?', ...)."""
        return {f.name: f.type for f in self.fields if f.required}

    @property
    def optional(self) -> dict[str, str]:
        return {f.name: f.type for f in self.fields if not f.required}

    @property
    def render(self) -> Callable[[Event], Message | None] | None:
        """How a new event of this kind renders; None when the current version is not model-visible."""
        if not self.current.visible:
            return None
        return self.vocabulary.render

    def at(self, version: int) -> Version[Any]:
        if 1 <= version <= len(self.versions):
            return self.versions[version - 1]
        raise PayloadError(f"{self.name}: stored version {version} is unknown here (this build knows "
                           f"versions 1..{self.version}); upgrade fleet-agent to read it")

    def validate(self, payload: object) -> None:
        """PayloadError naming this kind and the field unless ``payload`` fits the current version."""
        self.payload.check(self.name, payload)


class Kinds(MutableMapping[str, Kind]):
    """Every kind by name, each defined when first asked for: ``index`` names the module that defines a kind
    (``agent.events.kinds.base.INDEX``), imported on the first use of one of its kinds, so a command that
    reads a few kinds does not load them all. Iterating (or ``len``) loads every module of the index; names
    come in sorted order."""

    def __init__(self, index: Mapping[str, str] | None = None) -> None:
        self.index: Mapping[str, str] = index or {}
        self.loaded: dict[str, Kind] = {}
        self.defined_in: dict[str, str] = {}  # kind -> the module whose import defined it

    def load(self, name: str) -> Kind | None:
        """The kind called ``name``, its module imported first if it is not yet; None when there is none."""
        k = self.loaded.get(name)
        if k is None and name in self.index:
            importlib.import_module(self.index[name])
            k = self.loaded.get(name)
        return k

    def load_all(self) -> None:
        for module in sorted(set(self.index.values())):
            importlib.import_module(module)

    def __getitem__(self, name: str) -> Kind:
        k = self.load(name)
        if k is None:
            raise KeyError(name)
        return k

    def __setitem__(self, name: str, kind: Kind) -> None:
        """Put ``kind`` in ``name``'s place (a test's edited rendering), its module loaded first so that a later
        first use does not define it over ``kind``."""
        self.load(name)
        self.loaded[name] = kind

    def __delitem__(self, name: str) -> None:
        del self.loaded[name]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.load(name) is not None

    def __iter__(self) -> Iterator[str]:
        self.load_all()
        return iter(sorted(self.loaded))

    def __len__(self) -> int:
        self.load_all()
        return len(self.loaded)


class Vocabulary:
    """The registry of kinds and their upcasters. ``index``: kind name -> the module that defines it, for
    kinds defined on first use (``Kinds``). ``stored_forms``: the kinds with a version whose row holds a smaller
    form (``Version.stored``); when given, reading a row of any other kind returns it as stored without
    importing its module, and defining a stored form for a kind not named there fails. ``unseen``: the kinds
    no version of which renders for the model; rendering one returns None without importing its module, and
    defining a rendering version for a kind named there fails."""

    def __init__(self, index: Mapping[str, str] | None = None, *, stored_forms: Iterable[str] | None = None,
                 unseen: Iterable[str] = ()) -> None:
        self.kinds = Kinds(index)
        self.stored_forms = None if stored_forms is None else frozenset(stored_forms)
        self.unseen = frozenset(unseen)
        self.upcasters: dict[tuple[str, int], Upcaster] = {}  # (kind, from version) -> upgrade to +1
        self.stored: dict[tuple[str, int], Stored] = {}  # (kind, version) -> its stored form, where it has one

    def define(self, name: str, doc: str, *versions: Version[Any]) -> Kind:
        """Add a kind. Versions are numbered 1..N in order; every version after 1 has an upcaster; the
        current one renders by itself (it has no next)."""
        if name in self.kinds.loaded:
            raise ValueError(f"event kind {name!r} is defined twice")
        if [v.number for v in versions] != list(range(1, len(versions) + 1)):
            raise ValueError(f"{name}: versions must be numbered 1..N in order")
        for v in versions:
            v.payload.fields_of()  # a field with a non-JSON type fails here, at import
            if v.render is not None and name in self.unseen:
                raise ValueError(f"{name} v{v.number} renders for the model: take {name!r} out of the index of "
                                 "kinds the model never sees (UNSEEN, agent/events/kinds/base.py)")
            if v.number > 1:
                if v.upcast is None:
                    raise ValueError(f"{name} v{v.number}: needs an upcaster from v{v.number - 1}")
                self.upcasters[(name, v.number - 1)] = v.upcast
            if v.stored is not None:
                if self.stored_forms is not None and name not in self.stored_forms:
                    raise ValueError(f"{name} v{v.number} stores a smaller form: name {name!r} in the index of "
                                     "kinds with stored forms (STORED_FORMS, agent/events/kinds/base.py)")
                self.stored[(name, v.number)] = v.stored
        if versions[-1].render is AS_NEXT:
            raise ValueError(f"{name} v{versions[-1].number}: the current version has no next to render as")
        k = Kind(name, doc, tuple(versions), self)
        self.kinds.loaded[name] = k
        self.kinds.defined_in[name] = sys._getframe(1).f_globals.get("__name__", "?")
        return k

    def decode(self, kind: str, version: int, stored: JsonObject) -> JsonObject:
        """The payload readers see for a row of ``kind`` and ``version`` holding ``stored`` (itself, unless
        the version stores a smaller form)."""
        if kind not in self.kinds.loaded and (self.stored_forms is None or kind in self.stored_forms):
            self.kinds.load(kind)  # its stored forms are defined with it
        form = self.stored.get((kind, version))
        return stored if form is None else form.decode(stored)

    def encode(self, kind: str, version: int, payload: JsonObject) -> JsonObject:
        """What a row of ``kind`` and ``version`` holds for ``payload`` (``decode`` reversed)."""
        if kind not in self.kinds.loaded:
            self.kinds.load(kind)
        form = self.stored.get((kind, version))
        return payload if form is None else form.encode(payload)

    def search(self, event: Event) -> str | None:
        """The full-text index text the stored version of ``event`` gives when it is not model-visible
        (``Version.search``); None when the version has none (or the kind is unknown here)."""
        k = self.kinds.get(event.kind)
        if k is None:
            return None
        v = k.at(event.version)
        return None if v.search is None else v.search(event, v.payload.parse(k.name, event.payload))

    def kind(self, name: str) -> Kind:
        try:
            return self.kinds[name]
        except KeyError:
            import difflib  # the hint of an error: every reader imports this module

            near = difflib.get_close_matches(name, self.kinds, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise PayloadError(f"unknown event kind {name!r}{hint}") from None

    def upcast_payload(self, name: str, version: int, payload: JsonObject, to: int | None = None) -> JsonObject:
        """``payload`` (stored under ``version``) upgraded to version ``to`` (default: current). The
        stored payload is not touched: upcasters work on a deep copy."""
        k = self.kind(name)
        target = k.version if to is None else to
        k.at(version)
        k.at(target)
        if version > target:
            raise PayloadError(f"{name}: cannot downcast version {version} to {target}")
        out = payload
        for n in range(version, target):
            out = self.upcasters[(name, n)](copy.deepcopy(out))
        return out

    def upcast(self, event: Event) -> Event:
        """``event`` as the current version of its kind would have recorded it: for readers of payload
        fields. Render the stored event, not this one: renderings follow the stored version."""
        k = self.kind(event.kind)
        if event.version == k.version:
            return event
        payload = self.upcast_payload(event.kind, event.version, event.payload)
        return replace(event, payload=payload, version=k.version)

    def payload_of(self, event: Event) -> Payload:
        """The typed payload of ``event``, upcast to the current version of its kind."""
        k = self.kind(event.kind)
        return k.payload.parse(event.kind, self.upcast_payload(event.kind, event.version, event.payload))

    def render(self, event: Event) -> Message | None:
        """The chat message the model sees for ``event``, or None if it is not model-visible.

        The stored version picks the rendering: its own renderer, or (``AS_NEXT``) the payload upcast
        one version at a time until a version that renders by itself. A kind no version of which renders
        (``unseen``) is not loaded to say so."""
        if event.kind in self.unseen:
            return None
        k = self.kinds.get(event.kind)
        if k is None:
            return None
        number, payload = event.version, event.payload
        v = k.at(number)
        while isinstance(v.render, _AsNext):
            payload = self.upcasters[(k.name, number)](copy.deepcopy(payload))
            number += 1
            v = k.at(number)
        if v.render is None:
            return None
        return v.render(event, v.payload.parse(k.name, payload))

    def versions(self) -> Iterable[tuple[Kind, Version[Any]]]:
        """Every (kind, version) pair, in kind-name then version order."""
        for name in sorted(self.kinds):
            k = self.kinds[name]
            for v in k.versions:
                yield k, v
