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


def _recorded(runner, monkeypatch):
    """The runner's device sync and block calls recorded (CUDA's order, on the CPU)."""
    log = []
    runner.sync = lambda: log.append("sync")
    real = runner.model.run_layers

    def run_layers(x, lo, hi):
        log.append(f"block {lo}")
        return real(x, lo, hi)

    monkeypatch.setattr(runner.model, "run_layers", run_layers)
    return log


def test_on_cuda_a_stop_is_asked_once_the_blocks_kernels_are_done(monkeypatch):
    """CUDA only queues kernels: each boundary where a stop is asked first waits for the
    block before it, and the stage ends only when its kernels are done (recorded on the
    CPU with the sync stubbed; on a GPU, ``test_on_cuda_preemption_stops_the_gpu``)."""
    model = build("resnet18")
    blocks = RooflineModel(n_blocks=4).blocks("resnet18")
    runner = StageRunner(model, blocks, (0, 4))
    assert runner.sync is None  # nothing to wait for on the CPU
    log = _recorded(runner, monkeypatch)
    b = blocks.bounds

    def stop():
        log.append("asked")
        return log.count("asked") >= 2

    r = runner.run(model.input_spec.example(1), stop)
    assert not r.completed and r.blocks_done == 2
    assert log == [f"block {b[0]}", "sync", "asked", f"block {b[1]}", "sync", "asked"]
    log.clear()
    r = runner.run(model.input_spec.example(1))  # not preemptive: one wait, at the end
    assert r.completed
    assert log == [f"block {b[k]}" for k in range(4)] + ["sync"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_preemption_stops_the_gpu():
    model = build("resnet50")
    blocks = RooflineModel(n_blocks=10).blocks("resnet50")
    runner = StageRunner(model, blocks, (0, 10), device="cuda")
    x = model.input_spec.example(64).cuda()
    stop_after = [3]

    def stop():
        stop_after[0] -= 1
        return stop_after[0] <= 0

    r = runner.run(x, stop)
    assert not r.completed and r.blocks_done == 3
    assert torch.cuda.current_stream().query()  # nothing left running on the GPU
    whole = runner.run(x)
    with torch.inference_mode():
        want = model(x)
    assert torch.equal(whole.output, want)
