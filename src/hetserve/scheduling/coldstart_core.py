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

from collections import deque
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
if not cython.compiled:  # (compiled: the inline C and constants its .pxd cimports)
    from hetserve.core.records import (
        REQUEST_DEADLINE_S,
        REQUEST_ID,
        REQUEST_MODEL,
        REQUEST_ROWS,
        field,
        record,
        record4,
    )
    from hetserve.scheduling.policy_core import PolicyCore


class GpuState:
    """One GPU (a worker of the plan) as :class:`ColdStartCore` keeps it: its memory
    (``cap`` and ``used``, bytes), its instances (``resident``: model -> last use, least
    recently used first; ``loading``: model -> when its planned load ends), its queue and
    the batch it runs (``running``: the batch id, and its model), when that ends
    (``busy_until``), the batch-1 warm latency of its queue (``queued_s``), and per model
    its batch-1 warm latency and bytes as first asked. One object per GPU, found once per
    call: the core's state was a dict per field, each keyed by the worker's name."""

    def __init__(self, wid: WorkerId, cap_b: float, gpu_name: str = "") -> None:
        self.id = wid
        self.gpu_name = gpu_name  # (its GPU type's name: what the latency model is asked)
        self.cap = cap_b
        self.used = 0.0
        # (a dict keeps its keys in the order they went in: a model used again is taken
        # out and put back, the last; the first is the least recently used)
        self.resident: dict[str, float] = {}
        self.loading: dict[str, float] = {}
        self.queue: list[Request] = []  # (short: a list's C calls beat a deque's by name)
        self.running: int | None = None
        self.running_model: str | None = None
        self.busy_until = 0.0
        self.queued_s = 0.0
        self.warm1: dict[str, float] = {}
        self.nbytes: dict[str, float] = {}
        # (the last model ``warm1`` was read for, and its value: a request's route, start
        # and dequeue read it three times)
        self.last_m: object = None
        self.last_warm1 = 0.0


def _backlog_s(g: GpuState, now: float) -> float:
    """Seconds from ``now`` until GPU ``g``'s queue would be empty: its running batch's
    end, then its queue's batch-1 warm latencies."""
    bu = g.busy_until
    return (bu if bu > now else now) + g.queued_s - now


class ColdStartCore(PolicyCore):
    """The ``coldstart`` scheduler's state and decisions for one plan (module docstring):
    :class:`ColdStart` makes one at its ``start`` and hands it the protocol's calls.
    Where this file is compiled it is an extension type with typed attributes
    (``coldstart_core_c.pxd``) whose methods call each other in C. ``stats`` reads its
    counters (C integers where compiled: a dict of them made a dict update per request),
    which start from the ``stats`` it is given (the scheduler's until then); ``cold_ids``
    is the scheduler's own (shared); ``next_batch`` is the last batch id
    given (what ``BaseScheduler.new_batch_id`` counts: the scheduler's, from then on).
    Each GPU's state is a :class:`GpuState` (``gpus``, by worker id); ``resident``,
    ``loading`` and ``queue`` are the same containers by worker id."""

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
        super().__init__()
        self.view = view
        self.plan = plan
        self.max_batch = max_batch
        self.reserve_b = reserve_b
        # the counters (``stats`` reads them), from where ``stats`` left them
        self.n_cold = stats.get("cold_requests", 0)
        self.n_loads = stats.get("loads", 0)
        self.n_evictions = stats.get("evictions", 0)
        self.n_requests = stats.get("requests", 0)
        self.cold_ids = cold_ids
        self.next_batch = next_batch
        ws = sorted({w for ids in view.placement.stages.values() for w in ids})
        if not ws:
            raise HetserveError("coldstart: the plan places no workers")
        self.workers: list[WorkerId] = ws
        self.gpus: dict[WorkerId, GpuState] = {}
        for w in ws:
            info = view.workers[w]
            gpu = info.gpu
            cap_b = max(0.0, gpu.memory_gb * 1e9 / info.share - self.reserve_b)
            self.gpus[w] = GpuState(w, cap_b, gpu.name)
        self.cold = cold_start_model(view.latency)  # (None: no load plans to follow)
        # each model's canonical instance (``ColdStartModel.canonical_instance``): bytes
        # and warm latencies are asked once per canonical instance
        self._canon: dict[str, str] = {}
        self.resident = {w: g.resident for w, g in self.gpus.items()}
        self.loading = {w: g.loading for w, g in self.gpus.items()}
        self.queue = {w: g.queue for w, g in self.gpus.items()}
        self.lost: set[WorkerId] = set()
        self.live: list[WorkerId] = list(ws)
        self.where: dict[str, set[WorkerId]] = {}  # model -> live workers holding it
        self._warm: dict[tuple[str, WorkerId, int], float] = {}
        self.pending: deque[Request] = deque()
        # each model's blocks, all of them, as a Load, an Evict and a RouteStep name them
        # (one tuple per model, not one per action)
        self._span = {m: (0, view.latency.num_blocks(m)) for m in plan.models}
        self._cold_by: dict[str, float] = {}  # (each model's planned cold start, s)

    @property
    def stats(self) -> dict[str, int]:
        """The counters (module docstring), as a new dict: requests that went to a GPU
        where their model was not resident, loads, evictions and requests."""
        return {
            "cold_requests": self.n_cold,
            "loads": self.n_loads,
            "evictions": self.n_evictions,
            "requests": self.n_requests,
        }

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
                g = self.gpus[ws[k % len(ws)]]
                k += 1
                if g.used + self._bytes_on(g, m) <= g.cap:
                    out.append(self._load(g, m, now))
                    break
        return out

    # ------------------------------------------------------------------ estimates
    def instance_bytes(self, model: str, w: WorkerId) -> float:
        """The bytes an instance of ``model`` takes on worker ``w``'s GPU."""
        return self._bytes_on(self.gpus[w], model)

    def _canonical(self, model: str) -> str:
        hit = self._canon.get(model)
        if hit is None:
            cold = self.cold
            hit = self._canon[model] = cold.canonical_instance(model) if cold else model
        return hit

    def _bytes_on(self, g: GpuState, model: str) -> float:
        per = g.nbytes
        b = per.get(model)
        if b is None:
            cold = self.cold
            c = self._canonical(model)
            if c != model:
                b = self._bytes_on(g, c)
            elif cold is not None:
                b = float(cold.gpu_bytes(model, g.gpu_name))
            else:
                lp = self.plan.load_plans.get(model)
                b = lp.predicted.get("gpu_mb", 0.0) * 1e6 if lp else 0.0
            per[model] = b
        return b

    def _cold_s(self, model: str) -> float:
        t = self._cold_by.get(model)
        if t is None:
            lp = self.plan.load_plans.get(model)
            if lp is None:
                cold = self.cold
                if cold is not None:
                    lp = cold.model_load_plan(model)
            t = self._cold_by[model] = lp.predicted.get("cold_ms", 0.0) / 1e3 if lp else 0.0
        return t

    def _warm_s(self, model: str, w: WorkerId, batch: int = 1) -> float:
        key = (model, w, batch)
        t = self._warm.get(key)
        if t is None:
            c = self._canonical(model)
            if c != model:
                t = self._warm[key] = self._warm_s(c, w, batch)
            else:
                t = self._warm[key] = self.view.stage_latency_s(model, w, batch)
        return t

    def _warm1_on(self, g: GpuState, model: str) -> float:
        if g.last_m is model:
            return g.last_warm1
        per = g.warm1
        t = per.get(model)
        if t is None:
            t = per[model] = self._warm_s(model, g.id, 1)
        g.last_m = model
        g.last_warm1 = t
        return t

    def _by_backlog(self, ws: Iterable[WorkerId], now: float) -> list[tuple[float, WorkerId]]:
        """(seconds until the worker's queue would be empty, worker), for each of ``ws``."""
        gpus = self.gpus
        return [(_backlog_s(gpus[w], now), w) for w in ws]

    def _least_backlog(self, ws: Iterable[WorkerId], now: float) -> WorkerId:
        """The first of :meth:`_by_backlog`'s pairs in order (the least backlog, then the
        least name): its worker, found without a pair made per worker (``ws`` not empty)."""
        gpus = self.gpus
        best = None
        best_s = 0.0
        for w in ws:
            s = _backlog_s(gpus[w], now)
            if best is None or s < best_s or (s == best_s and w < best):
                best = w
                best_s = s
        return best

    def _dequeue(self, g: GpuState, r: Request) -> None:
        q = g.queue
        if q[0] is r:
            del q[0]
        else:
            q.remove(r)
        m = field(r, REQUEST_MODEL)
        rows = field(r, REQUEST_ROWS)
        left = g.queued_s - (self._warm1_on(g, m) if rows == 1 else self._warm_s(m, g.id, rows))
        g.queued_s = left if left > 0.0 else 0.0

    # ------------------------------------------------------------------ routing
    def _load(self, g: GpuState, model: str, now: float) -> Load:
        self.where.setdefault(model, set()).add(g.id)
        g.used += self._bytes_on(g, model)
        g.loading[model] = now + self._cold_s(model)
        self.n_loads += 1
        return record4(Load, g.id, model, self._span[model], False)

    def _make_room(self, g: GpuState, model: str, out: list[Action]) -> bool:
        """Evict idle LRU instances on ``g`` until ``model`` fits; False if it cannot."""
        need = self._bytes_on(g, model)
        if need > g.cap:
            return False
        # busy: queued, or running (a dispatched batch has left the queue; its weights
        # are in use until it ends: rule 8)
        busy = {field(r, REQUEST_MODEL) for r in g.queue}
        if g.running_model is not None:
            busy.add(g.running_model)
        free = g.cap - g.used
        victims = []
        for m in g.resident:  # least recently used first
            if free >= need:
                break
            if m in busy:
                continue
            victims.append(m)
            free += self._bytes_on(g, m)
        if free < need:
            return False
        for m in victims:
            del g.resident[m]
            self.where[m].discard(g.id)
            g.used -= self._bytes_on(g, m)
            self.n_evictions += 1
            out.append(record(Evict, (g.id, m, self._span[m])))
        return True

    def _route(self, r: Request, now: float, out: list[Action]) -> bool:
        m = field(r, REQUEST_MODEL)
        holders = self.where.get(m)
        if holders and len(holders) == 1:
            for w in holders:  # (its one worker: a loop over a set is C, an unpacking not)
                g = self.gpus[w]
        elif holders:
            g = self.gpus[self._least_backlog(holders, now)]
        else:
            live = self.live
            if not live:
                return False
            # the live GPUs by backlog, the first where the model fits (made room for):
            # the first in that order is found alone, and the rest ranked only where it
            # has no room (a refusal changes nothing: ``_make_room``)
            g = self.gpus[self._least_backlog(live, now)]
            if self._make_room(g, m, out):
                out.append(self._load(g, m, now))
            else:
                for _, w in sorted(self._by_backlog(live, now)):
                    g = self.gpus[w]
                    if self._make_room(g, m, out):
                        out.append(self._load(g, m, now))
                        break
                else:
                    return False
        g.queue.append(r)
        rows = field(r, REQUEST_ROWS)
        g.queued_s += self._warm1_on(g, m) if rows == 1 else self._warm_s(m, g.id, rows)
        if m not in g.resident:
            self.cold_ids.append(field(r, REQUEST_ID))
            self.n_cold += 1
        if g.running is None:
            self._next(g, now, out)
        return True

    def _next(self, g: GpuState, now: float, out: list[Action]) -> None:
        q = g.queue
        if not q or g.running is not None:
            return
        while q:
            head = q[0]
            m = field(head, REQUEST_MODEL)
            if self.max_batch == 1:  # the common case, without building lists
                finish = self._finish_s(g, m, field(head, REQUEST_ROWS), now)
                self._dequeue(g, head)
                if field(head, REQUEST_DEADLINE_S) < finish:
                    out.append(record(Drop, ((head,), "deadline", (finish - now, len(q) + 1))))
                    continue
                take: list[Request] | tuple[Request] = (head,)
            else:
                take, finish = self._take(g, q, m, now, out)
                if not take:
                    continue
            bid = self.new_batch_id()
            g.running = bid
            g.running_model = m
            g.busy_until = finish
            res = g.resident
            if m in res:  # (used again: the most recent)
                res[m] = res.pop(m)
            if self.plain:  # (the kernel's C call: the NamedTuples' fields, ``PolicyCore``)
                out.append((bid, m, tuple(take), ((0, g.id, now, self._span[m]),)))
                return
            step = record4(RouteStep, 0, g.id, now, self._span[m])
            out.append(record4(Dispatch, bid, m, tuple(take), (step,)))
            return

    def _finish_s(self, g: GpuState, m: str, n: int, now: float) -> float:
        """When a batch of ``n`` rows of ``m`` started on ``g`` now would end: its warm
        latency, or the model's planned load when that ends later."""
        finish = now + (self._warm1_on(g, m) if n == 1 else self._warm_s(m, g.id, n))
        ready = g.loading.get(m)
        return ready if ready is not None and ready > finish else finish

    def _take(
        self, g: GpuState, q: list[Request], m: str, now: float, out: list[Action]
    ) -> tuple[list[Request], float]:
        """The next batch of ``m`` from ``g``'s queue, taken off it, and when it will
        finish; no batch when its late requests were dropped (look again)."""
        take, n = [], 0
        cap = max(self.max_batch, q[0].rows)  # (a request is never split)
        for r in q:
            if r.model == m:
                if n + r.rows > cap:
                    break
                take.append(r)
                n += r.rows
        finish = self._finish_s(g, m, n, now)
        late = [r for r in take if r.deadline_s < finish]
        if late:
            for r in late:
                self._dequeue(g, r)
            out.append(record(Drop, (tuple(late), "deadline", (finish - now, len(q) + len(late)))))
            return [], finish  # the rest (if any) are looked at again, as a smaller batch
        for r in take:
            self._dequeue(g, r)
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
        try:
            self.n_requests += 1
            out: list[Action] = []
            if not self._route(request, now, out):
                self.pending.append(request)
            return out
        finally:
            self.plain = False  # (raised by the kernel for this call: ``PolicyCore``)

    def stage_report(
        self,
        kind: str,
        batch_id: int,
        model: str,
        stage: int,
        worker: WorkerId,
        start_s: float,
        end_s: float,
        requests: tuple[Request, ...],
        completed: bool,
        last: bool,
        reason: str,
        blocks: tuple[int, int],
        blocks_done: int,
        transfer_start_s: float,
        transfer_end_s: float,
        now: float,
    ) -> list[Action]:
        """A stage's or a load's report (``on_stage_done``, its fields:
        ``policy_core.PolicyCore``)."""
        try:
            out: list[Action] = []
            w = worker
            g = self.gpus[w]
            if kind == "load":
                m = model
                g.loading.pop(m, None)
                if completed and w not in self.lost:
                    res = g.resident
                    res.pop(m, None)  # (the most recent: last)
                    res[m] = now
                else:
                    self.where.get(m, set()).discard(w)
                    g.used -= self._bytes_on(g, m)
                    stuck = [r for r in g.queue if field(r, REQUEST_MODEL) == m]
                    for r in stuck:
                        self._dequeue(g, r)
                    for r in stuck:
                        if not self._route(r, now, out):
                            self.pending.append(r)
                return out
            if last or not completed:
                g.running = None
                g.running_model = None
                g.busy_until = now
            if not completed and reason in RETURNED:
                for r in requests:
                    if not self._route(r, now, out):
                        self.pending.append(r)
            if g.running is None and w not in self.lost:
                self._next(g, now, out)
            if self.pending:
                self._retry_pending(now, out)
            return out
        finally:
            self.plain = False  # (raised by the kernel for this call: ``PolicyCore``)

    def on_worker_lost(self, worker: WorkerId, now: float) -> list[Action]:
        self.lost.add(worker)
        self.live = [w for w in self.workers if w not in self.lost]
        out: list[Action] = []
        g = self.gpus[worker]
        queued = list(g.queue)
        g.queue.clear()
        g.queued_s = 0.0
        for m in list(g.resident) + list(g.loading):
            self.where.get(m, set()).discard(worker)
        g.resident.clear()
        g.loading.clear()
        g.used = 0.0
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
        self._stats = {"cold_requests": 0, "loads": 0, "evictions": 0, "requests": 0}
        self.cold_ids: list[int] = []  # requests queued where their model was not resident
        self.core: ColdStartCore | None = None

    @property
    def stats(self) -> dict[str, int]:
        """The counters (module docstring) over every plan this scheduler served, as a
        new dict: ``cold_requests``, ``loads``, ``evictions`` and ``requests``."""
        return self.core.stats if self.core is not None else dict(self._stats)

    def start(self, view: ClusterView, plan: Plan, now: float) -> list[Action]:
        super().start(view, plan, now)
        # (a new plan's core counts on from the last one's)
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
