"""The modelled executor: a stage takes the latency model's time, as in Shepherd's and
Clockwork's emulated workers. One executor for the simulator (on its event heap) and for
the runtime's ``--emulate`` (on the wall clock), so a simulated stage and an emulated one
are the same thing.

- A worker runs the blocks of a stage back to back, each for the latency model's time at
  the batch's size on the worker's GPU and share, all multiplied by one seeded jitter draw
  per stage execution (``lognormal`` with a CV, or ``exponential``; none by default);
  ``request_overhead_s`` per request is added to a batch's first stage (Shepherd's
  per-request overhead).
- A ``Preempt`` stops a running stage at its next block boundary (a boundary at this very
  moment counts; the model's last block is no exit point, the end of a non-last stage is).
  One callback per stage, none per block.
- Residency and loads follow :mod:`hetserve.engine.residency`: a stage whose blocks are
  neither resident nor loading fails (rule 8); one whose blocks are loading waits for the
  load (``Kernel.defer``), unless the load follows a load plan, whose batches run layer by
  layer as weights arrive; DHA runs share their host links.
- Energy: the latency model's busy energy per run (``Task.run``: block end times, energy).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from hetserve.core.errors import HetserveError
from hetserve.core.gpus import GpuType
from hetserve.core.graph import ModelGraph, get_graph
from hetserve.core.latency import LatencyModel, busy_power_w
from hetserve.engine.clock import VirtualClock
from hetserve.engine.executor import BaseExecutor
from hetserve.engine.kernel import core
from hetserve.engine.links import LinkTable
from hetserve.engine.residency import Held, Residency, block_mask

if TYPE_CHECKING:
    from hetserve.engine.entities import Task
    from hetserve.engine.executor import Kernel
    from hetserve.scheduling.protocol import ClusterView, Evict, Load, RouteStep, WorkerInfo

JITTERS = ("none", "lognormal", "exponential")


def busy_j(
    latency: LatencyModel, model: str, gpu: GpuType, share: int, batch: int, blocks: range,
    busy_s: float,
) -> float:  # fmt: skip
    """Busy energy of a run of ``blocks`` that takes ``busy_s``: the latency model's, or
    the GPU's busy power share for that long when the model has no energy table."""
    try:
        return latency.energy(model, gpu, share, batch, blocks)
    except HetserveError:
        return busy_s * busy_power_w(gpu, share, 1.0)


def block_times(view: ClusterView, model: str, step: RouteStep, batch: int) -> list[float]:
    """The latency model's time at each block boundary of a stage (cumulative, s)."""
    w = view.workers[step.worker]
    lat = view.latency
    cum, acc = [], 0.0
    for k in range(*step.blocks):
        acc += lat.latency(model, w.gpu, w.share, batch, range(k, k + 1))
        cum.append(acc)
    return cum


class ModelledExecutor(BaseExecutor):
    """Stages and loads as the latency model says (module docstring)."""

    outputs = False

    def __init__(
        self,
        seed: int = 0,
        jitter: str = "none",
        jitter_cv: float = 0.0,
        request_overhead_s: float = 0.0,
        warm: bool = True,
        graphs: Callable[[str], ModelGraph] = get_graph,
    ) -> None:
        """``warm``: the plan's blocks are resident when the kernel starts (see
        :meth:`warm_start`; a cold-start plan loads them: ``False``). ``graphs``: the
        models' graphs by name (a ``ModelCatalog``'s), for their weights' bytes."""
        self._graphs = graphs
        if jitter not in JITTERS:
            raise HetserveError(f"jitter must be none, lognormal or exponential, got {jitter!r}")
        self.rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5EED]))
        self.jitter = jitter
        self.jitter_cv = jitter_cv
        self._jitter_on = jitter == "exponential" or (jitter == "lognormal" and jitter_cv > 0)
        self._overhead_s = request_overhead_s
        self.warm = warm
        # (model, worker, batch, blocks) -> (block end times, energy, DHA part)
        self._runs: dict[tuple[str, str, int, int, tuple[int, int]], tuple] = {}
        self.held: dict[str, Held] = {}

    def attach(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self._call_at = kernel.clock.call_at
        self._stage_done_at = kernel.stage_done_at_cb
        # the engine's own virtual clock: stage ends straight onto its heap
        clock = kernel.clock
        self._push = clock.push if type(clock) is VirtualClock else None
        self._seq = clock.seq if type(clock) is VirtualClock else None
        view = kernel.view
        self.view = view
        self.latency = view.latency
        self.residency = Residency(view.cluster, view.latency, self._graphs)
        cold = self.residency.cold_model
        self._dha_s = None if cold is None else cold.dha_s
        self.held = {wid: Held(info) for wid, info in view.workers.items()}
        self.infos = dict(view.workers)  # every worker's, those a new plan added too
        # loads cross the host links of the kernel's link model (their own where it has none)
        self.links = kernel.links if kernel.links is not None else LinkTable(view.cluster)
        self._starter = core.ModelledStart(self)
        if type(self).start is ModelledExecutor.start:  # (a subclass's own start stays)
            self.start = self._starter.start  # type: ignore[method-assign]
        if self.warm:
            self.warm_start()

    def close(self) -> None:
        """Let go of the kernel (a run's state is freed with its driver)."""
        for name in ("kernel", "_stage_done_at", "_call_at", "_starter", "start"):
            self.__dict__.pop(name, None)

    def add_workers(self, infos: Mapping[str, WorkerInfo], done: Callable[[str], None]) -> None:
        """Workers a new plan brings: empty memory, ready for loads (at once)."""
        for wid, info in infos.items():
            self.held[wid] = Held(info)
            self.infos[wid] = info
        done("")

    def warm_start(self) -> None:
        """The plan's blocks resident at t = 0 (an error if they do not fit)."""
        k = self.kernel
        self.residency.warm_start(k.plan, k.view.placement, self.held)

    # ------------------------------------------------------------------ stages
    def _run_times(
        self, model: str, info: Any, batch: int, blocks: tuple[int, int]
    ) -> tuple[tuple[float, ...], float, float]:
        """A stage run: cumulative block end times, busy energy, and the part of it on
        DHA layers (reading host memory; 0 without load plans)."""
        lat, share, gpu = self.latency, info.share, info.gpu
        cum, acc = [], 0.0
        for k in range(blocks[0], blocks[1]):
            acc += lat.latency(model, gpu, share, batch, range(k, k + 1))
            cum.append(acc)
        energy = busy_j(lat, model, gpu, share, batch, range(*blocks), acc)
        dha = 0.0
        if self._dha_s is not None:
            dha = self._dha_s(model, gpu, share, batch)
        return tuple(cum), energy, dha

    def _jitter(self) -> float:
        if self.jitter == "lognormal" and self.jitter_cv > 0:
            s2 = math.log1p(self.jitter_cv**2)
            return float(self.rng.lognormal(-s2 / 2, math.sqrt(s2)))
        if self.jitter == "exponential":
            return float(self.rng.exponential(1.0))
        return 1.0

    def start(self, task: Task, now: float) -> None:
        """The stage takes the latency model's time (module docstring). The body is
        ``engine.kernel_core.ModelledStart.start``, compiled with the kernel; ``attach``
        binds that on the executor, so the kernel calls it with no Python frame between."""
        self._starter.start(task, now)

    def stop(self, task: Task, now: float) -> None:
        cum = task.run[0]
        elapsed = now - task.start_s
        k = 0
        while k < len(cum) - 1 and cum[k] < elapsed - 1e-12:
            k += 1
        if k == len(cum) - 1 and task.index == len(task.batch.route) - 1:
            return  # the next exit point is the end: the batch simply completes
        task.version += 1  # the stage's end is stale: it stops at block k + 1
        self.kernel.clock.call_at(task.start_s + cum[k], self.kernel.stage_stopped, task, k + 1)

    def _streamed(
        self, h: Held, model: str, blocks: tuple[int, int], cum: tuple[float, ...], now: float
    ) -> tuple[float, ...] | None:
        """A stage's block end times where its missing blocks arrive by a late load under
        way (``Load.wait``): each block starts once it has arrived; None if some missing
        block is in no such load (a waiting one, or a plain load: the task waits)."""
        arrive: dict[int, float] = {}
        for (m_, _), (_, at) in h.streams.items():
            if m_ == model:
                arrive.update(at)
        res = h.resident.get(model, 0)
        t, out, prev = now, [], 0.0
        for i, k in enumerate(range(*blocks)):
            if not res >> k & 1:
                if k not in arrive:
                    return None
                t = max(t, arrive[k])
            t += cum[i] - prev
            prev = cum[i]
            out.append(t - now)
        return tuple(out)

    # ------------------------------------------------------------------ loads
    def load(self, a: Load, now: float) -> None:
        h = self.held[a.worker]
        res = self.residency
        key = (a.model, a.blocks)
        if key in h.waits and not a.wait:  # the last word on a waiting load: now, or never
            wa, new = h.waits.pop(key)
            if h.mem_used + res.bytes_of(a.model, new) > h.mem_cap * (1 + 1e-9):
                h.loading[a.model] = h.loading.get(a.model, 0) & ~new
                self.kernel.load_finished(wa, now, now, False, "out of memory")
                return
            self._begin(wa, new, now)
            return
        if key in h.streams and not a.wait:
            return  # (a waiting load under way already: it reports once, when it ends)
        m = block_mask(a.blocks)
        new = m & ~h.resident.get(a.model, 0) & ~h.loading.get(a.model, 0)
        nbytes = res.bytes_of(a.model, new)
        if h.mem_used + nbytes > h.mem_cap * (1 + 1e-9):
            if a.wait:  # until an eviction makes room; its stages wait for it
                h.loading[a.model] = h.loading.get(a.model, 0) | new
                h.waits[key] = (a, new)
                return
            self.kernel.load_finished(a, now, now, False, "out of memory")
            return
        self._begin(a, new, now)

    def _begin(self, a: Load, new: int, now: float) -> None:
        h = self.held[a.worker]
        res = self.residency
        nbytes = res.bytes_of(a.model, new)
        h.mem_used += nbytes
        h.loading[a.model] = h.loading.get(a.model, 0) | new
        info = self.infos[a.worker]
        if new and res.cold_model is not None:
            end = res.take_host_links(info.gpu_id, info.gpu, h, a.model, now)
            self.kernel.clock.call_at(end, self._loaded, a, (new, now))
            if a.wait:
                self.kernel.resume(a.worker, now)  # its stages run layer by layer now
            return
        cluster = self.view.cluster
        path = tuple(cluster.host_path(info.gpu_id))
        bw = min(cluster.links[x].bw_gbps for x in path)
        t0, t1 = self.links.transfer(path, bw, 0.0, nbytes, now)
        if a.wait:  # a late load streams: its blocks arrive in order, over [t0, t1]
            at, done = {}, 0.0
            for k in range(*a.blocks):
                if new >> k & 1:
                    done += res.bytes_of(a.model, 1 << k)
                    at[k] = t0 + (t1 - t0) * (done / nbytes if nbytes > 0 else 1.0)
            h.streams[(a.model, a.blocks)] = (new, at)
            self.kernel.resume(a.worker, now)
        self.kernel.clock.call_at(t1, self._loaded, a, (new, t0))

    def _loaded(self, a: Load, info: tuple[int, float], now: float) -> None:
        new, t0 = info
        h = self.held[a.worker]
        h.streams.pop((a.model, a.blocks), None)
        self.residency.loaded(h, a.model, new)
        self.kernel.load_finished(a, t0, now)

    def evict(self, a: Evict, now: float) -> None:
        h = self.held[a.worker]
        self.residency.evict(h, a.model, a.blocks)
        for key, (wa, new) in list(h.waits.items()):  # loads waiting for this room
            if h.mem_used + self.residency.bytes_of(wa.model, new) <= h.mem_cap * (1 + 1e-9):
                del h.waits[key]
                self._begin(wa, new, now)
