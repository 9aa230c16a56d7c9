"""RAMPA's costs (Eqs. 4-5) and performance model (Eqs. 1-3) on hand-worked topologies (a
line of three switches, a 2x2 torus), and Eq. 5 against a direct count of shortest paths."""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetserve.core.cluster import parse_cluster
from hetserve.core.errors import HetserveError
from hetserve.core.rampa_data import rampa_graph
from hetserve.planning.rampa.network import RampaNet, gpu_costs, link_costs
from hetserve.planning.rampa.perf import Op, estimate, fits, op_time_s, ops_of


def cluster(switch_links, gpus_at, name="t", bw=10.0):
    """Switches joined by ``switch_links``; ``gpus_at``: switch -> (GPU type, count)."""
    switches = sorted({s for ab in switch_links for s in ab} | set(gpus_at))
    nodes = [
        {"name": f"n-{s}", "gpus": {t: k}, "rack": f"rack-{s}", "switch": s, "attach": "gpu",
         "nic_gbps": bw,
         "link_gbps": bw, "link_delay_us": 0.05}
        for s, (t, k) in gpus_at.items()
    ]  # fmt: skip
    links = [{"a": a, "b": b, "bw_gbps": bw, "delay_us": 0.1, "lanes": 4} for a, b in switch_links]
    switch_specs = [{"name": s, "latency_us": 0.03} for s in switches]
    spec = {"name": name, "nodes": nodes, "topology": {"switches": switch_specs, "links": links}}
    return parse_cluster(spec, "test")


LINE = cluster([("s0", "s1"), ("s1", "s2")], {s: ("T4", 1) for s in ("s0", "s1", "s2")})


def test_gpu_cost_is_flops_times_memory_times_free_gpus_in_the_rack():
    c = cluster([("s0", "s1")], {"s0": ("L4", 3), "s1": ("T4", 1)})
    net = RampaNet.of(c)
    cost = gpu_costs(net, net.gpus)
    assert cost["n-s0/gpu0"] == pytest.approx(30.3 * 24 * 3)
    assert cost["n-s1/gpu0"] == pytest.approx(8.1 * 16 * 1)
    fewer = gpu_costs(net, ["n-s0/gpu0", "n-s0/gpu1"])  # one L4 taken
    assert fewer["n-s0/gpu0"] == pytest.approx(30.3 * 24 * 2)


def test_link_costs_on_a_line_of_three_switches():
    net = RampaNet.of(LINE)
    a, b, c = (f"n-s{i}/gpu0" for i in range(3))
    assert net.hops(a, b) == 3 and net.hops(a, c) == 4
    cost = {a: 1.0, b: 2.0, c: 4.0}
    lc = link_costs(net, cost)
    assert lc["s0->s1"] == pytest.approx((1 + 2) / 3 + (1 + 4) / 4)  # pairs (a, b), (a, c)
    assert lc["s1->s2"] == pytest.approx((1 + 4) / 4 + (2 + 4) / 3)  # (a, c), (b, c)
    assert lc["s1->s0"] == pytest.approx((2 + 1) / 3 + (4 + 1) / 4)  # (b, a), (c, a)
    assert lc[f"{a}->s0"] == pytest.approx((1 + 2) / 3 + (1 + 4) / 4)  # every pair from a
    assert lc[f"s1->{b}"] == pytest.approx((1 + 2) / 3 + (4 + 2) / 3)  # every pair to b


def test_link_costs_on_a_2x2_torus_split_between_equal_paths():
    ring = [("s00", "s01"), ("s01", "s11"), ("s11", "s10"), ("s10", "s00")]
    c = cluster(ring, {s: ("T4", 1) for s in ("s00", "s01", "s10", "s11")})
    net = RampaNet.of(c)
    g = {s: f"n-{s}/gpu0" for s in ("s00", "s01", "s10", "s11")}
    cost = {g["s00"]: 1.0, g["s01"]: 2.0, g["s10"]: 3.0, g["s11"]: 5.0}
    lc = link_costs(net, cost)
    # s00 -> s01 carries (g00, g01) whole, half of (g00, g11) and half of (g10, g01)
    want = (1 + 2) / 3 + 0.5 * (1 + 5) / 4 + 0.5 * (3 + 2) / 4
    assert lc["s00->s01"] == pytest.approx(want)


def _direct_eq5(net, cost):
    """Eq. 5 by enumerating every shortest GPU path (switch paths by DFS)."""
    out = dict.fromkeys(net.cluster.links, 0.0)

    def switch_paths(s, t, d):
        if d == 0:
            return [[s]] if s == t else []
        return [[s, *p] for n in net.adj[s] if net.dist[n].get(t, -1) == d - 1
                for p in switch_paths(n, t, d - 1)]  # fmt: skip

    for g1, g2 in itertools.permutations(cost, 2):
        a, b = net.gpus[g1], net.gpus[g2]
        ps = switch_paths(a.switch, b.switch, net.dist[a.switch][b.switch])
        w = (cost[g1] + cost[g2]) / net.hops(g1, g2)
        for p in ps:
            for link in [a.up, *(f"{x}->{y}" for x, y in itertools.pairwise(p)), b.down]:
                out[link] += w / len(ps)
    return out


@settings(max_examples=25, deadline=None)
@given(st.integers(3, 7), st.data())
def test_eq5_equals_a_direct_count_of_shortest_paths(n, data):
    names = [f"s{i}" for i in range(n)]
    edges = {(names[i], names[i + 1]) for i in range(n - 1)}  # connected
    extra = data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)),
                               max_size=n))  # fmt: skip
    edges |= {(names[min(i, j)], names[max(i, j)]) for i, j in extra if i != j}
    at = {s: (data.draw(st.sampled_from(["T4", "L4"])), data.draw(st.integers(1, 2)))
          for s in names if data.draw(st.booleans()) or s == names[0]}  # fmt: skip
    net = RampaNet.of(cluster(sorted(edges), at))
    cost = {g: float(data.draw(st.integers(1, 9))) for g in net.gpus}
    got, want = link_costs(net, cost), _direct_eq5(net, cost)
    for link in want:
        assert got[link] == pytest.approx(want[link], rel=1e-9, abs=1e-12), link


def test_a_disconnected_switch_graph_is_refused():
    c = cluster([("s0", "s1"), ("s2", "s3")], {"s0": ("T4", 1), "s3": ("T4", 1)})
    with pytest.raises(HetserveError, match="switch graph is disconnected"):
        RampaNet.of(c)


def test_estimate_on_a_hand_worked_two_stage_pipeline():
    net = RampaNet.of(LINE)
    a, c = "n-s0/gpu0", "n-s2/gpu0"
    ops = [Op("x", 8.1e9, 32e6, 1.25e6), Op("y", 16.2e9, 32e6, 1e3)]
    t4 = net.gpus[a]
    x_s = 8.1e9 / 8.1e12 + 32e6 / 320e9  # 1 ms + 0.1 ms
    assert op_time_s(ops[0], t4) == pytest.approx(x_s)
    path = net.cluster.transfer_path(a, c)  # a -> s0 -> s1 -> s2 -> c
    assert len(path) == 4
    # propagation 0.05 + 0.1 + 0.1 + 0.05 us, switching 3 x 0.03 us, 1.25 MB at 10 Gbps
    comm = (0.3 + 0.09) * 1e-6 + 1.25e6 * 8 / 10e9
    e = estimate(net, ops, [0, 1, 2], [a, c], [path])
    assert e.comm_s[0] == pytest.approx(comm)
    y_s = 16.2e9 / 8.1e12 + 32e6 / 320e9
    assert e.stage_s == pytest.approx((x_s, y_s))
    assert e.cycle_s == pytest.approx(max(x_s, y_s, comm))  # Eq. 3
    assert e.throughput_tps == pytest.approx(1 / e.cycle_s)  # Eq. 1
    assert e.latency_s == pytest.approx(2 * e.cycle_s + comm)  # Eq. 2
    assert e.memory_bytes == pytest.approx((32e6, 32e6 + 1.25e6))
    assert fits(net, e, [a, c])
    one = estimate(net, ops, [0, 2], [a], [])
    assert one.latency_s == pytest.approx(x_s + y_s) == one.cycle_s


def test_table_vi_models_and_memory():
    ops = ops_of(rampa_graph("qwen2.5-32b"))
    assert len(ops) == 67  # embedding, 64 decoder layers, norm, head
    assert ops[1].memory_bytes == pytest.approx(1.08e9)  # Table VI's consumption
    net = RampaNet.of(LINE)
    whole = estimate(net, ops, [0, len(ops)], ["n-s0/gpu0"], [])
    assert not fits(net, whole, ["n-s0/gpu0"])  # 72 GB on a 16 GB T4
    with pytest.raises(HetserveError, match="every stage needs an operation"):
        estimate(net, ops, [0, 0, len(ops)], ["n-s0/gpu0", "n-s1/gpu0"], [[]])
