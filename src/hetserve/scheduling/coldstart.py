"""``coldstart``: many model instances on few GPUs, cold starts, LRU residency (DeepPlan's
serving model, after Clockwork). Written in ``scheduling/coldstart_core.py``, whose
docstring says how it routes, batches, loads and evicts.

The class registered is that file's compiled build where the package was built with
Cython (``setup.py``), else the Python file's; ``HETSERVE_PURE_PYTHON=1`` asks for the
Python file even where both are there; ``COMPILED`` says which one this process took."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hetserve.core import records
from hetserve.core.compiled import build_of
from hetserve.scheduling import policy_core
from hetserve.scheduling.protocol import register

__all__ = ["COMPILED", "ColdStart", "core"]

# (it cimports ``core.records``' C and ``scheduling.policy_core``'s class)
core, COMPILED = build_of(
    "hetserve.scheduling.coldstart_core", *records.LAYOUT, *policy_core.LAYOUT
)

if TYPE_CHECKING:  # (the same class, as a type checker reads it)
    from hetserve.scheduling.coldstart_core import ColdStart
else:
    ColdStart = register("coldstart")(core.ColdStart)
