"""The modelled executor: a stage takes the latency model's time, as in Shepherd's and
Clockwork's emulated workers; one executor for the simulator and for the runtime's
``--emulate``. Written in ``engine/modelled_core.py`` (its docstring says what a stage and
a load take), with the residency it models (``engine.residency``) and its stage start.

These are that file's compiled build where the package was built with Cython
(``setup.py``) and the entities are compiled too (``engine.entities``: the compiled build
reads them as C structs), else the Python file's; ``HETSERVE_PURE_PYTHON=1`` asks for the
Python file even where both are there; ``COMPILED`` says which one this process took."""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

from hetserve.core import records
from hetserve.engine import entities

__all__ = ["COMPILED", "JITTERS", "ModelledExecutor", "block_times", "busy_j", "core"]


def _core() -> tuple[ModuleType, bool]:
    """The compiled build where there is one (``entities.build_beside``)."""
    return entities.build_beside("hetserve.engine.modelled_core", *records.LAYOUT)


core, COMPILED = _core()

if TYPE_CHECKING:  # (the same names, as a type checker reads them)
    from hetserve.engine.modelled_core import JITTERS, ModelledExecutor, block_times, busy_j
else:
    JITTERS, ModelledExecutor = core.JITTERS, core.ModelledExecutor
    block_times, busy_j = core.block_times, core.busy_j
