"""The compiled part of hetserve: ``scheduling/reservation_core.py`` compiled by Cython (its
``.pxd`` declares the C types) as ``hetserve.scheduling.reservation_core_c``. Everything
else is in pyproject.toml. The extension is optional: where it cannot be built (no C
compiler), hetserve runs the same file as plain Python, with the same results
(docs/benchmarks.md, "The compiled core")."""

from setuptools import Extension, setup

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
            )
        ],
        compiler_directives={"language_level": 3},
        quiet=True,
    )

setup(ext_modules=ext_modules)
