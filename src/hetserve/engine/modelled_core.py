# cython: annotation_typing=False
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
- Residency and loads follow the next section: a stage whose blocks are
  neither resident nor loading fails (rule 8); one whose blocks are loading waits for the
  load (``Kernel.defer``), unless the load follows a load plan, whose batches run layer by
  layer as weights arrive; DHA runs share their host links.
- Energy: the latency model's busy energy per run (``Task.run``: block end times, energy).

Residency and loading
---------------------
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

This file is plain Python and runs as it is. Where the package was built with Cython
(``setup.py``; ``modelled_core_c.pxd`` beside it declares the C types), the same file is
also compiled as ``hetserve.engine.modelled_core_c``, beside the compiled entities, and
``engine.modelled`` and ``engine.residency`` export that one's classes
(``HETSERVE_PURE_PYTHON=1`` keeps this file).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from hetserve.core.cluster import Cluster
from hetserve.core.errors import HetserveError
from hetserve.core.gpus import GpuType
from hetserve.core.graph import ModelGraph, get_graph
from hetserve.core.latency import GraphBlocksModel, LatencyModel, busy_power_w, cold_start_model
from hetserve.core.plan import Placement, Plan
from hetserve.engine import entities
from hetserve.engine.clock import VirtualClock
from hetserve.engine.executor import BaseExecutor
from hetserve.engine.rules import NOT_RESIDENT
from hetserve.scheduling.protocol import WorkerInfo

try:  # (Cython reads ``cython.compiled`` as True in the build it makes of this file)
    import cython
except ImportError:  # (plain Python, without Cython installed)
    from hetserve.core.records import NO_CYTHON as cython
if not cython.compiled:  # (compiled: these are the C its .pxd cimports)
    from hetserve.core.records import (
        LOAD_BLOCKS,
        LOAD_MODEL,
        LOAD_WAIT,
        LOAD_WORKER,
        STEP_BLOCKS,
        field,
    )
    from hetserve.engine.entities import StageStarter

if TYPE_CHECKING:
    from hetserve.engine.executor import Kernel
    from hetserve.scheduling.protocol import ClusterView, Evict, Load, RouteStep

__all__ = [
    "JITTERS", "Held", "ModelledExecutor", "ModelledLoads", "ModelledStart", "Residency",
    "block_mask", "block_times", "busy_j",
]  # fmt: skip

JITTERS = ("none", "lognormal", "exponential")
# the largest batch size (excluded) whose runs a stage's row keeps by size (``ModelledStart``)
ROW_MAX_N = 4096


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


# ---------------------------------------------------------------------- residency
def block_mask(blocks: tuple[int, int]) -> int:
    """The bitmask of blocks ``[start, stop)``."""
    return ((1 << blocks[1]) - 1) ^ ((1 << blocks[0]) - 1)


class Held:
    """One worker's memory as modelled: resident and loading blocks per model (bit
    masks), the planned loads under way, the bytes in use and the capacity."""

    __slots__ = (
        "cold", "gpu_name", "held_m", "held_res", "loading", "mem_cap", "mem_used", "res_at",
        "resident", "streams", "waits",
    )  # fmt: skip

    def __init__(self, info: WorkerInfo) -> None:
        self.gpu_name: str = info.gpu.name  # (read per planned load: a pydantic attribute)
        self.mem_cap = info.gpu.memory_gb * 1e9 / info.share
        self.mem_used = 0.0
        self.resident: dict[str, int] = {}  # model -> bitmask of blocks
        # the same masks by the model's number (``Residency.ix_of``; 0 past the end),
        # written with ``resident`` (``Residency.set_resident``): what a stage's start
        # reads, one list item, where the dicts of 1,000 workers of 100 models each (4.6
        # MB) missed the caches at most starts
        self.res_at: list[int] = []
        self.loading: dict[str, int] = {}
        # model -> (load start, its timeline, host links it holds): a load that follows a
        # load plan, whose batches may start before it ends
        self.cold: dict[str, tuple[float, Any, tuple[str, ...]]] = {}
        # loads that wait for room (``Load.wait``): (model, blocks) -> (the load, its mask);
        # once started they stream: (model, blocks) -> (mask, arrival time per block)
        self.waits: dict[tuple[str, tuple[int, int]], tuple[Any, int]] = {}
        self.streams: dict[tuple[str, tuple[int, int]], tuple[int, dict[int, float]]] = {}
        # the last resident mask found to hold a stage's blocks' mask, and that mask (the
        # objects: a stage start that finds the same two skips the test, which makes an
        # int object where the masks are large; a mask that changes is a new object)
        self.held_res: object = None
        self.held_m: object = None


class RunTerms:
    """What a run takes that starts while a planned load is under way, for every offset
    from its start (``ColdStartModel.cold_run_terms``), at the last worker share and
    batch size asked (``share``, ``batch``; -1: none yet): one per load timeline, shared
    by the loads that follow it."""

    __slots__ = ("batch", "load_done_s", "peak_s", "pipelined", "share", "total_s")

    def __init__(self) -> None:
        self.share = -1
        self.batch = -1
        self.total_s = 0.0
        self.peak_s = 0.0
        self.pipelined = False
        self.load_done_s = 0.0


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
        # (asked once: a check against a protocol looks up its members each time)
        self._graph_blocks = isinstance(latency, GraphBlocksModel)
        self._bytes_cache: dict[str, list[float]] = {}
        # model -> mask -> bytes (by model, then mask: no tuple key made per look-up)
        self._mask_bytes: dict[str, dict[int, float]] = {}
        # model -> its number (``ix_of``: its place in each worker's ``Held.res_at``)
        self.model_ix: dict[str, int] = {}
        # loads that follow load plans (core.layerlatency), over host links they share
        self.cold_model = cold_start_model(latency)
        self.host_links = entities.HostLinks(cluster)
        # per model, its load plan's parts; per (model, GPU type, link shares), the load's
        # timeline, when it ends and its runs' terms (:class:`RunTerms`): what the latency
        # model says, asked once (a latency model's load plans are fixed: ``LayerLatency``
        # copies them when it is made)
        self._parts: dict[str, int] = {}
        self._timelines: dict[tuple[str, str, tuple[float, ...]], tuple[Any, float, RunTerms]] = {}
        # each model's canonical instance (``ColdStartModel.canonical_instance``): the
        # weights, parts and timelines above are kept once per canonical instance
        self._canon: dict[str, str] = {}

    def canonical(self, model: str) -> str:
        """``model``'s canonical instance as the cold-start model says (``model`` itself
        without one): what it answers for the one it answers for all."""
        hit = self._canon.get(model)
        if hit is None:
            cold = self.cold_model
            hit = self._canon[model] = cold.canonical_instance(model) if cold else model
        return hit

    def block_bytes(self, model: str) -> list[float]:
        """Parameter bytes of each block (for memory and load times)."""
        hit = self._bytes_cache.get(model)
        if hit is not None:
            return hit
        cold = self.cold_model
        c = self.canonical(model)
        if c != model:  # (its canonical instance's, the same list)
            hit = self._bytes_cache[model] = self.block_bytes(c)
            return hit
        if cold is not None:
            gpu = cold.model_load_plan(model).gpu
            self._bytes_cache[model] = [cold.gpu_bytes(model, gpu)]
        else:
            n = self.latency.num_blocks(model)
            out = [0.0] * n
            if self._graph_blocks:
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
        per = self._mask_bytes.get(model)
        if per is None:
            per = self._mask_bytes[model] = {}
        hit = per.get(mask)
        if hit is not None:
            return hit
        bb = self.block_bytes(model)
        total = 0.0
        # (its bits as text, the lowest last: a shift of a mask of many blocks makes an
        # integer per block)
        bits = bin(mask)
        top = len(bits) - 1
        for i in range(min(len(bb), top - 1)):
            if bits[top - i] == "1":
                total += bb[i]
        per[mask] = total
        return total

    def warm_start(self, plan: Plan, placement: Placement, held: dict[str, Held]) -> None:
        """The plan's blocks resident at t = 0 (an error if they do not fit)."""
        for model in plan.models:  # (numbered first: each worker's ``res_at`` made at once)
            self.ix_of(model)
        n_models = len(self.model_ix)
        for (model, pi, si), ws in placement.stages.items():
            st = plan.models[model].pipelines[pi].stages[si]
            m = block_mask(st.blocks)
            whole = self.bytes_of(model, m)  # (a worker with none of the model's blocks yet)
            ix = self.ix_of(model)
            for wid in ws:
                h = held[wid]
                resident = h.resident
                old = resident.get(model, 0)
                if not old:
                    h.mem_used += whole
                    # (``set_resident``, inline: the model's number found once a stage)
                    resident[model] = m
                    at = h.res_at
                    if len(at) <= ix:
                        at += [0] * (max(ix + 1, n_models) - len(at))
                    at[ix] = m
                    continue
                new = m & ~old
                if new:
                    h.mem_used += self.bytes_of(model, new)
                    self.set_resident(h, model, old | new)
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
        c = self.canonical(model)
        n_parts = self._parts.get(c)
        if n_parts is None:
            n_parts = self._parts[c] = cold.model_load_plan(c).plan.n_parts
        scale, links = self.host_links.take(gpu_id, n_parts, model, now)
        key = (c, h.gpu_name, tuple(scale))
        hit = self._timelines.get(key)
        if hit is None:
            tl = cold.load_timeline(c, gpu, scale)
            hit = self._timelines[key] = (tl, tl.load_done_s, RunTerms())
        h.cold[model] = (now, hit[0], links, hit[2])
        return now + hit[1]

    def cold_run_s(self, h: Held, info: WorkerInfo, model: str, batch: int, now: float) -> float:
        """A run of ``model`` while its planned cold start is under way: layer by layer,
        each as its weights arrive (``ColdStartModel.cold_run_s``, worked out here from
        its terms, which the load's :class:`RunTerms` keeps)."""
        cold = h.cold[model]
        t: RunTerms = cold[3]
        share = info.share
        if t.batch != batch or t.share != share:
            assert self.cold_model is not None
            total, peak, pipelined, done = self.cold_model.cold_run_terms(
                model, info.gpu, share, batch, cold[1]
            )
            t.batch = batch
            t.share = share
            t.total_s = total
            t.peak_s = peak
            t.pipelined = pipelined
            t.load_done_s = done
        offset_s = now - cold[0]
        if not t.pipelined:
            return max(offset_s, t.load_done_s) + t.total_s - offset_s
        end = offset_s + t.total_s
        return (end if end > t.peak_s else t.peak_s) - offset_s

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
        last = cum[len(cum) - 1]  # (not ``cum[-1]``: the build does no wraparound)
        if f > 1 and last > 0:
            ratio = (last + (f - 1) * dha) / last
            cum = tuple([c * ratio for c in cum])
            energy *= ratio
        return cum, energy

    def loaded(self, h: Held, model: str, new: int) -> None:
        """A load of blocks ``new`` of ``model`` ended: resident now, its host links free."""
        cold = h.cold.pop(model, None)
        if cold is not None:
            self.host_links.release(cold[2])
        h.loading[model] = h.loading.get(model, 0) & ~new
        self.set_resident(h, model, h.resident.get(model, 0) | new)

    def evict(self, h: Held, model: str, blocks: tuple[int, int]) -> None:
        m = block_mask(blocks) & h.resident.get(model, 0)
        h.mem_used -= self.bytes_of(model, m)
        self.set_resident(h, model, h.resident.get(model, 0) & ~m)

    def ix_of(self, model: str) -> int:
        """The model's number (0, 1, ... in the order models are first met): its place
        in each worker's ``Held.res_at``."""
        ix = self.model_ix.get(model, -1)
        if ix < 0:
            ix = self.model_ix[model] = len(self.model_ix)
        return ix

    def set_resident(self, h: Held, model: str, mask: int) -> None:
        """``model``'s resident blocks on the worker (``h``) are ``mask`` now: in its
        ``resident`` and its ``res_at`` (every write of either goes through here)."""
        h.resident[model] = mask
        ix = self.ix_of(model)
        at = h.res_at
        while len(at) <= ix:
            at.append(0)
        at[ix] = mask


# ---------------------------------------------------------------------- the executor
class LastRun:
    """A worker's last stage as :class:`ModelledStart` found it: ``model``'s blocks
    ``b0`` to ``b1`` (end excluded) on a worker of its kind; ``row``, that stage's runs
    by batch size (each its block end times, energy, DHA seconds and the blocks' bits;
    None where not asked yet), shared by the workers of the kind; ``ix``, the model's
    number in the residency (``Residency.ix_of``). One per worker, written over."""

    __slots__ = ("b0", "b1", "ix", "model", "row")

    def __init__(self) -> None:
        self.model: object = None
        self.b0 = -1
        self.b1 = -1
        self.ix = -1
        self.row: list = []


class ModelledStart(StageStarter):
    """The modelled executor's stage start (``engine.modelled``, whose module docstring
    says what a stage takes), here so that it is compiled with the kernel: it runs for
    every stage. ``ModelledExecutor.attach`` makes one and binds its :meth:`start` on
    the executor; the rare paths (a stage's first run at a size, a stage waiting for
    its weights, jitter, DHA) call back into the executor."""

    def __init__(self, ex: Any) -> None:
        self.ex = ex
        self.kernel = ex.kernel
        self.runs = ex._runs  # (the executor's own dicts, shared)
        # the same runs by (model, kind of worker, blocks) as one number, each a row by
        # batch size (``LastRun.row``), with the blocks' bits; the models' numbers in it,
        # and the kinds' (a worker's GPU type and share, all a run depends on), by worker
        # index
        self.rows: dict[int, list] = {}
        self.model_ids: dict[str, int] = {}
        self.canon_ids: dict[str, int] = {}  # (by canonical instance: ``Residency.canonical``)
        self.kinds: dict[tuple[str, float], int] = {}
        self.kind_of: list[int] = []
        # per worker index, its last run (:class:`LastRun`, written over on a miss)
        self.last_at: list[LastRun | None] = []
        self.held = ex.held
        # the same Held by worker index (``Slot.index``; None where not looked up yet):
        # one list read per stage instead of a look-up by name in a dict of every worker
        # (1,000 at the scaling run's largest). ``ModelledExecutor.add_workers`` clears it.
        self.held_at: list = []
        self.overhead_s = ex._overhead_s
        self.jitter_on = ex._jitter_on
        self.heap = ex._heap
        self.call_at = ex._call_at
        self.done_at = ex._stage_done_at
        self.residency = ex.residency

    def start(self, task: entities.Task, now: float) -> None:
        """The stage's block end times and energy (``Task.run``), its end on the clock."""
        ex = self.ex
        b = task.batch
        model = b.model
        n = b.rows
        blocks = field(task._step, STEP_BLOCKS)
        w = task.worker
        b0 = blocks[0]
        b1 = blocks[1]
        wi = w.index
        # the worker's last stage first: a worker serves one stage of a pool, so its
        # last (model, blocks) is most often this one's, and that stage's runs by batch
        # size are its row (no number to make and look up; its kind is the worker's own)
        last_at = self.last_at
        last = last_at[wi] if 0 <= wi < len(last_at) else None
        if last is not None and last.model is model and last.b0 == b0 and last.b1 == b1:
            row = last.row
            hit = row[n] if n < len(row) else None
            if hit is None:
                hit = self._run_in(row, model, w, n, blocks)
            ix = last.ix
        else:
            hit = self._run_of(model, w, wi, n, blocks, b0, b1)
            ix = self.residency.ix_of(model)
        cum, energy, dha, m = hit
        plain = True  # (the run as the latency model has it: ``hit`` is its ``Task.run``)
        held_at = self.held_at
        h = held_at[wi] if 0 <= wi < len(held_at) else None
        if h is None:
            h = self.held[w.id]
            if wi >= 0:
                while len(held_at) <= wi:
                    held_at.append(None)
                held_at[wi] = h
        # (``h.resident.get(model, 0)``, by the model's number, ``ix``: the instance's
        # own, not its canonical model's, as ``hit`` is)
        at = h.res_at
        res = at[ix] if ix < len(at) else 0
        if res is h.held_res and m is h.held_m:
            pass  # (the blocks are resident: the last start's test, on the same masks)
        elif res & m == m:
            h.held_res = res
            h.held_m = m
        else:
            if not h.loading.get(model, 0) & m:
                self.kernel.stage_failed(task, NOT_RESIDENT, now)
                return
            streamed = ex._streamed(h, model, blocks, cum, now) if h.streams else None
            if streamed is not None:  # a late load under way: each block as it arrives
                cum = streamed
            elif model not in h.cold:
                self.kernel.defer(task)  # its weights arrive by a plain load: wait for it
                return
            else:  # a planned cold start under way: layer by layer, as its weights arrive
                dur = self.residency.cold_run_s(h, w.info, model, n, now)
                energy *= dur / max(cum[len(cum) - 1], 1e-12)
                cum = (dur,)
            plain = False
        if self.overhead_s and task.index == 0:
            extra = self.overhead_s * n
            cum = tuple([c + extra for c in cum])
            plain = False
        if self.jitter_on:
            j = ex._jitter()
            cum = tuple([c * j for c in cum])
            energy *= j
            plain = False
        if dha > 0:
            cum, energy = self.residency.dha_contention(h, w.gpu_id, model, dha, cum, energy, now)
            plain = False
        # (``Task.run`` is read as (block end times, energy): the run as found, where
        # nothing changed it, else a pair made for it)
        task.run = hit if plain else (cum, energy)
        end_s = cum[len(cum) - 1]  # (a C double compiled: the end's time, no float made)
        if self.heap is not None:
            self.heap.push(now + end_s, self.done_at, task, task.version)
        else:
            self.call_at(now + end_s, self.done_at, task, task.version)

    def _run_of(
        self,
        model: str,
        w: entities.Slot,
        wi: int,
        n: int,
        blocks: tuple[int, int],
        b0: int,
        b1: int,
    ) -> tuple[tuple[float, ...], float, float, int]:
        """A stage's run (block end times, energy, DHA seconds, the blocks' bits) of
        ``n`` rows of ``model``'s ``blocks`` on ``w``, from the stage's row of runs by
        batch size (:meth:`_run_in`), found by the worker kind's number (made of the
        model's, the worker kind's (its GPU type and share: what ``_run_times`` reads)
        and the blocks: no tuple to make and hash); kept as the worker's last stage
        (``start``). (By worker, 1,000 workers made a key each for every model and size:
        mostly misses, each a tuple; by size too, a worker's batches of changing sizes
        looked one up at most starts, in a table of every kind, stage and size.)"""
        mi = self.model_ids.get(model, -1)
        if mi < 0:  # (one number per canonical instance: its runs are its instances')
            c = self.residency.canonical(model)
            mi = self.canon_ids.get(c, -1)
            if mi < 0:
                mi = self.canon_ids[c] = len(self.canon_ids)
            self.model_ids[model] = mi
        kind_of = self.kind_of
        k = kind_of[wi] if 0 <= wi < len(kind_of) else -1
        if k < 0:
            k = self._kind(w)
        fast = -1
        if 0 <= b0 < b1 < 1024 and k < 65536 and mi < 65536:
            fast = (mi << 36) | (k << 20) | (b0 << 10) | b1
        row = self.rows.get(fast) if fast >= 0 else None
        if row is None:
            row = []
            if fast >= 0:
                self.rows[fast] = row
        last_at = self.last_at
        if wi >= 0:
            while len(last_at) <= wi:
                last_at.append(None)
            last = last_at[wi]
            if last is None:
                last = last_at[wi] = LastRun()
            last.model = model
            last.b0 = b0
            last.b1 = b1
            last.row = row
            last.ix = self.residency.ix_of(model)
        return self._run_in(row, model, w, n, blocks)

    def _run_in(
        self, row: list, model: str, w: entities.Slot, n: int, blocks: tuple[int, int]
    ) -> tuple[tuple[float, ...], float, float, int]:
        """The run of ``n`` rows from the stage's ``row`` of runs by batch size, asked
        of the executor (``_run_times``, by GPU type, share, size and blocks) and kept
        there where it is not there yet (sizes past ``ROW_MAX_N`` are not kept by size:
        the executor's own table has them)."""
        hit = row[n] if 0 <= n < len(row) else None
        if hit is not None:
            return hit
        key = (model, w.gpu_name, w.info.share, n, blocks)
        run = self.runs.get(key)
        if run is None:
            run = self.runs[key] = self.ex._run_times(model, w.info, n, blocks)
        # (the mask of Python ints: a model may have more blocks than a C integer bits)
        hit = (run[0], run[1], run[2], ((1 << blocks[1]) - 1) ^ ((1 << blocks[0]) - 1))
        if 0 <= n < ROW_MAX_N:
            while len(row) <= n:
                row.append(None)
            row[n] = hit
        return hit

    def _kind(self, w: entities.Slot) -> int:
        """The number of ``w``'s GPU type and share (the next one where new), kept by
        its index."""
        key = (w.gpu_name, w.info.share)
        k = self.kinds.get(key, -1)
        if k < 0:
            k = self.kinds[key] = len(self.kinds)
        if w.index >= 0:
            kind_of = self.kind_of
            while len(kind_of) <= w.index:
                kind_of.append(-1)
            kind_of[w.index] = k
        return k


class ModelledLoads:
    """The modelled executor's loads and evictions (module docstring, "Residency and
    loading"), here so that they are compiled with the stage start: a cold-start-heavy run
    makes a load every few requests. ``ModelledExecutor.attach`` makes one and binds its
    :meth:`load` and :meth:`evict` on the executor; a load's end is its :meth:`loaded`,
    on the clock."""

    def __init__(self, ex: Any) -> None:
        self.kernel = ex.kernel
        self.held = ex.held  # (the executor's own dicts, shared: new workers join them)
        self.infos = ex.infos
        self.residency = ex.residency
        self.links = ex.links
        self.view = ex.view
        self.heap = ex._heap
        self.call_at = ex._call_at
        self.loaded_cb = self.loaded

    def _at(self, t: float, a: Load, info: tuple[int, float]) -> None:
        """:meth:`loaded` at ``t``: onto the engine's heap where it has one (the virtual
        clock's ``call_at``, without its call), else the clock's ``call_at``."""
        if self.heap is not None:
            self.heap.push(t, self.loaded_cb, a, info)
        else:
            self.call_at(t, self.loaded_cb, a, info)

    def load(self, a: Load, now: float) -> None:
        """``Executor.load``: the blocks not resident nor loading are loaded, if they fit
        (else, with ``a.wait``, when an eviction makes room; without, it fails). (The
        kernel checked ``a``, a ``Load``: its fields are read by number.)"""
        h = self.held[field(a, LOAD_WORKER)]
        res = self.residency
        model = field(a, LOAD_MODEL)
        blocks = field(a, LOAD_BLOCKS)
        wait = field(a, LOAD_WAIT)
        if not wait and (h.waits or h.streams):  # (no key made where none waits or streams)
            key = (model, blocks)
            if key in h.waits:  # the last word on a waiting load: now, or never
                wa, new = h.waits.pop(key)
                if h.mem_used + res.bytes_of(model, new) > h.mem_cap * (1 + 1e-9):
                    h.loading[model] = h.loading.get(model, 0) & ~new
                    self.kernel.load_finished(wa, now, now, False, "out of memory")
                    return
                self.begin(wa, new, now)
                return
            if key in h.streams:
                return  # (a waiting load under way already: it reports once, when it ends)
        m = block_mask(blocks)
        new = m & ~h.resident.get(model, 0) & ~h.loading.get(model, 0)
        nbytes = res.bytes_of(model, new)
        if h.mem_used + nbytes > h.mem_cap * (1 + 1e-9):
            if wait:  # until an eviction makes room; its stages wait for it
                h.loading[model] = h.loading.get(model, 0) | new
                h.waits[(model, blocks)] = (a, new)
                return
            self.kernel.load_finished(a, now, now, False, "out of memory")
            return
        self.begin(a, new, now)

    def begin(self, a: Load, new: int, now: float) -> None:
        """The load of blocks ``new`` starts: memory taken, its end on the clock."""
        worker = field(a, LOAD_WORKER)
        model = field(a, LOAD_MODEL)
        wait = field(a, LOAD_WAIT)
        h = self.held[worker]
        res = self.residency
        nbytes = res.bytes_of(model, new)
        h.mem_used += nbytes
        h.loading[model] = h.loading.get(model, 0) | new
        info = self.infos[worker]
        if new and res.cold_model is not None:
            end = res.take_host_links(info.gpu_id, info.gpu, h, model, now)
            self._at(end, a, (new, now))
            if wait:
                self.kernel.resume(worker, now)  # its stages run layer by layer now
            return
        cluster = self.view.cluster
        path = tuple(cluster.host_path(info.gpu_id))
        bw = min([cluster.links[x].bw_gbps for x in path])
        t0, t1 = self.links.transfer(path, bw, 0.0, nbytes, now)
        if wait:  # a late load streams: its blocks arrive in order, over [t0, t1]
            blocks = field(a, LOAD_BLOCKS)
            at, done = {}, 0.0
            for k in range(*blocks):
                if new >> k & 1:
                    done += res.bytes_of(model, 1 << k)
                    at[k] = t0 + (t1 - t0) * (done / nbytes if nbytes > 0 else 1.0)
            h.streams[(model, blocks)] = (new, at)
            self.kernel.resume(worker, now)
        self._at(t1, a, (new, t0))

    def loaded(self, a: Load, info: tuple[int, float], now: float) -> None:
        """The clock's callback at the load's end (``info``: its blocks, when it began)."""
        new, t0 = info
        model = field(a, LOAD_MODEL)
        h = self.held[field(a, LOAD_WORKER)]
        h.streams.pop((model, field(a, LOAD_BLOCKS)), None)
        self.residency.loaded(h, model, new)
        self.kernel.load_finished(a, t0, now)

    def evict(self, a: Evict, now: float) -> None:
        """``Executor.evict``: the blocks freed, and the loads waiting for room begin
        where they now fit."""
        h = self.held[field(a, LOAD_WORKER)]
        self.residency.evict(h, field(a, LOAD_MODEL), field(a, LOAD_BLOCKS))
        if not h.waits:  # (the common case: no load waits; no list of them made)
            return
        for key, (wa, new) in list(h.waits.items()):  # loads waiting for this room
            if h.mem_used + self.residency.bytes_of(wa.model, new) <= h.mem_cap * (1 + 1e-9):
                del h.waits[key]
                self.begin(wa, new, now)


class ModelledExecutor(BaseExecutor):
    """Stages and loads as the latency model says (module docstring)."""

    outputs = False
    #: a worker's memory as modelled (a test narrows it with a subclass of its own)
    held_class: type[Held] = Held

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
        self._heap = clock.heap if type(clock) is VirtualClock else None
        view = kernel.view
        self.view = view
        self.latency = view.latency
        self.residency = Residency(view.cluster, view.latency, self._graphs)
        cold = self.residency.cold_model
        self._dha_s = None if cold is None else cold.dha_s
        self.held = {wid: self.held_class(info) for wid, info in view.workers.items()}
        self.infos = dict(view.workers)  # every worker's, those a new plan added too
        # loads cross the host links of the kernel's link model (their own where it has none)
        self.links = kernel.links if kernel.links is not None else entities.LinkTable(view.cluster)
        self._starter = ModelledStart(self)
        if type(self).start is ModelledExecutor.start:  # (a subclass's own start stays)
            self.start = self._starter.start  # type: ignore[method-assign]
        self._loads = ModelledLoads(self)
        if type(self).load is ModelledExecutor.load:  # (as ``start``)
            self.load = self._loads.load  # type: ignore[method-assign]
        if type(self).evict is ModelledExecutor.evict:
            self.evict = self._loads.evict  # type: ignore[method-assign]
        if self.warm:
            self.warm_start()

    def close(self) -> None:
        """Let go of the kernel (a run's state is freed with its driver)."""
        for name in ("kernel", "_stage_done_at", "_call_at", "_starter", "start", "_loads", "load",
                     "evict"):  # fmt: skip
            self.__dict__.pop(name, None)

    def add_workers(self, infos: Mapping[str, WorkerInfo], done: Callable[[str], None]) -> None:
        """Workers a new plan brings: empty memory, ready for loads (at once)."""
        for wid, info in infos.items():
            self.held[wid] = self.held_class(info)
            self.infos[wid] = info
        starter = self.__dict__.get("_starter")
        if starter is not None:  # (its Held and last runs by worker index: anew)
            starter.held_at.clear()
            starter.last_at.clear()
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

    def start(self, task: entities.Task, now: float) -> None:
        """The stage takes the latency model's time (module docstring). The body is
        ``ModelledStart.start``, compiled with this file; ``attach``
        binds that on the executor, so the kernel calls it with no Python frame between."""
        self._starter.start(task, now)

    def stop(self, task: entities.Task, now: float) -> None:
        cum = task.run[0]
        elapsed = now - task.start_s
        k = 0
        while k < len(cum) - 1 and cum[k] < elapsed - 1e-12:
            k += 1
        if k == len(cum) - 1 and task.index == len(task.batch._route) - 1:
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
        """The load (module docstring): ``ModelledLoads.load``, compiled with this file;
        ``attach`` binds that on the executor, so the kernel calls it with no Python frame
        between."""
        self._loads.load(a, now)

    def evict(self, a: Evict, now: float) -> None:
        """The eviction: ``ModelledLoads.evict`` (as :meth:`load`)."""
        self._loads.evict(a, now)
