"""Preemption at block boundaries, failed batches and lost workers."""

from __future__ import annotations

import math
from typing import Any

from hetserve.core.outcome import FAILED
from hetserve.engine.rules import PREEMPTED, lost_reason, stage_ended_report
from hetserve.scheduling.protocol import RETURNED, Preempt
from hetserve.sim.state import _AWAITING, _DONE, _PREEMPT_STOP, _Batch, _Task


class FaultsMixin:
    """The simulator's preemption and failure part (mixed into ``Simulator``)."""

    batches: dict[int, _Batch]
    workers: dict[str, Any]
    scheduler: Any
    state: list[int]
    outcome: list[int]
    reason: list[int]
    _push: Any
    _row: Any
    _apply: Any
    _reason: Any
    _try_start: Any

    def _preempt(self, p: Preempt, now: float) -> None:
        b = self.batches.get(p.batch_id)
        if b is None or not b.alive:
            return  # finished or gone: nothing to stop (a race a real system has too)
        task = b.tasks[-1]
        if task.worker.id != p.worker:
            return
        w = task.worker
        if w.running is task:
            k = 0
            elapsed = now - task.start_s
            while task.cum[k] < elapsed - 1e-12:
                k += 1
            last = task.index == len(b.route) - 1
            if k == len(task.cum) - 1 and last:
                return  # the next exit point is the end: the batch simply completes
            task.version += 1
            self._push(task.start_s + task.cum[k], _PREEMPT_STOP, task, k + 1)
        else:
            task.dead = True
            self._end_batch(b, task, now, PREEMPTED, 0)

    def _preempt_stop(self, task: _Task, blocks_done: int, now: float) -> None:
        w = task.worker
        if w.running is not task:
            return
        w.running = None
        w.busy_s += now - task.start_s
        w.busy_energy_j += task.energy_j * blocks_done / len(task.cum)
        self._row(task, now, PREEMPTED)
        task.dead = True
        self._end_batch(task.batch, task, now, PREEMPTED, blocks_done)
        self._try_start(w, now)

    def _end_batch(self, b: _Batch, task: _Task, now: float, reason: str, blocks_done: int) -> None:
        """Stop a batch before completion and report it (requests back to the scheduler
        when preempted, failed otherwise)."""
        b.alive = False
        self.batches.pop(b.id, None)
        for t in b.tasks:
            t.dead = True
        if reason in RETURNED:
            for r in b.requests:
                self.state[r.id] = _AWAITING
        else:
            ri = self._reason(reason)
            for r in b.requests:
                self.state[r.id] = _DONE
                self.outcome[r.id] = FAILED
                self.reason[r.id] = ri
        start = task.start_s if not math.isnan(task.start_s) else now
        rep = stage_ended_report(
            b.d, task.index, task.worker.id, start, now, reason, blocks_done,
            (task.transfer_start_s, task.transfer_end_s),
        )  # fmt: skip
        acts = self.scheduler.on_stage_done(rep, now)
        if acts:
            self._apply(acts, now)

    def _fail_batch(self, b: _Batch, task: _Task, reason: str, now: float) -> None:
        task.start_s = now
        self._row(task, now, "failed")
        self._end_batch(b, task, now, reason, 0)

    def _worker_lost(self, wid: str, now: float) -> None:
        """Protocol rule 9: the scheduler hears of it first, then of the batches it hit."""
        w = self.workers[wid]
        if w.lost:
            return
        w.lost = True
        acts = self.scheduler.on_worker_lost(wid, now)
        if acts:
            self._apply(acts, now)
        victims = []
        if w.running is not None:
            t = w.running
            w.running = None
            w.busy_s += now - t.start_s
            t.version += 1
            self._row(t, now, "failed")
            victims.append(t)
        victims += [t for _, _, t in w.ready if not t.dead]
        victims += [t for t in w.waiting_load if not t.dead]
        w.ready.clear()
        w.waiting_load.clear()
        for t in victims:
            if not t.dead and t.batch.alive:
                self._end_batch(t.batch, t, now, lost_reason(t.batch.route), 0)

    # ------------------------------------------------------------------ loading
