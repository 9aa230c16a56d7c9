"""``flex``, ``flex-np`` and ``clockwork``: Shepherd's online schedulers for a serving
group, and the Clockwork baseline. Written in ``scheduling/flex_core.py``, whose docstring
says how they batch, preempt and drop.

The classes registered are that file's compiled build where the package was built with
Cython (``setup.py``), else the Python file's; ``HETSERVE_PURE_PYTHON=1`` asks for the
Python file even where both are there; ``COMPILED`` says which one this process took."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hetserve.core import heaps, records
from hetserve.scheduling.protocol import register

__all__ = [
    "COMPILED", "Clockwork", "Flex", "FlexNP", "GroupScheduler", "GroupWorker", "ModelQueue",
    "core",
]  # fmt: skip

# (it cimports the keyed heaps and ``core.records``' C: taken only beside the heaps' build)
core, COMPILED = heaps.build_beside("hetserve.scheduling.flex_core", *records.LAYOUT)

if TYPE_CHECKING:  # (the same classes, as a type checker reads them)
    from hetserve.scheduling.flex_core import (
        Clockwork,
        Flex,
        FlexNP,
        GroupScheduler,
        GroupWorker,
        ModelQueue,
    )
else:
    GroupScheduler, GroupWorker, ModelQueue = core.GroupScheduler, core.GroupWorker, core.ModelQueue
    Flex = register("flex")(core.Flex)
    FlexNP = register("flex-np")(core.FlexNP)
    Clockwork = register("clockwork")(core.Clockwork)
