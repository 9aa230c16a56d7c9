"""Beyond the paper: streams sharing GPUs (an MILP with HiGHS), and the power of an
assignment with idle GPUs counted."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from hetserve.core.errors import HetserveError
from hetserve.core.gpus import GpuType
from hetserve.planning.magicbatch.assign import exact_assignment
from hetserve.planning.magicbatch.options import (
    Assignment,
    EdgeStream,
    Option,
    gpu_instances,
    reject_reason,
    type_of,
)

SOLVE_MARGIN_S = 0.5  # HiGHS may run a little past its limit, and the answer is unpacked


def utilisation(o: Option, rate_rps: float) -> float:
    """The share of a GPU's time a stream keeps it busy: a batch every ``B / r`` seconds,
    ``exec(B)`` long."""
    return o.exec_s * rate_rps / o.batch


def total_power_w(
    a: Assignment,
    streams: Sequence[EdgeStream],
    gpus: Mapping[str, GpuType],
    counts: Mapping[str, int],
    park_idle: bool = False,
) -> float:
    """Every GPU's power (J/s): the streams' busy energy (which includes the idle power
    while busy), plus each GPU's idle power while it is not busy; a GPU without streams
    idles all the time, or draws nothing when ``park_idle`` (it can be parked)."""
    rate = {s.name: s.rate_rps for s in streams}
    busy = sum(o.power_w(rate[m]) for m, o in a.option_of.items())
    used: dict[str, float] = {}
    for m, g in a.gpu_of.items():
        used[g] = used.get(g, 0.0) + utilisation(a.option_of[m], rate[m])
    idle = 0.0
    for inst in gpu_instances(counts):
        w = gpus[type_of(inst)].idle_w
        if inst in used:
            idle += w * max(0.0, 1.0 - used[inst])
        elif not park_idle:
            idle += w
    return busy + idle


def shared(
    streams: Sequence[EdgeStream],
    counts: Mapping[str, int],
    options: Mapping[str, Mapping[str, Option]],
    gpus: Mapping[str, GpuType],
    park_idle: bool = False,
    time_limit_s: float = 10.0,
    max_nodes: int | None = None,
) -> Assignment:
    """Beyond the paper: streams may share a GPU (an MILP with HiGHS). Placing as many
    streams as possible first, it minimises :func:`total_power_w` subject to, per GPU,
    utilisation at most 1 and, per stream on it, its deadline with one batch of every
    other stream of that GPU ahead of its own: ``(B - 1) / r + exec(B) + sum of the others'
    exec <= D``. GPUs of a type are used in order (no two equivalent solutions that only
    swap GPUs). One stream per GPU is a feasible choice, so the optimum never uses more
    power than ``exact``'s assignment in the same accounting (a test). ``time_limit_s``
    bounds the whole call: building the model and its starts count, HiGHS gets the rest;
    ``max_nodes`` bounds its branch and bound the same way on every machine (where a result
    must not depend on the machine's speed)."""
    from hetserve.planning.milp import Rows, solve_highs

    t_start = time.perf_counter()  # time_limit_s bounds the whole call, not only HiGHS
    inst = gpu_instances(counts)
    rate = {s.name: s.rate_rps for s in streams}
    pairs = [(i, j) for i, s in enumerate(streams) for j, g in enumerate(inst)
             if options[s.name][type_of(g)].feasible]  # fmt: skip
    n_x, n_g = len(pairs), len(inst)
    z0 = n_x  # park variables (if park_idle), then T_j: one batch of each stream of GPU j
    t0 = n_x + (n_g if park_idle else 0)
    n_var = t0 + n_g
    big = 1.0 + 2.0 * sum(gpus[type_of(g)].tdp_w for g in inst) * 10
    cost = np.zeros(n_var)
    for v, (i, j) in enumerate(pairs):
        s, t = streams[i], type_of(inst[j])
        o = options[s.name][t]
        cost[v] = o.power_w(s.rate_rps) - gpus[t].idle_w * utilisation(o, s.rate_rps) - big
    if park_idle:
        for j, g in enumerate(inst):
            cost[z0 + j] = gpus[type_of(g)].idle_w
    rows = Rows()
    row = rows.add

    by_stream: dict[int, list[int]] = {}
    by_gpu: dict[int, list[int]] = {}
    for v, (i, j) in enumerate(pairs):
        by_stream.setdefault(i, []).append(v)
        by_gpu.setdefault(j, []).append(v)
    for vs in by_stream.values():  # each stream on at most one GPU
        row([(v, 1.0) for v in vs], -math.inf, 1.0)
    for j, vs in by_gpu.items():
        t = type_of(inst[j])
        name = {v: streams[pairs[v][0]].name for v in vs}
        row([(v, utilisation(options[name[v]][t], rate[name[v]])) for v in vs], -math.inf, 1.0)
        ex = {v: options[name[v]][t].exec_s for v in vs}
        total = sum(ex.values())
        row([(t0 + j, 1.0)] + [(v, -e) for v, e in ex.items()], 0.0, 0.0)  # T_j
        for v in vs:  # the stream of v meets its deadline with the others' batches ahead:
            # T_j - exec_v <= slack_v when x_v = 1, i.e. T_j + M x_v <= slack_v + exec_v + M
            o = options[name[v]][t]
            room = streams[pairs[v][0]].deadline_s - o.latency_s + o.exec_s
            m_big = total - room
            if m_big <= 0:
                continue  # never binding
            row([(t0 + j, 1.0), (v, m_big)], -math.inf, room + m_big)
        if park_idle:
            for v in vs:
                row([(v, 1.0), (z0 + j, -1.0)], -math.inf, 0.0)
    if park_idle:  # GPUs of a type switched on in order
        for j in range(n_g - 1):
            if type_of(inst[j]) == type_of(inst[j + 1]):
                row([(z0 + j, 1.0), (z0 + j + 1, -1.0)], 0.0, math.inf)
    if n_x == 0:  # nothing can go anywhere
        x: Any = np.zeros(0)
        return _shared_result(streams, inst, pairs, x, options)
    a, lo, hi = rows.matrix(n_var)
    # start from the better of exact's one-stream-per-GPU assignment and a first-fit
    # packing: both feasible here, so even a solve stopped by the time limit never uses
    # more power than exact
    ex = _better_start(streams, inst, options, gpus, park_idle)
    start = np.zeros(n_var)
    where = {(i, j): v for v, (i, j) in enumerate(pairs)}
    for i, s in enumerate(streams):
        g = ex.gpu_of.get(s.name)
        if g is not None:
            j = inst.index(g)
            start[where[(i, j)]] = 1.0
            start[t0 + j] += ex.option_of[s.name].exec_s
            if park_idle:
                start[z0 + j] = 1.0
    col_hi = np.ones(n_var)
    col_hi[t0:] = np.inf
    integer = np.ones(n_var)
    integer[t0:] = 0
    left_s = max(0.1, time_limit_s - (time.perf_counter() - t_start) - SOLVE_MARGIN_S)
    status, gap, x = solve_highs(
        a, lo, hi, np.zeros(n_var), col_hi, cost, integer,
        left_s, 1e-9, start, max_nodes,
    )  # fmt: skip
    if x is None:
        raise HetserveError(f"shared: the MILP found no solution ({status})")
    out = _shared_result(streams, inst, pairs, x, options)
    if status not in ("optimal", "time_limit"):  # HiGHS's solution limit: the node bound
        status = "node_limit" if max_nodes is not None and "SolutionLimit" in status else status
    out.solve.update(status=status, gap=gap, max_nodes=max_nodes)
    return out


def _shared_result(
    streams: Sequence[EdgeStream],
    inst: Sequence[str],
    pairs: Sequence[tuple[int, int]],
    x: Any,
    options: Mapping[str, Mapping[str, Option]],
) -> Assignment:
    gpu_of: dict[str, str] = {}
    opt_of: dict[str, Option] = {}
    for v, (i, j) in enumerate(pairs):
        if x[v] > 0.5:
            s = streams[i]
            gpu_of[s.name] = inst[j]
            opt_of[s.name] = options[s.name][type_of(inst[j])]
    rejected = {
        s.name: (reject_reason(options[s.name])
                 if not any(o.feasible for o in options[s.name].values())
                 else "no GPU can take it with the others")
        for s in streams if s.name not in gpu_of
    }  # fmt: skip
    return Assignment("shared", gpu_of, opt_of, rejected)


def _pack(
    streams: Sequence[EdgeStream],
    inst: Sequence[str],
    options: Mapping[str, Mapping[str, Option]],
) -> Assignment:
    """First fit: streams by falling utilisation on their cheapest type; each goes to the
    GPU (already used ones first, then by type energy) where it keeps utilisation <= 1
    and every deadline on that GPU (one batch of each other stream ahead)."""
    load: dict[str, list[tuple[float, float, float]]] = {g: [] for g in inst}  # u, exec, room
    gpu_of: dict[str, str] = {}
    opt_of: dict[str, Option] = {}

    def cheapest(s: EdgeStream) -> float:
        fe = [o for o in options[s.name].values() if o.feasible]
        return max((utilisation(o, s.rate_rps) for o in fe), default=0.0)

    for s in sorted(streams, key=lambda s: -cheapest(s)):
        opts = options[s.name]
        cands = [g for g in inst if opts[type_of(g)].feasible]
        cands.sort(key=lambda g: (not load[g], opts[type_of(g)].energy_j, inst.index(g)))
        for g in cands:
            o = opts[type_of(g)]
            u, e = utilisation(o, s.rate_rps), o.exec_s
            room = s.deadline_s - o.latency_s + e
            here = load[g]
            total = e + sum(x[1] for x in here)
            if u + sum(x[0] for x in here) > 1.0 or total > room:
                continue
            if any(total > x[2] for x in here):
                continue
            here.append((u, e, room))
            gpu_of[s.name], opt_of[s.name] = g, o
            break
    return Assignment("pack", gpu_of, opt_of)


def _better_start(
    streams: Sequence[EdgeStream],
    inst: Sequence[str],
    options: Mapping[str, Mapping[str, Option]],
    gpus: Mapping[str, GpuType],
    park_idle: bool,
) -> Assignment:
    counts: dict[str, int] = {}
    for g in inst:
        counts[type_of(g)] = counts.get(type_of(g), 0) + 1
    cands = [exact_assignment(streams, inst, options), _pack(streams, inst, options)]
    return min(
        cands,
        key=lambda a: (-len(a.gpu_of), total_power_w(a, streams, gpus, counts, park_idle)),
    )
