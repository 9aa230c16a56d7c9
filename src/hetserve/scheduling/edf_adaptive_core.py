# cython: annotation_typing=False
"""``edf-adaptive``: the NP data plane (whole models, adaptive batching).

Per model, requests wait in earliest-deadline-first order. When a worker of the model's
pool is idle, the head request (earliest deadline) decides:

- if even batch 1 on the fastest idle worker cannot meet the head's deadline, the head is
  dropped (reason ``deadline``) and the next one considered;
- otherwise ``b_max`` is the largest batch (``<= max_batch``, the plan's batch by default)
  whose completion now meets the head's deadline;
- if at least ``b_max`` requests wait, the ``b_max`` most urgent go out now;
- if fewer wait, a larger batch is still feasible, so the scheduler waits: a timer fires at
  the last moment the waiting requests can still be served together
  (``deadline - latency(n)``), and any arrival re-checks.

All requests of a batch have deadlines no earlier than the head's, so the batch meets all
of them.

Where many models share workers (issue 41's 1,000 GPUs and 100 models), a stage end tries
only the models whose decision may change (``_Group``, :func:`try_freed`): exactly those,
in the order, that trying them all gives (``tests/scheduling/test_spared_tries.py``).

``scheduling/edf_adaptive.py`` registers it. This file is plain Python and runs as it is;
built with Cython (``setup.py``; ``edf_adaptive_core_c.pxd`` declares the C types), it is
also ``hetserve.scheduling.edf_adaptive_core_c``, whose class ``edf_adaptive.py``
registers instead (``HETSERVE_PURE_PYTHON=1`` keeps this file). Both give the same results.
"""

from __future__ import annotations

from typing import Annotated

from hetserve.core.errors import HetserveError
from hetserve.core.heaps import bisect_s, pop, pop_edf, push
from hetserve.core.plan import Plan
from hetserve.core.requests import Request
from hetserve.scheduling.params import Range
from hetserve.scheduling.pools import Pools
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
    from hetserve.core.heaps import EventHeap, IdleSet
    from hetserve.core.records import (
        REQUEST_DEADLINE_S,
        REQUEST_ID,
        REQUEST_ROWS,
        field,
        record,
        record2,
        record4,
    )

__all__ = ["EdfAdaptive", "gather", "take_due", "try_freed", "try_model"]


class _Group:
    """Models whose workers are the same, in the same order (fastest first): they share
    one set of idle workers (``core.heaps.IdleSet``: rank r is in while the worker of
    rank r is idle), so that marking a worker busy or idle is one change to one word
    however many models it serves, and an index of the models that wait for a timer, so
    that a stage end tries only the models whose decision to wait may have changed
    (``EdfAdaptive.on_stage_done``)."""

    def __init__(self, n: int) -> None:
        self.idle = IdleSet(n)
        self.indexed = False  # whether the index below is kept (``EdfAdaptive.index_from``)
        self.models: list[_ModelState] = []  # in plan order
        # per rank: a partition id, equal for two ranks where every model of the group
        # has the same latency row (``_ModelState.kind``) on both
        self.part: list[int] = []
        # per partition: the models that decided to wait for their timer while the
        # fastest idle worker was of that partition, as a ``core.heaps.EventHeap`` by
        # the last time the wait still holds, each entry's ``fn`` the state and ``a``
        # its stamp then (stale where the state's stamp moved on: it tried, or its queue
        # changed). (Entries of one time: any order; those gathered try by their keys.)
        self.heaps: dict[int, EventHeap] = {}
        # models that may have to try at the next stage end (the rest are in ``heaps``):
        # those ``LISTED``; one ``SETTLED`` since leaves at the next walk (:func:`gather`,
        # which compacts it in place: a list and a flag, no dict of deletions to hash)
        self.unsettled: list[_ModelState] = []
        self.p0 = -1  # the fastest idle worker's partition at the last look (-1: none)


class _ModelState:
    """Per-model state, kept in one object so the hot path does few dict lookups."""

    def __init__(
        self,
        name: str,
        workers: list[WorkerId],
        lat: list[list[float]],
        blocks: tuple[int, int],
        group: _Group,
        index: int,
    ) -> None:
        self.name = name
        self.index = index  # in plan order
        self.group = group  # its workers' idle set (``_Group``)
        self.workers = workers  # fastest first
        self.lat = lat  # by rank: latency at batch 1..max_batch
        rows: dict[tuple[float, ...], int] = {}  # by rank: which latency row (GPU type)
        seen: dict[int, int] = {}  # (by table: workers of one GPU type may share one)
        self.kind = kind = []
        last: list[float] | None = None  # (a run of ranks with one table: looked up once)
        k = -1
        for x in lat:
            if x is not last:
                k = seen.get(id(x), -1)
                if k < 0:
                    k = seen[id(x)] = rows.setdefault(tuple(x), len(rows))
                last = x
            kind.append(k)
        self.queue: list[tuple[float, int, Request]] = []
        self.rows = 0  # the queue's rows together (``scheduling.rows``)
        self.blocks = tuple(blocks)
        self.timer_at = -1.0  # the armed timer's time (-1: none)
        # the latency row (``kind``) of the fastest idle worker when the last try decided to
        # wait for the timer (-1: it did not, or the queue changed since): while the
        # fastest idle worker has that row and the queue is the same, a new try waits too
        # until the head could no longer take a batch larger than the queue
        # (``EdfAdaptive._still_waits``)
        self.waiting = -1
        self.stamp = 0  # moves on whenever ``waiting`` is set or cleared (``_Group.heaps``)
        self.listed = UNLISTED  # in its group's ``unsettled`` (``_Group``)
        self.mark = 0  # the stage end (``_Tries.mark``) where it last joined the tries


# ``_ModelState.listed``: not in its group's ``unsettled``; in it; in it but settled
UNLISTED = 0
LISTED = 1
SETTLED = 2


class _Tries:
    """A stage end's models to try (:func:`try_freed`): a heap by key (:func:`add_try`),
    empty between stage ends; ``mark``: the stage ends so far; the scheduler's
    ``served_by``, ``_try`` and ``_still_waits``, read here with no look-up in its class."""

    def __init__(self, sched: EdfAdaptive) -> None:
        self.heap = EventHeap(0)
        self.mark = 0
        self.n_models = len(sched.models)
        self.served_by = sched.served_by
        self.try_one = sched._try
        self.still_waits = sched._still_waits


def unsettle(g: _Group, st: _ModelState) -> None:
    """``st`` may have to try at ``g``'s next stage end: listed in ``g.unsettled``."""
    if st.listed == UNLISTED:
        g.unsettled.append(st)
    st.listed = LISTED


def add_try(heap: EventHeap, st: _ModelState, k: int, n_models: int, mark: int) -> None:
    """``st`` joins the models to try at stage end ``mark`` (unless it has), in ``heap``
    by its key: its head's deadline, then ``k`` (the first freed worker that serves it),
    then its plan index (a number of its own: ``k * n_models + index``)."""
    if st.mark != mark:
        st.mark = mark
        heap.push_seq(st.queue[0][0], k * n_models + st.index, st, None, None)


def try_model(sched: EdfAdaptive, st: _ModelState, now: float, out: list, margin_s: float) -> None:
    """The scheduler's decision for ``st`` (module docstring): drop the heads that cannot
    make it, then dispatch the largest batch the head's deadline allows on the fastest idle
    worker, or arm the timer to wait for a fuller one; while workers of its group are
    idle. ``sched``: the scheduler (its batch ids, pools and idle sets)."""
    q = st.queue
    g = st.group
    if g.idle.count == 0:  # nothing to decide with (what it waited for still holds)
        return
    st.waiting = -1
    if g.indexed:
        st.stamp += 1
        unsettle(g, st)
    while q and g.idle.count:
        rank = g.idle.first_from(0)  # the fastest idle worker
        lat = st.lat[rank]
        head_deadline = q[0][0]
        slack = head_deadline - now
        n = st.rows
        unit = n == len(q)  # every waiting request one row
        k = 1 if unit else field(q[0][2], REQUEST_ROWS)
        if lat[0] > slack if k == 1 else k > len(lat) or lat[k - 1] > slack:
            # it cannot make it, even alone
            head = pop(q)[2]
            st.rows -= k
            if k <= len(lat):
                out.append(record(Drop, ((head,), "deadline", (lat[k - 1], len(q) + 1))))
            else:
                out.append(record(Drop, ((head,), "rows", (len(lat),))))
            continue
        b_max = bisect_s(lat, slack)  # lat is non-decreasing in batch size
        if n < b_max:
            t_wait = head_deadline - lat[n - 1] - margin_s
            if t_wait > now + 1e-12:
                if st.timer_at != t_wait:
                    # the token names the model's state and the time; only the
                    # latest armed time counts
                    st.timer_at = t_wait
                    out.append(record2(SetTimer, t_wait, (st, t_wait)))
                st.waiting = st.kind[rank]
                if g.indexed and n < len(lat):  # (else it stays unsettled: it never waits)
                    # the wait holds while now <= head's deadline - latency(n + 1)
                    # and the timer is ahead
                    h = g.heaps.get(g.part[rank])
                    if h is None:
                        h = g.heaps[g.part[rank]] = EventHeap(0)
                    h.push(min(head_deadline - lat[n], t_wait), st, st.stamp, None)
                    st.listed = SETTLED
                return
            b = n
        else:
            b = b_max
        w = st.workers[rank]
        if unit:  # the plain pops
            reqs = tuple([pop(q)[2] for _ in range(b)])
        else:
            reqs, b = pop_edf(q, b, n)
        st.rows -= b
        bid = sched.new_batch_id()
        sched.pools.dispatched(bid, (w,))
        sched._set_busy(w)
        route = (record4(RouteStep, 0, w, now, st.blocks),)
        out.append(record4(Dispatch, bid, st.name, reqs, route))


def take_due(
    g: _Group, h: EventHeap, now: float, k: int, heap: EventHeap, n_models: int, mark: int
) -> None:
    """Into ``heap`` (:func:`add_try`, with ``k``, ``n_models`` and ``mark``), the models
    of ``g`` whose wait in ``h`` (the fastest idle worker's partition) may have ended:
    every entry due by ``now`` is taken off; a live one's state is unsettled again
    (looked at until it tries). (The exact test is ``EdfAdaptive._still_waits``.)"""
    while h.n > 0 and h.first_s() <= now + 1e-9:
        h.pop_into()
        st = h.fn
        stamp = h.a
        if stamp == st.stamp and st.queue:
            add_try(heap, st, k, n_models, mark)
            unsettle(g, st)
    h.fn = h.a = None


def gather(g: _Group, k: int, now: float, heap: EventHeap, n_models: int, mark: int) -> None:
    """Into ``heap`` (:func:`add_try`, with ``k``, ``n_models`` and ``mark``), the models
    of the indexed group ``g`` that may have to try now: those unsettled with requests
    waiting (the others, and those settled since, leave the list), those whose wait on the
    fastest idle worker's partition may have ended (:func:`take_due`), and the live
    waiters of the other partitions (whose heaps lose their stale entries here)."""
    idle = g.idle
    g.p0 = p0 = g.part[idle.first_from(0)] if idle.count else -1
    listed = g.unsettled
    n = len(listed)
    j = 0
    for i in range(n):  # (compacted in place: those that stay keep their order)
        st = listed[i]
        if st.listed == LISTED and st.queue:
            add_try(heap, st, k, n_models, mark)
            listed[j] = st
            j += 1
        else:
            st.listed = UNLISTED
    del listed[j:]
    for p, h in g.heaps.items():
        if p == p0:
            take_due(g, h, now, k, heap, n_models, mark)
        elif h.n > 0:
            entries = list(h)
            live = [e for e in entries if e[3] == e[2].stamp]
            if len(live) != len(entries):
                h.clear()
                for e in live:
                    h.push(e[0], e[2], e[3], None)
            for e in live:
                st = e[2]
                if st.queue:
                    add_try(heap, st, k, n_models, mark)


def try_freed(tr: _Tries, freed: list, again: _ModelState | None, now: float, out: list) -> None:
    """A stage end's tries (``EdfAdaptive.on_stage_done``), after its ``freed`` workers
    are idle again: the models that may dispatch now are those the freed workers serve
    with requests waiting, and ``again`` (the model of a stage that did not complete),
    in order of their heads' deadlines (ties: the order a freed worker first serves
    them, then plan order: :func:`add_try`), each tried (``_try``) unless a try
    would only decide again to wait for its armed timer (``_still_waits``) or its
    group has no idle worker left. In an indexed group the models that wait are not
    looked at one by one: only those whose wait may have ended (its time passed, or the
    fastest idle worker is of another partition than when they decided; see ``_Group``)
    join the others (:func:`gather`); a dispatch that changes a group's fastest idle
    partition adds those waiting on the old one (:func:`repartitioned`)."""
    first: dict[_Group, int] = {}  # (the groups of freed workers: the first one's number)
    served_by = tr.served_by
    for k, w in enumerate(freed):
        for g, r in served_by.get(w, ()):
            g.idle.add(r)
            if g not in first:
                first[g] = k
    heap = tr.heap
    if heap.n:  # (left by a call that failed)
        heap.clear()
    mark = tr.mark = tr.mark + 1
    m = tr.n_models
    indexed = False
    for g, k in first.items():
        if g.indexed:
            indexed = True
            gather(g, k, now, heap, m, mark)
        else:
            for st in g.models:
                if st.queue:
                    add_try(heap, st, k, m, mark)
    if again is not None and again.queue:
        add_try(heap, again, len(freed), m, mark)
    while heap.n:  # (an earlier one's dispatch may have taken the freed worker)
        t = heap.pop_into()
        seq = heap.seq
        st = heap.fn
        if st.group.idle.count and (st.waiting < 0 or not tr.still_waits(st, now)):
            n0 = len(out)
            tr.try_one(st, now, out)
            if not indexed:
                continue
            for i in range(n0, len(out)):
                a = out[i]
                if type(a) is Dispatch:  # (it took a worker: in the groups of freed
                    # workers, the models that wait on the old fastest partition may try)
                    for g2, _ in served_by[a.route[0].worker]:
                        if g2.indexed and g2 in first:
                            repartitioned(tr, g2, first[g2], t, seq)
    heap.fn = None


def repartitioned(tr: _Tries, g: _Group, k: int, t: float, seq: int) -> None:
    """After a dispatch by the model of key ``(t, seq)`` (:func:`add_try`'s): if ``g``'s
    fastest idle worker is now of another partition, the models waiting on the old one
    whose keys come after it join the tries (``tr``)."""
    idle = g.idle
    p = g.part[idle.first_from(0)] if idle.count else -1
    if p == g.p0:
        return
    h = g.heaps.get(g.p0)
    g.p0 = p
    m = tr.n_models
    for e in h if h is not None else ():
        st = e[2]
        if e[3] == st.stamp and st.queue and st.mark != tr.mark:
            d = st.queue[0][0]
            if d > t or (d == t and k * m + st.index > seq):
                add_try(tr.heap, st, k, m, tr.mark)


class EdfAdaptive(BaseScheduler):
    # a stage end skips the models whose try would only decide again to wait; False: it
    # tries every model the freed workers serve with requests waiting (the plain rule,
    # which ``tests/scheduling/test_spared_tries.py`` holds the skipping to)
    spare = True
    # groups of at least this many models keep the index of those that wait (``_Group``):
    # a stage end then does not look at them one by one
    index_from = 8

    def __init__(
        self,
        max_batch: Annotated[int | None, Range(1)] = None,
        margin_s: Annotated[float, Range(0, 10, hi_open=True)] = 0.0,
    ) -> None:
        """``margin_s``: a batch that waits to fill goes this much before the last moment
        (on a wall clock timers fire late; ``hetserve serve`` sets 10 ms)."""
        super().__init__()
        self.max_batch_param = max_batch
        self.margin_s = float(margin_s)

    def start(self, view: ClusterView, plan: Plan, now: float) -> list[Action]:
        super().start(view, plan, now)
        self.pools = Pools(view, plan)
        self.models: dict[str, _ModelState] = {}
        groups: dict[tuple[WorkerId, ...], _Group] = {}
        for index, (m, mp) in enumerate(plan.models.items()):
            ws = self.pools.whole_model_workers(m)
            mb = self.max_batch_param or max(p.batch for p in mp.pipelines)
            # fastest first (batch-1 latency: a table's first entry), ties by plan order
            tables = view.latency_tables(m, ws, mb)
            order = sorted(range(len(ws)), key=[t[0] for t in tables].__getitem__)
            ws = [ws[i] for i in order]
            g = groups.get(tuple(ws))
            if g is None:
                g = groups[tuple(ws)] = _Group(len(ws))
            st = _ModelState(
                m, ws, [tables[i] for i in order], mp.pipelines[0].stages[0].blocks, g, index
            )
            g.models.append(st)
            self.models[m] = st
        # per worker: the groups it is in, each with the worker's place in its idle set
        self.served_by: dict[WorkerId, list[tuple[_Group, int]]] = {}
        for ws, g in groups.items():
            g.indexed = self.spare and len(g.models) >= self.index_from
            parts: dict[tuple[int, ...], int] = {}
            # (by rank: the models' latency rows there, one tuple per rank)
            kinds = [st.kind for st in g.models]  # (each as long as ``ws``)
            g.part = [parts.setdefault(col, len(parts)) for col in zip(*kinds, strict=True)]
            for r, w in enumerate(ws):
                self.served_by.setdefault(w, []).append((g, r))
        self.to_try = _Tries(self)
        return []

    def _set_busy(self, w: WorkerId) -> None:
        for g, r in self.served_by.get(w, ()):
            g.idle.discard(r)

    def max_rows(self, model: str) -> int | None:
        st = self.models.get(model)
        return len(st.lat[0]) if st is not None and st.lat else None

    # ------------------------------------------------------------------ core
    def _try(self, st: _ModelState, now: float, out: list[Action]) -> None:
        """A try of ``st`` (:func:`try_model`; a test's subclass counts them here)."""
        try_model(self, st, now, out, self.margin_s)

    # ------------------------------------------------------------------ protocol
    def on_arrival(self, request: Request, now: float) -> list[Action]:
        st = self.models.get(request.model)
        if st is None:
            raise HetserveError(f"edf-adaptive: no pipeline serves model {request.model!r}")
        push(st.queue, (field(request, REQUEST_DEADLINE_S), field(request, REQUEST_ID), request))
        st.rows += field(request, REQUEST_ROWS)
        g = st.group
        if st.waiting >= 0:
            st.waiting = -1
            if g.indexed:
                st.stamp += 1
                unsettle(g, st)
        if g.idle.count == 0:
            if g.indexed:
                unsettle(g, st)
            return []
        out: list[Action] = []
        self._try(st, now, out)
        return out

    def on_timer(self, token: object, now: float) -> list[Action]:
        st, at = token  # type: ignore[misc]
        if not isinstance(st, _ModelState) or st.timer_at != at:
            # a stale timer: a later arrival armed an earlier one. (Compare the armed time,
            # never ``now``: on a real clock the timer fires a little after it.)
            return []
        st.timer_at = -1.0
        out: list[Action] = []
        self._try(st, now, out)
        return out

    def on_stage_done(self, report: StageReport, now: float) -> list[Action]:
        if report.kind == "stage" and not report.completed and report.reason in RETURNED:
            st = self.models[report.model]
            for r in report.requests:
                push(st.queue, (r.deadline_s, r.id, r))
                st.rows += r.rows
            st.waiting = -1
            if st.group.indexed:
                st.stamp += 1
                unsettle(st.group, st)
        out: list[Action] = []
        again = None if report.completed else self.models[report.model]
        try_freed(self.to_try, self.pools.reported(report), again, now, out)
        return out

    @staticmethod
    def _still_waits(st: _ModelState, now: float) -> bool:
        """Whether a try of ``st`` now would decide what its last one did, to wait for its
        armed timer, and change nothing: the same queue, a fastest idle worker with the
        same latencies (which worker does not matter to a wait), the timer still ahead,
        and the head's slack still enough for a batch of one more row than wait
        (``_try``'s own tests, in its own arithmetic). A worker that serves many models
        frees them all at each stage end; this spares them a try each."""
        rank = st.group.idle.first_from(0)
        if st.kind[rank] != st.waiting:
            return False
        lat, n = st.lat[rank], st.rows
        return n < len(lat) and lat[n] <= st.queue[0][0] - now and st.timer_at > now + 1e-12

    def on_worker_lost(self, worker: WorkerId, now: float) -> list[Action]:
        self.pools.lost.add(worker)
        self._set_busy(worker)  # never idle again
        return []
