"""The pooled-pipeline MILP (PPipe section 3 and appendix A, as a choice among candidates).

Variables, for every candidate pipeline ``p`` (from :mod:`hetserve.planning.candidates`)
and every stage ``i`` of it:

- ``x_p >= 0``: the pipeline's throughput (requests/s);
- ``g_pi`` integer: physical GPUs of the stage's type (their ``k_i`` slices each belong to
  the stage's pool: slices of one GPU stay in one pool);
- ``z``: the minimum normalised throughput.

The stage's instances ``n_pi`` (slices) need no variables of their own: ``x_p <= rate_i n_pi``
with ``n_pi <= k_i g_pi`` allows exactly the ``x_p`` that ``x_p <= rate_i k_i g_pi`` allows
(take ``n_pi = k_i g_pi``, which the plan reports: every slice of a stage's GPUs serves
the stage).

Constraints:

- throughput: ``x_p <= rate_i * k_i * g_pi`` (a slice runs ``batch / latency``
  requests/s), and NIC: the stage's GPUs share their nodes' NICs evenly, so
  ``x_p * bytes_i * 8 <= g_pi * per_gpu_gbps * 1e9`` for what it sends and what it
  receives. Both bound ``x_p`` by ``g_pi`` times a constant, so they are one row with the
  smaller constant (``per_gpu_rps`` of the stage);
- GPUs: ``sum over stages on type t of g_pi <= count_t``;
- max-min: ``z <= sum_{p of m} x_p / w_m`` for each model, weights normalised to sum 1
  (one model: ``z`` is its throughput);
- ``extra_rows``: restrictions used by baselines (DART-r's paired units).

Objective: maximise ``z``. Solved with HiGHS (``highspy``), deterministic, with a time
limit and a relative gap.

The cost objective (``demand_rps`` and ``prices`` given; issue 40, Mélange's question for
pipelines): the max-min rows become ``sum_{p of m} x_p >= demand_m`` for every model,
``z`` is fixed at 0, and the objective is to minimise ``sum price_t g_pi`` over the
stages (the price per hour of the GPUs the plan takes). The other rows are the same.

The energy objective (``demand_rps`` and ``energy`` given; MagicBatch's question, least
energy within the deadlines, for pooled pipelines): the same rows, and the objective is
the plan's power draw at the demanded rates, ``sum idle_w_t g_pi + sum e_p x_p`` (watts):
every GPU taken draws its idle power, and each request served by pipeline ``p`` costs
``e_p`` joules above idle (its stages' busy energy at the pipeline's batch, per request,
less the idle power of their time). With ``x_p`` costing energy, the solver serves each
demand exactly, by the pipelines that spend least per request where GPUs allow.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import highspy
import numpy as np
from scipy import sparse

from hetserve.planning.candidates import Candidate, NetInfo


@contextlib.contextmanager
def _quiet_stdout():  # type: ignore[no-untyped-def]
    """HiGHS prints some diagnostics straight to file descriptor 1, whatever its output
    options say; keep them off the user's terminal (and off JSON written to stdout)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # no real stdout (e.g. captured)
        yield
        return
    sys.stdout.flush()
    saved = os.dup(fd)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), fd)
        try:
            yield
        finally:
            _flush_c_stdio()  # text the C library still buffers goes to /dev/null too
            os.dup2(saved, fd)
            os.close(saved)


class Rows:
    """Constraint rows ``lo <= sum(v * x[c] for c, v in entries) <= hi``, collected one by
    one and handed to :func:`solve_highs` as a sparse matrix (every MILP here builds them
    this way)."""

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.lo: list[float] = []
        self.hi: list[float] = []

    def __len__(self) -> int:
        return len(self.lo)

    def add(self, entries: list[tuple[int, float]], lb: float, ub: float) -> None:
        r = len(self.lo)
        for c, v in entries:
            self.rows.append(r)
            self.cols.append(c)
            self.vals.append(v)
        self.lo.append(lb)
        self.hi.append(ub)

    def matrix(self, n_var: int) -> tuple[sparse.csr_array, np.ndarray, np.ndarray]:
        """The matrix and the row bounds."""
        a = sparse.csr_array((self.vals, (self.rows, self.cols)), shape=(len(self.lo), n_var))
        return a, np.array(self.lo, dtype=float), np.array(self.hi, dtype=float)


def solve_highs(
    a: sparse.csr_array,
    row_lo: np.ndarray,
    row_hi: np.ndarray,
    col_lo: np.ndarray,
    col_hi: np.ndarray,
    cost: np.ndarray,
    integrality: np.ndarray,
    time_limit_s: float,
    mip_rel_gap: float = 1e-4,
    start: np.ndarray | None = None,
    max_nodes: int | None = None,
) -> tuple[str, float, np.ndarray | None]:
    """Minimise ``cost . x`` subject to ``row_lo <= a x <= row_hi`` and column bounds, the
    columns with non-zero ``integrality`` integer, with HiGHS (quiet, deterministic).
    ``start``: a feasible solution to begin from (a MIP start); ``max_nodes``: a limit on
    branch-and-bound nodes (unlike the time limit, the same on every machine). Returns the
    status
    (``optimal``, ``time_limit``, ``infeasible`` or HiGHS's name), the MIP gap and the
    solution (None if no feasible one was found)."""
    a = sparse.csr_array(a)
    a.sum_duplicates()
    n_row, n_var = a.shape
    inf = highspy.kHighsInf

    def bound(v: np.ndarray, sign: float) -> np.ndarray:
        v = np.asarray(v, dtype=float)
        return np.where(np.isinf(v), sign * inf, v)

    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = n_var, n_row
    lp.col_cost_ = np.asarray(cost, dtype=float)
    lp.col_lower_ = bound(col_lo, -1.0)
    lp.col_upper_ = bound(col_hi, 1.0)
    lp.row_lower_ = bound(row_lo, -1.0)
    lp.row_upper_ = bound(row_hi, 1.0)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = a.indptr.astype(np.int32)
    lp.a_matrix_.index_ = a.indices.astype(np.int32)
    lp.a_matrix_.value_ = a.data.astype(float)
    lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = n_var, n_row
    lp.integrality_ = [
        highspy.HighsVarType.kInteger if integrality[k] else highspy.HighsVarType.kContinuous
        for k in range(n_var)
    ]
    with _quiet_stdout():  # HiGHS prints its banner when the solver is built
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("time_limit", float(time_limit_s))
        h.setOptionValue("mip_rel_gap", float(mip_rel_gap))
        if max_nodes is not None:
            h.setOptionValue("mip_max_nodes", int(max_nodes))
        h.passModel(lp)
        if start is not None:
            sol = highspy.HighsSolution()
            sol.col_value = [float(v) for v in start]
            sol.value_valid = True
            h.setSolution(sol)
        h.run()
        if h.getModelStatus() == highspy.HighsModelStatus.kSolveError:
            # HiGHS's presolve occasionally fails on tiny degenerate models (found by the
            # brute-force property test): solve once more without it
            h.clearSolver()
            h.setOptionValue("presolve", "off")
            h.run()
    ms = h.getModelStatus()
    status = {
        highspy.HighsModelStatus.kOptimal: "optimal",
        highspy.HighsModelStatus.kTimeLimit: "time_limit",
        highspy.HighsModelStatus.kInfeasible: "infeasible",
    }.get(ms, str(ms))
    info = h.getInfo()
    if info.primal_solution_status != 2:
        return status, math.inf, None
    gap = float(info.mip_gap)
    x = np.asarray(h.getSolution().col_value)
    return status, max(gap, 0.0) if math.isfinite(gap) else math.inf, x


def _start(
    cands: Sequence[Candidate], stage_idx: Sequence[tuple[int, int]],
    gpus: Mapping[int, Sequence[int]], x0: int, g0: int, n_var: int, models: Sequence[str],
    w: Mapping[str, float], cost: bool,
) -> np.ndarray:  # fmt: skip
    """The solution vector of a given allocation: each candidate's GPUs per stage, its
    throughput the most they carry, ``z`` the max-min term it reaches (0 for cost)."""
    x = np.zeros(n_var)
    for s, (p, i) in enumerate(stage_idx):
        if p in gpus:
            x[g0 + s] = float(gpus[p][i])
    served = dict.fromkeys(models, 0.0)
    for p, c in enumerate(cands):
        if p in gpus:
            x[x0 + p] = min(st.per_gpu_rps * g for st, g in zip(c.stages, gpus[p], strict=True))
            served[c.model] = served.get(c.model, 0.0) + x[x0 + p]
    if not cost:
        x[0] = min(served[m] / w[m] for m in models)
    return x


def _flush_c_stdio() -> None:
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):
        pass


@dataclass(frozen=True)
class Allocation:
    candidate: Candidate
    instances: tuple[int, ...]  # slices per stage
    gpus: tuple[int, ...]  # physical GPUs per stage
    throughput_rps: float  # capacity of this allocation (recomputed, not the LP's x)


@dataclass(frozen=True)
class MilpResult:
    status: str  # optimal | time_limit | infeasible | ...
    objective: float  # normalised throughput (recomputed from the allocations)
    gap: float
    seconds: float
    allocations: tuple[Allocation, ...]
    n_candidates: int
    n_integer_vars: int


def allocation_throughput(
    c: Candidate, instances: Sequence[int], gpus: Sequence[int], net: NetInfo
) -> float:
    """Capacity of a pipeline given its stages' slices and GPUs (the MILP's constraints)."""
    cap = math.inf
    for st, n, g in zip(c.stages, instances, gpus, strict=True):
        cap = min(cap, st.rate_rps * n)
        bw = g * net.per_gpu_gbps[st.gpu] * 1e9
        for nbytes in (st.in_bytes, st.out_bytes):
            if nbytes > 0:
                cap = min(cap, bw / (nbytes * 8))
    return cap


def solve(
    cands: Sequence[Candidate],
    gpu_counts: Mapping[str, int],
    weights: Mapping[str, float],
    net: NetInfo,
    *,
    time_limit_s: float = 60.0,
    mip_rel_gap: float = 1e-4,
    extra_rows: Callable[[Sequence[Candidate], int, int, int], list] | None = None,
    demand_rps: Mapping[str, float] | None = None,
    prices: Mapping[str, float] | None = None,
    energy: tuple[Mapping[str, float], Sequence[float]] | None = None,
    start_gpus: Mapping[int, Sequence[int]] | None = None,
) -> MilpResult:
    """Solve the MILP (module docstring): the max-min throughput by default; with
    ``demand_rps`` (and ``prices`` per GPU type, 1.0 where absent) the cheapest GPUs that
    serve every model's demand, ``objective`` then the price per hour; with
    ``demand_rps`` and ``energy`` (idle watts per GPU type, joules above idle per request
    per candidate) the least power that serves it, ``objective`` then in watts.
    ``start_gpus``: a plan to start from (a warm start: the current plan of a re-plan),
    per candidate index the GPUs of each of its stages; it is handed to HiGHS as a MIP
    start where it is feasible (its throughputs the most those GPUs carry), else left
    out."""
    t0 = time.perf_counter()
    cost = demand_rps is not None
    models = list(weights)
    total_w = sum(weights.values())
    w = {m: weights[m] / total_w for m in models}
    n_p = len(cands)
    stage_idx: list[tuple[int, int]] = [
        (p, i) for p, c in enumerate(cands) for i in range(len(c.stages))
    ]
    n_s = len(stage_idx)
    # variable layout: [z, x_0..x_{P-1}, g_0..g_{S-1}]
    X0, G0 = 1, 1 + n_p
    N0 = G0  # kept in the extra_rows signature: rows on slices act on GPUs x share
    n_var = 1 + n_p + n_s
    rows = Rows()
    add = rows.add

    for s, (p, i) in enumerate(stage_idx):
        st = cands[p].stages[i]
        # x <= share x rate x g and x x bytes x 8 <= g x NIC share, as one row
        add([(X0 + p, 1.0), (G0 + s, -st.per_gpu_rps)], -np.inf, 0.0)
    for t, count in gpu_counts.items():
        entries = [
            (G0 + s, 1.0) for s, (p, i) in enumerate(stage_idx) if cands[p].stages[i].gpu == t
        ]
        if entries:
            add(entries, -np.inf, float(count))
    for m in models:
        if cost:
            assert demand_rps is not None
            entries = [(X0 + p, 1.0) for p, c in enumerate(cands) if c.model == m]
            if not entries:
                return MilpResult("infeasible", 0.0, 0.0, time.perf_counter() - t0, (), 0, 0)
            add(entries, float(demand_rps.get(m, 0.0)), np.inf)
            continue
        entries = [(0, 1.0)] + [(X0 + p, -1.0 / w[m]) for p, c in enumerate(cands) if c.model == m]
        add(entries, -np.inf, 0.0)
    if extra_rows is not None:
        for entries, lb, ub in extra_rows(cands, X0, N0, G0):
            add(entries, lb, ub)
    ub = np.full(n_var, np.inf)
    for s, (p, i) in enumerate(stage_idx):
        st = cands[p].stages[i]
        ub[G0 + s] = gpu_counts.get(st.gpu, 0)
    integrality = np.zeros(n_var)
    integrality[G0:] = 1
    c_obj = np.zeros(n_var)
    c_obj[0] = -1.0
    if cost:
        ub[0] = 0.0  # (no max-min term)
        c_obj[0] = 0.0
        for s, (p, i) in enumerate(stage_idx):
            c_obj[G0 + s] = float((prices or {}).get(cands[p].stages[i].gpu, 1.0))
    if energy is not None:
        if not cost:
            raise ValueError("the energy objective needs demand_rps")
        idle_w, per_req_j = energy
        for s, (p, i) in enumerate(stage_idx):
            c_obj[G0 + s] = float(idle_w.get(cands[p].stages[i].gpu, 0.0))
        for p in range(n_p):
            c_obj[X0 + p] = float(per_req_j[p])
    if n_p == 0:
        return MilpResult("infeasible", 0.0, 0.0, time.perf_counter() - t0, (), 0, 0)
    a, lo, hi = rows.matrix(n_var)
    start = None
    if start_gpus:
        start = _start(cands, stage_idx, start_gpus, X0, G0, n_var, models, w, cost)
        v = a @ start
        if (v < lo - 1e-6).any() or (v > hi + 1e-6).any() or (start > ub + 1e-9).any():
            start = None  # (not a plan of this problem: the caps, or the demand, moved)
    status, gap, x = solve_highs(
        a, lo, hi, np.zeros(n_var), ub, c_obj, integrality, time_limit_s, mip_rel_gap, start
    )
    seconds = time.perf_counter() - t0
    if x is None:  # no feasible solution found
        return MilpResult(status, 0.0, math.inf, seconds, (), n_p, n_s)
    allocs = []
    for p, c in enumerate(cands):
        ss = [s for s, (pp, _) in enumerate(stage_idx) if pp == p]
        gs = [round(x[G0 + s]) for s in ss]
        if x[X0 + p] <= 1e-9 or min(gs) <= 0:
            continue
        # every slice of the stage's GPUs serves it (slices of a GPU stay in one pool)
        inst = tuple(st.share * g for st, g in zip(c.stages, gs, strict=True))
        gpus = tuple(gs)
        allocs.append(Allocation(c, inst, gpus, allocation_throughput(c, inst, gpus, net)))
    per_model = {m: sum(a.throughput_rps for a in allocs if a.candidate.model == m) for m in models}
    objective = min(per_model[m] / w[m] for m in models)
    if energy is not None:  # the power drawn at the demanded rates (watts)
        objective = float(c_obj @ x)
    elif cost:  # the price per hour of the GPUs taken
        objective = sum(
            float((prices or {}).get(st.gpu, 1.0)) * g
            for a in allocs for st, g in zip(a.candidate.stages, a.gpus, strict=True)
        )  # fmt: skip
    return MilpResult(
        status,
        objective,
        gap,
        seconds,
        tuple(allocs),
        n_p,
        n_s,
    )
