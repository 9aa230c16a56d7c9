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

import functools
import math
from dataclasses import dataclass, field
from typing import Annotated, Any

from hetserve.core.plan import Plan
from hetserve.core.requests import Request
from hetserve.scheduling.params import Range
from hetserve.scheduling.pools import (
    DeadlineQueues,
    PipelinePool,
    Pools,
)
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
from hetserve.scheduling.reservation_core import Xfers
from hetserve.scheduling.reservation_table import ReservationTable
from hetserve.scheduling.reservation_table import core as _core

_EPS = 1e-12


@dataclass(slots=True)
class Probe:
    pipeline: PipelinePool
    batch: int
    path: list[int]  # a worker per stage, by its number in ``table``
    resv: list[tuple[int, float, float]]  # (resource number, start, duration)
    finish_s: float
    wait_s: float
    stage_starts: list[float] = field(default_factory=list)


@register("reservation")
class Reservation(BaseScheduler):
    def __init__(
        self,
        max_batch: Annotated[int | None, Range(1)] = None,
        margin_s: Annotated[float, Range(0, 10, hi_open=True)] = 0.0,
    ) -> None:
        """``margin_s``: a batch that waits to fill goes this much before the last moment
        (on a wall clock timers fire late; ``hetserve serve`` sets 10 ms)."""
        super().__init__()
        self.max_batch = max_batch
        self.margin_s = float(margin_s)

    def start(self, view: ClusterView, plan: Plan, now: float) -> list[Action]:
        super().start(view, plan, now)
        self.pools = Pools(view, plan)
        # resources by number (``reservation_core``): the workers first, by name (the
        # pool orders break ties by number, as they did by name), then links as met
        self.table = ReservationTable()
        self.table.name_all(sorted(view.workers))
        core = self.table.core
        self.queue = DeadlineQueues(plan.models, "reservation")
        self.timer_at: dict[str, float] = {}
        self.links: dict[tuple[WorkerId, WorkerId], tuple[list[str], float, float]] = {}
        self.batch_resv: dict[int, list[tuple[int, float, float, int]]] = {}  # + stage idx
        self.batch_route: dict[int, tuple[str, tuple[RouteStep, ...]]] = {}
        self._stages: dict[tuple[str, int, int], list[tuple[float, float, Any]]] = {}
        # per pipeline, per stage: its transfers by the previous stage's worker
        # (and the call that makes one that is not there yet)
        self._xfers: dict[tuple[str, int], tuple[list[dict[int, Xfers]], Any]] = {}
        self._lost: set[int] = set()
        # a worker never runs anything shorter than its shortest stage: gaps shorter than
        # that are as good as taken (what keeps the table's fast path exact)
        self._orders: dict[tuple[WorkerId, ...], Any] = {}
        ids = self.table.ids
        min_gap: dict[WorkerId, float] = {}
        for pipes in self.pools.pipelines.values():
            for p in pipes:
                self._xfers[(p.model, p.index)] = (
                    [{} for _ in p.stages],
                    functools.partial(self._stage_xfers, p),
                )
                for blocks, workers in p.stages:
                    if workers not in self._orders:
                        order = self._orders[workers] = _core.PoolOrder([ids[w] for w in workers])
                        for w in workers:
                            core.orders_of[ids[w]].append(order)
                    for w in workers:
                        lat = view.latency_table(p.model, w, self._bs(p), blocks)
                        min_gap[w] = min(min_gap.get(w, math.inf), *lat)
        for w in sorted(min_gap):
            core.set_min_gap(ids[w], min_gap[w])
        for workers, order in self._orders.items():
            order.min_gap = max(min_gap[w] for w in workers)
        for w, until in view.busy_until_s.items():  # the previous plan's work (a switch)
            if until > now and w in view.workers:
                self.table.add(w, now, until, ("busy", w))
        self._planned = {
            m: [(p, self._bs(p)) for p in pipes] for m, pipes in self.pools.pipelines.items()
        }
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

    def _stage_info(self, pipe: PipelinePool, batch: int) -> list[tuple[float, float, Any]]:
        """Per stage: inference seconds (equal over the pool: one GPU type and share), bits
        crossing the cut into it, the pool's order."""
        key = (pipe.model, pipe.index, batch)
        info = self._stages.get(key)
        if info is None:
            info = []
            lat = self.view.latency
            for blocks, workers in pipe.stages:
                l_i = self.view.stage_latency_s(pipe.model, workers[0], batch, blocks)
                bits = (
                    lat.out_bytes(pipe.model, blocks[0] - 1) * batch * self.view.cut_bytes_factor
                    if blocks[0] > 0
                    else 0.0
                ) * 8
                info.append((l_i, bits, self._orders[workers]))
            self._stages[key] = info
        return info

    def _stage_xfers(self, pipe: PipelinePool, si: int, last: int) -> Xfers:
        """Transfers from worker ``last`` into each worker of stage ``si``, with the least
        s/bit and delay over them (a lower bound on any transfer's time)."""
        table = self.table
        src = table.names[last]
        xs = {}
        for w in pipe.stages[si][1]:
            links, bw, delay = self._link(src, w)
            r = table.ids[w]
            link_ids = tuple(table.id_of(x) for x in links)
            xs[r] = (r, link_ids, 1.0 / (bw * 1e9) if links else 0.0, delay)
        hit = (
            xs,
            min((x[2] for x in xs.values()), default=0.0),
            min((x[3] for x in xs.values()), default=0.0),
        )
        self._xfers[(pipe.model, pipe.index)][0][si][last] = hit
        return hit

    def probe(self, pipe: PipelinePool, batch: int, now: float) -> Probe:
        """PPipe Algorithm 2 (``reservation_core.probe``): stage by stage, the worker of
        the pool that completes first (transfer on both link ends at once, then
        inference); side-effect free."""
        info = self._stages.get((pipe.model, pipe.index, batch)) or self._stage_info(pipe, batch)
        xfers, miss = self._xfers[(pipe.model, pipe.index)]
        path, resv, finish, wait, starts = _core.probe(
            self.table.core, info, xfers, miss, self._lost, now
        )
        return Probe(pipe, batch, path, resv, finish, wait, starts)

    def reserve(self, bid: int, pr: Probe) -> None:
        """Commit a probe's reservations for batch ``bid`` (PPipe Algorithm 2, reserve)."""
        self.batch_resv[bid] = self.table.core.reserve(bid, pr.resv, pr.path)

    # ------------------------------------------------------------------ Algorithm 1
    def _try(self, model: str, now: float, out: list[Action]) -> None:
        q = self.queue[model]
        if not q:
            return
        pipes = self._planned[model]
        probe = self.probe
        self.table.core.now = now  # (the core itself: no property call on the hot path)
        while q:
            # step 1: the pipeline whose probe at its planned batch size waits least
            firsts = [probe(p, bs, now) for p, bs in pipes]
            best = firsts[0]
            for pr in firsts:
                if pr.wait_s < best.wait_s - _EPS:
                    best = pr
            # step 2: from there down, the largest batch that meets the head's deadline
            head = q[0][0] + _EPS
            least = q[0][2].rows  # (a batch holds the head's rows at least)
            chosen = self._largest_in_time(best, head, now, least)
            if chosen is None and len(firsts) > 1:
                # not even batch 1 makes it there: before dropping the head, the other
                # pipelines that are free right now (a request that waited for a fuller
                # batch on one pipeline may still fit another that sits idle)
                for pr in firsts:
                    if pr is not best and pr.wait_s <= _EPS:
                        chosen = self._largest_in_time(pr, head, now, least)
                        if chosen is not None:
                            break
            if chosen is None:
                out.append(Drop((self.queue.pop_head(model),), "deadline"))
                continue
            n = self.queue.rows[model]
            if n < chosen.batch:
                pr_n = probe(chosen.pipeline, n, now)
                slack = q[0][0] - pr_n.finish_s - self.margin_s
                if slack > _EPS:  # wait till the last moment the n can still make it
                    at = now + slack
                    t_at = self.timer_at.get(model)
                    if t_at is None or t_at > at + _EPS or t_at < now:
                        self.timer_at[model] = at
                        out.append(SetTimer(at, ("reservation", model, at)))
                    return
                chosen = pr_n
            reqs, taken = self.queue.pop(model, chosen.batch)
            if taken < chosen.batch:  # (the next request's rows did not fit)
                chosen = probe(chosen.pipeline, taken, now)
            bid = self.new_batch_id()
            self.reserve(bid, chosen)
            names = self.table.names
            starts = chosen.stage_starts
            stages = chosen.pipeline.stages
            route = tuple([
                RouteStep(si, names[w], starts[si], stages[si][0])
                for si, w in enumerate(chosen.path)
            ])  # fmt: skip
            self.batch_route[bid] = (model, route)
            out.append(Dispatch(bid, model, reqs, route))

    def _largest_in_time(
        self, first: Probe, head_s: float, now: float, least: int = 1
    ) -> Probe | None:
        """Algorithm 1, step 2: from ``first``'s batch size down to ``least`` (the head's
        rows), the first probe of its pipeline that completes by ``head_s``."""
        if first.batch < least:  # the head alone is larger than the planned batch
            pr = self.probe(first.pipeline, least, now)
            return pr if pr.finish_s <= head_s else None
        if first.finish_s <= head_s:
            return first
        for bs in range(first.batch - 1, least - 1, -1):
            pr = self.probe(first.pipeline, bs, now)
            if pr.finish_s <= head_s:
                return pr
        return None

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
        changed = self._correct(report)  # (the tables say who is busy: no counts kept)
        if not report.completed and report.reason in RETURNED:
            self.queue.requeue(report.requests)
            changed = True
        if not changed:
            # everything ran as reserved: nothing a new decision could use (Algorithm 1
            # runs on arrivals, at the wake-up timer and when resources change)
            return []
        out: list[Action] = []
        self._try(report.model, now, out)
        return out

    def _correct(self, r: StageReport) -> bool:
        """Feedback correction: the batch's reservations follow reality. The reported
        stage's worker and transfer move to when they really ran; later stages move by the
        stage's overrun (or gain), or are released if the batch stops here. Returns whether
        any reservation moved."""
        bid = r.batch_id
        entries = self.batch_resv.get(bid)
        if entries is None:
            return False
        xs, xe = r.transfer_start_s, r.transfer_end_s
        has_x = xs is not None and xe is not None
        changed, keep = self.table.core.correct(
            bid, entries, r.stage, self.table.ids[r.worker], r.start_s, r.end_s,
            xs if has_x else 0.0, xe if has_x else 0.0, has_x, r.completed, r.last,
        )  # fmt: skip
        if keep is None:
            del self.batch_resv[bid]
            self.batch_route.pop(bid, None)
        elif keep is not entries:
            self.batch_resv[bid] = keep
        return changed

    def on_worker_lost(self, worker: WorkerId, now: float) -> list[Action]:
        self.pools.lost.add(worker)
        self._lost.add(self.table.id_of(worker))  # (a worker it never reserved: a new number)
        return []
