import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetserve.core.errors import ConfigError, UnknownNameError
from hetserve.core.graph import (
    Blocks,
    ModelGraph,
    balanced_partition,
    get_graph,
    load_graph_file,
    shipped_models,
)
from hetserve.core.rampa_data import rampa_category_mix, rampa_graph, rampa_models, rampa_services

ZOO = [
    "resnet18",
    "resnet50",
    "resnet101",
    "resnet152",
    "densenet121",
    "inception-v3",
    "vgg16",
    "googlenet",
    "efficientnet-b0",
    "efficientnet-b4",
    "efficientnet-b8",
    "convnext-t",
    "vit-b16",
    "bert-base",
    "gpt2",
    "fcn-resnet101",
    "resnet50-fpn",
]


def test_all_zoo_graphs_ship():
    assert set(ZOO) <= set(shipped_models())


# Published totals (multiply-adds, parameters): torchvision model cards / papers.
@pytest.mark.parametrize(
    ("name", "gmacs", "mparams"),
    [
        ("resnet18", 1.81, 11.69),
        ("resnet50", 4.09, 25.56),
        ("resnet101", 7.80, 44.55),
        ("resnet152", 11.51, 60.19),
        ("densenet121", 2.87, 7.98),
        ("inception-v3", 5.71, 23.83),
        ("vgg16", 15.47, 138.36),
        # torchvision's GoogLeNet (1.50 G, 6.62 M) uses 3x3 convolutions in the 5x5
        # branches; Szegedy et al.'s true 5x5 branches add 0.08 G MACs and 0.38 M params
        ("googlenet", 1.50 + 0.08, 6.62 + 0.38),
        ("efficientnet-b0", 0.39, 5.29),
        ("convnext-t", 4.46, 28.59),
        ("vit-b16", 17.56, 86.57),
        ("bert-base", None, 109.48),
        ("gpt2", None, 124.44 + 38.6),
    ],
)
def test_shipped_totals_match_published(name, gmacs, mparams):
    g = get_graph(name)
    if gmacs is not None:
        assert g.macs / 1e9 == pytest.approx(gmacs, rel=0.02)
    # graphs count BN running statistics too (what must be loaded): +0.3% at most
    assert g.params / 1e6 == pytest.approx(mparams, rel=0.012)


def test_graph_invariants():
    for name in ZOO:
        g = get_graph(name)
        assert len(g.layers) >= 10
        assert all(layer.out_bytes > 0 and layer.n_ops > 0 for layer in g.layers)
        assert g.flops > 0 and g.input_bytes > 0


def test_graph_names_case_insensitive_and_suggest():
    assert get_graph("ResNet50").name == "resnet50"
    assert get_graph("inception_v3").name == "inception-v3"
    with pytest.raises(UnknownNameError, match="did you mean 'resnet50'"):
        get_graph("resnet5")


def test_json_round_trip(tmp_path):
    g = get_graph("resnet50")
    p = tmp_path / "g.json"
    g.save(p)
    assert load_graph_file(p) == g
    assert get_graph(str(p)) == g


def test_bad_graph_files(tmp_path):
    p = tmp_path / "g.json"
    p.write_text("{")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_graph_file(p)
    data = get_graph("resnet18").to_json()
    data["layers"][3]["flops"] = "lots"
    p.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=r"layers\[3\]: expected numbers"):
        load_graph_file(p)
    del data["layers"][3]["flops"]
    p.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=r"layers\[3\]: missing field 'flops'"):
        load_graph_file(p)


def _brute(costs, k):
    n = len(costs)
    best = None
    for cuts in itertools.combinations(range(1, n), k - 1):
        b = (0, *cuts, n)
        v = max(sum(costs[b[i] : b[i + 1]]) for i in range(k))
        if best is None or v < best - 1e-12:
            best = v
    return best


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.01, 100), min_size=1, max_size=9), st.data())
def test_balanced_partition_is_optimal(costs, data):
    k = data.draw(st.integers(1, len(costs)))
    bounds = balanced_partition(costs, k)
    assert bounds[0] == 0 and bounds[-1] == len(costs) and len(bounds) == k + 1
    assert all(a < b for a, b in itertools.pairwise(bounds))
    got = max(sum(costs[bounds[i] : bounds[i + 1]]) for i in range(k))
    assert got == pytest.approx(_brute(costs, k), rel=1e-9)


def test_balanced_partition_rejects_bad_counts():
    with pytest.raises(ValueError):
        balanced_partition([1, 2], 3)


def test_blocks_from_graph():
    g = get_graph("resnet50")
    b = Blocks.from_graph(g, (0, 5, len(g.layers)))
    assert len(b) == 2 and b.out_bytes == (g.layers[4].out_bytes, g.layers[-1].out_bytes)
    assert list(b.layers(1)) == list(range(5, len(g.layers)))
    with pytest.raises(ValueError):
        Blocks("m", (1, 3), (1.0,))


def test_rampa_tables():
    services = rampa_services()
    assert [s.latency_s for s in services] == [0.1, 0.2, 0.05, 0.8, 10, 5]
    assert [s.throughput_tps for s in services] == [60, 30, 30, 5, 0.1, 0.25]
    assert set(rampa_models()) == {s.model for s in services}
    for mix in rampa_category_mix().values():
        assert sum(mix.values()) == pytest.approx(1.0)
    g = rampa_graph("vit-huge")
    assert len(g.layers) == 1 + 32 + 1 + 1
    assert g.layers[1].flops == 10.11e9
    assert isinstance(g, ModelGraph)
