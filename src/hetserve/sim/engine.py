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
- **Links** (:mod:`hetserve.engine.links`, shared with the runtime) and **residency and loading**
  (:mod:`hetserve.sim.loader`); preemption and failures in :mod:`hetserve.sim.faults`.
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

import numpy as np

from hetserve.core.cluster import Cluster
from hetserve.core.errors import HetserveError
from hetserve.core.latency import LatencyModel, cold_start_model
from hetserve.core.outcome import DROPPED, LATE, OK, PENDING
from hetserve.core.plan import Placement, Plan
from hetserve.core.requests import Request
from hetserve.engine.links import HostLinks, LinkTable
from hetserve.engine.rules import (
    NOT_RESIDENT,
    PARKED,
    check_dispatch,
    check_timer,
    cut_bytes,
    drop_not_held,
    lost_reason,
    not_held,
    parked_elsewhere,
    stage_done_report,
    unknown_action,
)
from hetserve.scheduling.protocol import (
    ClusterView,
    Dispatch,
    Drop,
    Evict,
    Load,
    Preempt,
    Scheduler,
    SetTimer,
)
from hetserve.sim.faults import FaultsMixin
from hetserve.sim.finish import EndMixin
from hetserve.sim.loader import LoaderMixin
from hetserve.sim.result import SimResult
from hetserve.sim.routes import RoutesMixin
from hetserve.sim.state import (
    _AWAITING,
    _DONE,
    _EPS,
    _IN_BATCH,
    _LOAD_DONE,
    _PREEMPT_STOP,
    _STAGE_DONE,
    _TIMER,
    _TRANSFER_DONE,
    _WORKER_LOST,
    SimConfig,
    _Batch,
    _Task,
    _Worker,
)
from hetserve.workload.trace import Trace


class Simulator(LoaderMixin, FaultsMixin, RoutesMixin, EndMixin):
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
        self._bytes_cache: dict[str, list[float]] = {}
        self._mask_bytes: dict[tuple[str, int], float] = {}
        self.links = LinkTable(cluster, self.cfg.record_links, plan.paths)
        self._nblocks = {m: latency.num_blocks(m) for m in plan.models}
        self._overhead_s = self.cfg.request_overhead_s
        self._cold_model = cold_start_model(latency)
        # DHA runs contend for host links
        self._dha_s = None if self._cold_model is None else self._cold_model.dha_s
        # (model, worker, batch, blocks) -> _run_times
        self._runs: dict[tuple[str, str, int, tuple[int, int]], tuple] = {}
        # loads that follow load plans (core.layerlatency), over host links they share
        self._planned_loads = self._cold_model is not None
        self._host_links = HostLinks(cluster)
        self._jitter_on = self.cfg.jitter == "exponential" or (
            self.cfg.jitter == "lognormal" and self.cfg.jitter_cv > 0
        )

    # ------------------------------------------------------------------ setup helpers
    def fail_worker(self, worker: str, at_s: float) -> None:
        """Lose a worker at a given time (failure injection)."""
        if worker not in self.workers:
            raise HetserveError(f"no worker {worker!r}")
        self._failures.append((at_s, worker))

    def _run_times(
        self, model: str, w: _Worker, batch: int, blocks: tuple[int, int]
    ) -> tuple[tuple[float, ...], float, float]:
        """A stage run on ``w`` (cached in ``_runs`` by its caller): cumulative block end
        times, busy energy, and the part of it on DHA layers (reading host memory; 0
        without load plans)."""
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
        dha = 0.0
        if self._dha_s is not None:
            dha = self._dha_s(model, gpu, share, batch)
        return tuple(cum), energy, dha

    def _jitter(self) -> float:
        c = self.cfg
        if c.jitter == "lognormal" and c.jitter_cv > 0:
            s2 = math.log1p(c.jitter_cv**2)
            return float(self.rng.lognormal(-s2 / 2, math.sqrt(s2)))
        if c.jitter == "exponential":
            return float(self.rng.exponential(1.0))
        return 1.0

    # ------------------------------------------------------------------ run
    @property
    def link_log(self) -> dict[str, list[tuple[float, float]]]:
        """Every transfer's interval per link (with ``SimConfig(record_links=True)``)."""
        return self.links.log

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
        # where a request's activations are parked between open routes (rule 4):
        # the next block to run and the worker holding its input (None: the request's input)
        self.at_block = [0] * n
        self.at_worker: list[str | None] = [None] * n
        self.reasons: list[str] = [""]
        self._reason_idx: dict[str, int] = {"": 0}
        self.rows: list[tuple] = []
        self.batches: dict[int, _Batch] = {}
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
        stage_done = self._stage_done
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
            if kind == _STAGE_DONE:
                stage_done(a, b, now)
            elif kind == _TIMER:
                acts = on_timer(a, now)
                if acts:
                    apply(acts, now)
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
                check_timer(a.at_s, now)
                self._push(max(a.at_s, now), _TIMER, a.token, None)
            elif type(a) is Drop:
                ri = self._reason(a.reason or "dropped")
                for r in a.requests:
                    if self.state[r.id] != _AWAITING:
                        raise drop_not_held(r)
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
                raise unknown_action(a)

    def _dispatch(self, d: Dispatch, now: float) -> None:
        first = check_dispatch(d, self._nblocks, self.workers, self.batches)
        state, dispatch_s, batch_of = self.state, self.dispatch_s, self.batch_of
        model, bid = d.model, d.batch_id
        at_block = self.at_block
        for r in d.requests:
            i = r.id
            if state[i] != _AWAITING or r.model != model:
                raise not_held(d, r)
            if at_block[i] != first:
                raise parked_elsewhere(d, r, at_block[i])
            state[i] = _IN_BATCH
            if first == 0:
                dispatch_s[i] = now
            batch_of[i] = bid
        b = _Batch(d, now)
        self.batches[d.batch_id] = b
        task = _Task(b, 0, self.workers[d.route[0].worker])
        b.tasks.append(task)
        if first == 0:
            self._input_arrived(task, now)
        else:
            self._gather(task, first, now)

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
                self._fail_batch(task.batch, task, lost_reason(task.batch.route), now)
                continue
            self._start(w, task, now)

    def _start(self, w: _Worker, task: _Task, now: float) -> None:
        b = task.batch
        model = b.model
        n = len(b.requests)
        blocks = task.step.blocks
        key = (model, w.id, n, blocks)
        run = self._runs.get(key)
        if run is None:
            run = self._runs[key] = self._run_times(model, w, n, blocks)
        cum, energy, dha = run
        m = ((1 << blocks[1]) - 1) ^ ((1 << blocks[0]) - 1)
        if w.resident.get(model, 0) & m != m:
            if not w.loading.get(model, 0) & m:
                self._fail_batch(b, task, NOT_RESIDENT, now)
                return
            cold = w.cold.get(model)
            if cold is None:
                w.waiting_load.append(task)
                return
            # a planned cold start under way: layer by layer, each as its weights arrive
            dur = self._cold_model.cold_run_s(model, w.gpu, w.info.share, n, cold[1], now - cold[0])
            energy *= dur / max(cum[-1], 1e-12)
            cum = (dur,)
        if self._overhead_s and task.index == 0:
            extra = self._overhead_s * n
            cum = tuple(c + extra for c in cum)
        if self._jitter_on:
            j = self._jitter()
            cum = tuple(c * j for c in cum)
            energy *= j
        if dha > 0:
            cum, energy = self._dha_contention(w, model, dha, cum, energy, now)
        task.cum = cum
        task.energy_j = energy
        task.start_s = now
        w.running = task
        if task.index == 0 and blocks[0] == 0:
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
        step = task.step
        self._row(task, now, "completed")
        reason = ""
        if last:
            b.alive = False
            del self.batches[b.id]
            end_block = step.blocks[1]
            if end_block < self._nblocks[b.model]:
                # an open route: the requests are parked here, back with the scheduler
                reason = PARKED
                state, at_block, at_worker = self.state, self.at_block, self.at_worker
                for r in b.requests:
                    i = r.id
                    state[i] = _AWAITING
                    at_block[i] = end_block
                    at_worker[i] = w.id
            else:
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
            nbytes = cut_bytes(
                self.latency,
                b.model,
                step.blocks[1] - 1,
                len(b.requests),
                self.cfg.cut_bytes_factor,
            )
            t0, t1 = self.links.send(w.gpu_id, nw.gpu_id, nbytes, now)
            ntask.transfer_start_s, ntask.transfer_end_s = t0, t1
            if t1 > now:
                self._push(t1, _TRANSFER_DONE, ntask, None)
            else:
                self._input_arrived(ntask, now)
        rep = stage_done_report(
            b.d, task.index, w.id, task.start_s, now, last, reason,
            task.transfer_start_s, task.transfer_end_s,
        )  # fmt: skip
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
                task.step.stage,
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
