"""Shepherd's evaluation setups (Shepherd section 7): serving groups of V100s with the
Table 4 linear latency model, and the two-stream scenario of the ablation (section 7.2,
Fig. 11a)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from hetserve.core.cluster import parse_cluster
from hetserve.core.latency import shepherd_linear_model
from hetserve.core.plan import ModelPlan, Pipeline, Plan, Stage, bind
from hetserve.core.requests import Stream
from hetserve.engine.setup import Setup
from hetserve.workload.trace import Trace

V100 = "V100-16GB"


def group_setup(
    n_gpus: int, slos_s: Mapping[str, float], exit_points: bool = True, nic_gbps: float = 10.0
) -> Setup:
    """One serving group: ``n_gpus`` single-V100 nodes (p3.2xlarge), every GPU serving every
    model whole, latencies from Shepherd Table 4 (models by zoo name or Table 4
    abbreviation, e.g. ``resnet18``, ``rs269``)."""
    lat = shepherd_linear_model(exit_points)
    nodes = [{"name": f"p3-{i}", "gpus": {V100: 1}, "nic_gbps": nic_gbps} for i in range(n_gpus)]
    cluster = parse_cluster({"name": f"group-{n_gpus}xv100", "nodes": nodes}, "group")
    models = {}
    for m, slo in slos_s.items():
        nb = lat.num_blocks(m)
        t1 = lat.latency(m, V100, 1, 1)
        stage = Stage((0, nb), V100, 1, n_gpus, t1)
        models[m] = ModelPlan(slo, 1.0, (Pipeline((stage,), 1, t1, n_gpus / t1),))
    plan = Plan(models, shared_pools=True, meta={"planner": "shepherd-group"})
    return Setup(cluster, lat, list(slos_s), dict(slos_s), plan, bind(plan, cluster))


def two_stream_scenario(
    slo_s: float,
    duration_s: float = 1.2,
    burst: int = 1024,
    period_s: float = 0.120,
    first_burst_s: float = 0.005,
    b_interval_s: float = 0.001,
) -> tuple[Setup, Trace]:
    """Shepherd section 7.2: one V100; stream A sends ResNet-18 requests in bursts of
    ``burst`` at 5 ms, 125 ms, 245 ms, ...; stream B sends one ResNeSt-269 request every
    millisecond (79 ms at batch 1). Both with the same SLO."""
    setup = group_setup(1, {"resnet18": slo_s, "rs269": slo_s})
    a = np.repeat(np.arange(first_burst_s, duration_s, period_s), burst)
    b = np.arange(0.0, duration_s, b_interval_s)
    times = np.concatenate([a, b])
    idx = np.concatenate([np.zeros(len(a), np.int32), np.ones(len(b), np.int32)])
    order = np.argsort(times, kind="stable")
    streams = (Stream("A", "resnet18", slo_s), Stream("B", "rs269", slo_s))
    return setup, Trace(times[order], idx[order], streams, duration_s)


def goodput_rps(ok: np.ndarray, duration_s: float) -> float:
    return float(np.count_nonzero(ok)) / duration_s


__all__: Sequence[str] = ("goodput_rps", "group_setup", "two_stream_scenario")


# ---------------------------------------------------------------- FLEX vs the offline optimum
COMPETITIVE_RATIO = 12.62  # Shepherd Theorem 5.2 with lambda = 3.03 (K = 1: one alpha/beta)


def flex_vs_offline(
    n_instances: int = 30,
    seed: int = 0,
    scheduler: str = "flex",
    max_requests: int = 8,
) -> list[dict[str, float]]:
    """Random tiny instances (1-2 GPUs, 1-2 models with one ``alpha * b + beta`` in whole
    ms, 3 to ``max_requests`` requests at whole-ms arrivals with SLOs of 8-30 ms): the
    scheduler's goodput in the simulator next to the exact offline optimum (Shepherd Eq. 3,
    :func:`hetserve.planning.zilp.offline_optimum`)."""
    from hetserve.core.latency import LinearModel, LinearParams
    from hetserve.core.outcome import OK
    from hetserve.core.plan import default_plan
    from hetserve.experiments.setup import simulate
    from hetserve.planning.zilp import OfflineRequest, offline_optimum

    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x2119]))
    out = []
    for _ in range(n_instances):
        n_gpus = int(rng.integers(1, 3))
        models = ["a", "b"][: int(rng.integers(1, 3))]
        alpha_ms, beta_ms = int(rng.integers(1, 3)), int(rng.integers(2, 7))
        n = int(rng.integers(3, max_requests + 1))
        arrivals = np.sort(rng.integers(0, 30, n))
        slos = rng.integers(8, 31, n)
        which = rng.integers(0, len(models), n)
        reqs = [
            OfflineRequest(i, models[which[i]], int(arrivals[i]), int(arrivals[i] + slos[i]))
            for i in range(n)
        ]
        opt = offline_optimum(reqs, lambda m, b, a=alpha_ms, c=beta_ms: a * b + c, n_gpus)
        lat = LinearModel(
            {(m, V100): LinearParams(alpha_ms / 1e3, beta_ms / 1e3) for m in models},
            blocks=dict.fromkeys(models, 4),
        )
        nodes = [{"name": "n", "gpus": {V100: n_gpus}, "nic_gbps": 10}]
        cluster = parse_cluster({"name": "tiny", "nodes": nodes}, "tiny")
        plan = default_plan(cluster, lat, dict.fromkeys(models, 1.0), slo_margin=0.0)
        setup = Setup(cluster, lat, models, dict.fromkeys(models, 1.0), plan, bind(plan, cluster))
        kinds = sorted({(r.model, r.deadline_ms - r.arrival_ms) for r in reqs})
        streams = tuple(Stream(f"{m}-{s}", m, s / 1e3) for m, s in kinds)
        idx = np.array([kinds.index((r.model, r.deadline_ms - r.arrival_ms)) for r in reqs])
        trace = Trace(arrivals / 1e3, idx.astype(np.int32), streams, float(arrivals[-1]) / 1e3)
        res = simulate(setup, scheduler, trace)
        served = int(np.count_nonzero(res.outcome == OK))
        out.append(
            {
                "gpus": n_gpus,
                "models": len(models),
                "requests": n,
                "optimum": opt.served,
                "served": served,
                "ratio": opt.served / served if served else math.inf,
            }
        )
    return out
