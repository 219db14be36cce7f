"""A module imported at its first use instead of with the module that names it.

``hashlib = lazy.module("hashlib", globals())`` binds a stand-in under ``hashlib``; the first attribute
read from it imports the module and rebinds the name to the module itself in that namespace, so every
later use is an ordinary global lookup. Type checkers are shown the plain import::

    if TYPE_CHECKING:
        import hashlib
    else:
        hashlib = lazy.module("hashlib", globals())
"""

from __future__ import annotations

import sys
from types import ModuleType

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class _Lazy:
    __slots__ = ("_name", "_namespace")

    def __init__(self, name: str, namespace: dict[str, Any]) -> None:
        self._name, self._namespace = name, namespace

    def __getattr__(self, attr: str) -> Any:
        mod = import_module(self._name)
        binding = self._name.rpartition(".")[2]
        if self._namespace.get(binding) is self:
            self._namespace[binding] = mod
        return getattr(mod, attr)

    def __repr__(self) -> str:
        return f"<module {self._name!r}, imported at first use>"


def import_module(name: str) -> ModuleType:
    """``importlib.import_module(name)`` for an absolute name, through the import statement's own machinery:
    without importing importlib's package (and with it warnings), which a command need not load."""
    __import__(name)
    return sys.modules[name]


def module(name: str, namespace: dict[str, Any]) -> ModuleType:
    """A stand-in for the module ``name``, bound in ``namespace`` under its last dotted part."""
    return _Lazy(name, namespace)  # type: ignore[return-value]
