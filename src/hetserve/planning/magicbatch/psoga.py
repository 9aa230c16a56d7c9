"""MagicBatch's PSO-GA heuristic (section 4.3)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from hetserve.planning.magicbatch.options import Assignment, EdgeStream, Option, reject_reason


@dataclass(frozen=True)
class PsoGaParams:
    """PSO-GA's settings. The paper gives the algorithm (section 4.3) but not its numbers;
    these are the textbook ones: 30 particles, 100 iterations, acceleration constants
    ``c1 = c2 = 2`` (Eq. 14, no inertia term, as written), velocities clamped to the
    number of GPU types, one-point crossover with probability 0.8, a gene mutated with
    probability 0.05."""

    particles: int = 30
    iterations: int = 100
    c1: float = 2.0
    c2: float = 2.0
    crossover: float = 0.8
    mutation: float = 0.05
    seed: int = 0


def pso_ga(
    streams: Sequence[EdgeStream],
    counts: Mapping[str, int],
    options: Mapping[str, Mapping[str, Option]],
    p: PsoGaParams,
) -> Assignment:
    """The paper's PSO-GA. A particle gives each stream a GPU *type* (Eqs. 11-12); its
    fitness is the energy per second of the assignment, or infinity when a type is given
    more streams than it has GPUs or a stream a type it cannot run on (Eq. 13). Each
    iteration makes children by crossover and mutation (GA), keeps the fittest particles
    (parents and children), and moves them by the velocity update of Eqs. 14-15 towards
    their own best and the global best (positions rounded to type indices). Streams that
    no type can serve are rejected first; if no feasible particle is ever found, streams
    are rejected from the last until the best particle fits."""
    rng = np.random.default_rng(p.seed)
    types = list(counts)
    n_t = len(types)
    cap = np.array([counts[t] for t in types])
    rejected: dict[str, str] = {}
    live = []
    for s in streams:
        opts = options[s.name]
        if not any(opts[t].feasible for t in types):
            rejected[s.name] = reject_reason(opts)
        else:
            live.append(s)
    m = len(live)
    if m == 0 or n_t == 0:
        for s in live:
            rejected[s.name] = "no GPU"
        return Assignment("pso-ga", {}, {}, rejected)
    power = np.full((m, n_t), np.inf)
    for i, s in enumerate(live):
        for j, t in enumerate(types):
            o = options[s.name][t]
            if o.feasible:
                power[i, j] = o.power_w(s.rate_rps)
    feas = [np.flatnonzero(np.isfinite(power[i])) for i in range(m)]
    rows = np.arange(m)

    def fitness(x: np.ndarray) -> float:
        if (np.bincount(x, minlength=n_t) > cap).any():
            return math.inf
        return float(power[rows, x].sum())

    def random_particle() -> np.ndarray:
        return np.array([rng.choice(f) for f in feas])

    pos = np.array([random_particle() for _ in range(p.particles)])
    vel = rng.uniform(-1, 1, size=pos.shape)
    fit = np.array([fitness(x) for x in pos])
    pbest, pbest_fit = pos.copy(), fit.copy()
    g = int(np.argmin(fit))
    gbest, gbest_fit = pos[g].copy(), float(fit[g])
    for _ in range(p.iterations):
        # GA: children by one-point crossover of random pairs, then mutation
        kids = []
        for _k in range(p.particles // 2):
            a, b = pos[rng.integers(p.particles)], pos[rng.integers(p.particles)]
            c1, c2 = a.copy(), b.copy()
            if m > 1 and rng.random() < p.crossover:
                cut = int(rng.integers(1, m))
                c1[cut:], c2[cut:] = b[cut:], a[cut:]
            for c in (c1, c2):
                mut = rng.random(m) < p.mutation
                for i in np.flatnonzero(mut):
                    c[i] = rng.choice(feas[i])
                kids.append(c)
        allpos = np.concatenate([pos, np.array(kids)]) if kids else pos
        allvel = np.concatenate([vel, rng.uniform(-1, 1, size=(len(kids), m))]) if kids else vel
        allfit = np.array([fitness(x) for x in allpos])
        keep = np.argsort(allfit, kind="stable")[: p.particles]
        pos, vel, fit = allpos[keep], allvel[keep], allfit[keep]
        # the kept particles inherit the personal bests of the slots they take
        pbest, pbest_fit, gbest, gbest_fit = _bests(pos, fit, pbest, pbest_fit, gbest, gbest_fit)
        # PSO: Eqs. 14-15, positions rounded and clipped to type indices
        r1, r2 = rng.random(pos.shape), rng.random(pos.shape)
        vel = vel + p.c1 * r1 * (pbest - pos) + p.c2 * r2 * (gbest - pos)
        vel = np.clip(vel, -n_t, n_t)
        pos = np.clip(np.rint(pos + vel), 0, n_t - 1).astype(int)
        fit = np.array([fitness(x) for x in pos])
        pbest, pbest_fit, gbest, gbest_fit = _bests(pos, fit, pbest, pbest_fit, gbest, gbest_fit)
    x = gbest.copy()
    placed = list(range(m))
    if not math.isfinite(gbest_fit):  # drop streams from the last until the types fit
        while placed:
            used = np.bincount(x[placed], minlength=n_t)
            ok = (used <= cap).all() and np.isfinite(power[placed, x[placed]]).all()
            if ok:
                break
            i = placed.pop()
            rejected[live[i].name] = "PSO-GA found no feasible GPU type for it"
    gpu_of: dict[str, str] = {}
    opt_of: dict[str, Option] = {}
    next_k = dict.fromkeys(types, 0)
    for i in placed:
        t = types[int(x[i])]
        gpu_of[live[i].name] = f"{t}#{next_k[t]}"
        next_k[t] += 1
        opt_of[live[i].name] = options[live[i].name][t]
    return Assignment("pso-ga", gpu_of, opt_of, rejected)


def _bests(
    pos: np.ndarray,
    fit: np.ndarray,
    pbest: np.ndarray,
    pbest_fit: np.ndarray,
    gbest: np.ndarray,
    gbest_fit: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Personal bests where the particles improved, and the global best."""
    better = fit < pbest_fit
    pbest = np.where(better[:, None], pos, pbest)
    pbest_fit = np.where(better, fit, pbest_fit)
    g = int(np.argmin(pbest_fit))
    if pbest_fit[g] < gbest_fit:
        gbest, gbest_fit = pbest[g].copy(), float(pbest_fit[g])
    return pbest, pbest_fit, gbest, gbest_fit
