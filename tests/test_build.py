"""The compiled part's build (``setup.py``) on a machine without a working C or C++
compiler: it warns and goes on, and the package runs its Python file (the README, "Development")."""

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
    "src/hetserve/core/timeline_core.py",
    "src/hetserve/core/timeline_core_c.pxd",
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
    # an earlier build of two of them, left in the sources (not to be imported beside
    # builds made from other sources and layouts: the build removes it)
    import sysconfig

    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    for stale in ("core/heaps_core_c", "engine/kernel_core_c"):
        (tmp_path / "src/hetserve" / f"{stale}{suffix}").write_bytes(b"an old build")
    # (compilers that fail whatever they are given: C, and C++ for the CSV writer)
    env = {**os.environ, "CC": "false", "CXX": "false"}
    out = subprocess.run(
        [sys.executable, "setup.py", "build_ext", "--inplace"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    for name in (
        "heaps_core_c", "deadlines_core_c", "entities_core_c", "kernel_core_c", "modelled_core_c",
        "coldstart_core_c", "flex_core_c", "edf_adaptive_core_c", "fixed_batch_core_c",
        "reservation_core_c", "reservation_slots_c", "recorder_core_c", "csv_cells",
        "policy_core_c", "timeline_core_c",
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


def _setup_extensions() -> dict[str, set[str]]:
    """``setup.py``'s extensions: each one's name and the files its build is made from (its
    source and the ``.pxd`` files it depends on), read without running ``setup()``."""
    import ast

    tree = ast.parse((ROOT / "setup.py").read_text())
    assigns = [
        n for n in tree.body
        if isinstance(n, ast.Assign) and all(isinstance(t, ast.Name) for t in n.targets)
        and all(t.id.isupper() for t in n.targets)  # type: ignore[attr-defined]
    ]  # fmt: skip
    names: dict = {}
    exec(compile(ast.Module(body=assigns, type_ignores=[]), "setup.py", "exec"), names)
    return {name: {src, *pxds} for name, src, pxds in names["EXTENSIONS"]}


PROBE = """
import json, sys
from pathlib import Path
from hetserve.core import compiled
seen = {}
taken = compiled.compiled_build
def record(name, sources):
    seen[name] = sorted(str(Path(s).resolve()) for s in sources)
    return taken(name, sources)
compiled.compiled_build = record
import hetserve.sim.result  # (it takes the CSV cells' build by name)
hetserve.sim.result.compiled_build = record
from hetserve.engine import deadlines, entities, kernel, modelled
from hetserve.scheduling import coldstart, edf_adaptive, fixed_batch, flex, reservation_table
import importlib
importlib.reload(hetserve.sim.result)
json.dump({"seen": seen, "compiled": kernel.COMPILED}, sys.stdout)
"""


def test_a_build_is_remade_whenever_the_package_would_set_it_aside():
    """A compiled module is set aside at import where it is older than one of the files the
    package checks it against (``core.compiled.compiled_build``): each of those files is
    one ``setup.py`` makes the module from, so that a rebuild (``pip install -e .``,
    ``make``) after an edit of any of them makes it again rather than leaving it stale,
    and the package running its Python with a warning (as once for ``records_c.pxd``)."""
    import json

    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    probe = json.loads(out.stdout)
    if not probe["compiled"]:  # (the builds beside the heaps' are looked for only beside it)
        pytest.skip("the package is not built here (setup.py build_ext)")
    checked = probe["seen"]
    built = _setup_extensions()
    # (every build but the policy core's, which only the builds that cimport it take)
    assert set(checked) == set(built) - {"hetserve.scheduling.policy_core_c"}
    src = str(ROOT.resolve() / "src")
    for name, files in checked.items():
        made_from = {str((ROOT / f).resolve()) for f in built[name]}
        missing = [f for f in files if f.startswith(src) and f not in made_from]
        assert not missing, f"{name}: setup.py does not rebuild it after an edit of {missing}"
