"""Exhaustive optimum for tiny planning instances (a check on the MILP, not a planner).

Independent of the planner: it imports none of its code (no candidate enumerator, no
throughput function, no network summary). From the latency model and the cluster alone, as
:mod:`hetserve.planning.validate` does, it recomputes every stage's latency (one call per
block range), every cut's transfer (``out_bytes x cut_bytes_factor x batch`` over the
slower of the two types' node NICs), the SLO filter and every stage's capacity. Every
pipeline (any cuts, any (type, share) per stage — consecutive equal ones included — any
batch, no dominance pruning) with every vector of physical GPUs per stage gives an *item*
whose throughput is ``min over stages of (share x GPUs x batch / latency, and the GPUs'
NIC share over the bytes the stage receives and sends)``. Per model, an unbounded knapsack
over GPU counts per type gives the best throughput ``T_m(a)`` with at most ``a`` GPUs of
each type; then every split of the cluster's GPUs among the models is tried, maximising
``min_m T_m(a_m) / w_m``.

Exponential: for 2 GPU types, a few blocks and at most about 6 GPUs.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping

from hetserve.core.cluster import Cluster
from hetserve.core.errors import HetserveError
from hetserve.core.latency import LatencyModel


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
    mps = {g.name: g.mps for g in cluster.gpu_types()}
    node_gbps: dict[str, float] = {}  # per type: the slowest NIC of a node holding it
    gpu_gbps: dict[str, float] = {}  # per type: the smallest NIC share of one GPU
    for node in cluster.nodes:
        nic = min(node.uplink_gbps, node.downlink_gbps)
        for g in node.gpus:
            t = g.type.name
            node_gbps[t] = min(node_gbps.get(t, math.inf), nic)
            gpu_gbps[t] = min(gpu_gbps.get(t, math.inf), nic / len(node.gpus))
    configs = [(t, k) for t in types for k in shares if k == 1 or mps.get(t, True)]
    total_w = sum(weights.values())
    grid = list(itertools.product(*(range(counts[t] + 1) for t in types)))
    most = max(counts.values())
    best_per_model: dict[str, dict[tuple[int, ...], float]] = {}
    for m, slo in slos_s.items():
        n_blocks = latency.num_blocks(m)
        sent = [latency.out_bytes(m, i) * cut_bytes_factor for i in range(n_blocks)]
        items: list[tuple[tuple[int, ...], float]] = []
        for s in range(1, min(max_stages, n_blocks) + 1):
            for cuts in itertools.combinations(range(1, n_blocks), s - 1):
                bounds = (0, *cuts, n_blocks)
                for stages in itertools.product(configs, repeat=s):
                    for b in batches:
                        try:
                            lat = [latency.latency(m, t, k, b, range(bounds[i], bounds[i + 1]))
                                   for i, (t, k) in enumerate(stages)]  # fmt: skip
                        except HetserveError:
                            continue  # the source has no such configuration
                        total = sum(lat)
                        for i in range(s - 1):
                            gbps = min(node_gbps[stages[i][0]], node_gbps[stages[i + 1][0]])
                            total += sent[bounds[i + 1] - 1] * b * 8 / (gbps * 1e9)
                        if total > (1 - slo_margin) * slo * (1 + 1e-12):
                            continue
                        for gs in itertools.product(range(1, most + 1), repeat=s):
                            use = [0] * len(types)
                            cap = math.inf
                            for i, ((t, k), g) in enumerate(zip(stages, gs, strict=True)):
                                use[types.index(t)] += g
                                cap = min(cap, k * g * b / lat[i])
                                moved = (sent[bounds[i] - 1] if i else 0.0,
                                         sent[bounds[i + 1] - 1] if i < s - 1 else 0.0)  # fmt: skip
                                for nbytes in moved:
                                    if nbytes > 0:
                                        cap = min(cap, g * gpu_gbps[t] * 1e9 / (nbytes * 8))
                            if all(u <= counts[t] for u, t in zip(use, types, strict=True)):
                                items.append((tuple(use), cap))
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
