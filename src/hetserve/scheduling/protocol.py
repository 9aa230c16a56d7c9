"""The Scheduler protocol — the seam between policies and engines (docs/design.md).

Rules every scheduler follows, and every engine relies on:

1. A scheduler never sleeps, never reads a clock and never does I/O. Time arrives as
   ``now`` (float seconds); effects leave as a list of actions. The simulator turns actions
   into events, the runtime into actor calls and asyncio timers, so the same object drives
   both.
2. ``start`` is called once, before any request, with the cluster view and the plan.
3. ``on_arrival`` is called once per request. From then on the scheduler owns the request
   until it either dispatches it in a batch or drops it (``Drop``). A request it dispatched
   comes back to it only in a ``StageReport`` with ``completed=False`` and a reason in
   ``RETURNED`` (``"preempted"``, or ``"worker lost"``: rule 9), or at the end of an open
   route (``reason == "parked"``, rule 4); it may then dispatch or drop it again. A
   returned request stays where its batch started: at block 0, or parked where the open
   route before it left it.
   The engine may end a request the scheduler holds without asking it: at the request's
   deadline (dropped, ``deadline``: it can no longer finish by it) or when its client
   goes away (cancelled). The scheduler is not told; when it later dispatches or drops
   the request, the engine leaves it out (a batch runs without it; a ``Dispatch`` left
   with no request does not run, and its first stage is reported ``completed=False``,
   ``reason="withdrawn"``, with no requests). A request cancelled in a batch is left
   out of the batch's later reports; a batch whose every request was cancelled stops
   before its next stage (reported ``"withdrawn"``).
4. ``Dispatch`` names a batch id (unique per scheduler, chosen by the scheduler), the
   model, its requests and a route: one ``RouteStep`` per pipeline stage (block range,
   worker, planned start). Route steps cover the model's blocks contiguously, with
   consecutive stage numbers; usually from block 0 to the last. The engine runs stage after
   stage; between stages the cut's activations cross the links between the two workers. A
   worker runs one stage at a time; among the stages queued on it whose input has arrived
   it starts the one with the earliest planned start.
   *Open routes* (for schedulers that re-batch at every pool): a route may end before the
   model's last block. When it completes, its requests are *parked* on the last worker and
   come back to the scheduler (rule 5, ``reason="parked"``). A later Dispatch continues
   them: its route starts at the block where they stopped (every request of it must be
   parked at that block, possibly on different workers); the engine moves each worker's
   share of the activations over the links to the first step's worker and starts the stage
   when all have arrived.
5. ``StageReport`` arrives after every stage (``kind="stage"``, ``stage`` the route step's
   stage number) with the real start and end (and the real transfer times of its input),
   so a scheduler that keeps reservations can correct them; ``last=True`` means the
   dispatch's route is done: the engine recorded the outcomes, or, after an open route,
   the requests are parked (``reason="parked"``) and the scheduler holds them again.
   ``completed=False`` means the stage did not finish: ``reason`` is in ``RETURNED``
   (requests returned to the scheduler) or a failure (the engine recorded the requests as
   failed). Loads report with ``kind="load"``.
6. ``SetTimer(at_s, token)`` calls ``on_timer(token, now)`` at ``at_s`` (not before); timers
   cannot be cancelled — use a version in the token and ignore stale ones. In the
   simulator ``now == at_s``; on the runtime's wall clock ``now`` is a little later, so
   recognise a timer by its token, never by comparing ``now`` with a time.
7. ``Preempt(worker, batch_id)`` stops that batch at its next block boundary (or at once if
   its stage has not started); the requests come back in a ``StageReport``.
8. ``Load(worker, model, blocks)`` moves weights over the host link before they can run;
   ``Evict`` frees them. A stage whose blocks are not resident (nor loading) on its worker
   fails. ``Load(..., wait=True)``: where the blocks do not fit beside what the worker
   holds, the load waits (instead of failing at once) and starts when an ``Evict`` on the
   worker makes room; stages that need its blocks wait for it meanwhile, and run each
   block as it arrives once it streams. A later ``Load`` of the same blocks without
   ``wait`` is the last word: a waiting load starts then or fails (with the stages that
   waited for it); one under way goes on (no second report). A make-before-break
   switch's late loads (``control.switching``). An ``Evict`` of blocks a stage is running
   on that worker is an error: a scheduler counts its running batches' models as busy.
9. ``on_worker_lost``: the worker is gone (a dead actor, a lost node); the engine never
   starts anything on it again. It is called *before* the reports of the batches it hit,
   so that the scheduler re-dispatches their requests elsewhere: a batch whose route
   started at block 0 comes back (``reason="worker lost"``, in ``RETURNED``: its
   requests' inputs are still at the front end); one that continued activations parked
   on some worker, and activations parked on the lost worker, are gone (the batch fails,
   ``reason=engine.rules.ACTIVATIONS_LOST``, a failure of kind ``worker_lost``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, Protocol, runtime_checkable

from hetserve.core.cluster import Cluster
from hetserve.core.errors import HetserveError, unknown
from hetserve.core.gpus import GpuType
from hetserve.core.latency import LatencyModel
from hetserve.core.plan import Placement, Plan
from hetserve.core.registry import Registry
from hetserve.core.requests import Request
from hetserve.scheduling.params import check_params, checked_init

WorkerId = str


class RouteStep(NamedTuple):
    stage: int
    worker: WorkerId
    planned_start_s: float
    blocks: tuple[int, int]  # [start, stop)


class Dispatch(NamedTuple):
    batch_id: int
    model: str
    requests: tuple[Request, ...]
    route: tuple[RouteStep, ...]


class Drop(NamedTuple):
    """The scheduler gives up on ``requests``. ``reason``: one of the closed set
    ``core.outcome.DROP_KINDS`` (``deadline``, ``rows``, ``not_provisioned``,
    ``worker_lost``, ``preempted``; the engine refuses any other); ``figures``: what the
    client and the log are told with it (``core.outcome.drop_text``: for ``deadline``
    the time needed alone and the requests queued; ``preempted`` the worker and the time
    needed; ``rows`` the largest batch; ``worker_lost`` the worker)."""

    requests: tuple[Request, ...]
    reason: str
    figures: tuple[float | int | str | None, ...] = ()


class Preempt(NamedTuple):
    worker: WorkerId
    batch_id: int


class SetTimer(NamedTuple):
    at_s: float
    token: object


class Load(NamedTuple):
    worker: WorkerId
    model: str
    blocks: tuple[int, int]
    wait: bool = False  # no room beside what the worker holds: wait for an Evict (rule 8)


class Evict(NamedTuple):
    worker: WorkerId
    model: str
    blocks: tuple[int, int]


Action = Dispatch | Drop | Preempt | SetTimer | Load | Evict

# Reasons with which a stopped batch's requests come back to the scheduler (rules 3, 9).
RETURNED = frozenset({"preempted", "worker lost"})
# Actions and reports are NamedTuples: immutable, and cheap to create on the hot path.


class StageReport(NamedTuple):
    kind: str  # "stage" | "load"
    batch_id: int  # -1 for loads
    model: str
    stage: int
    worker: WorkerId
    start_s: float
    end_s: float
    requests: tuple[Request, ...] = ()
    completed: bool = True
    last: bool = False
    reason: str = ""
    blocks: tuple[int, int] = (0, 0)
    blocks_done: int = 0  # blocks of this stage that ran (preemption)
    transfer_start_s: float | None = None
    transfer_end_s: float | None = None


@dataclass(frozen=True)
class WorkerInfo:
    id: WorkerId
    gpu: GpuType
    share: int
    node: str
    gpu_id: str


@dataclass
class ClusterView:
    """What a scheduler may know of the cluster: workers, the latency model, link paths."""

    cluster: Cluster
    workers: dict[WorkerId, WorkerInfo]
    latency: LatencyModel
    placement: Placement
    cut_bytes_factor: float = 0.5  # activations at cuts: 0.5 FP16 (default), 1.0 FP32
    # per worker: what running one stage there costs beyond its blocks' compute (an
    # engine's call path, measured by it at start-up: the Ray executor's actor calls);
    # empty in the simulator and for workers in the engine's own process
    stage_overhead_s: dict[WorkerId, float] = field(default_factory=dict)
    # per worker: until when work that is not this scheduler's holds it (a scheduler
    # started by a switch between plans: the previous plan's batches still queued there,
    # ``control.switching``); empty otherwise. A scheduler that keeps worker timelines
    # starts them there (``reservation`` does); one that does not may ignore it
    busy_until_s: dict[WorkerId, float] = field(default_factory=dict)
    _lat_cache: dict[tuple[str, str, int, int, tuple[int, int] | None], float] = field(
        default_factory=dict, repr=False
    )
    _table_cache: dict[tuple[str, str, int, int, tuple[int, int] | None], list[float]] = field(
        default_factory=dict, repr=False
    )
    # lists of workers (as tuples) as runs of one GPU type and share: (count, a worker's
    # info) each (``latency_tables``)
    _kind_runs: dict[tuple[WorkerId, ...], list[tuple[int, WorkerInfo]]] = field(
        default_factory=dict, repr=False
    )

    @staticmethod
    def build(
        cluster: Cluster, latency: LatencyModel, placement: Placement, cut_bytes_factor: float = 0.5
    ) -> ClusterView:
        """The view of a placement's workers (what engines hand to ``start``)."""
        infos = {
            s.id: WorkerInfo(s.id, cluster.catalog.get(s.gpu), s.share, s.node, s.gpu_id)
            for s in placement.workers
        }
        return ClusterView(cluster, infos, latency, placement, cut_bytes_factor)

    def transfer_path(self, a: WorkerId, b: WorkerId) -> list[str]:
        return self.cluster.transfer_path(self.workers[a].gpu_id, self.workers[b].gpu_id)

    def stage_latency_s(
        self, model: str, worker: WorkerId, batch: int, blocks: tuple[int, int] | None = None
    ) -> float:
        """One stage's time on the worker: its blocks' latency at the batch size, plus the
        worker's ``stage_overhead_s``."""
        w = self.workers[worker]
        key = (model, w.gpu.name, w.share, batch, blocks)
        t = self._lat_cache.get(key)
        if t is None:
            rng = None if blocks is None else range(*blocks)
            t = self.latency.latency(model, w.gpu, w.share, batch, rng)
            self._lat_cache[key] = t
        return t + self.stage_overhead_s.get(worker, 0.0) if self.stage_overhead_s else t

    def latency_table(
        self, model: str, worker: WorkerId, max_batch: int, blocks: tuple[int, int] | None = None
    ) -> list[float]:
        """Latency at batch sizes 1..max_batch (index b-1): :meth:`stage_latency_s` of
        each (a new list; the blocks' part is kept per GPU type and share, which is all
        it depends on: 1,000 workers of two types make two tables, not 1,000)."""
        base = self._base_table(model, self.workers[worker], max_batch, blocks)
        if self.stage_overhead_s:
            o = self.stage_overhead_s.get(worker, 0.0)
            return [t + o for t in base]
        return list(base)

    def latency_tables(
        self,
        model: str,
        workers: Sequence[WorkerId],
        max_batch: int,
        blocks: tuple[int, int] | None = None,
    ) -> list[list[float]]:
        """:meth:`latency_table` of each of ``workers``, in their order (equal lists;
        the workers of one GPU type and share are looked up once between them: a plan
        that puts 100 models on 1,000 workers asks for 100,000 tables). Without
        per-worker overheads those workers share one list: not to be changed."""
        infos, over = self.workers, self.stage_overhead_s
        key = workers if type(workers) is tuple else tuple(workers)
        runs = self._kind_runs.get(key)
        if runs is None:  # (runs of one GPU type and share: found once per list of workers)
            runs = self._kind_runs[key] = []
            for w in key:
                info = infos[w]
                if runs and runs[-1][1].gpu is info.gpu and runs[-1][1].share == info.share:
                    runs[-1] = (runs[-1][0] + 1, runs[-1][1])
                else:
                    runs.append((1, info))
        out: list[list[float]] = []
        for count, info in runs:
            out += [self._base_table(model, info, max_batch, blocks)] * count
        if over:  # (each worker's own list, its overhead added)
            return [[t + over.get(w, 0.0) for t in base] for w, base in zip(key, out, strict=True)]
        return out

    def by_kind(self, workers: Sequence[WorkerId]) -> dict[tuple[str, int], list[WorkerId]]:
        """``workers`` by GPU type and share (keys ``(GPU name, share)``, in the order
        first met; each list in ``workers``' order): what a stage's latency depends on."""
        out: dict[tuple[str, int], list[WorkerId]] = {}
        infos = self.workers
        for w in workers:
            info = infos[w]
            key = (info.gpu.name, info.share)
            got = out.get(key)
            if got is None:
                out[key] = [w]
            else:
                got.append(w)
        return out

    def least_latency_s(
        self, model: str, worker: WorkerId, max_batch: int, blocks: tuple[int, int] | None = None
    ) -> float:
        """The least of the blocks' latencies at batch sizes 1..max_batch on the worker's
        GPU type and share, without its ``stage_overhead_s``: the least entry of
        :meth:`latency_table` is this plus the overhead (adding a number keeps the
        order of floats), the same for every worker of the type and share."""
        return min(self._base_table(model, self.workers[worker], max_batch, blocks))

    def _base_table(
        self, model: str, w: WorkerInfo, max_batch: int, blocks: tuple[int, int] | None
    ) -> list[float]:
        """The blocks' latency at batch sizes 1..max_batch on ``w``'s GPU type and share
        (kept: not to be changed by the caller)."""
        key = (model, w.gpu.name, w.share, max_batch, blocks)
        base = self._table_cache.get(key)
        if base is None:
            rng = None if blocks is None else range(*blocks)
            lat = self.latency.latency
            base = self._table_cache[key] = [
                lat(model, w.gpu, w.share, b, rng) for b in range(1, max_batch + 1)
            ]
        return base


@runtime_checkable
class Scheduler(Protocol):
    def start(self, view: ClusterView, plan: Plan, now: float) -> list[Action]: ...

    def on_arrival(self, request: Request, now: float) -> list[Action]: ...

    def on_stage_done(self, report: StageReport, now: float) -> list[Action]: ...

    def on_timer(self, token: object, now: float) -> list[Action]: ...

    def on_worker_lost(self, worker: WorkerId, now: float) -> list[Action]: ...


NO_ACTIONS: list[Action] = []


class BaseScheduler:
    """Convenience base: no-op callbacks, a batch-id counter, the view and plan."""

    name = "base"
    view: ClusterView
    plan: Plan
    #: whether it ever sends ``Preempt``: engines then make stages stoppable at block
    #: boundaries (on CUDA every boundary waits for its kernels, a cost paid only then)
    preempts: bool = False

    def __init__(self) -> None:
        self._next_batch = 0

    def new_batch_id(self) -> int:
        self._next_batch += 1
        return self._next_batch

    def start(self, view: ClusterView, plan: Plan, now: float) -> list[Action]:
        self.view, self.plan = view, plan
        return []

    def on_arrival(self, request: Request, now: float) -> list[Action]:
        return []

    def on_stage_done(self, report: StageReport, now: float) -> list[Action]:
        return []

    def on_timer(self, token: object, now: float) -> list[Action]:
        return []

    def on_worker_lost(self, worker: WorkerId, now: float) -> list[Action]:
        return []

    def max_rows(self, model: str) -> int | None:
        """The most rows a batch of ``model`` holds once started (a request of more is
        dropped, its reason saying so; ``hetserve serve`` refuses it at once with a 400).
        None: no limit of the scheduler's own (it runs a larger request alone)."""
        return None


# the built-in schedulers by name -> the module that registers them (imported on first use:
# this module imports none of its policies)
BUILTIN: dict[str, str] = {
    "coldstart": "hetserve.scheduling.coldstart",
    "edf-adaptive": "hetserve.scheduling.edf_adaptive",
    "fixed-batch": "hetserve.scheduling.fixed_batch",
    "flex": "hetserve.scheduling.flex",
    "flex-np": "hetserve.scheduling.flex",
    "clockwork": "hetserve.scheduling.flex",
    "magicbatch": "hetserve.scheduling.magicbatch",
    "nexus": "hetserve.scheduling.nexus",
    "reactive": "hetserve.scheduling.reactive",
    "reservation": "hetserve.scheduling.reservation",
}
#: schedulers by name (``core.registry``: the one registry shape)
SCHEDULERS: Registry[Callable[..., Scheduler]] = Registry("scheduler", BUILTIN)


def register(name: str) -> Callable[[type], type]:
    """Register a scheduler class under ``name``; its constructor checks its arguments
    against their declarations (:mod:`hetserve.scheduling.params`)."""

    def deco(cls: type) -> type:
        SCHEDULERS.register(name, cls)
        cls.name = name  # type: ignore[attr-defined]
        checked_init(cls, name)
        return cls

    return deco


def scheduler_names() -> list[str]:
    """Every scheduler name: the built-ins and those registered since."""
    return SCHEDULERS.names()


def scheduler_factory(name: str) -> Callable[..., Scheduler] | None:
    """The class registered as ``name`` (a built-in's module imported on first use)."""
    return SCHEDULERS.find(name)


def make_scheduler(name: str, params: Mapping[str, Any] | None = None) -> Scheduler:
    """A scheduler by registered name, or by ``package.module:Class`` path."""
    params = dict(params or {})
    if ":" in name:
        mod, _, cls_name = name.partition(":")
        try:
            factory = getattr(importlib.import_module(mod), cls_name)
        except (ImportError, AttributeError, ValueError) as e:
            raise HetserveError(f"scheduler {name!r}: cannot import ({e})") from None
        hooks = ("start", "on_arrival", "on_stage_done", "on_timer", "on_worker_lost")
        if not isinstance(factory, type) or not all(
            callable(getattr(factory, h, None)) for h in hooks
        ):
            raise HetserveError(
                f"scheduler {name!r}: not a scheduler class (it must define {', '.join(hooks)})"
            )
    else:
        found = scheduler_factory(name)
        if found is None:
            raise unknown("scheduler", name, scheduler_names())
        factory = found
    check_params(name, factory, params)
    try:
        return Provisioned(factory(**params))
    except TypeError as e:
        raise HetserveError(f"scheduler {name!r}: bad parameters {params} ({e})") from None


class Provisioned:
    """A scheduler, made to cope with a plan that gives some model no pipeline: the
    scheduler starts on the models that have one, and requests for the others are dropped
    at arrival (``"not provisioned"``). With every model provisioned the calls go straight
    to the scheduler (its bound methods replace these)."""

    def __init__(self, inner: Scheduler) -> None:
        self.inner = inner
        self.unserved: frozenset[str] = frozenset()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def max_rows(self, model: str) -> int | None:
        """The scheduler's ``max_rows`` (``BaseScheduler.max_rows``; None for a scheduler
        of the user's that declares none)."""
        fn = getattr(self.inner, "max_rows", None)
        return fn(model) if callable(fn) else None

    @property
    def preempts(self) -> bool:
        """The scheduler's declaration (``BaseScheduler.preempts``; optional on a
        ``module:Class`` scheduler of the user's: False where it declares none)."""
        return bool(getattr(self.inner, "preempts", False))

    def start(self, view: ClusterView, plan: Plan, now: float) -> list[Action]:
        self.unserved = frozenset(m for m, mp in plan.models.items() if not mp.pipelines)
        inner = self.inner
        if self.unserved:
            served = {m: mp for m, mp in plan.models.items() if m not in self.unserved}
            groups = tuple(g for g in plan.groups if not any(m in self.unserved for m in g.models))
            plan = replace(plan, models=served, groups=groups)
        acts = inner.start(view, plan, now)
        # (bound after the scheduler's start: it may bind its core's methods then)
        if not self.unserved:  # nothing to filter: no wrapper cost per event
            self.on_arrival = inner.on_arrival  # type: ignore[method-assign]
        self.on_stage_done = inner.on_stage_done  # type: ignore[method-assign]
        self.on_timer = inner.on_timer  # type: ignore[method-assign]
        self.on_worker_lost = inner.on_worker_lost  # type: ignore[method-assign]
        return acts

    def on_arrival(self, request: Request, now: float) -> list[Action]:
        if request.model in self.unserved:
            return [Drop((request,), "not_provisioned")]
        return self.inner.on_arrival(request, now)

    def on_stage_done(self, report: StageReport, now: float) -> list[Action]:
        return self.inner.on_stage_done(report, now)

    def on_timer(self, token: object, now: float) -> list[Action]:
        return self.inner.on_timer(token, now)

    def on_worker_lost(self, worker: WorkerId, now: float) -> list[Action]:
        return self.inner.on_worker_lost(worker, now)
