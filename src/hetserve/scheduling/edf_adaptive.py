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
"""

from __future__ import annotations

import bisect
import heapq
from typing import Annotated

from hetserve.core.errors import HetserveError
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
    register,
)
from hetserve.scheduling.rows import pop_edf

# actions made without their NamedTuple constructor (a Python call through ``type``: half
# of what making one costs) on the hot path, as the engine kernel makes its reports
_new = tuple.__new__


class _ModelState:
    """Per-model state, kept in one object so the hot path does few dict lookups."""

    __slots__ = (
        "blocks", "idle", "kind", "lat", "name", "queue", "rank", "rows", "timer_at", "waiting",
        "workers",
    )  # fmt: skip

    def __init__(
        self, name: str, workers: list[WorkerId], lat: list[list[float]], blocks: tuple[int, int]
    ) -> None:
        self.name = name
        self.workers = workers  # fastest first
        self.lat = lat  # by rank: latency at batch 1..max_batch
        rows: dict[tuple[float, ...], int] = {}  # by rank: which latency row (GPU type)
        self.kind = [rows.setdefault(tuple(x), len(rows)) for x in lat]
        self.rank = {w: i for i, w in enumerate(workers)}
        # the idle workers as a bit set of ranks (bit r: rank r idle): marking a worker
        # busy or idle is one integer operation, the fastest idle one the lowest set bit
        self.idle = (1 << len(workers)) - 1
        self.queue: list[tuple[float, int, Request]] = []
        self.rows = 0  # the queue's rows together (``scheduling.rows``)
        self.blocks = blocks
        self.timer_at = -1.0  # the armed timer's time (-1: none)
        # the latency row (``kind``) of the fastest idle worker when the last try decided to
        # wait for the timer (-1: it did not, or the queue changed since): while the
        # fastest idle worker has that row and the queue is the same, a new try waits too
        # until the head could no longer take a batch larger than the queue
        # (``EdfAdaptive._still_waits``)
        self.waiting = -1


@register("edf-adaptive")
class EdfAdaptive(BaseScheduler):
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
        # per worker: the models it serves, each with the worker's bit in its idle set
        self.served_by: dict[WorkerId, list[tuple[_ModelState, int]]] = {}
        for m, mp in plan.models.items():
            ws = self.pools.whole_model_workers(m)
            mb = self.max_batch_param or max(p.batch for p in mp.pipelines)
            # fastest first (batch-1 latency), ties by plan order
            ws.sort(key=lambda w, m=m: view.stage_latency_s(m, w, 1))
            st = _ModelState(
                m, ws, [view.latency_table(m, w, mb) for w in ws], mp.pipelines[0].stages[0].blocks
            )
            self.models[m] = st
            for w in ws:
                self.served_by.setdefault(w, []).append((st, 1 << st.rank[w]))
        return []

    def _set_busy(self, w: WorkerId) -> None:
        for st, bit in self.served_by.get(w, ()):
            if st.idle & bit:
                st.idle ^= bit

    def _set_idle(self, w: WorkerId) -> None:
        for st, bit in self.served_by.get(w, ()):
            st.idle |= bit

    def max_rows(self, model: str) -> int | None:
        st = self.models.get(model)
        return len(st.lat[0]) if st is not None and st.lat else None

    # ------------------------------------------------------------------ core
    def _try(self, st: _ModelState, now: float, out: list[Action]) -> None:
        q = st.queue
        if not st.idle:  # nothing to decide with (what it waited for still holds)
            return
        st.waiting = -1
        while q and st.idle:
            idle = st.idle
            rank = (idle & -idle).bit_length() - 1  # the fastest idle worker
            lat = st.lat[rank]
            head_deadline = q[0][0]
            slack = head_deadline - now
            n = st.rows
            unit = n == len(q)  # every waiting request one row
            k = 1 if unit else q[0][2].rows
            if lat[0] > slack if k == 1 else k > len(lat) or lat[k - 1] > slack:
                # it cannot make it, even alone
                head = heapq.heappop(q)[2]
                st.rows -= k
                if k <= len(lat):
                    out.append(_new(Drop, ((head,), "deadline", (lat[k - 1], len(q) + 1))))
                else:
                    out.append(Drop((head,), "rows", (len(lat),)))
                continue
            b_max = bisect.bisect_right(lat, slack)  # lat is non-decreasing in batch size
            if n < b_max:
                t_wait = head_deadline - lat[n - 1] - self.margin_s
                if t_wait > now + 1e-12:
                    if st.timer_at != t_wait:
                        # the token names the model's state and the time; only the
                        # latest armed time counts
                        st.timer_at = t_wait
                        out.append(_new(SetTimer, (t_wait, (st, t_wait))))
                    st.waiting = st.kind[rank]
                    return
                b = n
            else:
                b = b_max
            w = st.workers[rank]
            if unit:  # the plain pops
                reqs = tuple([heapq.heappop(q)[2] for _ in range(b)])
            else:
                reqs, b = pop_edf(q, b, n)
            st.rows -= b
            bid = self.new_batch_id()
            self.pools.dispatched(bid, (w,))
            self._set_busy(w)
            route = (_new(RouteStep, (0, w, now, st.blocks)),)
            out.append(_new(Dispatch, (bid, st.name, reqs, route)))

    # ------------------------------------------------------------------ protocol
    def on_arrival(self, request: Request, now: float) -> list[Action]:
        st = self.models.get(request.model)
        if st is None:
            raise HetserveError(f"edf-adaptive: no pipeline serves model {request.model!r}")
        heapq.heappush(st.queue, (request.deadline_s, request.id, request))
        st.rows += request.rows
        st.waiting = -1
        if not st.idle:
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
                heapq.heappush(st.queue, (r.deadline_s, r.id, r))
                st.rows += r.rows
            st.waiting = -1
        freed = self.pools.reported(report)
        out: list[Action] = []
        # the models that may dispatch now: those the freed workers serve with requests
        # waiting (a model with none has nothing to decide: O(1) each, not a _try call)
        # (a dict: first-seen order, and membership in O(1) where a worker serves many)
        seen: dict[_ModelState, None] = {}
        for w in freed:
            for st, bit in self.served_by.get(w, ()):
                st.idle |= bit
                if st.queue:
                    seen[st] = None
        st = self.models[report.model]
        if not report.completed and st.queue:
            seen[st] = None
        states = list(seen)
        if len(states) > 1:
            states.sort(key=lambda st: st.queue[0][0])
        for st in states:  # (an earlier one's dispatch may have taken the freed worker)
            if st.idle and (st.waiting < 0 or not self._still_waits(st, now)):
                self._try(st, now, out)
        return out

    @staticmethod
    def _still_waits(st: _ModelState, now: float) -> bool:
        """Whether a try of ``st`` now would decide what its last one did, to wait for its
        armed timer, and change nothing: the same queue, a fastest idle worker with the
        same latencies (which worker does not matter to a wait), the timer still ahead,
        and the head's slack still enough for a batch of one more row than wait
        (``_try``'s own tests, in its own arithmetic). A worker that serves many models
        frees them all at each stage end; this spares them a try each."""
        idle = st.idle
        rank = (idle & -idle).bit_length() - 1
        if st.kind[rank] != st.waiting:
            return False
        lat, n = st.lat[rank], st.rows
        return n < len(lat) and lat[n] <= st.queue[0][0] - now and st.timer_at > now + 1e-12

    def on_worker_lost(self, worker: WorkerId, now: float) -> list[Action]:
        self.pools.lost.add(worker)
        self._set_busy(worker)  # never idle again
        return []
