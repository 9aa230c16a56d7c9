"""What a runtime worker executes: one stage of a zoo model, block by block.

A :class:`StageRunner` holds the layers of a contiguous block range of a zoo model (the
same blocks as the plan's: ``RooflineModel(n_blocks).blocks``) on a device, runs a batch
through them one block at a time, and can stop at a block boundary when asked (a
``Preempt`` takes effect at the next exit point). Activations that cross a cut to another
worker are *encoded* before they leave (floating-point tensors cast to FP16, as PPipe sends
them; ``cut_dtype=None`` keeps FP32) and *decoded* on arrival (cast back to the model's
dtype). With FP32 cuts a pipelined run equals the single-process run exactly; with FP16
cuts, within the rounding of one FP16 cast per cut: the relative error (L2 norm) of the
outputs of a three-stage pipeline of random-weight zoo models is 3.5e-5 (ResNet-50),
4.8e-6 (DenseNet-121) and 1.5e-4 to 2.9e-4 (ResNet-50-FPN's five maps); tests/runtime
holds it below 1e-3.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from hetserve.core.errors import HetserveError
from hetserve.core.graph import Blocks


def _map_tensors(x: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, tuple):
        return tuple(_map_tensors(v, fn) for v in x)
    if isinstance(x, list):
        return [_map_tensors(v, fn) for v in x]
    return x


def encode_cut(x: Any, cut_dtype: torch.dtype | None = torch.float16) -> Any:
    """Activations leaving a stage: floating tensors as ``cut_dtype`` (None: unchanged)."""
    if cut_dtype is None:
        return x
    return _map_tensors(x, lambda t: t.to(cut_dtype) if t.is_floating_point() else t)


def decode_cut(x: Any, dtype: torch.dtype = torch.float32) -> Any:
    """Activations arriving at a stage: floating tensors back to the model's dtype."""
    return _map_tensors(x, lambda t: t.to(dtype) if t.is_floating_point() else t)


def device_sync(device: str | torch.device) -> Callable[[], None] | None:
    """On CUDA: a function that returns once the work queued so far on the device's
    current stream is done (an event recorded and waited for); None on the CPU, where a
    layer has run when its call returns."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return None

    def sync() -> None:
        ev = torch.cuda.Event()
        ev.record(torch.cuda.current_stream(dev))
        ev.synchronize()

    return sync


@dataclass
class StageResult:
    output: Any  # the last block's output (encoded for the next cut unless last)
    blocks_done: int  # blocks of the stage that ran (fewer when stopped)
    completed: bool


class StageRunner:
    """Blocks ``[first, stop)`` of ``model`` (a zoo ``LayeredModel``), cut as ``blocks``."""

    def __init__(
        self,
        model: Any,
        blocks: Blocks,
        block_range: tuple[int, int],
        device: str = "cpu",
        cut_dtype: torch.dtype | None = torch.float16,
    ) -> None:
        first, stop = block_range
        if not 0 <= first < stop <= len(blocks):
            raise HetserveError(
                f"{model.model_name}: block range {first}..{stop - 1} is outside "
                f"0..{len(blocks) - 1}"
            )
        if blocks.bounds[-1] != len(model.layers):
            raise HetserveError(
                f"{model.model_name}: the blocks cover {blocks.bounds[-1]} layers, the model "
                f"has {len(model.layers)}"
            )
        self.model = model.to(device).eval()
        self.blocks = blocks
        self.first, self.stop = first, stop
        self.device = torch.device(device)
        self.cut_dtype = cut_dtype
        self.dtype = getattr(model, "compute_dtype", torch.float32)
        self.last = stop == len(blocks)
        # CUDA only queues kernels: a block boundary is an exit point once the block has
        # run, and a stage has finished once its kernels have
        self.sync = device_sync(self.device)

    def run(self, x: Any, should_stop: Callable[[], bool] | None = None) -> StageResult:
        """Run the stage on a batch (decoded from the cut before it unless it is the first
        stage); ``should_stop`` is asked at every block boundary."""
        res = run_together([self], [x], should_stop)
        return StageResult(res.output[0] if res.completed else None, res.blocks_done,
                           res.completed)  # fmt: skip

    def _finish(self, x: Any) -> Any:
        if self.last and self.dtype == torch.bfloat16:  # NumPy has no bfloat16
            x = _map_tensors(x, lambda t: t.float() if t.is_floating_point() else t)
        return x if self.last else encode_cut(x, self.cut_dtype)


def run_together(
    runners: list[StageRunner], xs: list[Any], should_stop: Callable[[], bool] | None = None
) -> StageResult:
    """Run the same blocks of several runners (one per version of a model: the same
    blocks, each version's weights) on their parts of one batch, block by block in
    lockstep, so that a stop leaves every part at the same block boundary. The output is
    the list of the parts' outputs.

    On CUDA (``StageRunner.sync``) the blocks' kernels are waited for at each boundary
    where ``should_stop`` is asked (so a stop leaves the GPU idle at that boundary, and the
    stage's time is the GPU's), and at the end (a stage is finished when its kernels
    are): without ``should_stop``, once per stage."""
    first = runners[0]
    sync = first.sync
    # floating inputs and cuts in the model's dtype (a repository model's may be FP16
    # or BF16; requests and cuts carry FP32 or FP16)
    xs = [_map_tensors(decode_cut(x, r.dtype), lambda t, r=r: t.to(r.device))
          for r, x in zip(runners, xs, strict=True)]  # fmt: skip
    done = 0
    with torch.inference_mode():
        for k in range(first.first, first.stop):
            if should_stop is not None and done > 0:
                if sync is not None:
                    sync()
                if should_stop():
                    return StageResult(None, done, False)
            lo, hi = first.blocks.bounds[k], first.blocks.bounds[k + 1]
            xs = [r.model.run_layers(x, lo, hi) for r, x in zip(runners, xs, strict=True)]
            done += 1
    if sync is not None:
        sync()
    if not first.last and should_stop is not None and should_stop():
        return StageResult(None, done, False)  # the cut is an exit point too
    return StageResult([r._finish(x) for r, x in zip(runners, xs, strict=True)], done, True)
