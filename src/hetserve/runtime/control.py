"""The control loop on a server (``serve --replan``; ``docs/control.md``): what it observes
of the live traffic, and where its planner runs.

- :class:`LiveSensor` (``engine.control.Sensor``) counts arrivals per model, and endings by
  their deadline, in bins of ``bin_s`` seconds kept for the long window only, so its
  memory does not grow with the rate or the uptime. Rates are read over whole bins (the
  bin under way counts in proportion to its elapsed part).
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

    def _counts(self, bins: dict[int, int], now: float, window_s: float) -> np.ndarray:
        """Per bin of ``(now - window_s, now]``, oldest first: the count, the bin under
        way scaled to a whole bin's worth."""
        hi = self._bin(now)
        k = max(1, round(window_s / self.bin_s))
        out = np.array([bins.get(b, 0) for b in range(hi - k + 1, hi + 1)], dtype=float)
        return out

    def rates(self, now: float, window_s: float) -> dict[str, float]:
        span = min(window_s, max(now, self.bin_s))
        return {
            m: float(self._counts(bins, now, span).sum()) / self._span(now, span)
            for m, bins in self._arrivals.items()
        }

    def _span(self, now: float, window_s: float) -> float:
        """The time the bins of ``(now - window_s, now]`` cover: whole bins, and the
        elapsed part of the one under way."""
        k = max(1, round(window_s / self.bin_s))
        return (k - 1) * self.bin_s + max(now - self._bin(now) * self.bin_s, 1e-3)

    def peak_rates(self, now: float, window_s: float, bin_s: float, q: float) -> dict[str, float]:
        """Per model, the ``q`` quantile of its rate over the whole bins of the window
        (``bin_s`` is this sensor's own bin)."""
        span = min(window_s, max(now, self.bin_s))
        out = {}
        for m, bins in self._arrivals.items():
            c = self._counts(bins, now - self.bin_s, span)  # (whole bins only)
            out[m] = float(np.quantile(c, q)) / self.bin_s if len(c) else 0.0
        return out

    def attainment(self, now: float, window_s: float) -> tuple[float | None, int]:
        hi = self._bin(now)
        k = max(1, round(window_s / self.bin_s))
        n = met = 0
        for b in range(hi - k + 1, hi + 1):
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
