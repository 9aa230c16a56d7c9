"""The kernel's entities (``engine.kernel``): a worker's slot, a dispatched batch, one route
step of it; and the link models (``engine.links``: lanes, host links). Plain objects with
fixed attributes, which the kernel changes and executors and observers read (an executor
also keeps its own per-step data in ``Task.run``); written in
``engine/entities_core.py``.

These are that file's compiled build where the package was built with Cython
(``setup.py``), else the Python file's classes; ``HETSERVE_PURE_PYTHON=1`` asks for the
Python file even where both are there; ``COMPILED`` says which one this process took
(the compiled kernel and recorder run only beside the compiled entities, and these only
beside the compiled keyed heaps, ``core/heaps.py``)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from hetserve.core import heaps
from hetserve.core.compiled import build_of, python_module

__all__ = [
    "COMPILED", "Batch", "HostLinks", "LinkTable", "ObserverCall", "ObserverCore", "Slot",
    "StageStarter", "Task", "add_task", "build_beside", "core", "new_batch", "new_task",
    "route_steps", "starter_of", "tasks_of",
]  # fmt: skip


# (by name: the Python file is imported only where the build is not taken)
core, COMPILED = heaps.build_beside("hetserve.engine.entities_core")


def build_beside(pure: ModuleType | str, *layouts: Path) -> tuple[ModuleType, bool]:
    """The compiled build of the Python module ``pure`` (``core.compiled.build_of``) for a
    module that reads the entities' C layout (it ``cimport``s them): taken only beside
    the compiled entities, and only where it was built from its file as it is now and
    against their ``.pxd`` and the keyed heaps' files as they are now (the entities
    ``cimport`` those), and ``layouts`` (other ``.pxd`` files it cimports); else
    ``pure``. And whether it is the compiled one. (The kernel, the modelled executor and
    the simulator's ledger.)"""
    if not COMPILED:
        return python_module(pure), False
    pxd = Path(__file__).with_name("entities_core_c.pxd")
    return build_of(pure, pxd, *heaps.LAYOUT, *layouts)


if TYPE_CHECKING:  # (the same classes, as a type checker reads them)
    from hetserve.engine.entities_core import (
        Batch,
        HostLinks,
        LinkTable,
        ObserverCall,
        ObserverCore,
        Slot,
        StageStarter,
        Task,
        add_task,
        new_batch,
        new_task,
        route_steps,
        starter_of,
        tasks_of,
    )
else:
    Batch, LinkTable, Slot, Task = core.Batch, core.LinkTable, core.Slot, core.Task
    HostLinks, ObserverCall, ObserverCore = core.HostLinks, core.ObserverCall, core.ObserverCore
    new_batch, new_task = core.new_batch, core.new_task
    add_task, tasks_of, route_steps = core.add_task, core.tasks_of, core.route_steps
    StageStarter, starter_of = core.StageStarter, core.starter_of
