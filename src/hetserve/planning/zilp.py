"""Shepherd's offline optimum (section 5.1, Eq. 3): the zero-one ILP over all batches, their
start times and GPUs, solved exactly with HiGHS on tiny instances.

Time is in integer milliseconds (arrivals, deadlines, latencies), so an optimal schedule
exists whose batches start at integer times (shift every batch left until it meets its
release time or the end of the batch before it). The GPUs are identical, so the GPU index
is aggregated away: at most ``n_gpus`` batches may run in any millisecond, and any such set
of intervals can be laid out on ``n_gpus`` GPUs (interval graphs are perfect). Variables:
``I(B, t)`` for every non-empty set ``B`` of one model's requests (up to ``max_batch``) and
every start ``t`` with ``a(B) <= t`` and ``t + l(B) <= d(B)``. Maximise ``sum |B| I(B, t)``
subject to (a) every request in at most one chosen batch, (b) at most ``n_gpus`` batches
running in every millisecond. The number of variables grows as ``2^requests``: this is a
yardstick for small instances (a dozen requests), not a scheduler.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from hetserve.core.errors import HetserveError
from hetserve.planning.milp import solve_highs


@dataclass(frozen=True)
class OfflineRequest:
    id: int
    model: str
    arrival_ms: int
    deadline_ms: int


@dataclass(frozen=True)
class OfflineResult:
    served: int  # requests in chosen batches: the optimal goodput
    batches: tuple[tuple[int, tuple[int, ...]], ...]  # (start ms, request ids)
    status: str
    variables: int


MAX_REQUESTS = 16


def offline_optimum(
    requests: Sequence[OfflineRequest],
    latency_ms: Callable[[str, int], int],
    n_gpus: int = 1,
    max_batch: int = 128,
    time_limit_s: float = 60.0,
) -> OfflineResult:
    """The most requests any schedule can serve by their deadlines, knowing the future."""
    if len(requests) > MAX_REQUESTS:
        raise HetserveError(
            f"offline optimum: {len(requests)} requests; at most {MAX_REQUESTS} (the ILP has "
            f"a variable per subset of requests)"
        )
    if n_gpus < 1 or max_batch < 1:
        raise HetserveError("offline optimum: n_gpus and max_batch must be >= 1")
    by_model: dict[str, list[OfflineRequest]] = {}
    for r in requests:
        by_model.setdefault(r.model, []).append(r)
    cols: list[tuple[tuple[int, ...], int, int]] = []  # (request indices, start, latency)
    index = {r.id: k for k, r in enumerate(requests)}
    for model, rs in by_model.items():
        for size in range(1, min(max_batch, len(rs)) + 1):
            lat = int(latency_ms(model, size))
            if lat <= 0:
                raise HetserveError(f"offline optimum: latency of {model} must be > 0 ms")
            for batch in itertools.combinations(rs, size):
                release = max(r.arrival_ms for r in batch)
                due = min(r.deadline_ms for r in batch)
                ids = tuple(index[r.id] for r in batch)
                cols.extend((ids, t, lat) for t in range(release, due - lat + 1))
    if not cols:
        return OfflineResult(0, (), "optimal", 0)
    horizon = max(t + lat for _, t, lat in cols)
    n_req = len(requests)
    rows, idx, vals = [], [], []
    for c, (ids, t, lat) in enumerate(cols):
        for k in ids:  # (a) a request in at most one batch
            rows.append(k)
            idx.append(c)
            vals.append(1.0)
        for u in range(t, t + lat):  # (b) at most n_gpus batches in millisecond u
            rows.append(n_req + u)
            idx.append(c)
            vals.append(1.0)
    n_row = n_req + horizon
    a = sparse.csr_array((vals, (rows, idx)), shape=(n_row, len(cols)))
    hi = np.concatenate([np.ones(n_req), np.full(horizon, float(n_gpus))])
    cost = -np.array([float(len(ids)) for ids, _, _ in cols])
    n = len(cols)
    status, _, x = solve_highs(
        a, np.full(n_row, -np.inf), hi, np.zeros(n), np.ones(n), cost, np.ones(n), time_limit_s
    )
    if x is None:
        raise HetserveError(f"offline optimum: HiGHS found no solution ({status})")
    chosen = [cols[c] for c in range(n) if x[c] > 0.5]
    batches = tuple(sorted((t, tuple(requests[k].id for k in ids)) for ids, t, _ in chosen))
    return OfflineResult(sum(len(ids) for ids, _, _ in chosen), batches, status, n)
