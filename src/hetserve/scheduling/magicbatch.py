"""``magicbatch``: each stream's queue on the GPU its plan assigned it (MagicBatch,
DataCom 2022, section 4: a task queue per device, batches of the planned size).

The plan's ``assignments`` bind each stream to a GPU instance (a serving group of one GPU)
with a batch size ``B``. A stream's batch leaves when ``B`` requests wait, or earlier, when
waiting longer would make the oldest miss its deadline: at ``deadline - exec(B)`` (the
planned batch's run time; a smaller batch runs no longer), less one planned batch of every
other stream on the same GPU (the slack the ``shared`` plan budgets for the batches that
may run ahead of it) and less ``margin_ms`` (2 ms: on a wall clock, dispatch and the
runtime's own work take time too). A GPU runs one batch at a time;
when several of its streams are due (streams share a GPU under the ``shared`` method), the
one whose oldest request's deadline is earliest goes first. At dispatch, requests that
cannot meet their deadline even alone are dropped (``"deadline unreachable"``), and the
batch is cut down until its oldest request meets its deadline. Requests of a stream the
plan does not place (rejected by the planner, or unknown) are dropped on arrival with the
reason; none is lost silently.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Annotated

from hetserve.core.errors import HetserveError
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
    RouteStep,
    SetTimer,
    StageReport,
    WorkerId,
    register,
)

EPS_S = 1e-9


@dataclass
class _Stream:
    name: str
    model: str
    worker: WorkerId
    batch: int
    exec_s: list[float]  # at batch sizes 1..batch (index b - 1)
    queue: deque[Request]
    timer_for: int = -1  # the head request a leave-by timer is set for
    ahead_s: float = 0.0  # one planned batch of every other stream of its GPU
    rows: int = 0  # the queue's rows together (``scheduling.rows``)

    def take(self, k: int) -> tuple[Request, ...]:
        """The oldest requests whose rows fit in ``k``, off the queue."""
        q, out, n = self.queue, [], 0
        while q and n + q[0].rows <= k:
            r = q.popleft()
            out.append(r)
            n += r.rows
        self.rows -= n
        return tuple(out)


@register("magicbatch")
class MagicBatch(BaseScheduler):
    def __init__(self, margin_ms: Annotated[float, Range(0, 1e6, hi_open=True)] = 2.0) -> None:
        super().__init__()
        self.margin_s = float(margin_ms) / 1e3

    def start(self, view: ClusterView, plan: Plan, now: float) -> list[Action]:
        super().start(view, plan, now)
        if not plan.assignments:
            raise HetserveError(
                "magicbatch: the plan has no stream assignments (make one with "
                "`hetserve plan --planner magicbatch`)"
            )
        groups = view.placement.groups
        self.streams: dict[str, _Stream] = {}
        self.on_worker: dict[WorkerId, list[_Stream]] = {}
        self.blocks = {m: (0, view.latency.num_blocks(m)) for m in plan.models}
        for a in plan.assignments.values():
            if not a.gpu:
                continue  # rejected by the planner: its requests are dropped on arrival
            ws = groups.get(a.gpu, ())
            if len(ws) != 1:
                raise HetserveError(
                    f"magicbatch: stream {a.stream} is assigned to {a.gpu}, which the "
                    f"placement binds to {len(ws)} workers (expected one GPU)"
                )
            w = ws[0]
            lat = view.latency_table(a.model, w, a.batch)
            st = _Stream(a.stream, a.model, w, a.batch, lat, deque())
            self.streams[a.stream] = st
            self.on_worker.setdefault(w, []).append(st)
        for mine in self.on_worker.values():
            for st in mine:
                st.ahead_s = sum(o.exec_s[o.batch - 1] for o in mine if o is not st)
        self.busy: dict[WorkerId, int] = {}  # worker -> running batch id
        self.lost: set[WorkerId] = set()
        return []

    def max_rows(self, model: str) -> int | None:
        """The largest batch of the model's streams (a stream's own may be smaller: a
        request larger than its stream's batch is dropped, the reason saying so)."""
        return max((st.batch for st in self.streams.values() if st.model == model), default=None)

    # ------------------------------------------------------------------ helpers
    def _leave_by(self, st: _Stream) -> float:
        return st.queue[0].deadline_s - st.exec_s[st.batch - 1] - st.ahead_s - self.margin_s

    def _due(self, st: _Stream, now: float) -> bool:
        return st.rows >= st.batch or now >= self._leave_by(st) - EPS_S

    def _try(self, worker: WorkerId, now: float, out: list[Action]) -> None:
        if worker in self.busy:
            return
        mine = self.on_worker.get(worker, [])
        for st in mine:  # hopeless requests: not even a batch of one makes it
            q = st.queue
            dead, big = [], []
            while q and (
                q[0].rows > st.batch or now + st.exec_s[q[0].rows - 1] > q[0].deadline_s + EPS_S
            ):
                r = q.popleft()
                st.rows -= r.rows
                (big if r.rows > st.batch else dead).append(r)
            if dead:
                out.append(Drop(tuple(dead), "deadline", (st.exec_s[0], len(q) + len(dead))))
            for r in big:
                out.append(Drop((r,), "rows", (st.batch,)))
        due = [st for st in mine if st.queue and self._due(st, now)]
        if due:
            st = min(due, key=lambda s: (s.queue[0].deadline_s, s.name))
            q = st.queue
            k = min(st.batch, st.rows)
            while k > q[0].rows and now + st.exec_s[k - 1] > q[0].deadline_s + EPS_S:
                k -= 1
            reqs = st.take(k)
            bid = self.new_batch_id()
            self.busy[worker] = bid
            out.append(
                Dispatch(bid, st.model, reqs, (RouteStep(0, worker, now, self.blocks[st.model]),))
            )
        for st in mine:  # a timer for each waiting head (once per head)
            if st.queue and st.timer_for != st.queue[0].id:
                st.timer_for = st.queue[0].id
                out.append(SetTimer(max(now, self._leave_by(st)), (st.name, st.queue[0].id)))

    # ------------------------------------------------------------------ protocol
    def on_arrival(self, request: Request, now: float) -> list[Action]:
        st = self.streams.get(request.stream)
        if st is None:
            a = self.plan.assignments.get(request.stream)
            why = (
                f"stream {request.stream} rejected by the plan ({a.rejected})"
                if a is not None
                else f"stream {request.stream} is not in the plan"
            )
            return [Drop((request,), "not_provisioned", (why,))]
        if st.worker in self.lost:
            return [Drop((request,), "worker_lost", (st.worker,))]
        st.queue.append(request)
        st.rows += request.rows
        out: list[Action] = []
        if st.worker not in self.busy and (len(st.queue) == 1 or self._due(st, now)):
            self._try(st.worker, now, out)
        return out

    def on_timer(self, token: object, now: float) -> list[Action]:
        name, rid = token  # type: ignore[misc]
        st = self.streams[name]
        if not st.queue or st.queue[0].id != rid:
            return []
        out: list[Action] = []
        self._try(st.worker, now, out)
        return out

    def on_stage_done(self, report: StageReport, now: float) -> list[Action]:
        if report.kind != "stage" or self.busy.get(report.worker) != report.batch_id:
            return []
        if report.completed and not report.last:
            return []
        del self.busy[report.worker]
        if not report.completed and report.reason in RETURNED and report.requests:
            st = self.streams.get(report.requests[0].stream)
            if st is None or report.worker in self.lost:  # no other GPU serves the stream
                return [Drop(report.requests, "worker_lost", (report.worker,))]
            else:
                for r in sorted(report.requests, key=lambda r: (r.arrival_s, r.id), reverse=True):
                    st.queue.appendleft(r)
                    st.rows += r.rows
                st.timer_for = -1
        out: list[Action] = []
        if report.worker not in self.lost:
            self._try(report.worker, now, out)
        return out

    def on_worker_lost(self, worker: WorkerId, now: float) -> list[Action]:
        self.lost.add(worker)
        out: list[Action] = []
        for st in self.on_worker.get(worker, []):
            if st.queue:
                out.append(Drop(tuple(st.queue), "worker_lost", (worker,)))
                st.queue.clear()
                st.rows = 0
        return out
