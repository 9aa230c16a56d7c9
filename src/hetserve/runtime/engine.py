"""The runtime engine: the same Scheduler objects as the simulator, driven by a clock and
real (or emulated) workers instead of simulated ones.

The engine is single-threaded and callback-driven: everything happens in callbacks that a
:class:`Clock` runs at their time. :class:`LoopClock` runs them on an asyncio event loop
at wall-clock times (serving); :class:`VirtualClock` runs them in time order without
waiting (tests and the parity check with the simulator). Executors run stages:

- ``runtime.emulated.EmulatedExecutor`` (``--emulate``): a stage takes the latency
  model's time, as in Shepherd's and Clockwork's emulated workers; a ``Preempt`` stops it
  at the next block boundary;
- :class:`TorchExecutor`: the zoo model's blocks really run (``runtime.stage.StageRunner``)
  on a thread, and the result comes back to the loop.

Semantics follow the Scheduler protocol and the simulator: a worker runs one stage at a
time and, among queued stages whose input has arrived, starts the one with the earliest
planned start; between stages the activations cross the links between the two workers
(emulated: the simulator's link model; in one process they are handed over); a
``StageReport`` follows every stage; every request ends exactly once (``on_done``).
``Load`` completes at once (the runtime starts with every planned block resident) and
``Evict`` is accepted, unless the executor loads for real (``load``/``evict``: the emulated
executor follows the cold-start timeline, the torch executor moves weights by the model's
load plan) and reports the end through :meth:`RuntimeEngine.load_finished`. Open routes
(rule 4) park their requests' activations on the last worker (the executor's ``split``
cuts a batch's output into per-request parts); a later dispatch gathers them over the
links from every worker they are parked on.

What an action means (the route and bookkeeping checks, the reports, the lost-worker
rules, the bytes at a cut) is :mod:`hetserve.engine.rules`, shared with the simulator: a
scheduler that breaks the protocol gets the same :class:`~hetserve.engine.rules.ProtocolError`
from both.

Faults: an executor that finds its worker gone (a dead Ray actor) calls
:meth:`RuntimeEngine.worker_lost`; the scheduler hears of it first, then the batches on
that worker come back to it (``reason="worker lost"``, protocol rule 9) to be re-dispatched
on other workers or dropped. A stage that raises ends its batch's requests as failed with
the error as the reason. Either way each request still ends exactly once.
"""

from __future__ import annotations

import asyncio
import collections
import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from hetserve.core.errors import HetserveError
from hetserve.core.outcome import DROPPED, FAILED, LATE, OK
from hetserve.core.plan import Plan
from hetserve.core.requests import Request
from hetserve.engine.links import LinkTable
from hetserve.engine.rules import (
    ACTIVATIONS_LOST,
    PARKED,
    PREEMPTED,
    check_dispatch,
    check_load,
    check_timer,
    cut_bytes,
    drop_not_held,
    ended_twice,
    load_report,
    lost_reason,
    not_held,
    parked_elsewhere,
    parked_sources,
    stage_done_report,
    stage_ended_report,
    unknown_action,
)
from hetserve.scheduling.protocol import (
    RETURNED,
    ClusterView,
    Dispatch,
    Drop,
    Evict,
    Load,
    Preempt,
    Scheduler,
    SetTimer,
)

_EPS = 1e-12


class Clock(Protocol):
    def now(self) -> float: ...

    def call_at(self, t: float, fn: Callable[[], None]) -> None: ...


class VirtualClock:
    """Callbacks in time order (ties in the order they were set), no waiting."""

    def __init__(self) -> None:
        self._t = 0.0
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = 0

    def now(self) -> float:
        return self._t

    def call_at(self, t: float, fn: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (max(t, self._t), self._seq, fn))

    def run(self, until: float = math.inf) -> None:
        while self._heap and self._heap[0][0] <= until:
            t, _, fn = heapq.heappop(self._heap)
            self._t = t
            fn()


class LoopClock:
    """Wall-clock seconds since the clock was made, on an asyncio loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.t0 = loop.time()

    def now(self) -> float:
        return self.loop.time() - self.t0

    def call_at(self, t: float, fn: Callable[[], None]) -> None:
        self.loop.call_at(self.t0 + t, fn)


@dataclass
class _Task:
    batch: _Batch
    index: int
    worker: str
    planned_s: float
    start_s: float = math.nan
    transfer: tuple[float, float] | None = None
    stop: bool = False  # a preemption asked it to stop at the next block boundary
    dead: bool = False
    emu: list[float] | None = None  # emulated: the time at each block boundary
    stop_blocks: int = 0  # emulated: the boundary it stops at (0: none)


@dataclass
class _Batch:
    d: Dispatch
    dispatched_s: float
    stage: int = 0
    tasks: list[_Task] = field(default_factory=list)
    payload: Any = None  # the activations between stages (TorchExecutor)


class Executor(Protocol):
    def start(self, engine: RuntimeEngine, task: _Task, now: float) -> None: ...


class RuntimeEngine:
    """Runs a Scheduler against workers on a clock (module docstring)."""

    def __init__(
        self,
        view: ClusterView,
        plan: Plan,
        scheduler: Scheduler,
        executor: Executor,
        clock: Clock,
        on_done: Callable[[Request, int, str, Any], None] | None = None,
        emulate_links: bool = True,
        log_limit: int | None = None,
    ) -> None:
        """``log_limit``: keep only the last so many ``dispatch_log`` entries (a server
        runs for long; None: all)."""
        self.view = view
        self.plan = plan
        self.scheduler = scheduler
        self.executor = executor
        self.clock = clock
        self.on_done = on_done
        self.links = LinkTable(view.cluster, pins=plan.paths) if emulate_links else None
        self.batches: dict[int, _Batch] = {}
        self.held: dict[int, Request] = {}  # requests the scheduler holds
        self.payloads: dict[int, Any] = {}
        self.running: dict[str, _Task | None] = dict.fromkeys(view.workers)
        self.ready: dict[str, list] = {w: [] for w in view.workers}
        self.open: set[int] = set()  # requests submitted and not yet ended
        # requests parked after an open route (rule 4): (next block, worker, activations)
        self.parked: dict[int, tuple[int, str, Any]] = {}
        self.lost: set[str] = set()
        # (time, batch id, model, request ids, workers of the route) per dispatch
        self.dispatch_log: collections.deque[
            tuple[float, int, str, tuple[int, ...], tuple[str, ...]]
        ] = collections.deque(maxlen=log_limit)
        self._seq = 0
        self._nblocks = {m: view.latency.num_blocks(m) for m in plan.models}
        # an executor may take a request's input as it arrives (Ray: into the object store)
        self._admit: Callable[[Any], Any] | None = getattr(executor, "admit", None)

    # ------------------------------------------------------------------ entry points
    def start(self) -> None:
        now = self.clock.now()
        self._apply(self.scheduler.start(self.view, self.plan, now), now)

    def submit(self, request: Request, payload: Any = None) -> None:
        """A request arrives now; its outcome comes through ``on_done`` exactly once."""
        if request.model not in self.plan.models:
            raise HetserveError(f"no model {request.model!r} is served")
        if request.id in self.open:
            raise HetserveError(f"request {request.id} submitted twice")
        self.open.add(request.id)
        self.held[request.id] = request
        if payload is not None:
            self.payloads[request.id] = payload if self._admit is None else self._admit(payload)
        now = self.clock.now()
        self._apply(self.scheduler.on_arrival(request, now), now)

    # ------------------------------------------------------------------ actions
    def _apply(self, actions: list[Any], now: float) -> None:
        """Carry out a scheduler's actions; ``now`` is the time the scheduler was given."""
        for a in actions:
            if type(a) is Dispatch:
                self._dispatch(a, now)
            elif type(a) is SetTimer:
                check_timer(a.at_s, now)
                token, at_s = a.token, a.at_s
                self.clock.call_at(at_s, lambda token=token, at_s=at_s: self._timer(token, at_s))
            elif type(a) is Drop:
                for r in a.requests:
                    if self.held.pop(r.id, None) is None:
                        raise drop_not_held(r)
                    self._finish(r, DROPPED, a.reason or "dropped", None)
            elif type(a) is Preempt:
                self._preempt(a, now)
            elif type(a) is Load:
                check_load(a, self._nblocks, self.running)
                load = getattr(self.executor, "load", None)
                if load is not None:
                    load(self, a, now)  # the executor calls load_finished
                    continue
                self._apply(
                    self.scheduler.on_stage_done(
                        load_report(a.worker, a.model, a.blocks, now, now), now
                    ),
                    now,
                )
            elif type(a) is Evict:
                check_load(a, self._nblocks, self.running)
                evict = getattr(self.executor, "evict", None)
                if evict is not None:
                    evict(self, a)
            else:
                raise unknown_action(a)

    def _timer(self, token: object, at_s: float) -> None:
        """Rule 6: a timer never fires before its time. asyncio may run a callback up to
        its clock's resolution early, and ``t0 + t - t0`` may round below ``t``: the
        scheduler is then told its own time (a scheduler that finds nothing due at a
        time earlier than the one it asked for would wait forever)."""
        now = max(self.clock.now(), at_s)
        self._apply(self.scheduler.on_timer(token, now), now)

    def _dispatch(self, d: Dispatch, now: float) -> None:
        first = check_dispatch(d, self._nblocks, self.running, self.batches)
        held, parked = self.held, self.parked
        for r in d.requests:
            if r.id not in held or r.model != d.model:
                raise not_held(d, r)
            at = parked.get(r.id)
            if (0 if at is None else at[0]) != first:
                raise parked_elsewhere(d, r, 0 if at is None else at[0])
        for r in d.requests:
            del held[r.id]
        b = _Batch(d, now)
        if first > 0:  # a continued batch (rule 4): its input is the parked activations
            b.payload = [self.parked[r.id][2] for r in d.requests]
        elif self.payloads:
            b.payload = [self.payloads.get(r.id) for r in d.requests]
        self.batches[d.batch_id] = b
        self.dispatch_log.append(
            (now, d.batch_id, d.model, tuple(r.id for r in d.requests),
             tuple(s.worker for s in d.route))
        )  # fmt: skip
        task = _Task(b, 0, d.route[0].worker, d.route[0].planned_start_s)
        b.tasks.append(task)
        if first == 0:
            self._enqueue(task, now)
        else:
            self._gather(task, first, now)

    def _gather(self, task: _Task, first: int, now: float) -> None:
        """A continued batch's input: one transfer per worker its requests are parked on,
        each over the links to the stage's worker (the simulator's rule); the stage may
        start when all have arrived. Activations parked on a lost worker are gone."""
        b = task.batch
        counts = parked_sources(b.d.requests, lambda i: self.parked[i][1])
        if any(src in self.lost for src in counts):
            task.dead = True
            self._end(b, task, now, ACTIVATIONS_LOST, 0)
            return
        t0 = t1 = now
        if self.links is not None:
            workers = self.view.workers
            t0, t1 = self.links.gather(
                [(workers[src].gpu_id, k) for src, k in counts.items()],
                workers[task.worker].gpu_id,
                cut_bytes(self.view.latency, b.d.model, first - 1, 1, self.view.cut_bytes_factor),
                now,
            )
        task.transfer = (t0, t1)
        if t1 > now:
            self.clock.call_at(t1, lambda: self._enqueue(task, self.clock.now()))
        else:
            self._enqueue(task, now)

    def _enqueue(self, task: _Task, now: float) -> None:
        if task.dead:
            return
        if task.worker in self.lost:
            task.dead = True
            self._end(task.batch, task, now, lost_reason(task.batch.d.route), 0)
            return
        self._seq += 1
        heapq.heappush(self.ready[task.worker], (task.planned_s, self._seq, task))
        self._try_start(task.worker, now)

    def _try_start(self, worker: str, now: float) -> None:
        if worker in self.lost:
            return
        q = self.ready[worker]
        while self.running[worker] is None and q:
            task = heapq.heappop(q)[2]
            if task.dead:
                continue
            task.start_s = now
            self.running[worker] = task
            self.executor.start(self, task, now)

    def _preempt(self, p: Preempt, now: float) -> None:
        b = self.batches.get(p.batch_id)
        if b is None:
            return  # finished or gone: nothing to stop
        cur = self._current(b)
        if cur is None or cur.worker != p.worker:
            return
        if self.running[cur.worker] is cur:
            cur.stop = True  # at the next block boundary
            stop = getattr(self.executor, "stop", None)
            if stop is not None:  # the executor stops it (the others check ``stop``)
                stop(self, cur)
        else:
            cur.dead = True
            self._end(b, cur, now, PREEMPTED, 0)

    @staticmethod
    def _current(b: _Batch) -> _Task | None:
        """The batch's stage that is queued or running (None while it is in transfer)."""
        t = b.tasks[-1] if b.tasks else None
        return None if t is None or t.dead else t

    def load_finished(self, a: Load, start_s: float, ok: bool = True, reason: str = "") -> None:
        """An executor's load ended (``ok=False``: it failed, ``reason`` says why)."""
        now = self.clock.now()
        rep = load_report(a.worker, a.model, a.blocks, start_s, now, ok, reason)
        self._apply(self.scheduler.on_stage_done(rep, now), now)

    # ------------------------------------------------------------------ faults
    def worker_lost(self, worker: str) -> None:
        """The worker is gone (protocol rule 9): nothing starts on it again; the scheduler
        hears of it, then of the batches it held (running or queued)."""
        if worker in self.lost or worker not in self.running:
            return
        now = self.clock.now()
        self.lost.add(worker)
        self._apply(self.scheduler.on_worker_lost(worker, now), now)
        victims = [t for _, _, t in sorted(self.ready[worker], key=lambda e: e[:2])]
        self.ready[worker] = []
        cur = self.running[worker]
        self.running[worker] = None
        if cur is not None:
            victims.insert(0, cur)
        for t in victims:
            if not t.dead and t.batch.d.batch_id in self.batches:
                t.dead = True
                self._end(t.batch, t, now, lost_reason(t.batch.d.route), 0)

    def stage_failed(self, task: _Task, error: str) -> None:
        """A stage raised: its batch's requests end as failed, with the error as reason."""
        if task.dead:
            return
        now = self.clock.now()
        task.dead = True
        if self.running.get(task.worker) is task:
            self.running[task.worker] = None
        self._end(task.batch, task, now, f"failed: {error}", 0)
        self._try_start(task.worker, now)

    # ------------------------------------------------------------------ stage ends
    def stage_finished(
        self, task: _Task, blocks_done: int, output: Any, preempted: bool = False
    ) -> None:
        """An executor's stage ended (all its blocks, or ``blocks_done`` when stopped)."""
        if task.dead:  # its worker was lost meanwhile: the batch was already ended
            return
        now = self.clock.now()
        worker = task.worker
        self.running[worker] = None
        b = task.batch
        d = b.d
        if preempted:
            task.dead = True
            self._end(b, task, now, PREEMPTED, blocks_done)
            self._try_start(worker, now)
            return
        last = task.index == len(d.route) - 1
        reason = ""
        end_block = d.route[-1].blocks[1]
        if last and end_block < self._nblocks[d.model]:
            # an open route: the requests are parked here, back with the scheduler
            self.batches.pop(d.batch_id, None)
            reason = PARKED
            split = getattr(self.executor, "split", None)
            rows = split(output, len(d.requests)) if split else [None] * len(d.requests)
            for r, row in zip(d.requests, rows, strict=True):
                self.parked[r.id] = (end_block, worker, row)
                self.held[r.id] = r
        elif last:
            self.batches.pop(d.batch_id, None)
            outs = output if isinstance(output, list) else [None] * len(d.requests)
            for r, out in zip(d.requests, outs, strict=True):
                self._finish(r, OK if now <= r.deadline_s + _EPS else LATE, "", out)
        else:
            b.payload = output
            nxt = d.route[task.index + 1]
            t0 = t1 = now
            if self.links is not None:
                wa, wb = self.view.workers[worker], self.view.workers[nxt.worker]
                step = d.route[task.index]
                nbytes = cut_bytes(
                    self.view.latency, d.model, step.blocks[1] - 1, len(d.requests),
                    self.view.cut_bytes_factor,
                )  # fmt: skip
                t0, t1 = self.links.send(wa.gpu_id, wb.gpu_id, nbytes, now)
            ntask = _Task(b, task.index + 1, nxt.worker, nxt.planned_start_s, transfer=(t0, t1))
            b.tasks.append(ntask)
            if t1 > now:
                self.clock.call_at(t1, lambda: self._enqueue(ntask, self.clock.now()))
            else:
                self._enqueue(ntask, now)
        tr = task.transfer or (None, None)
        rep = stage_done_report(d, task.index, worker, task.start_s, now, last, reason, *tr)
        self._apply(self.scheduler.on_stage_done(rep, now), now)
        self._try_start(worker, now)

    def _end(self, b: _Batch, task: _Task, now: float, reason: str, blocks_done: int) -> None:
        d = b.d
        self.batches.pop(d.batch_id, None)
        if reason in RETURNED:
            for r in d.requests:
                self.held[r.id] = r
        else:
            for r in d.requests:
                self._finish(r, FAILED, reason, None)
        start = task.start_s if not math.isnan(task.start_s) else now
        tr = task.transfer or (None, None)
        rep = stage_ended_report(d, task.index, task.worker, start, now, reason, blocks_done, tr)
        self._apply(self.scheduler.on_stage_done(rep, now), now)

    def _finish(self, r: Request, outcome: int, reason: str, output: Any) -> None:
        if r.id not in self.open:
            raise ended_twice(r.id)
        self.open.discard(r.id)
        self.parked.pop(r.id, None)
        self.payloads.pop(r.id, None)
        if self.on_done is not None:
            self.on_done(r, outcome, reason, output)
