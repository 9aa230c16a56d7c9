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
