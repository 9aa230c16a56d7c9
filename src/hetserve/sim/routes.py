"""Routes: gathering a continued batch's input (open routes, protocol rule 4)."""

from __future__ import annotations

from typing import Any

from hetserve.engine.rules import ACTIVATIONS_LOST, cut_bytes, parked_sources
from hetserve.sim.state import _TRANSFER_DONE, _Task


class RoutesMixin:
    """The simulator's route part (mixed into ``Simulator``)."""

    _nblocks: dict[str, int]
    workers: dict[str, Any]
    at_worker: list[str | None]
    latency: Any
    cfg: Any
    links: Any
    _push: Any
    _fail_batch: Any
    _input_arrived: Any

    def _gather(self, task: _Task, first: int, now: float) -> None:
        """A continued batch's input: one transfer per worker its requests are parked on,
        each over the links to the stage's worker; the stage may start when all arrived."""
        b = task.batch
        counts = parked_sources(b.requests, self.at_worker.__getitem__)  # type: ignore[arg-type]
        workers = self.workers
        if any(workers[src].lost for src in counts):
            self._fail_batch(b, task, ACTIVATIONS_LOST, now)
            return
        t0, t1 = self.links.gather(
            [(workers[src].gpu_id, k) for src, k in counts.items()],
            task.worker.gpu_id,
            cut_bytes(self.latency, b.model, first - 1, 1, self.cfg.cut_bytes_factor),
            now,
        )
        task.transfer_start_s, task.transfer_end_s = t0, t1
        if t1 > now:
            self._push(t1, _TRANSFER_DONE, task, None)
        else:
            self._input_arrived(task, now)
