"""The discrete-event simulator.

A heap of ``(time, seq, kind, a, b)`` events, float seconds, ties broken by the sequence
number, so a run is a deterministic function of its inputs and seed. Arrivals are not put
on the heap: they are merged from the trace's sorted arrays (an arrival and a heap event at
the same instant: the heap event goes first).

Parts:

- **Workers**, one per virtual GPU (a GPU's ``1/share`` MPS slice). A worker runs one stage
  at a time: the blocks of the stage back to back, each for the latency model's time, all
  multiplied by one seeded jitter draw per stage execution (``lognormal`` with a CV, or
  ``exponential``). A ``Preempt`` stops a running stage at its next block boundary.
- **Links** (the one link model of DESIGN.md): every directed link of the cluster (NIC
  uplinks and downlinks, switch links, PCIe, NVLink) has lanes, each free from some time on.
  A transfer of ``bytes`` over a path starts when every link on the path has a free lane
  (FIFO in submission order), holds them all for ``bytes / bottleneck bandwidth`` plus the
  path's propagation delay, and so no lane ever carries two transfers at once.
- **Residency and loading**: each worker holds some blocks of some models within its memory
  (``memory_gb / share``). With ``warm=True`` the plan's blocks are resident at t = 0. ``Load``
  moves weights over the GPU's host path (PCIe switch uplink, PCIe link) and counts against
  memory; ``Evict`` frees them; a stage whose blocks are not resident (nor loading) fails.
- **Energy**: every GPU draws its idle power all the time; while a slice runs a stage it
  draws the latency model's busy energy instead of its share of idle power.

Outputs (:class:`~hetserve.sim.result.SimResult`): one record per request (arrival, dispatch,
start, finish, outcome, reason, batch), one row per stage execution (worker, start, end,
batch size, completed/preempted/failed, input transfer), per-GPU energy, per-worker busy time.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from hetserve.core.cluster import Cluster
from hetserve.core.errors import HetserveError
from hetserve.core.latency import LatencyModel
from hetserve.core.outcome import DROPPED, FAILED, LATE, OK, PENDING
from hetserve.core.plan import Placement, Plan
from hetserve.core.requests import Request
from hetserve.scheduling.protocol import (
    ClusterView,
    Dispatch,
    Drop,
    Evict,
    Load,
    Preempt,
    Scheduler,
    SetTimer,
    StageReport,
    WorkerInfo,
)
from hetserve.sim.result import SimResult
from hetserve.workload.trace import Trace

# event kinds
_TIMER, _STAGE_DONE, _TRANSFER_DONE, _LOAD_DONE, _PREEMPT_STOP, _WORKER_LOST = range(6)
# request states
_AWAITING, _IN_BATCH, _DONE = 0, 1, 2
_EPS = 1e-12


class SimulationError(RuntimeError):
    """A scheduler broke the protocol (a bug in the scheduler, not bad user input)."""


@dataclass(frozen=True)
class SimConfig:
    seed: int = 0
    jitter: str = "none"  # none | lognormal | exponential
    jitter_cv: float = 0.0  # lognormal: coefficient of variation of the stage-time multiplier
    cut_bytes_factor: float = 1.0  # activation bytes at cuts: 1.0 FP32, 0.5 FP16
    warm: bool = True  # the plan's blocks are resident at t = 0
    drain_s: float | None = None  # run on after the last arrival (default: 10 x max SLO + 1 s)
    record_links: bool = False  # keep every transfer's link intervals (for checks)

    def __post_init__(self) -> None:
        if self.jitter not in ("none", "lognormal", "exponential"):
            raise HetserveError(
                f"jitter must be none, lognormal or exponential, got {self.jitter!r}"
            )
        if self.jitter_cv < 0 or self.cut_bytes_factor <= 0:
            raise HetserveError("jitter_cv must be >= 0 and cut_bytes_factor > 0")


class _Worker:
    __slots__ = (
        "busy_energy_j",
        "busy_s",
        "gpu",
        "gpu_id",
        "id",
        "info",
        "loading",
        "lost",
        "mem_cap",
        "mem_used",
        "ready",
        "resident",
        "running",
        "waiting_load",
    )

    def __init__(self, info: WorkerInfo) -> None:
        self.id = info.id
        self.info = info
        self.gpu = info.gpu
        self.gpu_id = info.gpu_id
        self.mem_cap = info.gpu.memory_gb * 1e9 / info.share
        self.mem_used = 0.0
        self.resident: dict[str, int] = {}  # model -> bitmask of blocks
        self.loading: dict[str, int] = {}
        self.ready: list = []  # heap of (planned_start, seq, task)
        self.waiting_load: list = []
        self.running: _Task | None = None
        self.lost = False
        self.busy_s = 0.0
        self.busy_energy_j = 0.0


class _Batch:
    __slots__ = ("alive", "dispatch_s", "id", "model", "requests", "route", "stage", "tasks")

    def __init__(self, d: Dispatch, now: float) -> None:
        self.id = d.batch_id
        self.model = d.model
        self.requests = d.requests
        self.route = d.route
        self.stage = 0
        self.dispatch_s = now
        self.alive = True
        self.tasks: list[_Task] = []


class _Task:
    __slots__ = (
        "batch",
        "cum",
        "dead",
        "energy_j",
        "index",
        "start_s",
        "step",
        "transfer_end_s",
        "transfer_start_s",
        "version",
        "worker",
    )

    def __init__(self, batch: _Batch, index: int, worker: _Worker) -> None:
        self.batch = batch
        self.index = index
        self.step = batch.route[index]
        self.worker = worker
        self.version = 0
        self.dead = False
        self.start_s = math.nan
        self.cum: tuple[float, ...] = ()
        self.energy_j = 0.0
        self.transfer_start_s: float | None = None
        self.transfer_end_s: float | None = None


def _mask(blocks: tuple[int, int]) -> int:
    return ((1 << blocks[1]) - 1) ^ ((1 << blocks[0]) - 1)


class Simulator:
    def __init__(
        self,
        cluster: Cluster,
        latency: LatencyModel,
        plan: Plan,
        placement: Placement,
        scheduler: Scheduler,
        trace: Trace,
        config: SimConfig | None = None,
    ) -> None:
        self.cluster = cluster
        self.latency = latency
        self.plan = plan
        self.placement = placement
        self.scheduler = scheduler
        self.trace = trace
        self.cfg = config or SimConfig()
        self.rng = np.random.default_rng(np.random.SeedSequence([self.cfg.seed, 0x5EED]))
        self.view = ClusterView.build(cluster, latency, placement, self.cfg.cut_bytes_factor)
        self.workers = {wid: _Worker(i) for wid, i in self.view.workers.items()}
        self._failures: list[tuple[float, str]] = []
        self._block_cache: dict = {}
        self._path_cache: dict = {}
        self._bytes_cache: dict[str, list[float]] = {}
        self._lanes: dict[str, list[float]] = {}
        self.link_log: dict[str, list[tuple[float, float]]] = {}
        self._nblocks = {m: latency.num_blocks(m) for m in plan.models}
        self._jitter_on = self.cfg.jitter == "exponential" or (
            self.cfg.jitter == "lognormal" and self.cfg.jitter_cv > 0
        )

    # ------------------------------------------------------------------ setup helpers
    def fail_worker(self, worker: str, at_s: float) -> None:
        """Lose a worker at a given time (failure injection)."""
        if worker not in self.workers:
            raise HetserveError(f"no worker {worker!r}")
        self._failures.append((at_s, worker))

    def block_bytes(self, model: str) -> list[float]:
        """Parameter bytes of each block (for memory and load times)."""
        if model not in self._bytes_cache:
            n = self.latency.num_blocks(model)
            out = [0.0] * n
            blocks = getattr(self.latency, "blocks", None)
            graph = getattr(self.latency, "graph", None)
            if callable(blocks) and callable(graph):
                g, b = graph(model), blocks(model)
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

    def _bytes_of(self, model: str, mask: int) -> float:
        bb = self.block_bytes(model)
        return sum(b for i, b in enumerate(bb) if mask >> i & 1)

    def _warm_start(self) -> None:
        for (model, pi, si), ws in self.placement.stages.items():
            st = self.plan.models[model].pipelines[pi].stages[si]
            m = _mask(st.blocks)
            for wid in ws:
                w = self.workers[wid]
                new = m & ~w.resident.get(model, 0)
                if new:
                    w.mem_used += self._bytes_of(model, new)
                    w.resident[model] = w.resident.get(model, 0) | new
        for w in self.workers.values():
            if w.mem_used > w.mem_cap * (1 + 1e-9):
                raise HetserveError(
                    f"worker {w.id} ({w.gpu.name}, 1/{w.info.share} slice): the plan's "
                    f"resident weights ({w.mem_used / 1e9:.2f} GB) exceed its memory "
                    f"({w.mem_cap / 1e9:.2f} GB)"
                )

    def _stage_times(
        self, model: str, w: _Worker, batch: int, blocks: tuple[int, int]
    ) -> tuple[tuple[float, ...], float]:
        key = (model, w.gpu.name, w.info.share, batch, blocks)
        hit = self._block_cache.get(key)
        if hit is None:
            lat, share, gpu = self.latency, w.info.share, w.gpu
            cum, acc, energy = [], 0.0, 0.0
            for k in range(blocks[0], blocks[1]):
                acc += lat.latency(model, gpu, share, batch, range(k, k + 1))
                cum.append(acc)
            try:
                energy = lat.energy(model, gpu, share, batch, range(*blocks))
            except HetserveError:
                from hetserve.core.latency import busy_power_w

                energy = acc * busy_power_w(gpu, share, 1.0)
            hit = (tuple(cum), energy)
            self._block_cache[key] = hit
        return hit

    def _jitter(self) -> float:
        c = self.cfg
        if c.jitter == "lognormal" and c.jitter_cv > 0:
            s2 = math.log1p(c.jitter_cv**2)
            return float(self.rng.lognormal(-s2 / 2, math.sqrt(s2)))
        if c.jitter == "exponential":
            return float(self.rng.exponential(1.0))
        return 1.0

    def _path(self, a: str, b: str) -> tuple[tuple[str, ...], float, float]:
        key = (a, b)
        hit = self._path_cache.get(key)
        if hit is None:
            p = self.cluster.transfer_path(a, b) if a != b else []
            links = self.cluster.links
            bw = min((links[x].bw_gbps for x in p), default=math.inf)
            delay = sum(links[x].delay_s for x in p)
            hit = (tuple(p), bw, delay)
            self._path_cache[key] = hit
        return hit

    def _transfer(
        self, path: tuple[str, ...], bw_gbps: float, delay_s: float, n_bytes: float, now: float
    ) -> tuple[float, float]:
        """Reserve a lane on every link of ``path``; returns (start, end)."""
        if not path or n_bytes <= 0:
            return now, now
        lanes = self._lanes
        links = self.cluster.links
        chosen = []
        start = now
        for name in path:
            ls = lanes.get(name)
            if ls is None:
                ls = lanes[name] = [0.0] * links[name].lanes
            i = min(range(len(ls)), key=ls.__getitem__)
            chosen.append((ls, i))
            start = max(start, ls[i])
        end = start + n_bytes * 8 / (bw_gbps * 1e9) + delay_s
        for ls, i in chosen:
            ls[i] = end
        if self.cfg.record_links:
            for name in path:
                self.link_log.setdefault(name, []).append((start, end))
        return start, end

    # ------------------------------------------------------------------ run
    def run(self) -> SimResult:
        tr = self.trace
        n = len(tr)
        # per-request state as Python lists: element access is much cheaper than on NumPy
        # arrays in the hot path; they become arrays in the result
        nan = math.nan
        self.deadline = tr.deadlines_s().tolist()
        self.dispatch_s = [nan] * n
        self.start_s = [nan] * n
        self.finish_s = [nan] * n
        self.outcome = [PENDING] * n
        self.reason = [0] * n
        self.batch_of = [-1] * n
        self.state = [_AWAITING] * n
        self.reasons: list[str] = [""]
        self._reason_idx: dict[str, int] = {"": 0}
        self.rows: list[tuple] = []
        self.batches: dict[int, _Batch] = {}
        self.reports: list[StageReport] = []
        self.heap: list = []
        self.seq = 0
        if self.cfg.warm:
            self._warm_start()
        for at, wid in self._failures:
            self._push(at, _WORKER_LOST, wid, None)
        self._apply(self.scheduler.start(self.view, self.plan, 0.0), 0.0)

        max_slo = max((s.slo_s for s in tr.streams), default=1.0)
        drain = self.cfg.drain_s if self.cfg.drain_s is not None else 10 * max_slo + 1.0
        horizon = tr.duration_s + drain
        times = tr.time_s.tolist()
        sidx = tr.stream_idx.tolist()
        stream_info = [(s.model, s.name, s.slo_s) for s in tr.streams]
        on_arrival = self.scheduler.on_arrival
        on_timer = self.scheduler.on_timer
        heap = self.heap
        pop = heapq.heappop
        apply = self._apply
        i = 0
        now = 0.0
        while True:
            if i < n and (not heap or times[i] < heap[0][0]):
                now = times[i]
                model, stream, slo = stream_info[sidx[i]]
                req = Request(i, model, stream, now, now + slo)
                i += 1
                acts = on_arrival(req, now)
                if acts:
                    apply(acts, now)
                continue
            if not heap:
                break
            t = heap[0][0]
            if t > horizon:
                break
            now, _, kind, a, b = pop(heap)
            if kind == _TIMER:
                acts = on_timer(a, now)
                if acts:
                    apply(acts, now)
            elif kind == _STAGE_DONE:
                self._stage_done(a, b, now)
            elif kind == _TRANSFER_DONE:
                self._input_arrived(a, now)
            elif kind == _LOAD_DONE:
                self._load_done(a, b, now)
            elif kind == _PREEMPT_STOP:
                self._preempt_stop(a, b, now)
            elif kind == _WORKER_LOST:
                self._worker_lost(a, now)
        end = max(now, tr.duration_s)
        self._close(end)
        return self._result(end)

    def _push(self, t: float, kind: int, a: object, b: object) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, a, b))

    def _reason(self, text: str) -> int:
        idx = self._reason_idx.get(text)
        if idx is None:
            idx = self._reason_idx[text] = len(self.reasons)
            self.reasons.append(text)
        return idx

    # ------------------------------------------------------------------ actions
    def _apply(self, actions: Iterable[object], now: float) -> None:
        for a in actions:
            if type(a) is Dispatch:
                self._dispatch(a, now)
            elif type(a) is SetTimer:
                if a.at_s >= now:
                    self.seq += 1
                    heapq.heappush(self.heap, (a.at_s, self.seq, _TIMER, a.token, None))
                    continue
                if a.at_s < now - 1e-9:
                    raise SimulationError(f"SetTimer at {a.at_s} is in the past (now {now})")
                self._push(max(a.at_s, now), _TIMER, a.token, None)
            elif type(a) is Drop:
                ri = self._reason(a.reason or "dropped")
                for r in a.requests:
                    if self.state[r.id] != _AWAITING:
                        raise SimulationError(
                            f"Drop of request {r.id}, which the scheduler does not hold"
                        )
                    self.state[r.id] = _DONE
                    self.outcome[r.id] = DROPPED
                    self.reason[r.id] = ri
            elif type(a) is Preempt:
                self._preempt(a, now)
            elif type(a) is Load:
                self._load(a, now)
            elif type(a) is Evict:
                self._evict(a)
            else:
                raise SimulationError(f"unknown action {a!r}")

    def _dispatch(self, d: Dispatch, now: float) -> None:
        if d.batch_id in self.batches or not d.requests or not d.route:
            raise SimulationError(
                f"Dispatch {d.batch_id}: batch ids must be new; requests and route non-empty"
            )
        self._check_route(d)
        state, dispatch_s, batch_of = self.state, self.dispatch_s, self.batch_of
        model, bid = d.model, d.batch_id
        for r in d.requests:
            i = r.id
            if state[i] != _AWAITING or r.model != model:
                raise SimulationError(
                    f"Dispatch {bid}: request {i} is not held by the scheduler or is for "
                    f"another model"
                )
            state[i] = _IN_BATCH
            dispatch_s[i] = now
            batch_of[i] = bid
        b = _Batch(d, now)
        self.batches[d.batch_id] = b
        task = _Task(b, 0, self.workers[d.route[0].worker])
        b.tasks.append(task)
        self._input_arrived(task, now)

    def _check_route(self, d: Dispatch) -> None:
        """Routes cover the model's blocks contiguously from 0 on known workers."""
        nb = self._nblocks.get(d.model)
        if nb is None:
            raise SimulationError(f"Dispatch {d.batch_id}: model {d.model!r} is not in the plan")
        route = d.route
        if len(route) == 1:  # the common case, checked quickly
            st = route[0]
            if st.stage == 0 and st.blocks == (0, nb) and st.worker in self.workers:
                return
        pos = 0
        for k, st in enumerate(route):
            if st.stage != k or st.blocks[0] != pos or st.blocks[1] <= pos:
                raise SimulationError(
                    f"Dispatch {d.batch_id}: route must cover blocks contiguously from 0 "
                    f"(stage {k}: {st.blocks})"
                )
            if st.worker not in self.workers:
                raise SimulationError(f"Dispatch {d.batch_id}: unknown worker {st.worker!r}")
            pos = st.blocks[1]
        if pos != nb:
            raise SimulationError(
                f"Dispatch {d.batch_id}: route ends at block {pos}, {d.model} has {nb}"
            )

    def _input_arrived(self, task: _Task, now: float) -> None:
        if task.dead:
            return
        w = task.worker
        if w.running is None and not w.ready and not w.lost:
            self._start(w, task, now)  # the common case: an idle worker, nothing queued
            return
        self.seq += 1
        heapq.heappush(w.ready, (task.step.planned_start_s, self.seq, task))
        if w.running is None:
            self._try_start(w, now)

    def _try_start(self, w: _Worker, now: float) -> None:
        while w.running is None and w.ready:
            task = heapq.heappop(w.ready)[2]
            if task.dead:
                continue
            if w.lost:
                self._fail_batch(task.batch, task, "worker lost", now)
                continue
            self._start(w, task, now)

    def _start(self, w: _Worker, task: _Task, now: float) -> None:
        b = task.batch
        st = task.step
        blocks = st.blocks
        res = w.resident.get(b.model, 0)
        m = ((1 << blocks[1]) - 1) ^ ((1 << blocks[0]) - 1)
        if res & m != m:
            if w.loading.get(b.model, 0) & m:
                w.waiting_load.append(task)
                return
            self._fail_batch(b, task, "blocks not resident", now)
            return
        cum, energy = self._stage_times(b.model, w, len(b.requests), blocks)
        if self._jitter_on:
            j = self._jitter()
            cum = tuple(c * j for c in cum)
            energy *= j
        task.cum = cum
        task.energy_j = energy
        task.start_s = now
        w.running = task
        if task.index == 0:
            start_s = self.start_s
            for r in b.requests:
                start_s[r.id] = now
        self.seq += 1
        heapq.heappush(self.heap, (now + cum[-1], self.seq, _STAGE_DONE, task, task.version))

    def _stage_done(self, task: _Task, version: int, now: float) -> None:
        if task.version != version or task.dead:
            return
        w = task.worker
        b = task.batch
        w.running = None
        dur = now - task.start_s
        w.busy_s += dur
        w.busy_energy_j += task.energy_j
        last = task.index == len(b.route) - 1
        self._row(task, now, "completed")
        if last:
            b.alive = False
            del self.batches[b.id]
            outcome, state, finish, deadline = (
                self.outcome,
                self.state,
                self.finish_s,
                self.deadline,
            )
            for r in b.requests:
                i = r.id
                state[i] = _DONE
                finish[i] = now
                outcome[i] = OK if now <= deadline[i] + _EPS else LATE
        else:
            b.stage += 1
            nxt = b.route[b.stage]
            nw = self.workers[nxt.worker]
            ntask = _Task(b, b.stage, nw)
            b.tasks.append(ntask)
            path, bw, delay = self._path(w.gpu_id, nw.gpu_id)
            nbytes = (
                self.latency.out_bytes(b.model, task.step.blocks[1] - 1)
                * len(b.requests)
                * self.cfg.cut_bytes_factor
            )
            t0, t1 = self._transfer(path, bw, delay, nbytes, now)
            ntask.transfer_start_s, ntask.transfer_end_s = t0, t1
            if t1 > now:
                self._push(t1, _TRANSFER_DONE, ntask, None)
            else:
                self._input_arrived(ntask, now)
        rep = StageReport(
            "stage",
            b.id,
            b.model,
            task.index,
            w.id,
            task.start_s,
            now,
            b.requests,
            True,
            last,
            "",
            task.step.blocks,
            task.step.blocks[1] - task.step.blocks[0],
            task.transfer_start_s,
            task.transfer_end_s,
        )
        acts = self.scheduler.on_stage_done(rep, now)
        if acts:
            self._apply(acts, now)
        if w.running is None and w.ready:
            self._try_start(w, now)

    def _row(self, task: _Task, end: float, status: str) -> None:
        b = task.batch
        self.rows.append(
            (
                b.id,
                b.model,
                task.index,
                task.worker.id,
                task.worker.gpu.name,
                len(b.requests),
                task.start_s,
                end,
                status,
                task.transfer_start_s,
                task.transfer_end_s,
                b.dispatch_s,
            )
        )

    # ------------------------------------------------------------------ preemption, failure
    def _preempt(self, p: Preempt, now: float) -> None:
        b = self.batches.get(p.batch_id)
        if b is None or not b.alive:
            return  # finished or gone: nothing to stop (a race a real system has too)
        task = b.tasks[-1]
        if task.worker.id != p.worker:
            return
        w = task.worker
        if w.running is task:
            k = 0
            elapsed = now - task.start_s
            while task.cum[k] < elapsed - 1e-12:
                k += 1
            last = task.index == len(b.route) - 1
            if k == len(task.cum) - 1 and last:
                return  # the next exit point is the end: the batch simply completes
            task.version += 1
            self._push(task.start_s + task.cum[k], _PREEMPT_STOP, task, k + 1)
        else:
            task.dead = True
            self._end_batch(b, task, now, "preempted", 0)

    def _preempt_stop(self, task: _Task, blocks_done: int, now: float) -> None:
        w = task.worker
        if w.running is not task:
            return
        w.running = None
        w.busy_s += now - task.start_s
        w.busy_energy_j += task.energy_j * blocks_done / len(task.cum)
        self._row(task, now, "preempted")
        task.dead = True
        self._end_batch(task.batch, task, now, "preempted", blocks_done)
        self._try_start(w, now)

    def _end_batch(self, b: _Batch, task: _Task, now: float, reason: str, blocks_done: int) -> None:
        """Stop a batch before completion and report it (requests back to the scheduler
        when preempted, failed otherwise)."""
        b.alive = False
        self.batches.pop(b.id, None)
        for t in b.tasks:
            t.dead = True
        if reason == "preempted":
            for r in b.requests:
                self.state[r.id] = _AWAITING
        else:
            ri = self._reason(reason)
            for r in b.requests:
                self.state[r.id] = _DONE
                self.outcome[r.id] = FAILED
                self.reason[r.id] = ri
        start = task.start_s if not math.isnan(task.start_s) else now
        rep = StageReport(
            "stage",
            b.id,
            b.model,
            task.index,
            task.worker.id,
            start,
            now,
            b.requests,
            False,
            False,
            reason,
            task.step.blocks,
            blocks_done,
            task.transfer_start_s,
            task.transfer_end_s,
        )
        acts = self.scheduler.on_stage_done(rep, now)
        if acts:
            self._apply(acts, now)

    def _fail_batch(self, b: _Batch, task: _Task, reason: str, now: float) -> None:
        task.start_s = now
        self._row(task, now, "failed")
        self._end_batch(b, task, now, reason, 0)

    def _worker_lost(self, wid: str, now: float) -> None:
        w = self.workers[wid]
        if w.lost:
            return
        w.lost = True
        victims = []
        if w.running is not None:
            t = w.running
            w.running = None
            w.busy_s += now - t.start_s
            t.version += 1
            self._row(t, now, "failed")
            victims.append(t)
        victims += [t for _, _, t in w.ready if not t.dead]
        victims += [t for t in w.waiting_load if not t.dead]
        w.ready.clear()
        w.waiting_load.clear()
        for t in victims:
            if not t.dead and t.batch.alive:
                self._end_batch(t.batch, t, now, "worker lost", 0)
        acts = self.scheduler.on_worker_lost(wid, now)
        if acts:
            self._apply(acts, now)

    # ------------------------------------------------------------------ loading
    def _load(self, a: Load, now: float) -> None:
        w = self.workers.get(a.worker)
        if w is None:
            raise SimulationError(f"Load on unknown worker {a.worker!r}")
        nb = self.latency.num_blocks(a.model)
        if not 0 <= a.blocks[0] < a.blocks[1] <= nb:
            raise SimulationError(f"Load of {a.model} blocks {a.blocks}: model has {nb}")
        m = _mask(a.blocks)
        new = m & ~w.resident.get(a.model, 0) & ~w.loading.get(a.model, 0)
        nbytes = self._bytes_of(a.model, new)
        if w.mem_used + nbytes > w.mem_cap * (1 + 1e-9):
            rep = StageReport(
                "load", -1, a.model, 0, w.id, now, now, (), False, False, "out of memory", a.blocks
            )
            acts = self.scheduler.on_stage_done(rep, now)
            if acts:
                self._apply(acts, now)
            return
        w.mem_used += nbytes
        w.loading[a.model] = w.loading.get(a.model, 0) | new
        links = self.cluster.links
        path = tuple(self.cluster.host_path(w.gpu_id))
        bw = min(links[x].bw_gbps for x in path)
        t0, t1 = self._transfer(path, bw, 0.0, nbytes, now)
        self._push(t1, _LOAD_DONE, w, (a.model, new, a.blocks, t0))

    def _load_done(self, w: _Worker, info: tuple, now: float) -> None:
        model, new, blocks, t0 = info
        w.loading[model] = w.loading.get(model, 0) & ~new
        w.resident[model] = w.resident.get(model, 0) | new
        waiting, w.waiting_load = w.waiting_load, []
        for t in waiting:
            self.seq += 1
            heapq.heappush(w.ready, (t.step.planned_start_s, self.seq, t))
        rep = StageReport("load", -1, model, 0, w.id, t0, now, (), True, False, "", blocks)
        acts = self.scheduler.on_stage_done(rep, now)
        if acts:
            self._apply(acts, now)
        self._try_start(w, now)

    def _evict(self, a: Evict) -> None:
        w = self.workers.get(a.worker)
        if w is None:
            raise SimulationError(f"Evict on unknown worker {a.worker!r}")
        m = _mask(a.blocks) & w.resident.get(a.model, 0)
        w.mem_used -= self._bytes_of(a.model, m)
        w.resident[a.model] = w.resident.get(a.model, 0) & ~m

    # ------------------------------------------------------------------ end
    def _close(self, end: float) -> None:
        """Requests still held at the horizon end as dropped/failed, never pending."""
        for b in list(self.batches.values()):
            task = b.tasks[-1]
            if task.worker.running is task:
                task.worker.busy_s += end - task.start_s
                task.worker.running = None
                self._row(task, end, "failed")
            b.alive = False
            ri = self._reason("simulation ended")
            for r in b.requests:
                self.state[r.id] = _DONE
                self.outcome[r.id] = FAILED
                self.reason[r.id] = ri
        self.batches.clear()
        if PENDING in self.outcome:
            ri = self._reason("unserved at end of simulation")
            for i, o in enumerate(self.outcome):
                if o == PENDING:
                    self.outcome[i] = DROPPED
                    self.reason[i] = ri

    def _result(self, end: float) -> SimResult:
        gpu_energy: dict[str, float] = {g.id: g.type.idle_w * end for g in self.cluster.gpus}
        worker_energy: dict[str, float] = {}
        for w in self.workers.values():
            idle_share_w = w.gpu.idle_w / w.info.share
            gpu_energy[w.gpu_id] += w.busy_energy_j - idle_share_w * w.busy_s
            worker_energy[w.id] = w.busy_energy_j + idle_share_w * (end - w.busy_s)
        return SimResult(
            trace=self.trace,
            end_s=end,
            dispatch_s=np.asarray(self.dispatch_s),
            start_s=np.asarray(self.start_s),
            finish_s=np.asarray(self.finish_s),
            outcome=np.asarray(self.outcome, dtype=np.int8),
            reason=np.asarray(self.reason, dtype=np.int16),
            reasons=tuple(self.reasons),
            batch=np.asarray(self.batch_of, dtype=np.int64),
            stage_rows=self.rows,
            worker_busy_s={w.id: w.busy_s for w in self.workers.values()},
            worker_gpu={w.id: w.gpu.name for w in self.workers.values()},
            worker_share={w.id: w.info.share for w in self.workers.values()},
            gpu_energy_j=gpu_energy,
            worker_energy_j=worker_energy,
            link_log=self.link_log,
        )
