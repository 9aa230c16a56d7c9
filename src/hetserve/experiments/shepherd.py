"""Shepherd's evaluation setups (Shepherd section 7): serving groups of V100s with the
Table 4 linear latency model, and the two-stream scenario of the ablation (section 7.2,
Fig. 11a)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from hetserve.core.cluster import parse_cluster
from hetserve.core.latency import shepherd_linear_model
from hetserve.core.plan import ModelPlan, Pipeline, Plan, Stage, bind
from hetserve.core.requests import Stream
from hetserve.experiments.setup import Setup
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
