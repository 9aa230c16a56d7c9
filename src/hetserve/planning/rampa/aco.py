"""RAMPA's search (TCC 2025, section IV-C): an ant colony per stage count, and the
baselines of section V-A-4 (PE, NCAR).

**Colony** (Table VII's parameters are the defaults): for one stage count ``S``, each of
``agents`` agents per generation (``generations`` of them) picks ``S`` distinct free GPUs
with probability ``tau_g^alpha / C_g^beta`` (the GPU search), then, for each pair of
consecutive stages, a sub-agent walks from the first GPU's switch to the second's, link by
link, each next link drawn with probability ``tau_l^alpha / C_l^beta`` among the links to
switches not yet visited that keep the walk within ``max_detour_hops`` of a shortest path
and have bandwidth left (the network link search); the requirement check
(``state.best_cuts``) then looks for stage cuts that meet the throughput, latency and
memory requirements. An agent is dropped as soon as its cost (Eq. 6) must reach the best
so far: before its walks, its GPUs plus a floor on its paths (each path's two attachment
links and, per switch hop between its ends, the cheapest switch link); during them, what
it has walked. Before the requirement check, GPUs whose types could not meet the
requirements over free, instant cuts (``state.could_meet``, cached per type sequence) are
dropped too. None of this drops an agent the check would have accepted at a lower cost.
After each generation every pheromone becomes ``rho * tau`` and the generation's
best solution's GPUs and links gain ``h = phi / cost`` (the paper's update, as written:
``rho`` multiplies).

**RAMPA** runs the colony for every stage count from the smallest that can hold the model
(memory) upwards, keeping the cheapest, and stops when ``S`` stages must cost more than
the best found: the ``S`` cheapest free GPUs plus, per cut, the cheapest pair of
attachment links (a lower bound that only grows with ``S``). **NCAR** is the colony at
one given stage count. **PE** (PipeEdge) at a given stage count maximises throughput: the
fastest free GPUs (the racks with most of them first), shortest paths, and the cuts with
the shortest pipeline cycle.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hetserve.planning.rampa.state import (
    ClusterState,
    Placement,
    Service,
    best_cuts,
    could_meet,
)


@dataclass(frozen=True)
class AcoParams:
    agents: int = 20
    generations: int = 20
    rho: float = 0.1  # pheromone decrease rate
    phi: float = 100.0  # pheromone increase rate
    alpha: float = 2.0  # pheromone weight
    beta: float = 1.0  # allocation cost weight
    tau0: float = 1000.0  # initial pheromone
    max_detour_hops: int = 2  # sub-agents may walk this many hops beyond a shortest path
    seed: int = 0


def _walk(
    state: ClusterState,
    a: str,
    b: str,
    tau_l: dict[str, float],
    tau_rest: float,
    inv_cost: dict[str, float],
    full: set[str],
    p: AcoParams,
    rng: np.random.Generator,
) -> tuple[str, ...] | None:
    """A sub-agent's path from GPU ``a`` to GPU ``b`` (``tau_rest``: the pheromone of
    every link not in ``tau_l``; ``inv_cost``: ``1 / C_l^beta`` per link; ``full``: the
    links without bandwidth left)."""
    net = state.net
    ga, gb = net.gpus[a], net.gpus[b]
    dst = gb.switch
    cur, path, seen = ga.switch, [ga.up], {ga.switch}
    budget = net.dist[cur][dst] + p.max_detour_hops
    alpha = p.alpha
    dist, out = net.dist, net.out
    while cur != dst:
        cands, w, total = [], [], 0.0
        for n, link in out[cur]:
            if n in seen or dist[n][dst] > budget - 1 or link in full:
                continue
            x = tau_l.get(link, tau_rest) ** alpha * inv_cost[link]
            cands.append((n, link))
            w.append(x)
            total += x
        if not cands:
            return None
        k = 0
        if len(cands) > 1:  # roulette wheel (a NumPy call per step costs more than this)
            r, k = rng.random() * total, 0
            while k < len(w) - 1 and r >= w[k]:
                r -= w[k]
                k += 1
        cur, link = cands[k]
        path.append(link)
        seen.add(cur)
        budget -= 1
    path.append(gb.down)
    return tuple(path)


def colony(
    state: ClusterState,
    svc: Service,
    stages: int,
    p: AcoParams = AcoParams(),
    bound: float = math.inf,
    rng: np.random.Generator | None = None,
    typed: dict[tuple[str, ...], bool] | None = None,
) -> Placement | None:
    """The cheapest placement the colony finds at ``stages`` stages (None if none meets
    the requirements or costs less than ``bound``). ``typed`` caches ``could_meet`` per
    sequence of GPU types (it may be shared between calls for one service and state)."""
    rng = rng or np.random.default_rng(p.seed)
    typed = {} if typed is None else typed
    gc, lc = state.costs()
    free = sorted(state.free)
    if stages > len(free) or stages > len(svc.ops):
        return None
    gpu_of = state.net.gpus
    types = [gpu_of[g].type for g in free]
    cost_g = np.array([gc[g] for g in free])
    inv_cost_g = 1.0 / np.maximum(cost_g, 1e-9) ** p.beta
    mem_g = np.array([gpu_of[g].memory_gb * 1e9 for g in free])
    need = sum(op.memory_bytes for op in svc.ops)
    inv_cost = {x: 1.0 / max(c, 1e-9) ** p.beta for x, c in lc.items()}
    full = {x for x in lc if state.room_bps(x) <= 0}
    up_g = np.array([lc[gpu_of[g].up] for g in free])
    down_g = np.array([lc[gpu_of[g].down] for g in free])
    sw = [gpu_of[g].switch for g in free]
    dist = state.net.dist
    # the cheapest switch-to-switch link: a path between switches d hops apart costs at
    # least its GPUs' attachment links and d times this
    adj = state.net.adj
    mid = min((lc[f"{u}->{v}"] for u in adj for v in adj[u]), default=0.0)
    floor = 0.0
    tau_g = np.full(len(free), p.tau0)
    tau_l: dict[str, float] = {}  # links that gained pheromone; the rest are at tau_rest
    tau_rest = p.tau0
    pos = {g: i for i, g in enumerate(free)}
    best: Placement | None = None
    best_cost = bound
    seen: dict[tuple, object] = {}
    for _ in range(p.generations):
        gen: Placement | None = None
        w = tau_g**p.alpha * inv_cost_g
        for _ in range(p.agents):
            # the GPU search: ``stages`` GPUs drawn one after another with probability
            # proportional to w, without replacement (the order of exponential keys / w)
            keys = rng.exponential(size=len(free)) / w
            idx = np.argpartition(keys, stages - 1)[:stages]
            idx = idx[np.argsort(keys[idx])]
            cost = float(cost_g[idx].sum())
            if stages > 1:  # every path leaves by its GPU's up link, enters by a down link
                floor = float(up_g[idx[:-1]].sum() + down_g[idx[1:]].sum())
                floor += mid * sum(dist[sw[a]][sw[b]] for a, b in itertools.pairwise(idx))
            if cost + floor >= best_cost or mem_g[idx].sum() < need:
                continue  # too dear already, or the GPUs cannot hold the model
            gpus = tuple(free[i] for i in idx)
            paths = []
            for a, b in itertools.pairwise(gpus):
                path = _walk(state, a, b, tau_l, tau_rest, inv_cost, full, p, rng)
                if path is None:
                    break
                paths.append(path)
                cost += sum(lc[x] for x in path)
                if cost >= best_cost:
                    break
            if len(paths) != stages - 1 or cost >= best_cost:
                continue
            kinds = tuple(types[i] for i in idx)
            ok = typed.get(kinds)
            if ok is None:
                ok = typed[kinds] = could_meet(state, svc, gpus)
            if not ok:
                continue  # no cuts could make GPUs of these types meet the requirements
            key = (gpus, tuple(paths))
            hit = seen.get(key)
            if hit is None:
                hit = seen[key] = best_cuts(state, svc, gpus, paths) or False
            if not hit:
                continue
            bounds, est = hit  # type: ignore[misc]
            cand = Placement(svc, bounds, gpus, tuple(paths), est, cost)
            if gen is None or cost < gen.cost:
                gen = cand
            if cost < best_cost:
                best, best_cost = cand, cost
        tau_g *= p.rho
        tau_rest *= p.rho
        for k in tau_l:
            tau_l[k] *= p.rho
        if gen is not None:
            h = p.phi / gen.cost if gen.cost > 0 else p.phi
            for g in gen.gpus:
                tau_g[pos[g]] += h
            for path in gen.paths:
                for x in path:
                    tau_l[x] = tau_l.get(x, tau_rest) + h
    return best


def min_stages(state: ClusterState, svc: Service) -> int:
    """The fewest stages whose GPUs could hold the model (the largest free memories)."""
    mems = sorted((state.net.gpus[g].memory_gb * 1e9 for g in state.free), reverse=True)
    need, acc = sum(op.memory_bytes for op in svc.ops), 0.0
    for k, m in enumerate(mems, start=1):
        acc += m
        if acc >= need:
            return k
    return len(mems) + 1


def rampa(
    state: ClusterState, svc: Service, p: AcoParams = AcoParams(), max_stages: int | None = None
) -> Placement | None:
    """RAMPA: the colony at every stage count, the cheapest placement (module docstring)."""
    rng = np.random.default_rng(p.seed)
    gc, lc = state.costs()
    cheapest = np.sort(np.array([gc[g] for g in state.free]))
    # every cut's path leaves one GPU and enters another by their attachment links
    attach = min(
        (lc[state.net.gpus[g].up] + lc[state.net.gpus[g].down] for g in state.free), default=0.0
    )
    best: Placement | None = None
    typed: dict[tuple[str, ...], bool] = {}
    top = min(len(svc.ops), len(state.free), max_stages or len(svc.ops))
    for s in range(max(1, min_stages(state, svc)), top + 1):
        if best is not None and cheapest[:s].sum() + (s - 1) * attach >= best.cost:
            break  # s stages cost more than the best placement, whatever they are
        found = colony(state, svc, s, p, best.cost if best else math.inf, rng, typed)
        if found is not None:
            best = found
    return best


def pipeedge(state: ClusterState, svc: Service, stages: int) -> Placement | None:
    """PE at ``stages`` stages: the fastest free GPUs, rack by rack; shortest paths with
    bandwidth left; the cuts with the shortest pipeline cycle."""
    net = state.net
    free = sorted(state.free)
    if stages > len(free) or stages > len(svc.ops):
        return None
    per_rack: dict[tuple[str, str], int] = {}
    for g in free:
        key = (net.gpus[g].rack, net.gpus[g].type)
        per_rack[key] = per_rack.get(key, 0) + 1
    order = sorted(free, key=lambda g: (-net.gpus[g].tflops, -net.gpus[g].memory_gb,
                                        -per_rack[(net.gpus[g].rack, net.gpus[g].type)],
                                        net.gpus[g].rack, g))  # fmt: skip
    gpus = tuple(order[:stages])
    paths = []
    for a, b in itertools.pairwise(gpus):
        path = shortest_path(state, a, b)
        if path is None:
            return None
        paths.append(path)
    hit = best_cuts(state, svc, gpus, paths)
    if hit is None:
        return None
    bounds, est = hit
    return Placement(svc, bounds, gpus, tuple(paths), est, state.cost_of(gpus, paths))


def ncar(
    state: ClusterState, svc: Service, stages: int, p: AcoParams = AcoParams()
) -> Placement | None:
    """NCAR: RAMPA's cost objective at one given stage count."""
    return colony(state, svc, stages, p)


def shortest_path(state: ClusterState, a: str, b: str) -> tuple[str, ...] | None:
    """The fewest-hop path between two GPUs over switch links with bandwidth left (ties by
    switch name)."""
    net = state.net
    ga, gb = net.gpus[a], net.gpus[b]
    if ga.switch == gb.switch:
        return (ga.up, gb.down)
    prev = {ga.switch: ga.switch}
    q = deque([ga.switch])
    while q:
        s = q.popleft()
        for t in net.adj[s]:
            if t not in prev and state.room_bps(f"{s}->{t}") > 0:
                prev[t] = s
                if t == gb.switch:
                    route = [t]
                    while route[-1] != ga.switch:
                        route.append(prev[route[-1]])
                    route.reverse()
                    mids = [f"{x}->{y}" for x, y in itertools.pairwise(route)]
                    return (ga.up, *mids, gb.down)
                q.append(t)
    return None


def stage_counts(text: str, services: Sequence[str]) -> dict[str, int]:
    """``--stages 2,3,2,4,8,5``: one stage count per service, in order."""
    from hetserve.core.errors import HetserveError

    try:
        vals = [int(v) for v in text.split(",")]
    except ValueError:
        raise HetserveError(f"--stages: expected integers like 2,3,2,4,8,5, got {text!r}") from None
    if len(vals) != len(services) or min(vals) < 1:
        raise HetserveError(
            f"--stages: expected {len(services)} counts >= 1 (one per service: "
            f"{', '.join(services)}), got {text!r}"
        )
    return dict(zip(services, vals, strict=True))
