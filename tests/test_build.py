"""The compiled part's build (``setup.py``) on a machine without a working C compiler:
it warns and goes on, and the package runs its Python file (the README, "Development")."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FILES = [
    "setup.py",
    "pyproject.toml",
    "README.md",
    "src/hetserve/__init__.py",
    "src/hetserve/core/__init__.py",
    "src/hetserve/core/heaps_core.py",
    "src/hetserve/core/heaps_core_c.pxd",
    "src/hetserve/engine/__init__.py",
    "src/hetserve/engine/deadlines_core.py",
    "src/hetserve/engine/deadlines_core_c.pxd",
    "src/hetserve/engine/entities_core.py",
    "src/hetserve/engine/entities_core_c.pxd",
    "src/hetserve/engine/kernel_core.py",
    "src/hetserve/engine/kernel_core_c.pxd",
    "src/hetserve/engine/modelled_core.py",
    "src/hetserve/engine/modelled_core_c.pxd",
    "src/hetserve/scheduling/__init__.py",
    "src/hetserve/scheduling/coldstart_core.py",
    "src/hetserve/scheduling/coldstart_core_c.pxd",
    "src/hetserve/scheduling/edf_adaptive_core.py",
    "src/hetserve/scheduling/edf_adaptive_core_c.pxd",
    "src/hetserve/scheduling/fixed_batch_core.py",
    "src/hetserve/scheduling/fixed_batch_core_c.pxd",
    "src/hetserve/scheduling/flex_core.py",
    "src/hetserve/scheduling/flex_core_c.pxd",
    "src/hetserve/scheduling/policy_core.py",
    "src/hetserve/scheduling/policy_core_c.pxd",
    "src/hetserve/scheduling/reservation_core.py",
    "src/hetserve/scheduling/reservation_core_c.pxd",
    "src/hetserve/scheduling/reservation_slots.py",
    "src/hetserve/scheduling/reservation_slots_c.pxd",
    "src/hetserve/sim/__init__.py",
    "src/hetserve/sim/recorder_core.py",
    "src/hetserve/sim/recorder_core_c.pxd",
    "src/hetserve/sim/csv_cells.pyx",
]


def test_without_a_compiler_the_build_warns_and_goes_on(tmp_path):
    pytest.importorskip("Cython")
    for f in FILES:
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / f, tmp_path / f)
    env = {**os.environ, "CC": "false"}  # (a compiler that fails whatever it is given)
    out = subprocess.run(
        [sys.executable, "setup.py", "build_ext", "--inplace"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    for name in (
        "heaps_core_c", "deadlines_core_c", "entities_core_c", "kernel_core_c", "modelled_core_c",
        "coldstart_core_c", "flex_core_c", "edf_adaptive_core_c", "fixed_batch_core_c",
        "reservation_core_c", "reservation_slots_c", "recorder_core_c", "csv_cells",
        "policy_core_c",
    ):  # fmt: skip
        assert f"{name} was not built" in out.stdout + out.stderr
    assert not list((tmp_path / "src").rglob("*.so"))


def _negative_indices(source: str) -> list[int]:
    """The lines of ``source`` that index or slice with a negative constant (``x[-1]``,
    ``x[:-2]``)."""
    import ast

    def negative(node: ast.AST | None) -> bool:
        return (
            isinstance(node, ast.UnaryOp)
            and isinstance(node.op, ast.USub)
            and isinstance(node.operand, ast.Constant)
        ) or (isinstance(node, ast.Constant) and isinstance(node.value, int) and node.value < 0)

    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript):
            s = node.slice
            parts: list[ast.AST | None] = []
            for p in s.elts if isinstance(s, ast.Tuple) else [s]:
                parts += [p.lower, p.upper, p.step] if isinstance(p, ast.Slice) else [p]
            if any(negative(p) for p in parts):
                lines.append(node.lineno)
    return lines


def test_the_compiled_sources_index_from_the_front():
    """``setup.py`` builds without wraparound (``DIRECTIVES``): there ``x[-1]`` reads
    before the first item instead of the last. No compiled source indexes or slices with
    a negative constant (the check finds them where they are)."""
    seeded = "a = x[-1]\nb = y[1:-2]\nc = z[len(z) - 1]\nd = w[:, -3]\n"
    assert _negative_indices(seeded) == [1, 2, 4]
    for f in FILES:
        if f.endswith(".py") and not f.endswith("__init__.py") and "/src/" in f"/{f}":
            found = _negative_indices((ROOT / f).read_text())
            assert not found, f"{f}: negative indices on lines {found}"
