import itertools

import pytest

torch = pytest.importorskip("torch")

from hetserve.core.graph import get_graph  # noqa: E402
from hetserve.zoo.export import export, export_model  # noqa: E402
from hetserve.zoo.layered import tensors_of  # noqa: E402
from hetserve.zoo.registry import MODELS, build  # noqa: E402

pytestmark = pytest.mark.torch


def test_every_zoo_model_ships_a_graph():
    for name in MODELS:
        g = get_graph(name)
        assert g.name == name


@pytest.mark.parametrize(
    "name", ["resnet18", "efficientnet-b0", "densenet121", "bert-base", "resnet50-fpn"]
)
def test_shipped_graph_matches_fresh_export(name):
    fresh, shipped = export(name), get_graph(name)
    assert [layer.name for layer in fresh.layers] == [layer.name for layer in shipped.layers]
    for a, b in zip(fresh.layers, shipped.layers, strict=True):
        assert (a.kind, a.flops, a.param_bytes, a.out_bytes, a.n_ops) == (
            b.kind,
            b.flops,
            b.param_bytes,
            b.out_bytes,
            b.n_ops,
        )
        assert a.mem_bytes == pytest.approx(b.mem_bytes, rel=1e-6)


def test_resnet50_flops_and_params():
    g = export("resnet50")
    assert g.macs == pytest.approx(4.1e9, rel=0.01)  # ~4.1 GMACs at 224x224
    m = build("resnet50")
    assert sum(p.numel() for p in m.parameters()) == pytest.approx(25.557e6, rel=1e-3)


def test_flop_counter_counts_a_known_layer():
    lin = torch.nn.Linear(64, 32)
    from hetserve.zoo.layered import InputSpec, LayeredModel

    m = LayeredModel(
        "t",
        [("fc", "mlp", lin), ("fc2", "mlp", torch.nn.Linear(32, 8))],
        InputSpec((5, 64)),
        "t",
        "t",
    )
    g = export_model(m)
    assert g.layers[0].flops == 2 * 5 * 64 * 32
    assert g.layers[0].param_bytes == (64 * 32 + 32) * 4
    assert g.layers[0].out_bytes == 5 * 32 * 4
    assert g.layers[1].flops == 2 * 5 * 32 * 8


@pytest.mark.parametrize(
    "name",
    [
        "resnet18",
        "inception-v3",
        "efficientnet-b0",
        "convnext-t",
        "vit-b16",
        "gpt2",
        "resnet50-fpn",
    ],
)
def test_block_by_block_equals_whole_model(name):
    m = build(name)
    x = m.input_spec.example(batch=2, seed=1)
    n = len(m.layers)
    cuts = [0, n // 3, 2 * n // 3, n]
    with torch.no_grad():
        whole = m(x)
        y = x
        for a, b in itertools.pairwise(cuts):
            y = m.block(a, b)(y)
    for u, v in zip(tensors_of(whole), tensors_of(y), strict=True):
        assert torch.allclose(u, v, atol=1e-5, rtol=1e-4)


def test_models_are_seeded():
    a, b = build("resnet18", seed=3), build("resnet18", seed=3)
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)
