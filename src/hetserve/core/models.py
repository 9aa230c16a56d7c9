"""The models a run can name: the shipped ones (the zoo's graphs and layer tables) and,
beside them, the user's from a :class:`ModelSource` (a model repository,
``hetserve.repository``).

A :class:`ModelCatalog` is an object passed explicitly — to ``build_setup``, to a
:class:`~hetserve.planning.registry.PlanRequest`, to the profilers and to the workers'
model builder — never a module-level "active repository": two runs in one process (a
test, a controller rebuilding a run) can name different repositories side by side. The
command line makes one per invocation from ``--model-repository``; :data:`ZOO` is the
catalog without a source.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from hetserve.core.errors import unknown
from hetserve.core.graph import ModelGraph, get_graph, shipped_models
from hetserve.core.layertable import LayerTable, get_layer_table, shipped_layer_tables


class ModelSource(Protocol):
    """Models beyond the shipped ones, named like them (a model repository)."""

    def names(self) -> list[str]:
        """The models' names, as a user writes them."""
        ...

    def __contains__(self, name: str) -> bool:
        """Whether ``name`` is one of this source's models (case-insensitive)."""
        ...

    def graph(self, name: str) -> ModelGraph:
        """The model's graph (layers, cuts, tensors), as the planners and engines read it."""
        ...

    def layer_table(self, name: str) -> LayerTable:
        """The model's per-leaf-module table (DeepPlan's layer-wise plans read it)."""
        ...

    def build(self, name: str, version: int | None = None) -> Any:
        """The runnable model (a ``zoo.layered.LayeredModel``) of ``version`` (default:
        the newest served one), with its own weights. Called by workers, which may live in
        other processes: a source must pickle (a repository pickles as its root)."""
        ...


def _key(name: str) -> str:
    return name.lower().replace("_", "-")


@dataclass(frozen=True)
class ModelCatalog:
    """The shipped models plus ``source``'s (None: the shipped ones only)."""

    source: ModelSource | None = None

    def _in_source(self, name: str) -> bool:
        return (
            self.source is not None and _key(name) not in shipped_models() and name in self.source
        )

    def __contains__(self, name: str) -> bool:
        return _key(name) in shipped_models() or self._in_source(name)

    def names(self) -> list[str]:
        """Every model's name: the source's, then the shipped ones."""
        return [*(self.source.names() if self.source is not None else []), *shipped_models()]

    def graph(self, name: str) -> ModelGraph:
        """A model's graph by name (shipped models case-insensitively) or a graph JSON file
        by path."""
        if name.endswith(".json") or _key(name) in shipped_models():
            return get_graph(name)
        if self._in_source(name):
            assert self.source is not None
            return self.source.graph(name)
        raise unknown("model", name, self.names())

    def layer_table(self, name: str) -> LayerTable:
        """A model's layer table by name, or a layer-table JSON file by path."""
        if name.endswith(".json") or _key(name) in shipped_layer_tables():
            return get_layer_table(name)
        if self._in_source(name):
            assert self.source is not None
            return self.source.layer_table(name)
        raise unknown("layer table of model", name, shipped_layer_tables())

    def has_layer_table(self, name: str) -> bool:
        """Whether :meth:`layer_table` has a table for the model ``name``."""
        return _key(name) in shipped_layer_tables() or self._in_source(name)


ZOO = ModelCatalog()
"""The shipped models alone (immutable)."""
