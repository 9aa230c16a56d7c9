"""The end of a run: what is still held becomes failed or dropped, then the result."""

from __future__ import annotations

from typing import Any

import numpy as np

from hetserve.core.outcome import DROPPED, FAILED, PENDING
from hetserve.sim.result import SimResult
from hetserve.sim.state import _DONE


class EndMixin:
    """The simulator's end-of-run part (mixed into ``Simulator``)."""

    batches: dict[int, Any]
    workers: dict[str, Any]
    cluster: Any
    trace: Any
    links: Any
    state: list[int]
    outcome: list[int]
    reason: list[int]
    reasons: list[str]
    dispatch_s: list[float]
    start_s: list[float]
    finish_s: list[float]
    batch_of: list[int]
    rows: list[tuple]
    _row: Any
    _reason: Any

    def _close(self, end: float) -> None:
        """Requests still held at the horizon end as dropped/failed, never pending."""
        for b in list(self.batches.values()):
            task = b.tasks[-1]
            if task.worker.running is task:
                task.worker.busy_s += end - task.start_s
                task.worker.running = None
                self._row(task, end, "failed")
            b.alive = False
            ri = self._reason("simulation ended")
            for r in b.requests:
                self.state[r.id] = _DONE
                self.outcome[r.id] = FAILED
                self.reason[r.id] = ri
        self.batches.clear()
        if PENDING in self.outcome:
            ri = self._reason("unserved at end of simulation")
            for i, o in enumerate(self.outcome):
                if o == PENDING:
                    self.outcome[i] = DROPPED
                    self.reason[i] = ri

    def _result(self, end: float) -> SimResult:
        # every GPU idles all the time, except one without workers in a cluster that parks them
        serving = {w.gpu_id for w in self.workers.values()}
        gpu_energy: dict[str, float] = {
            g.id: g.type.idle_w * end if g.id in serving or not self.cluster.park_idle_gpus else 0.0
            for g in self.cluster.gpus
        }
        worker_energy: dict[str, float] = {}
        for w in self.workers.values():
            idle_share_w = w.gpu.idle_w / w.info.share
            gpu_energy[w.gpu_id] += w.busy_energy_j - idle_share_w * w.busy_s
            worker_energy[w.id] = w.busy_energy_j + idle_share_w * (end - w.busy_s)
        return SimResult(
            trace=self.trace,
            end_s=end,
            dispatch_s=np.asarray(self.dispatch_s),
            start_s=np.asarray(self.start_s),
            finish_s=np.asarray(self.finish_s),
            outcome=np.asarray(self.outcome, dtype=np.int8),
            reason=np.asarray(self.reason, dtype=np.int16),
            reasons=tuple(self.reasons),
            batch=np.asarray(self.batch_of, dtype=np.int64),
            stage_rows=self.rows,
            worker_busy_s={w.id: w.busy_s for w in self.workers.values()},
            worker_gpu={w.id: w.gpu.name for w in self.workers.values()},
            worker_share={w.id: w.info.share for w in self.workers.values()},
            gpu_energy_j=gpu_energy,
            worker_energy_j=worker_energy,
            link_log=self.links.log,
        )
