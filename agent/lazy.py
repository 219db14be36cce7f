"""Packages whose public names are imported from their modules on first use (PEP 562), so importing one of
their modules (or the package, for one name) does not import all the others.

A package calls ``lazy_package(__name__, {"module": ("name", ...), ...})`` and imports the same names under
``TYPE_CHECKING`` for type checkers. A name is looked up in its module the first time it is asked for, and kept.
A submodule named like one of the package's names (``agent.context.load`` and its ``load``) does not take the
name over when it is imported: the package's ``load`` is the function, as when the package imported it eagerly.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Mapping
from typing import Any


class LazyPackage(types.ModuleType):
    """A package module whose exported names load on first use (``lazy_package``)."""

    _lazy_where: dict[str, str]

    def __getattr__(self, name: str) -> Any:
        where = self.__dict__.get("_lazy_where", {})
        module = where.get(name)
        if module is None:  # a submodule not imported yet (``feedback.alerts``)
            try:
                return importlib.import_module(f"{self.__name__}.{name}")
            except ModuleNotFoundError as e:
                if e.name != f"{self.__name__}.{name}":
                    raise
                raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}") from None
        value = getattr(importlib.import_module(f"{self.__name__}.{module}"), name)
        self.__dict__[name] = value
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, types.ModuleType) and name in self.__dict__.get("_lazy_where", {}):
            return  # the import system setting a submodule over one of the package's names: the name stays
        super().__setattr__(name, value)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self.__dict__.get("_lazy_where", {})))


def lazy_package(package: str, exports: Mapping[str, tuple[str, ...]]) -> None:
    """Make ``package`` (its ``__name__``) load each name of ``exports`` (module -> names) from that module on
    first use."""
    mod = sys.modules[package]
    mod.__dict__["_lazy_where"] = {name: module for module, names in exports.items() for name in names}
    mod.__class__ = LazyPackage
