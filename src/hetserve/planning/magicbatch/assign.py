"""One stream per GPU: ``exact`` (a transportation LP), ``fcfs`` and ``greedy``
(section 5.1). The tests check ``exact`` against a brute force of their own."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from hetserve.core.errors import HetserveError
from hetserve.planning.magicbatch.options import (
    METHODS,
    Assignment,
    EdgeStream,
    Option,
    gpu_instances,
    reject_reason,
    type_of,
)
from hetserve.planning.magicbatch.psoga import PsoGaParams, pso_ga


def assign(
    method: str,
    streams: Sequence[EdgeStream],
    counts: Mapping[str, int],
    options: Mapping[str, Mapping[str, Option]],
    order: Sequence[str] | None = None,
) -> Assignment:
    """Assign streams to GPUs by ``method`` (``exact``, ``fcfs``, ``greedy``). ``order``:
    the GPU types from the least to the most advanced (FCFS's numbering)."""
    if method not in METHODS:
        from hetserve.core.errors import unknown

        raise unknown("assignment method", method, METHODS)
    inst = gpu_instances(counts)
    if method == "exact":
        return exact_assignment(streams, inst, options)
    if method == "pso-ga":
        return pso_ga(streams, counts, options, PsoGaParams())
    if method == "fcfs":
        types = list(order or counts)
        inst = sorted(inst, key=lambda g: (types.index(type_of(g)), g))
    gpu_of: dict[str, str] = {}
    opt_of: dict[str, Option] = {}
    rejected: dict[str, str] = {}
    idle = list(inst)
    for s in streams:
        opts = options[s.name]
        cands = [g for g in idle if opts[type_of(g)].feasible]
        if method == "greedy":
            cands.sort(key=lambda g: (opts[type_of(g)].energy_j, idle.index(g)))
        if not cands:
            rejected[s.name] = (
                "no idle GPU can serve it" if any(o.feasible for o in opts.values())
                else reject_reason(opts)
            )  # fmt: skip
            continue
        g = cands[0]
        idle.remove(g)
        gpu_of[s.name] = g
        opt_of[s.name] = opts[type_of(g)]
    return Assignment(method, gpu_of, opt_of, rejected)


def exact_assignment(
    streams: Sequence[EdgeStream], inst: Sequence[str], options: Mapping[str, Mapping[str, Option]]
) -> Assignment:
    """A transportation problem over streams x GPU *types* (each type offers as many
    places as it has GPUs): its constraint matrix is that of a bipartite graph (totally
    unimodular), so every vertex of the LP is integral; HiGHS solves it as an LP (simplex:
    a vertex optimum). The status must be optimal and every value integral (checked: an
    error otherwise, never a rounded guess). Placing a stream earns more than any energy
    difference, so the optimum places as many as possible first."""
    from scipy import sparse

    from hetserve.planning.milp import solve_highs

    types = list(dict.fromkeys(type_of(g) for g in inst))
    cap = {t: sum(1 for g in inst if type_of(g) == t) for t in types}
    pairs = [(i, k) for i, s in enumerate(streams) for k, t in enumerate(types)
             if options[s.name][t].feasible]  # fmt: skip
    gpu_of: dict[str, str] = {}
    opt_of: dict[str, Option] = {}
    if pairs:
        power = np.array(
            [options[streams[i].name][types[k]].power_w(streams[i].rate_rps) for i, k in pairs]
        )
        big = 1.0 + 2.0 * len(streams) * float(power.max())
        n = len(pairs)
        rows = [i for i, _ in pairs] + [len(streams) + k for _, k in pairs]
        cols = list(range(n)) * 2
        a = sparse.csr_array((np.ones(2 * n), (rows, cols)), shape=(len(streams) + len(types), n))
        hi = np.array([1.0] * len(streams) + [float(cap[t]) for t in types])
        status, _gap, x = solve_highs(
            a, np.full(len(hi), -np.inf), hi, np.zeros(n), np.ones(n), power - big,
            np.zeros(n), 60.0,
        )  # fmt: skip
        if x is None or status != "optimal":
            raise HetserveError(f"exact: the assignment LP ended without an optimum ({status})")
        off = float(np.abs(x - np.round(x)).max())
        if off > 1e-6:
            raise HetserveError(
                f"exact: the assignment LP's optimum is not integral (a value {off:.3g} from "
                f"the nearest integer); this is a solver defect, please report it"
            )
        used = dict.fromkeys(types, 0)
        for v, (i, k) in enumerate(pairs):
            if x[v] > 0.5:
                t = types[k]
                s = streams[i]
                gpu_of[s.name] = f"{t}#{used[t]}"
                used[t] += 1
                opt_of[s.name] = options[s.name][t]
    rejected: dict[str, str] = {}
    for s in streams:
        if s.name not in gpu_of:
            opts = options[s.name]
            rejected[s.name] = (
                "no GPU left for it (more streams than GPUs can serve)"
                if any(o.feasible for o in opts.values()) else reject_reason(opts)
            )  # fmt: skip
    return Assignment("exact", gpu_of, opt_of, rejected)
