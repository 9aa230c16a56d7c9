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

This class sets the scheduler up (pools, resources by number, each pipeline's stage
times and transfers); the table is ``reservation_slots`` (``SlotTable``, ``PoolOrder``),
the probe, Algorithm 1 and the correction ``reservation_core`` (``probe``,
``Algorithm1``): Python files that ``setup.py`` also compiles with Cython. Every protocol
call goes to the core whole.
"""

from __future__ import annotations

import functools
import math
from typing import Annotated, Any

from hetserve.core.plan import Plan
from hetserve.core.requests import Request
from hetserve.scheduling.params import Range
from hetserve.scheduling.pools import PipelinePool, Pools
from hetserve.scheduling.protocol import (
    Action,
    BaseScheduler,
    ClusterView,
    StageReport,
    WorkerId,
    register,
)
from hetserve.scheduling.reservation_core import Into
from hetserve.scheduling.reservation_table import ReservationTable
from hetserve.scheduling.reservation_table import core as _core
from hetserve.scheduling.reservation_table import slots as _slots


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
        self.algorithm: Any = None  # (``start`` makes it: ``reservation_core.Algorithm1``)

    def start(self, view: ClusterView, plan: Plan, now: float) -> list[Action]:
        super().start(view, plan, now)
        self.pools = Pools(view, plan)
        # resources by number (``reservation_core``): the workers first, by name (the
        # pool orders break ties by number, as they did by name), then links as met
        self.table = ReservationTable()
        self.table.name_all(sorted(view.workers))
        core = self.table.core
        self.links: dict[tuple[WorkerId, WorkerId], tuple[list[str], float, float]] = {}
        # per pipeline, per stage: its transfers by the previous stage's worker
        # (and the call that makes one that is not there yet)
        # (a list by the previous worker's number, None where not made yet)
        self._xfers: dict[tuple[str, int], tuple[list[list[Into | None]], Any]] = {}
        self._lost: set[int] = set()
        # a worker never runs anything shorter than its shortest stage: gaps shorter than
        # that are as good as taken (what keeps the table's fast path exact)
        self._orders: dict[tuple[WorkerId, ...], Any] = {}
        ids = self.table.ids
        # per pool: its workers by GPU type and share, and for each the least latency of
        # any stage it serves, without the workers' overheads (a plan that puts 100
        # models on 1,000 workers: a look-up per model and kind, not per model and worker)
        kinds: dict[tuple[WorkerId, ...], dict[tuple[str, int], list[WorkerId]]] = {}
        floors: dict[tuple[WorkerId, ...], dict[tuple[str, int], float]] = {}
        for pipes in self.pools.pipelines.values():
            for p in pipes:
                self._xfers[(p.model, p.index)] = (
                    [[] for _ in p.stages],
                    functools.partial(self._stage_xfers, p),
                )
                for blocks, workers in p.stages:
                    if workers not in self._orders:
                        order = self._orders[workers] = _slots.PoolOrder([ids[w] for w in workers])
                        for w in workers:
                            core.orders_of[ids[w]].append(order)
                        kinds[workers] = view.by_kind(workers)
                        floors[workers] = {}
                    floor = floors[workers]
                    for kind, ws in kinds[workers].items():
                        t = view.least_latency_s(p.model, ws[0], self._bs(p), blocks)
                        if t < floor.get(kind, math.inf):
                            floor[kind] = t
        # per worker: the least over its pools, plus its overhead (the least entry of
        # every latency table of a stage it serves)
        over = view.stage_overhead_s
        min_gap: dict[WorkerId, float] = {}
        for workers, floor in floors.items():
            for kind, ws in kinds[workers].items():
                least = floor[kind]
                for w in ws:
                    t = least + over.get(w, 0.0) if over else least
                    if t < min_gap.get(w, math.inf):
                        min_gap[w] = t
        for w in sorted(min_gap):
            core.set_min_gap(ids[w], min_gap[w])
        for workers, order in self._orders.items():
            order.min_gap = max(min_gap[w] for w in workers)
        for w, until in view.busy_until_s.items():  # the previous plan's work (a switch)
            if until > now and w in view.workers:
                self.table.add(w, now, until, _core.PREVIOUS_PLAN_TAG)
        # Algorithm 1 and the feedback correction (``reservation_core.Algorithm1``): the
        # pipelines it probes, by model; it keeps the models' queues
        self._pipes: dict[tuple[str, int], Any] = {}
        pipes: dict[str, list[Any]] = {}
        for m, pools in self.pools.pipelines.items():
            pipes[m] = []
            for p in pools:
                xfers, miss = self._xfers[(p.model, p.index)]
                blocks = [b for b, _ in p.stages]
                info_of = functools.partial(self._stage_info, p)
                pipe = _core.Pipe(self._bs(p), blocks, info_of, xfers, miss)
                self._pipes[(p.model, p.index)] = pipe
                pipes[m].append(pipe)
        self.algorithm = _core.Algorithm1(
            core, self.table.names, self.table.ids, self._lost, self.margin_s, pipes,
            plan.models, self._next_batch,
        )  # fmt: skip
        # from now on the per-request calls are the core's own bound methods: the engine
        # calls the core directly, with no frame of this class's between (C calls where
        # compiled; the methods below are the same calls, for before ``start``)
        self.on_arrival = self.algorithm.on_arrival  # type: ignore[method-assign]
        self.on_timer = self.algorithm.on_timer  # type: ignore[method-assign]
        self.on_stage_done = self.algorithm.on_stage_done  # type: ignore[method-assign]
        return []

    @property
    def timer_at(self) -> dict[str, float]:
        """The wake-up timer each model waits for, for a look from outside: model ->
        its time (the core keeps it on the model's queue)."""
        alg = self.algorithm
        if alg is None:
            return {}
        return {m: mq.timer_at for m, mq in alg.queues.items() if mq.timer_at == mq.timer_at}

    @property
    def batch_resv(self) -> dict[int, list[tuple[int, float, float, int, tuple[int, int]]]]:
        """Each batch's reservations still held, for a look from outside: ``(resource,
        start, duration, stage, tag)`` each, in the order they were made (the core keeps
        them as rows of a ledger, ``reservation_slots.Bookings``)."""
        alg = self.algorithm
        if alg is None:
            return {}
        return {bid: alg.booked.entries(first) for bid, first in alg.resv_items()}

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
        crossing the cut into it, the pool's order (kept in the pipeline's ``infos``)."""
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
        infos = self._pipes[(pipe.model, pipe.index)].infos
        while len(infos) <= batch:
            infos.append(None)
        infos[batch] = info
        return info

    def _stage_xfers(self, pipe: PipelinePool, si: int, last: int) -> Into:
        """Transfers from worker ``last`` into each worker of stage ``si``, with the least
        s/bit and delay over them (a lower bound on any transfer's time), as the probe
        reads them (``reservation_core.Into``), kept by ``last``."""
        table = self.table
        src = table.names[last]
        into = []
        for w in pipe.stages[si][1]:
            links, bw, delay = self._link(src, w)
            link_ids = tuple(table.id_of(x) for x in links)
            into.append((table.ids[w], link_ids, 1.0 / (bw * 1e9) if links else 0.0, delay))
        hit = _core.Into(into)
        by_last = self._xfers[(pipe.model, pipe.index)][0][si]
        if last >= len(by_last):
            by_last.extend([None] * (last + 1 - len(by_last)))
        by_last[last] = hit
        return hit

    def probe(self, pipe: PipelinePool, batch: int, now: float) -> Any:
        """PPipe Algorithm 2 (``reservation_core.probe``): stage by stage, the worker of
        the pool that completes first (transfer on both link ends at once, then
        inference); side-effect free. A ``reservation_core.Probed``: the path (a worker
        per stage, by number), the reservations, the finish and the time spent waiting."""
        return self.algorithm.probe(self._pipes[(pipe.model, pipe.index)], batch, now)

    def _bs(self, p: PipelinePool) -> int:
        return min(p.batch, self.max_batch) if self.max_batch else p.batch

    def new_batch_id(self) -> int:
        """The next batch id (the core counts them: it dispatches the batches)."""
        self.algorithm.next_batch += 1
        return int(self.algorithm.next_batch)

    # ------------------------------------------------------------------ protocol
    # Each call goes to the core whole (``reservation_core.Algorithm1``): Algorithm 1,
    # the queues and the feedback correction run there, compiled where the package was
    # built with Cython, with no call back into this class per decision. (``start``
    # binds the first three to the core's methods themselves.)

    def on_arrival(self, request: Request, now: float) -> list[Action]:
        return self.algorithm.on_arrival(request, now)

    def on_timer(self, token: object, now: float) -> list[Action]:
        return self.algorithm.on_timer(token, now)

    def on_stage_done(self, report: StageReport, now: float) -> list[Action]:
        return self.algorithm.on_stage_done(report, now)

    def on_worker_lost(self, worker: WorkerId, now: float) -> list[Action]:
        self.pools.lost.add(worker)
        self._lost.add(self.table.id_of(worker))  # (a worker it never reserved: a new number)
        return []
