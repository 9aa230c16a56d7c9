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

The cost and energy objectives (``plan --objective cost|energy``) are checked the same way
from the same items: :func:`brute_force_min_cost` and :func:`brute_force_min_watts`.

Exponential: for 2 GPU types, a few blocks and at most about 6 GPUs.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping

from hetserve.core.cluster import Cluster
from hetserve.core.errors import HetserveError
from hetserve.core.latency import LatencyModel

#: one pipeline with its GPUs per stage: (GPUs used per type, capacity in requests/s,
#: joules a request costs above idle; ``nan`` where the energy is not asked for)
Item = tuple[tuple[int, ...], float, float]


def _items(
    cluster: Cluster,
    latency: LatencyModel,
    model: str,
    slo_s: float,
    counts: Mapping[str, int],
    *,
    slo_margin: float,
    max_stages: int,
    shares: tuple[int, ...],
    batches: tuple[int, ...],
    cut_bytes_factor: float,
    energy: bool = False,
) -> list[Item]:
    """Every pipeline of ``model`` within the SLO, with every vector of GPUs per stage that
    ``counts`` (GPUs per type) allows (module docstring)."""
    types = list(counts)
    mps = {g.name: g.mps for g in cluster.gpu_types()}
    idle = {g.name: float(g.idle_w) for g in cluster.gpu_types()}
    node_gbps: dict[str, float] = {}  # per type: the slowest NIC of a node holding it
    gpu_gbps: dict[str, float] = {}  # per type: the smallest NIC share of one GPU
    for node in cluster.nodes:
        nic = min(node.uplink_gbps, node.downlink_gbps)
        for g in node.gpus:
            t = g.type.name
            node_gbps[t] = min(node_gbps.get(t, math.inf), nic)
            gpu_gbps[t] = min(gpu_gbps.get(t, math.inf), nic / len(node.gpus))
    configs = [(t, k) for t in types for k in shares if k == 1 or mps.get(t, True)]
    most = max(counts.values(), default=0)
    n_blocks = latency.num_blocks(model)
    sent = [latency.out_bytes(model, i) * cut_bytes_factor for i in range(n_blocks)]
    items: list[Item] = []
    for s in range(1, min(max_stages, n_blocks) + 1):
        for cuts in itertools.combinations(range(1, n_blocks), s - 1):
            bounds = (0, *cuts, n_blocks)
            for stages in itertools.product(configs, repeat=s):
                for b in batches:
                    try:
                        lat = [latency.latency(model, t, k, b, range(bounds[i], bounds[i + 1]))
                               for i, (t, k) in enumerate(stages)]  # fmt: skip
                    except HetserveError:
                        continue  # the source has no such configuration
                    total = sum(lat)
                    for i in range(s - 1):
                        gbps = min(node_gbps[stages[i][0]], node_gbps[stages[i + 1][0]])
                        total += sent[bounds[i + 1] - 1] * b * 8 / (gbps * 1e9)
                    if total > (1 - slo_margin) * slo_s * (1 + 1e-12):
                        continue
                    joules = math.nan
                    if energy:  # per request, above the slices' idle draw for their time
                        joules = 0.0
                        for i, (t, k) in enumerate(stages):
                            e = latency.energy(model, t, k, b, range(bounds[i], bounds[i + 1]))
                            joules += max(0.0, e - idle[t] / k * lat[i]) / b
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
                            items.append((tuple(use), cap, joules))
    return items


def _best_rps(items: list[Item], grid: list[tuple[int, ...]]) -> dict[tuple[int, ...], float]:
    """Per budget of GPUs per type: the most requests/s the items serve within it (an
    unbounded knapsack, in increasing order of the budget)."""
    table = dict.fromkeys(grid, 0.0)
    for a in grid:
        for use, val, _ in items:
            rest = tuple(x - u for x, u in zip(a, use, strict=True))
            if min(rest) >= 0:
                table[a] = max(table[a], table[rest] + val)
    return table


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
    """The throughput objective (PPipe's): the most ``min_m T_m / w_m`` any plan gives."""
    counts = cluster.gpu_counts()
    types = list(counts)
    total_w = sum(weights.values())
    grid = list(itertools.product(*(range(counts[t] + 1) for t in types)))
    best_per_model = {
        m: _best_rps(_items(cluster, latency, m, slo, counts, slo_margin=slo_margin,
                            max_stages=max_stages, shares=shares, batches=batches,
                            cut_bytes_factor=cut_bytes_factor), grid)
        for m, slo in slos_s.items()
    }  # fmt: skip
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


def _least(
    per_model: Mapping[str, Mapping[tuple[int, ...], float]], budget: tuple[int, ...]
) -> float | None:
    """The least sum over models of ``per_model[m][a_m]`` with the ``a_m`` within
    ``budget`` together (each table holds only the budgets that serve its model)."""
    models = list(per_model)
    best: float | None = None

    def go(i: int, left: tuple[int, ...], acc: float) -> None:
        nonlocal best
        if best is not None and acc >= best:
            return
        if i == len(models):
            best = acc
            return
        for a, v in per_model[models[i]].items():
            if all(x <= y for x, y in zip(a, left, strict=True)):
                go(i + 1, tuple(y - x for x, y in zip(a, left, strict=True)), acc + v)

    go(0, budget, 0.0)
    return best


def brute_force_min_cost(
    cluster: Cluster,
    latency: LatencyModel,
    slos_s: Mapping[str, float],
    demand_rps: Mapping[str, float],
    *,
    slo_margin: float = 0.4,
    max_stages: int = 2,
    shares: tuple[int, ...] = (1, 2),
    batches: tuple[int, ...] = (1, 2),
    cut_bytes_factor: float = 0.5,
) -> float | None:
    """The cost objective: the least price per hour of the GPUs any plan takes that serves
    every model's ``demand_rps`` within the usable GPUs (each type's cap), from the
    cluster's prices; None if none does. Per model, the cheapest budget of GPUs per type
    whose knapsack optimum reaches its demand; then every split of the usable GPUs."""
    usable = cluster.usable()
    types = list(usable)
    grid = list(itertools.product(*(range(usable[t] + 1) for t in types)))
    price = [cluster.price_per_hour(t) for t in types]
    per_model = {}
    for m, slo in slos_s.items():
        items = _items(cluster, latency, m, slo, usable, slo_margin=slo_margin,
                       max_stages=max_stages, shares=shares, batches=batches,
                       cut_bytes_factor=cut_bytes_factor)  # fmt: skip
        rps = _best_rps(items, grid)
        d = demand_rps[m]
        per_model[m] = {
            a: sum(p * x for p, x in zip(price, a, strict=True))
            for a in grid
            if rps[a] >= d * (1 - 1e-9)
        }
    return _least(per_model, tuple(usable[t] for t in types))


def _pareto(items: list[Item]) -> list[Item]:
    """Per vector of GPUs, the items no other of the same vector beats in both capacity
    and joules (replacing one by its better never raises a plan's watts)."""
    by_use: dict[tuple[int, ...], list[Item]] = {}
    for it in items:
        by_use.setdefault(it[0], []).append(it)
    out: list[Item] = []
    for group in by_use.values():
        group.sort(key=lambda it: (it[2], -it[1]))  # fewest joules first, then most rps
        most = -1.0
        for it in group:
            if it[1] > most:
                out.append(it)
                most = it[1]
    return out


def _least_watts(
    items: list[Item], idle: list[float], demand: float, budget: tuple[int, ...]
) -> dict[tuple[int, ...], float]:
    """Per vector of GPUs taken (within ``budget``), the least watts of a multiset of items
    taking exactly those GPUs that serves ``demand``: their idle draw plus the demand
    served by the fewest joules per request first (exact for a given multiset)."""
    items = sorted(_pareto(items), key=lambda it: it[0])
    out: dict[tuple[int, ...], float] = {}

    def fill(chosen: list[Item]) -> float:
        left, watts = demand, 0.0
        for _, cap, j in sorted(chosen, key=lambda it: it[2]):
            take = min(cap, left)
            watts += take * j
            left -= take
            if left <= 0:
                break
        return watts

    def go(start: int, used: tuple[int, ...], chosen: list[Item], rps: float) -> None:
        if chosen and rps >= demand * (1 - 1e-9):
            w = sum(i * u for i, u in zip(idle, used, strict=True)) + fill(chosen)
            if w < out.get(used, math.inf):
                out[used] = w
            # (and on: one more item adds its idle draw, but may serve part of the demand
            # for fewer joules than the items that already reach it)
        for k in range(start, len(items)):
            use = items[k][0]
            nxt = tuple(u + x for u, x in zip(used, use, strict=True))
            if all(x <= y for x, y in zip(nxt, budget, strict=True)):
                chosen.append(items[k])
                go(k, nxt, chosen, rps + items[k][1])
                chosen.pop()

    go(0, tuple(0 for _ in budget), [], 0.0)
    if demand <= 0:
        out[tuple(0 for _ in budget)] = 0.0
    return out


def brute_force_min_watts(
    cluster: Cluster,
    latency: LatencyModel,
    slos_s: Mapping[str, float],
    demand_rps: Mapping[str, float],
    *,
    slo_margin: float = 0.4,
    max_stages: int = 2,
    shares: tuple[int, ...] = (1, 2),
    batches: tuple[int, ...] = (1, 2),
    cut_bytes_factor: float = 0.5,
) -> float | None:
    """The energy objective: the least watts of any plan that serves every model's
    ``demand_rps`` within the usable GPUs: each GPU taken draws its type's idle power
    (the catalog's ``idle_w``), each request the joules its stages spend above the
    slices' idle draw (the latency source's energy of a batch, less ``idle_w / share``
    for the batch's time, over the batch). Every multiset of pipelines per model (after
    dropping, among pipelines on the same GPUs, those another beats in both capacity and
    joules), then every split of the usable GPUs; None if no plan serves the demand."""
    usable = cluster.usable()
    types = list(usable)
    by_name = {g.name: float(g.idle_w) for g in cluster.gpu_types()}
    idle = [by_name[t] for t in types]
    budget = tuple(usable[t] for t in types)
    per_model = {}
    for m, slo in slos_s.items():
        items = _items(cluster, latency, m, slo, usable, slo_margin=slo_margin,
                       max_stages=max_stages, shares=shares, batches=batches,
                       cut_bytes_factor=cut_bytes_factor, energy=True)  # fmt: skip
        per_model[m] = _least_watts(items, idle, demand_rps[m], budget)
    return _least(per_model, budget)
