"""``fixed-batch``: TF-Serving-style batching. Written in
``scheduling/fixed_batch_core.py``, whose docstring says how it batches and dispatches.

The class registered is that file's compiled build where the package was built with
Cython (``setup.py``), else the Python file's; ``HETSERVE_PURE_PYTHON=1`` asks for the
Python file even where both are there; ``COMPILED`` says which one this process took."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hetserve.core import heaps, records
from hetserve.scheduling.protocol import register

__all__ = ["COMPILED", "FixedBatch", "core"]

# (it cimports the idle sets and ``core.records``' C: taken only beside the heaps' build)
core, COMPILED = heaps.build_beside("hetserve.scheduling.fixed_batch_core", *records.LAYOUT)

if TYPE_CHECKING:  # (the same class, as a type checker reads it)
    from hetserve.scheduling.fixed_batch_core import FixedBatch
else:
    FixedBatch = register("fixed-batch")(core.FixedBatch)
