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
from typing import Any

from hetserve.core.cluster import Cluster
from hetserve.core.errors import HetserveError
from hetserve.core.latency import LatencyModel
from hetserve.core.plan import ModelPlan, Pipeline, Plan, Stage
from hetserve.planning.candidates import (
    Candidate,
    enumerate_candidates,
    net_info,
    prune_dominated,
)
from hetserve.planning.milp import solve

PLANNERS = ("ppipe", "np", "dart-r")
OBJECTIVES = ("throughput", "cost", "energy")


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
    # throughput: the max-min normalised throughput on every usable GPU (PPipe); cost: the
    # cheapest GPUs that serve ``rates_rps`` x (1 + headroom) (issue 40); energy: the least
    # power that serves them (MagicBatch's objective)
    objective: str = "throughput"
    rates_rps: tuple[tuple[str, float], ...] = ()  # cost, energy: per model, the rate
    headroom: float = 0.25  # cost, energy: plan for this much more than the rates
    # a plan to start from (a re-plan's current plan: the MILP's warm start); None: cold
    start: Plan | None = None

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
        if self.objective not in OBJECTIVES:
            raise HetserveError(
                f"--objective: expected one of {', '.join(OBJECTIVES)}, got {self.objective!r}"
            )
        if self.objective != "throughput" and not self.rates_rps:
            raise HetserveError(
                f"--objective {self.objective}: give the rates to serve (--rate REQ_PER_S)"
            )
        if not 0 <= self.headroom < 10:
            raise HetserveError(f"--headroom must be in [0, 10), got {self.headroom}")


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
    counts = cluster.usable()  # (each type's cap, where the cluster file sets one)
    counts = {t: n for t, n in counts.items() if n > 0}
    if not counts:
        raise HetserveError(
            f"plan: every GPU type of {cluster.name} is capped at 0 (its pricing caps): no GPU "
            f"to plan on"
        )
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
            prune=opt.objective != "energy",
        )
        if opt.objective == "energy":  # (a candidate spending less per request stays)
            _, joules = energy_terms(cluster, latency, cs)
            j_of = {id(c): j for c, j in zip(cs, joules, strict=True)}
            cs = prune_dominated(cs, list(counts), lambda c, j_of=j_of: j_of[id(c)])
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

    extra = pairs if opt.planner == "dart-r" else None
    demand = None
    if opt.objective in ("cost", "energy"):
        rates = dict(opt.rates_rps)
        bad = sorted(set(rates) - set(models))
        if bad:
            raise HetserveError(
                f"--objective {opt.objective}: rates for {', '.join(bad)}, not among --models"
            )
        demand = {m: rates.get(m, 0.0) * (1 + opt.headroom) for m in models}
        power = energy_terms(cluster, latency, cands) if opt.objective == "energy" else None
        res = solve(cands, counts, w, net, time_limit_s=opt.time_limit_s,
                    mip_rel_gap=min(opt.mip_rel_gap, 1e-6), extra_rows=extra,
                    demand_rps=demand, prices=_prices(cluster, counts),
                    energy=power, start_gpus=start_gpus(cands, opt.start))  # fmt: skip
        if not res.allocations:
            raise _unaffordable(cluster, cands, counts, net, demand, opt, extra, res.status)
    else:
        res = solve(cands, counts, w, net, time_limit_s=opt.time_limit_s,
                    mip_rel_gap=opt.mip_rel_gap, extra_rows=extra,
                    start_gpus=start_gpus(cands, opt.start))  # fmt: skip
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
        weight = w[m] if demand is None else max(demand[m], 1e-9)
        mplans[m] = ModelPlan(slos_s[m], weight, tuple(pipes))
    objective: dict[str, Any] = {"normalized_rps": res.objective}
    if demand is not None and opt.objective == "energy":
        total = sum(demand.values())
        objective = {"watts": res.objective, "demand_rps": demand, "headroom": opt.headroom,
                     "joules_per_request": res.objective / total if total > 0 else 0.0}  # fmt: skip
    elif demand is not None:
        objective = {"cost_per_hour": res.objective, "demand_rps": demand,
                     "cost_unit": "USD" if cluster.priced else "GPU-hours"}  # fmt: skip
        objective["headroom"] = opt.headroom
    plan = Plan(
        mplans,
        shared_pools=False,
        meta={
            "planner": opt.planner,
            "objective": objective,
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


def start_gpus(cands: Sequence[Candidate], plan: Plan | None) -> dict[int, tuple[int, ...]]:
    """A warm start from ``plan``: per candidate that is one of its pipelines (same model,
    batch, and per stage blocks, GPU type and share), the GPUs of each stage. Pipelines
    of the plan no candidate matches are left out (the start then holds fewer GPUs)."""
    if plan is None:
        return {}
    key_of = {
        (c.model, c.batch, tuple((st.blocks, st.gpu, st.share) for st in c.stages)): k
        for k, c in enumerate(cands)
    }
    out: dict[int, tuple[int, ...]] = {}
    for m, mp in plan.models.items():
        for pipe in mp.pipelines:
            key = (m, pipe.batch, tuple((tuple(st.blocks), st.gpu, st.share) for st in pipe.stages))
            k = key_of.get(key)
            if k is not None and k not in out:
                out[k] = tuple(max(1, st.instances // st.share) for st in pipe.stages)
    return out


def energy_terms(
    cluster: Cluster, latency: LatencyModel, cands: Sequence[Candidate]
) -> tuple[dict[str, float], list[float]]:
    """The energy objective's terms (``milp``): per GPU type its idle power (the
    catalog's ``idle_w``), and per candidate the joules a request costs above idle: per
    stage, the latency model's energy of a batch on its blocks, less the idle power of a
    slice (``idle_w / share``) for the batch's time, over the batch (never below 0)."""
    idle = {g.name: float(g.idle_w) for g in cluster.gpu_types()}
    per_req = []
    for c in cands:
        j = 0.0
        for st in c.stages:
            try:
                e = latency.energy(c.model, st.gpu, st.share, c.batch, range(*st.blocks))
            except Exception as err:  # (a profile set without power figures)
                raise HetserveError(
                    f"--objective energy: the latency source has no energy for {c.model} on "
                    f"{st.gpu} ({type(err).__name__}: {err}); profile with power, or plan "
                    f"--objective cost"
                ) from None
            j += max(0.0, e - idle.get(st.gpu, 0.0) / st.share * st.latency_s) / c.batch
        per_req.append(j)
    return idle, per_req


def _prices(cluster: Cluster, counts: Mapping[str, int]) -> dict[str, float]:
    """Per GPU type its price per hour, plus a tie-break of 1e-4 of the cheapest price per
    place down the cluster's order of preference (types it does not name come last)."""
    base = {t: cluster.price_per_hour(t) for t in counts}
    eps = 1e-4 * min(base.values(), default=1.0)
    order = list(cluster.preference)
    rank = {t: (order.index(t) if t in order else len(order)) for t in counts}
    return {t: base[t] + eps * rank[t] for t in counts}


def _unaffordable(
    cluster: Cluster, cands: Sequence[Candidate], counts: Mapping[str, int], net: Any,
    demand: Mapping[str, float], opt: PlanOptions, extra: Any, status: str,
) -> HetserveError:  # fmt: skip
    """The error for rates no plan within the caps serves: how much of them the usable
    GPUs serve at most (the throughput objective's plan for the same mix)."""
    head = f"--objective {opt.objective}: {cluster.name} cannot serve the rates"
    if status not in ("infeasible", "optimal"):
        return HetserveError(f"{head} ({status}); raise --time-limit")
    mix = {m: max(d, 1e-9) for m, d in demand.items()}
    best = solve(cands, counts, mix, net, time_limit_s=opt.time_limit_s,
                 mip_rel_gap=opt.mip_rel_gap, extra_rows=extra)  # fmt: skip
    total = sum(demand.values())
    frac = best.objective / total if total > 0 else 0.0
    caps = ", ".join(f"{n} {t}" for t, n in counts.items())
    return HetserveError(
        f"{head} x {1 + opt.headroom:g} (headroom) with {caps}: the most any plan serves "
        f"is {frac:.0%} of them; lower --headroom or the rates, or raise the caps"
    )


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
