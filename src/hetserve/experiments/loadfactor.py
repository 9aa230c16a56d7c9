"""PPipe's headline metric: the highest load factor (offered rate / planned capacity) at
which SLO attainment stays at or above a target (99%).

Bisection on the load factor, assuming attainment falls as load grows: first a bracket
(doubling up from ``start`` while the target holds, halving down while it does not), then
halving the bracket until it is narrower than ``resolution`` (default 0.01). Every sampled
point is returned as the curve.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class LoadFactorResult:
    max_load_factor: float
    curve: list[tuple[float, float]]  # (load factor, attainment), sorted by load factor
    target: float
    resolution: float


def search_max_load_factor(
    evaluate: Callable[[float], float],
    *,
    target: float = 0.99,
    resolution: float = 0.01,
    start: float = 1.0,
    lowest: float = 0.01,
    highest: float = 64.0,
    on_sample: Callable[[float, float], None] | None = None,
) -> LoadFactorResult:
    if not 0 < target <= 1 or resolution <= 0 or not 0 < lowest <= start <= highest:
        raise ValueError("need 0 < target <= 1, resolution > 0, lowest <= start <= highest")
    seen: dict[float, float] = {}

    def f(lf: float) -> float:
        lf = round(lf, 10)
        if lf not in seen:
            seen[lf] = evaluate(lf)
            if on_sample is not None:
                on_sample(lf, seen[lf])
        return seen[lf]

    if f(start) >= target:
        lo, hi = start, None
        while hi is None:
            nxt = round(min(lo * 2, highest), 10)
            if nxt <= lo:  # already at the top of the range
                return LoadFactorResult(lo, sorted(seen.items()), target, resolution)
            if f(nxt) >= target:
                lo = nxt
            else:
                hi = nxt
    else:
        hi, lo = start, None
        while lo is None:
            nxt = round(max(hi / 2, lowest), 10)
            if nxt >= hi:  # even the lowest load factor misses the target
                return LoadFactorResult(0.0, sorted(seen.items()), target, resolution)
            if f(nxt) >= target:
                lo = nxt
            else:
                hi = nxt
    while hi - lo > resolution:
        mid = round((lo + hi) / 2, 10)  # the value evaluated is the value kept
        if f(mid) >= target:
            lo = mid
        else:
            hi = mid
    return LoadFactorResult(lo, sorted(seen.items()), target, resolution)
