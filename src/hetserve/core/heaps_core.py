# cython: annotation_typing=False
"""Keyed heaps: ``heapq``'s binary heaps of tuples whose first item is a time or a
deadline (a float) and whose second is a number no other entry of the heap has (an event's
sequence number, a request's id), so that the first two items order the heap alone. The
simulator's clock, the kernel's ready queues and the schedulers' deadline queues are such
heaps.

Through ``heapq`` each step of a sift compares two tuples: two rich comparisons of their
first items (equal? less?) and the calls around them, about a tenth of the simulator's
time on issue 41's PPipe-plan run. Compiled by Cython (``setup.py``; ``heaps_core_c.pxd``
beside it declares the C types), :func:`push` and :func:`pop` compare the two keys as a C
double and a C integer instead. They are ``heapq``'s algorithm step for step, so a heap
they keep is the same list, item for item, as ``heapq`` keeps (``tests/core/test_heaps.py``
checks it against ``heapq``); the two mix on one heap.

Run as plain Python, this file's :func:`push` and :func:`pop` hand over to ``heapq``
(``COMPILED`` is False): ``heapq``'s C functions are faster than any sift written in
Python. ``core/heaps.py`` exports whichever build is taken."""

from __future__ import annotations

import heapq
from typing import Any

try:  # (Cython reads ``cython.compiled`` as True in the build it makes of this file)
    import cython

    COMPILED = bool(cython.compiled)
except ImportError:  # (Cython is not installed: this file runs as plain Python)
    COMPILED = False

_heappush = heapq.heappush
_heappop = heapq.heappop


def _lt(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """``a < b`` for two entries of a keyed heap (their first two items decide)."""
    x = a[0]
    y = b[0]
    if x < y:
        return True
    if x == y:
        i = a[1]
        j = b[1]
        return i < j
    return False


def _sift_down(heap: list[Any], start: int, pos: int) -> None:
    """``heapq._siftdown``: the entry at ``pos`` moves up towards ``start`` while it is
    less than its parent."""
    item = heap[pos]
    while pos > start:
        parent_pos = (pos - 1) >> 1
        parent = heap[parent_pos]
        if _lt(item, parent):
            heap[pos] = parent
            pos = parent_pos
            continue
        break
    heap[pos] = item


def _sift_up(heap: list[Any], pos: int) -> None:
    """``heapq._siftup``: the smaller child moves up until a leaf is reached, then the
    entry that was at ``pos`` moves down there and up again (``_sift_down``)."""
    end = len(heap)
    start = pos
    item = heap[pos]
    child = 2 * pos + 1
    while child < end:
        right = child + 1
        if right < end and not _lt(heap[child], heap[right]):
            child = right
        heap[pos] = heap[child]
        pos = child
        child = 2 * pos + 1
    heap[pos] = item
    _sift_down(heap, start, pos)


def push(heap: list[Any], item: tuple[Any, ...]) -> None:
    """``heapq.heappush`` for a keyed heap."""
    if not COMPILED:
        _heappush(heap, item)
        return
    heap.append(item)
    _sift_down(heap, 0, len(heap) - 1)


def pop(heap: list[Any]) -> Any:
    """``heapq.heappop`` for a keyed heap (IndexError where it is empty)."""
    if not COMPILED:
        return _heappop(heap)
    last = heap.pop()
    if not heap:
        return last
    top = heap[0]
    heap[0] = last
    _sift_up(heap, 0)
    return top


def pop_edf(q: list[Any], limit: int, queued_rows: int = -1) -> tuple[tuple[Any, ...], int]:
    """The most urgent requests of the deadline heap ``q`` (entries ``(deadline_s, id,
    request)``) whose rows fit in ``limit`` together, taken off ``q``, and their rows. It
    stops at the first request that does not fit (the deadline order is kept): none when
    the most urgent alone does not. ``queued_rows``: the queue's rows together, where the
    caller keeps them (when they equal its length, every request is one row: the plain
    pops)."""
    if queued_rows == len(q):
        k = limit if limit < queued_rows else queued_rows
        return tuple([pop(q)[2] for _ in range(k)]), k
    out = []
    n = 0
    while q:
        k = q[0][2].rows
        if n + k > limit:
            break
        out.append(pop(q)[2])
        n += k
    return tuple(out), n
