"""Independent re-validation of a plan against the latency model and the cluster.

Recomputes, without the planner's code paths: every stage's latency from the latency
model; every cut's transfer (``out_bytes x batch`` over the slower node NIC); the
pipeline's latency against ``(1 - margin) x SLO``; every pipeline's throughput (slices x
batch / latency per stage, and NIC limits) against the planned one; physical GPUs per type
(slices / share, rounded up per pool) against the cluster.
"""

from __future__ import annotations

import math
from collections import Counter

from hetserve.core.cluster import Cluster
from hetserve.core.latency import LatencyModel
from hetserve.core.plan import Plan


def validate_plan(
    plan: Plan,
    cluster: Cluster,
    latency: LatencyModel,
    slo_margin: float,
    cut_bytes_factor: float = 0.5,
    rel_tol: float = 1e-6,
) -> list[str]:
    """Problems found (empty: the plan is valid)."""
    problems: list[str] = []
    node_gbps: dict[str, float] = {}
    per_gpu: dict[str, float] = {}
    for n in cluster.nodes:
        nic = min(n.uplink_gbps, n.downlink_gbps)
        for g in n.gpus:
            node_gbps[g.type.name] = min(node_gbps.get(g.type.name, math.inf), nic)
            per_gpu[g.type.name] = min(per_gpu.get(g.type.name, math.inf), nic / len(n.gpus))
    used: Counter[str] = Counter()
    for name, m in plan.models.items():
        nb = latency.num_blocks(name)
        for pi, p in enumerate(m.pipelines):
            where = f"{name} pipeline {pi}"
            if p.stages[0].blocks[0] != 0 or p.stages[-1].blocks[1] != nb:
                problems.append(f"{where}: stages do not cover blocks 0..{nb}")
            total, cap = 0.0, math.inf
            for si, st in enumerate(p.stages):
                gpu = cluster.catalog.get(st.gpu).name
                lat = latency.latency(name, gpu, st.share, p.batch, range(*st.blocks))
                if not math.isclose(lat, st.latency_s, rel_tol=rel_tol):
                    problems.append(
                        f"{where} stage {si}: latency {st.latency_s} != recomputed {lat}"
                    )
                total += lat
                cap = min(cap, st.instances * p.batch / lat)
                gpus = math.ceil(st.instances / st.share)
                used[gpu] += gpus
                bw_bps = gpus * per_gpu[gpu] * 1e9
                if si + 1 < len(p.stages):
                    nxt = cluster.catalog.get(p.stages[si + 1].gpu).name
                    nbytes = latency.out_bytes(name, st.blocks[1] - 1) * cut_bytes_factor
                    total += nbytes * p.batch * 8 / (min(node_gbps[gpu], node_gbps[nxt]) * 1e9)
                    if nbytes > 0:
                        cap = min(cap, bw_bps / (nbytes * 8))
                if si > 0:
                    nbytes = latency.out_bytes(name, st.blocks[0] - 1) * cut_bytes_factor
                    if nbytes > 0:
                        cap = min(cap, bw_bps / (nbytes * 8))
            budget = (1 - slo_margin) * m.slo_s
            if total > budget * (1 + rel_tol):
                problems.append(
                    f"{where}: latency {total * 1e3:.3f} ms > (1 - margin) x SLO "
                    f"= {budget * 1e3:.3f} ms"
                )
            if not math.isclose(cap, p.throughput_rps, rel_tol=rel_tol):
                problems.append(
                    f"{where}: planned {p.throughput_rps:.3f} req/s != recomputed {cap:.3f}"
                )
    counts = cluster.gpu_counts()
    for gpu, n in used.items():
        if n > counts.get(gpu, 0):
            problems.append(f"uses {n} {gpu} GPUs, cluster {cluster.name} has {counts.get(gpu, 0)}")
    return problems
