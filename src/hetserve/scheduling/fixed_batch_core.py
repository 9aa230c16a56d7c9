# cython: annotation_typing=False
"""``fixed-batch``: TF-Serving-style batching.

One FIFO queue per model. A batch goes out when ``max_batch`` rows are waiting, or when
the oldest has waited ``max_queue_delay_s``; it takes the oldest requests whose rows fit in
``max_batch`` (a request with more rows is dropped: no batch holds it) and goes
to the next free worker (for multi-stage pipelines: per stage, the worker with the fewest
outstanding stages). Requests are never dropped; those that finish after their deadline
are ``late``.

``scheduling/fixed_batch.py`` registers it. This file is plain Python and runs as it is.
Where the package was built with Cython (``setup.py``; ``fixed_batch_core_c.pxd`` beside it
declares the C types: a try and the search for a free first-stage worker are functions
with typed arguments, C calls from the scheduler's methods), the same file is also
compiled as ``hetserve.scheduling.fixed_batch_core_c``, and ``scheduling/fixed_batch.py``
registers that one's class (``HETSERVE_PURE_PYTHON=1`` keeps this file). Both give the
same results.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Annotated

from hetserve.core.errors import HetserveError
from hetserve.core.plan import Plan
from hetserve.core.requests import Request
from hetserve.scheduling.params import Range
from hetserve.scheduling.pools import PipelinePool, Pools
from hetserve.scheduling.protocol import (
    RETURNED,
    Action,
    BaseScheduler,
    ClusterView,
    Dispatch,
    Drop,
    RouteStep,
    SetTimer,
    StageReport,
    WorkerId,
)

try:  # (Cython reads ``cython.compiled`` as True in the build it makes of this file)
    import cython
except ImportError:  # (plain Python, without Cython installed)
    from hetserve.core.records import NO_CYTHON as cython
if not cython.compiled:  # (compiled: these are the C its .pxd cimports)
    from hetserve.core.heaps import IdleSet
    from hetserve.core.records import (
        REQUEST_ARRIVAL_S,
        REQUEST_ID,
        REQUEST_MODEL,
        REQUEST_ROWS,
        field,
        record,
        record2,
        record4,
    )

__all__ = ["FixedBatch", "free_first_worker", "try_model"]


class _Queue(deque[Request]):
    """A model's FIFO queue and its rows together, with what a try of the model reads:
    its first-stage workers (``first``: ``(worker, pipeline)`` pairs in plan order), the
    idle set of their places (``idle``) and the head whose timer is armed (``armed``, its
    id; None: none). (One object per model: they were four dicts by the model's name,
    whose entries were cold in the caches with 100 models at 1,000 GPUs.)"""

    __slots__ = ("armed", "first", "idle", "rows")

    def __init__(self) -> None:
        super().__init__()
        self.rows = 0
        self.first: list[tuple[WorkerId, PipelinePool]] = []
        self.idle = IdleSet(0)
        self.armed: int | None = None


def free_first_worker(first: list, idle: IdleSet) -> tuple | None:
    """The first of ``first`` (``(worker, pipeline)`` pairs, in plan order) whose worker
    is idle (``Pools.idle``: nothing outstanding, not lost), or None. ``idle``: the
    places in ``first`` of the idle workers (``FixedBatch.idle_of``), so that the search
    reads a word of 64 places at a time, not each busy worker's count (1,000 workers
    each first-stage worker of 100 models: most of them busy)."""
    i = idle.first_from(0)
    return first[i] if i >= 0 else None


def try_model(sched: FixedBatch, model: str, now: float, out: list) -> None:
    """The scheduler's decision for ``model`` (module docstring): requests too large for
    any batch dropped; batches out while the head is due and a first-stage worker is
    free; else the head's timer armed. ``sched``: the scheduler (its queues, pools and
    indexes)."""
    q = sched.queues[model]
    max_batch = sched.max_batch
    delay = sched.delay
    while q and field(q[0], REQUEST_ROWS) > max_batch:  # no batch holds it
        r = q.popleft()
        q.rows -= field(r, REQUEST_ROWS)
        out.append(record(Drop, ((r,), "rows", (max_batch,))))
    if not q:
        return
    first = q.first
    idle = q.idle
    # (``FixedBatch._due``, inline)
    while q and (q.rows >= max_batch or field(q[0], REQUEST_ARRIVAL_S) + delay <= now + 1e-12):
        wp = free_first_worker(first, idle)
        if wp is None:
            if sched.spare:
                sched.due[model] = None
            return
        out.append(sched._dispatch(model, wp[0], wp[1], now))
    if q and q.armed != field(q[0], REQUEST_ID):
        head = q[0]
        rid = field(head, REQUEST_ID)
        q.armed = rid
        at = field(head, REQUEST_ARRIVAL_S) + delay
        out.append(record2(SetTimer, at, (model, rid)))
        if sched.spare:
            heapq.heappush(sched.pending, (at, rid, model))


class FixedBatch(BaseScheduler):
    # a stage end looks only at the models that are due (``due``, ``pending``); False: at
    # every model the freed workers serve (the plain rule, which
    # ``tests/scheduling/test_spared_tries.py`` holds the index to)
    spare = True

    def __init__(
        self,
        max_batch: Annotated[int, Range(1)] = 8,
        max_queue_delay_s: Annotated[float, Range(0)] = 0.005,
    ) -> None:
        super().__init__()
        self.max_batch = int(max_batch)
        self.delay = float(max_queue_delay_s)

    def start(self, view: ClusterView, plan: Plan, now: float) -> list[Action]:
        super().start(view, plan, now)
        self.pools = Pools(view, plan)
        self.queues: dict[str, _Queue] = {m: _Queue() for m in plan.models}
        # (per model, the head request whose timer is armed, ``_Queue.armed``: one timer
        # per head, however often the model is tried while it waits, at every stage end
        # of its workers)
        # (first-stage worker, its pipeline) in plan order: a dispatch needs both
        self.first_workers = {
            m: [(w, p) for p in self.pools.pipelines[m] for w in p.stages[0][1]]
            for m in plan.models
        }
        # per model, the places in its ``first_workers`` whose worker is idle (one set
        # per list of workers, shared by the models with that list); and per worker, its
        # places in those sets (kept as workers turn busy and idle: ``_dispatch``,
        # ``on_stage_done``, ``on_worker_lost``)
        self.idle_of: dict[str, IdleSet] = {}
        self.places: dict[WorkerId, list[tuple[IdleSet, int]]] = {}
        sets: dict[tuple[WorkerId, ...], IdleSet] = {}
        for m, first in self.first_workers.items():
            key = tuple([w for w, _ in first])
            got = sets.get(key)
            if got is None:
                got = sets[key] = IdleSet(len(key))
                for i, w in enumerate(key):
                    self.places.setdefault(w, []).append((got, i))
            self.idle_of[m] = got
            q = self.queues[m]
            q.first = first
            q.idle = got
        self.index = {m: i for i, m in enumerate(plan.models)}  # plan order: ties
        self.serves = {w: set(ms) for w, ms in self.pools.models_of.items()}
        # the models whose head is due and found no free worker (or may: stale entries are
        # dropped when looked at), and, as a heap of (due time, head id, model), those
        # whose head's timer is armed: a stage end looks at these, not at every model of
        # the freed workers (where 100 models share 1,000 GPUs: a few, not 100)
        self.due: dict[str, None] = {}
        self.pending: list[tuple[float, int, str]] = []
        return []

    def max_rows(self, model: str) -> int | None:
        return self.max_batch

    # ------------------------------------------------------------------ helpers
    def _due(self, q: _Queue, now: float) -> bool:
        return (
            q.rows >= self.max_batch or field(q[0], REQUEST_ARRIVAL_S) + self.delay <= now + 1e-12
        )

    def _needs_try(self, model: str, now: float) -> bool:
        """Whether a worker freed now gives ``model`` something to decide: requests wait
        and the head is due. One whose head is not due has its timer armed for that head
        (a head changes only in a try, which arms it, or by a requeue, which is tried), so
        a try would change nothing; with many models on a worker this spares a try each."""
        q = self.queues[model]
        return bool(q) and self._due(q, now)

    def _dispatch(self, model: str, first: WorkerId, pipe: PipelinePool, now: float) -> Action:
        q = self.queues[model]
        if q.rows == len(q):  # every request one row: the plain pops
            reqs = tuple([q.popleft() for _ in range(min(self.max_batch, len(q)))])
            n = len(reqs)
        else:
            taken, n = [], 0
            while q and n + field(q[0], REQUEST_ROWS) <= self.max_batch:
                r = q.popleft()
                taken.append(r)
                n += field(r, REQUEST_ROWS)
            reqs = tuple(taken)
        q.rows -= n
        route, workers = [], []
        for si, (blocks, ws) in enumerate(pipe.stages):
            w = (
                first
                if si == 0
                else min(ws, key=lambda x: (x in self.pools.lost, self.pools.outstanding[x]))
            )
            route.append(record4(RouteStep, si, w, now, blocks))
            workers.append(w)
        bid = self.new_batch_id()
        self.pools.dispatched(bid, tuple(workers))
        outstanding = self.pools.outstanding
        for w in workers:
            if outstanding[w] == 1:  # (busy now: out of the idle sets)
                for s, i in self.places.get(w, ()):
                    s.discard(i)
        return record4(Dispatch, bid, model, reqs, tuple(route))

    def _try(self, model: str, now: float, out: list[Action]) -> None:
        try_model(self, model, now, out)

    # ------------------------------------------------------------------ protocol
    def on_arrival(self, request: Request, now: float) -> list[Action]:
        model = field(request, REQUEST_MODEL)
        q = self.queues.get(model)
        if q is None:
            raise HetserveError(f"fixed-batch: no pipeline serves model {model!r}")
        q.append(request)
        q.rows += field(request, REQUEST_ROWS)
        if len(q) == 1 or q.rows >= self.max_batch:
            out: list[Action] = []
            self._try(model, now, out)
            return out
        return []

    def on_timer(self, token: object, now: float) -> list[Action]:
        model, rid = token  # type: ignore[misc]
        q = self.queues[model]
        if q.armed == rid:
            q.armed = None
        if not q or field(q[0], REQUEST_ID) != rid:
            return []
        out: list[Action] = []
        self._try(model, now, out)
        return out

    def on_stage_done(self, report: StageReport, now: float) -> list[Action]:
        if report.kind == "stage" and not report.completed and report.reason in RETURNED:
            q = self.queues[report.model]
            for r in sorted(report.requests, key=lambda r: (r.arrival_s, r.id), reverse=True):
                q.appendleft(r)
                q.rows += r.rows
        freed = self.pools.reported(report)
        for w in freed:  # (idle now: into the idle sets)
            for s, i in self.places.get(w, ()):
                s.add(i)
        if not freed and report.completed:
            return []
        out: list[Action] = []
        queues, needs = self.queues, self._needs_try
        if self.spare:
            due, pending = self.due, self.pending
            while pending and pending[0][0] <= now + 1e-12:  # (``_due``'s own test)
                due[heapq.heappop(pending)[2]] = None
            serves = [self.serves.get(w, ()) for w in freed]
            models = set()
            for m in list(due):
                if not needs(m, now):
                    del due[m]  # (nothing waits, or its head is not due: its timer is armed)
                elif any(m in ms for ms in serves):
                    models.add(m)
        else:
            models = {m for w in freed for m in self.pools.models_of.get(w, []) if needs(m, now)}
        if not report.completed and queues[report.model]:  # (a requeue: a new head)
            models.add(report.model)
        index = self.index
        for m in sorted(
            models,
            key=lambda m: (queues[m][0].arrival_s if queues[m] else float("inf"), index[m]),
        ):
            self._try(m, now, out)
        return out

    def on_worker_lost(self, worker: WorkerId, now: float) -> list[Action]:
        self.pools.lost.add(worker)
        for s, i in self.places.get(worker, ()):
            s.discard(i)
        return []
