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
- **Parts with their own state**, each in its module: the request ledger
  (:class:`~hetserve.sim.ledger.Ledger`, born with the simulator), routes over the link
  model (:class:`~hetserve.sim.routes.Routes`; :mod:`hetserve.engine.links`, shared with
  the runtime), residency and loading (:class:`~hetserve.sim.loader.Loader`), preemption
  and failures (:class:`~hetserve.sim.faults.Faults`), energy
  (:class:`~hetserve.sim.energy.Energy`) and the recorded rows
  (:class:`~hetserve.sim.result.Recorder`). The simulator itself holds the event loop,
  the workers, the batches in flight and the protocol's actions; parts that must tell the
  scheduler something call back through one ``report`` function.

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
from hetserve.core.latency import LatencyModel
from hetserve.core.outcome import DROPPED, LATE, OK
from hetserve.core.plan import Placement, Plan
from hetserve.core.requests import Request
from hetserve.engine.rules import (
    ACTIVATIONS_LOST,
    NOT_RESIDENT,
    PARKED,
    check_dispatch,
    check_timer,
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
    StageReport,
)
from hetserve.sim.energy import Energy
from hetserve.sim.faults import Faults
from hetserve.sim.ledger import Ledger
from hetserve.sim.loader import Loader
from hetserve.sim.result import Recorder, SimResult
from hetserve.sim.routes import Routes
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
    Events,
    SimConfig,
    _Batch,
    _Task,
    _Worker,
)
from hetserve.workload.trace import Trace


def _gone(*args: object) -> None:
    raise HetserveError("this Simulator has run; build another for another run")


class Simulator:
    """One simulated run of a scheduler over a trace (``run()`` once)."""

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
        self.cfg = cfg = config or SimConfig()
        self.rng = np.random.default_rng(np.random.SeedSequence([cfg.seed, 0x5EED]))
        self.view = ClusterView.build(cluster, latency, placement, cfg.cut_bytes_factor)
        self.workers = {wid: _Worker(i) for wid, i in self.view.workers.items()}
        self.batches: dict[int, _Batch] = {}
        self.events = Events()
        self.ledger = Ledger(trace)
        self.recorder = Recorder(trace)
        self.energy = Energy(cluster, latency)
        self.routes = Routes(
            cluster, latency, self.workers, self.ledger, cfg.cut_bytes_factor,
            cfg.record_links, plan.paths,
        )  # fmt: skip
        self.loader = Loader(
            cluster, latency, plan, placement, self.workers, self.routes.links, self.events,
            self._report, self._try_start,
        )  # fmt: skip
        self.faults = Faults(
            self.workers, self.batches, self.ledger, self.events, self.recorder,
            self._report, self._try_start,
        )  # fmt: skip
        self._nblocks = self.loader.nblocks
        self._overhead_s = cfg.request_overhead_s
        # DHA runs contend for host links
        cold = self.loader.cold_model
        self._dha_s = None if cold is None else cold.dha_s
        # (model, worker, batch, blocks) -> _run_times
        self._runs: dict[tuple[str, str, int, tuple[int, int]], tuple] = {}
        self._jitter_on = cfg.jitter == "exponential" or (
            cfg.jitter == "lognormal" and cfg.jitter_cv > 0
        )
        self._ran = False

    # ------------------------------------------------------------------ setup helpers
    def fail_worker(self, worker: str, at_s: float) -> None:
        """Lose a worker at a given time (failure injection)."""
        self.faults.fail_worker(worker, at_s)

    def _run_times(
        self, model: str, w: _Worker, batch: int, blocks: tuple[int, int]
    ) -> tuple[tuple[float, ...], float, float]:
        """A stage run on ``w`` (cached in ``_runs`` by its caller): cumulative block end
        times, busy energy, and the part of it on DHA layers (reading host memory; 0
        without load plans)."""
        lat, share, gpu = self.latency, w.info.share, w.gpu
        cum, acc = [], 0.0
        for k in range(blocks[0], blocks[1]):
            acc += lat.latency(model, gpu, share, batch, range(k, k + 1))
            cum.append(acc)
        energy = self.energy.busy_j(model, gpu, share, batch, range(*blocks), acc)
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
        return self.routes.links.log

    def run(self) -> SimResult:
        if self._ran:
            raise HetserveError("a Simulator runs once: build another for another run")
        self._ran = True
        tr = self.trace
        n = len(tr)
        if self.cfg.warm:
            self.loader.warm_start()
        self.faults.schedule()
        self._apply(self.scheduler.start(self.view, self.plan, 0.0), 0.0)

        max_slo = max((s.slo_s for s in tr.streams), default=1.0)
        drain = self.cfg.drain_s if self.cfg.drain_s is not None else 10 * max_slo + 1.0
        horizon = tr.duration_s + drain
        times = tr.time_s.tolist()
        sidx = tr.stream_idx.tolist()
        stream_info = [(s.model, s.name, s.slo_s) for s in tr.streams]
        on_arrival = self.scheduler.on_arrival
        on_timer = self.scheduler.on_timer
        heap = self.events.heap
        pop = heapq.heappop
        apply = self._apply
        stage_done = self._stage_done
        loader, faults = self.loader, self.faults
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
                loader.load_done(a, b, now)
            elif kind == _PREEMPT_STOP:
                faults.preempt_stop(a, b, now)
            elif kind == _WORKER_LOST:
                faults.worker_lost(a, now, self._tell_lost)
        end = max(now, tr.duration_s)
        faults.close(end)
        self.ledger.close()
        # the parts call back through bound methods (a reference cycle): cut it, so a run's
        # state is freed when the simulator is, not at the next full collection
        loader.report = loader.resume = faults.report = faults.resume = _gone  # type: ignore[assignment]
        return self.recorder.result(end, self.ledger, self.workers, self.energy, self.routes.links)

    def _report(self, rep: StageReport, now: float) -> None:
        """Tell the scheduler of a stage or load report; apply what it answers."""
        acts = self.scheduler.on_stage_done(rep, now)
        if acts:
            self._apply(acts, now)

    def _tell_lost(self, w: _Worker, now: float) -> None:
        acts = self.scheduler.on_worker_lost(w.id, now)
        if acts:
            self._apply(acts, now)

    # ------------------------------------------------------------------ actions
    def _apply(self, actions: Iterable[object], now: float) -> None:
        for a in actions:
            if type(a) is Dispatch:
                self._dispatch(a, now)
            elif type(a) is SetTimer:
                at = a.at_s
                if at < now:
                    check_timer(at, now)
                    at = now
                ev = self.events
                heapq.heappush(ev.heap, (at, next(ev.seq), _TIMER, a.token, None))
            elif type(a) is Drop:
                state = self.ledger.state
                for r in a.requests:
                    if state[r.id] != _AWAITING:
                        raise drop_not_held(r)
                self.ledger.end(a.requests, DROPPED, a.reason or "dropped")
            elif type(a) is Preempt:
                self.faults.preempt(a, now)
            elif type(a) is Load:
                self.loader.load(a, now)
            elif type(a) is Evict:
                self.loader.evict(a)
            else:
                raise unknown_action(a)

    def _dispatch(self, d: Dispatch, now: float) -> None:
        first = check_dispatch(d, self._nblocks, self.workers, self.batches)
        ledger = self.ledger
        state, dispatch_s, batch_of = ledger.state, ledger.dispatch_s, ledger.batch_of
        model, bid = d.model, d.batch_id
        at_block = ledger.at_block
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
            return
        span = self.routes.gather(model, d.requests, first, task.worker, now)
        if span is None:
            self.faults.fail_batch(b, task, ACTIVATIONS_LOST, now)
            return
        self._transfer(task, span, now)

    def _transfer(self, task: _Task, span: tuple[float, float], now: float) -> None:
        """A stage's input on its way (``span``: the transfer's start and end)."""
        task.transfer_start_s, task.transfer_end_s = span
        if span[1] > now:
            self.events.push(span[1], _TRANSFER_DONE, task, None)
        else:
            self._input_arrived(task, now)

    def _input_arrived(self, task: _Task, now: float) -> None:
        if task.dead:
            return
        w = task.worker
        if w.running is None and not w.ready and not w.lost:
            self._start(w, task, now)  # the common case: an idle worker, nothing queued
            return
        heapq.heappush(w.ready, (task.step.planned_start_s, next(self.events.seq), task))
        if w.running is None:
            self._try_start(w, now)

    def _try_start(self, w: _Worker, now: float) -> None:
        while w.running is None and w.ready:
            task = heapq.heappop(w.ready)[2]
            if task.dead:
                continue
            if w.lost:
                self.faults.fail_batch(task.batch, task, lost_reason(task.batch.route), now)
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
                self.faults.fail_batch(b, task, NOT_RESIDENT, now)
                return
            if model not in w.cold:
                w.waiting_load.append(task)
                return
            # a planned cold start under way: layer by layer, each as its weights arrive
            dur = self.loader.cold_run_s(w, model, n, now)
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
            cum, energy = self.loader.dha_contention(w, model, dha, cum, energy, now)
        task.cum = cum
        task.energy_j = energy
        task.start_s = now
        w.running = task
        if task.index == 0 and blocks[0] == 0:
            start_s = self.ledger.start_s
            for r in b.requests:
                start_s[r.id] = now
        ev = self.events
        heapq.heappush(ev.heap, (now + cum[-1], next(ev.seq), _STAGE_DONE, task, task.version))

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
        self.recorder.row(task, now, "completed")
        reason = ""
        ledger = self.ledger
        if last:
            b.alive = False
            del self.batches[b.id]
            end_block = step.blocks[1]
            if end_block < self._nblocks[b.model]:
                # an open route: the requests are parked here, back with the scheduler
                reason = PARKED
                state, at_block, at_worker = ledger.state, ledger.at_block, ledger.at_worker
                for r in b.requests:
                    i = r.id
                    state[i] = _AWAITING
                    at_block[i] = end_block
                    at_worker[i] = w.id
            else:
                outcome, state, finish, deadline = (
                    ledger.outcome, ledger.state, ledger.finish_s, ledger.deadline,
                )  # fmt: skip
                for r in b.requests:
                    i = r.id
                    state[i] = _DONE
                    finish[i] = now
                    outcome[i] = OK if now <= deadline[i] + _EPS else LATE
        else:
            b.stage += 1
            nw = self.workers[b.route[b.stage].worker]
            ntask = _Task(b, b.stage, nw)
            b.tasks.append(ntask)
            span = self.routes.forward(b.model, step.blocks[1], len(b.requests), w, nw, now)
            self._transfer(ntask, span, now)
        rep = stage_done_report(
            b.d, task.index, w.id, task.start_s, now, last, reason,
            task.transfer_start_s, task.transfer_end_s,
        )  # fmt: skip
        acts = self.scheduler.on_stage_done(rep, now)
        if acts:
            self._apply(acts, now)
        if w.running is None and w.ready:
            self._try_start(w, now)
