"""Preemption at block boundaries, failed batches and lost workers."""

from __future__ import annotations

import math

from hetserve.core.errors import HetserveError
from hetserve.core.outcome import FAILED
from hetserve.engine.rules import PREEMPTED, lost_reason, stage_ended_report
from hetserve.scheduling.protocol import RETURNED, Preempt
from hetserve.sim.ledger import Ledger
from hetserve.sim.loader import Report, Resume
from hetserve.sim.result import Recorder
from hetserve.sim.state import _PREEMPT_STOP, _WORKER_LOST, Events, _Batch, _Task, _Worker


class Faults:
    """The simulator's preemption and failure part: the failures to inject, and how a
    batch ends before completion (its requests back to the scheduler when preempted,
    failed otherwise)."""

    def __init__(
        self,
        workers: dict[str, _Worker],
        batches: dict[int, _Batch],
        ledger: Ledger,
        events: Events,
        recorder: Recorder,
        report: Report,
        resume: Resume,
    ) -> None:
        self.workers = workers
        self.batches = batches
        self.ledger = ledger
        self.events = events
        self.recorder = recorder
        self.report = report
        self.resume = resume
        self.failures: list[tuple[float, str]] = []

    def fail_worker(self, worker: str, at_s: float) -> None:
        """Lose a worker at a given time (failure injection)."""
        if worker not in self.workers:
            raise HetserveError(f"no worker {worker!r}")
        self.failures.append((at_s, worker))

    def schedule(self) -> None:
        """Put the injected failures on the event queue (at the start of a run)."""
        for at, wid in self.failures:
            self.events.push(at, _WORKER_LOST, wid, None)

    def preempt(self, p: Preempt, now: float) -> None:
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
            self.events.push(task.start_s + task.cum[k], _PREEMPT_STOP, task, k + 1)
        else:
            task.dead = True
            self.end_batch(b, task, now, PREEMPTED, 0)

    def preempt_stop(self, task: _Task, blocks_done: int, now: float) -> None:
        w = task.worker
        if w.running is not task:
            return
        w.running = None
        w.busy_s += now - task.start_s
        w.busy_energy_j += task.energy_j * blocks_done / len(task.cum)
        self.recorder.row(task, now, PREEMPTED)
        task.dead = True
        self.end_batch(task.batch, task, now, PREEMPTED, blocks_done)
        self.resume(w, now)

    def end_batch(self, b: _Batch, task: _Task, now: float, reason: str, blocks_done: int) -> None:
        """Stop a batch before completion and report it."""
        b.alive = False
        self.batches.pop(b.id, None)
        for t in b.tasks:
            t.dead = True
        if reason in RETURNED:
            self.ledger.give_back(b.requests)
        else:
            self.ledger.end(b.requests, FAILED, reason)
        start = task.start_s if not math.isnan(task.start_s) else now
        rep = stage_ended_report(
            b.d, task.index, task.worker.id, start, now, reason, blocks_done,
            (task.transfer_start_s, task.transfer_end_s),
        )  # fmt: skip
        self.report(rep, now)

    def fail_batch(self, b: _Batch, task: _Task, reason: str, now: float) -> None:
        task.start_s = now
        self.recorder.row(task, now, "failed")
        self.end_batch(b, task, now, reason, 0)

    def worker_lost(self, wid: str, now: float, on_lost: Resume) -> None:
        """Protocol rule 9: the scheduler hears of it first (``on_lost``), then of the
        batches it hit."""
        w = self.workers[wid]
        if w.lost:
            return
        w.lost = True
        on_lost(w, now)
        victims = []
        if w.running is not None:
            t = w.running
            w.running = None
            w.busy_s += now - t.start_s
            t.version += 1
            self.recorder.row(t, now, "failed")
            victims.append(t)
        victims += [t for _, _, t in w.ready if not t.dead]
        victims += [t for t in w.waiting_load if not t.dead]
        w.ready.clear()
        w.waiting_load.clear()
        for t in victims:
            if not t.dead and t.batch.alive:
                self.end_batch(t.batch, t, now, lost_reason(t.batch.route), 0)

    def close(self, end: float) -> None:
        """The batches still held at the horizon fail, their running stages cut there."""
        for b in list(self.batches.values()):
            task = b.tasks[-1]
            if task.worker.running is task:
                task.worker.busy_s += end - task.start_s
                task.worker.running = None
                self.recorder.row(task, end, "failed")
            b.alive = False
            self.ledger.end(b.requests, FAILED, "simulation ended")
        self.batches.clear()
