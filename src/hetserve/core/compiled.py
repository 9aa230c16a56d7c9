"""The compiled parts' builds (``setup.py``: Cython, optional): which one a module takes.

A compiled module is used where it was built, from its source as it is now, and the
environment does not ask for Python (``HETSERVE_PURE_PYTHON=1``); otherwise its caller
runs the Python it stands in for, with the same results."""

from __future__ import annotations

import importlib
import importlib.util
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType


def python_asked() -> bool:
    """Whether the environment asks for the Python files where builds exist
    (``HETSERVE_PURE_PYTHON`` set to anything but ``""`` or ``"0"``)."""
    return os.environ.get("HETSERVE_PURE_PYTHON", "") not in ("", "0")


def compiled_build(name: str, sources: Sequence[Path]) -> ModuleType | None:
    """The extension module ``name``, or None: not built, ``HETSERVE_PURE_PYTHON`` set,
    or older than one of ``sources`` (left aside with a warning: it would run code that
    is no longer there; a source that is not installed is not compared)."""
    if python_asked():
        return None
    try:
        mod = importlib.import_module(name)
    except ImportError:
        return None
    built = Path(mod.__file__ or "").stat().st_mtime
    stale = [f for f in sources if f.exists() and f.stat().st_mtime > built]
    if stale:
        warnings.warn(
            f"{mod.__file__} is older than {stale[0]}: running the Python instead "
            f"(rebuild the compiled one with `pip install -e .`, or `make` in a checkout)",
            RuntimeWarning,
            stacklevel=3,
        )
        return None
    return mod


def build_of(pure: ModuleType | str, *layouts: Path) -> tuple[ModuleType, bool]:
    """The compiled build of the Python module ``pure`` (the module ``<its name>_c``,
    typed by ``<its file's stem>_c.pxd`` beside it: Cython takes the ``.pxd`` named for
    the module it builds) where :func:`compiled_build` takes it, built from both files as
    they are now and from ``layouts`` (the ``.pxd`` files of the C types it reads from
    another build); else ``pure``. And whether it is the compiled one.

    ``pure`` is the module or its name; by name, the Python file is imported only where
    its build is not taken (a command's start then skips the Python twins of the builds
    it takes: 30-50 ms of ``hetserve simulate``'s imports and setup, docs/benchmarks.md)."""
    if isinstance(pure, str):
        spec = importlib.util.find_spec(pure)
        if spec is None or spec.origin is None:
            raise ImportError(f"no module {pure}")
        name, src = pure, Path(spec.origin)
    else:
        name, src = pure.__name__, Path(pure.__file__ or "")
    pxd = src.with_name(f"{src.stem}_c.pxd")
    built = compiled_build(f"{name}_c", (src, pxd, *layouts))
    return (built, True) if built is not None else (python_module(pure), False)


def python_module(pure: ModuleType | str) -> ModuleType:
    """``pure`` itself, or the module of that name (imported now)."""
    return importlib.import_module(pure) if isinstance(pure, str) else pure
