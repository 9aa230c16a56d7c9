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


def _gpus_cluster() -> SimpleNamespace:
    """Three GPUs: g0 and g1 behind link ``a``, g2 behind ``b``; g0 <-> g2 crosses both."""
    links = {
        "a": SimpleNamespace(lanes=2, bw_gbps=10.0, delay_s=1e-6),
        "b": SimpleNamespace(lanes=1, bw_gbps=25.0, delay_s=2e-6),
    }
    paths = {("g0", "g1"): ["a"], ("g1", "g0"): ["a"], ("g0", "g2"): ["a", "b"],
             ("g2", "g0"): ["b", "a"], ("g1", "g2"): ["b"], ("g2", "g1"): ["b"]}  # fmt: skip
    return SimpleNamespace(links=links, transfer_path=lambda x, y: paths[(x, y)])


sends = st.lists(
    st.tuples(st.integers(0, 3), st.integers(0, 3), st.sampled_from([0.0, 0.5, 2.0]),
              st.sampled_from([0.0, 1e6, 4e6]), st.booleans()),
    max_size=40,
)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(sends)
def test_a_send_between_workers_is_the_send_between_their_gpus(ops):
    # four workers on three GPUs (two share g1: a transfer between them crosses nothing);
    # one table sends by GPU name only, the other mixes both calls on the same lanes
    gpu_of = ["g0", "g1", "g1", "g2"]
    for mod in [entities] + ([entities_core] if entities.COMPILED else []):
        slots = [
            mod.Slot(SimpleNamespace(id=f"w{k}", gpu=SimpleNamespace(name="T4"), gpu_id=g), k)
            for k, g in enumerate(gpu_of)
        ]
        by_name, mixed = mod.LinkTable(_gpus_cluster()), mod.LinkTable(_gpus_cluster())
        now = 0.0
        for src, dst, dt, n_bytes, between in ops:
            now += dt
            want = by_name.send(gpu_of[src], gpu_of[dst], n_bytes, now)
            if between:
                got = mixed.send_between(slots[src], slots[dst], n_bytes, now)
            else:
                got = mixed.send(gpu_of[src], gpu_of[dst], n_bytes, now)
            assert got == want
        assert {n: ls for n, ls in mixed._lanes.items() if n in by_name._lanes} == by_name._lanes


def test_a_path_pinned_later_is_the_one_send_between_takes():
    for mod in [entities] + ([entities_core] if entities.COMPILED else []):
        a, b = (
            mod.Slot(SimpleNamespace(id=f"w{k}", gpu=SimpleNamespace(name="T4"), gpu_id=g), k)
            for k, g in enumerate(["g0", "g2"])
        )
        t = mod.LinkTable(_gpus_cluster())
        _, first_end = t.send_between(a, b, 1e6, 0.0)  # over a and b (the shortest path)
        t.pin("g0", "g2", ("b",))
        start, end = t.send_between(a, b, 1e6, 0.0)
        assert start == first_end  # when b's one lane frees
        assert end == start + 1e6 * 8 / 25e9 + 2e-6  # b's bandwidth and delay alone
        assert t._lanes["b"] == [end] and t._lanes["a"] == [first_end, 0.0]  # a not taken
