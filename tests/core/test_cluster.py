import itertools
from collections import Counter

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from hetserve.core.cluster import load_cluster_file, parse_cluster
from hetserve.core.errors import ConfigError, UnknownNameError
from hetserve.core.presets import PRESETS, load_cluster, preset

ISSUE_EXAMPLE = """
name: my-cluster
nodes:
  - {count: 25, gpus: {L4: 1}, nic_gbps: 6}
  - {count: 75, gpus: {P4: 1}, nic_gbps: 6}
"""


def test_issue_example_parses(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text(ISSUE_EXAMPLE)
    c = load_cluster(str(f))
    assert c.gpu_counts() == {"L4": 25, "P4": 75}
    assert len(c.nodes) == 100
    assert all(n.uplink_gbps == 6 == n.downlink_gbps for n in c.nodes)


@pytest.mark.parametrize(
    ("name", "high", "n_high", "hi_per", "low", "lo_per", "gbps"),
    [
        ("hc1-l", "L4", 25, 1, "P4", 1, 6),
        ("hc2-l", "L4", 25, 4, "T4", 2, 10),
        ("hc3-l", "V100-16GB", 25, 2, "P4", 1, 6),
        ("hc4-l", "V100-16GB", 25, 4, "T4", 2, 10),
        ("hc1-s", "L4", 4, 1, "P4", 1, 6),
        ("hc2-s", "L4", 4, 4, "T4", 2, 10),
        ("hc3-s", "V100-16GB", 4, 2, "P4", 1, 6),
        ("hc4-s", "V100-16GB", 4, 4, "T4", 2, 10),
    ],
)
def test_ppipe_presets(name, high, n_high, hi_per, low, lo_per, gbps):
    c = preset(name)
    n_low = 75 if n_high == 25 else 12
    assert c.gpu_counts() == {high: n_high, low: n_low}
    per_node = Counter()
    for n in c.nodes:
        types = {g.type.name for g in n.gpus}
        assert len(types) == 1
        per_node[(types.pop(), len(n.gpus))] += 1
        assert n.uplink_gbps == gbps
    # all nodes but at most one remainder node per class hold the paper's per-node count
    assert sum(v for (t, k), v in per_node.items() if t == high and k != hi_per) <= 1
    assert sum(v for (t, k), v in per_node.items() if t == low and k != lo_per) <= 1


def test_other_presets():
    assert preset("shepherd-12xv100").gpu_counts() == {"V100-16GB": 12}
    assert len(preset("shepherd-12xv100").nodes) == 12
    p3 = preset("p3-8xlarge")
    (node,) = p3.nodes
    assert node.pcie_switch_of == (0, 0, 1, 1)
    assert len(node.nvlink_pairs) == 6
    assert preset("magicbatch-edge").gpu_counts() == {
        "GTX-1080-Ti": 1,
        "RTX-2080-Ti": 1,
        "RTX-3090": 1,
    }
    assert preset("local-cpu").gpu_counts() == {"CPU": 1}
    assert set(PRESETS) >= {"hc1-l", "rampa-base", "rampa-large", "local-cpu"}


@pytest.mark.parametrize(
    ("name", "side", "types", "bw"),
    [
        ("rampa-base", 4, 4, 10),
        ("rampa-high-bw", 4, 4, 100),
        ("rampa-high-perf", 4, 2, 10),
        ("rampa-large", 6, 4, 10),
    ],
)
def test_rampa_presets(name, side, types, bw):
    c = preset(name)
    assert len(c.switches) == side * side
    assert len(c.switch_links) == 2 * side * side  # torus: degree 4
    deg = Counter()
    for a, b, gbps, delay_s, lanes in c.switch_links:
        deg[a] += 1
        deg[b] += 1
        assert (gbps, lanes) == (bw, 4) and delay_s == pytest.approx(0.1e-6)
    assert set(deg.values()) == {4}
    assert len(c.gpu_counts()) == types
    racks = Counter(n.rack for n in c.nodes)
    assert set(racks.values()) == {5} and all(len(n.gpus) == 8 for n in c.nodes)
    assert all(c.switches[s] == pytest.approx(30e-9) for s in c.switches)


def _torus_distance(a, b, side):
    (i1, j1), (i2, j2) = a, b
    di, dj = abs(i1 - i2), abs(j1 - j2)
    return min(di, side - di) + min(dj, side - dj)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 639), st.integers(0, 639))
def test_rampa_paths_are_shortest_torus_paths(i, j):
    c = _RAMPA
    a, b = c.gpus[i], c.gpus[j]
    path = c.transfer_path(a.id, b.id)
    if a.id == b.id:
        assert path == []
        return
    sa, sb = c.node(a.node).switch, c.node(b.node).switch
    pa = tuple(int(x) for x in sa.split("-")[1:])
    pb = tuple(int(x) for x in sb.split("-")[1:])
    assert len(path) == 2 + _torus_distance(pa, pb, 4)
    assert path[0].startswith(a.id) and path[-1].endswith(b.id)
    for x, y in itertools.pairwise(path):  # consecutive links share an end
        assert x.split("->")[1] == y.split("->")[0]
    hops = len(path) - 2
    assert c.path_delay_s(path) == pytest.approx(2 * 0.05e-6 + hops * 0.1e-6 + (hops + 1) * 30e-9)


_RAMPA = preset("rampa-base")


def test_flat_paths():
    c = preset("hc2-l")
    a, b = c.nodes[0].gpus[0], c.nodes[0].gpus[1]
    assert c.transfer_path(a.id, b.id) == []
    far = c.nodes[-1].gpus[0]
    assert c.transfer_path(a.id, far.id) == [f"{a.node}:up", f"{far.node}:down"]
    assert c.path_bw_gbps(c.transfer_path(a.id, far.id)) == 10
    p3 = preset("p3-8xlarge")
    assert c.links[f"{a.node}:up"].transfer_s(1.25e9) == pytest.approx(1.0)
    assert p3.transfer_path("p3-8xlarge/gpu0", "p3-8xlarge/gpu3") == [
        "p3-8xlarge/gpu0->p3-8xlarge/gpu3:nvlink"
    ]
    assert p3.host_path("p3-8xlarge/gpu1") == ["p3-8xlarge:pcie-switch0", "p3-8xlarge/gpu1:pcie"]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            {"name": "x", "nodes": [{"gpus": {"L5": 1}, "nic_gbps": 1}]},
            r"nodes\[0\].gpus: unknown GPU type 'L5'; did you mean 'L4'",
        ),
        ({"name": "x", "nodes": [{"gpus": {"L4": 1}}]}, "give nic_gbps"),
        (
            {"name": "x", "nodes": [{"gpus": {"L4": 2}, "nic_gbps": 1, "pcie_switches": [[0, 2]]}]},
            "GPU index 2 not in 0..1",
        ),
        ({"name": "x", "nodes": [{"gpus": {"L4": 0}, "nic_gbps": 1}]}, "count must be >= 1"),
        (
            {
                "name": "x",
                "nodes": [{"gpus": {"L4": 1}, "nic_gbps": 1, "switch": "s9", "link_gbps": 1}],
                "topology": {"switches": [{"name": "s1"}]},
            },
            "unknown switch 's9'",
        ),
        (
            {"name": "x", "nodes": [{"gpus": {"L4": 1}, "nic_gbps": -3}]},
            r"nodes.0.nic_gbps: Input should be greater than 0",
        ),
        ({"name": "x", "nodes": []}, "nodes: List should have at least 1 item"),
        ({"nodes": [{"gpus": {"L4": 1}, "nic_gbps": 1}]}, "name: required field is missing"),
        (
            {"name": "x", "nodes": [{"gpus": {"L4": 1}, "nic_gbps": 1, "colour": 1}]},
            "colour: unknown field",
        ),
        (
            {
                "name": "x",
                "nodes": [{"gpus": {"L4": 1}, "nic_gbps": 1}],
                "topology": {
                    "switches": [{"name": "a"}],
                    "links": [{"a": "a", "b": "z", "bw_gbps": 1}],
                },
            },
            r"links\[0\]: unknown switch 'z'",
        ),
    ],
)
def test_cluster_errors_name_file_and_field(tmp_path, data, expected):
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=expected) as e:
        load_cluster_file(f)
    assert str(e.value).startswith(str(f)) and "\n" not in str(e.value)


def test_unknown_preset_suggests():
    with pytest.raises(UnknownNameError, match="did you mean .*'hc1-l'"):
        load_cluster("hc1-x")


def test_inline_gpu_types_and_switch_topology():
    c = parse_cluster(
        {
            "name": "t",
            "gpu_types": [
                {
                    "name": "X1",
                    "fp32_tflops": 1,
                    "fp16_tflops": 1,
                    "tensor_cores": False,
                    "memory_gb": 1,
                    "mem_bw_gbps": 10,
                    "pcie_gen": 3,
                    "tdp_w": 10,
                    "idle_w": 1,
                    "year": 2020,
                }
            ],
            "nodes": [
                {
                    "count": 2,
                    "name": "a",
                    "gpus": {"X1": 2},
                    "nic_gbps": 1,
                    "switch": "s1",
                    "link_gbps": 5,
                },
                {
                    "name": "b",
                    "gpus": {"L4": 1},
                    "nic_gbps": 1,
                    "switch": "s3",
                    "link_gbps": 5,
                    "link_delay_us": 1,
                },
            ],
            "topology": {
                "switches": [{"name": "s1", "latency_us": 1}, {"name": "s2"}, {"name": "s3"}],
                "links": [
                    {"a": "s1", "b": "s2", "bw_gbps": 2, "delay_us": 2},
                    {"a": "s2", "b": "s3", "bw_gbps": 2},
                ],
            },
        },
        "inline",
    )
    assert c.gpu_counts() == {"X1": 4, "L4": 1}
    path = c.transfer_path("a0/gpu0", "b/gpu0")
    assert path == ["a0->s1", "s1->s2", "s2->s3", "s3->b"]
    assert c.path_bw_gbps(path) == 2
    assert c.path_delay_s(path) == pytest.approx(1e-6 + 2e-6 + 1e-6)
    assert c.transfer_path("a0/gpu0", "a0/gpu1") == []  # node-attached: same node
