"""Ray as the engine's executor: one actor per worker slot, activations in the object store.

Each worker slot of the placement becomes a Ray actor (``num_gpus = 1/share`` on GPU
devices, one CPU otherwise) that holds :class:`~hetserve.runtime.stage.StageRunner`s and
runs stages on request. A stage's output stays in Ray's object store: the engine keeps its
reference and hands it to the next stage's actor, so activations go from worker to worker
without passing through the scheduler host. The actor is threaded (two calls at once), so
a ``stop`` reaches a running stage, which stops at its next block boundary (a ``Preempt``).
Without an address Ray starts a local instance; with one it joins that cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import ray
import torch
from ray.exceptions import RayActorError

from hetserve.runtime.engine import RuntimeEngine, _Task
from hetserve.runtime.torch_executor import _row


@ray.remote(max_concurrency=2)
class StageActor:
    def __init__(
        self, build: Callable[[str], Any], n_blocks: int, device: str, threads: int = 0
    ) -> None:
        import torch

        from hetserve.runtime.torch_executor import TorchExecutor

        if threads > 0:  # Ray sets OMP_NUM_THREADS=1 in actors; a CPU worker wants its share
            torch.set_num_threads(threads)

        self.ex = TorchExecutor(build, n_blocks=n_blocks, device=device)
        self.stops: set[int] = set()

    def prepare(self, worker: str, stages: list[tuple[str, tuple[int, int]]]) -> bool:
        """Build this worker's stage runners and run each first stage once (weights in
        place, kernels warmed), so the first requests are not slowed by it."""
        for model, blocks in stages:
            runner = self.ex.runner(worker, model, blocks)
            if blocks[0] == 0:
                runner.run(self.ex._models[model].input_spec.example(1))
        return True

    def stop(self, key: int) -> None:
        self.stops.add(key)

    def run(
        self,
        key: int,
        worker: str,
        model: str,
        blocks: tuple[int, int],
        x: Any,
        n: int,
        parked: list[tuple[Any, int]] | None = None,
    ) -> tuple[Any, tuple[int, bool]]:
        """One stage. ``x``: the input batch, the requests' tensors, the previous stage's
        output, or None (example inputs); ``parked``: a continued batch's input, each
        request's (output of an open route, row)."""
        import torch

        from hetserve.runtime.torch_executor import _row, _stack

        runner = self.ex.runner(worker, model, blocks)
        if parked is not None:
            refs = list({r.hex(): r for r, _ in parked}.values())
            got = dict(zip([r.hex() for r in refs], map(_torch, ray.get(refs)), strict=True))
            x = _stack([_row(got[r.hex()], i) for r, i in parked])
        elif isinstance(x, (np.ndarray, tuple)):  # a batch, or the previous stage's output
            x = _torch(x)
        elif x is None:  # the first stage, no payloads: the model's example inputs
            net = self.ex._models[model]
            x = net.input_spec.example(n)
        elif isinstance(x, list):  # some requests came without a tensor
            ex = self.ex._models[model].input_spec.example(1)[0]
            x = torch.stack([p if p is not None else ex for p in x])
        res = runner.run(x, lambda: key in self.stops)
        self.stops.discard(key)
        # activations between stages go to the store as NumPy arrays: Ray stores those
        # without pickling the data, and the next actor maps them (a torch tensor is
        # pickled, about 2x the cost at a batch of 8 ResNet inputs)
        # (the model's output goes back to the scheduler host, which may have no GPU)
        out = _cpu(res.output) if runner.last else _numpy(res.output)
        return out, (res.blocks_done, res.completed)


def _cpu(x: Any) -> Any:
    """Tensors (or tuples of them) in host memory."""
    if isinstance(x, torch.Tensor):
        return x.detach().cpu()
    if isinstance(x, (tuple, list)):
        return type(x)(_cpu(v) for v in x)
    return x


def _numpy(x: Any) -> Any:
    """Tensors (or tuples of them, on any device) as NumPy arrays in host memory."""
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().contiguous().numpy()
    if isinstance(x, (tuple, list)):
        return tuple(_numpy(v) for v in x)
    return x


def _torch(x: Any) -> Any:
    """Arrays from the object store (read-only, mapped) as tensors of their own."""
    if isinstance(x, np.ndarray):
        return torch.from_numpy(np.array(x, copy=True))
    if isinstance(x, (tuple, list)):
        return tuple(_torch(v) for v in x)
    return x


@contextlib.contextmanager
def _keep_signal_handlers() -> Iterator[None]:
    """``ray.init`` replaces the driver's SIGTERM handler with one that calls
    ``sys.exit``, which would raise ``SystemExit`` inside the HTTP server's event loop and fail
    the requests in flight. The server's own handlers (uvicorn's: stop accepting, drain,
    shut down) are put back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, handler in saved.items():
            if handler is not None:
                signal.signal(s, handler)


class RayExecutor:
    """Stages on Ray actors (module docstring)."""

    def __init__(
        self,
        view: Any,
        build: Callable[[str], Any],
        n_blocks: int = 10,
        address: str | None = None,
        plan: Any = None,
        cpu_threads: int = 0,
    ) -> None:
        """``cpu_threads``: torch threads of all CPU worker slots together, split evenly
        (0: the threads torch uses in this process)."""
        self.owns_ray = not ray.is_initialized()
        if self.owns_ray:
            with _keep_signal_handlers():
                ray.init(
                    address=address, include_dashboard=False, log_to_driver=False,
                    logging_level=logging.ERROR,
                )  # fmt: skip
        self.actors: dict[str, Any] = {}
        self.dead: set[str] = set()  # workers whose actor died
        # CPU worker slots share this machine's cores (the threads torch would use here)
        n_cpu = sum(1 for info in view.workers.values() if info.gpu.name == "CPU")
        threads = max(1, (cpu_threads or torch.get_num_threads()) // max(1, n_cpu))
        for wid, info in view.workers.items():
            gpu = info.gpu.name != "CPU"
            opts = {"num_gpus": 1.0 / info.share, "num_cpus": 0} if gpu else {"num_cpus": 0}
            device = "cuda" if gpu else "cpu"
            self.actors[wid] = StageActor.options(**opts).remote(
                build, n_blocks, device, 0 if gpu else threads
            )
        todo: dict[str, list[tuple[str, tuple[int, int]]]] = {w: [] for w in self.actors}
        for (model, pi, si), workers in view.placement.stages.items():
            if plan is not None and model in plan.models:
                blocks = plan.models[model].pipelines[pi].stages[si].blocks
                for w in workers:
                    todo[w].append((model, blocks))
        ray.get([a.prepare.remote(w, todo[w]) for w, a in self.actors.items()])

    def start(self, engine: RuntimeEngine, task: _Task, now: float) -> None:
        d = task.batch.d
        step = d.route[task.index]
        if step.worker in self.dead:
            engine.clock.call_at(now, lambda: engine.worker_lost(step.worker))
            return
        x = task.batch.payload  # the requests' tensors, or the previous stage's reference
        parked = None
        if task.index == 0 and step.blocks[0] > 0:  # a continued batch (open routes)
            x, parked = None, x
        elif task.index == 0 and x is not None:
            if all(p is None for p in x):
                x = None
            elif all(p is not None for p in x):  # one array, put in the store once
                x = ray.put(torch.stack(x).numpy())
        call = self.actors[step.worker].run
        args = (id(task), step.worker, d.model, step.blocks, x, len(d.requests), parked)
        at_end = step.blocks[1] == engine._nblocks[d.model]  # the model's last block

        def failed(err: BaseException) -> None:
            if isinstance(err, RayActorError):  # the actor died (killed, node lost): rule 9
                self.dead.add(step.worker)
                engine.worker_lost(step.worker)
            else:  # the stage raised in the actor
                cause = getattr(err, "cause", None) or err
                engine.stage_failed(task, f"{type(cause).__name__}: {cause}")

        if at_end:
            # the model's output is small: it comes back with the reply, in one object,
            # so the worker is free again as soon as the reply is here
            def whole(fut: asyncio.Future[Any]) -> None:
                err = fut.exception()
                if err is not None:
                    return failed(err)
                out, (blocks_done, completed) = fut.result()
                if completed:
                    rows = [_row(out, i) for i in range(len(d.requests))]
                    engine.stage_finished(task, blocks_done, rows)
                else:
                    engine.stage_finished(task, blocks_done, None, preempted=True)

            ref = call.remote(*args)
            asyncio.wrap_future(ref.future()).add_done_callback(whole)
            return

        # between stages the activations stay in the object store: only the reference
        # and the stage's outcome come here
        out_ref, meta_ref = call.options(num_returns=2).remote(*args)

        def done(fut: asyncio.Future[Any]) -> None:
            err = fut.exception()
            if err is not None:
                return failed(err)
            blocks_done, completed = fut.result()
            engine.stage_finished(task, blocks_done, out_ref, preempted=not completed)

        asyncio.wrap_future(meta_ref.future()).add_done_callback(done)

    @staticmethod
    def split(out_ref: Any, n: int) -> list[tuple[Any, int]]:
        """An open route's output stays in the store: each request parks (reference, row)."""
        return [(out_ref, i) for i in range(n)]

    def stop(self, engine: RuntimeEngine, task: _Task) -> None:
        step = task.batch.d.route[task.index]
        self.actors[step.worker].stop.remote(id(task))

    def close(self) -> None:
        """Release the actors (and the local Ray instance, if this executor started it)."""
        for a in self.actors.values():
            ray.kill(a, no_restart=True)
        self.actors.clear()
        if self.owns_ray:
            ray.shutdown()
