"""The simulator's state: configuration, the event queue, workers, batches, stage tasks."""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass
from typing import Any

from hetserve.core.errors import HetserveError
from hetserve.scheduling.protocol import Dispatch, WorkerInfo

# event kinds
_TIMER, _STAGE_DONE, _TRANSFER_DONE, _LOAD_DONE, _PREEMPT_STOP, _WORKER_LOST = range(6)
# request states
_AWAITING, _IN_BATCH, _DONE = 0, 1, 2
_EPS = 1e-12


@dataclass(frozen=True)
class SimConfig:
    seed: int = 0
    jitter: str = "none"  # none | lognormal | exponential
    jitter_cv: float = 0.0  # lognormal: coefficient of variation of the stage-time multiplier
    cut_bytes_factor: float = 0.5  # activation bytes at cuts: 0.5 FP16 (default), 1.0 FP32
    warm: bool = True  # the plan's blocks are resident at t = 0
    drain_s: float | None = None  # run on after the last arrival (default: 10 x max SLO + 1 s)
    record_links: bool = False  # keep every transfer's link intervals (for checks)
    # per-request control and data overhead of a batch (moving inputs in, results out),
    # added to its first stage: Shepherd's per-request overhead
    request_overhead_s: float = 0.0

    def __post_init__(self) -> None:
        if self.jitter not in ("none", "lognormal", "exponential"):
            raise HetserveError(
                f"jitter must be none, lognormal or exponential, got {self.jitter!r}"
            )
        if self.jitter_cv < 0 or self.cut_bytes_factor <= 0 or self.request_overhead_s < 0:
            raise HetserveError(
                "jitter_cv and request_overhead_s must be >= 0 and cut_bytes_factor > 0"
            )


class Events:
    """The event heap, ``(time, seq, kind, a, b)``, ties broken by ``seq``; the same counter
    orders the workers' ready queues, so a run is a deterministic function of its inputs."""

    __slots__ = ("heap", "seq")

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, int, Any, Any]] = []
        self.seq = itertools.count(1)

    def push(self, t: float, kind: int, a: object, b: object) -> None:
        heapq.heappush(self.heap, (t, next(self.seq), kind, a, b))


class _Worker:
    __slots__ = (
        "busy_energy_j",
        "busy_s",
        "cold",
        "gpu",
        "gpu_id",
        "id",
        "info",
        "loading",
        "lost",
        "mem_cap",
        "mem_used",
        "ready",
        "resident",
        "running",
        "waiting_load",
    )

    def __init__(self, info: WorkerInfo) -> None:
        self.id = info.id
        self.info = info
        self.gpu = info.gpu
        self.gpu_id = info.gpu_id
        self.mem_cap = info.gpu.memory_gb * 1e9 / info.share
        self.mem_used = 0.0
        self.resident: dict[str, int] = {}  # model -> bitmask of blocks
        self.loading: dict[str, int] = {}
        # model -> (load start, its timeline, host links it holds): a load that follows a
        # load plan, whose batches may start before it ends
        self.cold: dict[str, tuple[float, Any, tuple[str, ...]]] = {}
        self.ready: list = []  # heap of (planned_start, seq, task)
        self.waiting_load: list = []
        self.running: _Task | None = None
        self.lost = False
        self.busy_s = 0.0
        self.busy_energy_j = 0.0


class _Batch:
    __slots__ = ("alive", "d", "dispatch_s", "id", "model", "requests", "route", "stage", "tasks")

    def __init__(self, d: Dispatch, now: float) -> None:
        self.d = d
        self.id = d.batch_id
        self.model = d.model
        self.requests = d.requests
        self.route = d.route
        self.stage = 0
        self.dispatch_s = now
        self.alive = True
        self.tasks: list[_Task] = []


class _Task:
    __slots__ = (
        "batch",
        "cum",
        "dead",
        "energy_j",
        "index",
        "start_s",
        "step",
        "transfer_end_s",
        "transfer_start_s",
        "version",
        "worker",
    )

    def __init__(self, batch: _Batch, index: int, worker: _Worker) -> None:
        self.batch = batch
        self.index = index
        self.step = batch.route[index]
        self.worker = worker
        self.version = 0
        self.dead = False
        self.start_s = math.nan
        self.cum: tuple[float, ...] = ()
        self.energy_j = 0.0
        self.transfer_start_s: float | None = None
        self.transfer_end_s: float | None = None


def _mask(blocks: tuple[int, int]) -> int:
    return ((1 << blocks[1]) - 1) ^ ((1 << blocks[0]) - 1)
