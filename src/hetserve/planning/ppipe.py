"""PPipe's control plane and its baselines as restrictions of one formulation.

- ``ppipe``: pooled pipelines of up to ``max_stages`` stages, shares 1..4 (where the GPU
  supports MPS and the latency source has them), batch sizes 1..8 unified per pipeline.
- ``np``: no partitioning — whole models, one GPU type per pipeline, share 1.
- ``dart-r``: DART replicated (PPipe section 7.1): units of one high-class and one
  low-class GPU as a two-stage pipeline (share 1, equal GPU counts in both stages), plus
  whole-model pipelines on leftover GPUs. Which pairs and how many is left to the solver,
  which is generous to the baseline.

:func:`plan_models` returns a core :class:`~hetserve.core.plan.Plan` whose ``meta`` holds the
planner name, the objective and the solve statistics.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hetserve.core.cluster import Cluster
from hetserve.core.errors import HetserveError
from hetserve.core.latency import LatencyModel
from hetserve.core.plan import ModelPlan, Pipeline, Plan, Stage
from hetserve.planning.candidates import Candidate, enumerate_candidates, net_info
from hetserve.planning.milp import solve

PLANNERS = ("ppipe", "np", "dart-r")


@dataclass(frozen=True)
class PlanOptions:
    planner: str = "ppipe"
    slo_margin: float = 0.4
    max_stages: int = 2
    shares: tuple[int, ...] = (1, 2, 3, 4)
    batches: tuple[int, ...] = tuple(range(1, 9))
    time_limit_s: float = 60.0
    mip_rel_gap: float = 1e-4
    cut_bytes_factor: float = 0.5  # activations at cuts travel as FP16 (PPipe section 6)

    def __post_init__(self) -> None:
        if self.planner not in PLANNERS:
            from hetserve.core.errors import unknown

            raise unknown("planner", self.planner, PLANNERS)
        if not 0 <= self.slo_margin < 1:
            raise HetserveError(f"--slo-margin must be in [0, 1), got {self.slo_margin}")
        if not 1 <= self.max_stages <= 4:
            raise HetserveError(f"--max-stages must be 1..4, got {self.max_stages}")
        if self.time_limit_s <= 0:
            raise HetserveError(f"--time-limit must be > 0, got {self.time_limit_s}")


def gpu_class_order(cluster: Cluster) -> list[str]:
    """GPU types of the cluster, high class (highest inference TFLOPS) first."""
    return [g.name for g in sorted(cluster.gpu_types(), key=lambda g: -g.inference_tflops)]


def plan_models(
    cluster: Cluster,
    latency: LatencyModel,
    slos_s: Mapping[str, float],
    weights: Mapping[str, float] | None = None,
    options: PlanOptions | None = None,
) -> Plan:
    opt = options or PlanOptions()
    models = list(slos_s)
    if not models:
        raise HetserveError("plan: give at least one model")
    w = {m: float((weights or {}).get(m, 1.0)) for m in models}
    if any(v <= 0 for v in w.values()):
        raise HetserveError(f"--weights must be > 0, got {w}")
    counts = cluster.gpu_counts()
    net = net_info(cluster)
    mps = {g.name: g.mps for g in cluster.gpu_types()}
    max_stages, shares = opt.max_stages, opt.shares
    if opt.planner == "np":
        max_stages, shares = 1, (1,)
    elif opt.planner == "dart-r":
        if len(counts) != 2:
            raise HetserveError(
                f"dart-r pairs a high-class with a low-class GPU; cluster "
                f"{cluster.name} has {len(counts)} GPU types"
            )
        max_stages, shares = 2, (1,)
    cands: list[Candidate] = []
    for m in models:
        budget = (1 - opt.slo_margin) * slos_s[m]
        cs, best = enumerate_candidates(
            m,
            latency,
            counts,
            net,
            budget,
            max_stages=max_stages,
            shares=shares,
            batches=opt.batches,
            mps=mps,
            cut_bytes_factor=opt.cut_bytes_factor,
        )
        if opt.planner == "dart-r":
            cs = [c for c in cs if len(c.stages) == 1 or len({st.gpu for st in c.stages}) == 2]
        if not cs:
            raise HetserveError(
                f"model {m}: no stage configuration meets (1 - {opt.slo_margin:g}) x SLO = "
                f"{budget * 1e3:.2f} ms on cluster {cluster.name} with planner "
                f"{opt.planner}; the smallest latency achievable is "
                f"{best * 1e3:.2f} ms"
                + (" (raise the SLO or lower --slo-margin)" if math.isfinite(best) else "")
            )
        cands.extend(cs)

    def pairs(cs: Sequence[Candidate], x0: int, n0: int, g0: int) -> list:
        rows, s = [], 0
        for c in cs:
            if len(c.stages) == 2:  # a DART unit: as many GPUs in both stages
                rows.append(([(g0 + s, 1.0), (g0 + s + 1, -1.0)], 0.0, 0.0))
            s += len(c.stages)
        return rows

    res = solve(
        cands,
        counts,
        w,
        net,
        time_limit_s=opt.time_limit_s,
        mip_rel_gap=opt.mip_rel_gap,
        extra_rows=pairs if opt.planner == "dart-r" else None,
    )
    if not res.allocations or res.objective <= 0:
        raise _unserved(models, cands, counts, cluster.name, res.status)
    mplans = {}
    for m in models:
        pipes = []
        for a in res.allocations:
            if a.candidate.model != m:
                continue
            c = a.candidate
            stages = tuple(
                Stage(st.blocks, st.gpu, st.share, n, st.latency_s, st.transfer_s)
                for st, n in zip(c.stages, a.instances, strict=True)
            )
            pipes.append(Pipeline(stages, c.batch, c.latency_s, a.throughput_rps))
        pipes.sort(key=lambda p: (-p.throughput_rps, p.stages[0].blocks))
        mplans[m] = ModelPlan(slos_s[m], w[m], tuple(pipes))
    plan = Plan(
        mplans,
        shared_pools=False,
        meta={
            "planner": opt.planner,
            "objective": {"normalized_rps": res.objective},
            "solve": {
                "seconds": res.seconds,
                "status": res.status,
                "gap": res.gap,
                "candidates": res.n_candidates,
                "integer_vars": res.n_integer_vars,
            },
            "options": {
                "slo_margin": opt.slo_margin,
                "max_stages": max_stages,
                "shares": list(shares),
                "batches": list(opt.batches),
                "cut_bytes_factor": opt.cut_bytes_factor,
            },
        },
    )
    return plan


def _unserved(
    models: Sequence[str],
    cands: Sequence[Candidate],
    counts: Mapping[str, int],
    cluster: str,
    status: str,
) -> HetserveError:
    """The error for a solve whose best plan leaves a model without throughput (the
    max-min objective is 0). Which model the solver leaves out is its choice among equal
    optima, so the message names only what holds whatever it chose: the models no pipeline
    fits on their own, or that the models fit one by one but not together."""
    if status != "optimal":
        return HetserveError(
            f"plan: the solver found no plan serving every one of {', '.join(models)} on "
            f"{cluster} ({status}); raise --time-limit or plan fewer models"
        )

    def fits_alone(c: Candidate) -> bool:
        need: dict[str, int] = {}
        for st in c.stages:  # every stage takes at least one GPU of its type
            need[st.gpu] = need.get(st.gpu, 0) + 1
        return all(counts.get(t, 0) >= n for t, n in need.items())

    alone = [m for m in models if not any(fits_alone(c) for c in cands if c.model == m)]
    n = sum(counts.values())
    devices = f"{n} device{'s' if n != 1 else ''}"
    if alone:
        return HetserveError(
            f"plan: no pipeline of {', '.join(alone)} fits on {cluster} "
            f"({devices}: each stage needs devices of its own); use a larger "
            f"cluster or a looser SLO"
        )
    return HetserveError(
        f"plan: {cluster} cannot serve {', '.join(models)} at once: each fits alone, but "
        f"every plan leaves one of them without throughput ({devices}); "
        f"plan fewer models or use a larger cluster"
    )
