"""Exhaustive optimum for tiny planning instances (a check on the MILP, not a planner).

Independently of the MILP's formulation and pruning: every pipeline (any cuts, any
(type, share) per stage — consecutive equal ones included — any batch, no dominance
pruning) with every vector of physical GPUs per stage gives an *item* whose throughput is
``min over stages of (share x GPUs x batch / latency, NIC limits)``. Per model, an
unbounded knapsack over GPU counts per type gives the best throughput ``T_m(a)`` with at
most ``a`` GPUs of each type; then every split of the cluster's GPUs among the models is
tried, maximising ``min_m T_m(a_m) / w_m``.

Exponential: for 2 GPU types, a few blocks and at most about 6 GPUs.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from hetserve.core.cluster import Cluster
from hetserve.core.latency import LatencyModel
from hetserve.planning.candidates import enumerate_candidates, net_info
from hetserve.planning.milp import allocation_throughput


def brute_force_optimum(
    cluster: Cluster,
    latency: LatencyModel,
    slos_s: Mapping[str, float],
    weights: Mapping[str, float],
    *,
    slo_margin: float = 0.4,
    max_stages: int = 2,
    shares: tuple[int, ...] = (1, 2),
    batches: tuple[int, ...] = (1, 2),
    cut_bytes_factor: float = 0.5,
) -> float:
    counts = cluster.gpu_counts()
    types = list(counts)
    net = net_info(cluster)
    mps = {g.name: g.mps for g in cluster.gpu_types()}
    total_w = sum(weights.values())
    grid = list(itertools.product(*(range(counts[t] + 1) for t in types)))
    best_per_model: dict[str, dict[tuple[int, ...], float]] = {}
    for m, slo in slos_s.items():
        cands, _ = enumerate_candidates(
            m,
            latency,
            counts,
            net,
            (1 - slo_margin) * slo,
            max_stages=max_stages,
            shares=shares,
            batches=batches,
            mps=mps,
            cut_bytes_factor=cut_bytes_factor,
            prune=False,
            allow_same_consecutive=True,
        )
        items: list[tuple[tuple[int, ...], float]] = []
        for c in cands:
            for gs in itertools.product(range(1, max(counts.values()) + 1), repeat=len(c.stages)):
                use = [0] * len(types)
                for st, g in zip(c.stages, gs, strict=True):
                    use[types.index(st.gpu)] += g
                if any(u > counts[t] for u, t in zip(use, types, strict=True)):
                    continue
                inst = [st.share * g for st, g in zip(c.stages, gs, strict=True)]
                items.append((tuple(use), allocation_throughput(c, inst, gs, net)))
        table = dict.fromkeys(grid, 0.0)
        for a in grid:  # unbounded knapsack in increasing order of GPU counts
            for use, val in items:
                rest = tuple(x - u for x, u in zip(a, use, strict=True))
                if min(rest) >= 0:
                    table[a] = max(table[a], table[rest] + val)
        best_per_model[m] = table
    models = list(slos_s)
    best = 0.0

    def splits(i: int, left: tuple[int, ...], acc: float) -> None:
        nonlocal best
        m = models[i]
        wm = weights[m] / total_w
        for a in grid:
            if any(x > y for x, y in zip(a, left, strict=True)):
                continue
            v = min(acc, best_per_model[m][a] / wm)
            if v <= best:
                continue
            if i + 1 == len(models):
                best = v
            else:
                splits(i + 1, tuple(y - x for x, y in zip(a, left, strict=True)), v)

    splits(0, tuple(counts[t] for t in types), float("inf"))
    return best
