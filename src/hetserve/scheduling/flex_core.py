# cython: annotation_typing=False
"""Shepherd's online schedulers for a serving group, and the Clockwork baseline.

``flex`` — FLEX (Shepherd section 5.2, Algorithm 1). One queue per model, most urgent
first. ``batch_gen(worker)``: across the models the worker serves, the largest batch whose
requests all meet their deadlines if it starts now (a batch's deadline is its most urgent
request's; its latency is the worker's latency model plus ``overhead_s`` per request);
requests that cannot make it even alone on the model's fastest worker are dropped
(``"deadline"``).

- When a worker finishes a batch it runs its ``batch_gen``.
- When a request arrives, every worker serving its model compares its candidate batch with
  the batch it runs: an idle worker runs the candidate; a busy one preempts its batch when
  ``|candidate| >= lambda x |running|`` (``lambda_`` = 3.03, Theorem 5.2) and runs the
  candidate. The preempted batch stops at its next exit point (a block boundary of the
  latency model; Shepherd Table 4's exit points with ``shepherd_linear_model``); its requests
  that can still make their deadlines return to their queues as new arrivals, the others are
  dropped (``"preempted"``). The candidate is sized to start at that exit point (exit points
  taken as evenly spaced), so it meets its deadlines although it cannot start at once; for
  a model without exit points that is the end of the running batch, and "preempting" then
  just queues the larger batch next.

Per arrival only the arriving model's candidate is computed, for each worker of the model:
O(G) (Theorem 5.3). This is Algorithm 1 exactly: another model's candidate on a worker
cannot have grown since that worker last compared it (its queue only shrank, its slack only
fell), and it was then below ``lambda x`` a running batch that is at least as large now.
An arrival whose queue has fewer than ``lambda`` rows can preempt nothing (a running batch
has at least one row), so it looks only at the idle workers, found in a set of places
(``core.heaps.IdleSet``, words of 64 bits): the same actions in the same order, without
visiting the busy ones (issue 41: 1,000 workers in one group).

``flex-np``: the same without preemption (Shepherd's ablation, Fig. 11a).
``priority="deadline"``: ``batch_gen`` takes the model whose most urgent request is the most
urgent, instead of the largest batch (the prioritisation ablation).

``clockwork`` — the paper's characterisation of Clockwork: one global scheduler,
earliest-deadline-first over all models, the largest batch that meets the tightest request,
no preemption.

``scheduling/flex.py`` registers the three (and exports this file's classes). This file
is plain Python and runs as it is. Where the package was built with Cython (``setup.py``;
``flex_core_c.pxd`` beside it declares the C types: a queue, a worker and an idle set are
extension types with typed attributes, and the per-decision steps are functions with typed
arguments, C calls from the schedulers' methods), the same file is also compiled as
``hetserve.scheduling.flex_core_c``, and ``scheduling/flex.py`` registers that one's
classes (``HETSERVE_PURE_PYTHON=1`` keeps this file). Both give the same results.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from typing import Annotated

from hetserve.core.errors import HetserveError
from hetserve.core.heaps import bisect_s, pop, pop_edf, push
from hetserve.core.plan import Plan
from hetserve.core.requests import Request
from hetserve.scheduling.params import OneOf, Range
from hetserve.scheduling.pools import Pools
from hetserve.scheduling.protocol import (
    RETURNED,
    Action,
    BaseScheduler,
    ClusterView,
    Dispatch,
    Drop,
    Preempt,
    RouteStep,
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
        REQUEST_DEADLINE_S,
        REQUEST_ID,
        REQUEST_ROWS,
        field,
        record,
        record4,
    )

__all__ = [
    "Clockwork", "Flex", "FlexNP", "GroupScheduler", "GroupWorker", "ModelQueue",
    "earliest_batch", "fit", "idle_first", "join", "largest_batch", "prune", "run_free",
    "start_batch",
]  # fmt: skip

_INF = math.inf
_NO_DOUBLES = memoryview(array("d"))  # (a queue's tables before any is added)
_NO_LONGS = memoryview(array("q"))


class _Waiting:
    """The models of one list of models (a worker's, in its order) whose queues hold
    requests: their places in the list, in order (``order``), shared by the workers with
    that list, so that a freed worker looks only at the models with requests waiting, in
    its order, not at every model it serves (issue 41: 100 models on each of 1,000
    workers). A queue joins (``ModelQueue.push``, where ``has`` says whether it is in) when
    it gains a request while empty, and leaves when a worker finds it empty: every queue
    that holds requests is in, and some that are in may be empty. Not ``lazy``: every
    model is in, always (a short list, where keeping the set costs more than it spares)."""

    def __init__(self, n: int, lazy: bool = True) -> None:
        self.lazy = lazy
        self.order: list[int] = [] if lazy else list(range(n))
        self.has = bytearray(n) if lazy else bytearray(b"\x01" * n)

    def add(self, i: int) -> None:
        """Place ``i`` in: into ``order`` where it sorts (the list is short)."""
        self.has[i] = 1
        order = self.order
        order.append(i)
        k = len(order) - 1
        while k > 0 and order[k - 1] > i:
            order[k] = order[k - 1]
            k -= 1
        order[k] = i


class ModelQueue:
    """A model's requests, most urgent first (a keyed heap of ``(deadline, id,
    request)``), their rows together, the workers that serve it and its batch-1 latency
    on the fastest of them."""

    def __init__(self, name: str, blocks: tuple[int, int]) -> None:
        self.name = name
        self.blocks = blocks
        self.queue: list[tuple[float, int, Request]] = []
        self.rows = 0  # the queue's rows together (``scheduling.rows``)
        self.workers: list[GroupWorker] = []
        self.fastest_1 = math.inf  # batch-1 latency on the fastest worker
        self.idle = IdleSet(0)  # its workers' (set by ``GroupScheduler._queue``)
        # its latency table by the kind of worker (``GroupWorker.kind``; None: no worker of
        # that kind): the table ``w.lat[name]`` of each worker ``w`` of the kind, read
        # without a look-up in the worker's dict (a dict per worker of 100 models at
        # 1,000 GPUs: most were cold in the caches)
        self.lat_of: list[list[float] | None] = []
        # the same tables as C doubles, one after another in ``lat_c``: kind ``k``'s at
        # ``lat_at[k]`` (-1: none), ``lat_len[k]`` of them (a search of a Python list
        # read a cold float object at each step, at 1,000 GPUs)
        self.lat_c = _NO_DOUBLES
        self.lat_at = _NO_LONGS
        self.lat_len = _NO_LONGS
        # the waiting sets it is in, with its place (set by ``GroupScheduler.start``)
        self.waiting_in: list[tuple[_Waiting, int]] = []

    def push(self, r: Request) -> None:
        if not self.queue:
            for s, i in self.waiting_in:
                if not s.has[i]:
                    s.add(i)
        push(self.queue, (field(r, REQUEST_DEADLINE_S), field(r, REQUEST_ID), r))
        self.rows += field(r, REQUEST_ROWS)

    def fastest(self, rows: int) -> float:
        """The latency of ``rows`` rows on the model's fastest worker (inf: more rows than
        its largest batch)."""
        if rows == 1:
            return self.fastest_1
        best = _INF
        for w in self.workers:
            lat = w.lat[self.name]
            if rows <= len(lat) and lat[rows - 1] < best:
                best = lat[rows - 1]
        return best


class GroupWorker:
    """A whole-model worker of a group: the models it serves, its latency table per model
    (batch 1..``max_batch``), the batch it runs (``bid`` 0: idle) with its size and
    planned span, the idle sets it is in, and the waiting set of its models (``None``:
    every model is looked at)."""

    def __init__(self, wid: WorkerId) -> None:
        self.id = wid
        self.models: list[ModelQueue] = []
        self.lat: dict[str, list[float]] = {}  # model -> latency at batch 1..max_batch
        # the number of its kind: its GPU type, share and overhead, all its tables depend
        # on (-1: none given; ``ModelQueue.lat_of``)
        self.kind = -1
        self.bid = 0  # the batch it runs (0: idle)
        self.size = 0
        self.start = self.end = 0.0  # when that batch is planned to start and end
        self.block_s = 0.0  # its time between exit points
        self.lost = False
        self.idle_in: list[tuple[IdleSet, int]] = []  # the idle sets it is in, with its place
        self.waiting: _Waiting | None = None

    def set_busy(self) -> None:
        for s, i in self.idle_in:
            s.discard(i)

    def set_idle(self) -> None:
        for s, i in self.idle_in:
            s.add(i)


# ---------------------------------------------------------------------- the steps
def join(
    st: ModelQueue, workers: dict[WorkerId, GroupWorker], wid: WorkerId, lat: list, kind: int = -1
) -> None:
    """Worker ``wid`` (made and added to ``workers`` where new) serves ``st``'s model at
    latencies ``lat`` (by batch size): each lists the other. ``kind``: the number of the
    worker's kind (``GroupWorker.kind``), whose workers all have ``lat`` for the model
    (-1: none; the worker's own table is then read by name)."""
    w = workers.get(wid)
    if w is None:
        w = workers[wid] = GroupWorker(wid)
    w.lat[st.name] = lat
    if kind >= 0:
        w.kind = kind
        while len(st.lat_of) <= kind:
            st.lat_of.append(None)
        if st.lat_of[kind] is not lat:  # (a new table for the kind: its C doubles too)
            st.lat_of[kind] = lat
            _add_table(st, kind, lat)
    w.models.append(st)
    st.workers.append(w)
    if lat[0] < st.fastest_1:
        st.fastest_1 = lat[0]


def _add_table(st: ModelQueue, kind: int, lat: list) -> None:
    """Kind ``kind``'s table ``lat`` added to ``st``'s C doubles (``ModelQueue.lat_c``;
    a kind given a new table reads it from its new place)."""
    n = len(st.lat_c)
    c = array("d", [0.0]) * (n + len(lat))
    for i in range(n):
        c[i] = st.lat_c[i]
    for i in range(len(lat)):
        c[n + i] = lat[i]
    k = max(len(st.lat_at), kind + 1)
    at = array("q", [-1]) * k
    ln = array("q", [0]) * k
    for i in range(len(st.lat_at)):
        at[i] = st.lat_at[i]
        ln[i] = st.lat_len[i]
    at[kind] = n
    ln[kind] = len(lat)
    st.lat_c, st.lat_at, st.lat_len = memoryview(c), memoryview(at), memoryview(ln)


def _lat(w: GroupWorker, st: ModelQueue) -> list:
    """``w``'s latency table for ``st``'s model: by the worker's kind, else by name."""
    k = w.kind
    if 0 <= k < len(st.lat_of):
        got = st.lat_of[k]
        if got is not None:
            return got
    return w.lat[st.name]


def prune(st: ModelQueue, now: float, out: list, max_batch: int) -> None:
    """Drop the most urgent requests of ``st`` while they cannot make it even alone."""
    q = st.queue
    while q:
        d = q[0][0]
        r = q[0][2]
        rows = field(r, REQUEST_ROWS)
        need = st.fastest_1 if rows == 1 else st.fastest(rows)
        if d >= now + need - 1e-12:
            return
        pop(q)
        st.rows -= rows
        if need < _INF:
            out.append(record(Drop, ((r,), "deadline", (need, len(q) + 1))))
        else:
            out.append(record(Drop, ((r,), "rows", (max_batch,))))


def fit(w: GroupWorker, st: ModelQueue, now: float) -> int:
    """The largest batch (rows) of ``st``'s most urgent requests that ``w`` finishes in
    time; 0 when the most urgent does not fit alone."""
    q = st.queue
    if not q:
        return 0
    x = q[0][0] - now + 1e-12
    k = w.kind
    if 0 <= k < len(st.lat_at) and st.lat_at[k] >= 0:  # ``bisect_s`` on the C doubles
        lo = base = st.lat_at[k]
        hi = lo + st.lat_len[k]
        while lo < hi:
            mid = (lo + hi) >> 1
            if x < st.lat_c[mid]:
                hi = mid
            else:
                lo = mid + 1
        b = lo - base
    else:
        b = bisect_s(_lat(w, st), x)
    n = st.rows
    if n < b:
        b = n
    return b if field(q[0][2], REQUEST_ROWS) <= b else 0


def largest_batch(
    w: GroupWorker, now: float, out: list, by_deadline: bool, max_batch: int
) -> tuple[ModelQueue | None, int]:
    """FLEX's ``batch_gen(w)``: across the models ``w`` serves (their hopeless requests
    dropped first), the largest batch that meets its deadlines, ties to the most urgent
    (``by_deadline``: the most urgent model's batch instead)."""
    best = None
    best_b = 0
    best_d = _INF
    models = w.models
    waiting = w.waiting
    lazy = waiting is not None and waiting.lazy
    order = waiting.order if lazy else models
    n = len(order)
    k = 0
    while k < n:  # the models with requests waiting, in ``w``'s order
        if lazy:
            i = order[k]
            st = models[i]
            if not st.queue:  # (found empty: it leaves)
                del order[k]
                waiting.has[i] = 0
                n -= 1
                continue
        else:
            st = models[k]
            if not st.queue:
                k += 1
                continue
        k += 1
        prune(st, now, out, max_batch)
        b = fit(w, st, now)
        if b == 0:
            continue
        d = st.queue[0][0]
        if by_deadline:
            if d < best_d:
                best, best_b, best_d = st, b, d
        elif b > best_b or (b == best_b and d < best_d):
            best, best_b, best_d = st, b, d
    return best, best_b


def earliest_batch(
    w: GroupWorker, now: float, out: list, max_batch: int
) -> tuple[ModelQueue | None, int]:
    """Clockwork's choice on ``w``: the model whose most urgent request is the most urgent
    (that fits at all), its largest batch that meets the tightest request."""
    best = None
    best_b = 0
    best_d = _INF
    models = w.models
    waiting = w.waiting
    lazy = waiting is not None and waiting.lazy
    order = waiting.order if lazy else models
    n = len(order)
    k = 0
    while k < n:  # as in :func:`largest_batch`
        if lazy:
            i = order[k]
            st = models[i]
            if not st.queue:  # (found empty: it leaves)
                del order[k]
                waiting.has[i] = 0
                n -= 1
                continue
        else:
            st = models[k]
            if not st.queue:
                k += 1
                continue
        k += 1
        prune(st, now, out, max_batch)
        if st.queue and st.queue[0][0] < best_d:
            b = fit(w, st, now)
            if b:
                best, best_b, best_d = st, b, st.queue[0][0]
    return best, best_b


def start_batch(w: GroupWorker, st: ModelQueue, b: int, now: float, bid: int) -> Dispatch:
    """Batch ``bid``: ``st``'s most urgent requests whose rows fit in ``b``, on ``w`` from
    ``now`` (its planned span and exit-point spacing noted on ``w``); the dispatch."""
    reqs, b = pop_edf(st.queue, b, st.rows)
    st.rows -= b
    if w.bid == 0:
        w.set_busy()
    w.bid = bid
    w.size = b
    k = w.kind
    if 0 <= k < len(st.lat_at) and st.lat_at[k] >= 0:
        t = st.lat_c[st.lat_at[k] + b - 1]
    else:
        t = _lat(w, st)[b - 1]
    w.start = now
    w.end = now + t
    w.block_s = t / st.blocks[1]
    step = record4(RouteStep, 0, w.id, now, st.blocks)
    return record4(Dispatch, bid, st.name, reqs, (step,))


def run_free(
    sched: GroupScheduler,
    w: GroupWorker,
    now: float,
    out: list,
    kind: int,
    by_deadline: bool,
    max_batch: int,
    of_batch: dict,
) -> None:
    """``GroupScheduler._on_free`` of the built-in classes, in C: ``w``'s batch choice
    (``kind`` 1: FLEX's largest batch, ``by_deadline`` its ablation; 2: Clockwork's
    earliest) and its start as ``_run`` makes it."""
    if kind == 1:
        st, b = largest_batch(w, now, out, by_deadline, max_batch)
    else:
        st, b = earliest_batch(w, now, out, max_batch)
    if st is not None and b > 0:
        bid = sched.new_batch_id()
        out.append(start_batch(w, st, b, now, bid))
        of_batch[bid] = w


def idle_first(
    sched: GroupScheduler,
    st: ModelQueue,
    now: float,
    out: list,
    kind: int,
    by_deadline: bool,
    max_batch: int,
    of_batch: dict,
) -> None:
    """``GroupScheduler._idle_first`` of the built-in classes, in C (:func:`run_free` for
    each idle worker of ``st``, in its order, while ``st``'s requests wait)."""
    q = st.queue
    ws = st.workers
    idle = st.idle
    # (the members as they are when each is reached: the built-in ``run_free`` changes
    # only its own worker's place, one already passed, so these are the members there
    # were at the start, in order)
    i = idle.first_from(0)
    while i >= 0 and q:
        run_free(sched, ws[i], now, out, kind, by_deadline, max_batch, of_batch)
        i = idle.first_from(i + 1)


# ---------------------------------------------------------------------- the schedulers
class GroupScheduler(BaseScheduler):
    """Per-model deadline queues over whole-model workers that may serve several models."""

    # an arrival looks only at the model's idle workers (``_idle_first``), in flex when it
    # is too small to preempt anything; False: at every worker of the model, as Algorithm
    # 1 is written (``tests/scheduling/test_spared_tries.py`` holds the first to the second)
    spare = True
    # a worker that serves this many models or more keeps a waiting set of them (``_Waiting``:
    # a freed worker looks only at those with requests waiting); fewer: at every one
    waiting_from = 16

    def __init__(
        self,
        max_batch: Annotated[int, Range(1)] = 128,
        overhead_s: Annotated[float, Range(0)] = 0.0,
    ) -> None:
        super().__init__()
        self.max_batch = int(max_batch)
        self.overhead_s = float(overhead_s)

    def start(self, view: ClusterView, plan: Plan, now: float) -> list[Action]:
        super().start(view, plan, now)
        # where the class's batch choice and start are the built-in ones, a freed worker's
        # decision is :func:`run_free`'s, in C (1: FLEX's, 2: Clockwork's); a subclass that
        # overrides one of them (``nexus``) has its own methods called (0)
        cls = type(self)
        self._kind = 0
        if cls._on_free is GroupScheduler._on_free and cls._run is GroupScheduler._run:
            if cls._batch_gen is Flex._batch_gen:
                self._kind = 1
            elif cls._batch_gen is Clockwork._batch_gen:
                self._kind = 2
        self._by_deadline = getattr(self, "priority", "largest") == "deadline"
        pools = Pools(view, plan)
        self.models: dict[str, ModelQueue] = {}  # the queue of a model's requests
        # ... or, for a model split over groups, of its (model, stream)'s group
        self.by_stream: dict[tuple[str, str], ModelQueue] = {}
        self.workers: dict[WorkerId, GroupWorker] = {}
        self.of_batch: dict[int, GroupWorker] = {}
        self._kinds: dict[tuple[str, int, float], int] = {}  # by GPU type, share, overhead
        self._kind_of: dict[WorkerId, int] = {}  # each worker's kind
        self._idle_sets: dict[tuple[WorkerId, ...], IdleSet] = {}
        split = {m for g in plan.groups if g.streams for m in g.models}
        for m, mp in plan.models.items():
            blocks = mp.pipelines[0].stages[0].blocks
            if m not in split:
                self.models[m] = self._queue(m, blocks, pools.whole_model_workers(m))
                continue
            for g in plan.groups:  # one queue per group the model is split over
                if m in g.models:
                    st = self._queue(m, blocks, view.placement.groups[g.name])
                    self.models.setdefault(m, st)
                    for name in g.streams:  # (the group's streams of other models too:
                        self.by_stream[(m, name)] = st  # never looked up with m)
        # one waiting set per list of models, shared by the workers that serve that list
        waiting: dict[tuple[ModelQueue, ...], _Waiting] = {}
        for w in self.workers.values():
            key = tuple(w.models)
            ws = waiting.get(key)
            if ws is None:
                ws = waiting[key] = _Waiting(len(key), len(key) >= self.waiting_from)
                for i, st in enumerate(w.models if ws.lazy else ()):
                    st.waiting_in.append((ws, i))
            w.waiting = ws
        return []

    def _queue(self, m: str, blocks: tuple[int, int], worker_ids: Sequence[WorkerId]) -> ModelQueue:
        st = ModelQueue(m, tuple(blocks))
        view = self.view
        infos, over = view.workers, view.stage_overhead_s
        workers, kinds, kind_of = self.workers, self._kinds, self._kind_of
        by_kind: list = []  # the model's table by kind (None: not made yet)
        for wid in worker_ids:
            # (a table per GPU type, share and the worker's own overhead, if any: the
            # worker's kind, found once per worker, not once per model and worker)
            kind = kind_of.get(wid, -1)
            if kind < 0:
                info = infos[wid]
                kind_key = (info.gpu.name, info.share, over.get(wid, 0.0) if over else 0.0)
                kind = kinds.get(kind_key, -1)
                if kind < 0:
                    kind = kinds[kind_key] = len(kinds)
                kind_of[wid] = kind
            while len(by_kind) <= kind:
                by_kind.append(None)
            lat = by_kind[kind]
            if lat is None:
                base = view.latency_table(m, wid, self.max_batch)
                lat = [float(t + self.overhead_s * (b + 1)) for b, t in enumerate(base)]
                by_kind[kind] = lat
            join(st, workers, wid, lat, kind)
        key = tuple(worker_ids)
        idle = self._idle_sets.get(key)
        if idle is None:
            idle = self._idle_sets[key] = IdleSet(len(st.workers))
            for i, w in enumerate(st.workers):
                w.idle_in.append((idle, i))
        st.idle = idle
        return st

    def max_rows(self, model: str) -> int | None:
        return self.max_batch

    # ------------------------------------------------------------------ helpers
    def _model(self, name: str) -> ModelQueue:
        st = self.models.get(name)
        if st is None:
            raise HetserveError(f"{self.name}: no worker serves model {name!r}")
        return st

    def _prune(self, st: ModelQueue, now: float, out: list[Action]) -> None:
        """Drop the most urgent requests while they cannot make it even alone."""
        prune(st, now, out, self.max_batch)

    def _fit(self, w: GroupWorker, st: ModelQueue, now: float) -> int:
        """The largest batch (rows) of ``st``'s most urgent requests that ``w`` finishes in
        time; 0 when the most urgent does not fit alone."""
        return fit(w, st, now)

    def _run(self, w: GroupWorker, st: ModelQueue, b: int, now: float, out: list[Action]) -> None:
        bid = self.new_batch_id()
        out.append(start_batch(w, st, b, now, bid))
        self.of_batch[bid] = w

    def _batch_gen(
        self, w: GroupWorker, now: float, out: list[Action]
    ) -> tuple[ModelQueue | None, int]:
        raise NotImplementedError

    def _on_free(self, w: GroupWorker, now: float, out: list[Action]) -> None:
        st, b = self._batch_gen(w, now, out)
        if st is not None and b > 0:
            self._run(w, st, b, now, out)

    def _arrived(self, st: ModelQueue, now: float, out: list[Action]) -> None:
        """New requests in ``st``'s queue: idle workers take batches, in the model's order
        of workers (``_idle_first``)."""
        prune(st, now, out, self.max_batch)
        if self.spare:
            self._idle_first(st, now, out)
            return
        for w in st.workers:
            if not st.queue:
                return
            if w.bid == 0 and not w.lost:
                self._on_free(w, now, out)

    def _idle_first(self, st: ModelQueue, now: float, out: list[Action]) -> None:
        """The idle workers of ``st``, in its order, each runs its ``batch_gen`` while
        ``st``'s requests wait: what looking at every worker in that order does, where a
        busy one does nothing."""
        if self._kind:
            idle_first(self, st, now, out, self._kind, self._by_deadline, self.max_batch,
                       self.of_batch)  # fmt: skip
            return
        q, ws = st.queue, st.workers
        bits = st.idle.as_int()  # (the members at the start: ``_on_free`` may be anyone's)
        on_free = self._on_free
        while bits and q:
            low = bits & -bits
            bits ^= low
            on_free(ws[low.bit_length() - 1], now, out)

    # ------------------------------------------------------------------ protocol
    def on_arrival(self, request: Request, now: float) -> list[Action]:
        st = self.by_stream.get((request.model, request.stream)) if self.by_stream else None
        if st is None:
            st = self._model(request.model)
        st.push(request)
        out: list[Action] = []
        self._arrived(st, now, out)
        return out

    def on_stage_done(self, report: StageReport, now: float) -> list[Action]:
        if report.kind != "stage":
            return []
        out: list[Action] = []
        w = self.of_batch.pop(report.batch_id, None)
        if not report.completed and report.reason in RETURNED:
            back: list[ModelQueue] = []
            for r in report.requests:
                st = self.by_stream.get((r.model, r.stream)) if self.by_stream else None
                if st is None:
                    st = self._model(report.model)
                if r.deadline_s >= now + st.fastest(r.rows) - 1e-12:
                    st.push(r)
                    if st not in back:
                        back.append(st)
                elif report.reason == "preempted":
                    out.append(Drop((r,), "preempted", (report.worker, st.fastest(r.rows))))
                else:
                    out.append(Drop((r,), "worker_lost", (report.worker,)))
            for st in back:
                self._arrived(st, now, out)
        if w is not None and w.bid == report.batch_id:
            w.bid = w.size = 0
            if not w.lost:
                w.set_idle()
                if self._kind:
                    run_free(self, w, now, out, self._kind, self._by_deadline, self.max_batch,
                             self.of_batch)  # fmt: skip
                else:
                    self._on_free(w, now, out)
        return out

    def on_worker_lost(self, worker: WorkerId, now: float) -> list[Action]:
        w = self.workers.get(worker)
        if w is not None:
            w.lost = True
            w.set_busy()  # (never idle again)
        return []


class Flex(GroupScheduler):
    def __init__(
        self,
        max_batch: Annotated[int, Range(1)] = 128,
        lambda_: Annotated[float, Range(1, lo_open=True)] = 3.03,
        overhead_s: Annotated[float, Range(0)] = 0.0,
        priority: Annotated[str, OneOf("largest", "deadline")] = "largest",
        preempt: bool = True,
    ) -> None:
        super().__init__(max_batch, overhead_s)
        self.lambda_ = float(lambda_)
        self.priority = priority
        self.preempts = bool(preempt)
        self.preemptions = 0

    def _batch_gen(
        self, w: GroupWorker, now: float, out: list[Action]
    ) -> tuple[ModelQueue | None, int]:
        return largest_batch(w, now, out, self.priority == "deadline", self.max_batch)

    def _arrived(self, st: ModelQueue, now: float, out: list[Action]) -> None:
        prune(st, now, out, self.max_batch)
        lam = self.lambda_
        q = st.queue
        if self.spare and (not self.preempts or st.rows < lam):
            # no running batch can be preempted (it has at least one row, the candidate at
            # most the queue's rows, and rows only fall below): only idle workers act
            self._idle_first(st, now, out)
            return
        last_lat: list[float] | None = None  # workers of one GPU type share a table:
        b_now = 0  # their bound is the same until the queue changes
        for w in st.workers:
            if not q:
                return
            if w.lost:
                continue
            if w.bid == 0:
                self._on_free(w, now, out)
                last_lat = None
            elif self.preempts:
                lat = _lat(w, st)
                if lat is not last_lat:  # the candidate if it could start now: a bound
                    b_now = bisect_s(lat, q[0][0] - now + 1e-12)
                    if b_now > st.rows:
                        b_now = st.rows
                    last_lat = lat
                if b_now < lam * w.size:
                    continue
                # the running batch stops at its next exit point, not at once
                k = math.ceil((now - w.start) / w.block_s - 1e-9) if now > w.start else 0
                at = min(w.start + k * w.block_s, w.end)
                b = min(bisect_s(lat, q[0][0] - at + 1e-12), st.rows)
                if b and b >= lam * w.size and q[0][2].rows <= b:
                    out.append(Preempt(w.id, w.bid))
                    self.preemptions += 1
                    self._run(w, st, b, at, out)
                    last_lat = None


class FlexNP(Flex):
    """FLEX without preemption (Shepherd's ablation)."""

    def __init__(
        self,
        max_batch: Annotated[int, Range(1)] = 128,
        overhead_s: Annotated[float, Range(0)] = 0.0,
        priority: Annotated[str, OneOf("largest", "deadline")] = "largest",
    ) -> None:
        super().__init__(max_batch, 3.03, overhead_s, priority, preempt=False)


class Clockwork(GroupScheduler):
    """Earliest deadline first over all models, the largest batch that meets the tightest
    request, no preemption (Shepherd's characterisation of Clockwork)."""

    def _batch_gen(
        self, w: GroupWorker, now: float, out: list[Action]
    ) -> tuple[ModelQueue | None, int]:
        return earliest_batch(w, now, out, self.max_batch)
