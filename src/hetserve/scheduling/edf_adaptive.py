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

from hetserve.core.errors import HetserveError
from hetserve.core.plan import Plan
from hetserve.core.requests import Request
from hetserve.scheduling.pools import Pools
from hetserve.scheduling.protocol import (
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


@register("edf-adaptive")
class EdfAdaptive(BaseScheduler):
    def __init__(self, max_batch: int | None = None) -> None:
        super().__init__()
        if max_batch is not None and max_batch < 1:
            raise HetserveError("edf-adaptive: max_batch must be >= 1")
        self.max_batch_param = max_batch

    def start(self, view: ClusterView, plan: Plan, now: float) -> list[Action]:
        super().start(view, plan, now)
        self.pools = Pools(view, plan)
        self.queue: dict[str, list[tuple[float, int, Request]]] = {m: [] for m in plan.models}
        self.workers: dict[str, list[WorkerId]] = {}
        self.lat: dict[tuple[str, WorkerId], list[float]] = {}
        self.blocks: dict[str, tuple[int, int]] = {}
        for m, mp in plan.models.items():
            ws = self.pools.whole_model_workers(m)
            mb = self.max_batch_param or max(p.batch for p in mp.pipelines)
            self.blocks[m] = mp.pipelines[0].stages[0].blocks
            # fastest first (batch-1 latency), ties by plan order
            ws.sort(key=lambda w, m=m: view.stage_latency_s(m, w, 1))
            self.workers[m] = ws
            for w in ws:
                self.lat[(m, w)] = view.latency_table(m, w, mb)
        self.timer_version: dict[str, int] = dict.fromkeys(plan.models, 0)
        self.timer_at: dict[str, float] = {}
        self.idle_count: dict[str, int] = {m: len(ws) for m, ws in self.workers.items()}
        return []

    # ------------------------------------------------------------------ core
    def _try(self, model: str, now: float, out: list[Action]) -> None:
        q = self.queue[model]
        pools = self.pools
        while q:
            w = None
            for cand in self.workers[model]:
                if pools.outstanding[cand] == 0 and cand not in pools.lost:
                    w = cand
                    break
            if w is None:
                return
            lat = self.lat[(model, w)]
            slack = q[0][0] - now
            if lat[0] > slack:
                _, _, r = heapq.heappop(q)
                out.append(Drop((r,), "deadline"))
                continue
            b_max = bisect.bisect_right(lat, slack)  # lat is non-decreasing in batch size
            n = len(q)
            if n < b_max:
                t_wait = q[0][0] - lat[n - 1]
                if t_wait > now + 1e-12:
                    if self.timer_at.get(model) != t_wait:
                        self.timer_version[model] += 1
                        self.timer_at[model] = t_wait
                        out.append(SetTimer(t_wait, (model, self.timer_version[model])))
                    return
                b = n
            else:
                b = b_max
            reqs = tuple(heapq.heappop(q)[2] for _ in range(b))
            bid = self.new_batch_id()
            pools.dispatched(bid, (w,))
            out.append(Dispatch(bid, model, reqs, (RouteStep(0, w, now, self.blocks[model]),)))

    # ------------------------------------------------------------------ protocol
    def on_arrival(self, request: Request, now: float) -> list[Action]:
        q = self.queue.get(request.model)
        if q is None:
            raise HetserveError(f"edf-adaptive: no pipeline serves model {request.model!r}")
        heapq.heappush(q, (request.deadline_s, request.id, request))
        out: list[Action] = []
        self._try(request.model, now, out)
        return out

    def on_timer(self, token: object, now: float) -> list[Action]:
        model, version = token  # type: ignore[misc]
        if version != self.timer_version[model]:
            return []
        self.timer_at.pop(model, None)
        out: list[Action] = []
        self._try(model, now, out)
        return out

    def on_stage_done(self, report: StageReport, now: float) -> list[Action]:
        if report.kind == "stage" and not report.completed and report.reason == "preempted":
            q = self.queue[report.model]
            for r in report.requests:
                heapq.heappush(q, (r.deadline_s, r.id, r))
        freed = self.pools.reported(report)
        out: list[Action] = []
        models = {m for w in freed for m in self.pools.models_of.get(w, [])}
        if not report.completed:
            models.add(report.model)
        for m in sorted(
            models, key=lambda m: self.queue[m][0][0] if self.queue[m] else float("inf")
        ):
            self._try(m, now, out)
        return out

    def on_worker_lost(self, worker: WorkerId, now: float) -> list[Action]:
        self.pools.lost.add(worker)
        return []
