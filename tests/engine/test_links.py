"""The link table's lanes (``engine/entities_core.py``, ``LinkTable.transfer``): a transfer
takes, on every link it crosses, the first of the lanes that frees earliest, and starts
when the last of those is free; checked against a plain model of the lanes, compiled and
as Python. And the host links a planned load in two parts takes (``HostLinks.take``)."""

from types import SimpleNamespace

import pytest
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
        assert t.lanes() == {n: ls for n, ls in model.items() if n in t.lanes()}


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
              st.sampled_from([0.0, 1e6, 4e6]), st.sampled_from(["gpus", "workers", "at"])),
    max_size=40,
)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(sends, st.booleans())
def test_a_send_between_workers_is_the_send_between_their_gpus(ops, record):
    # four workers on three GPUs (two share g1: a transfer between them crosses nothing);
    # one table sends by GPU name only, the other mixes both calls on the same lanes
    gpu_of = ["g0", "g1", "g1", "g2"]
    for mod in [entities] + ([entities_core] if entities.COMPILED else []):
        slots = [
            mod.Slot(SimpleNamespace(id=f"w{k}", gpu=SimpleNamespace(name="T4"), gpu_id=g), k)
            for k, g in enumerate(gpu_of)
        ]
        # (``record``: each transfer logged too, by the links' own ``transfer``)
        by_name = mod.LinkTable(_gpus_cluster(), record=record)
        mixed = mod.LinkTable(_gpus_cluster(), record=record)
        now = 0.0
        for src, dst, dt, n_bytes, how in ops:
            now += dt
            want = by_name.send(gpu_of[src], gpu_of[dst], n_bytes, now)
            if how == "workers":
                got = mixed.send_between(slots[src], slots[dst], n_bytes, now)
            elif how == "at":  # (the kernel's call: the start, its end in ``end_s``)
                got = (mixed.send_between_at(slots[src], slots[dst], n_bytes, now), mixed.end_s)
            else:
                got = mixed.send(gpu_of[src], gpu_of[dst], n_bytes, now)
            assert got == want
        assert {n: ls for n, ls in mixed.lanes().items() if n in by_name.lanes()} == by_name.lanes()


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
        assert t.lanes()["b"] == [end] and t.lanes()["a"] == [first_end, 0.0]  # a not taken


# ---------------------------------------------------------------------- host links
class _PlainHostLinks:
    """Host links as the docstrings say, by link name, with no heap and no numbering: the
    loads over each link, and the DHA runs as (end, path) pairs."""

    def __init__(self, cluster) -> None:  # type: ignore[no-untyped-def]
        self.cluster = cluster
        self.busy: dict[str, int] = {}
        self.runs: list[tuple[float, list[str]]] = []

    def _expire(self, now: float) -> None:
        self.runs = [(end, p) for end, p in self.runs if end > now + 1e-12]

    def _most(self, path: list[str]) -> int:
        return max(self.busy.get(x, 0) for x in path)

    def dha_run(self, gpu: str, now: float, dha_s: float, own: list[str]) -> float:
        self._expire(now)
        path = self.cluster.host_path(gpu)
        users = 0
        for x in path:
            runs = sum(p.count(x) for _, p in self.runs)
            users = max(users, self.busy.get(x, 0) + runs - own.count(x))
        f = float(users + 1)
        self.runs.append((now + f * dha_s, path))
        return f

    def take(self, gpu: str, n_parts: int, now: float, cands, mine):  # type: ignore[no-untyped-def]
        self._expire(now)
        gpus = [gpu]
        if n_parts > 1:
            ranked = sorted(cands, key=lambda c: (self._most(self.cluster.host_path(c[0])), c[1]))
            seen = {mine}
            for gid, _, switch, _ in ranked:
                if switch in seen and switch is not None:
                    continue
                seen.add(switch)
                gpus.append(gid)
                if len(gpus) == n_parts:
                    break
            else:
                return None  # (too few GPUs: an error)
        paths = [self.cluster.host_path(g) for g in gpus]
        scale = [float(self._most(p) + 1) for p in paths]
        held = [x for p in paths for x in p]
        for x in held:
            self.busy[x] = self.busy.get(x, 0) + 1
        return scale, held

    def release(self, held: list[str]) -> None:
        for x in held:
            self.busy[x] -= 1


host_ops = st.lists(
    st.one_of(
        st.tuples(st.just("take"), st.integers(0, 3), st.integers(1, 3),
                  st.sampled_from([0.0, 0.001, 0.004])),
        st.tuples(st.just("release"), st.integers(0, 7)),
        st.tuples(st.just("dha"), st.integers(0, 3), st.sampled_from([0.001, 0.003]),
                  st.integers(-1, 7), st.sampled_from([0.0, 0.001, 0.002])),
    ),
    max_size=40,
)  # fmt: skip


def _four_v100s(switches: bool):  # type: ignore[no-untyped-def]
    """p3.8xlarge's node (two PCIe switches of two GPUs), or the same without switches:
    then every other GPU can carry a part, and which go first depends on their loads."""
    from hetserve.core.cluster import parse_cluster
    from hetserve.core.presets import preset

    if switches:
        return preset("p3-8xlarge")
    node = {"name": "n", "gpus": {"V100-16GB": 4}, "nic_gbps": 10,
            "nvlink": [[0, 1], [0, 2], [0, 3], [1, 2], [1, 3], [2, 3]]}  # fmt: skip
    return parse_cluster({"name": "four", "nodes": [node]}, "test")


@pytest.mark.parametrize("switches", [True, False])
@settings(max_examples=150, deadline=None)
@given(ops=host_ops)
def test_host_links_count_loads_and_dha_runs_as_a_plain_model(switches, ops):
    """``HostLinks`` (compiled, and as Python): each load's part factors and links, each
    DHA run's factor (its own load's links not counted) and the runs' expiry, against a
    plain model of the counts, on a node of four GPUs joined by NVLink, with two PCIe
    switches and without."""
    from hetserve.core.errors import HetserveError

    cluster = _four_v100s(switches)
    gpus = [g.id for g in cluster.gpus]
    for cls in dict.fromkeys([entities.HostLinks, entities_core.HostLinks]):  # (compiled, Python)
        hl, plain = cls(cluster), _PlainHostLinks(cluster)
        cands = {g: hl._candidates(g) for g in gpus}
        loads: list[tuple[tuple[int, ...], list[str]]] = []
        now = 0.0
        for op in ops:
            if op[0] == "take":
                _, gi, n, dt = op
                now += dt
                g = gpus[gi]
                want = plain.take(g, n, now, cands[g], hl._switch[g])
                if want is None:
                    try:
                        hl.take(g, n, "m", now)
                    except HetserveError:
                        continue
                    raise AssertionError("a load over too few GPUs was taken")
                scale, held = hl.take(g, n, "m", now)
                assert (scale, [hl.names[x] for x in held]) == want
                loads.append((held, want[1]))
            elif op[0] == "release":
                if loads:
                    held, names = loads.pop(op[1] % len(loads))
                    hl.release(held)
                    plain.release(names)
            else:
                _, gi, dha_s, k, dt = op
                now += dt
                own = loads[k % len(loads)] if loads and k >= 0 else ((), [])
                f = hl.dha_run(gpus[gi], now, dha_s, own[0])
                assert f == plain.dha_run(gpus[gi], now, dha_s, own[1])
        assert {hl.names[i]: b for i, b in enumerate(hl.busy) if b} == {
            x: b for x, b in plain.busy.items() if b
        }


# a node of eight GPUs, two under each of four PCIe switches, NVLink between every pair:
# a GPU's load may take the host links of any GPU under another switch
_EIGHT = {
    "name": "eight",
    "nodes": [{
        "name": "n", "gpus": {"V100-16GB": 8}, "nic_gbps": 10,
        "pcie_switches": [[0, 1], [2, 3], [4, 5], [6, 7]], "pcie_switch_gbps": 15.75,
        "nvlink": [[i, j] for i in range(8) for j in range(i + 1, 8)],
    }],
}  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 7), st.sampled_from([1, 2, 3])), max_size=25))
def test_a_load_in_two_parts_takes_the_first_other_gpu_of_the_full_ranking(loads):
    """A load in two parts takes one other GPU's links, found by a scan
    (``HostLinks._secondary``): the first of the full ranking by the loads on the busiest
    link of each one's host path, then by index, one GPU per switch (``secondaries`` of
    two), whatever the loads already under way; its links are its own path's, then that
    GPU's. Compiled and as Python."""
    from hetserve.core.cluster import parse_cluster

    cluster = parse_cluster(_EIGHT, "test")
    gpus = [g.id for g in cluster.gpus]
    builds = [entities.HostLinks(cluster)]
    if entities.COMPILED:
        builds.append(entities_core.HostLinks(cluster))  # (the Python file too)
    for hl in builds:
        for k, parts in loads:
            g = gpus[k]
            ranked = hl.secondaries(g, 2, "m")  # (the full ranking: two, from two switches)
            assert hl.secondaries(g, 1, "m") == ranked[:1]
            want = hl.path(g) + hl.path(ranked[0]) if parts == 2 else None
            scale, held = hl.take(g, parts, "m")
            assert len(scale) == parts
            if want is not None:
                assert held == want
    if len(builds) == 2:  # (the same loads taken: the same counts on every link)
        assert builds[0].busy == builds[1].busy
