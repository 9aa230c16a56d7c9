"""HERD (Shepherd section 4): streams into serving groups that maximise the minimum burst
tolerance.

Per model-stream ``i`` (the streams of one model, aggregated, as Shepherd does to scale):
``n_i = rate_i / T_i`` GPUs carry its average load, with ``T_i`` the best single-GPU goodput
of its model under its SLO: the largest batch ``b <= max_batch`` with ``2 l(b) <= SLO`` (a
request may wait for one batch before riding the next), ``T = b / l(b)``. A group ``j`` of
``size_j`` GPUs gives each of its streams the burst tolerance ``bt(i) = size_j / n_i``.

The ILP (Table 2) assigns model-streams to groups and GPUs to groups to maximise
``min_i bt(i)`` subject to (a) ``sum_j size_j <= N``; (b) ``size_j <= G_max``; (c) the
models of a group fit one GPU's memory (minus a reserve); (d) every model-stream in one
group; (e) a group's models from one affinity set (pairwise affinity ``A <= K_max``,
Shepherd Eq. 4). Linearised: ``w_ij <= size_j``, ``w_ij <= G_max x_ij`` stand for
``size_j x_ij`` (the objective pushes them up), and ``t n_i <= sum_j w_ij``; groups are
ordered by size to break symmetry. Solved with HiGHS. One constraint is ours: (f) a group
carries its streams' average load, ``sum_i n_i x_ij <= size_j``. The paper's list leaves
it out, and without it the max-min happily puts many streams that each tolerate a burst
alone into a group that cannot carry them together.

At scale (``method="search"``, the default above 40 model-streams) the same problem is
solved by bisection on ``t``: a given ``t`` needs ``r_i = ceil(t n_i)`` GPUs for stream
``i``; in each affinity set, streams sorted by ``r_i`` fill groups in that order while
their models fit in memory and the group, ``max(r_first, ceil(sum n_i))`` GPUs, stays
within ``G_max`` (first fit over the set's groups); ``t`` is feasible if the groups need at
most ``N`` GPUs. This greedy
packing is a heuristic (the tests compare it with the ILP and brute force).

GPUs left over go one by one to the group whose weakest stream tolerates the least, up to
``G_max``; a group at ``G_max`` gives its other streams a group of their own instead (both
methods).

If the average load cannot be carried at all (an overloaded cluster, or groups too small
to pack it), every ``n_i`` is scaled down alike to the largest share the packing carries
(bisection), and ``load_scale`` says by how much; burst tolerances are always of the real
loads.

A model whose streams need more GPUs than a group can give is split first
(:func:`split_heavy`): its streams are dealt into parts of at most ``cap`` GPUs of load
(largest first, each to the lightest part), each part a model-stream of its own; the plan
then names each group's streams, and requests go to a group by stream.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from hetserve.core.errors import HetserveError
from hetserve.core.latency import LatencyModel
from hetserve.core.plan import ModelPlan, Pipeline, Plan, ServingGroup, Stage
from hetserve.planning.milp import Rows, solve_highs


@dataclass(frozen=True)
class ModelStream:
    model: str
    rate_rps: float
    n_gpus: float  # GPUs for its average load (n_i)
    mem_gb: float
    affinity: int = 0
    streams: tuple[tuple[str, float], ...] = ()  # (stream, rate) when known


@dataclass(frozen=True)
class HerdResult:
    groups: tuple[tuple[tuple[int, ...], int], ...]  # (model-stream indices, GPUs)
    burst_tolerance: tuple[float, ...]  # per model-stream
    method: str  # "ilp" | "search"
    status: str
    seconds: float
    load_scale: float = 1.0  # < 1: the average load did not fit, planned for this share

    @property
    def min_burst_tolerance(self) -> float:
        return min(self.burst_tolerance, default=math.inf)


def affinity(alpha_i: float, beta_i: float, alpha_j: float, beta_j: float) -> float:
    """Shepherd's affinity ``A(m_i, m_j)`` (section 5.2): 1 for identical models, larger
    as their alpha and beta diverge."""
    a = (alpha_i + beta_i) / alpha_j
    if alpha_j + beta_j - beta_i <= 0:
        return a
    return min(a, max(alpha_i / (alpha_j + beta_j - beta_i), alpha_i / alpha_j))


def affinity_sets(params: Mapping[str, tuple[float, float]], k_max: float) -> dict[str, int]:
    """Partition models so that ``A <= k_max`` both ways within a set: greedily, in order of
    ``beta``, a model joins the current set if it is within ``k_max`` of every member."""
    if math.isinf(k_max):
        return dict.fromkeys(params, 0)
    out: dict[str, int] = {}
    members: list[str] = []
    current = -1
    for m in sorted(params, key=lambda x: (params[x][1], params[x][0], x)):
        a_m, b_m = params[m]
        fits = bool(members) and all(
            affinity(a_m, b_m, *params[o]) <= k_max and affinity(*params[o], a_m, b_m) <= k_max
            for o in members
        )
        if not fits:
            current += 1
            members = []
        members.append(m)
        out[m] = current
    return out


def goodput_per_gpu(
    latency: LatencyModel, model: str, gpu: str, slo_s: float, max_batch: int = 128
) -> tuple[float, int]:
    """``(T, b)``: the best goodput of one GPU under the SLO and its batch size."""
    best = (0.0, 0)
    for b in range(1, max_batch + 1):
        t = latency.latency(model, gpu, 1, b)
        if 2 * t > slo_s:
            break
        best = (b / t, b)
    if best[1] == 0:
        t1 = latency.latency(model, gpu, 1, 1)
        raise HetserveError(
            f"HERD: {model} on {gpu} takes {t1 * 1e3:.2f} ms at batch 1; its SLO of "
            f"{slo_s * 1e3:.2f} ms needs twice that"
        )
    return best


# ---------------------------------------------------------------------------- solvers
def _search(ms: Sequence[ModelStream], n_gpus: int, g_max: int, mem_gb: float) -> list:
    sets: dict[int, list[int]] = {}
    for i, s in enumerate(ms):
        sets.setdefault(s.affinity, []).append(i)

    def pack(t: float) -> list[tuple[list[int], int]] | None:
        # first fit, largest first: by GPUs needed, else by memory (a packing bound by
        # memory, which the first order can miss: two 3 GB streams apart, then the 1 GB
        # ones beside them)
        for by_memory in (False, True):
            got = pack_in(t, by_memory)
            if got is not None:
                return got
        return None

    def pack_in(t: float, by_memory: bool) -> list[tuple[list[int], int]] | None:
        groups: list[list] = []
        used = 0
        for members in sets.values():
            need = {
                i: max(1, math.ceil(t * ms[i].n_gpus - 1e-9), math.ceil(ms[i].n_gpus - 1e-9))
                for i in members
            }
            if by_memory:
                order = sorted(members, key=lambda i: (-ms[i].mem_gb, -need[i], i))
            else:
                order = sorted(members, key=lambda i: (-need[i], -ms[i].n_gpus, i))
            # this set's groups as [members, memory, load, size]; first fit
            mine: list[list] = []
            for i in order:
                if need[i] > g_max:
                    return None
                n_i, m_i = ms[i].n_gpus, ms[i].mem_gb
                for grp in mine:
                    grown = max(grp[3], math.ceil(grp[2] + n_i - 1e-9))
                    if grp[1] + m_i <= mem_gb + 1e-12 and grown <= g_max:
                        grp[0].append(i)
                        grp[1] += m_i
                        grp[2] += n_i
                        used += grown - grp[3]
                        grp[3] = grown
                        break
                else:
                    grp = [[i], m_i, n_i, need[i]]
                    mine.append(grp)
                    groups.append(grp)
                    used += need[i]
                if used > n_gpus:
                    return None
        return [(g[0], g[3]) for g in groups]

    lo, hi = 0.0, g_max / max(min(s.n_gpus for s in ms), 1e-12)
    best = pack(lo)
    if best is None:
        raise HetserveError(
            f"HERD: the {len(ms)} model-streams need more than {n_gpus} GPUs to carry "
            f"their average load (G_max {g_max}, {mem_gb:g} GB per GPU)"
        )
    for _ in range(60):
        mid = (lo + hi) / 2
        got = pack(mid)
        if got is None:
            hi = mid
        else:
            lo, best = mid, got
    return best


def _ilp(
    ms: Sequence[ModelStream], n_gpus: int, g_max: int, mem_gb: float, time_limit_s: float
) -> tuple[list, str]:
    n_i = len(ms)
    n_j = min(n_i, n_gpus)
    sets = sorted({s.affinity for s in ms})
    n_c = len(sets) if len(sets) > 1 else 0
    # columns: t | x_ij | w_ij | s_j | y_cj
    X0, W0 = 1, 1 + n_i * n_j
    S0 = W0 + n_i * n_j
    Y0 = S0 + n_j
    n_var = Y0 + n_c * n_j
    rows = Rows()
    add = rows.add

    def x(i: int, j: int) -> int:
        return X0 + i * n_j + j

    def w(i: int, j: int) -> int:
        return W0 + i * n_j + j

    for i in range(n_i):
        add([(x(i, j), 1.0) for j in range(n_j)], 1.0, 1.0)  # (d) one group
        add([(0, ms[i].n_gpus)] + [(w(i, j), -1.0) for j in range(n_j)], -np.inf, 0.0)
        for j in range(n_j):
            add([(w(i, j), 1.0), (x(i, j), -float(g_max))], -np.inf, 0.0)
            add([(w(i, j), 1.0), (S0 + j, -1.0)], -np.inf, 0.0)
    add([(S0 + j, 1.0) for j in range(n_j)], -np.inf, float(n_gpus))  # (a)
    for j in range(n_j):
        add([(x(i, j), ms[i].mem_gb) for i in range(n_i)], -np.inf, mem_gb)  # (c)
        add([(x(i, j), ms[i].n_gpus) for i in range(n_i)] + [(S0 + j, -1.0)], -np.inf, 0.0)
        if j + 1 < n_j:
            add([(S0 + j, 1.0), (S0 + j + 1, -1.0)], 0.0, np.inf)  # symmetry
        if n_c:
            add([(Y0 + c * n_j + j, 1.0) for c in range(n_c)], -np.inf, 1.0)  # (e)
            for i in range(n_i):
                c = sets.index(ms[i].affinity)
                add([(x(i, j), 1.0), (Y0 + c * n_j + j, -1.0)], -np.inf, 0.0)
    col_lo = np.zeros(n_var)
    col_hi = np.ones(n_var)
    col_hi[0] = np.inf
    col_hi[W0:S0] = g_max
    col_hi[S0:Y0] = g_max
    integ = np.ones(n_var)
    integ[0] = 0
    integ[W0:S0] = 0
    cost = np.zeros(n_var)
    cost[0] = -1.0
    a, lo, hi = rows.matrix(n_var)
    status, _, sol = solve_highs(a, lo, hi, col_lo, col_hi, cost, integ, time_limit_s)
    if sol is None:
        raise HetserveError(f"HERD: the ILP found no assignment ({status})")
    groups = []
    for j in range(n_j):
        members = [i for i in range(n_i) if sol[x(i, j)] > 0.5]
        if members:
            groups.append((members, round(sol[S0 + j])))
    return groups, status


def _spread_leftover(
    ms: Sequence[ModelStream], groups: list, n_gpus: int, g_max: int
) -> list[tuple[list[int], int]]:
    """Spare GPUs, one at a time, to the group whose weakest stream tolerates the least. A
    group already at ``G_max`` is split instead: its other streams move to a new group of
    the same size (when that many GPUs are spare), which keeps every stream's tolerance
    and frees the weak stream's group from them (a greedy step towards a lexicographic
    max-min)."""
    members = [sorted(m, key=lambda i: (-ms[i].n_gpus, i)) for m, _ in groups]
    sizes = [size for _, size in groups]
    left = n_gpus - sum(sizes)

    def key(j: int) -> tuple[float, int]:
        return (sizes[j] / ms[members[j][0]].n_gpus, j)

    heap = [key(j) for j in range(len(groups))]
    heapq.heapify(heap)
    while left > 0 and heap:
        _, j = heapq.heappop(heap)
        if sizes[j] < g_max:
            sizes[j] += 1
            left -= 1
        elif len(members[j]) > 1 and left >= sizes[j]:
            members.append(members[j][1:])
            members[j] = members[j][:1]
            sizes.append(sizes[j])
            left -= sizes[j]
            heapq.heappush(heap, key(len(sizes) - 1))
        else:
            continue  # nothing more to do for it
        heapq.heappush(heap, key(j))
    return list(zip(members, sizes, strict=True))


def herd(
    ms: Sequence[ModelStream],
    n_gpus: int,
    g_max: int = 12,
    mem_gb: float = 14.0,
    method: str = "auto",
    time_limit_s: float = 60.0,
) -> HerdResult:
    """Group model-streams (module docstring). ``mem_gb``: a GPU's memory for models (its
    capacity minus the reserve the online scheduler needs)."""
    if not ms:
        raise HetserveError("HERD: no model-streams")
    if n_gpus < 1 or g_max < 1:
        raise HetserveError("HERD: need N >= 1 GPUs and G_max >= 1")
    if method not in ("auto", "ilp", "search"):
        raise HetserveError(f"HERD: method must be auto, ilp or search, got {method!r}")
    if any(s.n_gpus <= 0 for s in ms):
        raise HetserveError("HERD: every model-stream needs a positive load")
    for s in ms:
        if s.mem_gb > mem_gb:
            raise HetserveError(
                f"HERD: {s.model} needs {s.mem_gb:.2f} GB, more than a GPU's {mem_gb:.2f} GB"
            )
    t0 = time.perf_counter()
    use_ilp = method == "ilp" or (method == "auto" and len(ms) <= 40)

    def solve(scaled: Sequence[ModelStream], ilp: bool) -> tuple[list, str]:
        if ilp:
            return _ilp(scaled, n_gpus, g_max, mem_gb, time_limit_s)
        return _search(scaled, n_gpus, g_max, mem_gb), "bisection"

    def shrink(x: float) -> list[ModelStream]:
        return [replace(s, n_gpus=s.n_gpus * x) for s in ms]

    def largest_share(ilp: bool) -> float:
        lo, hi = 0.0, 1.0
        for _ in range(20 if ilp else 30):
            mid = (lo + hi) / 2
            try:
                solve(shrink(mid), ilp)
                lo = mid
            except HetserveError:
                hi = mid
        return lo * (1 - 1e-5)  # clear of the solver's feasibility tolerance

    scale, scaled = 1.0, list(ms)
    try:
        groups, status = solve(ms, use_ilp)
    except HetserveError:
        # an overloaded cluster: the largest share of the load that fits, found with the
        # fast search (the ILP then optimises at that share); the ILP's own bisection
        # only where the search packs nothing at all
        scale = largest_share(False)
        if scale <= 0.0 and use_ilp:
            scale = largest_share(True)
        if scale <= 0.0:
            raise HetserveError(
                f"HERD: no grouping of {len(ms)} model-streams fits {n_gpus} GPUs (G_max "
                f"{g_max}, {mem_gb:g} GB per GPU)"
            ) from None
        scaled = shrink(scale)
        try:
            groups, status = solve(scaled, use_ilp)
        except HetserveError:
            groups, status = solve(scaled, False)
    groups = _spread_leftover(scaled, groups, n_gpus, g_max)
    bt = [0.0] * len(ms)
    for members, size in groups:
        for i in members:
            bt[i] = size / ms[i].n_gpus
    out = tuple((tuple(sorted(m)), s) for m, s in groups)
    return HerdResult(
        out,
        tuple(bt),
        "ilp" if use_ilp else "search",
        status,
        time.perf_counter() - t0,
        scale,
    )


def split_heavy(ms: Sequence[ModelStream], cap_gpus: float) -> list[ModelStream]:
    """Model-streams whose load exceeds ``cap_gpus`` GPUs, dealt into parts by stream
    (module docstring); the others unchanged. A single stream heavier than the cap stays
    one part."""
    out: list[ModelStream] = []
    for s in ms:
        if s.n_gpus <= cap_gpus or len(s.streams) < 2:
            out.append(s)
            continue
        k = min(len(s.streams), math.ceil(s.n_gpus / cap_gpus - 1e-9))
        parts: list[list[tuple[str, float]]] = [[] for _ in range(k)]
        load = [(0.0, j) for j in range(k)]
        for name, r in sorted(s.streams, key=lambda x: (-x[1], x[0])):
            total, j = heapq.heappop(load)
            parts[j].append((name, r))
            heapq.heappush(load, (total + r, j))
        per_rps = s.n_gpus / s.rate_rps if s.rate_rps > 0 else 0.0
        for part in parts:
            r = sum(x for _, x in part)
            out.append(ModelStream(s.model, r, r * per_rps, s.mem_gb, s.affinity, tuple(part)))
    return out


def model_streams(
    rates_rps: Mapping[str, float],
    slos_s: Mapping[str, float],
    latency: LatencyModel,
    gpu: str,
    mem_gb: Mapping[str, float],
    k_max: float = math.inf,
    max_batch: int = 128,
    streams: Mapping[str, Sequence[tuple[str, float]]] | None = None,
) -> list[ModelStream]:
    """One model-stream per model with load, from its streams' summed rate; ``streams``
    (per model, its streams and their rates) lets :func:`split_heavy` split it later."""
    params = {}
    for m in rates_rps:
        t1, t2 = latency.latency(m, gpu, 1, 1), latency.latency(m, gpu, 1, 2)
        params[m] = (t2 - t1, 2 * t1 - t2)  # alpha, beta of the (linear) latency
    aff = affinity_sets(params, k_max)
    out = []
    for m, r in rates_rps.items():
        t, _ = goodput_per_gpu(latency, m, gpu, slos_s[m], max_batch)
        own = tuple((str(n), float(x)) for n, x in (streams or {}).get(m, ()))
        out.append(ModelStream(m, r, r / t, mem_gb[m], aff[m], own))
    return out


def herd_plan(
    result: HerdResult,
    ms: Sequence[ModelStream],
    slos_s: Mapping[str, float],
    latency: LatencyModel,
    gpu: str,
    max_batch: int = 128,
) -> Plan:
    """The groups as a plan: every model whole on its group's GPUs (``bind`` places them).
    A model split over several groups: each of its groups names the streams it serves."""
    homes: dict[str, int] = {}
    for members, _ in result.groups:
        for i in members:
            homes[ms[i].model] = homes.get(ms[i].model, 0) + 1
    split = {m for m, n in homes.items() if n > 1}
    gpus_of: dict[str, int] = {}
    rate_of: dict[str, float] = {}
    groups = []
    for k, (members, size) in enumerate(result.groups):
        names = tuple(dict.fromkeys(ms[i].model for i in members))
        named: tuple[str, ...] = ()
        if any(ms[i].model in split for i in members):
            named = tuple(n for i in members for n, _ in ms[i].streams)
        groups.append(ServingGroup(f"g{k}", names, size, gpu, named))
        for i in members:
            gpus_of[ms[i].model] = gpus_of.get(ms[i].model, 0) + size
            rate_of[ms[i].model] = rate_of.get(ms[i].model, 0.0) + ms[i].rate_rps
    models = {}
    for m, n_gpus in gpus_of.items():
        t, b = goodput_per_gpu(latency, m, gpu, slos_s[m], max_batch)
        nb = latency.num_blocks(m)
        lat = latency.latency(m, gpu, 1, b)
        stage = Stage((0, nb), gpu, 1, n_gpus, lat)
        models[m] = ModelPlan(slos_s[m], rate_of[m], (Pipeline((stage,), b, lat, t * n_gpus),))
    meta = {
        "planner": "herd",
        "objective": {"min_burst_tolerance": result.min_burst_tolerance},
        "solve": {"method": result.method, "status": result.status, "seconds": result.seconds},
    }
    return Plan(models, False, meta, tuple(groups))
