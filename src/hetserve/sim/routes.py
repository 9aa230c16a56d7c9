"""Routes: checking a dispatch's route, and gathering a continued batch's input (open
routes, protocol rule 4)."""

from __future__ import annotations

import math
from typing import Any

from hetserve.scheduling.protocol import Dispatch
from hetserve.sim.state import _TRANSFER_DONE, SimulationError, _Task


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
        counts: dict[str, int] = {}
        at_worker = self.at_worker
        for r in b.requests:
            src = at_worker[r.id]
            assert src is not None
            counts[src] = counts.get(src, 0) + 1
        dst = task.worker
        per_request = self.latency.out_bytes(b.model, first - 1) * self.cfg.cut_bytes_factor
        t0, t1 = math.inf, now
        for src, k in counts.items():
            sw = self.workers[src]
            if sw.lost:
                self._fail_batch(b, task, "activations lost", now)
                return
            path, bw, delay = self.links.path(sw.gpu_id, dst.gpu_id)
            s0, s1 = self.links.transfer(path, bw, delay, per_request * k, now)
            t0, t1 = min(t0, s0), max(t1, s1)
        task.transfer_start_s, task.transfer_end_s = t0, t1
        if t1 > now:
            self._push(t1, _TRANSFER_DONE, task, None)
        else:
            self._input_arrived(task, now)

    def _check_route(self, d: Dispatch) -> None:
        """Routes cover blocks contiguously on known workers, with consecutive stage numbers;
        from block 0 to the last, or (an open route) over any contiguous range."""
        nb = self._nblocks.get(d.model)
        if nb is None:
            raise SimulationError(f"Dispatch {d.batch_id}: model {d.model!r} is not in the plan")
        route = d.route
        if len(route) == 1:  # the common case, checked quickly
            st = route[0]
            if st.stage == 0 and st.blocks == (0, nb) and st.worker in self.workers:
                return
        pos = route[0].blocks[0]
        s0 = route[0].stage
        for k, st in enumerate(route):
            if st.stage != s0 + k or st.blocks[0] != pos or st.blocks[1] <= pos or s0 < 0:
                raise SimulationError(
                    f"Dispatch {d.batch_id}: route must cover blocks contiguously with "
                    f"consecutive stage numbers (step {k}: stage {st.stage}, {st.blocks})"
                )
            if st.worker not in self.workers:
                raise SimulationError(f"Dispatch {d.batch_id}: unknown worker {st.worker!r}")
            pos = st.blocks[1]
        if pos > nb:
            raise SimulationError(
                f"Dispatch {d.batch_id}: route ends at block {pos}, {d.model} has {nb}"
            )
