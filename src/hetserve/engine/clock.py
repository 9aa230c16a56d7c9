"""Virtual time: a heap of callbacks (``engine.executor.Clock``), the simulator's clock
and the runtime's in tests and parity checks.

The heap is a ``core.heaps.EventHeap``: entries ``(time, seq, fn, a, b)``, ties broken by
the sequence number it gives each as it is pushed, so callbacks at one time run in the
order they were set and a run is a deterministic function of its inputs and seed.
``fn(a, b, time)`` runs at its time. A time a rounding error in the past (a block
boundary computed from a stage's start) is kept as it is: it pops next.

The simulator's loop pops entries itself (it merges the trace's arrivals with them) and
sets the time (the heap's ``now_s``, a C double where the heaps are compiled: no float
made per event; ``t`` reads and writes it); :meth:`VirtualClock.run` does the same for
a runtime engine in tests. The kernel and the modelled executor push their hot callbacks
(stage ends, timers) onto ``heap`` themselves (``heap.push``: a C call where the heaps
are compiled), not through :meth:`call_at` (a Python call each).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from hetserve.core.heaps import EventHeap
from hetserve.engine.executor import Callback


class VirtualClock:
    """Callbacks in time order, no waiting."""

    __slots__ = ("heap",)

    def __init__(self) -> None:
        self.heap = EventHeap()

    @property
    def t(self) -> float:
        """The current time (the heap's ``now_s``)."""
        return self.heap.now_s

    @t.setter
    def t(self, t: float) -> None:
        self.heap.now_s = t

    def now(self) -> float:
        return self.heap.now_s

    def call_at(self, t: float, fn: Callback, a: Any = None, b: Any = None) -> None:
        self.heap.push(t, fn, a, b)

    def at(self, t: float, fn: Callable[[], None]) -> None:
        """Call ``fn()`` at time ``t`` (a test's arrivals and faults)."""
        self.call_at(t, _call0, fn)

    def run(self, until: float = math.inf) -> None:
        """Run the callbacks in time order, up to ``until``."""
        heap = self.heap
        while len(heap) and heap.first_s() <= until:
            t, _, fn, a, b = heap.pop()
            heap.now_s = t
            fn(a, b, t)


def _call0(fn: Callable[[], None], _: Any, now: float) -> None:
    fn()
