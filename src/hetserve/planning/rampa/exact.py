"""Beyond the paper: the exact optimum of RAMPA's problem (Eq. 6 under the four
constraints) on small clusters, by exhaustive search, to measure the colony's gap.

Every stage count, every ordered choice of distinct free GPUs, and for every cut every
simple switch path between the two GPUs' switches (over links with bandwidth left) is
tried; the requirement check is the colony's (``state.best_cuts``, exact: a cut meeting
the requirements is found whenever one exists). Branches whose cost already reaches the
best found are cut. ``tests/planning/test_rampa_exact.py`` checks the result against a
brute force over every GPU sequence, path and cut written from the paper's formulas. The
search grows as ``GPUs^stages x paths^cuts``: meant for a handful of switches and GPUs.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from hetserve.core.errors import HetserveError
from hetserve.planning.rampa.state import ClusterState, Placement, Service, best_cuts

MAX_CANDIDATES = 2_000_000


def simple_paths(state: ClusterState, a: str, b: str) -> list[tuple[str, ...]]:
    """Every loop-free path between GPUs ``a`` and ``b`` over links with bandwidth left."""
    net = state.net
    ga, gb = net.gpus[a], net.gpus[b]
    if ga.switch == gb.switch:
        return [(ga.up, gb.down)]
    out: list[tuple[str, ...]] = []

    def walk(cur: str, seen: set[str], links: list[str]) -> None:
        if cur == gb.switch:
            out.append((ga.up, *links, gb.down))
            return
        for n, link in net.out[cur]:
            if n not in seen and state.room_bps(link) > 0:
                seen.add(n)
                links.append(link)
                walk(n, seen, links)
                links.pop()
                seen.discard(n)

    walk(ga.switch, {ga.switch}, [])
    return out


def exact_placement(
    state: ClusterState, svc: Service, max_stages: int | None = None
) -> Placement | None:
    """The cheapest placement (Eq. 6) that meets the requirements, or None."""
    gc, lc = state.costs()
    free = sorted(state.free)
    top = min(len(svc.ops), len(free), max_stages or len(svc.ops))
    n_seq = sum(math.perm(len(free), s) for s in range(1, top + 1))
    if n_seq > MAX_CANDIDATES:
        raise HetserveError(
            f"exact placement: {len(free)} free GPUs and up to {top} stages make "
            f"{n_seq:,} GPU sequences, more than an exhaustive search takes "
            f"({MAX_CANDIDATES:,}); give max_stages or a smaller cluster"
        )
    paths_of: dict[tuple[str, str], list[tuple[tuple[str, ...], float]]] = {}

    def paths(a: str, b: str) -> list[tuple[tuple[str, ...], float]]:
        key = (a, b)
        if key not in paths_of:
            ps = [(p, sum(lc[x] for x in p)) for p in simple_paths(state, a, b)]
            paths_of[key] = sorted(ps, key=lambda t: t[1])
        return paths_of[key]

    best: Placement | None = None
    best_cost = math.inf

    def sequences(s: int, chosen: list[str], cost: float) -> Iterator[tuple[list[str], float]]:
        if cost >= best_cost:
            return
        if len(chosen) == s:
            yield chosen, cost
            return
        for g in free:
            if g not in chosen:
                chosen.append(g)
                yield from sequences(s, chosen, cost + gc[g])
                chosen.pop()

    def routes(gpus: list[str], k: int, acc: list[tuple[str, ...]], cost: float) -> None:
        nonlocal best, best_cost
        if cost >= best_cost:
            return
        if k == len(gpus) - 1:
            hit = best_cuts(state, svc, gpus, acc)
            if hit is not None:
                bounds, est = hit
                best = Placement(svc, bounds, tuple(gpus), tuple(acc), est, cost)
                best_cost = cost
            return
        for p, c in paths(gpus[k], gpus[k + 1]):
            if cost + c >= best_cost:
                break  # sorted by cost
            acc.append(p)
            routes(gpus, k + 1, acc, cost + c)
            acc.pop()

    for s in range(1, top + 1):
        for gpus, cost in sequences(s, [], 0.0):
            routes(list(gpus), 0, [], cost)
    return best
