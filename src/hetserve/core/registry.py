"""One registry shape for every pluggable kind (schedulers, planners, studies, executors,
latency sources): things of one kind by name.

A thing registers itself in its own module (``@REGISTRY.register("name")`` on a class or
function, or ``REGISTRY.register("name", thing)``). The built-ins are named up front with
the module that registers each, and imported on first use, so that a registry's module
imports none of them (and listing the names imports nothing). An unknown name fails with
one line that names the kind and suggests the nearest known names.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar, overload

from hetserve.core.errors import unknown

T = TypeVar("T")


class Registry(Generic[T]):
    """Things of one kind by name (module docstring)."""

    def __init__(self, kind: str, builtin: Mapping[str, str] | None = None) -> None:
        """``kind``: what errors call the things (``"scheduler"``); ``builtin``: name ->
        the module whose import registers it."""
        self.kind = kind
        # (the caller's mapping itself: a line added to it later counts too)
        self.builtin: Mapping[str, str] = builtin if builtin is not None else {}
        self._items: dict[str, T] = {}

    @overload
    def register(self, name: str) -> Callable[[T], T]: ...

    @overload
    def register(self, name: str, item: T) -> T: ...

    def register(self, name: str, item: Any = None) -> Any:
        """Register ``item`` as ``name`` (or, without ``item``, a decorator that does);
        returns what it registered."""
        if item is not None:
            self._items[name] = item
            return item

        def deco(thing: T) -> T:
            self._items[name] = thing
            return thing

        return deco

    def find(self, name: str) -> T | None:
        """The thing called ``name`` (a built-in's module imported on first use), or None."""
        if name not in self._items and name in self.builtin:
            importlib.import_module(self.builtin[name])
        return self._items.get(name)

    def get(self, name: str) -> T:
        """The thing called ``name``; an unknown name fails with suggestions."""
        found = self.find(name)
        if found is None:
            raise unknown(self.kind, name, self.names())
        return found

    def names(self) -> list[str]:
        """Every name: the built-ins and those registered since (nothing imported)."""
        return sorted({*self.builtin, *self._items})

    def all(self) -> dict[str, T]:
        """Every thing by name, the built-ins loaded: the built-ins in their declared
        order, then the others as they were registered."""
        for name in self.builtin:
            self.find(name)
        order = [*self.builtin, *(n for n in self._items if n not in self.builtin)]
        return {n: self._items[n] for n in order if n in self._items}

    def __contains__(self, name: object) -> bool:
        return name in self._items or name in self.builtin

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())
