"""Ray as the engine's executor: one actor per worker slot, activations in the object store.

Each worker slot of the placement becomes a Ray actor that holds
:class:`~hetserve.runtime.stage.StageRunner`s and runs stages on request (or, emulated,
sleeps for the latency model's time). GPU slots are placed on GPUs of their planned type
by Ray's placement groups (``runtime.ray_placement``: one bundle per planned GPU,
``1/share`` of it per slot), and every actor's report of where it is is checked against
the plan before anything is served. A thread watches Ray's node table: the workers of a
node that dies are lost (protocol rule 9) even while idle.

A stage's output stays in Ray's object store: the engine keeps its reference and hands
it to the next stage's actor, so activations go from worker to worker without passing
through the scheduler host. Stages run on the actor's one stage thread; ``stop`` has a
thread of its own (Ray's concurrency groups), so it reaches a running stage, which stops at
its next block boundary (a ``Preempt``).
With a plan that has load plans (DeepPlan cold starts) the actors hold nothing at start:
a ``Load`` makes the worker's actor load the model on its device by the plan (CUDA
streams on a GPU, ``runtime.coldload``), ``loaded`` (a thread of its own) reports the end,
a batch runs whole while rows arrive, and ``Evict`` frees the copies. PT plans need other
GPUs' host links, which an actor cannot see: the server refuses them on this engine.
Without an address Ray starts a local instance; with one it joins that cluster.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ray
import torch
from ray.exceptions import RayActorError, RayTaskError

from hetserve.core.errors import HetserveError
from hetserve.engine.entities import Task
from hetserve.engine.executor import BaseExecutor, Kernel
from hetserve.engine.modelled import block_times
from hetserve.runtime.batching import row_versions, split
from hetserve.runtime.engine import LoopClock
from hetserve.runtime.ray_actor import StageActor, to_numpy, to_torch
from hetserve.runtime.ray_emulated import EmulatedActor
from hetserve.runtime.ray_session import alive_node_ids

LOG = logging.getLogger("hetserve.runtime")


def _reason(err: BaseException, prefix: str = "stage_error: ") -> str:
    """What a failed call says: the actor's own exception where it raised one."""
    cause = err.cause if isinstance(err, RayTaskError) and err.cause is not None else err
    return f"{prefix}{type(cause).__name__}: {cause}"


# how often the node watch reads Ray's node table (a dead node's idle workers are lost
# within about this long; busy ones at once, when their call fails)
WATCH_PERIOD_S = 0.5
WATCH_TIMEOUT_S = 1.0  # how long the node watch waits for the GCS's answer
# stage calls per worker at start-up to measure what the Ray path adds to a stage
OVERHEAD_ROUNDS = 5
# how long a switch's new actors may take to start (beyond reserving their GPUs)
ADD_TIMEOUT_S = 120.0


class _Workers:
    """What ``verify`` and ``block_times`` read of a view: the workers (a switch's
    too) and the cluster and latency model of the run's view."""

    def __init__(self, workers: Mapping[str, Any], view: Any) -> None:
        self.workers = workers
        self.cluster = view.cluster
        self.latency = view.latency


class RayExecutor(BaseExecutor):
    """Stages on Ray actors (module docstring)."""

    def __init__(
        self,
        view: Any,
        build: Callable[[str], Any] | None,
        n_blocks: int = 10,
        address: str | None = None,
        plan: Any = None,
        cpu_threads: int = 0,
        emulate: bool = False,
        found: Any = None,
        runtime_env: dict[str, Any] | None = None,
        versions: dict[str, list[int]] | None = None,
        version_of: Callable[[int], int | None] | None = None,
        preemptive: bool = True,
        cold: tuple[Callable[..., Any], Callable[..., Any]] | None = None,
        gpu_device: str = "cuda",
        cut_fp16: bool = True,
        graphs: Callable[[str], Any] | None = None,
    ) -> None:
        """``preemptive``: stages stop at block boundaries when told (on CUDA each boundary
        then waits for its kernels); ``cpu_threads``: torch threads of all CPU worker slots
        together, split evenly (0: the threads torch uses in this process); ``emulate``:
        actors sleep for the latency model's time; ``found``: the discovered cluster
        (``runtime.discovery``; None: discovered here when the plan has GPU workers);
        ``versions``: per model, the served versions other than the default (built on every
        worker of the model); ``version_of(request_id)``: a request's version (None: the
        default); ``cold``: ``(leaf_rows, host_alias)`` for a plan with load plans (the
        actors load models on demand, by the plan, and hold nothing at start);
        ``gpu_device``: what GPU workers compute on (``cuda``, the GPU Ray gave the actor;
        tests on GPU-less nodes that declare GPUs pass ``cpu``); ``cut_fp16``: activations
        cross cuts as FP16 (the plan's precision: ``Setup.cut_fp16``); ``graphs``: the
        models' graphs by name, which the actors cut blocks from (a ``ModelCatalog``'s,
        picklable; None: the shipped ones)."""
        from hetserve.runtime.discovery import check_versions, discover
        from hetserve.runtime.ray_placement import RayPlacement, WorkerPlace, verify
        from hetserve.runtime.ray_session import connect

        self.owns_ray = connect(address, runtime_env)
        self.emulate = emulate
        self.view = view
        self.infos: dict[str, Any] = dict(view.workers)  # every worker's, a switch's too
        self.version_of = version_of
        self.versions = versions
        self.actors: dict[str, Any] = {}
        self._node_of: dict[str, str] = {}  # worker -> its node (the node watch reads it)
        self.dead: set[str] = set()  # workers whose actor died
        self._cum: dict[Any, list[float]] = {}
        # per stage: the call's time beyond the actor's compute (``call_overhead_ms``)
        self.overhead_s: collections.deque[float] = collections.deque(maxlen=100_000)
        self._watch: threading.Thread | None = None
        self._closing = threading.Event()
        self.placement: Any = None
        self.cold = False  # a plan with load plans: models load on demand
        self.stage_overhead_s: dict[str, float] = {}
        self._ready_s = 0.0
        try:
            if found is None and any(w.gpu.name != "CPU" for w in view.workers.values()):
                found = discover(address)
            if found is not None:
                check_versions(found)
            self.found = found
            t0 = time.perf_counter()
            self.placement = RayPlacement(view, found)
            # CPU worker slots share this machine's cores (the threads torch would use here)
            n_cpu = sum(1 for info in view.workers.values() if info.gpu.name == "CPU")
            threads = max(1, (cpu_threads or torch.get_num_threads()) // max(1, n_cpu))
            # what an actor is made with (``_spawn``; a switch's new workers too)
            self._make = (build, n_blocks, gpu_device, threads, preemptive, cold, cut_fp16,
                          graphs)  # fmt: skip
            self.actors = {wid: self._spawn(info) for wid, info in view.workers.items()}
            wids = list(self.actors)
            got = ray.get([self.actors[w].where.remote() for w in wids])
            # how long workers take to start here (a switch's new ones: ``start_s``)
            self._ready_s = time.perf_counter() - t0
            self.places = {w: WorkerPlace(**g) for w, g in zip(wids, got, strict=True)}
            verify(view, found, self.places)
            todo: dict[str, list[tuple[str, tuple[int, int]]]] = {w: [] for w in self.actors}
            self.cold = cold is not None and bool(plan is not None and plan.load_plans)
            for (model, pi, si), workers in view.placement.stages.items():
                if self.cold:
                    break  # loaded on demand: nothing to build, warm or measure at start
                if plan is not None and model in plan.models:
                    blocks = plan.models[model].pipelines[pi].stages[si].blocks
                    for w in workers:
                        todo[w].append((model, blocks))
            ray.get([a.prepare.remote(w, todo[w], versions) for w, a in self.actors.items()])
            self.stage_overhead_s = self._measure_overheads(todo)
            view.stage_overhead_s.update(self.stage_overhead_s)
        except BaseException:
            self.close()
            raise

    def _spawn(self, info: Any) -> Any:
        """The actor of one worker slot, placed by its options (not waited for)."""
        opts = self.placement.options(info)
        if self.emulate:
            return EmulatedActor.options(**opts).remote()
        build, n_blocks, gpu_device, threads, preemptive, cold, cut_fp16, graphs = self._make
        gpu = info.gpu.name != "CPU"
        return StageActor.options(**opts).remote(
            build, n_blocks, gpu_device if gpu else "cpu", 0 if gpu else threads,
            preemptive, cold, cut_fp16, graphs,
        )  # fmt: skip

    def add_workers(self, infos: Mapping[str, Any], done: Callable[[str], None]) -> None:
        """A new plan's workers: on a thread, off the event loop, their GPUs reserved
        (``RayPlacement.reserve``), their actors started and their places checked
        (``verify``); then, on the loop, they join (``done("")``), or what failed is said
        (``done(reason)``: nothing of theirs is left). A worker's stage overhead is the
        typical one measured at start-up."""
        from hetserve.runtime.ray_placement import WorkerPlace, verify

        clock = self.kernel.clock
        todo = dict(infos)
        t_add = time.perf_counter()
        post: Callable[..., None] = (
            clock.call_soon if isinstance(clock, LoopClock) else (lambda fn, *args: fn(*args))
        )

        def start() -> tuple[dict[str, Any], dict[str, Any]]:
            self.placement.reserve(list(todo.values()))
            actors = {wid: self._spawn(info) for wid, info in todo.items()}
            try:
                got = ray.get([a.where.remote() for a in actors.values()], timeout=ADD_TIMEOUT_S)
                places = {w: WorkerPlace(**g) for w, g in zip(actors, got, strict=True)}
                verify(_Workers(todo, self.view), self.found, places)
            except BaseException:
                for a in actors.values():
                    with contextlib.suppress(Exception):
                        ray.kill(a, no_restart=True)
                self.placement.release({i.gpu_id for i in todo.values()}, list(todo))
                raise
            return actors, places

        def joined(actors: dict[str, Any], places: dict[str, Any]) -> None:
            self.actors.update(actors)
            self.places.update(places)
            self.infos.update(todo)
            self._node_of.update({w: p.node_id for w, p in places.items()})
            self.dead.difference_update(todo)
            self._ready_s = time.perf_counter() - t_add  # (the next estimate's)
            if self.stage_overhead_s:
                known = sorted(self.stage_overhead_s.values())
                typical = known[len(known) // 2]
                self.stage_overhead_s.update(dict.fromkeys(todo, typical))
            done("")

        def run() -> None:
            try:
                actors, places = start()
            except Exception as err:
                why = str(err) if isinstance(err, HetserveError) else f"{type(err).__name__}: {err}"
                post(done, why)
                return
            post(joined, actors, places)

        if not isinstance(clock, LoopClock):  # a virtual clock (tests): here and now
            run()
            return
        threading.Thread(target=run, name="hetserve-ray-add", daemon=True).start()

    def start_s(self, n: int) -> float:
        """The time workers took to start here last (their GPUs reserved, their actors
        started and placed, in parallel: the same for any ``n``): at start-up, or by the
        last ``add_workers``."""
        return self._ready_s if n else 0.0

    def release_workers(self, ids: Sequence[str]) -> None:
        """Workers a plan no longer uses: their actors end, and the GPUs no worker uses
        any more go back to Ray (``RayPlacement.release``)."""
        for w in ids:
            a = self.actors.pop(w, None)
            if a is not None:
                with contextlib.suppress(Exception):
                    ray.kill(a, no_restart=True)
            self.places.pop(w, None)
            self._node_of.pop(w, None)
        used = {self.infos[w].gpu_id for w in self.actors if w in self.infos}
        freed = {self.infos[w].gpu_id for w in ids if w in self.infos} - used
        given = self.placement.release(freed, list(ids))
        if given:
            LOG.info("GPUs given back to Ray: %s", ", ".join(given))

    def _measure_overheads(
        self, todo: dict[str, list[tuple[str, tuple[int, int]]]]
    ) -> dict[str, float]:
        """Per worker, what a stage call costs beyond the actor's compute (the call, the
        input fetched from the store, the reply), measured now: ``OVERHEAD_ROUNDS`` calls of a
        first stage it holds, at batch 1 on the model's example input (emulated: a 1 ms
        stage); the median. Workers without a first stage get the median of those measured. The
        scheduler plans with it (``ClusterView.stage_overhead_s``)."""
        measured: dict[str, float] = {}
        for w, stages in todo.items():
            first = next(((m, b) for m, b in stages if b[0] == 0), None)
            if first is None and not self.emulate:
                continue
            a, ts = self.actors[w], []
            x = None if self.emulate or first is None else ray.get(a.example.remote(first[0]))
            for k in range(OVERHEAD_ROUNDS):
                if self.emulate:
                    args: tuple[Any, ...] = (-1 - k, [0.001], False)
                else:  # a request's input, in the store already as a served one's is
                    assert first is not None
                    ref = None if x is None else [ray.put(x)]
                    args = (-1 - k, w, first[0], first[1], ref, [1], None)
                t0 = time.perf_counter()
                _, (_, _, compute_s) = ray.get(a.run.remote(*args))
                ts.append(time.perf_counter() - t0 - compute_s)
            measured[w] = max(0.0, sorted(ts)[len(ts) // 2])
        if not measured:
            return {}
        typical = sorted(measured.values())[len(measured) // 2]
        return {w: measured.get(w, typical) for w in self.actors}

    def attach(self, kernel: Kernel) -> None:
        """The kernel to report to; on a wall clock, watch Ray's node table from a thread:
        the workers of a node that is no longer alive are lost (told to the kernel on its
        loop), even those that were idle."""
        self.kernel = kernel
        self._nblocks = kernel.nblocks
        clock = kernel.clock
        if not isinstance(clock, LoopClock):
            return
        loop = clock.loop
        self._node_of.update({w: p.node_id for w, p in self.places.items()})
        node_of = self._node_of

        def lost(w: str) -> None:
            self.dead.add(w)
            kernel.worker_lost(w, clock.now())

        def watch() -> None:
            silent = False  # the GCS did not answer the last time
            while not self._closing.wait(WATCH_PERIOD_S):
                if loop.is_closed() or not ray.is_initialized():
                    return  # the server, or this process's Ray, is gone: nothing to tell
                alive = alive_node_ids(WATCH_TIMEOUT_S)
                if (alive is None) != silent:
                    silent = alive is None
                    LOG.warning(
                        "the Ray GCS does not answer: node losses are seen once it does "
                        "(calls to lost workers still fail)"
                        if silent
                        else "the Ray GCS answers again"
                    )
                if alive is None:
                    continue
                for w, nid in list(node_of.items()):
                    if nid not in alive and w not in self.dead:
                        self.dead.add(w)
                        try:
                            clock.call_soon(lost, w)
                        except RuntimeError:  # the loop closed meanwhile
                            return

        self._watch = threading.Thread(target=watch, name="hetserve-ray-nodes", daemon=True)
        self._watch.start()

    def _lost(self, worker: str, _: Any, now: float) -> None:
        self.dead.add(worker)
        self.kernel.worker_lost(worker, now)

    def _guarded(self, task: Task, fn: Callable[[Any], None]) -> Callable[[Any], None]:
        """A reply's callback on the loop: anything it raises fails the batch (the
        completion path is guarded, so no request is left without an ending)."""
        clock = self.kernel.clock

        def run(fut: Any) -> None:
            try:
                fn(fut)
            except Exception as err:
                LOG.error("batch %d: ending its stage raised", task.batch.id, exc_info=err)
                self.kernel.stage_failed(task, _reason(err), clock.now())

        return lambda fut: clock.guard(run, fut)

    def start(self, task: Task, now: float) -> None:
        kernel = self.kernel
        clock = kernel.clock
        d = task.batch.d
        step = task.step
        if step.worker in self.dead:
            clock.call_at(now, self._lost, step.worker)
            return
        call = self.actors[step.worker].run
        at_end = step.blocks[1] == self._nblocks[d.model]  # the model's last block
        if self.emulate:
            rows = task.batch.rows
            cum = self._cum.get((d.model, step.worker, rows, step.blocks))
            if cum is None:
                cum = block_times(_Workers(self.infos, self.view), d.model, step, rows)
                self._cum[(d.model, step.worker, rows, step.blocks)] = cum
            last_stage = task.index == len(d.route) - 1
            args: tuple[Any, ...] = (id(task), cum, not (last_stage and at_end))
        else:
            args = self._args(task, step)

        def failed(err: BaseException) -> None:
            if isinstance(err, RayActorError):  # the actor died (killed, node lost): rule 9
                self._lost(step.worker, None, clock.now())
            else:  # the stage raised in the actor
                kernel.stage_failed(task, _reason(err), clock.now())

        if at_end:
            # the model's output is small: it comes back with the reply, in one object,
            # so the worker is free again as soon as the reply is here
            def whole(fut: asyncio.Future[Any]) -> None:
                err = fut.exception()
                if err is not None:
                    return failed(err)
                out, (blocks_done, completed, compute_s) = fut.result()
                self._overhead(sent, compute_s)
                if completed:
                    kernel.stage_done(task, clock.now(), out)
                else:
                    kernel.stage_stopped(task, blocks_done, clock.now())

            sent = time.perf_counter()
            ref = call.remote(*args)
            asyncio.wrap_future(ref.future()).add_done_callback(self._guarded(task, whole))
            return

        # between stages the activations stay in the object store: only the reference
        # and the stage's outcome come here
        sent = time.perf_counter()
        out_ref, meta_ref = call.options(num_returns=2).remote(*args)

        def done(fut: asyncio.Future[Any]) -> None:
            err = fut.exception()
            if err is not None:
                return failed(err)
            blocks_done, completed, compute_s = fut.result()
            self._overhead(sent, compute_s)
            if completed:
                kernel.stage_done(task, clock.now(), out_ref)
            else:
                kernel.stage_stopped(task, blocks_done, clock.now())

        asyncio.wrap_future(meta_ref.future()).add_done_callback(self._guarded(task, done))

    def split(self, task: Task, output: Any) -> list[Any]:
        """A route's output per request: the model's answers (the reply's arrays as
        tensors, row by row) at the model's end; after an open route the output stays in
        the store and each request parks (reference, first row, end row)."""
        reqs = task.batch.requests
        if self.emulate:
            return [None] * len(reqs)
        if task.step.blocks[1] == self._nblocks[task.batch.model]:
            return split(to_torch(output), [r.rows for r in reqs])
        parts, lo = [], 0
        for r in reqs:
            parts.append((output, lo, lo + r.rows))
            lo += r.rows
        return parts

    def _loaded(
        self, a: Any, err: BaseException | None, now: float, start_s: float | None = None
    ) -> None:
        t0 = now if start_s is None else start_s
        if isinstance(err, RayActorError):
            self._lost(a.worker, None, now)
        elif err is not None:
            self.kernel.load_finished(a, t0, now, False, _reason(err, ""))
        else:
            self.kernel.load_finished(a, t0, now)

    def load(self, a: Any, now: float) -> None:
        """A ``Load`` (plans with load plans): the worker's actor starts the cold start
        and the end is told to the kernel (a failed one too, with its reason)."""
        from hetserve.runtime.torch_executor import TorchExecutor

        kernel = self.kernel
        clock = kernel.clock
        lp = TorchExecutor._load_plan(kernel, a.model) if self.cold else None
        if a.worker in self.dead:
            clock.call_at(now, self._lost, a.worker)
            return
        actor = self.actors[a.worker]
        start_s = now
        if lp is None:  # a switch's blocks: the actor builds their stage runner, warmed
            if not isinstance(clock, LoopClock):
                clock.call_at(now, self._loaded, a, None)
                return
            ref = actor.prepare.remote(a.worker, [(a.model, a.blocks)], self.versions)

            def built(fut: asyncio.Future[Any]) -> None:
                self._loaded(a, fut.exception(), clock.now(), start_s)

            asyncio.wrap_future(ref.future()).add_done_callback(lambda f: clock.guard(built, f))
            return
        actor.load.remote(a.worker, a.model, lp.plan)

        def done(fut: asyncio.Future[Any]) -> None:
            err = fut.exception()
            if isinstance(err, RayActorError):
                self._lost(a.worker, None, clock.now())
            elif err is not None:
                kernel.load_finished(a, start_s, clock.now(), False, _reason(err, ""))
            else:
                kernel.load_finished(a, start_s, clock.now())

        ref = actor.loaded.remote(a.worker, a.model)
        asyncio.wrap_future(ref.future()).add_done_callback(lambda f: clock.guard(done, f))

    def evict(self, a: Any, now: float) -> None:
        """A cold model's copies freed; else the stage runners of ``a``'s blocks on the
        worker dropped (a switch's old blocks)."""
        if a.worker in self.dead or a.worker not in self.actors:
            return
        if self.cold:
            self.actors[a.worker].evict.remote(a.worker, a.model)
        else:
            self.actors[a.worker].release.remote(a.worker, a.model, tuple(a.blocks))

    def _overhead(self, sent: float, compute_s: float) -> None:
        self.overhead_s.append(time.perf_counter() - sent - compute_s)

    def call_overhead_ms(self) -> dict[str, float]:
        """What the Ray path added to the stages so far, beyond the actors' own compute
        (the call, the object store, the reply, the callback on the loop): the median and
        the 99th percentile in ms, over ``n`` stages."""
        xs = sorted(self.overhead_s)
        if not xs:
            return {"n": 0, "p50_ms": 0.0, "p99_ms": 0.0}

        def pick(q: float) -> float:
            return xs[min(len(xs) - 1, int(q * len(xs)))] * 1e3

        return {"n": len(xs), "p50_ms": pick(0.5), "p99_ms": pick(0.99)}

    def _args(self, task: Task, step: Any) -> tuple[Any, ...]:
        """A real stage's arguments: its input (the requests' tensors put in the store
        once, the previous stage's reference, or a continued batch's parked rows)."""
        d = task.batch.d
        x = task.batch.payload  # the requests' tensors, or the previous stage's reference
        parked = None
        if task.index == 0 and step.blocks[0] > 0:  # a continued batch (open routes)
            x, parked = None, x
        elif task.index == 0 and x is not None:
            if all(p is None for p in x):
                x = None
            elif all(isinstance(p, torch.Tensor) for p in x):  # one array, put once
                x = ray.put(torch.cat(x).numpy())
            else:  # the requests' inputs, put in the store as they arrived (``admit``)
                x = list(x)
        versions = row_versions(self.version_of, d.requests)
        return (id(task), step.worker, d.model, step.blocks, x, [r.rows for r in d.requests],
                parked, versions)  # fmt: skip

    def admit(self, payload: Any) -> Any:
        """A request's input goes into the object store as it arrives, so a dispatch
        (on the server's loop, with the worker waiting) only passes references: the
        stacking and the store's copy are off that path."""
        if self.emulate or not isinstance(payload, torch.Tensor):
            return payload
        return ray.put(to_numpy(payload))

    def stop(self, task: Task, now: float) -> None:
        self.actors[task.step.worker].stop.remote(id(task))

    def close(self) -> None:
        """Release the actors and their placement groups (and the local Ray instance, if
        this executor started it)."""
        self._closing.set()
        if self._watch is not None:  # its call to the GCS ends within WATCH_TIMEOUT_S
            self._watch.join(WATCH_TIMEOUT_S + 1.0)
        for a in self.actors.values():
            with contextlib.suppress(Exception):  # (already gone with its node)
                ray.kill(a, no_restart=True)
        self.actors.clear()
        if self.placement is not None:
            if alive_node_ids(WATCH_TIMEOUT_S) is None:
                # the GCS is gone (a signal to the whole process group): removing the
                # groups would wait 60 s for it and end the process; they went with it
                LOG.warning("the Ray GCS does not answer: its placement groups went with it")
            else:
                self.placement.remove()
            self.placement = None
        if self.owns_ray:
            ray.shutdown()
            self.owns_ray = False
