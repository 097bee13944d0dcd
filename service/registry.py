"""Name -> object registries filled by decorators, with lazy discovery of a package's modules.

Learners, weak learners, reproductions and benchmark parts register themselves where they are
defined, so adding one means adding one module and touching no shared list.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class UnknownNameError(KeyError):
    """Raised when a registry is asked for a name it does not hold."""

    def __str__(self) -> str:  # KeyError quotes its message; we want it plain
        return str(self.args[0])


class Registry(Generic[T]):
    """A registry of objects addressed by name.

    Parameters
    ----------
    kind : str
        What the registry holds, used in error messages ("learner", "reproduction", ...).
    package : str
        Dotted name of the package whose modules are imported (once) before the first lookup, so
        that their ``@registry.register`` decorators have run.
    """

    def __init__(self, kind: str, package: str) -> None:
        self.kind = kind
        self.package = package
        self._items: dict[str, T] = {}
        self._discovered = False

    def register(self, name: str, *aliases: str) -> Callable[[T], T]:
        """Return a decorator that registers its argument under ``name`` (and ``aliases``)."""

        def deco(obj: T) -> T:
            for key in (name, *aliases):
                if key in self._items and self._items[key] is not obj:
                    raise ValueError(f"{self.kind} {key!r} is registered twice")
                self._items[key] = obj
            return obj

        return deco

    def _discover(self) -> None:
        if self._discovered:
            return
        self._discovered = True
        pkg = importlib.import_module(self.package)
        for mod in pkgutil.walk_packages(pkg.__path__, prefix=f"{self.package}."):
            importlib.import_module(mod.name)

    def get(self, name: str) -> T:
        """Return the object registered as ``name``; raise :class:`UnknownNameError` otherwise."""
        self._discover()
        try:
            return self._items[name]
        except KeyError:
            known = ", ".join(self.names())
            raise UnknownNameError(f"unknown {self.kind} {name!r}; known: {known}") from None

    def names(self) -> list[str]:
        """All registered names (aliases included), sorted."""
        self._discover()
        return sorted(self._items)

    def items(self) -> Iterator[tuple[str, T]]:
        """Pairs (name, object), one per object (first registered name), sorted by name."""
        self._discover()
        seen: set[int] = set()
        for name in sorted(self._items):
            obj = self._items[name]
            if id(obj) not in seen:
                seen.add(id(obj))
                yield name, obj
