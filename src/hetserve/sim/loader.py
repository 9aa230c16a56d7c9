"""Residency and loading (DeepPlan's concern, the simulator's mechanism).

A worker holds some blocks of some models within its memory (``memory_gb / share``). With
``warm=True`` the plan's blocks are resident at t = 0 (a plan that does not fit is an
error). ``Load`` moves weights over the GPU's host path (PCIe switch uplink, PCIe link)
through the link model and counts against memory; ``Evict`` frees them.

With a latency model that follows load plans (``core.layerlatency``), a ``Load`` follows
the model's plan instead: the cold-start timeline (``core.coldstart``) says when each
layer's weights arrive; parallel transmission takes the host links of GPUs of the same
node under other PCIe switches joined to the worker's GPU by NVLink (those with the
fewest loads under way, then by index); every host link a load uses is shared with the
loads already under way on it: its load times are multiplied by the number of loads on
its busiest link, counted when the load starts (DeepPlan section 3.2: GPUs under one
PCIe switch share its uplink). Only loaded layers count against memory. A batch that
starts while its model loads runs layer by layer, each waiting for its weights.

DHA layers read host memory over the same links: a batch with DHA layers takes its DHA
part (``LayerLatency.dha_s``) times the number of users on the busiest link of its GPU's
host path, itself included, counted when it starts: loads under way (its own model's cold
load excepted: the cold-start timeline already runs DHA layers beside it, as DeepPlan's
planner does) and other DHA runs still reading (a run reads from its start for as long as
its DHA part takes: the embeddings come first in the transformers). Loads count loads
only: a DHA run reads a few rows (embeddings) or a few layers, milliseconds against a
load's tens, and charging a whole load for a brief overlap would overstate it.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from hetserve.core.cluster import Cluster
from hetserve.core.errors import HetserveError
from hetserve.core.latency import GraphBlocksModel, LatencyModel, cold_start_model
from hetserve.core.plan import Placement, Plan
from hetserve.engine.links import HostLinks, LinkTable
from hetserve.engine.rules import check_load, load_report
from hetserve.scheduling.protocol import Evict, Load, StageReport
from hetserve.sim.state import _LOAD_DONE, Events, _mask, _Worker

#: how a part tells the scheduler of a report (and applies what it answers)
Report = Callable[[StageReport, float], None]
#: how a part lets a worker start its next ready stage
Resume = Callable[[_Worker, float], None]


class Loader:
    """The simulator's residency and loading part: its own caches of block bytes, the host
    links loads and DHA runs share, and the loads under way (on the workers)."""

    def __init__(
        self,
        cluster: Cluster,
        latency: LatencyModel,
        plan: Plan,
        placement: Placement,
        workers: dict[str, _Worker],
        links: LinkTable,
        events: Events,
        report: Report,
        resume: Resume,
    ) -> None:
        self.cluster = cluster
        self.latency = latency
        self.plan = plan
        self.placement = placement
        self.workers = workers
        self.links = links
        self.events = events
        self.report = report
        self.resume = resume
        self.nblocks = {m: latency.num_blocks(m) for m in plan.models}
        self._bytes_cache: dict[str, list[float]] = {}
        self._mask_bytes: dict[tuple[str, int], float] = {}
        # loads that follow load plans (core.layerlatency), over host links they share
        self.cold_model = cold_start_model(latency)
        self.host_links = HostLinks(cluster)

    def block_bytes(self, model: str) -> list[float]:
        """Parameter bytes of each block (for memory and load times)."""
        hit = self._bytes_cache.get(model)
        if hit is not None:
            return hit
        cold = self.cold_model
        if cold is not None:
            gpu = cold.model_load_plan(model).gpu
            self._bytes_cache[model] = [cold.gpu_bytes(model, gpu)]
        else:
            n = self.latency.num_blocks(model)
            out = [0.0] * n
            if isinstance(self.latency, GraphBlocksModel):
                g, b = self.latency.graph(model), self.latency.blocks(model)
                out = [sum(g.layers[i].param_bytes for i in b.layers(k)) for k in range(n)]
            else:
                from hetserve.core.graph import get_graph

                try:
                    total = get_graph(model).param_bytes
                    out = [total / n] * n  # profile blocks: split the weights evenly
                except HetserveError:
                    pass  # unknown model: no memory accounting
            self._bytes_cache[model] = out
        return self._bytes_cache[model]

    def bytes_of(self, model: str, mask: int) -> float:
        """Parameter bytes of the blocks in ``mask``."""
        key = (model, mask)
        hit = self._mask_bytes.get(key)
        if hit is None:
            bb = self.block_bytes(model)
            hit = self._mask_bytes[key] = sum(b for i, b in enumerate(bb) if mask >> i & 1)
        return hit

    def warm_start(self) -> None:
        """The plan's blocks resident at t = 0 (an error if they do not fit)."""
        for (model, pi, si), ws in self.placement.stages.items():
            st = self.plan.models[model].pipelines[pi].stages[si]
            m = _mask(st.blocks)
            for wid in ws:
                w = self.workers[wid]
                new = m & ~w.resident.get(model, 0)
                if new:
                    w.mem_used += self.bytes_of(model, new)
                    w.resident[model] = w.resident.get(model, 0) | new
        for w in self.workers.values():
            if w.mem_used > w.mem_cap * (1 + 1e-9):
                raise HetserveError(
                    f"worker {w.id} ({w.gpu.name}, 1/{w.info.share} slice): the plan's "
                    f"resident weights ({w.mem_used / 1e9:.2f} GB) exceed its memory "
                    f"({w.mem_cap / 1e9:.2f} GB)"
                )

    def load(self, a: Load, now: float) -> None:
        check_load(a, self.nblocks, self.workers)
        w = self.workers[a.worker]
        m = _mask(a.blocks)
        new = m & ~w.resident.get(a.model, 0) & ~w.loading.get(a.model, 0)
        nbytes = self.bytes_of(a.model, new)
        if w.mem_used + nbytes > w.mem_cap * (1 + 1e-9):
            rep = load_report(a.worker, a.model, a.blocks, now, now, False, "out of memory")
            self.report(rep, now)
            return
        w.mem_used += nbytes
        w.loading[a.model] = w.loading.get(a.model, 0) | new
        if new and self.cold_model is not None:
            self._planned_load(w, a, new, now)
            return
        links = self.cluster.links
        path = tuple(self.cluster.host_path(w.gpu_id))
        bw = min(links[x].bw_gbps for x in path)
        t0, t1 = self.links.transfer(path, bw, 0.0, nbytes, now)
        self.events.push(t1, _LOAD_DONE, w, (a.model, new, a.blocks, t0))

    def _planned_load(self, w: _Worker, a: Load, new: int, now: float) -> None:
        cold = self.cold_model
        assert cold is not None
        lp = cold.model_load_plan(a.model)
        scale, held = self.host_links.take(w.gpu_id, lp.plan.n_parts, a.model, now)
        tl = cold.load_timeline(a.model, w.gpu, scale)
        w.cold[a.model] = (now, tl, held)
        self.events.push(now + tl.load_done_s, _LOAD_DONE, w, (a.model, new, a.blocks, now))

    def cold_run_s(self, w: _Worker, model: str, batch: int, now: float) -> float:
        """A run of ``model`` on ``w`` while its planned cold start is under way: layer by
        layer, each as its weights arrive."""
        cold = w.cold[model]
        assert self.cold_model is not None
        return self.cold_model.cold_run_s(model, w.gpu, w.info.share, batch, cold[1], now - cold[0])

    def dha_contention(
        self,
        w: _Worker,
        model: str,
        dha: float,
        cum: tuple[float, ...],
        energy: float,
        now: float,
    ) -> tuple[tuple[float, ...], float]:
        """A run with DHA layers (``dha`` seconds of it on them): its DHA part slowed by
        the other users of its host path, and the path held until it ends (module
        docstring)."""
        cold = w.cold.get(model)
        f = self.host_links.dha_run(w.gpu_id, now, dha, cold[2] if cold is not None else ())
        if f > 1 and cum[-1] > 0:
            ratio = (cum[-1] + (f - 1) * dha) / cum[-1]
            cum = tuple(c * ratio for c in cum)
            energy *= ratio
        return cum, energy

    def load_done(self, w: _Worker, info: tuple, now: float) -> None:
        model, new, blocks, t0 = info
        cold = w.cold.pop(model, None)
        if cold is not None:
            self.host_links.release(cold[2])
        w.loading[model] = w.loading.get(model, 0) & ~new
        w.resident[model] = w.resident.get(model, 0) | new
        waiting, w.waiting_load = w.waiting_load, []
        for t in waiting:
            heapq.heappush(w.ready, (t.step.planned_start_s, next(self.events.seq), t))
        self.report(load_report(w.id, model, blocks, t0, now), now)
        self.resume(w, now)

    def evict(self, a: Evict) -> None:
        check_load(a, self.nblocks, self.workers)
        w = self.workers[a.worker]
        m = _mask(a.blocks) & w.resident.get(a.model, 0)
        w.mem_used -= self.bytes_of(a.model, m)
        w.resident[a.model] = w.resident.get(a.model, 0) & ~m
