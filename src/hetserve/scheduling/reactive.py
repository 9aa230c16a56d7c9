"""``reactive``: PPipe's section 7.4 baseline — every pool batches on its own, without
reservations.

Each stage of a pipeline gets a *share of the SLO*: the stage's planned latency (its
input transfer included) at the pipeline's batch size over the whole pipeline's. A request
that arrived at ``a`` with deadline ``d`` must leave stage ``s`` by
``a + (d - a) x cumulative share through s``.

- Requests of a model wait in one queue, most urgent first. When a first-stage worker of
  any of the model's pipelines is idle, it takes at once the largest batch (up to the
  pipeline's planned batch) whose stage, estimated from the stage latency alone, meets the
  most urgent request's stage deadline. It runs only that stage: an *open route* (protocol
  rule 4), after which the requests are parked on the worker.
- Parked requests join the queue of the next stage's pool (ordered by that stage's
  deadline). An idle worker of that pool takes the largest batch that meets its head's
  stage deadline, counting the uncontended transfer of the head's activations; the batch
  may gather requests parked on several workers of the previous pool. The last stage's
  deadline is the request's own.
- When even a batch of one misses its stage deadline, it still runs if the request can
  make its own deadline through the remaining stages at batch 1; otherwise it is dropped
  (``"deadline"``).

Nothing tracks when workers or links will be busy: transfers contend on shared NICs, and a
pool whose share is tight builds a queue (PPipe 7.4: 18.9 ms transfers instead of 5.1 ms).
A worker counts as busy from the moment its batch is dispatched, its input transfer
included.
"""

from __future__ import annotations

import heapq
import math

from hetserve.core.plan import Plan
from hetserve.core.requests import Request
from hetserve.scheduling.pools import DeadlineQueues, PipelinePool, Pools
from hetserve.scheduling.protocol import (
    RETURNED,
    Action,
    BaseScheduler,
    ClusterView,
    Dispatch,
    Drop,
    RouteStep,
    StageReport,
    WorkerId,
    register,
)

PoolKey = tuple[str, int, int]  # (model, pipeline index, stage)
# a later pool's queue entry: (stage deadline, request id, request, worker it is parked on)
_Entry = tuple[float, int, Request, WorkerId]


@register("reactive")
class Reactive(BaseScheduler):
    def start(self, view: ClusterView, plan: Plan, now: float) -> list[Action]:
        super().start(view, plan, now)
        self.pools = Pools(view, plan)
        self.first = DeadlineQueues(plan.models, "reactive")
        self.later: dict[PoolKey, list[_Entry]] = {}
        self.pipe: dict[tuple[str, int], PipelinePool] = {}
        self.share: dict[tuple[str, int], list[float]] = {}  # cumulative SLO share per stage
        self.serves: dict[WorkerId, list[PoolKey]] = {}
        self.busy: set[WorkerId] = set()
        self.lost: set[WorkerId] = set()
        # batch id -> (pool, worker, the workers its requests came from, by request id)
        self.where: dict[int, tuple[PoolKey, WorkerId, dict[int, WorkerId]]] = {}
        for model, pipes in self.pools.pipelines.items():
            for p in pipes:
                self.pipe[(model, p.index)] = p
                planned = []
                for s, (blocks, ws) in enumerate(p.stages):
                    t = view.stage_latency_s(model, ws[0], p.batch, blocks)
                    if s > 0:
                        t += self._transfer_s(model, p.stages[s - 1][1][0], ws[0], blocks, p.batch)
                    planned.append(t)
                    self.later[(model, p.index, s)] = []
                    for w in ws:
                        self.serves.setdefault(w, []).append((model, p.index, s))
                total = sum(planned) or 1.0
                acc, cum = 0.0, []
                for t in planned:
                    acc += t
                    cum.append(acc / total)
                cum[-1] = 1.0
                self.share[(model, p.index)] = cum
        return []

    # ------------------------------------------------------------------ estimates
    def _transfer_s(
        self, model: str, src: WorkerId, dst: WorkerId, blocks: tuple[int, int], batch: int
    ) -> float:
        """The uncontended time to move a batch's activations into ``blocks`` from src."""
        if blocks[0] == 0 or src == dst:
            return 0.0
        path = self.view.transfer_path(src, dst)
        if not path:
            return 0.0
        links = self.view.cluster.links
        bw = min(links[x].bw_gbps for x in path)
        nbytes = self.view.latency.out_bytes(model, blocks[0] - 1) * batch
        nbytes *= self.view.cut_bytes_factor
        return nbytes * 8 / (bw * 1e9) + sum(links[x].delay_s for x in path)

    def _rest_s(self, pipe: PipelinePool, stage: int, batch: int = 1) -> float:
        """Stages after ``stage`` at ``batch`` rows on each pool's first worker, transfers
        included."""
        total = 0.0
        for s in range(stage + 1, len(pipe.stages)):
            blocks, ws = pipe.stages[s]
            total += self.view.stage_latency_s(pipe.model, ws[0], batch, blocks)
            total += self._transfer_s(pipe.model, pipe.stages[s - 1][1][0], ws[0], blocks, batch)
        return total

    def _stage_deadline(self, r: Request, key: PoolKey) -> float:
        share = self.share[(key[0], key[1])][key[2]]
        return r.arrival_s + (r.deadline_s - r.arrival_s) * share

    # ------------------------------------------------------------------ batching
    def _try_pool(self, key: PoolKey, now: float, out: list[Action]) -> None:
        model, pi, s = key
        pipe = self.pipe[(model, pi)]
        blocks, workers = pipe.stages[s]
        q: list = self.first[model] if s == 0 else self.later[key]
        for w in workers:
            if not q:
                return
            if w in self.busy or w in self.lost:
                continue
            while q:
                head: Request = q[0][2]
                src = q[0][3] if s > 0 else w
                slack = self._stage_deadline(head, key) - now
                k = head.rows  # (a batch holds the head's rows at least)
                avail = self.first.rows[model] if s == 0 else sum(e[2].rows for e in q)
                b = 0
                for bs in range(min(pipe.batch, avail), k - 1, -1):
                    est = self._transfer_s(model, src, w, blocks, bs)
                    est += self.view.stage_latency_s(model, w, bs, blocks)
                    if est <= slack + 1e-12:
                        b = bs
                        break
                if b == 0:
                    one = self._transfer_s(model, src, w, blocks, k)
                    one += self.view.stage_latency_s(model, w, k, blocks)
                    if now + one + self._rest_s(pipe, s, k) <= head.deadline_s + 1e-12:
                        b = k
                    else:
                        heapq.heappop(q)
                        if s == 0:
                            self.first.rows[model] -= k
                        out.append(Drop((head,), "deadline", (one, len(q) + 1)))
                        continue
                entries, n = [], 0
                while q and n + q[0][2].rows <= b:
                    e = heapq.heappop(q)
                    entries.append(e)
                    n += e[2].rows
                if s == 0:
                    self.first.rows[model] -= n
                bid = self.new_batch_id()
                sources = {e[1]: e[3] for e in entries} if s > 0 else {}
                self.where[bid] = (key, w, sources)
                self.busy.add(w)
                reqs = tuple(e[2] for e in entries)
                out.append(Dispatch(bid, model, reqs, (RouteStep(s, w, now, blocks),)))
                break

    def _try_worker(self, w: WorkerId, now: float, out: list[Action]) -> None:
        keys = sorted(self.serves.get(w, ()), key=self._head_deadline)
        for key in keys:
            if w in self.busy:
                return
            self._try_pool(key, now, out)

    def _head_deadline(self, key: PoolKey) -> float:
        q = self.first[key[0]] if key[2] == 0 else self.later[key]
        return q[0][0] if q else math.inf

    # ------------------------------------------------------------------ callbacks
    def on_arrival(self, request: Request, now: float) -> list[Action]:
        self.first.push(request)
        out: list[Action] = []
        for p in self.pools.pipelines[request.model]:
            if not self.first[request.model]:
                break
            self._try_pool((request.model, p.index, 0), now, out)
        return out

    def on_stage_done(self, report: StageReport, now: float) -> list[Action]:
        if report.kind != "stage" or report.batch_id not in self.where:
            return []
        key, w, sources = self.where.pop(report.batch_id)
        self.busy.discard(w)
        out: list[Action] = []
        model, pi, s = key
        if report.completed and report.reason == "parked":
            nxt = (model, pi, s + 1)
            q = self.later[nxt]
            for r in report.requests:
                heapq.heappush(q, (self._stage_deadline(r, nxt), r.id, r, report.worker))
            self._try_pool(nxt, now, out)
        elif not report.completed and report.reason in RETURNED:
            if s == 0:
                self.first.requeue(report.requests)
            else:  # back to this pool's queue, still parked where they were
                q = self.later[key]
                for r in report.requests:
                    heapq.heappush(q, (self._stage_deadline(r, key), r.id, r, sources[r.id]))
        self._try_worker(w, now, out)
        return out

    def on_worker_lost(self, worker: WorkerId, now: float) -> list[Action]:
        self.lost.add(worker)
        gone: list[Request] = []
        for key, q in self.later.items():
            keep = [e for e in q if e[3] != worker]
            if len(keep) != len(q):
                gone += [e[2] for e in q if e[3] == worker]
                heapq.heapify(keep)
                self.later[key] = keep
        return [Drop(tuple(gone), "worker_lost", (worker,))] if gone else []
