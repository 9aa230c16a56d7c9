"""The emulated worker slot as a Ray actor (``serve --emulate --address``), in a module of
its own that imports neither torch nor NumPy: each actor is a process of its own, and 64
emulated workers on one machine should not each load torch (about 1.5 s of CPU and 300 MB
apiece)."""

from __future__ import annotations

from typing import Any

import ray


@ray.remote(max_concurrency=2)
class EmulatedActor:
    """An emulated worker slot (``--emulate`` on a Ray cluster): a stage sleeps for the
    latency model's time, block by block, and stops at a block boundary when asked."""

    def __init__(self) -> None:
        self.stops: set[int] = set()

    def prepare(
        self, worker: str, stages: list[tuple[str, tuple[int, int]]],
        versions: dict[str, list[int]] | None = None,
    ) -> bool:  # fmt: skip
        return True

    def release(self, worker: str, model: str, blocks: tuple[int, int]) -> None:
        return None

    def where(self) -> dict[str, Any]:
        from hetserve.runtime.ray_placement import where_am_i

        return where_am_i()

    def stop(self, key: int) -> None:
        self.stops.add(key)

    def run(self, key: int, cum_s: list[float], stop_at_end: bool) -> tuple[None, tuple[int, bool]]:
        """Sleep to each block boundary (``cum_s``: seconds from the start); a stop asked
        for ends the stage at the next boundary (the stage's end only if ``stop_at_end``)."""
        import time

        t0 = time.perf_counter()
        n = len(cum_s)
        for k, at in enumerate(cum_s):
            wait = t0 + at - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            if key in self.stops and (k < n - 1 or stop_at_end):
                self.stops.discard(key)
                return None, (k + 1, False, time.perf_counter() - t0)
        self.stops.discard(key)
        return None, (n, True, time.perf_counter() - t0)
