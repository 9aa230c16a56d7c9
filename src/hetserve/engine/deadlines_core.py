# cython: annotation_typing=False
"""Held requests by deadline, for the kernel's drops at the deadline (``engine.kernel``).

A request the scheduler still holds when its deadline comes can no longer finish by it:
the kernel ends it then, at the deadline, in both engines, whether or not the scheduler
looks at its queue (issue 44). To know the next deadline without a timer or a heap entry
per request, :class:`Deadlines` keeps

- one FIFO per stream: a stream's requests arrive with non-decreasing deadlines, so its
  FIFO is sorted by deadline and appending costs O(1);
- ``heads``: a heap with one entry per non-empty FIFO, keyed by a deadline no later than
  its first request's (a lower bound: the request it was made for may have left since),
  a ``core.heaps.EventHeap`` (C doubles where compiled; each entry's ``fn`` the FIFO);
- ``heap``: the few requests that do not fit their stream's order (a request with its own
  deadline, one given back to the scheduler after a preemption or an open route).

Entries are not removed when a request leaves the scheduler (dispatched, dropped): they
are skipped, lazily, by asking whether the request is still held, each once. The kernel
keeps one timer, at :meth:`first_s`, the earliest deadline of a request still held.

``engine/deadlines.py`` exports it. This file is plain Python and runs as it is. Where
the package was built with Cython (``setup.py``; ``deadlines_core_c.pxd`` beside it
declares the C types: the class is an extension type with typed attributes, its heaps a
keyed heap and a ``core.heaps.EventHeap``), the same file is also compiled as
``hetserve.engine.deadlines_core_c``, and ``engine/deadlines.py`` exports that one's
class (``HETSERVE_PURE_PYTHON=1`` keeps this file). Both give the same results.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping

from hetserve.core.heaps import pop, push
from hetserve.core.requests import Request

try:  # (Cython reads ``cython.compiled`` as True in the build it makes of this file)
    import cython
except ImportError:  # (plain Python, without Cython installed)
    from hetserve.core.records import NO_CYTHON as cython
if not cython.compiled:  # (compiled: the C type and inline C its .pxd cimports)
    from hetserve.core.heaps import EventHeap
    from hetserve.core.records import REQUEST_DEADLINE_S, field

__all__ = ["Deadlines"]

_INF = math.inf  # (compiled: a C double, not a module attribute read per call)


def _by_deadline(r: Request) -> tuple[float, int]:
    return (r.deadline_s, r.id)


def _deadline_s(r: Request) -> float:
    """``r.deadline_s``; compiled, a ``Request``'s read as its tuple item in C (no
    attribute looked up)."""
    if type(r) is Request:
        return field(r, REQUEST_DEADLINE_S)
    return r.deadline_s


class Deadlines:
    """The requests the scheduler holds, by deadline (module docstring). The FIFOs hold
    request ids (the driver gives each request its own id); ``held`` (the kernel's
    ledger of held requests) says which are still held, and their deadlines."""

    def __init__(self) -> None:
        self.fifos: dict[str, deque[int]] = {}
        self.last_s: dict[str, float] = {}  # per FIFO, the deadline last appended
        self.heads = EventHeap(16)
        self.heap: list[tuple[float, int]] = []

    def add(self, r: Request) -> int:
        """Watch ``r``, arrived."""
        q = self.fifos.get(r.stream)
        if q is None:
            q = self.fifos[r.stream] = deque()
        d = r.deadline_s
        if not q:
            self.heads.push(d, q, None, None)
        elif self.last_s[r.stream] > d:
            push(self.heap, (d, r.id))
            return 0
        q.append(r.id)
        self.last_s[r.stream] = d
        return 0

    def again(self, r: Request) -> int:
        """Watch ``r``, held again (returned, or parked by an open route): out of its
        stream's order, so on the heap."""
        push(self.heap, (r.deadline_s, r.id))
        return 0

    def fifo(self, stream: str) -> deque[int] | None:
        """The stream's FIFO, for a caller that appends in deadline order itself (the
        kernel's loop, which reads ``fifos`` itself: a trace's stream comes in order),
        calling :meth:`head` when it was empty; None until :meth:`add` made it. (Such
        appends leave ``last_s`` behind: a caller uses either, for one stream.)"""
        return self.fifos.get(stream)

    def head(self, q: deque[int], deadline_s: float) -> int:
        """``q`` was empty and gets a request of ``deadline_s``."""
        self.heads.push(deadline_s, q, None, None)
        return 0

    def due(self, now: float, held: Mapping[int, Request]) -> list[Request]:
        """The held requests whose deadline is ``now`` or past, in deadline order (each
        once: a request given back may be here twice; they are forgotten here)."""
        out: dict[int, Request] = {}
        heads = self.heads
        # (compiled, a dict's look-ups in C: the kernel's ``held`` is one; any other
        # mapping is copied into one first)
        hd = held if type(held) is dict else dict(held)
        while heads.n > 0 and heads.first_s() <= now:
            heads.pop_into()
            q = heads.fn
            while q:
                r = hd.get(q[0])
                if r is None:
                    q.popleft()  # no longer the scheduler's
                    continue
                d = _deadline_s(r)
                if d <= now:
                    out[q.popleft()] = r
                else:
                    heads.push(d, q, None, None)
                    break
        heads.fn = None
        heap = self.heap
        while heap and heap[0][0] <= now:
            r = hd.get(pop(heap)[1])
            if r is not None and _deadline_s(r) <= now:
                out[r.id] = r
        if len(out) > 1:
            return sorted(out.values(), key=_by_deadline)
        return list(out.values())

    def first_s(self, held: Mapping[int, Request]) -> float:
        """The earliest deadline of a held request (inf: none is held); the FIFOs and
        the heap are cleaned of requests no longer held on the way."""
        hd = held if type(held) is dict else dict(held)  # (as in ``due``)
        heap = self.heap
        while heap and hd.get(heap[0][1]) is None:
            pop(heap)
        first = heap[0][0] if heap else _INF
        heads = self.heads
        while heads.n > 0:
            d = heads.first_s()
            q = heads.first()
            r = None
            while q:
                r = hd.get(q[0])
                if r is not None:
                    break
                q.popleft()
            if r is None:
                heads.pop_into()
                continue
            d_r = _deadline_s(r)
            if d_r != d:  # (its key a bound no more: replaced, as heapreplace)
                heads.pop_into()
                heads.push(d_r, q, None, None)
            else:
                break
        heads.fn = None
        if heads.n > 0 and heads.first_s() < first:
            first = heads.first_s()
        return first

    def clear(self) -> None:
        self.fifos.clear()
        self.last_s.clear()
        self.heads.clear()
        self.heap.clear()
