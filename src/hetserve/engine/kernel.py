"""The engine kernel, one state machine for requests, batches and stages, driven by both
engines (``docs/design.md``, "Engines"); it is written in ``engine/kernel_core.py`` (see
its docstring for the states, entry points and faults).

:class:`Kernel` is the compiled build of that file where the package was built with
Cython (``setup.py``) and the entities are compiled too (``engine.entities``: the
compiled kernel reads them as C structs), else the Python file itself.
``HETSERVE_PURE_PYTHON=1`` asks for the Python file even where both are there;
``COMPILED`` says which one this process took."""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

from hetserve.core import records
from hetserve.core.compiled import python_module
from hetserve.engine import deadlines, entities
from hetserve.scheduling import policy_core

__all__ = ["COMPILED", "Kernel", "core"]

# (by name: the Python file is imported only where the build is not taken)
_PURE = "hetserve.engine.kernel_core"


def _core() -> tuple[ModuleType, bool]:
    """The compiled build where there is one (``entities.build_beside``; it cimports
    ``core.records``' inline C too, and the deadline watch's class: taken only beside
    that class's build, as it is now)."""
    if not deadlines.COMPILED:
        return python_module(_PURE), False
    return entities.build_beside(_PURE, *records.LAYOUT, *policy_core.LAYOUT, *deadlines.LAYOUT)


core, COMPILED = _core()

if TYPE_CHECKING:  # (the same class, as a type checker reads it)
    from hetserve.engine.kernel_core import Kernel
else:
    Kernel = core.Kernel
