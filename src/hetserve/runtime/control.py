"""The control loop on a server (``serve --replan``; ``docs/control.md``): what it observes
of the live traffic, and where its planner runs.

- :class:`LiveSensor` (``engine.control.Sensor``) counts arrivals per model, and endings by
  their deadline, in bins of ``bin_s`` seconds kept for the long window only, so its
  memory does not grow with the rate or the uptime. A rate is the bins' count over the
  time they cover (the bin under way for its elapsed part).
- :class:`ThreadSolver` (``engine.control.Solver``) runs the planner on a thread of its
  own, off the event loop (requests keep flowing while it solves), and hands the plan
  back on the loop; the time it took is the solve time the switch record shows.
"""

from __future__ import annotations

import concurrent.futures
import logging
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from hetserve.core.errors import HetserveError
from hetserve.engine.control import Solved

LOG = logging.getLogger("hetserve.control")


class LiveSensor:
    """Arrivals and endings of a live server, binned (module docstring). ``arrived`` and
    ``ended`` are called on the event loop by the server; the loop reads the rest."""

    def __init__(self, models: list[str], keep_s: float, bin_s: float = 1.0) -> None:
        if not bin_s > 0 or not keep_s > 0:
            raise HetserveError(f"sensor: expected bin_s and keep_s > 0, got {bin_s}, {keep_s}")
        self.bin_s = bin_s
        self.keep = math.ceil(keep_s / bin_s) + 2
        self.models = list(models)
        self._arrivals: dict[str, dict[int, int]] = {m: {} for m in self.models}
        self._due: dict[int, list[int]] = {}  # deadline's bin -> [ended, met]

    def _bin(self, t: float) -> int:
        return math.floor(t / self.bin_s)

    def arrived(self, model: str, t: float) -> None:
        """A request of ``model`` arrived at ``t``."""
        b = self._bin(t)
        bins = self._arrivals.setdefault(model, {})
        bins[b] = bins.get(b, 0) + 1
        if len(bins) > self.keep:
            self._prune(bins, b)

    def ended(self, deadline_s: float, met: bool) -> None:
        """A request due at ``deadline_s`` ended: within its SLO (``met``) or not."""
        b = self._bin(deadline_s)
        row = self._due.get(b)
        if row is None:
            row = self._due[b] = [0, 0]
            if len(self._due) > self.keep:
                self._prune(self._due, b)
        row[0] += 1
        row[1] += int(met)

    def _prune(self, bins: dict[int, Any], newest: int) -> None:
        for k in [k for k in bins if k <= newest - self.keep]:
            del bins[k]

    def _last(self, now: float) -> int:
        """The bin of the instant just before ``now`` (the bin under way; on a boundary,
        the one that just ended)."""
        return math.ceil(now / self.bin_s) - 1

    def _k(self, window_s: float) -> int:
        return max(1, round(window_s / self.bin_s))

    def _counts(self, bins: dict[int, int], last: int, k: int) -> np.ndarray:
        """The counts of the ``k`` bins up to ``last``, oldest first."""
        return np.array([bins.get(b, 0) for b in range(last - k + 1, last + 1)], dtype=float)

    def rates(self, now: float, window_s: float) -> dict[str, float]:
        """Per model, the arrivals of the window's bins over the time they cover (the
        bin under way for its elapsed part; early on, the time so far)."""
        span = min(window_s, max(now, self.bin_s))
        last, k = self._last(now), self._k(span)
        covered = (k - 1) * self.bin_s + max(now - last * self.bin_s, 1e-3)
        return {m: float(self._counts(bins, last, k).sum()) / covered
                for m, bins in self._arrivals.items()}  # fmt: skip

    def peak_rates(self, now: float, window_s: float, bin_s: float, q: float) -> dict[str, float]:
        """Per model, the ``q`` quantile of its rate over the window's whole bins
        (``bin_s`` is this sensor's own bin)."""
        span = min(window_s, max(now, self.bin_s))
        last, k = math.floor(now / self.bin_s) - 1, self._k(span)  # (whole bins only)
        return {m: float(np.quantile(self._counts(bins, last, k), q)) / self.bin_s
                for m, bins in self._arrivals.items()}  # fmt: skip

    def attainment(self, now: float, window_s: float) -> tuple[float | None, int]:
        """Of the requests due in the window's bins that ended: the share that met their
        SLO, and how many."""
        last, k = self._last(now), self._k(window_s)
        n = met = 0
        for b in range(last - k + 1, last + 1):
            row = self._due.get(b)
            if row is not None:
                n += row[0]
                met += row[1]
        return (met / n if n else None), n


class ThreadSolver:
    """Runs each solve on a thread of its own (module docstring); ``call_soon(fn,
    *args)`` puts the answer on the event loop (``runtime.engine.LoopClock``'s)."""

    def __init__(self, call_soon: Callable[..., None], now: Callable[[], float]) -> None:
        self.call_soon = call_soon
        self.now = now
        self.pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="hetserve-plan")

    def solve(self, work: Callable[[], Any], done: Solved) -> None:
        t0 = time.perf_counter()

        def run() -> None:
            result: Any
            try:
                result = work()
            except Exception as err:  # the loop logs it and stays on the current plan
                result = err
            self.call_soon(lambda: done(result, time.perf_counter() - t0, self.now()))

        self.pool.submit(run)

    def close(self) -> None:
        """No new solves; one under way is left to end by itself (its answer is dropped
        by a server that stopped)."""
        self.pool.shutdown(wait=False, cancel_futures=True)
