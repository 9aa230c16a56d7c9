"""The Ray engine's worker: one actor per worker slot (``runtime.ray_executor``).

A :class:`StageActor` holds a :class:`~hetserve.runtime.torch_executor.TorchExecutor` on
its device and runs stages on request, takes its inputs from the object store and puts
its outputs there as NumPy arrays; with a plan that has load plans it loads models on
demand (``load``/``loaded``/``evict``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import ray
import torch

from hetserve.runtime.batching import concat, slice_rows


# stages run one at a time, on the default group's one thread; ``stop`` and ``where`` have
# a thread of their own, so a stop reaches a running stage (two threads for every method,
# as before, let two stages run at once if ever sent together)
# ``loaded`` (waiting for a cold start to end) has a thread of its own too, so that a
# batch on the model runs on the stage thread while its weights arrive
@ray.remote(concurrency_groups={"control": 1, "load": 1})
class StageActor:
    def __init__(
        self, build: Callable[[str], Any], n_blocks: int, device: str, threads: int = 0,
        preemptive: bool = True, cold: tuple[Callable[..., Any], Callable[..., Any]] | None = None,
        cut_fp16: bool = True, graphs: Callable[[str], Any] | None = None,
    ) -> None:  # fmt: skip
        """``cold``: ``(leaf_rows, host_alias)`` of ``hetserve.profiling.layers`` for a
        plan with load plans (models load on demand, whole); ``graphs``: the models'
        graphs by name (a ``ModelCatalog``'s; default the shipped ones)."""
        import torch

        from hetserve.runtime.torch_executor import TorchExecutor

        if threads > 0:  # Ray sets OMP_NUM_THREADS=1 in actors; a CPU worker wants its share
            torch.set_num_threads(threads)

        leaf_rows, host_alias = cold if cold is not None else (None, None)
        self.ex = TorchExecutor(
            build, n_blocks=n_blocks, device=device, leaf_rows=leaf_rows, host_alias=host_alias,
            cut_fp16=cut_fp16, **({"graphs": graphs} if graphs is not None else {}),
        )  # fmt: skip
        self.preemptive = preemptive
        self.stops: set[int] = set()
        self.loads: dict[tuple[str, str], tuple[threading.Event, list[BaseException]]] = {}

    def load(self, worker: str, model: str, plan: Any) -> None:
        """Start a cold start of ``model`` by its load plan (returns at once;
        :meth:`loaded` waits for its end)."""
        done, err = threading.Event(), []
        self.loads[(worker, model)] = (done, err)
        try:
            cm = self.ex.cold_model(worker, model)
            if cm.loaded or cm.loading:
                done.set()
            else:
                cm.load(plan, done.set)
        except Exception as e:  # told by ``loaded``
            err.append(e)
            done.set()

    @ray.method(concurrency_group="load")
    def loaded(self, worker: str, model: str) -> None:
        done, err = self.loads[(worker, model)]
        done.wait()
        if err:
            raise err[0]

    @ray.method(concurrency_group="control")
    def cold_state(self) -> dict[str, bool]:
        """Per cold instance this actor holds (``worker/model``): whether it is loaded."""
        return {f"{w}/{m}": cm.loaded for (w, m), cm in self.ex._cold.items()}

    def evict(self, worker: str, model: str) -> None:
        cm = self.ex._cold.get((worker, model))
        if cm is not None and cm.loaded:
            cm.evict()

    def release(self, worker: str, model: str, blocks: tuple[int, int]) -> None:
        """A switch's old blocks: their stage runners on this worker dropped."""
        self.ex.drop(worker, model, (int(blocks[0]), int(blocks[1])))

    def prepare(
        self, worker: str, stages: list[tuple[str, tuple[int, int]]],
        versions: dict[str, list[int]] | None = None,
    ) -> bool:  # fmt: skip
        """Build this worker's stage runners (also for the models' other served
        ``versions``) and run each first stage once (weights in place, kernels warmed), so
        the first requests are not slowed by it."""
        for model, blocks in stages:
            for v in [None, *(versions or {}).get(model, [])]:
                runner = self.ex.runner(worker, model, blocks, v)
                if blocks[0] == 0:
                    runner.run(self.ex._models[model].input_spec.example(1))
        return True

    @ray.method(concurrency_group="control")
    def stop(self, key: int) -> None:
        self.stops.add(key)

    def example(self, model: str) -> Any:
        """A one-row request's example input (with the batch dimension) as a NumPy array
        (None for several inputs)."""
        x = self.ex._models[model].input_spec.example(1)
        return to_numpy(x) if isinstance(x, torch.Tensor) else None

    @ray.method(concurrency_group="control")
    def where(self) -> dict[str, Any]:
        from hetserve.runtime.ray_placement import where_am_i

        return where_am_i()

    def run(
        self,
        key: int,
        worker: str,
        model: str,
        blocks: tuple[int, int],
        x: Any,
        rows: list[int],
        parked: list[tuple[Any, int, int]] | None = None,
        versions: tuple[int | None, ...] | None = None,
    ) -> tuple[Any, tuple[int, bool, float]]:
        """One stage; its output and (blocks run, completed, seconds of compute). ``x``:
        the input batch, the requests' tensors, the previous stage's
        output, or None (example inputs); ``rows``: each request's rows; ``parked``: a
        continued batch's input, each request's (output of an open route, first row,
        end row); ``versions``: the rows' model versions (None: the default version for
        all)."""
        cm = self.ex._cold.get((worker, model))
        net = cm.net if cm is not None else None  # a cold instance (``bert-base@3``)
        if parked is not None:
            refs = list({r.hex(): r for r, *_ in parked}.values())
            got = dict(zip([r.hex() for r in refs], map(to_torch, ray.get(refs)), strict=True))
            x = concat([slice_rows(got[r.hex()], lo, hi) for r, lo, hi in parked])
        elif isinstance(x, (np.ndarray, tuple)):  # a batch, or the previous stage's output
            x = to_torch(x)
        elif x is None:  # the first stage, no payloads: the model's example inputs
            x = (net or self.ex.net(model)).input_spec.example(sum(rows))
        elif isinstance(x, list):  # per request: its input in the store, a tensor, or None
            refs = [p for p in x if isinstance(p, ray.ObjectRef)]
            got = iter(ray.get(refs)) if refs else iter(())
            parts = [to_torch(next(got)) if isinstance(p, ray.ObjectRef) else p for p in x]
            spec = (net or self.ex.net(model)).input_spec
            x = concat([p if p is not None else spec.example(k)
                        for p, k in zip(parts, rows, strict=True)])  # fmt: skip
        t0 = time.perf_counter()
        if cm is not None:  # runs whole, each layer waiting for its weights
            out = self.ex.run_cold(worker, model, x)
            return to_numpy(out), (blocks[1] - blocks[0], True, time.perf_counter() - t0)
        stop = (lambda: key in self.stops) if self.preemptive else None
        res = self.ex.run_stage(worker, model, blocks, x, versions, stop)
        compute_s = time.perf_counter() - t0
        self.stops.discard(key)
        # activations between stages go to the store as NumPy arrays: Ray stores those
        # without pickling the data, and the next actor maps them (a torch tensor is
        # pickled, about 2x the cost at a batch of 8 ResNet inputs); the model's output
        # too (it goes back to the scheduler host, which may have no GPU: 0.5 ms less per
        # call than a tensor, measured with ResNet-18 at batch 1)
        out = to_numpy(res.output)
        return out, (res.blocks_done, res.completed, compute_s)


def to_numpy(x: Any) -> Any:
    """Tensors (or tuples of them, on any device) as NumPy arrays in host memory."""
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().contiguous().numpy()
    if isinstance(x, (tuple, list)):
        return tuple(to_numpy(v) for v in x)
    return x


def to_torch(x: Any) -> Any:
    """Arrays from the object store (read-only, mapped) as tensors of their own."""
    if isinstance(x, np.ndarray):
        return torch.from_numpy(np.array(x, copy=True))
    if isinstance(x, (tuple, list)):
        return tuple(to_torch(v) for v in x)
    return x
