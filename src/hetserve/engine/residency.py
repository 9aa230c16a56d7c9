"""Residency and loading, as the modelled executor (``engine.modelled``) models them:
DeepPlan's concern, shared by the simulator and ``--emulate``.

A worker holds some blocks of some models within its memory (``memory_gb / share``). A
warm start makes the plan's blocks resident at t = 0 (a plan that does not fit is an
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

from collections.abc import Callable
from typing import Any

from hetserve.core.cluster import Cluster
from hetserve.core.errors import HetserveError
from hetserve.core.graph import ModelGraph, get_graph
from hetserve.core.latency import GraphBlocksModel, LatencyModel, cold_start_model
from hetserve.core.plan import Placement, Plan
from hetserve.engine.links import HostLinks
from hetserve.scheduling.protocol import WorkerInfo


def block_mask(blocks: tuple[int, int]) -> int:
    """The bitmask of blocks ``[start, stop)``."""
    return ((1 << blocks[1]) - 1) ^ ((1 << blocks[0]) - 1)


class Held:
    """One worker's memory as modelled: resident and loading blocks per model (bit
    masks), the planned loads under way, the bytes in use and the capacity."""

    __slots__ = ("cold", "loading", "mem_cap", "mem_used", "resident", "streams", "waits")

    def __init__(self, info: WorkerInfo) -> None:
        self.mem_cap = info.gpu.memory_gb * 1e9 / info.share
        self.mem_used = 0.0
        self.resident: dict[str, int] = {}  # model -> bitmask of blocks
        self.loading: dict[str, int] = {}
        # model -> (load start, its timeline, host links it holds): a load that follows a
        # load plan, whose batches may start before it ends
        self.cold: dict[str, tuple[float, Any, tuple[str, ...]]] = {}
        # loads that wait for room (``Load.wait``): (model, blocks) -> (the load, its mask);
        # once started they stream: (model, blocks) -> (mask, arrival time per block)
        self.waits: dict[tuple[str, tuple[int, int]], tuple[Any, int]] = {}
        self.streams: dict[tuple[str, tuple[int, int]], tuple[int, dict[int, float]]] = {}


class Residency:
    """Block bytes, memory, warm starts, planned loads over the host links they share,
    cold runs and DHA contention."""

    def __init__(
        self,
        cluster: Cluster,
        latency: LatencyModel,
        graphs: Callable[[str], ModelGraph] = get_graph,
    ) -> None:
        """``graphs``: the models' graphs by name (a ``ModelCatalog``'s), for the weights
        of models whose latency model has no graph of its own (a profile set)."""
        self.cluster = cluster
        self.latency = latency
        self._graphs = graphs
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
                try:
                    total = self._graphs(model).param_bytes
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

    def warm_start(self, plan: Plan, placement: Placement, held: dict[str, Held]) -> None:
        """The plan's blocks resident at t = 0 (an error if they do not fit)."""
        for (model, pi, si), ws in placement.stages.items():
            st = plan.models[model].pipelines[pi].stages[si]
            m = block_mask(st.blocks)
            for wid in ws:
                h = held[wid]
                new = m & ~h.resident.get(model, 0)
                if new:
                    h.mem_used += self.bytes_of(model, new)
                    h.resident[model] = h.resident.get(model, 0) | new
        infos = {s.id: s for s in placement.workers}
        for wid, h in held.items():
            if h.mem_used > h.mem_cap * (1 + 1e-9):
                s = infos[wid]
                raise HetserveError(
                    f"worker {wid} ({s.gpu}, 1/{s.share} slice): the plan's resident weights "
                    f"({h.mem_used / 1e9:.2f} GB) exceed its memory ({h.mem_cap / 1e9:.2f} GB)"
                )

    def take_host_links(self, gpu_id: str, gpu: Any, h: Held, model: str, now: float) -> float:
        """A planned load of ``model`` starts ``now`` on the worker (``h``) of GPU
        ``gpu_id``: it takes its host links; returns when it ends."""
        cold = self.cold_model
        assert cold is not None
        lp = cold.model_load_plan(model)
        scale, links = self.host_links.take(gpu_id, lp.plan.n_parts, model, now)
        tl = cold.load_timeline(model, gpu, scale)
        h.cold[model] = (now, tl, links)
        return now + tl.load_done_s

    def cold_run_s(self, h: Held, info: WorkerInfo, model: str, batch: int, now: float) -> float:
        """A run of ``model`` while its planned cold start is under way: layer by layer,
        each as its weights arrive."""
        cold = h.cold[model]
        assert self.cold_model is not None
        return self.cold_model.cold_run_s(
            model, info.gpu, info.share, batch, cold[1], now - cold[0]
        )

    def dha_contention(
        self,
        h: Held,
        gpu_id: str,
        model: str,
        dha: float,
        cum: tuple[float, ...],
        energy: float,
        now: float,
    ) -> tuple[tuple[float, ...], float]:
        """A run with DHA layers (``dha`` seconds of it on them): its DHA part slowed by
        the other users of its host path, and the path held until it ends (module
        docstring)."""
        cold = h.cold.get(model)
        f = self.host_links.dha_run(gpu_id, now, dha, cold[2] if cold is not None else ())
        if f > 1 and cum[-1] > 0:
            ratio = (cum[-1] + (f - 1) * dha) / cum[-1]
            cum = tuple(c * ratio for c in cum)
            energy *= ratio
        return cum, energy

    def loaded(self, h: Held, model: str, new: int) -> None:
        """A load of blocks ``new`` of ``model`` ended: resident now, its host links free."""
        cold = h.cold.pop(model, None)
        if cold is not None:
            self.host_links.release(cold[2])
        h.loading[model] = h.loading.get(model, 0) & ~new
        h.resident[model] = h.resident.get(model, 0) | new

    def evict(self, h: Held, model: str, blocks: tuple[int, int]) -> None:
        m = block_mask(blocks) & h.resident.get(model, 0)
        h.mem_used -= self.bytes_of(model, m)
        h.resident[model] = h.resident.get(model, 0) & ~m
