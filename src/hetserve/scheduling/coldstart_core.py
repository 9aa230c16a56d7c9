# cython: annotation_typing=False
"""``coldstart``: many model instances on few GPUs, cold starts, LRU residency.

DeepPlan's serving model (section 5.3, after Clockwork): each GPU runs one batch at a time;
more model instances exist than GPU memory holds, so some are resident and the rest wait
in host memory.

- A request goes to a GPU that holds its model (resident or loading), the one whose
  queue empties first. If none does, to the GPU that can take the model soonest: the
  least-recently-used instances there that are idle (nothing queued, no batch running:
  a dispatched batch has left the queue but holds its weights until it ends) are
  evicted until the model fits, and a ``Load`` is issued. *How* it loads (baseline,
  PipeSwitch, DHA, PT, PT+DHA) is the plan's load plan, carried out by the engine: the
  scheduler is the same for every kind. A request no GPU can take now waits until one can.
- Each GPU serves its queue in order: a batch takes the head request and more queued
  requests of the same model while their rows fit in ``max_batch`` (a request larger than
  that runs alone: it is never split), and may start while the model is still loading
  (the engine runs it layer by layer as weights arrive).
- A request that cannot meet its deadline even if it started now (warm latency, or the
  planned cold start when its model is still loading) is dropped with a reason.
- The memory an instance takes is what its load plan keeps on the GPU (DHA layers stay in
  host memory); ``memory_reserve_gb`` of each GPU is kept for the CUDA context,
  activations and PT's staging buffers (DeepPlan's Fig. 13: 100 BERT-Base instances fit
  four 16 GB V100s with PipeSwitch, about 10.9 GB of weights per GPU).
- ``preload``: at start, instances are loaded round-robin over the GPUs, in the plan's
  model order, while they fit (the paper's warm-up before measuring).

Counters (``stats``): requests that went to a GPU where their model was not resident
(``cold_requests``; their ids in ``cold_ids``), loads and evictions.

This file is plain Python and runs as it is. Where the package was built with Cython
(``setup.py``), the same file is also compiled as
``hetserve.scheduling.coldstart_core_c`` (``coldstart_core_c.pxd`` beside it declares the
C types of :class:`ColdStartCore`; the registered class stays a Python class), and
``scheduling.coldstart`` registers that one's class (``HETSERVE_PURE_PYTHON=1`` keeps
this file).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable
from typing import Annotated

from hetserve.core.errors import HetserveError
from hetserve.core.latency import cold_start_model
from hetserve.core.plan import Plan
from hetserve.core.requests import Request
from hetserve.scheduling.params import Range
from hetserve.scheduling.protocol import (
    RETURNED,
    Action,
    BaseScheduler,
    ClusterView,
    Dispatch,
    Drop,
    Evict,
    Load,
    RouteStep,
    StageReport,
    WorkerId,
)

try:  # (Cython reads ``cython.compiled`` as True in the build it makes of this file)
    import cython
except ImportError:  # (plain Python, without Cython installed)
    from hetserve.core.records import NO_CYTHON as cython
if not cython.compiled:  # (compiled: ``record`` is the inline C its .pxd cimports)
    from hetserve.core.records import record


class ColdStartCore:
    """The ``coldstart`` scheduler's state and decisions for one plan (module docstring):
    :class:`ColdStart` makes one at its ``start`` and hands it the protocol's calls.
    Where this file is compiled it is an extension type with typed attributes
    (``coldstart_core_c.pxd``) whose methods call each other in C. ``stats`` and
    ``cold_ids`` are the scheduler's own (shared); ``next_batch`` is the last batch id
    given (what ``BaseScheduler.new_batch_id`` counts: the scheduler's, from then on)."""

    def __init__(
        self,
        view: ClusterView,
        plan: Plan,
        max_batch: int,
        reserve_b: float,
        stats: dict[str, int],
        cold_ids: list[int],
        next_batch: int,
    ) -> None:
        self.view = view
        self.plan = plan
        self.max_batch = max_batch
        self.reserve_b = reserve_b
        self.stats = stats
        self.cold_ids = cold_ids
        self.next_batch = next_batch
        ws = sorted({w for ids in view.placement.stages.values() for w in ids})
        if not ws:
            raise HetserveError("coldstart: the plan places no workers")
        self.workers: list[WorkerId] = ws
        self.cap = {
            w: max(0.0, view.workers[w].gpu.memory_gb * 1e9 / view.workers[w].share
                   - self.reserve_b)
            for w in ws
        }  # fmt: skip
        self.used = dict.fromkeys(ws, 0.0)
        self.resident: dict[WorkerId, OrderedDict[str, float]] = {w: OrderedDict() for w in ws}
        self.loading: dict[WorkerId, dict[str, float]] = {w: {} for w in ws}  # -> ready by
        self.queue: dict[WorkerId, deque[Request]] = {w: deque() for w in ws}
        self.running: dict[WorkerId, int | None] = dict.fromkeys(ws)
        self.running_model: dict[WorkerId, str | None] = dict.fromkeys(ws)  # its model
        self.busy_until = dict.fromkeys(ws, 0.0)
        self.queued_s = dict.fromkeys(ws, 0.0)  # batch-1 warm latency of the queue
        self.lost: set[WorkerId] = set()
        self.live: list[WorkerId] = list(ws)
        self.where: dict[str, set[WorkerId]] = {}  # model -> live workers holding it
        self._warm: dict[tuple[str, WorkerId, int], float] = {}
        self._warm1: dict[WorkerId, dict[str, float]] = {w: {} for w in ws}
        self.pending: deque[Request] = deque()
        self._bytes: dict[WorkerId, dict[str, float]] = {w: {} for w in ws}
        self._nb = {m: view.latency.num_blocks(m) for m in plan.models}

    def new_batch_id(self) -> int:
        self.next_batch += 1
        return self.next_batch

    def preload(self, now: float) -> list[Action]:
        """Instances loaded round-robin over the GPUs, in the plan's model order, while
        they fit."""
        out: list[Action] = []
        ws = self.workers
        k = 0
        for m in self.plan.models:
            for _ in range(len(ws)):
                w = ws[k % len(ws)]
                k += 1
                if self.used[w] + self.instance_bytes(m, w) <= self.cap[w]:
                    out.append(self._load(w, m, now))
                    break
        return out

    # ------------------------------------------------------------------ estimates
    def instance_bytes(self, model: str, w: WorkerId) -> float:
        per = self._bytes[w]
        b = per.get(model)
        if b is None:
            gpu = self.view.workers[w].gpu.name
            cold = cold_start_model(self.view.latency)
            if cold is not None:
                b = float(cold.gpu_bytes(model, gpu))
            else:
                lp = self.plan.load_plans.get(model)
                b = lp.predicted.get("gpu_mb", 0.0) * 1e6 if lp else 0.0
            per[model] = b
        return b

    def _cold_s(self, model: str) -> float:
        lp = self.plan.load_plans.get(model)
        if lp is None:
            cold = cold_start_model(self.view.latency)
            if cold is not None:
                lp = cold.model_load_plan(model)
        return lp.predicted.get("cold_ms", 0.0) / 1e3 if lp else 0.0

    def _warm_s(self, model: str, w: WorkerId, batch: int = 1) -> float:
        key = (model, w, batch)
        t = self._warm.get(key)
        if t is None:
            t = self._warm[key] = self.view.stage_latency_s(model, w, batch)
        return t

    def _warm1_s(self, model: str, w: WorkerId) -> float:
        per = self._warm1[w]
        t = per.get(model)
        if t is None:
            t = per[model] = self._warm_s(model, w, 1)
        return t

    def _by_backlog(self, ws: Iterable[WorkerId], now: float) -> list[tuple[float, WorkerId]]:
        """(seconds until the worker's queue would be empty, worker), for each of ``ws``."""
        bu, qs = self.busy_until, self.queued_s
        return [((bu[w] if bu[w] > now else now) + qs[w] - now, w) for w in ws]

    def _dequeue(self, w: WorkerId, r: Request) -> None:
        q = self.queue[w]
        if q[0] is r:
            q.popleft()
        else:
            q.remove(r)
        left = self.queued_s[w] - (
            self._warm1_s(r.model, w) if r.rows == 1 else self._warm_s(r.model, w, r.rows)
        )
        self.queued_s[w] = left if left > 0.0 else 0.0

    # ------------------------------------------------------------------ routing
    def _load(self, w: WorkerId, model: str, now: float) -> Load:
        self.where.setdefault(model, set()).add(w)
        self.used[w] += self.instance_bytes(model, w)
        self.loading[w][model] = now + self._cold_s(model)
        self.stats["loads"] += 1
        return record(Load, (w, model, (0, self._nb[model]), False))

    def _make_room(self, w: WorkerId, model: str, out: list[Action]) -> bool:
        """Evict idle LRU instances on ``w`` until ``model`` fits; False if it cannot."""
        need = self.instance_bytes(model, w)
        if need > self.cap[w]:
            return False
        # busy: queued, or running (a dispatched batch has left the queue; its weights
        # are in use until it ends: rule 8)
        busy = {r.model for r in self.queue[w]}
        if self.running_model[w] is not None:
            busy.add(self.running_model[w])
        free = self.cap[w] - self.used[w]
        victims = []
        for m in self.resident[w]:  # least recently used first
            if free >= need:
                break
            if m in busy:
                continue
            victims.append(m)
            free += self.instance_bytes(m, w)
        if free < need:
            return False
        for m in victims:
            del self.resident[w][m]
            self.where[m].discard(w)
            self.used[w] -= self.instance_bytes(m, w)
            self.stats["evictions"] += 1
            out.append(record(Evict, (w, m, (0, self._nb[m]))))
        return True

    def _route(self, r: Request, now: float, out: list[Action]) -> bool:
        m = r.model
        holders = self.where.get(m)
        if holders and len(holders) == 1:
            (w,) = holders
        elif holders:
            w = min(self._by_backlog(holders, now))[1]
        else:
            for _, w in sorted(self._by_backlog(self.live, now)):
                if self._make_room(w, m, out):
                    out.append(self._load(w, m, now))
                    break
            else:
                return False
        self.queue[w].append(r)
        self.queued_s[w] += self._warm1_s(m, w) if r.rows == 1 else self._warm_s(m, w, r.rows)
        if m not in self.resident[w]:
            self.cold_ids.append(r.id)
            self.stats["cold_requests"] += 1
        if self.running[w] is None:
            self._next(w, now, out)
        return True

    def _next(self, w: WorkerId, now: float, out: list[Action]) -> None:
        q = self.queue[w]
        if not q or self.running[w] is not None:
            return
        while q:
            head = q[0]
            m = head.model
            if self.max_batch == 1:  # the common case, without building lists
                finish = self._finish_s(w, m, head.rows, now)
                self._dequeue(w, head)
                if head.deadline_s < finish:
                    out.append(record(Drop, ((head,), "deadline", (finish - now, len(q) + 1))))
                    continue
                take: list[Request] | tuple[Request] = (head,)
            else:
                take, finish = self._take(w, q, m, now, out)
                if not take:
                    continue
            bid = self.new_batch_id()
            self.running[w] = bid
            self.running_model[w] = m
            self.busy_until[w] = finish
            res = self.resident[w]
            if m in res:
                res.move_to_end(m)
            step = record(RouteStep, (0, w, now, (0, self._nb[m])))
            out.append(record(Dispatch, (bid, m, tuple(take), (step,))))
            return

    def _finish_s(self, w: WorkerId, m: str, n: int, now: float) -> float:
        """When a batch of ``n`` rows of ``m`` started on ``w`` now would end: its warm
        latency, or the model's planned load when that ends later."""
        finish = now + (self._warm1_s(m, w) if n == 1 else self._warm_s(m, w, n))
        ready = self.loading[w].get(m)
        return ready if ready is not None and ready > finish else finish

    def _take(
        self, w: WorkerId, q: deque[Request], m: str, now: float, out: list[Action]
    ) -> tuple[list[Request], float]:
        """The next batch of ``m`` from ``w``'s queue, taken off it, and when it will
        finish; no batch when its late requests were dropped (look again)."""
        take, n = [], 0
        cap = max(self.max_batch, q[0].rows)  # (a request is never split)
        for r in q:
            if r.model == m:
                if n + r.rows > cap:
                    break
                take.append(r)
                n += r.rows
        finish = self._finish_s(w, m, n, now)
        late = [r for r in take if r.deadline_s < finish]
        if late:
            for r in late:
                self._dequeue(w, r)
            out.append(record(Drop, (tuple(late), "deadline", (finish - now, len(q) + len(late)))))
            return [], finish  # the rest (if any) are looked at again, as a smaller batch
        for r in take:
            self._dequeue(w, r)
        return take, finish

    def _retry_pending(self, now: float, out: list[Action]) -> None:
        n = len(self.pending)
        for _ in range(n):
            r = self.pending.popleft()
            if r.deadline_s < now + self._cold_s(r.model):
                out.append(record(Drop, ((r,), "deadline", (self._cold_s(r.model), n))))
            elif not self._route(r, now, out):
                self.pending.append(r)

    # ------------------------------------------------------------------ protocol
    def on_arrival(self, request: Request, now: float) -> list[Action]:
        self.stats["requests"] += 1
        out: list[Action] = []
        if not self._route(request, now, out):
            self.pending.append(request)
        return out

    def on_stage_done(self, report: StageReport, now: float) -> list[Action]:
        out: list[Action] = []
        w = report.worker
        if report.kind == "load":
            m = report.model
            self.loading[w].pop(m, None)
            if report.completed and w not in self.lost:
                self.resident[w][m] = now
                self.resident[w].move_to_end(m)
            else:
                self.where.get(m, set()).discard(w)
                self.used[w] -= self.instance_bytes(m, w)
                stuck = [r for r in self.queue[w] if r.model == m]
                for r in stuck:
                    self._dequeue(w, r)
                for r in stuck:
                    if not self._route(r, now, out):
                        self.pending.append(r)
            return out
        if report.last or not report.completed:
            self.running[w] = None
            self.running_model[w] = None
            self.busy_until[w] = now
        if not report.completed and report.reason in RETURNED:
            for r in report.requests:
                if not self._route(r, now, out):
                    self.pending.append(r)
        if w not in self.lost and self.running[w] is None:
            self._next(w, now, out)
        if self.pending:
            self._retry_pending(now, out)
        return out

    def on_worker_lost(self, worker: WorkerId, now: float) -> list[Action]:
        self.lost.add(worker)
        self.live = [w for w in self.workers if w not in self.lost]
        out: list[Action] = []
        queued = list(self.queue[worker])
        self.queue[worker].clear()
        self.queued_s[worker] = 0.0
        for m in list(self.resident[worker]) + list(self.loading[worker]):
            self.where.get(m, set()).discard(worker)
        self.resident[worker].clear()
        self.loading[worker].clear()
        self.used[worker] = 0.0
        for r in queued:
            if not self._route(r, now, out):
                self.pending.append(r)
        return out


class ColdStart(BaseScheduler):
    """The ``coldstart`` scheduler (module docstring); ``scheduling.coldstart`` registers
    it under that name. Its decisions are its core's (:class:`ColdStartCore`, made at
    ``start``)."""

    #: the core it makes at ``start`` (a test swaps in a subclass of its own)
    core_class: type[ColdStartCore] = ColdStartCore

    def __init__(
        self,
        max_batch: Annotated[int, Range(1)] = 1,
        memory_reserve_gb: Annotated[float, Range(0)] = 5.0,
        preload: bool = True,
    ) -> None:
        super().__init__()
        self.max_batch = int(max_batch)
        self.reserve_b = float(memory_reserve_gb) * 1e9
        self.preload = bool(preload)
        self.stats = {"cold_requests": 0, "loads": 0, "evictions": 0, "requests": 0}
        self.cold_ids: list[int] = []  # requests queued where their model was not resident
        self.core: ColdStartCore | None = None

    def start(self, view: ClusterView, plan: Plan, now: float) -> list[Action]:
        super().start(view, plan, now)
        self.core = core = self.core_class(
            view, plan, self.max_batch, self.reserve_b, self.stats, self.cold_ids,
            self._next_batch,
        )  # fmt: skip
        self.resident = core.resident  # (instances per worker, least recently used first)
        # from now on the per-request calls are the core's own bound methods: the engine
        # calls the core directly, with no frame of this class's between (the methods
        # below are the same calls, for before ``start``)
        self.on_arrival = core.on_arrival  # type: ignore[method-assign]
        self.on_stage_done = core.on_stage_done  # type: ignore[method-assign]
        return core.preload(now) if self.preload else []

    def new_batch_id(self) -> int:
        if self.core is None:
            return super().new_batch_id()
        return self.core.new_batch_id()

    def on_arrival(self, request: Request, now: float) -> list[Action]:
        return self.core.on_arrival(request, now)  # type: ignore[union-attr]

    def on_stage_done(self, report: StageReport, now: float) -> list[Action]:
        return self.core.on_stage_done(report, now)  # type: ignore[union-attr]

    def on_worker_lost(self, worker: WorkerId, now: float) -> list[Action]:
        return self.core.on_worker_lost(worker, now)  # type: ignore[union-attr]
