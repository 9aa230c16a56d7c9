"""The compiled part of hetserve: ``scheduling/reservation_core.py`` compiled by Cython (its
``.pxd`` declares the C types) as ``hetserve.scheduling.reservation_core_c``. Everything
else is in pyproject.toml. The extension is optional: where it cannot be built (no C
compiler, no Cython), the install goes on with a warning and hetserve runs the same file
as plain Python, with the same results (docs/benchmarks.md, "Issue 41, step 1")."""

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
                self.warn(
                    f"hetserve: {ext.name} was not built ({err}); the Python file "
                    f"src/hetserve/scheduling/reservation_core.py runs instead"
                )
                failed.append(ext)
        for ext in failed:
            self.extensions.remove(ext)


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

setup(ext_modules=ext_modules, cmdclass={"build_ext": OptionalBuildExt})
