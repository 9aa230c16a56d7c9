"""Pipelined execution of zoo models: stages on different workers, FP16 or FP32 cuts."""

import pytest

torch = pytest.importorskip("torch")

from hetserve.core.errors import HetserveError  # noqa: E402
from hetserve.core.latency import RooflineModel  # noqa: E402
from hetserve.runtime.stage import StageRunner, decode_cut, encode_cut  # noqa: E402
from hetserve.zoo.layered import tensors_of  # noqa: E402
from hetserve.zoo.registry import build  # noqa: E402

pytestmark = pytest.mark.torch


def _pipeline(name, cuts, cut_dtype):
    model = build(name)
    blocks = RooflineModel(n_blocks=6).blocks(model.model_name)
    stages = [StageRunner(model, blocks, r, cut_dtype=cut_dtype) for r in cuts]
    x = model.input_spec.example(batch=2, seed=3)
    with torch.inference_mode():
        whole = model(x)
    y = x
    for s in stages:
        y = s.run(y).output
    return whole, y


@pytest.mark.parametrize("name", ["resnet50", "densenet121", "resnet50-fpn"])
def test_fp32_cuts_are_exact_and_fp16_cuts_close(name):
    cuts = [(0, 2), (2, 5), (5, 6)]
    whole, y = _pipeline(name, cuts, None)
    for u, v in zip(tensors_of(whole), tensors_of(y), strict=True):
        assert torch.equal(u, v)
    whole, y = _pipeline(name, cuts, torch.float16)
    for u, v in zip(tensors_of(whole), tensors_of(y), strict=True):
        assert v.dtype == u.dtype
        assert ((u - v).norm() / u.norm()).item() < 1e-3  # measured 5e-6 .. 3e-4


def test_cut_encoding_halves_floating_tensors_only():
    x = (torch.ones(2, 3), torch.arange(4))
    e = encode_cut(x)
    assert e[0].dtype == torch.float16 and e[1].dtype == torch.int64
    assert decode_cut(e)[0].dtype == torch.float32
    assert encode_cut(x, None) is x


def test_preemption_stops_at_a_block_boundary_and_bad_ranges():
    model = build("resnet18")
    blocks = RooflineModel(n_blocks=4).blocks("resnet18")
    runner = StageRunner(model, blocks, (0, 4))
    asked = []

    def stop():
        asked.append(1)
        return len(asked) >= 2  # stop before the third block

    r = runner.run(model.input_spec.example(1), stop)
    assert not r.completed and r.blocks_done == 2 and r.output is None
    with pytest.raises(HetserveError, match="outside 0..3"):
        StageRunner(model, blocks, (2, 5))
