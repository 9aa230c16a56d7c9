import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetserve.core.errors import HetserveError, UnknownNameError
from hetserve.core.gpus import get_gpu
from hetserve.core.latency import (
    LatencyModel,
    LinearParams,
    RooflineModel,
    fit_linear,
    shepherd_linear_model,
    shepherd_table4,
)
from hetserve.core.ratios import latency_ratios

RM = RooflineModel()
MODELS = ["resnet50", "efficientnet-b0", "bert-base", "vit-b16", "densenet121"]
GPUS = ["P4", "T4", "L4", "V100", "A100", "H100"]


def test_protocol():
    assert isinstance(RM, LatencyModel)
    assert isinstance(shepherd_linear_model(), LatencyModel)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(MODELS), st.sampled_from(GPUS), st.integers(1, 4), st.integers(1, 31))
def test_roofline_monotone_in_batch_and_share(model, gpu, share, batch):
    t = RM.latency(model, gpu, share, batch)
    assert RM.latency(model, gpu, share, batch + 1) >= t > 0
    assert RM.latency(model, gpu, share + 1, batch) >= t
    # batching helps throughput: a batch of b is no slower per request than b of batch 1
    assert t <= batch * RM.latency(model, gpu, share, 1) * (1 + 1e-9)


@pytest.mark.parametrize("model", MODELS)
def test_block_latencies_add_up(model):
    n = RM.num_blocks(model)
    assert n == 10
    for gpu in ("P4", "V100"):
        whole = RM.latency(model, gpu, 2, 4)
        parts = sum(RM.latency(model, gpu, 2, 4, range(i, i + 1)) for i in range(n))
        assert whole == pytest.approx(parts)
        assert RM.latency(model, gpu, 2, 4, range(2, 7)) == pytest.approx(
            sum(RM.latency(model, gpu, 2, 4, range(i, i + 1)) for i in range(2, 7))
        )


def test_prepartition_balances_reference_latency():
    for model in ("resnet152", "efficientnet-b8", "bert-base"):
        lat = [RM.latency(model, "V100", 1, 1, range(i, i + 1)) for i in range(10)]
        layer = [t for t, _ in RM.layer_times(model, "V100", 1, 1)]
        # optimal balance: the largest block is at most the mean plus the largest layer
        assert max(lat) <= sum(lat) / 10 + max(layer) + 1e-12
        assert RM.out_bytes(model, 9) == RM.blocks(model).out_bytes[9]


def _roofline_layer(layer, g, share, batch, p):  # type: ignore[no-untyped-def]
    """The roofline of one layer as the model defines it (docs/latency.md), written out
    as scalar arithmetic: the reference for the model's arrays."""
    peak = g.inference_tflops * 1e12 / share
    bw = g.mem_bw_gbps * 1e9 / share
    flops = batch * layer.flops
    nbytes = p.storage_bytes / 4 * (layer.param_bytes + batch * layer.mem_bytes)
    work = batch * layer.mem_bytes / 4 / max(1, 2 * layer.n_ops)
    fill = work / (work + p.fill_elems_per_tflop * peak / 1e12) if work > 0 else 1.0
    eff_c = p.eff_kind.get(layer.kind, p.eff_default) * fill
    t_c = flops / (peak * eff_c) if flops > 0 else 0.0
    t = max(t_c, nbytes / (bw * p.eff_mem)) + layer.n_ops * p.launch_s
    u = max(flops / (peak * t), nbytes / (bw * t)) if t > 0 else 0.0
    return t, min(1.0, u)


MORE = ["resnet152", "efficientnet-b8", "gpt2", "fcn-resnet101"]


@pytest.mark.parametrize("model", [*MODELS, *MORE])
def test_layer_times_are_the_scalar_rooflines_to_the_last_bit(model):
    """The model computes its layers as arrays; every time and utilisation is the double
    the scalar formula gives, at every batch size a scheduler's table asks for."""
    from hetserve.core.graph import get_graph

    rm = RooflineModel()
    layers = get_graph(model).layers
    for gpu, share in (("P4", 1), ("L4", 2), ("V100", 1), ("A100", 7), ("H100", 3)):
        g = get_gpu(gpu)
        for batch in (1, 2, 3, 7, 8, 64, 127, 128):
            want = [_roofline_layer(x, g, share, batch, rm.p) for x in layers]
            assert rm.layer_times(model, gpu, share, batch) == want, (gpu, share, batch)


def test_fig3_latency_ratio_varies_across_layers():
    """PPipe Fig. 3: P4/L4 latency ratio is low (memory-bound) for early EfficientNet
    layers and much higher (compute-bound) for late ones."""
    c = latency_ratios(RM, "efficientnet-b8", get_gpu("P4"), get_gpu("L4"))
    assert c.block_ratio[0] < 2.0  # near the bandwidth ratio 300/192 = 1.56
    assert c.block_ratio[-2] > 3 * c.block_ratio[0]
    assert c.window_ratio.max() / c.window_ratio.min() > 4
    assert np.all(c.layer_ratio > 1)  # the P4 is slower everywhere


def test_bigger_gpu_is_faster():
    for model in MODELS:
        assert (
            RM.latency(model, "H100", 1, 8)
            < RM.latency(model, "V100", 1, 8)
            < RM.latency(model, "P4", 1, 8)
        )


def test_energy_model():
    for model in MODELS:
        for gpu in ("T4", "V100"):
            g = get_gpu(gpu)
            t = RM.latency(model, gpu, 1, 8)
            e = RM.energy(model, gpu, 1, 8)
            assert 0.3 * g.tdp_w * t * 0.9 < e <= g.tdp_w * t * (1 + 1e-9)
            # energy per request falls with batch size (MagicBatch's observation)
            assert RM.energy(model, gpu, 1, 16) / 16 < RM.energy(model, gpu, 1, 1)
            # a 1/2 slice draws half the power
            assert RM.energy(model, gpu, 2, 1) / RM.latency(model, gpu, 2, 1) < RM.energy(
                model, gpu, 1, 1
            ) / RM.latency(model, gpu, 1, 1)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (("resnet50", "V100", 0, 1), "share must be >= 1"),
        (("resnet50", "V100", 1, 0), "batch must be >= 1"),
        (("resnet50", "V100", 1, 1, range(3, 11)), "block range 3..10"),
        (("resnet50", "V100", 1, 1, range(4, 4)), "block range"),
    ],
)
def test_bad_arguments(args, match):
    with pytest.raises(HetserveError, match=match):
        RM.latency(*args)


def test_unknown_gpu_in_roofline():
    with pytest.raises(UnknownNameError, match="did you mean"):
        RM.latency("resnet50", "V10O", 1, 1)


def test_shepherd_table4_linear_model():
    rows = shepherd_table4()
    assert len(rows) == 17
    lm = shepherd_linear_model()
    # ResNet50 on V100: alpha 0.75 ms, beta 7.96 ms (Shepherd Table 4)
    assert lm.latency("resnet50", "V100", 1, 1) == pytest.approx(8.71e-3)
    assert lm.latency("resnet50", "V100-16GB", 1, 10) == pytest.approx(15.46e-3)
    assert lm.latency("rs50", "V100", 1, 2) == pytest.approx((2 * 1.18 + 15.39) / 1e3)
    # one block per exit point (ResNet50: 46); a block range takes its share of the time
    assert lm.num_blocks("resnet50") == 46
    assert shepherd_linear_model(exit_points=False).num_blocks("resnet50") == 1
    assert lm.latency("resnet50", "V100", 1, 4, range(0, 23)) == pytest.approx(
        lm.latency("resnet50", "V100", 1, 4) / 2
    )
    with pytest.raises(HetserveError, match="block range"):
        lm.latency("resnet50", "V100", 1, 1, range(40, 47))
    e1, e8 = lm.energy("resnet50", "V100", 1, 1), lm.energy("resnet50", "V100", 1, 8)
    assert e8 / 8 < e1
    with pytest.raises(HetserveError, match="only share 1"):
        lm.latency("resnet50", "V100", 2, 1)
    with pytest.raises(HetserveError, match="no parameters for resnet50 on T4"):
        lm.latency("resnet50", "T4", 1, 1)
    with pytest.raises(UnknownNameError):
        lm.latency("resnet5000", "V100", 1, 1)


@settings(max_examples=30, deadline=None)
@given(st.floats(1e-5, 1e-2), st.floats(1e-4, 1e-1))
def test_fit_linear_recovers_parameters(alpha, beta):
    b = [1, 2, 4, 8, 16]
    p = fit_linear(b, [alpha * x + beta for x in b])
    assert p.alpha_s == pytest.approx(alpha, rel=1e-6)
    assert p.beta_s == pytest.approx(beta, rel=1e-6)
    assert isinstance(p, LinearParams)


def test_cold_start_capabilities_are_a_declared_protocol():
    """The engines and the cold-start scheduler ask ``cold_start_model`` for DeepPlan's
    capabilities; a model without them is warm-only, and no module probes with getattr."""
    import ast
    from pathlib import Path

    from hetserve.core.latency import (
        ColdStartModel,
        GraphBlocksModel,
        RooflineModel,
        cold_start_model,
    )
    from hetserve.core.layerlatency import LayerLatency

    roof = RooflineModel()
    assert cold_start_model(roof) is None and isinstance(roof, GraphBlocksModel)
    lat = LayerLatency({})
    assert cold_start_model(lat) is lat and isinstance(lat, ColdStartModel)
    names = {"model_load_plan", "gpu_bytes", "dha_s", "load_timeline", "cold_run_s",
             "cold_run_terms", "canonical_instance"}  # fmt: skip
    src = Path(__file__).resolve().parents[2] / "src" / "hetserve"
    for path in src.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr":
                arg = node.args[1] if len(node.args) > 1 else None
                assert not (isinstance(arg, ast.Constant) and arg.value in names), (
                    f"{path.relative_to(src)}:{node.lineno} probes for {arg.value}"
                )
