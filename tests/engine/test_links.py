"""The link table's lanes (``engine/entities_core.py``, ``LinkTable.transfer``): a transfer
takes, on every link it crosses, the first of the lanes that frees earliest, and starts
when the last of those is free; checked against a plain model of the lanes, compiled and
as Python."""

from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from hetserve.engine import entities, entities_core


def _cluster(lanes: dict[str, int]) -> SimpleNamespace:
    return SimpleNamespace(links={n: SimpleNamespace(lanes=k) for n, k in lanes.items()})


transfers = st.lists(
    st.tuples(st.sampled_from([("a",), ("b",), ("a", "b")]), st.sampled_from([0.0, 1.0, 2.5]),
              st.sampled_from([1e6, 4e6])),
    max_size=40,
)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(transfers)
def test_a_transfer_takes_the_first_lane_that_frees_earliest(ops):
    lanes = {"a": 3, "b": 2}
    model = {n: [0.0] * k for n, k in lanes.items()}  # (when each lane frees)
    tables = [entities.LinkTable(_cluster(lanes))]
    if entities.COMPILED:
        tables.append(entities_core.LinkTable(_cluster(lanes)))  # (the Python file too)
    now = 0.0
    for path, dt, n_bytes in ops:
        now += dt
        chosen = []
        start = now
        for name in path:
            free = model[name]
            i = free.index(min(free))
            chosen.append((name, i))
            start = max(start, free[i])
        end = start + n_bytes * 8 / (10 * 1e9) + 1e-6
        for name, i in chosen:
            model[name][i] = end
        for t in tables:
            assert t.transfer(path, 10.0, 1e-6, n_bytes, now) == (start, end)
    for t in tables:
        assert t._lanes == {n: ls for n, ls in model.items() if n in t._lanes}
