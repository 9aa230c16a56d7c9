"""The simulator's CSV writer: the compiled one (``sim/csv_cells.pyx``) writes the bytes the
``csv`` module writes for the same columns, whatever the cells (hypothesis), and a
simulation's files are the same by either."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetserve.sim import result as R

pytestmark = pytest.mark.skipif(R.CSV_CELLS is None, reason="the compiled writer is not built")

floats = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([-0.0, 0.1, 1e300])
int64s = st.integers(-(2**63), 2**63 - 1)
texts = st.text(max_size=8) | st.sampled_from(["", ",", '"', "\r\n", "a,b", 'x"y', "é"])
objects = st.none() | st.booleans() | int64s | st.integers() | floats | texts


@st.composite
def tables(draw):  # type: ignore[no-untyped-def]
    n = draw(st.integers(0, 30))
    columns = []
    for kind in draw(st.lists(st.sampled_from("FICTO"), min_size=1, max_size=6)):
        if kind == "F":
            col = (kind, np.array(draw(st.lists(floats, min_size=n, max_size=n)), float), None)
        elif kind == "I":
            col = (kind, np.array(draw(st.lists(int64s, min_size=n, max_size=n)), np.int64), None)
        elif kind == "C":
            cells = draw(st.lists(texts, min_size=1, max_size=4))
            codes = draw(st.lists(st.integers(0, len(cells) - 1), min_size=n, max_size=n))
            col = (kind, np.array(codes, np.int64), cells)
        elif kind == "T":
            col = (kind, draw(st.lists(st.none() | floats | int64s, min_size=n, max_size=n)), None)
        else:
            col = (kind, draw(st.lists(objects, min_size=n, max_size=n)), None)
        columns.append(col)
    header = draw(st.lists(texts, min_size=len(columns), max_size=len(columns)))
    return header, columns, n


def _both(tmp_path, monkeypatch, header, columns, n):  # type: ignore[no-untyped-def]
    R.write_csv(tmp_path / "compiled.csv", header, columns, n)
    with monkeypatch.context() as m:
        m.setattr(R, "CSV_CELLS", None)
        R.write_csv(tmp_path / "csv.csv", header, columns, n)
    return (tmp_path / "compiled.csv").read_bytes(), (tmp_path / "csv.csv").read_bytes()


@settings(max_examples=300, deadline=None)
@given(table=tables())
def test_the_compiled_writer_writes_what_the_csv_module_writes(tmp_path_factory, table):
    header, columns, n = table
    mp = pytest.MonkeyPatch()
    got, want = _both(tmp_path_factory.mktemp("csv"), mp, header, columns, n)
    assert got == want


def test_a_long_file_and_long_cells_cross_the_buffer(tmp_path, monkeypatch):
    """More than the writer's 1 MiB buffer, and cells longer than half of it."""
    rng = np.random.default_rng(0)
    n = 60_000
    big = "x," * 400_000
    columns = [
        ("F", rng.normal(size=n) * 1e5, None),
        ("I", rng.integers(-(10**12), 10**12, n), None),
        ("O", [big if k % 20_000 == 0 else k for k in range(n)], None),
    ]
    got, want = _both(tmp_path, monkeypatch, ("f", "i", "o"), columns, n)
    assert got == want and len(got) > 4 * 2**20


def test_bad_columns_are_refused_not_written(tmp_path):
    f = np.zeros(3)
    with pytest.raises(ValueError, match="column 1: 2 cells for 3 rows"):
        R.write_csv(tmp_path / "a.csv", ("a", "b"), [("F", f, None), ("F", f[:2], None)], 3)
    with pytest.raises(ValueError, match="code 5 of 2"):
        R.write_csv(tmp_path / "b.csv", ("c",), [("C", np.array([0, 5, 1]), ["p", "q"])], 3)


def test_a_simulation_writes_the_same_files_either_way(tmp_path, monkeypatch):
    from hetserve.engine.setup import build_setup
    from hetserve.experiments.setup import build_trace
    from hetserve.scheduling import make_scheduler
    from hetserve.sim.engine import SimConfig, Simulator

    s = build_setup("hc1-s", ["resnet50", "bert-base"])
    tr = build_trace(s, "poisson", {"resnet50": 300.0, "bert-base": 200.0}, 3.0, seed=1)
    res = Simulator(
        s.cluster, s.latency, s.plan, s.placement, make_scheduler("edf-adaptive"), tr,
        SimConfig(),
    ).run()  # fmt: skip
    res.write_requests_csv(tmp_path / "r1.csv")
    res.write_batches_csv(tmp_path / "b1.csv")
    monkeypatch.setattr(R, "CSV_CELLS", None)
    res.write_requests_csv(tmp_path / "r2.csv")
    res.write_batches_csv(tmp_path / "b2.csv")
    for a, b in (("r1", "r2"), ("b1", "b2")):
        one, two = (tmp_path / f"{a}.csv").read_bytes(), (tmp_path / f"{b}.csv").read_bytes()
        assert one == two and one.count(b"\r\n") > 100


def _edges() -> np.ndarray:
    """Doubles where a shortest-digits writer can go wrong: every power of two (the gap
    below is half the gap above) and its neighbours, every power of ten from 1e-324 to
    1e308 and its neighbours (repr's switch between fixed and scientific notation sits at
    1e-4 and 1e16), the subnormals' ends, the largest double and whole numbers near 2**53."""
    two = np.ldexp(1.0, np.arange(-1074, 1024))
    ten = np.array([float(f"1e{k}") for k in range(-323, 309)])
    more = np.array([5e-324, 2.2250738585072009e-308, 2.2250738585072014e-308,
                     1.7976931348623157e308, 9007199254740993.0, 9999999999999998.0,
                     0.1, 0.2, 0.3, 1 / 3, 2 / 3, 123456.789, 0.0, 1e23, 8.41e21])  # fmt: skip
    xs = np.concatenate([two, ten, more])
    with np.errstate(over="ignore"):  # (past the largest: infinity, dropped)
        xs = np.concatenate([xs, np.nextafter(xs, np.inf), np.nextafter(xs, -np.inf)])
    xs = xs[np.isfinite(xs)]
    return np.concatenate([xs, -xs])


def test_doubles_are_written_as_repr_writes_them(tmp_path, monkeypatch):
    """The compiled writer's digits (``std::to_chars`` where the C++ library has it) are
    ``repr``'s, byte for byte: on 200,000 random bit patterns (NaN and infinities among
    them), the edges above, and times as a simulation writes them."""
    rng = np.random.default_rng(41)
    bits = rng.integers(0, 2**64, 200_000, dtype=np.uint64, endpoint=False).view(np.float64)
    times = np.cumsum(rng.exponential(1e-4, 100_000)) + rng.normal(0, 1e-9, 100_000)
    xs = np.concatenate([bits, _edges(), times, [np.nan, np.inf, -np.inf, -0.0]])
    got, want = _both(tmp_path, monkeypatch, ("x",), [("F", xs, None)], len(xs))
    assert got == want
    # and as Python floats (the "O" kind: NaN written, as repr writes it, "nan")
    objs = [float(x) for x in xs[::7]] + [float("nan"), float("-inf")]
    got, want = _both(tmp_path, monkeypatch, ("x",), [("O", objs, None)], len(objs))
    assert got == want and got.endswith(b"nan\r\n-inf\r\n")


_BUILD = """
from Cython.Build import cythonize
from setuptools import Extension, setup

ext = Extension("csv_cells", ["csv_cells.pyx"], define_macros=[("HETSERVE_NO_TO_CHARS", "1")])
setup(ext_modules=cythonize([ext], quiet=True), script_args=["build_ext", "--inplace", "-q"])
"""


def test_the_fallback_digits_build_writes_the_same_bytes(tmp_path, monkeypatch):
    """The branch for a C++ library without ``std::to_chars`` (``PyOS_double_to_string``
    makes the digits), built here by ``-DHETSERVE_NO_TO_CHARS`` into a module of its own,
    writes what the ``csv`` module writes: the doubles' edges, random bit patterns and
    every other kind of cell."""
    import importlib.util
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("Cython")
    src = Path(R.__file__).with_name("csv_cells.pyx")
    shutil.copy(src, tmp_path / "csv_cells.pyx")
    (tmp_path / "build.py").write_text(_BUILD)
    out = subprocess.run(
        [sys.executable, "build.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    (built,) = tmp_path.glob("csv_cells*.so")
    spec = importlib.util.spec_from_file_location("csv_cells", built)
    assert spec is not None and spec.loader is not None
    fallback = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fallback)
    assert fallback.DIGITS == "PyOS_double_to_string"
    monkeypatch.setattr(R, "CSV_CELLS", fallback)
    rng = np.random.default_rng(43)
    bits = rng.integers(0, 2**64, 20_000, dtype=np.uint64, endpoint=False).view(np.float64)
    xs = np.concatenate([bits, _edges(), [np.nan, np.inf, -np.inf, -0.0]])
    n = len(xs)
    columns = [
        ("F", xs, None),
        ("I", rng.integers(-(2**63), 2**63 - 1, n, endpoint=True), None),
        ("C", rng.integers(0, 3, n), ["a", "b,c", 'd"e']),
        ("T", [None if k % 5 == 0 else float(x) for k, x in enumerate(xs)], None),
        ("O", [str(k) if k % 3 == 0 else float(x) for k, x in enumerate(xs)], None),
    ]
    got, want = _both(tmp_path, monkeypatch, ("f", "i", "c", "t", "o"), columns, n)
    assert got == want and got.count(b"\r\n") == n + 1
