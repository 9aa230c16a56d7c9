"""Layer tables: the export against the model, the shipped tables against a fresh export,
and the CUDA measurement's bookkeeping (on the CPU)."""

import pytest

torch = pytest.importorskip("torch")

from hetserve.core.graph import get_graph  # noqa: E402
from hetserve.core.layertable import get_layer_table, shipped_layer_tables  # noqa: E402
from hetserve.zoo.leaves import DEEPPLAN_SEQ_LEN, export_layer_table, leaf_table  # noqa: E402
from hetserve.zoo.registry import MODELS, build  # noqa: E402

pytestmark = pytest.mark.torch


def test_every_zoo_model_ships_a_layer_table():
    assert set(shipped_layer_tables()) == set(MODELS)


@pytest.mark.parametrize("name", ["resnet18", "bert-base", "vit-b16"])
def test_shipped_layer_table_matches_fresh_export(name):
    fresh, shipped = export_layer_table(name), get_layer_table(name)
    assert fresh.input_shape == shipped.input_shape
    assert len(fresh.leaves) == len(shipped.leaves)
    for a, b in zip(fresh.leaves, shipped.leaves, strict=True):
        assert (a.name, a.kind, a.layer, a.param_bytes, a.flops, a.n_ops) == (
            b.name, b.kind, b.layer, b.param_bytes, b.flops, b.n_ops,
        )  # fmt: skip


@pytest.mark.parametrize("name", ["resnet50", "vit-b16", "bert-base"])
def test_every_weight_belongs_to_exactly_one_row_and_flops_add_up(name):
    seq = DEEPPLAN_SEQ_LEN.get(name)
    net = build(name, seq_len=seq) if seq else build(name)
    t = leaf_table(net)
    weights = sum(w.nbytes for w in [*net.parameters(), *net.buffers()] if w.is_floating_point())
    assert t.param_bytes == weights  # ViT's class token and positions included
    if seq is None:  # the graph is exported at the same input: same FLOPs in total
        assert sum(x.flops for x in t.leaves) == pytest.approx(get_graph(name).flops)
    # every graph layer maps onto a contiguous, non-empty range of rows, in order
    n_layers = len(net.layers)
    ranges = [t.leaf_range(i, i + 1) for i in range(n_layers)]
    assert all(len(r) > 0 for r in ranges)
    assert [r.start for r in ranges[1:]] == [r.stop for r in ranges[:-1]]


def test_resnet50_rows_and_bert_embeddings():
    r50 = get_layer_table("resnet50")
    kinds = [x.kind for x in r50.leaves]
    assert kinds.count("Conv2d") == 53 and kinds.count("BatchNorm2d") == 53
    assert len(r50) == 142  # convs, batch norms, ReLU modules, max pool, the head's fc
    bert = get_layer_table("bert-base")
    tok = bert.leaves[0]
    assert tok.kind == "Embedding" and tok.param_bytes == 30522 * 768 * 4
    assert tok.dha_sparse_bytes == 384 * 768 * 4  # DHA reads only the rows looked up
    qkv = next(x for x in bert.leaves if x.name.endswith("attn.qkv"))
    assert qkv.gemm_kind == "linear" and qkv.gemm_rows == 384


def test_the_cuda_measurement_numbers_its_rows_like_the_table():
    """``measure_layers`` on the CPU runs the same bookkeeping as on CUDA: one row per
    row of the shipped table, same kinds and weight bytes."""
    from hetserve.profiling.layers import measure_layers

    rows = measure_layers("resnet18", "cpu", batch=1, warmup=0, repeats=1)
    t = get_layer_table("resnet18")
    assert [r.kind for r in rows] == [x.kind for x in t.leaves]
    assert [r.param_bytes for r in rows] == [int(x.param_bytes) for x in t.leaves]
    assert all(r.exec_gpu_us > 0 and r.load_us == 0 for r in rows)
