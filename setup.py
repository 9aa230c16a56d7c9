"""The compiled parts of hetserve, built by Cython; everything else is in pyproject.toml.

- ``scheduling/reservation_core.py`` (its ``.pxd`` declares the C types) as
  ``hetserve.scheduling.reservation_core_c``; without it the same file runs as Python.
- ``sim/csv_cells.pyx``, the simulator's CSV writer, as ``hetserve.sim.csv_cells``;
  without it the ``csv`` module writes the same bytes.

Both are optional: where one cannot be built (no C compiler, no Cython), the install goes
on with a warning and hetserve runs the Python, with the same results (docs/benchmarks.md,
"Issue 41, step 1")."""

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
        for ext in failed:
            self.extensions.remove(ext)


FALLBACK = {
    "hetserve.scheduling.reservation_core_c": (
        "the Python file src/hetserve/scheduling/reservation_core.py runs instead"
    ),
    "hetserve.sim.csv_cells": "the csv module writes the simulator's CSV files instead",
}

try:
    from Cython.Build import cythonize
except ImportError:  # (a build without Cython: pure Python)
    ext_modules = []
else:
    ext_modules = cythonize(
        [
            Extension(
                "hetserve.scheduling.reservation_core_c",
                ["src/hetserve/scheduling/reservation_core.py"],
                optional=True,
            ),
            Extension(
                "hetserve.sim.csv_cells", ["src/hetserve/sim/csv_cells.pyx"], optional=True
            ),
        ],
        compiler_directives={"language_level": 3},
        quiet=True,
    )

setup(ext_modules=ext_modules, cmdclass={"build_ext": OptionalBuildExt})
