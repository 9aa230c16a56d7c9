"""Real execution of stages: zoo models' blocks in PyTorch (``runtime.stage``)."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from hetserve.core.errors import HetserveError
from hetserve.core.graph import ModelGraph, get_graph
from hetserve.core.latency import RooflineModel, cold_start_model
from hetserve.engine.entities import Task
from hetserve.engine.executor import BaseExecutor, Kernel
from hetserve.runtime.batching import (
    batch_input,
    concat,
    map_tensors,
    row_versions,
    split,
    take,
)
from hetserve.runtime.engine import LoopClock
from hetserve.runtime.stage import StageResult, StageRunner, run_together
from hetserve.scheduling.protocol import ClusterView, WorkerInfo

LOG = logging.getLogger("hetserve.runtime")


class TorchExecutor(BaseExecutor):
    """One :class:`StageRunner` per (worker, model, block range), made on first use.

    A batch's input is its requests' payloads stacked (a request without one gets the
    model's example input), its output split back per request. On a :class:`VirtualClock`
    the stage runs at once and ends after the time it really took (tests); on a wall clock
    it runs on the loop's default thread pool and reports back on the loop.
    ``stop`` (preemption) is checked at every block boundary.

    Devices: a worker computes on ``devices[worker]`` (``local_devices``: a GPU worker on
    ``cuda:<its index>`` of this machine), else on ``device``. Activations crossing to a
    worker on another device move there at the next stage's start; a model's output comes
    back to host memory on the worker's thread, where the server encodes it.

    Cold starts: a ``Load`` of a model that has a load plan (the plan's ``load_plans``, or
    the latency model's) makes a :class:`~hetserve.runtime.coldload.ColdModel` for that
    worker (weights in host memory, pinned on CUDA) and loads it by the plan on a loader
    thread (CPU) or streams (CUDA); a batch on it runs the whole model, each layer waiting
    for its weights; ``Evict`` frees them. Model names may carry an instance suffix
    (``bert-base@3``): each instance is its own copy of the architecture.

    Versions: ``version_of(request_id)`` names a request's model version (None: the
    default one). A batch whose rows ask for several versions runs each version's rows
    with that version's weights, the parts in lockstep block by block (``run_together``),
    and comes out in the rows' order.
    """

    def __init__(
        self,
        build: Callable[[str], Any],
        n_blocks: int = 10,
        device: str = "cpu",
        cut_fp16: bool = True,
        leaf_rows: Callable[[Any], Any] | None = None,
        host_alias: Callable[[Any, int], Any] | None = None,
        version_of: Callable[[int], int | None] | None = None,
        preemptive: bool = True,
        graphs: Callable[[str], ModelGraph] = get_graph,
        devices: Mapping[str, str] | None = None,
    ) -> None:
        """``preemptive``: stages may be stopped at block boundaries (a scheduler that
        preempts); on CUDA each boundary then waits for its block's kernels.
        ``build(name)``: the model (a zoo ``LayeredModel``; the runtime sits below the
        zoo in the layering, so the caller passes ``hetserve.zoo.registry.builder``'s);
        ``graphs(name)``: its graph, which its blocks are cut from (a ``ModelCatalog``'s).
        Cold loading needs ``leaf_rows`` and, on CUDA, ``host_alias`` likewise
        (``hetserve.profiling.layers``)."""
        self.leaf_rows = leaf_rows
        self.host_alias = host_alias
        self.version_of = version_of
        self.preemptive = preemptive
        self.build = build
        self.n_blocks = n_blocks
        self.device = device
        self.devices = dict(devices or {})
        self.cut_dtype = torch.float16 if cut_fp16 else None
        self._models: dict[str, Any] = {}
        self._runners: dict[tuple[str, str, tuple[int, int], int | None], StageRunner] = {}
        self._versioned: dict[tuple[str, int], Any] = {}  # (model, version) -> model
        self._roofline = RooflineModel(graphs, n_blocks=n_blocks)
        self._cold: dict[tuple[str, str], Any] = {}  # (worker, model) -> ColdModel
        self._backends: dict[tuple[Any, ...], Any] = {}  # (device, *secondaries) -> backend

    # ------------------------------------------------------------------ cold starts
    @staticmethod
    def _load_plan(kernel: Kernel, model: str) -> Any:
        lp = kernel.plan.load_plans.get(model)
        cold = cold_start_model(kernel.view.latency)
        if lp is None and cold is not None:
            lp = cold.model_load_plan(model)
        return lp

    def device_of(self, worker: str) -> str:
        """What ``worker`` computes on."""
        return self.devices.get(worker, self.device)

    def _backend(self, device: str, secondaries: list[int] | None = None) -> Any:
        """The loader's backend: CUDA streams on ``device`` (the worker's; ``secondaries``:
        the GPUs, by index, whose host links PT's parts 1.. come over), else a thread.
        One CUDA backend per device and set of secondaries, shared by every model it
        loads there: their
        destination blocks come from one load stream's pool, so the blocks an eviction
        frees go to the next model's load (a backend per model would keep them apart)."""
        from hetserve.runtime.coldload import CudaBackend, ThreadBackend

        if device.startswith("cuda"):
            if self.host_alias is None:
                raise RuntimeError("cold loading on CUDA needs host_alias")
            key = (device, *(secondaries or ()))
            if key not in self._backends:
                self._backends[key] = CudaBackend(self.host_alias, device, list(key[1:]))
            return self._backends[key]
        return ThreadBackend()

    @staticmethod
    def pt_secondaries(view: ClusterView, worker: str, n_parts: int) -> list[int]:
        """The secondary GPUs of a load plan over ``n_parts`` host links for ``worker``:
        those the planner counted (``planning.deepplan.pt_gpus``: one per other PCIe
        switch, NVLink-joined), by index on the worker's node."""
        if n_parts <= 1:
            return []
        from hetserve.planning.deepplan import pt_gpus

        info = view.workers[worker]
        gpu = view.cluster.gpu(info.gpu_id)
        return pt_gpus(view.cluster.node(info.node), gpu.index, n_parts)[1:]

    def _loaded(self, a: Any, start_s: float, now: float) -> None:
        self.kernel.load_finished(a, start_s, now)

    def add_workers(self, infos: Mapping[str, WorkerInfo], done: Callable[[str], None]) -> None:
        """A new plan's workers: threads of this process like the others (ready at
        once); their stage runners are made when their blocks load."""
        done("")

    def release_workers(self, ids: Sequence[str]) -> None:
        """Workers a plan no longer uses: their stage runners dropped."""
        gone = set(ids)
        for key in [k for k in self._runners if k[0] in gone]:
            del self._runners[key]

    def load(self, a: Any, now: float) -> None:
        """A cold start by the model's load plan (class docstring); without one, the
        stage runner of ``a``'s blocks on its worker, made (weights in place, a first
        stage run once) on a thread of the loop's pool, unless it exists: the blocks a
        plan switch brings (``control.switching``)."""
        kernel = self.kernel
        lp = self._load_plan(kernel, a.model)
        if lp is None:
            if (a.worker, a.model, a.blocks, None) in self._runners:
                kernel.clock.call_at(now, self._loaded, a, now)
                return
            clock = kernel.clock
            if not isinstance(clock, LoopClock):  # a virtual clock: now, ends after as long
                t0 = time.perf_counter()
                try:
                    self._prepare_one(a.worker, a.model, a.blocks)
                except Exception as err:  # (the load fails; the scheduler hears why)
                    kernel.load_finished(a, now, now, False, _reason(err))
                    return
                clock.call_at(now + time.perf_counter() - t0, self._loaded, a, now)
                return

            def made(f: asyncio.Future[None]) -> None:
                err = f.exception()
                if err is not None:
                    kernel.load_finished(a, now, clock.now(), False, _reason(err))
                else:
                    kernel.load_finished(a, now, clock.now())

            fut = clock.loop.run_in_executor(None, self._prepare_one, a.worker, a.model, a.blocks)
            fut.add_done_callback(lambda f: clock.guard(made, f))
            return
        cm = self.cold_model(
            a.worker, a.model, self.pt_secondaries(kernel.view, a.worker, lp.plan.n_parts)
        )
        if cm.loaded or cm.loading:
            kernel.clock.call_at(now, self._loaded, a, now)
            return
        clock = kernel.clock
        if not isinstance(clock, LoopClock):  # a virtual clock: load now, end after as long
            import threading

            done = threading.Event()
            t0 = time.perf_counter()
            cm.load(lp.plan, done.set)
            done.wait()
            clock.call_at(now + time.perf_counter() - t0, self._loaded, a, now)
            return
        cm.load(lp.plan, lambda: clock.call_soon(self._loaded, a, now, clock.now()))

    def cold_model(self, worker: str, model: str, secondaries: list[int] | None = None) -> Any:
        """The worker's cold instance of ``model`` (made on first use: weights in host
        memory, none on the device)."""
        from hetserve.core.layerlatency import base_model
        from hetserve.runtime.coldload import ColdModel

        key = (worker, model)
        cm = self._cold.get(key)
        if cm is None:
            if self.leaf_rows is None:
                raise RuntimeError("cold loading needs leaf_rows (hetserve.profiling.layers)")
            net = self.build(base_model(model))
            backend = self._backend(self.device_of(worker), secondaries)
            cm = self._cold[key] = ColdModel(net, backend, self.leaf_rows(net))
        return cm

    def run_cold(self, worker: str, model: str, x: Any) -> Any:
        """A batch through the worker's cold instance, whole (each layer waiting for its
        weights), returned once its kernels are done. ``x``: the batch, or None (the
        model's example input, ``n`` rows)."""
        cm = self._cold.get((worker, model))
        if cm is None:
            raise RuntimeError(f"{model} was never loaded on {worker}")
        dev = "cpu" if cm.backend.name == "cpu" else self.device_of(worker)
        out = cm.run(map_tensors(x, lambda t: t.to(dev)))
        cm.finish()
        return out

    def _prepare_one(self, worker: str, model: str, blocks: tuple[int, int]) -> None:
        """The stage runner of ``blocks`` on ``worker``, made; a first stage run once on
        the model's example input (its weights in place, kernels warmed)."""
        r = self.runner(worker, model, blocks)
        if blocks[0] == 0:
            r.run(self._models[model].input_spec.example(1))

    def evict(self, a: Any, now: float) -> None:
        """A cold model's weights freed; without a load plan, the stage runners of
        ``a``'s blocks on its worker dropped (every version's)."""
        cm = self._cold.get((a.worker, a.model))
        if cm is not None and cm.loaded:
            cm.evict()
            return
        self.drop(a.worker, a.model, tuple(a.blocks))

    def drop(self, worker: str, model: str, blocks: tuple[int, int]) -> None:
        """The stage runners of ``blocks`` of ``model`` on ``worker`` (every version's)
        dropped: their weights go with them (a switch's old blocks)."""
        for key in [k for k in self._runners if k[:3] == (worker, model, blocks)]:
            del self._runners[key]

    def net(self, model: str, version: int | None = None) -> Any:
        """The model, built on first use (a version other than the default: its weights)."""
        if version is None:
            net = self._models.get(model)
            if net is None:
                net = self._models[model] = self.build(model)
            return net
        net = self._versioned.get((model, version))
        if net is None:
            net = self._versioned[(model, version)] = self.build(model, version=version)  # type: ignore[call-arg]
        return net

    def runner(
        self, worker: str, model: str, blocks: tuple[int, int], version: int | None = None
    ) -> StageRunner:
        key = (worker, model, blocks, version)
        r = self._runners.get(key)
        if r is None:
            net = self.net(model, version)
            cut = self._roofline.blocks(net.model_name)
            r = StageRunner(net, cut, blocks, self.device_of(worker), self.cut_dtype)
            self._runners[key] = r
        return r

    def run_stage(
        self,
        worker: str,
        model: str,
        blocks: tuple[int, int],
        x: Any,
        versions: tuple[int | None, ...] | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> StageResult:
        """One stage on a batch whose rows ask for ``versions`` (class docstring)."""
        kinds = set(versions) if versions else {None}
        if len(kinds) == 1:
            return self.runner(worker, model, blocks, next(iter(kinds))).run(x, should_stop)
        assert versions is not None
        groups: dict[int | None, list[int]] = {}
        for i, v in enumerate(versions):
            groups.setdefault(v, []).append(i)
        runners = [self.runner(worker, model, blocks, v) for v in groups]
        parts = [take(x, torch.tensor(rows)) for rows in groups.values()]
        res = run_together(runners, parts, should_stop)
        if not res.completed:
            return res
        order = torch.tensor([i for rows in groups.values() for i in rows])
        merged = concat(res.output)
        return StageResult(take(merged, torch.argsort(order)), res.blocks_done, True)

    def prepare(
        self, plan: Any, placement: Any, versions: dict[str, list[int]] | None = None
    ) -> None:
        """Build every stage runner of the placement (also for each model's other served
        ``versions``) and run each once (weights on the device, kernels warmed) so that
        the first requests are not slowed by it."""
        for (model, pi, si), workers in placement.stages.items():
            blocks = plan.models[model].pipelines[pi].stages[si].blocks
            for w in workers:
                for v in [None, *(versions or {}).get(model, [])]:
                    self.runner(w, model, blocks, v)
        for (_, model, blocks, vr), r in list(self._runners.items()):
            if blocks[0] == 0:
                x = self._models[model].input_spec.example(1)
                while True:
                    res = r.run(x)
                    if r.last:
                        break
                    nxt = [q for (_, m, b, v), q in self._runners.items()
                           if m == model and b[0] == r.stop and v == vr]  # fmt: skip
                    if not nxt:
                        break
                    r, x = nxt[0], res.output

    def _input(self, task: Task) -> Any:
        b = task.batch
        if task.index > 0:
            return b.payload
        if b.d.route[0].blocks[0] > 0:  # a continued batch: the parked activations
            return concat(b.payload)
        return batch_input(self.net(b.d.model), b.requests, b.payload)

    def _cold_input(self, task: Task, cm: Any) -> Any:
        b = task.batch
        if cm is None or task.index > 0 or b.d.route[0].blocks[0] > 0:
            raise RuntimeError("a cold-loaded model runs whole, from its first block")
        dev = "cpu" if cm.backend.name == "cpu" else self.device_of(task.step.worker)
        return map_tensors(batch_input(cm.net, b.requests, b.payload), lambda t: t.to(dev))

    def split(self, task: Task, output: Any) -> list[Any]:
        """A route's output per request: its rows (the model's answers at the model's
        end; the activations each request parks with after an open route)."""
        return split(output, [r.rows for r in task.batch.requests])

    def start(self, task: Task, now: float) -> None:
        kernel = self.kernel
        step = task.step
        d = task.batch.d
        cm = self._cold.get((step.worker, d.model))
        x = self._cold_input(task, cm) if cm is not None else self._input(task)
        if cm is not None:

            def work() -> tuple[Any, int, bool, float]:
                t0 = time.perf_counter()
                out = cm.run(x)
                cm.finish()  # (CUDA: finished when its kernels are)
                out = to_host(out)
                return out, step.blocks[1] - step.blocks[0], True, time.perf_counter() - t0

        else:
            versions = row_versions(self.version_of, d.requests)
            last = self.runner(step.worker, d.model, step.blocks).last  # built here
            stop = (lambda: task.stop) if self.preemptive else None

            def work() -> tuple[Any, int, bool, float]:
                t0 = time.perf_counter()
                res = self.run_stage(step.worker, d.model, step.blocks, x, versions, stop)
                out = to_host(res.output) if last and res.completed else res.output
                return out, res.blocks_done, res.completed, time.perf_counter() - t0

        clock = kernel.clock
        if not isinstance(clock, LoopClock):  # a virtual clock: run now, end after as long
            try:
                result = work()
            except Exception as err:
                clock.call_at(now, self._failed, task, _reason(err))
                return
            clock.call_at(now + result[3], self._ended, task, result)
            return

        def settle(f: asyncio.Future[tuple[Any, int, bool, float]]) -> None:
            now = clock.now()
            err = f.exception()
            if err is not None:  # the stage raised: its requests fail, serving goes on
                self._failed(task, _reason(err), now)
                return
            try:
                self._ended(task, f.result(), now)
            except Exception as err:  # the completion path raised: the batch still ends
                LOG.error("batch %d: ending its stage raised", task.batch.id, exc_info=err)
                self._failed(task, _reason(err), now)

        fut = clock.loop.run_in_executor(None, work)
        fut.add_done_callback(lambda f: clock.guard(settle, f))

    def _ended(self, task: Task, result: tuple[Any, int, bool, float], now: float) -> None:
        out, blocks_done, completed, _ = result
        if completed:
            self.kernel.stage_done(task, now, out)
        else:
            self.kernel.stage_stopped(task, blocks_done, now)

    def _failed(self, task: Task, reason: str, now: float) -> None:
        self.kernel.stage_failed(task, reason, now)


def to_host(x: Any) -> Any:
    """A model's output in host memory (where the server encodes answers); None (a stage
    stopped before its end has no output) stays None."""
    if x is None:
        return None
    return map_tensors(x, lambda t: t if t.device.type == "cpu" else t.cpu())


def local_devices(view: ClusterView, gpu_device: str = "cuda") -> dict[str, str]:
    """Where the threads engine runs each GPU worker of ``view``: ``cuda:<index>``, the
    GPU of that index on this machine (``gpu_device="cuda"``), else ``gpu_device``
    (tests: ``cpu``). CPU workers are not named (they compute on the CPU). With CUDA, the
    GPU workers must all be on one node of the cluster (this machine's) and each GPU of
    that index must be here and of the planned type (its name, or the catalog's alias for
    it, from ``torch.cuda.get_device_name``): a one-line error otherwise."""
    gpus = {w: info for w, info in view.workers.items() if info.gpu.name != "CPU"}
    if not gpus:
        return {}
    if not gpu_device.startswith("cuda"):
        return {w: gpu_device for w in gpus}
    # NVML's (and `cluster discover`'s) order, not CUDA's default fastest-first; in
    # effect where CUDA is not yet initialised in this process (the name check is the guard)
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    nodes = sorted({info.node for info in gpus.values()})
    if len(nodes) > 1:
        raise HetserveError(
            f"--engine threads runs in one process on one machine, but the plan has GPU "
            f"workers on nodes {', '.join(nodes)}; use --engine ray"
        )
    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    catalog = view.cluster.catalog
    out: dict[str, str] = {}
    for w, info in sorted(gpus.items()):
        index = view.cluster.gpu(info.gpu_id).index
        if index >= have:
            raise HetserveError(
                f"worker {w}: the plan puts it on {info.gpu_id} ({info.gpu.name}), but this "
                f"machine has {have} CUDA GPU(s); serve where the cluster file's node "
                f"{info.node} is, or use --engine ray (or --emulate)"
            )
        name = torch.cuda.get_device_name(index)
        found = catalog.get(name).name if name in catalog else None
        if found != info.gpu.name:
            raise HetserveError(
                f"worker {w}: the plan puts it on an {info.gpu.name} ({info.gpu_id}), but "
                f"cuda:{index} here is {name!r}; use the cluster from `hetserve cluster "
                f"discover` on this machine"
            )
        out[w] = f"cuda:{index}"
    return out


def _reason(err: BaseException) -> str:
    return f"stage_error: {type(err).__name__}: {err}"
