"""MagicBatch's planning (DataCom 2022, section 4): for each stream, a batch size per GPU
type, and an assignment of streams to GPUs with the least energy.

*Issue 15, in progress*: the batch choice, the exact assignment, PSO-GA, the paper's
FCFS and Greedy baselines, and ``shared``. The CLI, the scheduler and the study come next.

**Batch choice** (Eqs. 2-4). Stream ``m`` sends ``r_m`` requests/s with deadline ``D_m``.
On GPU type ``n`` a batch of ``B`` waits ``(B - 1) / r_m`` for its last request (the first
request waits longest, Eq. 2), then runs for ``exec_n(B)``; energy per request is
``E_batch(B) / B`` (Eq. 3). The largest ``B`` with ``(B - 1) / r_m + exec_n(B) <= D_m``
(Eq. 4) minimises the energy per request; we also require that the GPU keeps up,
``exec_n(B) <= B / r_m`` (the paper assumes it silently). A type where no ``B`` satisfies
both is infeasible for the stream, with the reason recorded.

**Assignment** (Eqs. 5-9). Each stream runs on one GPU of its own; the energy of an
assignment is ``sum_m E_request(n_m, m) * r_m`` (J/s, Eq. 5 per second). ``exact`` solves
the problem exactly: it is a rectangular assignment problem (streams x GPU instances),
solved with SciPy's ``linear_sum_assignment``; a stream that cannot be placed (infeasible
everywhere, or more streams than GPUs) is rejected, and the solver first places as many
streams as possible, then minimises energy among those placements (rejection costs more
than any placement). ``fcfs``: GPUs numbered by how advanced they are (oldest first, then
by peak FP32), each stream in order takes the lowest-numbered idle GPU that can serve it.
``greedy``: each stream in order takes the idle GPU of the type with the least energy for
it (section 5.1).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hetserve.core.errors import HetserveError
from hetserve.core.gpus import GpuType
from hetserve.core.latency import LatencyModel

METHODS = ("exact", "pso-ga", "fcfs", "greedy")


@dataclass(frozen=True)
class EdgeStream:
    """One device's requests (the paper's "device" ``m``)."""

    name: str
    model: str
    rate_rps: float
    deadline_s: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rate_rps) and self.rate_rps > 0):
            raise HetserveError(f"stream {self.name}: rate must be > 0 req/s, got {self.rate_rps}")
        if not (math.isfinite(self.deadline_s) and self.deadline_s > 0):
            raise HetserveError(
                f"stream {self.name}: deadline must be > 0 s, got {self.deadline_s}"
            )


@dataclass(frozen=True)
class Option:
    """A stream on a GPU type: its batch, the worst request's latency, the execution time
    of a batch, the energy per request; or why it cannot run there."""

    gpu: str
    batch: int = 0
    latency_s: float = math.inf
    exec_s: float = math.inf
    energy_j: float = math.inf  # per request
    why: str = ""

    @property
    def feasible(self) -> bool:
        return self.batch > 0

    def power_w(self, rate_rps: float) -> float:
        """Energy per second while serving ``rate_rps`` (Eq. 5 per second)."""
        return self.energy_j * rate_rps


def batch_choice(
    latency: LatencyModel, stream: EdgeStream, gpu: GpuType, max_batch: int = 256
) -> Option:
    """The paper's batch choice with its checks (module docstring)."""
    r, d = stream.rate_rps, stream.deadline_s
    best: Option | None = None
    why = ""
    for b in range(1, max_batch + 1):
        wait = (b - 1) / r
        if wait >= d:
            why = why or f"waiting for a batch of {b} takes {wait * 1e3:.1f} ms"
            break
        try:
            ex = latency.latency(stream.model, gpu, 1, b)
        except HetserveError:
            if b == 1:
                raise  # an unknown model, or none of its latencies on this GPU
            break  # a latency table without this batch size: the largest profiled bounds it
        if wait + ex > d:
            why = why or (
                f"batch {b} misses the deadline ({(wait + ex) * 1e3:.1f} > {d * 1e3:.1f} ms)"
            )
            break  # latency grows with the batch
        if ex > b / r:
            why = f"batch {b} runs {ex * 1e3:.1f} ms, longer than {b} arrivals take"
            continue  # a larger batch may keep up
        e = latency.energy(stream.model, gpu, 1, b) / b
        best = Option(gpu.name, b, wait + ex, ex, e)
    if best is None:
        return Option(gpu.name, why=why or "no batch size fits")
    return best


def stream_options(
    latency: LatencyModel,
    streams: Sequence[EdgeStream],
    gpus: Sequence[GpuType],
    max_batch: int = 256,
) -> dict[str, dict[str, Option]]:
    """Per stream, per GPU type: the option each method chooses from."""
    return {s.name: {g.name: batch_choice(latency, s, g, max_batch) for g in gpus} for s in streams}


@dataclass(frozen=True)
class Assignment:
    """Streams bound to GPU instances (``"<type>#<k>"``), with their options."""

    method: str
    gpu_of: dict[str, str]  # stream -> GPU instance
    option_of: dict[str, Option]
    rejected: dict[str, str] = field(default_factory=dict)  # stream -> why

    def power_w(self, streams: Sequence[EdgeStream]) -> float:
        rate = {s.name: s.rate_rps for s in streams}
        return sum(o.power_w(rate[m]) for m, o in self.option_of.items())


def gpu_instances(counts: Mapping[str, int]) -> list[str]:
    return [f"{t}#{k}" for t, n in counts.items() for k in range(n)]


def _type_of(instance: str) -> str:
    return instance.rsplit("#", 1)[0]


def _reject_reason(opts: Mapping[str, Option]) -> str:
    return "; ".join(f"{t}: {o.why}" for t, o in opts.items() if not o.feasible)


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
        return _exact(streams, inst, options)
    if method == "pso-ga":
        return pso_ga(streams, counts, options, PsoGaParams())
    if method == "fcfs":
        types = list(order or counts)
        inst = sorted(inst, key=lambda g: (types.index(_type_of(g)), g))
    gpu_of: dict[str, str] = {}
    opt_of: dict[str, Option] = {}
    rejected: dict[str, str] = {}
    idle = list(inst)
    for s in streams:
        opts = options[s.name]
        cands = [g for g in idle if opts[_type_of(g)].feasible]
        if method == "greedy":
            cands.sort(key=lambda g: (opts[_type_of(g)].energy_j, idle.index(g)))
        if not cands:
            rejected[s.name] = (
                "no idle GPU can serve it" if any(o.feasible for o in opts.values())
                else _reject_reason(opts)
            )  # fmt: skip
            continue
        g = cands[0]
        idle.remove(g)
        gpu_of[s.name] = g
        opt_of[s.name] = opts[_type_of(g)]
    return Assignment(method, gpu_of, opt_of, rejected)


def _exact(
    streams: Sequence[EdgeStream], inst: Sequence[str], options: Mapping[str, Mapping[str, Option]]
) -> Assignment:
    """A transportation problem over streams x GPU *types* (each type offers as many
    places as it has GPUs): its constraint matrix is that of a bipartite graph, so the LP
    optimum is integral; HiGHS solves it as an LP. Placing a stream earns more than any
    energy difference, so the optimum places as many as possible first."""
    from scipy import sparse

    from hetserve.planning.milp import solve_highs

    types = list(dict.fromkeys(_type_of(g) for g in inst))
    cap = {t: sum(1 for g in inst if _type_of(g) == t) for t in types}
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
        if x is None:
            raise HetserveError(f"exact: the assignment LP found no solution ({status})")
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
                if any(o.feasible for o in opts.values()) else _reject_reason(opts)
            )  # fmt: skip
    return Assignment("exact", gpu_of, opt_of, rejected)


def brute_force(
    streams: Sequence[EdgeStream],
    counts: Mapping[str, int],
    options: Mapping[str, Mapping[str, Option]],
) -> tuple[int, float]:
    """(streams placed, power) of the best assignment, by trying every one (small cases)."""
    inst = gpu_instances(counts)
    if len(streams) > 7 or len(inst) > 7:
        raise HetserveError("brute force: at most 7 streams and 7 GPUs")
    best = (0, 0.0)
    choices = [None, *inst]
    for pick in itertools.product(choices, repeat=len(streams)):
        used = [p for p in pick if p is not None]
        if len(used) != len(set(used)):
            continue
        placed, power, ok = 0, 0.0, True
        for s, p in zip(streams, pick, strict=True):
            if p is None:
                continue
            o = options[s.name][_type_of(p)]
            if not o.feasible:
                ok = False
                break
            placed += 1
            power += o.power_w(s.rate_rps)
        if ok and (placed > best[0] or (placed == best[0] and power < best[1] - 1e-12)):
            best = (placed, power)
    return best


# ------------------------------------------------------------------ PSO-GA


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
            rejected[s.name] = _reject_reason(opts)
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
        better = fit < pbest_fit
        # the kept particles inherit the personal bests of the slots they take
        pbest = np.where(better[:, None], pos, pbest)
        pbest_fit = np.where(better, fit, pbest_fit)
        g = int(np.argmin(pbest_fit))
        if pbest_fit[g] < gbest_fit:
            gbest, gbest_fit = pbest[g].copy(), float(pbest_fit[g])
        # PSO: Eqs. 14-15, positions rounded and clipped to type indices
        r1, r2 = rng.random(pos.shape), rng.random(pos.shape)
        vel = vel + p.c1 * r1 * (pbest - pos) + p.c2 * r2 * (gbest - pos)
        vel = np.clip(vel, -n_t, n_t)
        pos = np.clip(np.rint(pos + vel), 0, n_t - 1).astype(int)
        fit = np.array([fitness(x) for x in pos])
        better = fit < pbest_fit
        pbest = np.where(better[:, None], pos, pbest)
        pbest_fit = np.where(better, fit, pbest_fit)
        g = int(np.argmin(pbest_fit))
        if pbest_fit[g] < gbest_fit:
            gbest, gbest_fit = pbest[g].copy(), float(pbest_fit[g])
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


# ------------------------------------------------------------------ shared GPUs


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
        w = gpus[_type_of(inst)].idle_w
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
) -> Assignment:
    """Beyond the paper: streams may share a GPU (an MILP with HiGHS). Placing as many
    streams as possible first, it minimises :func:`total_power_w` subject to, per GPU,
    utilisation at most 1 and, per stream on it, its deadline with one batch of every
    other stream of that GPU ahead of its own: ``(B - 1) / r + exec(B) + sum of the others'
    exec <= D``. GPUs of a type are used in order (no two equivalent solutions that only
    swap GPUs). One stream per GPU is a feasible choice, so the optimum never uses more
    power than ``exact``'s assignment in the same accounting (a test)."""
    from scipy import sparse

    from hetserve.planning.milp import solve_highs

    inst = gpu_instances(counts)
    rate = {s.name: s.rate_rps for s in streams}
    pairs = [(i, j) for i, s in enumerate(streams) for j, g in enumerate(inst)
             if options[s.name][_type_of(g)].feasible]  # fmt: skip
    n_x, n_g = len(pairs), len(inst)
    z0 = n_x  # park variables (if park_idle), then T_j: one batch of each stream of GPU j
    t0 = n_x + (n_g if park_idle else 0)
    n_var = t0 + n_g
    big = 1.0 + 2.0 * sum(gpus[_type_of(g)].tdp_w for g in inst) * 10
    cost = np.zeros(n_var)
    for v, (i, j) in enumerate(pairs):
        s, t = streams[i], _type_of(inst[j])
        o = options[s.name][t]
        cost[v] = o.power_w(s.rate_rps) - gpus[t].idle_w * utilisation(o, s.rate_rps) - big
    if park_idle:
        for j, g in enumerate(inst):
            cost[z0 + j] = gpus[_type_of(g)].idle_w
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    lo: list[float] = []
    hi: list[float] = []

    def row(entries: list[tuple[int, float]], lb: float, ub: float) -> None:
        r = len(lo)
        for c, v in entries:
            rows.append(r)
            cols.append(c)
            vals.append(v)
        lo.append(lb)
        hi.append(ub)

    by_stream: dict[int, list[int]] = {}
    by_gpu: dict[int, list[int]] = {}
    for v, (i, j) in enumerate(pairs):
        by_stream.setdefault(i, []).append(v)
        by_gpu.setdefault(j, []).append(v)
    for vs in by_stream.values():  # each stream on at most one GPU
        row([(v, 1.0) for v in vs], -math.inf, 1.0)
    for j, vs in by_gpu.items():
        t = _type_of(inst[j])
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
            if _type_of(inst[j]) == _type_of(inst[j + 1]):
                row([(z0 + j, 1.0), (z0 + j + 1, -1.0)], 0.0, math.inf)
    if n_x == 0:  # nothing can go anywhere
        x: Any = np.zeros(0)
        return _shared_result(streams, inst, pairs, x, options)
    a = sparse.csr_array((vals, (rows, cols)), shape=(len(lo), n_var))
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
    status, _gap, x = solve_highs(
        a, np.array(lo), np.array(hi), np.zeros(n_var), col_hi, cost, integer,
        time_limit_s, 1e-9, start,
    )  # fmt: skip
    if x is None:
        raise HetserveError(f"shared: the MILP found no solution ({status})")
    return _shared_result(streams, inst, pairs, x, options)


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
            opt_of[s.name] = options[s.name][_type_of(inst[j])]
    rejected = {
        s.name: (_reject_reason(options[s.name])
                 if not any(o.feasible for o in options[s.name].values())
                 else "no GPU can take it with the others")
        for s in streams if s.name not in gpu_of
    }  # fmt: skip
    return Assignment("shared", gpu_of, opt_of, rejected)


# ------------------------------------------------------------------ inputs and plans

STREAM_COLUMNS = ("name", "model", "rate_rps", "deadline_ms")


def read_streams(path: str) -> list[EdgeStream]:
    """A stream file (CSV, ``name,model,rate_rps,deadline_ms``, docs/formats.md); every
    bad row is a one-line error naming the file, line and stream."""
    from hetserve.core.errors import ConfigError
    from hetserve.core.files import csv_rows

    out: list[EdgeStream] = []
    seen: set[str] = set()
    for line, row in csv_rows(path, STREAM_COLUMNS):
        name = row["name"].strip()
        if not name:
            raise ConfigError(f"{path}:{line}: field 'name': expected a stream name")
        if name in seen:
            raise ConfigError(f"{path}:{line}: stream {name} appears twice")
        seen.add(name)
        vals = {}
        for col, what in (("rate_rps", "a rate > 0 in requests/s"),
                          ("deadline_ms", "a deadline > 0 in ms")):  # fmt: skip
            try:
                v = float(row[col])
            except ValueError:
                v = math.nan
            if not (math.isfinite(v) and v > 0):
                raise ConfigError(
                    f"{path}:{line}: stream {name}: field '{col}': expected {what}, "
                    f"got {row[col]!r}"
                )
            vals[col] = v
        out.append(EdgeStream(name, row["model"].strip(), vals["rate_rps"],
                              vals["deadline_ms"] / 1e3))  # fmt: skip
    if not out:
        raise ConfigError(f"{path}: no streams (one row per stream after the header)")
    return out


def random_streams(
    n: int,
    models: Sequence[str],
    seed: int,
    rate_rps: tuple[float, float] = (5.0, 50.0),
    deadline_ms: tuple[float, float] = (100.0, 500.0),
) -> list[EdgeStream]:
    """Seeded random streams as in the paper's evaluation (section 5.1: "the arrival rate
    and deadline of tasks are randomly generated"; it gives no ranges, these are ours):
    models round-robin, rates and deadlines uniform in the ranges."""
    rng = np.random.default_rng(seed)
    return [
        EdgeStream(f"s{i:04d}", models[i % len(models)],
                   float(np.round(rng.uniform(*rate_rps), 2)),
                   float(np.round(rng.uniform(*deadline_ms), 1)) / 1e3)
        for i in range(n)
    ]  # fmt: skip


def plan_streams(
    method: str,
    streams: Sequence[EdgeStream],
    counts: Mapping[str, int],
    gpus: Mapping[str, GpuType],
    latency: LatencyModel,
    *,
    order: Sequence[str] | None = None,
    park_idle: bool = False,
    max_batch: int = 256,
    seed: int = 0,
) -> tuple[Any, Assignment, dict[str, dict[str, Option]]]:
    """A core plan for ``method``'s assignment (``assignments`` per stream, with the
    options every method chose from; per model a whole-model pipeline on each GPU type its
    streams use), the assignment and the options."""
    from hetserve.core.plan import ModelPlan, Pipeline, Plan, Stage, StreamAssignment

    opts = stream_options(latency, streams, list(gpus.values()), max_batch)
    if method == "shared":
        a = shared(streams, counts, opts, gpus, park_idle)
    elif method == "pso-ga":
        a = pso_ga(streams, counts, opts, PsoGaParams(seed=seed))
    else:
        a = assign(method, streams, counts, opts, order)
    records = {}
    for s in streams:
        o = a.option_of.get(s.name)
        table = {
            t: ({"batch": x.batch, "latency_ms": x.latency_s * 1e3, "energy_j": x.energy_j}
                if x.feasible else {"why": x.why})
            for t, x in opts[s.name].items()
        }  # fmt: skip
        records[s.name] = StreamAssignment(
            s.name, s.model, s.rate_rps, s.deadline_s, a.gpu_of.get(s.name, ""),
            o.batch if o else 0, o.latency_s if o else 0.0, o.energy_j if o else 0.0,
            a.rejected.get(s.name, ""), table,
        )  # fmt: skip
    models: dict[str, ModelPlan] = {}
    for m in dict.fromkeys(s.model for s in streams):
        mine = [s for s in streams if s.model == m and s.name in a.gpu_of]
        by_type: dict[str, set[str]] = {}
        for s in mine:
            by_type.setdefault(_type_of(a.gpu_of[s.name]), set()).add(a.gpu_of[s.name])
        pipes = []
        for t, used in by_type.items():
            b = max(a.option_of[s.name].batch for s in mine if a.gpu_of[s.name] in used)
            lat = latency.latency(m, gpus[t], 1, b)
            stage = Stage((0, latency.num_blocks(m)), t, 1, len(used), lat)
            pipes.append(Pipeline((stage,), b, lat, len(used) * b / lat))
        slo = min((s.deadline_s for s in streams if s.model == m), default=1.0)
        models[m] = ModelPlan(slo, 1.0, tuple(pipes))
    busy = a.power_w(streams)
    total = total_power_w(a, streams, gpus, counts, park_idle)
    plan = Plan(
        models,
        meta={
            "planner": "magicbatch",
            "objective": {
                "method": method,
                "busy_power_w": busy,
                "total_power_w": total,
                "park_idle": park_idle,
                "placed": len(a.gpu_of),
                "rejected": len(a.rejected),
            },
            "solve": {"gpus": dict(counts), "streams": len(streams)},
        },
        assignments=records,
    )
    return plan, a, opts


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
        cands = [g for g in inst if opts[_type_of(g)].feasible]
        cands.sort(key=lambda g: (not load[g], opts[_type_of(g)].energy_j, inst.index(g)))
        for g in cands:
            o = opts[_type_of(g)]
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
        counts[_type_of(g)] = counts.get(_type_of(g), 0) + 1
    cands = [_exact(streams, inst, options), _pack(streams, inst, options)]
    return min(
        cands,
        key=lambda a: (-len(a.gpu_of), total_power_w(a, streams, gpus, counts, park_idle)),
    )
