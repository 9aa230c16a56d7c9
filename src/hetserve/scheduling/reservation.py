"""``reservation``: PPipe's resource-reservation-based adaptive batching (PPipe section
5.4, appendix A.3, Algorithms 1 and 2).

The scheduler keeps a reservation table for every worker slot and every link a transfer
crosses (for a flat cluster: the sender's NIC uplink and the receiver's downlink; in a
switched topology: every link of the path): when each is reserved, by which batch.

- ``earliest_slot(resources, t, duration)``: the earliest time >= t at which all of them
  are free for ``duration``.
- ``probe(pipeline, batch, now)``: side-effect free. Stage by stage, for every worker of the
  stage's pool: the earliest transfer slot on both link ends at once, then the earliest
  inference slot on the worker; greedily keep the worker with the earliest completion.
  Returns the path, the reservations it needs, the completion time and the time spent
  waiting for resources.
- ``reserve`` commits them.
- Dispatch loop (Algorithm 1), per model, requests in deadline order: choose the pipeline
  whose probe at its planned batch size waits least; from the planned batch size down, the
  largest batch whose completion meets the most urgent request's deadline; if none, drop
  that request; if fewer requests wait than that batch, wait (a timer at the last moment
  the waiting requests can still be served together); otherwise reserve and dispatch.
- Feedback correction: every ``StageReport`` moves the batch's reservation to what really
  happened, and shifts its later stages by any overrun.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from hetserve.core.plan import Plan
from hetserve.core.requests import Request
from hetserve.scheduling.pools import DeadlineQueues, PipelinePool, Pools, check_max_batch
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

_EPS = 1e-12


class ReservationTable:
    """Reserved intervals ``[start, end)`` per resource, each tagged with a batch id."""

    def __init__(self) -> None:
        self._iv: dict[str, list[tuple[float, float, int]]] = {}
        self.now = -math.inf  # intervals ending before this are dropped lazily

    def intervals(self, res: str) -> list[tuple[float, float, int]]:
        return self._iv.get(res, [])

    def forget_before(self, t: float) -> None:
        """Drop intervals that ended before ``t`` (they can no longer conflict)."""
        for res, iv in self._iv.items():
            if iv and iv[0][1] < t:
                self._iv[res] = [x for x in iv if x[1] >= t]

    def earliest_slot(self, resources: Sequence[str], t: float, duration: float) -> float:
        """Earliest time >= t at which every resource is free for ``duration``.

        Intervals may overlap (feedback correction moves them to what really happened), so
        sorted by start they are not sorted by end: each pass scans a resource's intervals
        that start before the candidate window ends (lists stay short: ``forget_before``
        drops the past)."""
        start = t
        moved = True
        while moved:
            moved = False
            for res in resources:
                iv = self._iv.get(res)
                if not iv:
                    continue
                # intervals that ended before now can never conflict again: drop them
                while iv and iv[0][1] <= self.now and iv[0][0] <= self.now:
                    iv.pop(0)
                for s_, e_, _ in iv:
                    if s_ >= start + duration - _EPS:
                        break
                    if e_ > start + _EPS:
                        start = e_
                        moved = True
        return start

    def add(self, res: str, start: float, end: float, batch: int) -> None:
        bisect.insort(self._iv.setdefault(res, []), (start, end, batch))

    def remove_batch(self, batch: int, resources: Sequence[str]) -> None:
        for res in set(resources):
            iv = self._iv.get(res)
            if iv:
                self._iv[res] = [x for x in iv if x[2] != batch]

    def replace(self, res: str, batch: int, start: float, end: float) -> None:
        """Set the batch's interval on ``res`` (feedback correction)."""
        iv = [x for x in self._iv.get(res, []) if x[2] != batch]
        bisect.insort(iv, (start, end, batch))
        self._iv[res] = iv


@dataclass
class Probe:
    pipeline: PipelinePool
    batch: int
    path: list[WorkerId]
    resv: list[tuple[str, float, float]]  # (resource, start, duration)
    finish_s: float
    wait_s: float
    stage_starts: list[float] = field(default_factory=list)


@register("reservation")
class Reservation(BaseScheduler):
    def __init__(self, max_batch: int | None = None) -> None:
        super().__init__()
        self.max_batch = check_max_batch("reservation", max_batch)

    def start(self, view: ClusterView, plan: Plan, now: float) -> list[Action]:
        super().start(view, plan, now)
        self.pools = Pools(view, plan)
        self.table = ReservationTable()
        self.queue = DeadlineQueues(plan.models, "reservation")
        self.timer_at: dict[str, float] = {}
        self.links: dict[tuple[WorkerId, WorkerId], tuple[list[str], float, float]] = {}
        self.batch_resv: dict[int, list[tuple[str, float, float, int]]] = {}  # + stage idx
        self.batch_route: dict[int, tuple[str, tuple[RouteStep, ...]]] = {}
        self._min_xfer: dict[tuple, float] = {}
        return []

    # ------------------------------------------------------------------ probe / reserve
    def _link(self, a: WorkerId, b: WorkerId) -> tuple[list[str], float, float]:
        """Links between two workers' GPUs, bottleneck Gbit/s, propagation seconds."""
        key = (a, b)
        if key not in self.links:
            path = (
                self.view.transfer_path(a, b)
                if self.view.workers[a].gpu_id != self.view.workers[b].gpu_id
                else []
            )
            links = self.view.cluster.links
            bw = min((links[x].bw_gbps for x in path), default=math.inf)
            self.links[key] = (path, bw, sum(links[x].delay_s for x in path))
        return self.links[key]

    def probe(self, pipe: PipelinePool, batch: int, now: float) -> Probe:
        lat = self.view.latency
        t_g, last = now, None
        path, resv, starts = [], [], []
        busy = 0.0
        for _si, (blocks, workers) in enumerate(pipe.stages):
            best_t, best_r, best_w, best_busy, best_start = math.inf, [], None, 0.0, 0.0
            # the best any worker of the pool could do: no waiting, the fastest transfer
            # (workers of a pool share GPU type and share, so their inference time is equal)
            l_i0 = self.view.stage_latency_s(pipe.model, workers[0], batch, blocks)
            lower = (
                t_g
                + l_i0
                + (
                    self._min_transfer(pipe, last, workers, blocks, batch)
                    if last is not None
                    else 0.0
                )
            )
            for w in workers:
                if w in self.pools.lost:
                    continue
                t, r, b = t_g, [], 0.0
                if last is not None:
                    links, bw, delay = self._link(last, w)
                    if links:
                        nbytes = (
                            lat.out_bytes(pipe.model, blocks[0] - 1)
                            * batch
                            * self.view.cut_bytes_factor
                        )
                        l_n = nbytes * 8 / (bw * 1e9) + delay
                        t = self.table.earliest_slot(links, t, l_n)
                        r += [(x, t, l_n) for x in links]
                        t += l_n
                        b += l_n
                l_i = self.view.stage_latency_s(pipe.model, w, batch, blocks)
                t = self.table.earliest_slot([w], t, l_i)
                st = t
                r.append((w, t, l_i))
                t += l_i
                b += l_i
                if t < best_t - _EPS:
                    best_t, best_r, best_w, best_busy, best_start = t, r, w, b, st
                if best_t <= lower + _EPS:
                    break  # no worker can complete earlier than without waiting
            if best_w is None:
                return Probe(pipe, batch, [], [], math.inf, math.inf)
            t_g, last = best_t, best_w
            path.append(best_w)
            resv += best_r
            starts.append(best_start)
            busy += best_busy
        return Probe(pipe, batch, path, resv, t_g, t_g - now - busy, starts)

    def _transfer_s(
        self, model: str, a: WorkerId, b: WorkerId, blocks: tuple[int, int], batch: int
    ) -> float:
        links, bw, delay = self._link(a, b)
        if not links:
            return 0.0
        nbytes = (
            self.view.latency.out_bytes(model, blocks[0] - 1) * batch * self.view.cut_bytes_factor
        )
        return nbytes * 8 / (bw * 1e9) + delay

    def _min_transfer(
        self,
        pipe: PipelinePool,
        last: WorkerId,
        workers: Sequence[WorkerId],
        blocks: tuple[int, int],
        batch: int,
    ) -> float:
        key = (pipe.model, pipe.index, last, blocks, batch)
        hit = self._min_xfer.get(key)
        if hit is None:
            hit = min(self._transfer_s(pipe.model, last, w, blocks, batch) for w in workers)
            self._min_xfer[key] = hit
        return hit

    def _reserve(self, bid: int, pr: Probe) -> None:
        entries = []
        stage = 0
        for res, start, dur in pr.resv:
            self.table.add(res, start, start + dur, bid)
            entries.append((res, start, dur, stage))
            if res == pr.path[stage]:
                stage += 1
        self.batch_resv[bid] = entries

    # ------------------------------------------------------------------ Algorithm 1
    def _try(self, model: str, now: float, out: list[Action]) -> None:
        q = self.queue[model]
        pipes = self.pools.pipelines[model]
        self.table.now = now
        while q:
            best: Probe | None = None
            for p in pipes:
                pr = self.probe(p, self._bs(p), now)
                if best is None or pr.wait_s < best.wait_s - _EPS:
                    best = pr
            assert best is not None
            chosen: Probe | None = None
            for bs in range(self._bs(best.pipeline), 0, -1):
                pr = best if bs == best.batch else self.probe(best.pipeline, bs, now)
                if pr.finish_s <= q[0][0] + _EPS:
                    chosen = pr
                    break
            if chosen is None:
                out.append(Drop((heapq.heappop(q)[2],), "deadline"))
                continue
            n = len(q)
            if n < chosen.batch:
                pr_n = self.probe(chosen.pipeline, n, now)
                slack = q[0][0] - pr_n.finish_s
                if slack > _EPS:
                    at = now + slack
                    if (
                        self.timer_at.get(model, math.inf) > at + _EPS
                        or self.timer_at.get(model, -1.0) < now
                    ):
                        self.timer_at[model] = at
                        out.append(SetTimer(at, ("reservation", model, at)))
                    return
                chosen = pr_n
            reqs = tuple(heapq.heappop(q)[2] for _ in range(chosen.batch))
            bid = self.new_batch_id()
            self._reserve(bid, chosen)
            route = tuple(
                RouteStep(si, w, chosen.stage_starts[si], blocks)
                for si, (w, (blocks, _)) in enumerate(
                    zip(chosen.path, chosen.pipeline.stages, strict=True)
                )
            )
            self.batch_route[bid] = (model, route)
            self.pools.dispatched(bid, tuple(chosen.path))
            out.append(Dispatch(bid, model, reqs, route))

    def _bs(self, p: PipelinePool) -> int:
        return min(p.batch, self.max_batch) if self.max_batch else p.batch

    # ------------------------------------------------------------------ protocol
    def on_arrival(self, request: Request, now: float) -> list[Action]:
        self.queue.push(request)
        out: list[Action] = []
        self._try(request.model, now, out)
        return out

    def on_timer(self, token: object, now: float) -> list[Action]:
        _, model, at = token  # type: ignore[misc]
        if self.timer_at.get(model) != at:
            return []
        del self.timer_at[model]
        out: list[Action] = []
        self._try(model, now, out)
        return out

    def on_stage_done(self, report: StageReport, now: float) -> list[Action]:
        if report.kind != "stage":
            return []
        self._correct(report)
        self.pools.reported(report)
        out: list[Action] = []
        if not report.completed and report.reason == "preempted":
            self.queue.requeue(report.requests)
        self._try(report.model, now, out)
        return out

    def _correct(self, r: StageReport) -> None:
        """Feedback correction: the batch's reservations follow reality."""
        entries = self.batch_resv.get(r.batch_id)
        if entries is None:
            return
        if not r.completed or r.last:
            if not r.completed:  # the rest of the batch will not run
                self.table.remove_batch(r.batch_id, [e[0] for e in entries if e[3] > r.stage])
            if r.completed:
                self.table.replace(r.worker, r.batch_id, r.start_s, r.end_s)
            del self.batch_resv[r.batch_id]
            self.batch_route.pop(r.batch_id, None)
            return
        planned_end = None
        for res, start, dur, stage in entries:
            if stage == r.stage and res == r.worker:
                planned_end = start + dur
        self.table.replace(r.worker, r.batch_id, r.start_s, r.end_s)
        if r.transfer_start_s is not None and r.transfer_end_s is not None:
            for res, _, _, stage in entries:
                if stage == r.stage and res != r.worker:
                    self.table.replace(res, r.batch_id, r.transfer_start_s, r.transfer_end_s)
        delay = r.end_s - planned_end if planned_end is not None else 0.0
        if abs(delay) > _EPS:  # later stages move with the overrun (or the gain)
            shifted = []
            for res, start, dur, stage in entries:
                if stage > r.stage:
                    self.table.replace(res, r.batch_id, start + delay, start + delay + dur)
                    shifted.append((res, start + delay, dur, stage))
                else:
                    shifted.append((res, start, dur, stage))
            self.batch_resv[r.batch_id] = shifted

    def on_worker_lost(self, worker: WorkerId, now: float) -> list[Action]:
        self.pools.lost.add(worker)
        return []
