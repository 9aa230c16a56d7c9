"""The compiled parts of hetserve, built by Cython; everything else is in pyproject.toml.

Each ``X.py`` below is plain Python, and Cython compiles the same file as the module
``X_c``, typed by ``X_c.pxd`` beside it (its C types):

- ``core/heaps_core.py``: the keyed heaps (``push``/``pop`` comparing two C keys,
  ``pop_edf``) and the latency tables' search (``bisect_s``), which the others
  ``cimport``; ``core/timeline_core.py`` (a cold start's ready times, for
  ``core/coldstart.py``);
- ``engine/deadlines_core.py`` (the held requests by deadline),
  ``engine/entities_core.py`` (the kernel's entities, the link table, the host links),
  ``engine/kernel_core.py`` (the engine kernel) and ``engine/modelled_core.py`` (the
  modelled executor, its residency and stage start);
- ``scheduling/policy_core.py`` (a scheduler's core as the kernel calls it, which the
  kernel and the cores of ``reservation`` and ``coldstart`` ``cimport``),
  ``scheduling/reservation_slots.py`` (the reservation table, which the next one
  ``cimport``s), ``scheduling/reservation_core.py``, ``scheduling/coldstart_core.py``,
  ``scheduling/flex_core.py``, ``scheduling/edf_adaptive_core.py`` and
  ``scheduling/fixed_batch_core.py`` (those schedulers' decisions);
- ``sim/recorder_core.py`` (the simulator's recorder per event);
- and ``sim/csv_cells.pyx``, the simulator's CSV writer, as ``hetserve.sim.csv_cells``
  (without it the ``csv`` module writes the same bytes), compiled as C++ (its first lines
  say so to ``cythonize``) for the C++ library's ``std::to_chars``.

Both are optional: where one cannot be built (no C compiler, no Cython), the install goes
on with a warning and hetserve runs the Python, with the same results (docs/benchmarks.md,
"Issue 41, step 1")."""

import re
from pathlib import Path
from sysconfig import get_config_var

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """``build_ext`` that warns and goes on where an extension fails to compile, and leaves
    it out of what the build copies (setuptools' own ``optional=True`` is not honoured by
    every build path: an editable install still copies the missing file)."""

    def build_extensions(self) -> None:
        failed = []
        for ext in self.extensions:
            try:
                self.build_extension(ext)
            except Exception as err:  # (a compiler missing or failing: any error of its)
                self.warn(f"hetserve: {ext.name} was not built ({err}); {FALLBACK[ext.name]}")
                failed.append(ext)
                # an earlier build of it left in the sources would be imported beside the
                # builds made now, from other sources and C layouts (``MAX_DIMS``): removed,
                # so that the package runs the Python for it
                old = Path(__file__).resolve().parent / "src" / ext.name.replace(".", "/")
                old = old.with_name(old.name + (get_config_var("EXT_SUFFIX") or ""))
                if old.exists():
                    old.unlink()
        for ext in failed:
            self.extensions.remove(ext)


FALLBACK = {
    "hetserve.core.heaps_core_c": (
        "heapq and the Python file src/hetserve/core/heaps_core.py run instead"
    ),
    "hetserve.core.timeline_core_c": (
        "the Python file src/hetserve/core/timeline_core.py runs instead"
    ),
    "hetserve.engine.deadlines_core_c": (
        "the Python file src/hetserve/engine/deadlines_core.py runs instead"
    ),
    "hetserve.engine.entities_core_c": (
        "the Python file src/hetserve/engine/entities_core.py runs instead"
    ),
    "hetserve.engine.kernel_core_c": (
        "the Python file src/hetserve/engine/kernel_core.py runs instead"
    ),
    "hetserve.engine.modelled_core_c": (
        "the Python file src/hetserve/engine/modelled_core.py runs instead"
    ),
    "hetserve.scheduling.coldstart_core_c": (
        "the Python file src/hetserve/scheduling/coldstart_core.py runs instead"
    ),
    "hetserve.scheduling.edf_adaptive_core_c": (
        "the Python file src/hetserve/scheduling/edf_adaptive_core.py runs instead"
    ),
    "hetserve.scheduling.fixed_batch_core_c": (
        "the Python file src/hetserve/scheduling/fixed_batch_core.py runs instead"
    ),
    "hetserve.scheduling.flex_core_c": (
        "the Python file src/hetserve/scheduling/flex_core.py runs instead"
    ),
    "hetserve.scheduling.policy_core_c": (
        "the Python file src/hetserve/scheduling/policy_core.py runs instead"
    ),
    "hetserve.scheduling.reservation_slots_c": (
        "the Python files src/hetserve/scheduling/reservation_slots.py and "
        "reservation_core.py run instead"
    ),
    "hetserve.scheduling.reservation_core_c": (
        "the Python file src/hetserve/scheduling/reservation_core.py runs instead"
    ),
    "hetserve.sim.recorder_core_c": (
        "the Python file src/hetserve/sim/recorder_core.py runs instead"
    ),
    "hetserve.sim.csv_cells": "the csv module writes the simulator's CSV files instead",
}

ENTITIES_PXD = "src/hetserve/engine/entities_core_c.pxd"
HEAPS_PXD = "src/hetserve/core/heaps_core_c.pxd"
SLOTS_PXD = "src/hetserve/scheduling/reservation_slots_c.pxd"
RECORDS_PXD = "src/hetserve/core/records_c.pxd"  # (inline C only: no module of its own)
POLICY_PXD = "src/hetserve/scheduling/policy_core_c.pxd"
# (a build that cimports the policy core is checked against its source too: it is the one
# build that no module takes by name, only through those that cimport it)
POLICY = [POLICY_PXD, "src/hetserve/scheduling/policy_core.py"]
EXTENSIONS = [
    # (name, source, the .pxd files that type it: its own, named for the module, and those
    # it cimports: the entities' C layout, the keyed heaps' functions, the records' inline C)
    ("hetserve.core.heaps_core_c", "src/hetserve/core/heaps_core.py", [HEAPS_PXD, RECORDS_PXD]),
    (
        "hetserve.core.timeline_core_c",
        "src/hetserve/core/timeline_core.py",
        ["src/hetserve/core/timeline_core_c.pxd"],
    ),
    (
        "hetserve.scheduling.policy_core_c",
        "src/hetserve/scheduling/policy_core.py",
        [POLICY_PXD, RECORDS_PXD],
    ),
    (
        "hetserve.engine.deadlines_core_c",
        "src/hetserve/engine/deadlines_core.py",
        ["src/hetserve/engine/deadlines_core_c.pxd", HEAPS_PXD, RECORDS_PXD],
    ),
    (
        "hetserve.engine.entities_core_c",
        "src/hetserve/engine/entities_core.py",
        [ENTITIES_PXD, HEAPS_PXD, RECORDS_PXD],
    ),
    (
        "hetserve.engine.kernel_core_c",
        "src/hetserve/engine/kernel_core.py",
        [
            "src/hetserve/engine/kernel_core_c.pxd",
            ENTITIES_PXD,
            HEAPS_PXD,
            RECORDS_PXD,
            *POLICY,
            "src/hetserve/engine/deadlines_core_c.pxd",
            "src/hetserve/engine/deadlines_core.py",
        ],
    ),
    (
        "hetserve.engine.modelled_core_c",
        "src/hetserve/engine/modelled_core.py",
        ["src/hetserve/engine/modelled_core_c.pxd", ENTITIES_PXD, HEAPS_PXD, RECORDS_PXD],
    ),
    (
        "hetserve.scheduling.coldstart_core_c",
        "src/hetserve/scheduling/coldstart_core.py",
        ["src/hetserve/scheduling/coldstart_core_c.pxd", RECORDS_PXD, *POLICY],
    ),
    (
        "hetserve.scheduling.edf_adaptive_core_c",
        "src/hetserve/scheduling/edf_adaptive_core.py",
        ["src/hetserve/scheduling/edf_adaptive_core_c.pxd", HEAPS_PXD, RECORDS_PXD],
    ),
    (
        "hetserve.scheduling.fixed_batch_core_c",
        "src/hetserve/scheduling/fixed_batch_core.py",
        ["src/hetserve/scheduling/fixed_batch_core_c.pxd", HEAPS_PXD, RECORDS_PXD],
    ),
    (
        "hetserve.scheduling.flex_core_c",
        "src/hetserve/scheduling/flex_core.py",
        ["src/hetserve/scheduling/flex_core_c.pxd", HEAPS_PXD, RECORDS_PXD],
    ),
    (
        "hetserve.scheduling.reservation_slots_c",
        "src/hetserve/scheduling/reservation_slots.py",
        # (it cimports nothing; taken only beside the heaps' build, and so only where it is
        # newer than what the heaps' build is checked against: core.heaps.LAYOUT)
        [SLOTS_PXD, HEAPS_PXD, RECORDS_PXD],
    ),
    (
        "hetserve.scheduling.reservation_core_c",
        "src/hetserve/scheduling/reservation_core.py",
        [
            "src/hetserve/scheduling/reservation_core_c.pxd",
            SLOTS_PXD,
            HEAPS_PXD,
            RECORDS_PXD,
            *POLICY,
        ],
    ),
    (
        "hetserve.sim.recorder_core_c",
        "src/hetserve/sim/recorder_core.py",
        ["src/hetserve/sim/recorder_core_c.pxd", ENTITIES_PXD, HEAPS_PXD, RECORDS_PXD],
    ),
    ("hetserve.sim.csv_cells", "src/hetserve/sim/csv_cells.pyx", []),
]


# The compiled modules index their buffers and lists without Python's checks: no bounds
# check (an index out of range is a bug, never an input: the plain-Python build raises
# there, and the tests run both builds), no negative index counted from the end (write
# ``x[len(x) - 1]``, not ``x[-1]``), no check that a buffer view was set. Issue 41: 6% of
# the PPipe plan's instructions per request and of the NP plan's, 1.5% of DeepPlan's
# (``benchmarks/sim_instructions.py``).
#
# A C function that returns nothing and may raise is declared ``except *`` by default: its
# caller asks ``PyErr_Occurred()`` after every call. The ones called per request return an
# int instead, 0, declared ``except -1`` in their .pxd (the caller tests the value, and
# asks only where it is -1; issue 41: 266 of the PPipe plan's 19,054 instructions per
# request), and the few that cannot raise are ``noexcept``. Called from Python, such a
# method returns 0 where it returned None.
DIRECTIVES = {
    "language_level": 3,
    "boundscheck": False,
    "wraparound": False,
    "initializedcheck": False,
}


def _stale_c(source: str, pxds: list[str]) -> None:
    """Cython regenerates a ``.c`` file when its source changes, not when a ``.pxd`` that
    types a pure-Python source does (it does not follow a ``.pxd`` named for the module):
    such a ``.c`` file is removed here, so that it is made again."""
    c = Path(source).with_suffix(".c")
    if not c.exists():
        return
    if any(Path(p).stat().st_mtime > c.stat().st_mtime for p in pxds):
        c.unlink()
        return
    # made with another ``MAX_DIMS`` (a view's struct says it: ``shape[N]``): made again
    dims = re.search(r"Py_ssize_t shape\[(\d+)\];", c.read_text(errors="replace"))
    if dims is not None and int(dims.group(1)) != MAX_DIMS:
        c.unlink()


# A typed memoryview (``double[::1]``) is a C struct with room for ``buffer_max_dims``
# dimensions: 208 bytes at Cython's default of 8, three or four cache lines in each object
# that holds one. hetserve's are all one-dimensional; at 2 (Cython's least: it refuses a
# view of as many dimensions as the limit) a view is 64 bytes, one cache line, and a class
# of several views (a lane's start, end and tag buffers; the recorder's columns) touches
# fewer lines per call. The setting is the compiler's (``Cython.Compiler.Options``), read
# when it first loads its memoryview code: set before ``cythonize`` runs, and part of the
# .c files' stamp below. Issue 41, docs/benchmarks.md.
MAX_DIMS = 2


try:
    from Cython.Build import cythonize
    from Cython.Compiler import Options
except ImportError:  # (a build without Cython: pure Python)
    ext_modules = []
else:
    Options.buffer_max_dims = MAX_DIMS
    for _, src, pxds in EXTENSIONS:
        _stale_c(src, pxds)
    ext_modules = cythonize(
        [Extension(name, [src], depends=pxds, optional=True) for name, src, pxds in EXTENSIONS],
        compiler_directives=DIRECTIVES,
        quiet=True,
    )

setup(ext_modules=ext_modules, cmdclass={"build_ext": OptionalBuildExt})
