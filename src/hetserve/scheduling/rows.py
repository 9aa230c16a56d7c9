"""Batches in rows. A request carries ``rows`` rows of input (``core.requests.Request``):
what one client sent, which goes to the GPU in one batch. A batch is as large as its
requests' rows together, and every latency a scheduler looks up is at that size. These are
the helpers the schedulers share for their queues."""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from hetserve.core.requests import Request


def rows_of(requests: Iterable[Request]) -> int:
    """The rows of some requests together (a batch's size)."""
    return sum(r.rows for r in requests)


def pop_edf(
    q: list[tuple[float, int, Request]], limit: int, queued_rows: int = -1
) -> tuple[tuple[Request, ...], int]:
    """The most urgent requests of the deadline heap ``q`` whose rows fit in ``limit``
    together, taken off ``q``, and their rows. It stops at the first request that does not
    fit (the deadline order is kept): none when the most urgent alone does not.
    ``queued_rows``: the queue's rows together, where the caller keeps them (when they
    equal its length, every request is one row: the plain pops)."""
    pop = heapq.heappop
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
