"""The kernel's entities (``engine.kernel``): a worker's slot, a dispatched batch, one
route step of it. Plain objects with slots, which the kernel changes and executors and
observers read (an executor also keeps its own per-step data in ``Task.run``)."""

from __future__ import annotations

import math
from typing import Any

from hetserve.scheduling.protocol import Dispatch, WorkerInfo

__all__ = ["Batch", "Slot", "Task"]


class Slot:
    """A worker as the kernel sees it: what runs, what waits, whether it is lost."""

    __slots__ = ("gpu", "gpu_id", "id", "index", "info", "lost", "ready", "running", "waiting")

    def __init__(self, info: WorkerInfo, index: int) -> None:
        self.id = info.id
        self.index = index  # dense, from 0: where per-worker arrays want an integer
        self.info = info
        self.gpu = info.gpu
        self.gpu_id = info.gpu_id
        self.running: Task | None = None
        self.ready: list[tuple[float, int, Task]] = []  # heap: (planned start, seq, task)
        self.waiting: list[Task] = []  # deferred until a load on the worker ends
        self.lost = False


class Batch:
    """A dispatched batch: its ``Dispatch`` (``d``), the route step it is at, its tasks."""

    __slots__ = (
        "alive",
        "d",
        "dispatch_s",
        "gone",
        "id",
        "model",
        "payload",
        "requests",
        "route",
        "rows",
        "stage",
        "tasks",
    )

    def __init__(self, d: Dispatch, now: float, rows: int) -> None:
        self.d = d
        self.id, self.model, self.requests, self.route = d  # (cheaper than four field reads)
        self.rows = rows  # its size: the requests' rows together
        self.stage = 0
        self.dispatch_s = now
        self.alive = True
        self.tasks: list[Task] = []
        # ids of its requests cancelled while it was under way (None: none): they have
        # ended; the batch runs on for the others, and the kernel leaves them out at its end
        self.gone: set[int] | None = None
        # the stage's input: the requests' inputs (or parked parts) for the first step,
        # the previous step's output after it
        self.payload: Any = None


class Task:
    """One route step of a batch on its worker. ``ran``: the executor took it (it did
    not fail or defer it at once). ``run``, ``version`` and ``stop`` are the
    executor's: what it needs to end the step (the modelled executor's block times and
    energy), a counter that makes its pending callbacks stale, and the flag a
    ``Preempt`` raises (a thread checks it at every block boundary)."""

    __slots__ = (
        "batch",
        "dead",
        "index",
        "ran",
        "run",
        "start_s",
        "step",
        "stop",
        "transfer_end_s",
        "transfer_start_s",
        "version",
        "worker",
    )

    def __init__(self, batch: Batch, index: int, worker: Slot) -> None:
        self.batch = batch
        self.index = index
        self.step = batch.route[index]
        self.worker = worker
        self.version = 0
        self.dead = False
        self.ran = False
        self.stop = False
        self.start_s = math.nan
        self.run: Any = None
        self.transfer_start_s: float | None = None
        self.transfer_end_s: float | None = None

    @property
    def last(self) -> bool:
        """The route's last step."""
        return self.index == len(self.batch.route) - 1
