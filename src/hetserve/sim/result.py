"""A simulation's raw output and its CSV files (formats in ``docs/formats.md``), and the
part that records it during a run."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hetserve.core.outcome import OUTCOME_NAMES
from hetserve.engine.links import LinkTable
from hetserve.sim.energy import Energy
from hetserve.sim.ledger import Ledger
from hetserve.sim.state import _Task, _Worker
from hetserve.workload.trace import Trace

REQUEST_COLUMNS = (
    "id",
    "stream",
    "model",
    "arrival_s",
    "deadline_s",
    "dispatch_s",
    "start_s",
    "finish_s",
    "latency_ms",
    "outcome",
    "reason",
    "batch",
)
WORKER_COLUMNS = ("worker", "gpu", "share", "busy_s", "utilization", "energy_j")
BATCH_COLUMNS = (
    "batch",
    "model",
    "stage",
    "worker",
    "gpu",
    "batch_size",
    "start_s",
    "end_s",
    "status",
    "transfer_start_s",
    "transfer_end_s",
    "dispatch_s",
)


def _f(x: float | None) -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else repr(float(x))


@dataclass
class SimResult:
    trace: Trace
    end_s: float
    dispatch_s: np.ndarray
    start_s: np.ndarray
    finish_s: np.ndarray
    outcome: np.ndarray  # core.outcome codes
    reason: np.ndarray  # index into reasons
    reasons: tuple[str, ...]
    batch: np.ndarray
    # (batch, model, stage, worker, gpu, batch_size, start, end, status, t_start, t_end, disp)
    stage_rows: list[tuple]
    worker_busy_s: dict[str, float]
    worker_gpu: dict[str, str]
    worker_share: dict[str, int]
    gpu_energy_j: dict[str, float]
    worker_energy_j: dict[str, float] = field(default_factory=dict)
    link_log: dict[str, list[tuple[float, float]]] = field(default_factory=dict)

    @property
    def models(self) -> np.ndarray:
        names = np.array([s.model for s in self.trace.streams])
        return names[self.trace.stream_idx]

    def write_requests_csv(self, path: str | Path) -> None:
        tr = self.trace
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(REQUEST_COLUMNS)
            dl = tr.deadlines_s()
            for i in range(len(tr)):
                s = tr.streams[tr.stream_idx[i]]
                fin = self.finish_s[i]
                lat = "" if math.isnan(fin) else repr(float((fin - tr.time_s[i]) * 1e3))
                w.writerow(
                    (
                        i,
                        s.name,
                        s.model,
                        _f(tr.time_s[i]),
                        _f(dl[i]),
                        _f(self.dispatch_s[i]),
                        _f(self.start_s[i]),
                        _f(fin),
                        lat,
                        OUTCOME_NAMES[self.outcome[i]],
                        self.reasons[self.reason[i]],
                        int(self.batch[i]),
                    )
                )

    def write_batches_csv(self, path: str | Path) -> None:
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(BATCH_COLUMNS)
            for r in self.stage_rows:
                w.writerow(
                    (
                        r[0],
                        r[1],
                        r[2],
                        r[3],
                        r[4],
                        r[5],
                        _f(r[6]),
                        _f(r[7]),
                        r[8],
                        _f(r[9]),
                        _f(r[10]),
                        _f(r[11]),
                    )
                )

    def write_workers_csv(self, path: str | Path) -> None:
        """Per worker (virtual GPU): busy time, utilisation, energy (its slice's share of
        idle power while idle, the latency model's busy energy while running)."""
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(WORKER_COLUMNS)
            for wid, busy in self.worker_busy_s.items():
                util = busy / self.end_s if self.end_s > 0 else 0.0
                w.writerow(
                    (
                        wid,
                        self.worker_gpu[wid],
                        self.worker_share[wid],
                        _f(busy),
                        _f(util),
                        _f(self.worker_energy_j.get(wid, math.nan)),
                    )
                )


class Recorder:
    """The simulator's results part: one row per stage execution as it ends, and at the
    end of a run the :class:`SimResult` from the ledger, the workers and the energy."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.rows: list[tuple] = []

    def row(self, task: _Task, end: float, status: str) -> None:
        b = task.batch
        w = task.worker
        self.rows.append(
            (
                b.id, b.model, task.step.stage, w.id, w.gpu.name, len(b.requests),
                task.start_s, end, status, task.transfer_start_s, task.transfer_end_s,
                b.dispatch_s,
            )
        )  # fmt: skip

    def result(
        self,
        end_s: float,
        ledger: Ledger,
        workers: dict[str, _Worker],
        energy: Energy,
        links: LinkTable,
    ) -> SimResult:
        gpu_j, worker_j = energy.account(workers, end_s)
        return SimResult(
            trace=self.trace,
            end_s=end_s,
            dispatch_s=np.asarray(ledger.dispatch_s),
            start_s=np.asarray(ledger.start_s),
            finish_s=np.asarray(ledger.finish_s),
            outcome=np.asarray(ledger.outcome, dtype=np.int8),
            reason=np.asarray(ledger.reason, dtype=np.int16),
            reasons=tuple(ledger.reasons),
            batch=np.asarray(ledger.batch_of, dtype=np.int64),
            stage_rows=self.rows,
            worker_busy_s={w.id: w.busy_s for w in workers.values()},
            worker_gpu={w.id: w.gpu.name for w in workers.values()},
            worker_share={w.id: w.info.share for w in workers.values()},
            gpu_energy_j=gpu_j,
            worker_energy_j=worker_j,
            link_log=links.log,
        )
