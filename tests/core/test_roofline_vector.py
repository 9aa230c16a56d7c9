"""The roofline's per-layer times are computed for all layers at once (NumPy); they must
equal, bit for bit, the scalar formula written out here on its own (this file does not
call the code it checks for the expected values), for every shipped model, on GPU types
of several generations, at shares 1-2 and batches 1-128."""

import pytest

from hetserve.core.gpus import DEFAULT_CATALOG
from hetserve.core.graph import get_graph, shipped_models
from hetserve.core.latency import RooflineModel, RooflineParams


def _scalar(graph, g, share, batch, p):
    """The roofline formula, one layer at a time in plain Python floats."""
    peak = g.inference_tflops * 1e12 / share
    bw = g.mem_bw_gbps * 1e9 / share
    s = p.storage_bytes / 4
    fill_half = p.fill_elems_per_tflop * peak / 1e12
    out = []
    for layer in graph.layers:
        flops = batch * layer.flops
        nbytes = s * (layer.param_bytes + batch * layer.mem_bytes)
        work = batch * layer.mem_bytes / 4 / max(1, 2 * layer.n_ops)
        fill = work / (work + fill_half) if work > 0 else 1.0
        eff_c = p.eff_kind.get(layer.kind, p.eff_default) * fill
        t_c = flops / (peak * eff_c) if flops > 0 else 0.0
        t_m = nbytes / (bw * p.eff_mem)
        t = max(t_c, t_m) + layer.n_ops * p.launch_s
        u = max(flops / (peak * t), nbytes / (bw * t)) if t > 0 else 0.0
        out.append((t, min(1.0, u)))
    return out


@pytest.mark.parametrize("model", shipped_models())
def test_vector_roofline_equals_the_scalar_formula(model):
    graph = get_graph(model)
    params = RooflineParams()
    m = RooflineModel(params=params)
    for gpu in ("P4", "T4", "V100", "L4", "A100", "H100"):
        g = DEFAULT_CATALOG.get(gpu)
        for share in (1, 2):
            for batch in (1, 2, 3, 8, 64, 128):
                assert m.layer_times(model, gpu, share, batch) == _scalar(
                    graph, g, share, batch, params
                ), (model, gpu, share, batch)
