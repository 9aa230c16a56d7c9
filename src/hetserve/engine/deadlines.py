"""Held requests by deadline, for the kernel's drops at the deadline. Written in
``engine/deadlines_core.py``, whose docstring says how they are kept.

The class exported is that file's compiled build where the package was built with Cython
(``setup.py``), else the Python file's; ``HETSERVE_PURE_PYTHON=1`` asks for the Python file
even where both are there; ``COMPILED`` says which one this process took."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from hetserve.core import heaps, records

__all__ = ["COMPILED", "LAYOUT", "Deadlines", "core"]

#: what a build that ``cimport``s this one was made against (``core.compiled``; the
#: kernel's): its files
_HERE = Path(__file__)
LAYOUT = (_HERE.with_name("deadlines_core.py"), _HERE.with_name("deadlines_core_c.pxd"))

# (it cimports the keyed heaps, and ``core.records``' inline C: taken only beside the heaps'
# build, both as they are now)
core, COMPILED = heaps.build_beside("hetserve.engine.deadlines_core", *records.LAYOUT)

if TYPE_CHECKING:  # (the same class, as a type checker reads it)
    from hetserve.engine.deadlines_core import Deadlines
else:
    Deadlines = core.Deadlines
