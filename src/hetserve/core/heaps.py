"""Keyed heaps (``core/heaps_core.py``): ``push`` and ``pop`` for ``heapq`` heaps of
tuples ordered by their first two items (a time or deadline, then a number no other entry
has); ``pop_edf``, the most urgent requests of a deadline queue whose rows fit
(``pop_first``, where each is one row); ``bisect_s``, the largest batch of a latency
table within a time; ``IdleSet``, a set of places as words of 64 bits (schedulers'
idle workers); and ``IdMap``, a map by integer id (the kernel's batches).

Where the package was built with Cython (``setup.py``) these are that file's compiled
build, which compares the two keys as C numbers; else ``heapq``'s own functions and the
Python file's ``pop_edf`` (the same heaps, entry for entry). ``HETSERVE_PURE_PYTHON=1``
asks for the Python even where both are there; ``COMPILED`` says which one this process
took. A compiled module that ``cimport``s them is taken only beside this build
(:func:`build_beside`)."""

from __future__ import annotations

import bisect
import heapq
from pathlib import Path
from types import ModuleType

from hetserve.core import records
from hetserve.core.compiled import build_of, python_module

__all__ = [
    "COMPILED", "LAYOUT", "EventHeap", "IdMap", "IdleSet", "bisect_s", "build_beside", "core",
    "pop", "pop_edf", "pop_first", "push",
]  # fmt: skip

# (by name: the Python file is imported only where the build is not taken; it cimports
# ``core.records``' C)
core, COMPILED = build_of("hetserve.core.heaps_core", *records.LAYOUT)
#: what a build that ``cimport``s this one was made against (``core.compiled.build_of``):
#: the declarations it calls (a change to the Python file alone rebuilds this build only)
LAYOUT = (Path(__file__).with_name("heaps_core_c.pxd"), *records.LAYOUT)

if COMPILED:
    push, pop, bisect_s = core.push, core.pop, core.bisect_s
else:  # (``bisect_right`` is the Python file's ``bisect_s``, in C)
    push, pop, bisect_s = heapq.heappush, heapq.heappop, bisect.bisect_right
pop_edf, pop_first = core.pop_edf, core.pop_first
#: a clock's callbacks by time (``heaps_core.EventHeap``: compiled, C numbers in buffers)
EventHeap = core.EventHeap
#: a set of places 0..n-1 as words of 64 bits (``heaps_core.IdleSet``: schedulers' idle
#: workers)
IdleSet = core.IdleSet
#: a map by integer id, a dict's behaviour (``heaps_core.IdMap``: compiled, the ids C
#: integers in an open-addressed table; the kernel's batches)
IdMap = core.IdMap


def build_beside(pure: ModuleType | str, *layouts: Path) -> tuple[ModuleType, bool]:
    """The compiled build of the Python module ``pure`` (``core.compiled.build_of``: the
    module or its name) for a module that ``cimport``s these functions: taken only beside
    this build, and only where it was built from its files as they are now, against
    ``LAYOUT`` and ``layouts`` as they are now; else ``pure``. And whether it is the
    compiled one."""
    if not COMPILED:
        return python_module(pure), False
    return build_of(pure, *LAYOUT, *layouts)
